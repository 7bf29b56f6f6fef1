"""How ``triton_call`` fills a kernel's parameters: grids, scalars and their
specialisation, keyword operands, aliases, zeroed outputs, heuristics and
autotuners, tensor descriptors."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

triton = pytest.importorskip("triton")
pytest.importorskip("triton.language", reason="no triton: pip install -e '.[triton]'")

import jaxptx.jax  # noqa: E402
import jaxptx.triton as jt  # noqa: E402
from jaxptx.triton import _specialize  # noqa: E402
from triton_kernels import (  # noqa: E402
    add_kernel, axpb_kernel, device_desc_copy_kernel, flag_kernel, grid2d_kernel, histogram_kernel, scale_inplace_kernel,
    tma_copy_kernel)

RNG = np.random.default_rng(1)
X = RNG.standard_normal(300).astype(np.float32)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def i32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.int32)


def entry_params(f, *args):
    """The .param lines of the one kernel a jitted function calls."""
    spec, = jaxptx.jax.kernels_in(jax.jit(f).lower(*args)).values()
    return re.findall(r"\.param [^,\n)]*", spec.ptx)


# ---- grids

@pytest.mark.parametrize("grid", [(5, 3), [5, 3, 1], lambda meta: (meta["W"], 3)])
def test_grid_as_a_tuple_or_a_function_of_the_metaparams(grid):
    out = jt.triton_call(kernel=grid2d_kernel, out_type=i32(3, 5), grid=grid, W=5, num_warps=1)
    np.testing.assert_array_equal(out, 1000 * np.arange(3)[:, None] + np.arange(5))


def test_grid_as_an_int():
    out = jt.triton_call(kernel=grid2d_kernel, out_type=i32(1, 4), grid=4, W=4, num_warps=1)
    np.testing.assert_array_equal(out, [[0, 1, 2, 3]])


# ---- scalars

def test_float_and_int_scalars_by_keyword():
    f = jax.jit(lambda x: jt.triton_call(x, a=2.5, b=-1.0, n=300, kernel=axpb_kernel,
                                         out_type=f32(300), grid=3, BLOCK=128))
    np.testing.assert_allclose(f(X), 2.5 * X - 1, rtol=1e-6, atol=1e-6)   # an FMA


def test_an_int_equal_to_1_is_compiled_in():
    def call(a):
        return lambda x: jt.triton_call(x, a=a, b=0.0, n=300, kernel=axpb_kernel,
                                        out_type=f32(300), grid=3, BLOCK=128)
    np.testing.assert_allclose(jax.jit(call(1))(X), X)
    np.testing.assert_allclose(jax.jit(call(3))(X), 3 * X)
    # a = 1 is a constexpr: the entry has no parameter for it
    assert len(entry_params(call(1), X)) == len(entry_params(call(3), X)) - 1


def test_negative_and_numpy_scalars():
    f = jax.jit(lambda x: jt.triton_call(x, a=np.float32(-2.0), b=np.int32(-7), n=300,
                                         kernel=axpb_kernel, out_type=f32(300), grid=3, BLOCK=128))
    np.testing.assert_allclose(f(X), -2 * X - 7, rtol=1e-6, atol=1e-6)
    g = jax.jit(lambda x: jt.triton_call(x, a=-3, b=0.5, n=300, kernel=axpb_kernel,
                                         out_type=f32(300), grid=3, BLOCK=128))
    np.testing.assert_allclose(g(X), -3 * X + 0.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("negate", [True, False])
def test_a_bool_scalar(negate):
    out = jt.triton_call(X, negate=negate, n=300, kernel=flag_kernel, out_type=f32(300), grid=3,
                         BLOCK=128)
    np.testing.assert_array_equal(out, -X if negate else X)


def test_multiples_of_16_carry_the_divisibility_hint():
    spec = _specialize.specialize(axpb_kernel.params, {"a": 2.0, "b": 32, "n": 300, "BLOCK": 128},
                                  {"x_ptr": "*fp32", "out_ptr": "*fp32"}, "t")
    assert dict(spec.signature) == {"x_ptr": "*fp32", "out_ptr": "*fp32", "a": "fp32", "b": "i32",
                                    "n": "i32", "BLOCK": "constexpr"}
    assert spec.divisible == (0, 1, 3)            # the pointers and b = 32, not n = 300
    assert spec.attrs() == {(i,): [["tt.divisibility", 16]] for i in (0, 1, 3)}


@pytest.mark.parametrize("value", [0, 1, 2, 16, 17, -16, -1, 2**31 - 1, 2**31, 2**31 + 16,
                                   -2**31, -2**31 - 1, 2**63, 2**64 - 16, 1.0, 2.5, 1e300, True,
                                   False, None])
@pytest.mark.parametrize("specialize, align", [(True, True), (False, True), (True, False)])
def test_scalar_rules_match_tritons_own(value, specialize, align):
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend
    ours = _specialize.scalar_key(value, "t", specialize=specialize, align=align)
    theirs = native(BaseBackend, value, False, specialize, align)
    assert ours == tuple(theirs), (value, ours, theirs)


# ---- outputs, aliases and zeros

def test_keyword_operands_and_a_pytree_of_outputs():
    out = jt.triton_call(X, kernel=add_kernel, n=300, y_ptr=X, grid=3, BLOCK=128,
                         out_type={"sum": f32(300)})
    np.testing.assert_array_equal(out["sum"], 2 * X)


def test_out_shape_is_the_older_name_of_out_type():
    out = jt.triton_call(X, X, kernel=add_kernel, n=300, grid=3, BLOCK=128, out_shape=f32(300))
    np.testing.assert_array_equal(out, 2 * X)


def test_input_output_aliases_update_in_place():
    f = jax.jit(lambda x: jt.triton_call(x, 3.0, 300, kernel=scale_inplace_kernel,
                                         out_type=f32(300), grid=3, BLOCK=128,
                                         input_output_aliases={0: 0}))
    np.testing.assert_allclose(f(X), 3 * X, rtol=1e-6)
    assert "output_operand_aliases" in f.lower(X).as_text()


@pytest.mark.parametrize("zeroed", [(0,), lambda meta: [0] if meta["NBINS"] == 16 else []])
def test_zeroed_outputs_under_atomics(zeroed):
    x = RNG.integers(0, 1000, 500).astype(np.int32)
    bins = jax.jit(lambda x: jt.triton_call(x, n=500, kernel=histogram_kernel, out_type=i32(16),
                                            grid=4, BLOCK=128, NBINS=16,
                                            zeroed_outputs=zeroed))(x)
    np.testing.assert_array_equal(bins, np.bincount(x & 15, minlength=16))


def test_an_aliased_output_can_be_zeroed_too():
    x = RNG.integers(0, 1000, 256).astype(np.int32)
    start = np.full(16, 5, np.int32)
    bins = jt.triton_call(x, start, n=256, kernel=histogram_kernel, out_type=i32(16), grid=2,
                          BLOCK=128, NBINS=16, input_output_aliases={1: 0}, zeroed_outputs=(0,))
    np.testing.assert_array_equal(bins, np.bincount(x & 15, minlength=16))
    kept = jt.triton_call(x, start, n=256, kernel=histogram_kernel, out_type=i32(16), grid=2,
                          BLOCK=128, NBINS=16, input_output_aliases={1: 0})
    np.testing.assert_array_equal(kept, 5 + np.bincount(x & 15, minlength=16))


# ---- heuristics, autotuners

def test_heuristics_fill_metaparams():
    kernel = triton.heuristics({"BLOCK": lambda args: 64 if args["n"] < 200 else 128})(add_kernel)
    out = jt.triton_call(X[:100], X[:100], n=100, kernel=kernel, out_type=f32(100),
                         grid=lambda meta: (100 + meta["BLOCK"] - 1) // meta["BLOCK"])
    np.testing.assert_array_equal(out, 2 * X[:100])


def test_an_autotuner_compiles_the_first_config_that_fits():
    configs = [triton.Config({"BLOCK": 64}, num_warps=2),
               triton.Config({"BLOCK": 128}, num_warps=4)]
    kernel = triton.autotune(configs, key=["n"])(add_kernel)

    def call(**meta):
        return jt.triton_call(X, X, n=300, kernel=kernel, out_type=f32(300),
                              grid=lambda m: ((300 + m["BLOCK"] - 1) // m["BLOCK"],), **meta)

    with pytest.warns(UserWarning, match=r"2 autotuner configs fit; jaxptx\.triton cannot time "
                                         r"them and uses the first \(BLOCK: 64"):
        np.testing.assert_array_equal(call(), 2 * X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(call(BLOCK=128), 2 * X)    # one config fits: no warning


# ---- tensor descriptors

def test_strides_from_shape():
    assert jt.strides_from_shape((4, 8, 16)) == (128, 16, 1)
    assert jt.strides_from_shape((7,)) == (1,)


@pytest.mark.parametrize("capability, tma", [(90, True), (80, False)])
def test_a_tensor_descriptor_is_a_tma_map_on_sm90(capability, tma):
    t = (np.arange(64 * 32) % 251).astype(np.float16).reshape(64, 32)

    def copy(t):
        return jt.triton_call(jt.TensorDescriptor.from_array(t, (16, 32)), kernel=tma_copy_kernel,
                              out_type=jax.ShapeDtypeStruct(t.shape, t.dtype), grid=4, N=32,
                              BM=16, BN=32, compute_capability=capability)

    np.testing.assert_array_equal(jax.jit(copy)(t), t)
    params = entry_params(copy, t)
    assert any("[128]" in p for p in params) == tma
    spec, = jaxptx.jax.kernels_in(jax.jit(copy).lower(t)).values()
    assert ("cp.async.bulk.tensor" in spec.ptx) == tma


# ---- clusters

def test_num_ctas_launches_clusters():
    f = jax.jit(lambda x: jt.triton_call(x, x, n=300, kernel=add_kernel, out_type=f32(300),
                                         grid=2, BLOCK=256, num_ctas=2, compute_capability=90))
    np.testing.assert_array_equal(f(X), 2 * X)
    text = f.lower(X).as_text()
    assert re.search(r"cluster = dense<\[2, 1, 1\]>", text) and re.search(
        r"grid = dense<\[4, 1, 1\]>", text)      # Triton's launcher: grid x times num_ctas


def test_global_scratch_is_a_scratch_buffer_per_program():
    t = (np.arange(64 * 32) % 251).astype(np.float16).reshape(64, 32)
    f = jax.jit(lambda t: jt.triton_call(t, kernel=device_desc_copy_kernel, grid=4, M=64, N=32,
                                         BM=16, out_type=jax.ShapeDtypeStruct(t.shape, t.dtype),
                                         compute_capability=90))
    np.testing.assert_array_equal(f(t), t)
    text = f.lower(t).as_text()
    assert "tensor<512xui8>" in text           # 128 bytes (one tensor map) for each of 4 programs

"""Bad input to ``triton_call`` is an error naming the argument, what was
expected and what came."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("triton.language", reason="no triton: pip install -e '.[triton]'")

import jaxptx.triton as jt  # noqa: E402
from jaxptx.errors import SpecError  # noqa: E402
from triton_kernels import (  # noqa: E402
    add_kernel, axpb_kernel, scale_inplace_kernel, tma_copy_kernel)

X = np.zeros(128, np.float32)
F32 = jax.ShapeDtypeStruct((128,), jnp.float32)
ADD = dict(kernel=add_kernel, n=128, grid=1, BLOCK=128, out_type=F32)


def add(*args, **kw):
    return jt.triton_call(*args, **{**ADD, **kw})


@pytest.mark.parametrize("args, kw, message", [
    ((X, X), dict(grid="4"), (r"triton_call add_kernel: grid: expected an int, a tuple of 1 to 3 "
                              r"ints, or a function of the meta-parameters returning one, "
                              r"got '4'")),
    ((X, X), dict(grid=(1, 1, 1, 1)),
     r"grid: expected an int, a tuple of 1 to 3 ints.*got \(1, 1, 1, 1\)"),
    ((X, X), dict(grid=lambda meta: None),
     r"grid: expected an int.*got <function .*> returned None"),
    ((X, X), dict(grid=(2, 0)), r"grid: expected extents >= 1, got \(2, 0\)"),
    ((X, X), dict(out_type=(128,)), (r"triton_call add_kernel: out_type: expected "
                                     r"jax\.ShapeDtypeStruct leaves \(anything with \.shape and "
                                     r"\.dtype\), got int 128")),
    ((X, X), dict(out_type=None), r"out_type missing: expected a jax\.ShapeDtypeStruct"),
    ((X, X), dict(out_shape=F32), r"out_type and out_shape given; they are one argument"),
    ((X,), {}, (r"out_type has 1 output\(s\) that are not aliased to an input, but 2 kernel "
                r"parameter\(s\) have no argument \(y_ptr, out_ptr\)")),
    ((X, X, X), {}, (r"out_type has 1 output\(s\) .* but 0 kernel parameter\(s\) have no "
                     r"argument \(none\)")),
    ((X, X, X, 128, 5), {}, r"the arguments do not fit the kernel's parameters \(x_ptr, y_ptr, "
                            r"out_ptr, n, BLOCK\): .*"),
    ((X, X), dict(kernel=lambda x: x), (r"triton_call: kernel: expected a @triton\.jit function "
                                        r"\(or one under @triton\.autotune / "
                                        r"@triton\.heuristics\), got function")),
    ((X, X), dict(num_warps=3), r"num_warps: expected a power of 2, got 3"),
    ((X, X), dict(num_warps=0), r"num_warps: expected an int >= 1, got 0"),
    ((X, X), dict(num_warps=4, backend_options={"num_warps": 8}),
     r"num_warps given both as an argument and in backend_options; give each once"),
    ((X, X), dict(backend_options={"extern_libs": {}}),
     r"backend_options\['extern_libs'\]: expected a hashable value, got \{\}"),
    ((X, X), dict(compute_capability="90"), (r"compute_capability: expected an int such as 80, "
                                             r"90 or 100 \(sm_80, sm_90a, sm_100a\), got '90'")),
    ((X, X), dict(num_ctas=2, compute_capability=80),
     r"num_ctas=2 launches clusters, which need sm_90 or later; compute_capability is 80"),
    ((X, X), dict(zeroed_outputs=(1,)), r"zeroed_outputs: expected distinct output indices "
                                        r"\(0\.\.0\), got \(1,\)"),
    ((X, X), dict(zeroed_outputs=3), r"zeroed_outputs: expected output indices \(or a function "
                                     r"of the meta-parameters returning them\), got 3"),
    ((X, X), dict(input_output_aliases={0: 1}), (r"input_output_aliases \{0: 1\}: output 1, but "
                                                 r"out_type has 1 output\(s\)")),
    ((X, X), dict(input_output_aliases=[0]), (r"input_output_aliases: expected a dict \{operand "
                                              r"index: output index\}, got list")),
    ((X, "y"), {}, (r"triton_call add_kernel: param y_ptr: expected an array, a Python or numpy "
                    r"number, None or a jaxptx\.triton\.TensorDescriptor, got str 'y'")),
    ((X, (X, X)), {}, (r"param y_ptr: a tuple argument \(Triton's tuple parameters\) is not "
                       r"supported by jaxptx\.triton")),
    ((X, np.zeros(128, np.complex64)), {}, (r"param y_ptr: expected an array of a type Triton "
                                            r"knows \(bool, int8, .*\), got complex64")),
    ((X, X), dict(n=2**64), r"param n: 18446744073709551616 fits no Triton integer type"),
])
def test_bad_arguments(args, kw, message):
    with pytest.raises(SpecError, match=message):
        add(*args, **kw)


def test_a_constexpr_without_a_value():
    with pytest.raises(SpecError, match=r"triton_call add_kernel: constexpr parameter\(s\) BLOCK "
                                        r"have no value; pass BLOCK=\.\.\. to triton_call"):
        jt.triton_call(X, X, kernel=add_kernel, n=128, grid=1, out_type=F32)


def test_alias_errors():
    def scale(x, **kw):
        return jt.triton_call(x, 2.0, 128, kernel=scale_inplace_kernel, out_type=F32, grid=1,
                              BLOCK=128, **kw)
    with pytest.raises(SpecError, match=r"input_output_aliases: param s is aliased to an output, "
                                        r"so expected an array, got 2\.0"):
        scale(X, input_output_aliases={1: 0})
    with pytest.raises(SpecError, match=r"input_output_aliases \{5: 0\}: operand 5, but the call "
                                        r"has 3 operand\(s\)"):
        scale(X, input_output_aliases={5: 0})
    with pytest.raises(SpecError, match=r"input_output_aliases: param n is aliased to an output, "
                                        r"so expected an array, got 1"):
        jt.triton_call(X, 2.0, 1, kernel=scale_inplace_kernel, out_type=F32, grid=1, BLOCK=128,
                       input_output_aliases={2: 0})     # n = 1 is compiled in
    with pytest.raises(SpecError, match=r"input_output_aliases: param x_ptr is float32\[64\] but "
                                        r"its output is float32\[128\]"):
        jt.triton_call(X[:64], 2.0, 64, kernel=scale_inplace_kernel, out_type=F32, grid=1,
                       BLOCK=128, input_output_aliases={0: 0})


def test_tensor_descriptor_errors():
    t = np.zeros((64, 32), np.float16)
    with pytest.raises(SpecError, match=r"TensorDescriptor: padding: expected 'zero' or 'nan', "
                                        r"got 'one'"):
        jt.TensorDescriptor.from_array(t, (16, 32), padding="one")
    with pytest.raises(SpecError, match=r"TensorDescriptor: expected shape, strides and "
                                        r"block_shape of one length, got 2, 2 and 1"):
        jt.TensorDescriptor(t, (64, 32), (32, 1), (16,))

    def copy(desc):
        return jt.triton_call(desc, kernel=tma_copy_kernel, grid=4, N=32, BM=16, BN=32,
                              out_type=jax.ShapeDtypeStruct(t.shape, t.dtype),
                              compute_capability=90)
    with pytest.raises(SpecError, match=r"param in_desc: TensorDescriptor with padding=\"nan\" "
                                        r"is not supported by jaxptx\.triton"):
        copy(jt.TensorDescriptor.from_array(t, (16, 32), padding="nan"))
    with pytest.raises(SpecError, match=r"param in_desc: TensorDescriptor shape \(32, 32\) "
                                        r"strides \(32, 1\): a TMA descriptor here describes its "
                                        r"whole base array, expected shape \(64, 32\) and "
                                        r"strides \(32, 1\)"):
        copy(jt.TensorDescriptor(t, (32, 32), (32, 1), (16, 32)))
    with pytest.raises(SpecError, match=r"TensorDescriptor\(layout=\.\.\.\): Gluon shared-memory "
                                        r"layouts are not supported"):
        copy(jt.TensorDescriptor.from_array(t, (16, 32), layout="swizzled"))


def test_an_autotuner_whose_configs_all_disagree():
    import triton
    kernel = triton.autotune([triton.Config({"BLOCK": 64})], key=["n"])(add_kernel)
    with pytest.raises(SpecError, match=r"none of the autotuner's 1 configs agrees with the "
                                        r"meta-parameters given \{'BLOCK': 128\}"):
        add(X, X, kernel=kernel)


def test_a_kernel_that_does_not_compile_is_tritons_error():
    from triton.compiler.errors import CompilationError
    with pytest.raises(CompilationError, match=r"power of 2"):
        jt.triton_call(X, a=2.0, b=1.0, n=128, kernel=axpb_kernel, out_type=F32, grid=1, BLOCK=100)

"""``jaxptx.jax.ptx_call``: any PTX entry as a JAX primitive, all on the CPU (the emulator)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxptx
from jaxptx import sim
from jaxptx.errors import LaunchError, ParseError, SpecError
from jaxptx.jax import Output, Scratch, TensorMap, ptx_call

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"

# out = alpha * x + y for i < n; the scalars sit between the input pointers
# and the output pointer, which follows the arguments (no Output marker).
AXPY = HEAD + """
.visible .entry axpy(
	.param .u64 x,
	.param .u64 y,
	.param .f32 alpha,
	.param .u32 n,
	.param .u64 out
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<5>;
	ld.param.u64 %rd1, [x];
	ld.param.u64 %rd2, [y];
	ld.param.u64 %rd3, [out];
	ld.param.f32 %f1, [alpha];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	mul.wide.u32 %rd4, %r5, 4;
	add.s64 %rd5, %rd1, %rd4;
	add.s64 %rd6, %rd2, %rd4;
	add.s64 %rd7, %rd3, %rd4;
	ld.global.f32 %f2, [%rd5];
	ld.global.f32 %f3, [%rd6];
	fma.rn.f32 %f4, %f1, %f2, %f3;
	st.global.f32 [%rd7], %f4;
DONE:
	ret;
}
"""

# lo = floor(x) as s32 and hi = 2 x: the output pointers around the input's.
SPLIT = HEAD + """
.visible .entry split(.param .u64 lo, .param .u64 x, .param .u64 hi, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<7>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<3>;
	ld.param.u64 %rd1, [lo];
	ld.param.u64 %rd2, [x];
	ld.param.u64 %rd3, [hi];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	mul.wide.u32 %rd4, %r5, 4;
	add.s64 %rd5, %rd2, %rd4;
	ld.global.f32 %f1, [%rd5];
	cvt.rmi.s32.f32 %r6, %f1;
	add.s64 %rd6, %rd1, %rd4;
	st.global.s32 [%rd6], %r6;
	add.f32 %f2, %f1, %f1;
	add.s64 %rd7, %rd3, %rd4;
	st.global.f32 [%rd7], %f2;
DONE:
	ret;
}
"""

# A histogram of x & 15: atomics accumulate into bins, which must start as zeros.
HIST = HEAD + """
.visible .entry hist(.param .u64 x, .param .u64 bins)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [x];
	ld.param.u64 %rd2, [bins];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mad.lo.u32 %r4, %r1, %r2, %r3;
	mul.wide.u32 %rd3, %r4, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r5, [%rd4];
	and.b32 %r6, %r5, 15;
	mul.wide.u32 %rd3, %r6, 4;
	add.s64 %rd5, %rd2, %rd3;
	red.global.add.u32 [%rd5], 1;
	ret;
}
"""

# One block sums x into a scratch word with atomics; thread 0 copies it out.
TOTAL = HEAD + """
.visible .entry total(.param .u64 x, .param .u64 scratch, .param .u64 out)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [x];
	ld.param.u64 %rd2, [scratch];
	ld.param.u64 %rd3, [out];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd4, %r1, 4;
	add.s64 %rd5, %rd1, %rd4;
	ld.global.u32 %r2, [%rd5];
	red.global.add.u32 [%rd2], %r2;
	bar.sync 0;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra DONE;
	ld.global.u32 %r3, [%rd2];
	st.global.u32 [%rd3], %r3;
DONE:
	ret;
}
"""

# y = 2 x over n elements per batch element, which is %ctaid.z.
DOUBLE_Z = HEAD + """
.visible .entry double_z(.param .u64 x, .param .u64 y, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<6>;
	.reg .f32 %f<3>;
	ld.param.u64 %rd1, [x];
	ld.param.u64 %rd2, [y];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	mov.u32 %r6, %ctaid.z;
	mad.lo.u32 %r7, %r6, %r1, %r5;
	mul.wide.u32 %rd3, %r7, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.f32 %f1, [%rd4];
	add.f32 %f2, %f1, %f1;
	add.s64 %rd5, %rd2, %rd3;
	st.global.f32 [%rd5], %f2;
DONE:
	ret;
}
"""

# out = s * a * b, elementwise over one block.
SCALED_MUL = HEAD + """
.visible .entry scaled_mul(.param .u64 a, .param .u64 b, .param .f32 s, .param .u64 out)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<8>;
	.reg .f32 %f<6>;
	ld.param.u64 %rd1, [a];
	ld.param.u64 %rd2, [b];
	ld.param.u64 %rd3, [out];
	ld.param.f32 %f1, [s];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd4, %r1, 4;
	add.s64 %rd5, %rd1, %rd4;
	add.s64 %rd6, %rd2, %rd4;
	add.s64 %rd7, %rd3, %rd4;
	ld.global.f32 %f2, [%rd5];
	ld.global.f32 %f3, [%rd6];
	mul.f32 %f4, %f2, %f3;
	mul.f32 %f5, %f4, %f1;
	st.global.f32 [%rd7], %f5;
	ret;
}
"""

# One TMA load of a 16 x 64 f16 box at (row, 0) into shared memory, dumped
# as it lies there (so the swizzle shows). The tensor has no pointer param.
TMA_DUMP = """.version 8.0
.target sm_90a
.address_size 64
.shared .align 1024 .b8 tile[2048];
.shared .align 8 .b8 bar[8];

.visible .entry tma_dump(
	.param .u64 out,
	.param .align 64 .b8 tmap[128],
	.param .u32 row
)
.maxntid 128, 1, 1
{
	.reg .pred %p<3>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<6>;
	mov.u64 %rd1, tmap;
	cvta.param.u64 %rd2, %rd1;
	ld.param.u32 %r1, [row];
	mov.u32 %r2, %tid.x;
	setp.eq.u32 %p1, %r2, 0;
	@!%p1 bra ARMED;
	mbarrier.init.shared.b64 [bar], 1;
	fence.mbarrier_init.release.cluster;
ARMED:
	bar.sync 0;
	@!%p1 bra ISSUED;
	mbarrier.arrive.expect_tx.shared.b64 _, [bar], 2048;
	mov.u32 %r3, 0;
	cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [tile], [%rd2, {%r3, %r1}], [bar];
ISSUED:
	mov.pred %p2, 0;
WAIT:
	@%p2 bra LANDED;
	mbarrier.try_wait.parity.shared.b64 %p2, [bar], 0;
	bra.uni WAIT;
LANDED:
	ld.param.u64 %rd3, [out];
	mov.u32 %r4, tile;
	shl.b32 %r5, %r2, 4;
	add.u32 %r6, %r4, %r5;
	ld.shared.v4.b32 {%r7, %r8, %r9, %r10}, [%r6];
	cvt.u64.u32 %rd4, %r5;
	add.s64 %rd5, %rd3, %rd4;
	st.global.v4.b32 [%rd5], {%r7, %r8, %r9, %r10};
	ret;
}
"""

SHARED_CORPUS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "corpus"
N = 1000
RNG = np.random.default_rng(0)
X = RNG.standard_normal(N).astype(np.float32)
Y = RNG.standard_normal(N).astype(np.float32)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def axpy(x, y, alpha=2.5):
    n = x.shape[0]
    return ptx_call(AXPY, x, y, alpha, n, out_shape=f32(n), grid=(n + 127) // 128, block=128)


def double_z(x, **kw):
    n = x.shape[0]
    return ptx_call(DOUBLE_Z, x, Output(0), n, out_shape=f32(n), grid=(n + 127) // 128,
                    block=128, **kw)


def scaled_mul(a, b, s):
    return ptx_call(SCALED_MUL, a, b, s, out_shape=f32(*a.shape), grid=1, block=a.shape[0])


# ---- jit against numpy

def test_vector_add_with_a_scalar_alpha():
    out = jax.jit(axpy)(X, Y)
    np.testing.assert_allclose(out, 2.5 * X.astype(np.float64) + Y, rtol=1e-6, atol=1e-6)
    # a numpy scalar works too, and composes with jnp in one jit
    g = jax.jit(lambda x, y: jnp.sum(axpy(x * 2, y, np.float32(-1.0))))
    np.testing.assert_allclose(g(X, Y), np.sum(-2 * X + Y), rtol=1e-4)


def test_eager_call_runs_too():
    np.testing.assert_allclose(axpy(X, Y, 0.5), 0.5 * X + Y, rtol=1e-6)


def test_outputs_in_the_middle_of_the_param_list_and_a_pytree_out_shape():
    n = N
    out_shape = {"hi": f32(n), "lo": jax.ShapeDtypeStruct((n,), jnp.int32)}   # leaves: hi, lo
    f = jax.jit(lambda x: ptx_call(SPLIT, Output(1), x, Output(0), n, out_shape=out_shape,
                                   grid=(n + 255) // 256, block=256))
    out = f(X * 10)
    assert set(out) == {"hi", "lo"} and out["lo"].dtype == jnp.int32
    np.testing.assert_array_equal(out["lo"], np.floor(X * 10).astype(np.int32))
    np.testing.assert_allclose(out["hi"], X * 20, rtol=1e-6)


def test_atomics_into_a_zeroed_output():
    x = RNG.integers(0, 1 << 20, 512).astype(np.uint32)
    f = jax.jit(lambda x: ptx_call(HIST, x, out_shape=jax.ShapeDtypeStruct((16,), jnp.uint32),
                                   grid=4, block=128, zeroed_outputs=(0,)))
    np.testing.assert_array_equal(f(x), np.bincount(x & 15, minlength=16))


def test_a_scratch_buffer_starts_as_zeros_and_is_dropped():
    x = RNG.integers(0, 1000, 64).astype(np.uint32)
    f = jax.jit(lambda x: ptx_call(TOTAL, x, Scratch(4), out_shape=jax.ShapeDtypeStruct((1,), jnp.uint32),
                                   grid=1, block=64))
    out = f(x)
    assert out.shape == (1,)
    assert int(out[0]) == int(x.sum())


def test_input_output_aliases_update_in_place():
    acc = np.ones(64, np.float32)
    a = np.arange(64, dtype=np.float32)
    # scaled_mul writes out = s * a * b; aliasing b (argument 1) to the output
    f = jax.jit(lambda a, b: ptx_call(SCALED_MUL, a, b, 3.0, out_shape=f32(64), grid=1, block=64,
                                      input_output_aliases={1: 0}))
    np.testing.assert_allclose(f(a, acc), 3 * a * acc)
    np.testing.assert_array_equal(acc, 1)   # a numpy input is never changed


NEGATE = HEAD + """
.visible .entry negate(.param .u64 x)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<4>;
	.reg .f32 %f<3>;
	ld.param.u64 %rd1, [x];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	ld.global.f32 %f1, [%rd3];
	neg.f32 %f2, %f1;
	st.global.f32 [%rd3], %f2;
	ret;
}
"""


def test_an_in_place_kernel_needs_no_parameter_for_its_aliased_output():
    # The output is the input's buffer, written through the input's pointer:
    # the call adds an unused pointer param for it.
    f = jax.jit(lambda x: ptx_call(NEGATE, x, out_shape=f32(32), grid=1, block=32,
                                   input_output_aliases={0: 0}))
    np.testing.assert_array_equal(f(X[:32]), -X[:32])
    with pytest.raises(SpecError, match=r"ptx_call negate: the entry declares 1 parameter\(s\) "
                                        r"\(x \(\.u64\)\), but the call passes 1 argument\(s\) "
                                        r"and 1 output pointer\(s\) after them"):
        ptx_call(NEGATE, X[:32], out_shape=f32(32), grid=1, block=32)


def test_tensor_map_of_an_input_with_and_without_swizzle():
    x = (np.arange(32 * 64) % 251).astype(np.float16).reshape(32, 64)

    def dump(x, swizzle):
        return ptx_call(TMA_DUMP, Output(0), TensorMap(x, box=(16, 64), swizzle=swizzle), 16,
                        out_shape=jax.ShapeDtypeStruct((16, 64), jnp.float16), grid=1, block=128)

    plain = jax.jit(lambda x: dump(x, 0))(x)
    np.testing.assert_array_equal(plain, x[16:32])
    swizzled = np.asarray(jax.jit(lambda x: dump(x, 128))(x)).reshape(16, 8, 8)
    chunks = x[16:32].reshape(16, 8, 8)          # 16-byte chunks of each 128-byte row
    for r in range(16):                          # PTX ISA, "Tensor swizzling modes": 128B
        for c in range(8):
            np.testing.assert_array_equal(swizzled[r, c ^ (r % 8)], chunks[r, c])


# ---- vmap

def test_vmap_loops_over_the_batch_by_default():
    xs, ys = RNG.standard_normal((3, N)).astype(np.float32), Y
    f = jax.jit(jax.vmap(axpy, in_axes=(0, None)))
    np.testing.assert_allclose(f(xs, ys), 2.5 * xs + ys, rtol=1e-6, atol=1e-6)
    assert "while" in f.lower(xs, ys).as_text()


def test_vmap_of_scratch_gives_each_element_its_own():
    x = RNG.integers(0, 1000, (3, 64)).astype(np.uint32)
    f = jax.jit(jax.vmap(lambda x: ptx_call(TOTAL, x, Scratch(4), grid=1, block=64,
                                            out_shape=jax.ShapeDtypeStruct((1,), jnp.uint32))))
    np.testing.assert_array_equal(f(x)[:, 0], x.sum(1))


def test_vmap_onto_grid_z_is_one_launch():
    xs = RNG.standard_normal((4, 300)).astype(np.float32)
    f = jax.jit(jax.vmap(lambda x: double_z(x, vmap_grid_z=True)))
    np.testing.assert_allclose(f(xs), 2 * xs)
    text = f.lower(xs).as_text()
    assert "while" not in text and len(re.findall(r"custom_call @jaxptx_cpu_v2", text)) == 1
    assert re.search(r"grid = dense<\[3, 1, 4\]>", text), text
    # the same kernel looped: grid z stays 1, each launch sees one element
    loop = jax.jit(jax.vmap(double_z))
    np.testing.assert_allclose(loop(xs), 2 * xs)
    assert "while" in loop.lower(xs).as_text()


def test_nested_vmap_onto_grid_z_multiplies_the_batches():
    xs = RNG.standard_normal((2, 3, 200)).astype(np.float32)
    f = jax.jit(jax.vmap(jax.vmap(lambda x: double_z(x, vmap_grid_z=True))))
    np.testing.assert_allclose(f(xs), 2 * xs)
    assert re.search(r"grid = dense<\[2, 1, 6\]>", f.lower(xs).as_text())
    # an unbatched argument of an outer vmap is broadcast
    g = jax.jit(jax.vmap(lambda a, b: scaled_mul(a, b, 1.0), in_axes=(0, None)))
    a, b = RNG.standard_normal((2, 32)).astype(np.float32), np.arange(32, dtype=np.float32)
    np.testing.assert_allclose(g(a, b), a * b, rtol=1e-6)


# ---- differentiation

def test_grad_through_custom_vjp_with_a_ptx_call_backward():
    square = jaxptx.custom_vjp(lambda x: scaled_mul(x, x, 1.0),
                               lambda x, y, dy: scaled_mul(x, dy, 2.0))
    x = RNG.standard_normal(64).astype(np.float32)
    np.testing.assert_allclose(jax.jit(square)(x), x * x, rtol=1e-6)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(square(x)))))(x)
    np.testing.assert_allclose(grad, np.cos(x * x) * 2 * x, rtol=1e-5, atol=1e-6)


def test_a_bare_ptx_call_has_no_derivative():
    with pytest.raises(SpecError, match=r"ptx_call axpy has no derivative: .*jaxptx\.custom_vjp"):
        jax.grad(lambda x: axpy(x, Y).sum())(X)


# ---- lowering, export, sharding

def test_the_cuda_lowering_carries_the_ptx_in_launch_order():
    lowered = jax.jit(axpy).trace(X, Y).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_launch_v2\(%arg0, %arg1\) \{.*?"
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text
    attrs = m.group(1)
    assert 'entry = "axpy"' in attrs
    assert re.search(r"grid = dense<\[8, 1, 1\]>.*smem = 0", attrs)
    # pointers first (x, y, then the output), then the scalars alpha and n
    assert re.search(r"\.param \.u64 x,\\0A\\09\.param \.u64 y,\\0A\\09\.param \.u64 out,"
                     r"\\0A\\09\.param \.f32 alpha,\\0A\\09\.param \.u32 n\\0A\)", attrs), attrs
    # alpha (2.5 = 0x40200000) and n (1000), each a (bytes, bits) pair
    assert re.search(r"scalars = dense<\[4, 1075838976, 4, 1000\]>", attrs), attrs
    assert "API_VERSION_TYPED_FFI" in lowered.as_text(dialect="hlo")
    ids = jaxptx.jax.kernels_in(lowered)
    assert [spec.ptx.count(".entry axpy") for spec in ids.values()] == [1]


def test_the_carried_ptx_keeps_the_line_numbers():
    from jaxptx.jax import _ptx_text
    moved = _ptx_text.carried_ptx(AXPY, "axpy", (0, 1, 4, 2, 3, None))
    assert moved.count("\n") == AXPY.count("\n")
    assert moved.splitlines()[10:] == AXPY.splitlines()[10:]     # from ")" on, line for line
    # an added param joins a line; the last one keeps the line break before ")"
    assert ("\t.param .u64 out,\n\t.param .f32 alpha, .param .u32 n,\n"
            "\t.param .u64 jaxptx_unused_0\n)\n{") in moved, moved
    assert _ptx_text.carried_ptx(AXPY, "axpy", (0, 1, 2, 3, 4)) is AXPY


def test_the_cuda_handler_runs_the_calls_on_a_stand_in_driver():
    # The shim's real CUDA handler (id check, parameter checks, scalars,
    # aliases, tensor-map encoding) against a driver that runs the emulator.
    from jaxptx.testing.standin import StandInDriver, cuda_calls

    def lowered(f, *args):
        call, = cuda_calls(jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)))
        return call

    out, = StandInDriver().run(lowered(axpy, X, Y), X, Y).outputs
    np.testing.assert_allclose(out, 2.5 * X + Y, rtol=1e-6, atol=1e-6)

    x = RNG.integers(0, 1 << 20, 512).astype(np.uint32)
    call = lowered(lambda x: ptx_call(HIST, x, out_shape=jax.ShapeDtypeStruct((16,), jnp.uint32),
                                      grid=4, block=128, zeroed_outputs=(0,)), x)
    assert [t[0] for t in call.inputs] == [(512,), (16,)] and call.aliases == ((0, 1),)
    out, = StandInDriver().run(call, x, np.zeros(16, np.uint32)).outputs   # XLA's zeros
    np.testing.assert_array_equal(out, np.bincount(x & 15, minlength=16))

    out, = StandInDriver().run(lowered(lambda x: ptx_call(NEGATE, x, out_shape=f32(32), grid=1,
                                                           block=32, input_output_aliases={0: 0}),
                                       X[:32]), X[:32]).outputs
    np.testing.assert_array_equal(out, -X[:32])

    t = (np.arange(32 * 64) % 251).astype(np.float16).reshape(32, 64)
    call = lowered(lambda t: ptx_call(TMA_DUMP, Output(0), TensorMap(t, box=(16, 64), swizzle=128),
                                      16, out_shape=jax.ShapeDtypeStruct((16, 64), jnp.float16),
                                      grid=1, block=128), t)
    out, = StandInDriver().run(call, t).outputs
    swizzled, chunks = np.asarray(out).reshape(16, 8, 8), t[16:32].reshape(16, 8, 8)
    for r in range(16):
        np.testing.assert_array_equal(swizzled[r, np.arange(8) ^ (r % 8)], chunks[r])


def test_export_round_trip():
    exp = export.export(jax.jit(axpy), platforms=["cpu", "cuda"],
                        disabled_checks=jaxptx.jax.disabled_checks())(X, Y)
    assert "custom_call @jaxptx_launch_v2" in exp.mlir_module()
    back = jaxptx.jax.deserialize(exp.serialize())
    np.testing.assert_allclose(back.call(X, Y), 2.5 * X + Y, rtol=1e-6, atol=1e-6)


SHARD_MAP_SCRIPT = """
import jax, numpy as np
from jax.sharding import AxisType, PartitionSpec as P
from jaxptx import _ffi
from jaxptx.jax import _cpu, _lowering, ptx_call
AXPY = {axpy!r}
assert jax.device_count() == 2, jax.devices()
seen = []
def spy(kernel_id, inputs, outputs, *rest):
    seen.append(tuple(mv.nbytes for mv in inputs))
    return _cpu.run(kernel_id, inputs, outputs, *rest)
_ffi.set_cpu_callback(spy)
mesh = jax.make_mesh((2,), ("d",), axis_types=(AxisType.Auto,))
def local(x, y):
    n = x.shape[0]
    return ptx_call(AXPY, x, y, 2.0, n, out_shape=jax.ShapeDtypeStruct((n,), np.float32),
                    grid=(n + 127) // 128, block=128)
f = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("d"), P("d")), out_specs=P("d")))
x = np.arange(512, dtype=np.float32)
y = np.ones(512, np.float32)
np.testing.assert_allclose(f(x, y), 2 * x + y)
assert sorted(seen) == [(1024, 1024), (1024, 1024)], seen   # one launch per 256-element shard
print("OK")
"""


def test_shard_map_on_two_cpu_devices_launches_per_shard():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", SHARD_MAP_SCRIPT.format(axpy=AXPY)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("OK")


# ---- the emulator's tools see it

def test_the_sanitizer_and_the_profiler_see_a_ptx_call():
    with sim.checking():
        np.testing.assert_allclose(jax.jit(axpy)(X, Y), 2.5 * X + Y, rtol=1e-6, atol=1e-6)
    with jaxptx.profile.profiling() as p:
        jax.block_until_ready(jax.jit(lambda x, y: axpy(x, y, 1.5))(X, Y))
    assert [prof.name.startswith("axpy") for prof in p.profiles] == [True]


def test_a_captured_ptx_call_replays(tmp_path, monkeypatch):
    from jaxptx import capture, replay
    monkeypatch.setenv(capture.ENV_DIR, str(tmp_path))
    t = (np.arange(32 * 64) % 251).astype(np.float16).reshape(32, 64)
    jax.block_until_ready(jax.jit(lambda t: ptx_call(
        TMA_DUMP, Output(0), TensorMap(t, box=(16, 64), swizzle=128), 16, grid=1, block=128,
        out_shape=jax.ShapeDtypeStruct((16, 64), jnp.float16)))(t))
    path, = tmp_path.iterdir()
    assert capture.load(path).entry == "tma_dump"
    assert replay.run(path).ok


def test_an_unwritten_output_is_an_error_naming_its_param():
    # hist writes only the bins it counts; without zeroed_outputs the rest is garbage
    x = np.zeros(128, np.uint32)
    f = jax.jit(lambda x: ptx_call(HIST, x, out_shape=jax.ShapeDtypeStruct((16,), jnp.uint32),
                                   grid=1, block=128))
    with pytest.raises(Exception, match=r"UnwrittenOutputError: .*hist.*bins"):
        jax.block_until_ready(f(x))


# ---- errors

def _call(ptx, *args, out=None, **kw):
    kw = {"grid": 1, "block": 32, **kw}
    return ptx_call(ptx, *args, out_shape=out or f32(32), **kw)


X32 = np.zeros(32, np.float32)


@pytest.mark.parametrize("args, message", [
    ((X32, X32, 1.0), (r"ptx_call axpy: the entry declares 5 parameter\(s\) \(x \(\.u64\), y "
                       r"\(\.u64\), alpha \(\.f32\), n \(\.u32\), out \(\.u64\)\), but the call passes "
                       r"3 argument\(s\) and 1 output pointer\(s\) after them .*: 4 in all")),
    ((X32, 3, 1.0, 32), (r"ptx_call axpy: param 1 y \(\.u64\): a 64-bit parameter, the size of a "
                         r"pointer, got the int 3; pass an array for a pointer, or a numpy integer")),
    ((X32, X32, X32, 32), (r"param 2 alpha \(\.f32\): expected a \.f32 value \(a Python or numpy "
                           r"number: scalar parameters are static\), got an array float32\[32\]")),
    ((X32, X32, 1.0, -1), r"param 3 n \(\.u32\): -1 is outside 0\.\.4294967295"),
    ((X32, X32, 1.0, 2**32), r"param 3 n \(\.u32\): 4294967296 is outside 0\.\.4294967295"),
    ((X32, X32, 1e39, 32), r"param 2 alpha \(\.f32\): 1e\+39 is outside the range of \.f32"),
    ((X32, X32, "1", 32), (r"param 2 alpha \(\.f32\): expected an array, a number, Output\(i\), "
                           r"Scratch\(nbytes\) or TensorMap\(\.\.\.\), got a str")),
    ((X32, X32, 1.0, 32.5), r"ptx_call axpy: param 3 n \(\.u32\): expected an int, got 32\.5"),
    ((X32, X32, Output(0), 1.0, 32), (r"param 2 alpha \(\.f32\): expected a \.f32 value .*got "
                                      r"Output\(index=0\)")),
    ((X32, X32, 1.0, 32, Output(1)), r"param 4 out \(\.u64\): Output\(1\), but out_shape has 1"),
    ((Output(0), X32, 1.0, 32, Output(0)), r"param 4 out \(\.u64\): Output\(0\) is already param x"),
    ((X32, X32, 1.0, TensorMap(X32, box=(32,)), Output(0)),
     (r"param 3 n \(\.u32\): got TensorMap\(float32\[32\], box=\(32,\), swizzle=0\), but a "
      r"TensorMap fills a 128-byte by-value parameter")),
])
def test_arguments_that_do_not_fit_the_params(args, message):
    with pytest.raises(SpecError, match=message):
        _call(AXPY, *args)


def test_an_output_without_a_parameter_is_refused():
    out = (f32(32), jax.ShapeDtypeStruct((32,), jnp.int32))
    with pytest.raises(SpecError, match=r"ptx_call split: output 0 \(an array float32\[32\]\) has "
                                        r"no parameter, so the kernel could never write it; pass "
                                        r"Output\(0\) where its pointer goes"):
        _call(SPLIT, Output(1), X32, X32, 32, out=out)


def test_a_traced_scalar_is_refused_with_the_fix():
    with pytest.raises(SpecError, match=r"param 2 alpha \(\.f32\): expected a \.f32 value \(a "
                                        r"Python or numpy number: scalar parameters are static\), "
                                        r"got an array float32\[\]"):
        jax.jit(lambda a: _call(AXPY, X32, X32, a, 32))(np.float32(1))


def test_a_64_bit_value_takes_a_numpy_integer():
    sized = HEAD + """
.visible .entry fill(.param .u64 out, .param .u64 value)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [out];
	ld.param.u64 %rd2, [value];
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd3, %r1, 8;
	add.s64 %rd4, %rd1, %rd3;
	st.global.u64 [%rd4], %rd2;
	ret;
}
"""
    # 32 u64 words, seen as 64 u32s (JAX has no 64-bit arrays without jax_enable_x64)
    out = _call(sized, Output(0), np.uint64(2**63 + 5), out=jax.ShapeDtypeStruct((64,), jnp.uint32))
    assert set(np.asarray(out).view(np.uint64).tolist()) == {2**63 + 5}


def test_nvcc_ptx_from_the_corpus():
    path = SHARED_CORPUS / "ptoxide" / "add.ptx"     # add(float*, float*, float*, size_t n)
    if not path.exists():
        pytest.skip(f"the shared corpus is absent ({path})")
    text = path.read_text()
    f = jax.jit(lambda x, y: ptx_call(text, x, y, Output(0), np.uint64(N), out_shape=f32(N),
                                      grid=(N + 255) // 256, block=256))
    np.testing.assert_allclose(f(X, Y), X + Y, rtol=1e-6)
    with pytest.raises(SpecError, match=r"param 3 _Z3addPfS_S_m_param_3 \(\.u64\): a 64-bit "
                                        r"parameter, the size of a pointer, got the int 1000"):
        ptx_call(text, X, Y, Output(0), N, out_shape=f32(N), grid=4, block=256)


def test_tensor_map_errors():
    x = np.zeros((32, 64), np.float16)
    with pytest.raises(SpecError, match=r"param 1 tmap \(\.b8\[128\]\): a 128-byte tensor map "
                                        r"passed by value; expected jaxptx\.jax\.TensorMap\(array, "
                                        r"box=\.\.\.\), got an array float16\[32, 64\]"):
        _call(TMA_DUMP, Output(0), x, 0)
    with pytest.raises(SpecError, match=r"TensorMap tmap: box \(16,\) has 1 dims, the tensor "
                                        r"an array float16\[32, 64\] has 2"):
        _call(TMA_DUMP, Output(0), TensorMap(x, box=(16,)), 0)
    with pytest.raises(SpecError, match=r"kernel tma_dump: TMA descriptor tmap .*swizzle 32"):
        _call(TMA_DUMP, Output(0), TensorMap(x, box=(16, 64), swizzle=32), 0)
    with pytest.raises(SpecError, match=r"TensorMap\(swizzle\): expected a span in bytes, one of "
                                        r"0, 32, 64, 128, got 16"):
        TensorMap(x, box=(16, 64), swizzle=16)
    with pytest.raises(SpecError, match=r"TensorMap: expected an input array or Output\(i\) as "
                                        r"the tensor, got Scratch"):
        TensorMap(Scratch(16), box=(16,))


def test_marker_errors():
    with pytest.raises(SpecError, match=r"Output\(index\): expected an output index >= 0, got -1"):
        Output(-1)
    with pytest.raises(SpecError, match=r"Scratch\(nbytes\): expected a byte count >= 1, got 0"):
        Scratch(0)
    with pytest.raises(SpecError, match=r"Scratch\(nbytes\): expected an int, got 1\.5"):
        Scratch(1.5)


def test_a_param_ptx_call_cannot_fill():
    packed = HEAD + ".visible .entry k(.param .align 8 .b8 args[16])\n{\n\tret;\n}\n"
    with pytest.raises(SpecError, match=r"ptx_call k: param 0 args \(\.b8\[16\]\): ptx_call cannot "
                                        r"fill this parameter; it passes pointers"):
        _call(packed, Output(0))


def test_aliases_and_zeroed_outputs_are_checked():
    with pytest.raises(SpecError, match=r"input_output_aliases \{2: 0\}: a key is the position of "
                                        r"an array argument \(0\.\.3\); argument 2 is the float 1\.0"):
        _call(AXPY, X32, X32, 1.0, 32, input_output_aliases={2: 0})
    with pytest.raises(SpecError, match=r"input_output_aliases \{0: 0\}: argument 0 is an array "
                                        r"float32\[16\] but output 0 is an array float32\[32\]"):
        _call(AXPY, X32[:16], X32, 1.0, 32, input_output_aliases={0: 0})
    with pytest.raises(SpecError, match=r"input_output_aliases \{0: 3\}: a value is an output "
                                        r"index \(0\.\.0\)"):
        _call(AXPY, X32, X32, 1.0, 32, input_output_aliases={0: 3})
    with pytest.raises(SpecError, match=r"zeroed_outputs: expected distinct output indices "
                                        r"\(0\.\.0\), got \(0, 0\)"):
        _call(AXPY, X32, X32, 1.0, 32, zeroed_outputs=(0, 0))
    with pytest.raises(SpecError, match=r"zeroed_outputs: output 0 is aliased to argument 1"):
        _call(AXPY, X32, X32, 1.0, 32, zeroed_outputs=(0,), input_output_aliases={1: 0})


def test_bad_ptx_is_refused_at_trace_time_naming_its_line():
    bad = AXPY.replace("ld.param.u64 %rd2, [y];", "ld.param.u64 %rd2, [y]];")
    line = bad.splitlines().index("\tld.param.u64 %rd2, [y]];") + 1
    with pytest.raises(ParseError, match=rf"<ptx_call>:{line}:24: expected ';', got '\]'"):
        _call(bad, X32, X32, 1.0, 32)
    wrong = AXPY.replace("fma.rn.f32 %f4", "fma.rn.f33 %f4")
    line = wrong.splitlines().index("\tfma.rn.f33 %f4, %f1, %f2, %f3;") + 1
    with pytest.raises(sim.PrecheckError, match=rf"ptx_call: refused before running: 1 that ptxas "
                                                rf"would reject\n  PTX line {line}: fma.rn.f33: "
                                                rf"unknown modifier \.f33.*\n +fma\.rn\.f33 %f4"):
        _call(wrong, X32, X32, 1.0, 32)
    with pytest.raises(sim.PrecheckError, match=r"PTX line \d+: bra: undefined name NOWHERE"):
        _call(AXPY.replace("bra DONE", "bra NOWHERE"), X32, X32, 1.0, 32)


def test_entries_are_chosen_by_name():
    both = AXPY + SPLIT[len(HEAD):]
    with pytest.raises(SpecError, match=r"ptx_call: the PTX defines 2 \.entry functions \(axpy, "
                                        r"split\); pick one with kernel='name'"):
        _call(both, X32, X32, 1.0, 32)
    with pytest.raises(SpecError, match=r"kernel='nope', but the PTX defines no such \.entry "
                                        r"\(it defines axpy, split\)"):
        _call(both, X32, X32, 1.0, 32, kernel="nope")
    out_shape = (f32(32), jax.ShapeDtypeStruct((32,), jnp.int32))
    out = jax.jit(lambda x: ptx_call(both, Output(1), x, Output(0), 32, kernel="split", grid=1,
                                     block=32, out_shape=out_shape))(X32 + 1.5)
    np.testing.assert_array_equal(out[1], 1)


def test_launch_and_call_errors():
    with pytest.raises(LaunchError, match=r"ptx_call axpy: block\.x = 2048 exceeds CUDA's limit"):
        _call(AXPY, X32, X32, 1.0, 32, block=2048)
    with pytest.raises(LaunchError, match=r"ptx_call axpy: cluster = \(2, 1, 1\) needs sm_90"):
        _call(AXPY, X32, X32, 1.0, 32, grid=2, cluster=2)
    with pytest.raises(SpecError, match=r"ptx_call double_z: vmap_grid_z=True folds a vmap into "
                                        r"grid z, but grid is \(1, 1, 2\)"):
        _call(DOUBLE_Z, X32, Output(0), 32, grid=(1, 1, 2), vmap_grid_z=True)
    with pytest.raises(SpecError, match=r"ptx_call: expected the PTX text \(a str\) first, got bytes"):
        ptx_call(AXPY.encode(), X32, out_shape=f32(32), grid=1, block=1)
    with pytest.raises(SpecError, match=r"out_shape: expected jax\.ShapeDtypeStruct leaves, got int"):
        ptx_call(AXPY, X32, X32, 1.0, 32, out_shape=(32,), grid=1, block=1)


def test_a_triton_kernel_if_triton_is_installed():
    triton = pytest.importorskip("triton", reason="triton is not installed")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                 mask=mask)

    src = ASTSource(fn=add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                                              "n": "i32", "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 128})
    compiled = triton.compile(src, target=GPUTarget("cuda", 80, 32))
    ptx, name = compiled.asm["ptx"], compiled.metadata.name
    params = re.search(rf"\.entry {name}\((.*?)\)", ptx, re.DOTALL).group(1).count(".param")
    extra = [np.uint64(0)] * (params - 4)       # Triton's trailing global/profile scratch pointers
    f = jax.jit(lambda x, y: ptx_call(ptx, x, y, Output(0), N, *extra, out_shape=f32(N),
                                      grid=(N + 127) // 128, block=compiled.metadata.num_warps * 32))
    np.testing.assert_allclose(f(X, Y), X + Y, rtol=1e-6)

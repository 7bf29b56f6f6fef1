"""jaxptx.dsl.reduce: warp and CTA reductions, run on the emulator against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, sim, smem
from jaxptx.dsl.reduce import cta_reduce, identity, warp_reduce
from jaxptx.errors import TraceError
from jaxptx.types import f32, s32, u32

RNG = np.random.default_rng(7)
NP = {"f32": np.float32, "u32": np.uint32, "s32": np.int32}
TYPES = {"f32": f32, "u32": u32, "s32": s32}
NP_OP = {"add": np.sum, "max": np.max, "min": np.min}


def _data(dtype: str, n: int) -> np.ndarray:
    if dtype == "f32":
        return RNG.standard_normal(n).astype(np.float32)
    if dtype == "u32":
        return RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return RNG.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)


def _expect(x: np.ndarray, op: str, group: int) -> np.ndarray:
    """Every element replaced by ``op`` over its aligned group (wrapping like the GPU)."""
    g = x.reshape(-1, group)
    if op == "add" and x.dtype != np.float32:
        red = g.astype(np.int64).sum(axis=1).astype(x.dtype)  # modulo 2^32
    else:
        red = NP_OP[op](g.astype(np.float64) if x.dtype == np.float32 else g, axis=1).astype(x.dtype)
    return np.repeat(red, group)


def _reduce_kernel(dtype: str, threads: int, body):
    t = TYPES[dtype]

    @kernel(in_specs=(Tile(threads, t),), out_specs=(Tile(threads, t),), grid=(1, 1, 1),
            block=(threads, 1, 1), arch="sm_80", name=f"reduce_{dtype}_{threads}")
    def k(x, y):
        off = ptx.mul.wide.u32(ptx.special.tid.x(), 4)
        v = ptx.ld.global_(t, x.ptr + off)
        ptx.st.global_(t, y.ptr + off, body(v))

    return k


@pytest.mark.parametrize("dtype", ["f32", "u32", "s32"])
@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("width", [32, 8, 1])
def test_warp_reduce_matches_numpy(dtype, op, width):
    k = _reduce_kernel(dtype, 64, lambda v: warp_reduce(v, op, width=width))
    x, y = _data(dtype, 64), np.zeros(64, NP[dtype])
    sim.launch(k, x, y, check=True)
    want = _expect(x, op, width)
    if dtype == "f32":
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-5)
    else:
        np.testing.assert_array_equal(y, want)
    assert k.ptx().count("shfl.sync.bfly.b32") == width.bit_length() - 1


@pytest.mark.parametrize("warps", [1, 3, 4, 8])
@pytest.mark.parametrize("dtype,op", [("f32", "add"), ("f32", "max"), ("f32", "min"),
                                      ("u32", "add"), ("s32", "max"), ("u32", "min")])
def test_cta_reduce_matches_numpy(dtype, op, warps):
    k = _reduce_kernel(dtype, 32 * warps, lambda v: cta_reduce(v, op, warps=warps))
    x, y = _data(dtype, 32 * warps), np.zeros(32 * warps, NP[dtype])
    sim.launch(k, x, y, check=True)          # the sanitizer: no shared-memory races
    want = _expect(x, op, 32 * warps)
    if dtype == "f32":
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_array_equal(y, want)


def test_two_cta_reductions_share_scratch_with_a_barrier_between():
    @kernel(in_specs=(Tile(256, f32),), out_specs=(Tile(256, f32), Tile(256, f32)),
            grid=(1, 1, 1), block=(256, 1, 1), arch="sm_80")
    def twice(x, total, peak):
        off = ptx.mul.wide.u32(ptx.special.tid.x(), 4)
        v = ptx.ld.global_.f32(x.ptr + off)
        ptx.st.global_.f32(total.ptr + off, cta_reduce(v, "add", warps=8))
        ptx.st.global_.f32(peak.ptr + off, cta_reduce(v, "max", warps=8))

    text = twice.ptx()
    assert text.count(".shared .align") == 1           # one scratch array, reused
    assert text.count("bar.sync 0;") == 3       # store/load, then sync before the reuse
    x = _data("f32", 256)
    total, peak = np.zeros_like(x), np.zeros_like(x)
    sim.launch(twice, x, total, peak, check=True)
    np.testing.assert_allclose(total, np.full(256, x.astype(np.float64).sum()), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(peak, np.full(256, x.max()))


def test_a_given_scratch_array_is_tracked_too():
    @kernel(in_specs=(Tile(64, f32),), out_specs=(Tile(64, f32),), grid=(1, 1, 1),
            block=(64, 1, 1), arch="sm_80")
    def mine(x, y):
        scratch = smem.alloc(f32, 2)
        off = ptx.mul.wide.u32(ptx.special.tid.x(), 4)
        v = ptx.ld.global_.f32(x.ptr + off)
        m = cta_reduce(v, "max", warps=2, scratch=scratch)
        ptx.st.global_.f32(y.ptr + off, cta_reduce(v - m, "min", warps=2, scratch=scratch))

    assert mine.ptx().count("bar.sync 0;") == 3
    x = _data("f32", 64)
    y = np.zeros_like(x)
    sim.launch(mine, x, y, check=True)
    np.testing.assert_array_equal(y, np.full(64, x.min() - x.max()))


def test_cta_reduce_in_a_runtime_loop_syncs_every_iteration():
    @kernel(in_specs=(Tile(4, 128, f32),), out_specs=(Tile(4, 128, f32),),
            grid=(1, 1, 1), block=(128, 1, 1), arch="sm_80")
    def rows(x, y):
        tid = ptx.special.tid.x()
        for r in ptx.range_(0, 4, 1, dtype=u32):
            off = ptx.mul.wide.u32(r * 128 + tid, 4)
            v = ptx.ld.global_.f32(x.ptr + off)
            ptx.st.global_.f32(y.ptr + off, cta_reduce(v, "add", warps=4))

    assert rows.ptx().count("bar.sync 0;") == 2
    x = _data("f32", 512).reshape(4, 128)
    y = np.zeros_like(x)
    sim.launch(rows, x, y, check=True)
    want = np.repeat(x.astype(np.float64).sum(axis=1, keepdims=True), 128, axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


def test_ptxas_accepts_the_reductions_without_spills():
    k = _reduce_kernel("f32", 256, lambda v: cta_reduce(warp_reduce(v, "max"), "add", warps=8))
    res = k.resources()
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.shared_bytes == 128


def test_identities():
    assert identity("add", f32) == 0.0 and identity("max", f32) == float("-inf")
    assert identity("min", u32) == 0xFFFFFFFF and identity("max", s32) == -2**31


@pytest.mark.parametrize("call,match", [
    (lambda v: warp_reduce(v, "mul"), r"warp_reduce op: expected one of 'add', 'max', 'min', got 'mul'"),
    (lambda v: warp_reduce(v, "add", width=12), r"warp_reduce width: expected a power of two from 1 "
                                                r"to 32, got 12"),
    (lambda v: cta_reduce(v, "add", warps=33), r"cta_reduce warps: expected an int from 1 to 32, got 33"),
    (lambda v: cta_reduce(v, "add", warps=4, scratch=smem.alloc(f32, 2)),
     r"cta_reduce scratch: expected a shared array of at least 4 32-bit elements"),
    (lambda v: warp_reduce(ptx.cvt.f64.f32(v)), r"warp_reduce value: expected an f32, u32 or s32 "
                                                r"register, got %fd\d+ \(\.f64\)"),
])
def test_bad_arguments_are_trace_errors_at_the_callers_line(call, match):
    with pytest.raises(TraceError, match=match) as info:
        _reduce_kernel("f32", 32, call).ptx()
    assert "test_reduce.py" in str(info.value)

"""Kernels written the pyptx way, imported from ``jaxptx.pyptx``: traced,
accepted by ptxas, run on the emulator against numpy, called under jax.jit."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np

import jaxptx
from jaxptx.pyptx import Tile, kernel, ptx, reg, smem
from jaxptx.pyptx.types import b32, bf16, f32, u32

RNG = np.random.default_rng(7)


def _no_spills(k, **dims) -> None:
    r = k.resources(**dims)
    assert r.spill_stores == 0 and r.spill_loads == 0, r


# 1. elementwise: y = a * x + b, u64 pointer + u32 offset arithmetic ----------------
def build_axpb(B: int, N: int, a: float, b: float):
    @kernel(in_specs=(Tile(B, N, f32),), out_specs=(Tile(B, N, f32),), grid=(B, 1, 1),
            block=(N, 1, 1), arch="sm_80")
    def axpb(X, Y):
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        row = reg.scalar(u32)
        ptx.inst.mov.u32(row, ptx.special.ctaid.x())
        row_off = row * (N * 4)
        px += row_off                       # u64 += u32: cvt.u64.u32 + add.s64
        py += row_off
        off = tid * 4
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
        out = reg.scalar(f32)
        ptx.inst.fma.rn.f32(out, v, reg.scalar(f32, init=a), reg.scalar(f32, init=b))
        ptx.inst.st.global_.f32(ptx.addr(py + off), out)
        ptx.ret()
    return axpb


def test_elementwise_widens_like_pyptx_and_matches_numpy() -> None:
    k = build_axpb(3, 64, 1.5, -0.25)
    text = k.ptx()
    assert "cvt.u64.u32" in text and "add.s64" in text and "mul.lo.s32" in text
    assert text == build_axpb(3, 64, 1.5, -0.25).ptx()      # deterministic names
    _no_spills(k)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    y = np.zeros_like(x)
    jaxptx.sim.launch(k, x, y)
    want = (1.5 * x.astype(np.float64) - 0.25).astype(np.float32)   # fma: one rounding
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(np.asarray(jax.jit(k)(x)), want)


# 2. RMS norm: 2-d shared arrays with item assignment, warp.reduce_sum -------------
def build_rms(B: int, N: int, eps: float = 1e-6):
    block = 128
    warps = block // 32

    @kernel(in_specs=(Tile(B, N, f32), Tile(N, f32)), out_specs=(Tile(B, N, f32),),
            grid=(B, 1, 1), block=(block, 1, 1), arch="sm_90a")
    def rms(X, W, Y):
        partials = smem.alloc(f32, (warps, 1))
        total = smem.alloc(f32, (1, 1))
        px, pw, py = ptx.global_ptrs(X, W, Y)
        tid = reg.from_(ptx.special.tid.x(), u32)
        row = reg.from_(ptx.special.ctaid.x(), u32)
        px += row * (N * 4)
        py += row * (N * 4)
        lane, warp = tid & 31, tid >> 5
        acc = reg.scalar(f32, init=0.0)
        xs = reg.array(f32, N // block)
        for i in range(N // block):
            off = (tid + i * block) * 4
            ptx.inst.ld.global_.f32(xs[i], ptx.addr(px + off))
            ptx.inst.fma.rn.f32(acc, xs[i], xs[i], acc)
        ptx.warp.reduce_sum(acc)
        with ptx.if_(lane == 0):
            partials[warp, 0] = acc
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            s = reg.scalar(f32, init=0.0)
            for w in range(warps):
                ptx.inst.add.f32(s, s, partials[w, 0])
            total[0, 0] = s
        ptx.bar.sync(0)
        mean = reg.scalar(f32)
        ptx.inst.mul.f32(mean, total[0, 0], reg.scalar(f32, init=1.0 / N))
        ptx.inst.add.f32(mean, mean, reg.scalar(f32, init=eps))
        rstd = reg.scalar(f32)
        ptx.inst.rsqrt.approx.f32(rstd, mean)
        for i in range(N // block):
            off = (tid + i * block) * 4
            w = reg.scalar(f32)
            ptx.inst.ld.global_.f32(w, ptx.addr(pw + off))
            y = reg.scalar(f32)
            ptx.inst.mul.f32(y, xs[i], rstd)
            ptx.inst.mul.f32(y, y, w)
            ptx.inst.st.global_.f32(ptx.addr(py + off), y)
        ptx.ret()
    return rms


def test_rms_norm_matches_numpy_under_jit() -> None:
    B, N = 4, 512
    k = build_rms(B, N)
    _no_spills(k)
    x = RNG.standard_normal((B, N)).astype(np.float32)
    w = (1 + 0.1 * RNG.standard_normal(N)).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    got = np.asarray(jax.jit(k)(x, w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# 3. Hopper tile: the seed's TMA call, Tile.wgmma_a/b, mbarrier and wgmma wrappers --
def build_wgmma_tile(M: int = 64, N: int = 64, K: int = 16):
    @kernel(in_specs=(Tile.wgmma_a(M, K, bf16), Tile.wgmma_b(K, N, bf16)),
            out_specs=(Tile(M, N, f32),), grid=(1, 1, 1), block=(128, 1, 1), arch="sm_90a")
    def tile(A, B, C):
        sA = smem.wgmma_tile(bf16, (M, K), major="K")
        sB = smem.wgmma_tile(bf16, (K, N), major="MN")
        bar = smem.mbarrier(1)
        acc = reg.array(f32, N // 2)
        phase = reg.scalar(b32, init=0)
        tid = ptx.special.tid.x()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar[0], 1)
            ptx.fence.proxy_async_shared_cta()
            ptx.mbarrier.arrive_expect_tx(bar[0], (M * K + K * N) * 2)
            ptx.cp.async_.bulk.tensor_2d(dst=sA[0], src=A.tma_desc(), coord=(0, 0), mbar=bar[0])
            ptx.cp.async_.bulk.tensor_2d(dst=sB[0], src=B.tma_desc(), coord=(0, 0), mbar=bar[0])
        ptx.bar.sync(0)
        ptx.mbarrier.wait(bar[0], phase)
        ptx.wgmma.fence()
        ptx.wgmma.mma_async(shape=(M, N, K), dtype_d=f32, dtype_a=bf16, dtype_b=bf16,
                            d=acc, a=sA, b=sB, scale_d=False, trans_a=0, trans_b=1)
        ptx.wgmma.commit_group()
        ptx.wgmma.wait_group(0)
        # wgmma m64nN accumulator layout: warp w rows 16w + lane/4 (+8), cols 2*(lane%4) + 8g
        (pc,) = ptx.global_ptrs(C)
        t = reg.from_(ptx.special.tid.x(), u32)
        r0 = ((t >> 5) << 4) + ((t & 31) >> 2)
        c0 = (t & 3) << 1
        for g in range(N // 8):
            col = c0 + g * 8
            ptx.inst.st.global_.v2.f32(ptx.addr(pc + (r0 * N + col) * 4), [acc[4 * g], acc[4 * g + 1]])
            ptx.inst.st.global_.v2.f32(ptx.addr(pc + ((r0 + 8) * N + col) * 4),
                                       [acc[4 * g + 2], acc[4 * g + 3]])
        ptx.ret()
    return tile


def test_tma_wgmma_tile_matches_numpy() -> None:
    k = build_wgmma_tile()
    text = k.ptx()
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in text
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in text
    _no_spills(k)
    a = RNG.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((16, 64)).astype(ml_dtypes.bfloat16)
    got = np.asarray(jax.jit(k)(a, b))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


# 4. Ampere mma.sync tile: m16n8k16, fragments loaded from global -------------------
def build_mma_tile():
    @kernel(in_specs=(Tile(16, 16, bf16), Tile(8, 16, bf16)), out_specs=(Tile(16, 8, f32),),
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")
    def mma_tile(A, BT, D):
        pa, pb, pd = ptx.global_ptrs(A, BT, D)
        lane = reg.from_(ptx.special.tid.x(), u32)
        g, t = lane >> 2, lane & 3
        a = reg.array(b32, 4)
        b = reg.array(b32, 2)
        acc = reg.array(f32, 4)
        for i in range(4):
            ptx.inst.mov.f32(acc[i], 0.0)
        for i, (dr, dk) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8)]):
            ptx.inst.ld.global_.b32(a[i], ptx.addr(pa + ((g + dr) * 16 + (t << 1) + dk) * 2))
        for i, dk in enumerate([0, 8]):
            ptx.inst.ld.global_.b32(b[i], ptx.addr(pb + (g * 16 + (t << 1) + dk) * 2))
        ptx.mma.sync(shape=(16, 8, 16), dtype_d=f32, dtype_a=bf16, dtype_b=bf16, dtype_c=f32,
                     d=acc, a=a, b=b, c=acc, a_layout="row", b_layout="col")
        for i, dr in enumerate([0, 8]):
            ptx.inst.st.global_.v2.f32(ptx.addr(pd + ((g + dr) * 8 + (t << 1)) * 4),
                                       [acc[2 * i], acc[2 * i + 1]])
        ptx.ret()
    return mma_tile


def test_ampere_mma_tile_matches_numpy() -> None:
    k = build_mma_tile()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in k.ptx()
    _no_spills(k)
    a = RNG.standard_normal((16, 16)).astype(ml_dtypes.bfloat16)
    bt = RNG.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    d = np.zeros((16, 8), np.float32)
    jaxptx.sim.launch(k, a, bt, d)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(d, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jax.jit(k)(a, bt)), want, rtol=1e-4, atol=1e-4)

"""Pipeline (full/empty mbarrier ring with phases) and warp roles, on the
emulator; and the wgmma descriptors and TMA tiles of ``smem`` they feed."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import Layout, Tile, kernel, ptx, reg, sim, smem
from jaxptx.dsl.pipeline import Pipeline, role, wait_parity, warpgroup
from jaxptx.dsl.smem import check_tma, descriptor_strides, tma_tile
from jaxptx.errors import TraceError
from jaxptx.runtime import ptxas
from jaxptx.types import bf16, f32, u32

CHUNK = 128                      # f32 per stage: one per consumer thread
ITERS = 22                       # many laps of every ring below


def _u32(i):
    """A loop index as a u32 register (a Python-unrolled loop gives ints)."""
    return ptx.mov.u32(i) if isinstance(i, int) else i


def _ring_kernel(stages: int, consumers: int, runtime_loop: bool):
    """Warpgroup 0's thread 0 bulk-copies chunk i of ``x`` into stage i %
    stages; warpgroups 1..consumers each read it and write ``x * (w + 1)``
    plus the iteration number into their slice of ``y``."""
    @kernel(in_specs=(Tile(ITERS, CHUNK, f32),), out_specs=(Tile(consumers, ITERS, CHUNK, f32),),
            block=(128 * (1 + consumers), 1, 1), arch="sm_90a")
    def ring(x, y):
        ring_buf = smem.alloc(f32, (stages, CHUNK), align=128)
        pipe = Pipeline(stages, consumer_arrivals=128 * consumers)
        tid = ptx.special.tid.x()
        with ptx.if_(tid == 0):
            pipe.init()
        ptx.bar.sync(0)
        loop = (lambda: ptx.range_(0, ITERS, dtype=u32)) if runtime_loop else (lambda: range(ITERS))
        with role(0, dec=40):
            with ptx.if_(tid == 0):
                for i in loop():
                    s = pipe.wait_empty()
                    bar = pipe.arm(CHUNK * 4)
                    src = x.ptr + ptx.mul.wide.u32(_u32(i), CHUNK * 4)
                    ptx.cp.async_.bulk.shared__cluster.global_.mbarrier__complete_tx__bytes(
                        ptx.addr(ring_buf.base + s * (CHUNK * 4)), ptx.addr(src), CHUNK * 4, bar)
                    pipe.producer.advance()
        with role((1, 1 + consumers), inc=232):
            wg = warpgroup()
            lane = tid & 127
            scale = ptx.cvt.rn.f32.u32(wg)
            for i in loop():
                s = pipe.wait_full()
                v = ptx.ld.shared.f32(ptx.addr(ring_buf.base + (s * CHUNK + lane) * 4))
                pipe.release()
                it = ptx.cvt.rn.f32.u32(_u32(i))
                out = y.ptr + ptx.mul.wide.u32(((wg - 1) * ITERS + i) * CHUNK + lane, 4)
                ptx.st.global_.f32(out, ptx.fma.rn.f32(v, scale, it))
    return ring


@pytest.mark.parametrize("stages, consumers, runtime_loop", [(3, 1, True), (4, 2, True), (1, 1, True),
                                                             (2, 1, False)])
def test_producer_consumer_ring_over_many_laps(stages, consumers, runtime_loop) -> None:
    k = _ring_kernel(stages, consumers, runtime_loop)
    x = np.random.default_rng(stages).standard_normal((ITERS, CHUNK)).astype(np.float32)
    y = np.zeros((consumers, ITERS, CHUNK), np.float32)
    sim.launch(k, x, y)
    want = np.stack([x * (w + 1) + np.arange(ITERS, dtype=np.float32)[:, None] for w in range(consumers)])
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_ptx_and_ptxas() -> None:
    text = _ring_kernel(3, 2, True).ptx()
    for needle in ("mbarrier.try_wait.parity.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
                   "setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 232;",
                   "selp.u32"):
        assert needle in text
    ptxas(text, "sm_90a")


def test_remote_release_and_wait_parity_emit_cluster_forms() -> None:
    @kernel(arch="sm_90a", cluster=(2, 1, 1), block=(128, 1, 1))
    def k():
        pipe = Pipeline(2, consumer_arrivals=2)
        pipe.release(cta=ptx.special.cluster_ctarank())
        wait_parity(pipe.full[0], 1)
    text = k.ptx()
    assert "mapa.shared::cluster.u32" in text
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r" in text
    ptxas(text, "sm_90a")


@pytest.mark.parametrize("make, message", [
    (lambda: Pipeline(0), r"stages: expected a positive int, got 0"),
    (lambda: Pipeline(2, consumer_arrivals=-1), r"consumer_arrivals: expected a positive int"),
])
def test_bad_pipelines(make, message) -> None:
    @kernel(arch="sm_90a")
    def k():
        make()
    with pytest.raises(TraceError, match=message):
        k.ptx()


def test_bad_roles() -> None:
    @kernel(arch="sm_90a")
    def k():
        with role(0, dec=41):
            pass
    with pytest.raises(TraceError, match=r"multiple of 8 in 24..256, got 41"):
        k.ptx()


# --- shared-memory matrix descriptors and TMA tiles (jaxptx/dsl/smem.py) -----------------------

WM, WN, WK = 128, 64, 64         # A is WM x WK (two m64 halves), B is WK x WN


def _wgmma_kernel(swizzle: int, a_major: str, b_major: str):
    """One warpgroup: TMA-load A and B in the given majors and swizzle,
    four K=16 steps (K offsets) into each m64 half of A (MN offsets), D out."""
    span = (swizzle or 16) // 2
    layout = Layout.for_swizzle(swizzle)
    a_rows, a_cols = (WM, WK) if a_major == "K" else (WK, WM)
    b_rows, b_cols = (WN, WK) if b_major == "K" else (WK, WN)

    @kernel(in_specs=(Tile(a_rows, a_cols, bf16, layout, tma_box=(a_rows, span)),
                      Tile(b_rows, b_cols, bf16, layout, tma_box=(b_rows, span))),
            out_specs=(Tile(WM, WN, f32),), block=(128, 1, 1), arch="sm_90a", extern_smem=True)
    def wg(a, b, d):
        at = tma_tile(a, major=a_major, boxes=a_cols // span)
        bt = tma_tile(b, major=b_major, boxes=b_cols // span)
        bar = smem.mbarrier(1)
        tid = ptx.special.tid.x()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init.shared.b64(bar[0], 1)
            ptx.fence.mbarrier_init.release.cluster()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], at.nbytes + bt.nbytes)
            load = ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
            for t, x, cols in ((at, a, a_cols), (bt, b, b_cols)):
                rows = t.shape[0]
                for j in range(cols // span):
                    load(ptx.addr(t.base + j * rows * (swizzle or 16)),
                         ptx.addr(x.tma_desc(), coords=(j * span, 0)), bar[0])
        wait_parity(bar[0], 0)
        ta, tb = int(a_major == "MN"), int(b_major == "MN")
        lane, warp = tid % 32, tid // 32
        for half in range(WM // 64):
            acc = reg.array(f32, WN // 2)
            for r in acc:
                r.set(0.0)
            ptx.wgmma.fence.sync.aligned()
            for kk in range(WK // 16):
                ptx.wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16(
                    acc, at.matrix_desc(k=16 * kk, mn=64 * half), bt.matrix_desc(k=16 * kk), 1, 1, 1, ta, tb)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(0)
            row = half * 64 + warp * 16 + lane // 4
            base = d.ptr + ptx.mul.wide.u32(row * WN + (lane % 4) * 2, 4)
            for j in range(WN // 8):
                ptx.st.global_.v2.f32(base + j * 32, (acc[4 * j], acc[4 * j + 1]))
                ptx.st.global_.v2.f32(base + (8 * WN + 8 * j) * 4, (acc[4 * j + 2], acc[4 * j + 3]))
    return wg


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("a_major, b_major", [("K", "MN"), ("MN", "K")])
def test_wgmma_from_tma_tiles_at_every_swizzle_and_major(swizzle, a_major, b_major) -> None:
    rng = np.random.default_rng(swizzle)
    a = rng.standard_normal((WM, WK)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((WK, WN)).astype(ml_dtypes.bfloat16)
    a_arg = a if a_major == "K" else np.ascontiguousarray(a.T)
    b_arg = b if b_major == "MN" else np.ascontiguousarray(b.T)
    k = _wgmma_kernel(swizzle, a_major, b_major)
    d = np.asarray(k(a_arg, b_arg))        # a JAX call: the runtime builds the tensor maps
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-4)


def test_descriptor_strides_and_offsets() -> None:
    assert descriptor_strides("K", 128, 128) == (16, 1024)
    assert descriptor_strides("MN", 128, 64) == (64 * 128, 1024)
    assert descriptor_strides("K", 0, 64) == (64 * 16, 128)
    assert descriptor_strides("MN", 0, 64) == (128, 64 * 16)
    seen = {}

    @kernel(arch="sm_90a")
    def k():
        t = smem.wgmma_tile(bf16, (128, 128), major="K")        # two 64-element column blocks
        m = smem.wgmma_tile(bf16, (64, 128), major="MN")
        seen.update(k48=t.offset_bytes(k=48), k64=t.offset_bytes(k=64, mn=8),
                    mn64=m.offset_bytes(mn=64), k16=m.offset_bytes(k=16))
        for bad in (dict(k=8 + 16 * 0, mn=4), dict(k=3)):
            with pytest.raises(TraceError, match="does not start a whole"):
                t.offset_bytes(**bad)
        with pytest.raises(TraceError, match="outside"):
            m.offset_bytes(k=64)
        t.matrix_desc(k=16)
    assert "add.s64" in k.ptx()
    assert seen == dict(k48=96, k64=128 * 128 + 8 * 128, mn64=64 * 128, k16=16 * 128)


def test_tma_tile_refuses_disagreeing_swizzles() -> None:
    spec = Tile("K", "N", bf16, Layout.TMA_64B, tma_box=(64, 32))

    @kernel(arch="sm_90a")
    def k():
        check_tma(spec, smem.wgmma_tile(bf16, (64, 64), major="MN", swizzle=64), boxes=2)
        check_tma(spec, smem.wgmma_tile(bf16, (64, 64), major="MN", swizzle=128), boxes=2)
    with pytest.raises(TraceError, match=r"swizzles 64 bytes \(TMA_64B\) but the shared tile swizzle=128"):
        k.ptx()

    @kernel(arch="sm_90a")
    def k2():
        check_tma(Tile("K", "N", bf16, Layout.TMA_128B, tma_box=(64, 128)),
                  smem.wgmma_tile(bf16, (64, 128), major="MN"))
    with pytest.raises(TraceError, match="not one swizzle span"):
        k2.ptx()

"""Two warp-specialised GEMMs for the emulator benchmark, as jaxptx kernels:
``C[M, N] = A[M, K] @ B[N, K].T``, bf16 in, f32 out, 128 x 128 tiles per
CTA, a 4-stage shared-memory ring of 128-byte-swizzled K-major tiles filled
by TMA, with full/empty mbarriers between producer and consumers.

* :data:`ws_gemm` (sm_90a): thread 0 (warpgroup 0) is the TMA producer;
  warpgroups 1 and 2 consume 64 rows each with ``wgmma.mma_async
  .m64n128k16`` into register accumulators, then store them.
* :data:`tc_gemm` (sm_100a): thread 0 is the TMA producer, thread 32 issues
  ``tcgen05.mma.cta_group::1.kind::f16`` (M = N = 128) into tensor memory and
  commits each stage back to its empty barrier; all four warps read the
  accumulator with ``tcgen05.ld.32x32b`` and store it.
"""

from __future__ import annotations

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.types import b32, bf16, f32, u32

__all__ = ["ws_gemm", "tc_gemm", "maps", "BM", "BN", "BK"]

BM, BN, BK, STAGES = 128, 128, 64, 4
WG = 128                                    # threads per warpgroup
TILE_BYTES = (BM + BN) * BK * 2             # one stage: an A and a B tile
# kind::f16 instruction descriptor (PTX ISA, "Instruction descriptor"): f32 D
# (bits 4-5 = 1), bf16 A and B (bits 7-9, 10-12 = 1), K-major, N >> 3 in
# bits 17-22, M >> 4 in bits 24-28.
TC_IDESC = 1 << 4 | 1 << 7 | 1 << 10 | (BN >> 3) << 17 | (BM >> 4) << 24
# sm_100 shared-memory descriptor, all but the start address: LBO 16 bytes
# (unused by swizzled K-major tiles), SBO 1024 (8 rows of 128 bytes), bits
# 46-48 = 0b001, 128-byte swizzle (2) in bits 61-63.
TC_SMEM_DESC = (16 >> 4) << 16 | (1024 >> 4) << 32 | 1 << 46 | 2 << 61

_SPECS = dict(in_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(BM, BK)),
                        Tile("N", "K", bf16, Layout.TMA_128B, tma_box=(BN, BK))),
              out_specs=(Tile("M", "N", f32),), grid=lambda M, N: (N // BN, M // BM, 1), extern_smem=True)


def maps(a_shape: tuple[int, int], b_shape: tuple[int, int]) -> list:
    """The two tensor-map arguments for ``sim.launch`` (arrays 0 and 1)."""
    from jaxptx import sim
    return [sim.ArgTensorMap(0, a_shape, "bf16", (BM, BK), swizzle=128),
            sim.ArgTensorMap(1, b_shape, "bf16", (BN, BK), swizzle=128)]


def _ring():
    a = [smem.wgmma_tile(bf16, (BM, BK), major="K") for _ in range(STAGES)]
    b = [smem.wgmma_tile(bf16, (BN, BK), major="K") for _ in range(STAGES)]
    return a, b, smem.mbarrier(STAGES), smem.mbarrier(STAGES)


def _wait(bar, parity: int) -> None:
    """Spin on ``try_wait.parity`` until the phase of ``parity`` completes."""
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


def _produce(A, B, a_tiles, b_tiles, full, empty, m0, n0, kblocks: int) -> None:
    """One thread: for each K block, wait for its stage to be free, arm the
    full barrier with the stage's bytes and issue the two TMA loads."""
    for kb in range(kblocks):
        s, lap = kb % STAGES, kb // STAGES
        if lap:
            _wait(empty[s], (lap - 1) & 1)
        ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, full[s], TILE_BYTES)
        load = ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        load(a_tiles[s], ptx.addr(A.tma_desc(), coords=(kb * BK, m0)), full[s])
        load(b_tiles[s], ptx.addr(B.tma_desc(), coords=(kb * BK, n0)), full[s])


@kernel(block=(3 * WG, 1, 1), arch="sm_90a", **_SPECS)
def ws_gemm(A, B, C):
    """TMA producer warpgroup + two wgmma consumer warpgroups (module docstring)."""
    M, K = A.shape
    N = B.shape[0]
    a_tiles, b_tiles, full, empty = _ring()
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        for s in range(STAGES):
            ptx.mbarrier.init.shared.b64(full[s], 1)
            ptx.mbarrier.init.shared.b64(empty[s], 2 * WG)     # every consumer thread arrives
        ptx.fence.mbarrier_init.release.cluster()
    ptx.bar.sync(0)
    m0, n0 = ptx.special.ctaid.y() * BM, ptx.special.ctaid.x() * BN
    wg = tid // WG
    with ptx.if_(tid == 0):
        _produce(A, B, a_tiles, b_tiles, full, empty, m0, n0, K // BK)
    with ptx.if_(wg != 0):
        acc = reg.array(f32, BN // 2)
        for r in acc:
            r.set(0.0)
        a_rows = ptx.cvt.u64.u32((wg - 1) * (64 * BK * 2 // 16))   # this warpgroup's 64 rows, 16-byte units
        for kb in range(K // BK):
            s, lap = kb % STAGES, kb // STAGES
            _wait(full[s], lap & 1)
            da, db = a_tiles[s].desc() + a_rows, b_tiles[s].desc()
            ptx.wgmma.fence.sync.aligned()
            for kk in range(BK // 16):          # K steps of 16 = 32 bytes along the swizzled row
                ptx.wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16(
                    acc, da + 2 * kk, db + 2 * kk, 1, 1, 1, 0, 0)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(0)
            ptx.mbarrier.arrive.shared.b64(ptx.SINK, empty[s])
        # D fragment (PTX ISA, wgmma m64nNk16 D): warp w rows 16w + lane/4 (+8),
        # columns 8j + 2 (lane % 4) (+1) in registers 4j..4j+3.
        lane, warp = tid % 32, (tid % WG) // 32
        row = m0 + (wg - 1) * 64 + warp * 16 + lane // 4
        base = C.ptr + ptx.mul.wide.u32(row * N + n0 + (lane % 4) * 2, 4)
        for j in range(BN // 8):
            ptx.st.global_.v2.f32(base + j * 32, (acc[4 * j], acc[4 * j + 1]))
            ptx.st.global_.v2.f32(base + (8 * N + 8 * j) * 4, (acc[4 * j + 2], acc[4 * j + 3]))


@kernel(block=(128, 1, 1), arch="sm_100a", **_SPECS)
def tc_gemm(A, B, C):
    """TMA producer thread + tcgen05.mma issuer thread, accumulator in tensor memory."""
    M, K = A.shape
    N = B.shape[0]
    a_tiles, b_tiles, full, empty = _ring()
    done = smem.mbarrier(1)
    slot = smem.alloc(u32, (1,))
    tid = ptx.special.tid.x()
    warp = tid // 32
    with ptx.if_(warp == 0):
        ptx.tcgen05.alloc.cta_group__1.sync.aligned.shared__cta.b32(slot[0], BN)
    with ptx.if_(tid == 0):
        for s in range(STAGES):
            ptx.mbarrier.init.shared.b64(full[s], 1)
            ptx.mbarrier.init.shared.b64(empty[s], 1)          # one tcgen05.commit per stage
        ptx.mbarrier.init.shared.b64(done[0], 1)
        ptx.fence.mbarrier_init.release.cluster()
    ptx.tcgen05.fence__before_thread_sync()
    ptx.bar.sync(0)
    ptx.tcgen05.fence__after_thread_sync()
    tmem = ptx.ld.shared.b32(slot[0])
    m0, n0 = ptx.special.ctaid.y() * BM, ptx.special.ctaid.x() * BN
    with ptx.if_(tid == 0):
        _produce(A, B, a_tiles, b_tiles, full, empty, m0, n0, K // BK)
    with ptx.if_(tid == 32):
        idesc = reg.scalar(u32, TC_IDESC)
        for kb in range(K // BK):
            s, lap = kb % STAGES, kb // STAGES
            _wait(full[s], lap & 1)
            ptx.tcgen05.fence__after_thread_sync()
            da = ptx.cvt.u64.u32(ptx.shr.u32(a_tiles[s].base, 4)) | TC_SMEM_DESC
            db = ptx.cvt.u64.u32(ptx.shr.u32(b_tiles[s].base, 4)) | TC_SMEM_DESC
            for kk in range(BK // 16):
                accumulate = reg.pred(init=1 if kb or kk else 0)
                ptx.tcgen05.mma.cta_group__1.kind__f16(tmem, da + 2 * kk, db + 2 * kk, idesc, accumulate)
            ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(empty[s])
        ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(done[0])
    _wait(done[0], 0)
    ptx.tcgen05.fence__after_thread_sync()
    base = C.ptr + ptx.mul.wide.u32((m0 + tid) * N + n0, 4)     # thread t holds row t (lane t)
    for c in range(0, BN, 32):
        vals = reg.array(b32, 32)
        ptx.tcgen05.ld.sync.aligned._32x32b.x32.b32(vals, tmem + ((warp * 32) << 16) + c)
        ptx.tcgen05.wait__ld.sync.aligned()
        for j in range(0, 32, 4):
            ptx.st.global_.v4.b32(base + (c + j) * 4, tuple(vals[j:j + 4]))
    ptx.tcgen05.fence__before_thread_sync()
    ptx.bar.sync(0)
    with ptx.if_(warp == 0):
        ptx.tcgen05.dealloc.cta_group__1.sync.aligned.b32(tmem, BN)
        ptx.tcgen05.relinquish_alloc_permit.cta_group__1.sync.aligned()

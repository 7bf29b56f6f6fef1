"""The Hopper (sm_90a) mxfp8 GEMM: ``C[g] = (A[g] * sa) @ (B[g] * sb)ᵀ`` with
FP8 ``wgmma`` and the block scales applied in registers.

A is (G, M, K) and B is (G, N, K) FP8 bytes (e4m3 or e5m2), both K-major as
FP8 ``wgmma`` requires; C is (G, M, N) float32. The scales come as f32
images (G, tiles, stages, 4, 128): per 128-row tile and K stage, the four
32-wide blocks' scales of the tile's rows (:func:`scale_image_f32`). One
CTA of 384 threads computes a 128 x 128 tile of C:

* warpgroup 0 (thread 0) produces: per K stage of 128 bytes, A's and B's
  128 x 128-byte boxes by TMA (128-byte swizzle, out-of-bounds parts zero)
  and both scale images (2 KB each) by bulk copy, into a ring of ``STAGES``
  stages (:class:`~jaxptx.dsl.pipeline.Pipeline`);
* warpgroups 1 and 2 consume 64 rows each. Per 32-wide scale block, one
  ``wgmma.mma_async.m64n128k32`` into a partial accumulator with
  ``scale-d = 0`` (a fresh product of that block alone), then, when it has
  completed, ``acc += partial * sa[row] * sb[col]`` for every fragment
  element (PTX ISA, wgmma D fragment: register ``4j + i`` of lane ``l`` in
  warp ``w`` holds row ``16w + l/4 + 8 (i/2)``, column ``8j + 2 (l%4) +
  i%2``). Two partial accumulators alternate, so the next block's
  ``wgmma`` runs while this block is scaled (``wgmma.wait_group 1``).
* the epilogue stores the tile with ``st.global.v2.f32``, rows and columns
  past M and N masked (the host pads N to an even count).
"""

from __future__ import annotations

import functools

from ..dsl import Kernel, Layout, Tile, kernel, ptx, reg, smem
from ..dsl.pipeline import Pipeline, PipelineState, role
from ..types import f32, u8, u32

__all__ = ["BLOCKS", "BM", "BN", "SPAN", "STAGES", "build"]

BM, BN = 128, 128
SPAN = 128                    # K bytes (FP8 values) a row per stage
BLOCK = 32                    # values per scale block: one wgmma k32
BLOCKS = SPAN // BLOCK        # scale blocks per stage
STAGES = 4
WG = 128
CONSUMERS = 2
ROWS = BM // CONSUMERS        # rows per consumer warpgroup
TILE_BYTES = BM * SPAN
SCALE_BYTES = BLOCKS * BM * 4


def _consume(C, a_tile, b_tile, s_ring, pipe: Pipeline, m0, n0, g, kblocks: int, mma) -> None:
    """A consumer warpgroup: the K loop (module docstring), then the masked store."""
    M, N = C.shape[1], C.shape[2]
    tid = ptx.special.tid.x()
    wg = (tid >> 7) - 1
    local = tid & (WG - 1)
    lane, warp = tid & 31, local >> 5
    row = wg * ROWS + warp * 16 + (lane >> 2)          # this thread's first row in the tile
    col = (lane & 3) * 2                               # its first column in each group of 8
    a_desc0 = a_tile.matrix_desc() + ptx.cvt.u64.u32(wg * (a_tile.offset_bytes(mn=ROWS) >> 4))
    b_desc0 = b_tile.matrix_desc()
    acc = reg.array(f32, BN // 2)
    parts = (reg.array(f32, BN // 2), reg.array(f32, BN // 2))
    for r in acc:
        r.set(0.0)
    is_lane0 = lane == 0

    def scale_into(part, s, blk: int) -> None:
        """acc += part * sa[row, blk] * sb[col, blk], reading stage ``s``'s scales."""
        at = s_ring.base + s * (2 * SCALE_BYTES) + blk * (BM * 4)
        sa = (ptx.ld.shared.f32(ptx.addr(at + row * 4)), ptx.ld.shared.f32(ptx.addr(at + (row + 8) * 4)))
        sb_at = at + SCALE_BYTES + col * 4
        for j in range(BN // 8):
            sb = ptx.ld.shared.v2.f32(ptx.addr(sb_at, 32 * j))
            for i in range(4):
                w = ptx.mul.rn.f32(sa[i // 2], sb[i % 2])
                acc[4 * j + i].set(ptx.fma.rn.f32(part[4 * j + i], w, acc[4 * j + i]))

    # Block b's wgmma goes out, then block b - 1 (the other partial) is
    # waited for and scaled; its stage is released after its last block.
    prev_stage = reg.scalar(u32, 0)
    lag = PipelineState(STAGES, phase=0)           # the release cursor, one stage behind
    for kb in ptx.range_(0, kblocks, dtype=u32):
        s = pipe.wait_full()
        da = a_desc0 + ptx.cvt.u64.u32(s * (TILE_BYTES >> 4))
        db = b_desc0 + ptx.cvt.u64.u32(s * (TILE_BYTES >> 4))
        for blk in range(BLOCKS):
            part = parts[blk % 2]
            ptx.wgmma.fence.sync.aligned()
            mma(part, da + (a_tile.offset_bytes(k=BLOCK * blk) >> 4),
                db + (b_tile.offset_bytes(k=BLOCK * blk) >> 4), 0, 1, 1)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(1)
            if blk == 0:
                with ptx.if_(kb > 0):                   # the last block of the previous stage
                    scale_into(parts[1], prev_stage, BLOCKS - 1)
                    ptx.bar.warp.sync(0xFFFFFFFF)
                    pipe.release(pred=is_lane0, state=lag)
            else:
                scale_into(parts[(blk - 1) % 2], s, blk - 1)
        prev_stage.set(s)
        pipe.consumer.advance()
    ptx.wgmma.wait_group.sync.aligned(0)
    scale_into(parts[1], prev_stage, BLOCKS - 1)
    _store(C, acc, m0 + row, n0 + col, g, M, N)


def _store(C, acc, r0, c0, g, M: int, N: int) -> None:
    """``st.global.v2.f32`` of each fragment pair, masked by row and column."""
    base = C.ptr + ptx.mul.wide.u32(g, M * N * 4)
    for half in range(2):
        r = r0 + 8 * half
        row_at = base + ptx.mul.wide.u32(r, N * 4)
        for j in range(BN // 8):
            c = c0 + 8 * j
            ok = ptx.and_.pred(r < M, c < N)
            ptx.st.global_.v2.f32(ptx.addr(row_at + ptx.mul.wide.u32(c, 4)),
                                  (acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]), pred=ok)


def _body(A, B, SA, SB, C, *, a_type: str, b_type: str) -> None:
    kblocks = -(-A.shape[2] // SPAN)
    _, MT, KS, _, _ = SA.shape
    NT = SB.shape[1]
    a_tiles = [smem.tma_tile(A, major="K") for _ in range(STAGES)]
    b_tiles = [smem.tma_tile(B, major="K") for _ in range(STAGES)]
    s_ring = smem.alloc(u8, (STAGES, 2 * SCALE_BYTES), align=128)
    pipe = Pipeline(STAGES, consumer_arrivals=CONSUMERS * WG // 32)
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        pipe.init()
    ptx.bar.sync(0)
    mt, nt, g = ptx.special.ctaid.x(), ptx.special.ctaid.y(), ptx.special.ctaid.z()
    m0, n0 = mt * BM, nt * BN
    mma = getattr(getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k32").f32, a_type)
    mma = getattr(mma, b_type)
    with role(0, dec=40):
        with ptx.if_(tid == 0):
            load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
            copy = ptx.cp.async_.bulk.shared__cluster.global_.mbarrier__complete_tx__bytes
            sa_row = SA.ptr + ptx.mul.wide.u32((g * MT + mt) * KS, SCALE_BYTES)
            sb_row = SB.ptr + ptx.mul.wide.u32((g * NT + nt) * KS, SCALE_BYTES)
            for kb in ptx.range_(0, kblocks, dtype=u32):
                s = pipe.wait_empty()
                bar = pipe.arm(2 * TILE_BYTES + 2 * SCALE_BYTES)
                k0 = kb * SPAN
                load(ptx.addr(a_tiles[0].base + s * TILE_BYTES), ptx.addr(A.tma_desc(), coords=(k0, m0, g)), bar)
                load(ptx.addr(b_tiles[0].base + s * TILE_BYTES), ptx.addr(B.tma_desc(), coords=(k0, n0, g)), bar)
                at = s_ring.base + s * (2 * SCALE_BYTES)
                step = ptx.mul.wide.u32(kb, SCALE_BYTES)
                copy(ptx.addr(at), ptx.addr(sa_row + step), SCALE_BYTES, bar)
                copy(ptx.addr(at + SCALE_BYTES), ptx.addr(sb_row + step), SCALE_BYTES, bar)
                pipe.producer.advance()
    with role((1, 1 + CONSUMERS), inc=232):
        _consume(C, a_tiles[0], b_tiles[0], s_ring, pipe, m0, n0, g, kblocks, mma)


def _grid(G: int, M: int, N: int) -> tuple[int, int, int]:
    return (-(-M // BM), -(-N // BN), G)


@functools.cache
def build(a_type: str, b_type: str) -> Kernel:
    """The kernel for FP8 element types ``a_type`` and ``b_type`` (``e4m3``
    or ``e5m2``), built once. Inputs: A (G, M, K) and B (G, N, K) uint8, the
    f32 scale images SA (G, MT, KS, 4, 128) and SB (G, NT, KS, 4, 128);
    output C (G, M, N) float32 (N even)."""
    data = {"layout": Layout.TMA_128B, "tma_box": (1, BM, SPAN)}

    def body(A, B, SA, SB, C):
        _body(A, B, SA, SB, C, a_type=a_type, b_type=b_type)

    body.__doc__ = f"mxfp8 wgmma GEMM, {a_type} x {b_type} (jaxptx.kernels._scaled_sm90)."
    return kernel(body, name=f"scaled_matmul_sm90_{a_type}_{b_type}", grid=_grid,
                  block=((1 + CONSUMERS) * WG, 1, 1), arch="sm_90a", extern_smem=True,
                  in_specs=(Tile("G", "M", "K", u8, **data), Tile("G", "N", "K", u8, **data),
                            Tile("G", "MT", "KS", 4, 128, f32), Tile("G", "NT", "KS", 4, 128, f32)),
                  out_specs=(Tile("G", "M", "N", f32),))

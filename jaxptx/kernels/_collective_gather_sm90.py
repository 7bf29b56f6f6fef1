"""The all-gather matmul on Hopper: the rows travel as in
:mod:`._collective_gather`; the GEMM is TMA + ``wgmma``, warp-specialised.

CTA ``(j, i)`` (384 threads): warpgroup 0's thread 0 produces, warpgroups
1 and 2 consume 64 rows each of the 128 x 128 tile with
``wgmma.mma_async.m64n128k16`` (A K-major, B MN-major as in
:mod:`._matmul_sm90`), over a ring of ``STAGES`` 128B-swizzled stages
(:class:`~jaxptx.dsl.pipeline.Pipeline`). One pipeline runs through every
shard, ``step = 0 .. W-1``, shard ``s = (rank + step) % W``:

* the producer loads A from ``x`` (a 2-d tensor map) at step 0; at later
  steps it first waits for the row block's arrival slot (``ld.acquire.sys``)
  and then issues ``fence.proxy.async.global``: the rows arrived through
  the generic proxy (peers' ``st.global``) and TMA reads through the async
  proxy. It loads them from ``xg`` viewed as (W, R, K) with a (1, 128, 64)
  box, so a partial block reads zeros past row R, never the next shard.
* the consumers store each finished tile straight from the ``wgmma``
  fragments (``st.global.v2.f32``, rows < R and columns < N) into ``out``
  viewed as (W, R, N).
"""

from __future__ import annotations

import functools

from ..dsl import Kernel, Layout, Reg, TensorArg, Tile, kernel, ptx, reg, smem
from ..dsl.pipeline import Pipeline, role
from ..dsl.smem import SmemArray
from ..types import bf16, f16, f32, s32, u32
from ._collective_gather import GatherPlan, push_rows, start, wait_rows

__all__ = ["BK", "BM", "BN", "STAGES", "gather_kernel_sm90", "layout_sm90"]

BM, BN, BK, STAGES = 128, 128, 64, 4
WG = 128
CONSUMERS = 2
SPAN = 64                       # 16-bit elements in one 128-byte swizzle row
THREADS = (1 + CONSUMERS) * WG
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2


def layout_sm90(R: int, K: int, N: int, W: int) -> GatherPlan:
    """The grid and flag slots of a call (tile 128 x 128)."""
    return GatherPlan(R, K, N, W, BM, BN)


def _body(x: TensorArg, w: TensorArg, flag: TensorArg, xg: TensorArg, out: TensorArg) -> None:
    R, K = x.shape
    N = w.shape[1]
    lay = layout_sm90(R, K, N, ptx.world_size())
    kblocks = -(-K // BK)
    a_tiles = [smem.tma_tile(x, major="K") for _ in range(STAGES)]
    b_tiles = [smem.tma_tile(w, major="MN", boxes=BN // SPAN) for _ in range(STAGES)]
    a_stride, b_stride = a_tiles[0].nbytes, b_tiles[0].nbytes
    pipe = Pipeline(STAGES, consumer_arrivals=CONSUMERS * WG // 32)
    tid = ptx.special.tid.x()
    j, i = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    with ptx.if_(tid == 0):
        pipe.init()
    start(flag, lay, j, i)          # its bar.sync also publishes the barriers' init
    push_rows(x, xg, flag, lay, j, i, THREADS)
    rank = ptx.rank()
    m0, n0 = ptx.cvt.s32.u32(i * BM), ptx.cvt.s32.u32(j * BN)

    with role(0, dec=40), ptx.if_(tid == 0):
        load = ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        load3 = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        for step in ptx.range_(0, lay.W, dtype=u32):
            shard = ptx.rem.u32(rank + step, lay.W)
            mine = step == 0
            with ptx.if_(step > 0):
                wait_rows(flag, lay, shard, i)
                ptx.fence.proxy.async_.global_()
            shard_s = ptx.cvt.s32.u32(shard)
            for kb in ptx.range_(0, kblocks, dtype=s32):
                s = pipe.wait_empty()
                bar = pipe.arm(A_BYTES + B_BYTES)
                k0 = kb * BK
                a_dst = ptx.addr(a_tiles[0].base + s * a_stride)
                with ptx.if_(mine):
                    load(a_dst, ptx.addr(x.tma_desc(), coords=(k0, m0)), bar)
                with ptx.if_(step > 0):
                    load3(a_dst, ptx.addr(xg.tma_desc(), coords=(k0, m0, shard_s)), bar)
                for h in range(BN // SPAN):
                    load(ptx.addr(b_tiles[0].base + s * b_stride + h * (BK * 128)),
                         ptx.addr(w.tma_desc(), coords=(n0 + h * SPAN, k0)), bar)
                pipe.producer.advance()

    with role((1, 1 + CONSUMERS), inc=232):
        _consume(out, a_tiles[0], b_tiles[0], a_stride, b_stride, pipe, lay, kblocks, rank, tid, i, j)


def _consume(out: TensorArg, a_tile: SmemArray, b_tile: SmemArray, a_stride: int, b_stride: int,
             pipe: Pipeline, lay: GatherPlan, kblocks: int, rank: Reg, tid: Reg, i: Reg, j: Reg) -> None:
    """wgmma over every shard's K loop; each tile stored from the fragments."""
    wg = (tid >> 7) - 1
    lane, warp = tid & 31, (tid & (WG - 1)) >> 5
    R, N = lay.R, lay.N
    a_desc0 = a_tile.matrix_desc() + ptx.cvt.u64.u32(wg * (a_tile.offset_bytes(mn=BM // CONSUMERS) >> 4))
    b_desc0 = b_tile.matrix_desc()
    kind = "f16" if a_tile.dtype.name == "f16" else "bf16"
    mma = getattr(getattr(getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k16").f32, kind), kind)
    acc = reg.array(f32, BN // 2)
    # PTX ISA, wgmma D fragment: warp w rows 16w + lane/4 (+8), columns
    # 8c + 2 (lane % 4) (+1) in registers 4c..4c+3.
    row = i * BM + wg * (BM // CONSUMERS) + warp * 16 + (lane >> 2)
    col = j * BN + (lane & 3) * 2
    col_ok = [col < N - 8 * c if N > 8 * c else None for c in range(BN // 8)]
    for step in ptx.range_(0, lay.W, dtype=u32):
        shard = ptx.rem.u32(rank + step, lay.W)
        for r in acc:
            r.set(0.0)
        for kb in ptx.range_(0, kblocks, dtype=s32):
            s = pipe.wait_full()
            da = a_desc0 + ptx.cvt.u64.u32(s * (a_stride >> 4))
            db = b_desc0 + ptx.cvt.u64.u32(s * (b_stride >> 4))
            ptx.wgmma.fence.sync.aligned()
            for kk in range(BK // 16):
                mma(acc, da + (a_tile.offset_bytes(k=16 * kk) >> 4),
                    db + (b_tile.offset_bytes(k=16 * kk) >> 4), 1, 1, 1, 0, 1)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(0)
            ptx.bar.warp.sync(0xFFFFFFFF)
            pipe.release(pred=lane == 0)
        base = out.ptr + ptx.mul.wide.u32((shard * R + row.min(R - 1)) * N + col.min(N - 2), 4)
        for half in range(2):
            ok_row = row < R - 8 * half if R > 8 * half else None
            if ok_row is None:
                continue
            for c in range(BN // 8):
                if col_ok[c] is None:
                    continue
                ptx.st.global_.v2.f32(ptx.addr(base, (8 * half * N + 8 * c) * 4),
                                      (acc[4 * c + 2 * half], acc[4 * c + 2 * half + 1]),
                                      pred=ptx.and_.pred(ok_row, col_ok[c]))


@functools.cache
def gather_kernel_sm90(dtype: str) -> Kernel:
    """The sm_90a all-gather matmul for ``dtype`` ("bf16" or "f16"):
    ``(x (R, K), w (K, N), flag (F,) u32, xg (W, R, K)) -> out (W, R, N) f32``."""
    t = {"bf16": bf16, "f16": f16}[dtype]

    def fn(x: TensorArg, w: TensorArg, flag: TensorArg, xg: TensorArg, out: TensorArg) -> None:
        _body(x, w, flag, xg, out)
    fn.__name__ = fn.__qualname__ = f"all_gather_matmul_sm90_{dtype}"
    fn.__doc__ = "out = all_gather(x) @ w, the gather overlapped with the wgmma GEMM (module docstring)."
    return kernel(fn, in_specs=(Tile("R", "K", t, Layout.TMA_128B, tma_box=(BM, BK)),
                                Tile("K", "N", t, Layout.TMA_128B, tma_box=(BK, SPAN)),
                                Tile("F", u32),
                                Tile("W", "R", "K", t, Layout.TMA_128B, tma_box=(1, BM, BK))),
                  out_specs=(Tile("W", "R", "N", f32),), grid=_grid, block=(THREADS, 1, 1),
                  arch="sm_90a", extern_smem=True, peers=("flag", "xg"))


def _grid(R: int, N: int) -> tuple[int, int, int]:
    return (-(-N // BN), -(-R // BM), 1)

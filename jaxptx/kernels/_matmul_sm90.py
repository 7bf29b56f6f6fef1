"""The Hopper (sm_90a) GEMM: ``C[g] = A[g] @ B[g]`` for bf16 or f16 (G, M, K)
and (G, K, N) operands, f32 (G, M, N) out, in one launch.

Design (each part a DSL helper of its own):

* **TMA loads** through 3-d tensor maps (G, rows, cols), so groups need no
  reshape: A's (1, 128, 64) box and B's (1, 64, 64) boxes land in
  128-byte-swizzled shared tiles; out-of-bounds parts of a box read as
  zeros, so M, N and K need not be multiples of the tile.
* A :class:`~jaxptx.dsl.pipeline.Pipeline` of ``STAGES`` full/empty mbarrier
  pairs; the stage and phase are loop-carried registers.
* **Warp roles** (:func:`~jaxptx.dsl.pipeline.role`): warpgroup 0 gives
  registers back (``setmaxnreg.dec``) and its thread 0 produces; warpgroups
  1 and 2 take them (``setmaxnreg.inc``) and consume 64 rows each with
  ``wgmma.mma_async.m64n128k16`` from shared-memory descriptors: A K-major,
  B MN-major (B is K×N row-major: the transpose bit, no host transpose).
* A **2×1 cluster**: its two CTAs take M tiles ``2p`` and ``2p + 1`` of the
  same N tile; each loads its own A tile and half of the shared B tile,
  which it **multicasts** to both CTAs (``.multicast::cluster``). So the
  empty barriers count releases from both CTAs' consumers (local and
  ``mapa``-mapped remote arrivals) and the full barrier expects the whole
  stage, whoever's copies bring it.
* A **persistent tile scheduler**: the grid is (at most) ``sms`` CTAs; cluster
  ``c`` walks the (g, M pair, N tile) space from ``c`` in steps of the
  number of clusters, the producer running ahead into the next tile while
  the consumers store the last.
* A **TMA store epilogue**: each consumer warpgroup writes its 64 x 128
  accumulator to shared memory, as four 128B-swizzled 64 x 32 blocks (no
  bank conflicts), and one thread stores them with ``cp.async.bulk.tensor``
  (out-of-bounds rows and columns are clipped).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import numpy as np

from ..dsl import Kernel, Layout, Reg, TensorArg, Tile, kernel, ptx, reg, smem
from ..dsl.smem import SmemArray
from ..dsl.pipeline import Pipeline, PipelineState, role
from ..errors import SpecError
from ..types import bf16, f16, f32, s32

__all__ = ["matmul_sm90", "gemm_kernel", "BM", "BN", "BK", "STAGES", "SMS"]

BM, BN, BK, STAGES = 128, 128, 64, 4
WG = 128                        # threads per warpgroup
CONSUMERS = 2                   # consumer warpgroups, 64 rows of the tile each
CLUSTER = 2                     # CTAs per cluster (along grid x)
SPAN = 64                       # 16-bit elements in one 128-byte swizzle row
SMS = 132                       # H100 SXM streaming multiprocessors: the persistent grid
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2
C_ROWS = BM // CONSUMERS
C_COLS = 32                     # f32 columns in one 128-byte swizzle row: one store box
C_BLOCK_BYTES = C_ROWS * 128


def _grid(G: int, M: int, N: int, sms: int) -> tuple[int, int, int]:
    """Two CTAs per cluster; at most ``sms`` CTAs, at most one cluster per tile pair."""
    return (CLUSTER * min(_cluster_tiles(G, M, N), max(1, sms // CLUSTER)), 1, 1)


def _cluster_tiles(G: int, M: int, N: int) -> int:
    return G * math.ceil(math.ceil(M / BM) / CLUSTER) * math.ceil(N / BN)


def _contiguous(tiles: list[SmemArray]) -> int:
    """The byte stride of a ring of equal shared tiles declared one after
    another (their stage is a register: one base plus stage x stride)."""
    stride = tiles[0].nbytes
    assert all(t.symbol == tiles[0].symbol and t.offset == tiles[0].offset + i * stride
               for i, t in enumerate(tiles)), "ring tiles are not contiguous"
    return stride


def _body(A: TensorArg, B: TensorArg, C: TensorArg, *, sms: int = SMS) -> None:
    G, M, K = A.shape
    N = B.shape[2]
    n_tiles, pairs = math.ceil(N / BN), math.ceil(math.ceil(M / BM) / CLUSTER)
    total = G * pairs * n_tiles
    clusters = _grid(G, M, N, sms)[0] // CLUSTER
    kblocks = math.ceil(K / BK)
    a_tiles = [smem.tma_tile(A, major="K") for _ in range(STAGES)]                     # 128 x 64
    b_tiles = [smem.tma_tile(B, major="MN", boxes=BN // SPAN) for _ in range(STAGES)]  # 64 x 128
    a_stride, b_stride = _contiguous(a_tiles), _contiguous(b_tiles)
    c_stage = smem.alloc(f32, (CONSUMERS, C_ROWS, BN), align=1024)
    # Every consumer warp of both CTAs releases each stage once (lane 0).
    pipe = Pipeline(STAGES, consumer_arrivals=CLUSTER * CONSUMERS * WG // 32)
    tid = ptx.special.tid.x()
    rank = ptx.special.cluster_ctarank()
    with ptx.if_(tid == 0):
        pipe.init()
    ptx.barrier.cluster.arrive.release()     # the peer's barriers exist before we multicast
    ptx.barrier.cluster.wait.acquire()
    first = ptx.cvt.s32.u32(ptx.special.clusterid.x())
    rank_s = ptx.cvt.s32.u32(rank)

    def tile_origin(t: Reg) -> tuple[Reg, Reg, Reg]:
        """(g, m0, n0) of this CTA's part of cluster tile ``t``."""
        n = t % n_tiles
        rest = t // n_tiles
        return rest // pairs, ((rest % pairs) * CLUSTER + rank_s) * BM, n * BN

    with role(0, dec=40):
        with ptx.if_(tid == 0):
            a0, b0 = a_tiles[0].base, b_tiles[0].base + rank * (BK * 128)
            load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
            for t in ptx.range_(first, total, clusters, dtype=s32):
                g, m0, n0 = tile_origin(t)
                n_half = n0 + rank_s * SPAN
                for kb in ptx.range_(0, kblocks, dtype=s32):
                    s = pipe.wait_empty()
                    bar = pipe.arm(A_BYTES + B_BYTES)
                    k0 = kb * BK
                    load(ptx.addr(a0 + s * a_stride), ptx.addr(A.tma_desc(), coords=(k0, m0, g)), bar)
                    load.multicast__cluster(ptx.addr(b0 + s * b_stride),
                                            ptx.addr(B.tma_desc(), coords=(n_half, k0, g)), bar,
                                            (1 << CLUSTER) - 1)
                    pipe.producer.advance()

    with role((1, 1 + CONSUMERS), inc=232):
        _consume(C, a_tiles[0], b_tiles[0], a_stride, b_stride, c_stage, pipe, tile_origin,
                 first, total, clusters, kblocks, rank, tid)

    ptx.barrier.cluster.arrive.release()     # no CTA leaves while its peer may still signal it
    ptx.barrier.cluster.wait.acquire()


def _consume(C: TensorArg, a_tile: SmemArray, b_tile: SmemArray, a_stride: int, b_stride: int,
             c_stage: SmemArray, pipe: Pipeline, tile_origin: Callable[[Reg], tuple[Reg, Reg, Reg]],
             first: Reg, total: int, clusters: int, kblocks: int, rank: Reg, tid: Reg) -> None:
    """The consumer warpgroups: wgmma over the K loop, then the TMA-store epilogue."""
    wg = (tid >> 7) - 1
    local = tid & (WG - 1)
    lane, warp = tid & 31, local >> 5
    peer = rank ^ 1
    is_lane0 = lane == 0
    is_leader = local == 0
    a_desc0 = a_tile.matrix_desc() + ptx.cvt.u64.u32(wg * (a_tile.offset_bytes(mn=C_ROWS) >> 4))
    b_desc0 = b_tile.matrix_desc()
    kind = "f16" if a_tile.dtype.name == "f16" else "bf16"
    mma = getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k16").f32
    mma = getattr(getattr(mma, kind), kind)
    c_rows = c_stage.base + wg * (C_ROWS * BN * 4)
    # D fragment (PTX ISA, wgmma D): warp w rows r = 16w + lane/4 (+8), columns
    # 8j + 2 (lane % 4) (+1) in registers 4j..4j+3. The staging tile is
    # BN / C_COLS blocks of 32 columns (128 bytes), 128B-swizzled as the TMA
    # store reads it: 16-byte chunk q of row r sits at chunk q ^ (r % 8).
    # Columns 8j + 2 (lane % 4) are chunk 2 (j % 4) + (lane % 4) / 2, so the
    # swizzled chunk is 2 (j % 4) ^ y with y = (lane % 4) / 2 ^ (lane / 4) % 8.
    y = ((lane & 3) >> 1) ^ ((lane >> 2) & 7)
    c_row = c_rows + (warp * 16 + (lane >> 2)) * 128 + (lane & 1) * 8
    c_at = [c_row + (y ^ (2 * jj)) * 16 for jj in range(4)]
    acc = reg.array(f32, BN // 2)
    lag = PipelineState(STAGES, phase=0)

    def release() -> None:
        """Lane 0 of each warp frees the lagging stage here and in the peer
        CTA, after a warp barrier that orders its lanes' wgmma reads first."""
        ptx.bar.warp.sync(0xFFFFFFFF)
        pipe.release(advance=False, pred=is_lane0, state=lag)
        pipe.release(cta=peer, pred=is_lane0, state=lag)
    for t in ptx.range_(first, total, clusters, dtype=s32):
        g, m0, n0 = tile_origin(t)
        for r in acc:
            r.set(0.0)
        # One K block's wgmma group stays in flight: after issuing block kb,
        # wait for block kb - 1 and release its stage (the lagging cursor).
        for kb in ptx.range_(0, kblocks, dtype=s32):
            s = pipe.wait_full()
            da = a_desc0 + ptx.cvt.u64.u32(s * (a_stride >> 4))
            db = b_desc0 + ptx.cvt.u64.u32(s * (b_stride >> 4))
            ptx.wgmma.fence.sync.aligned()
            for kk in range(BK // 16):
                mma(acc, da + (a_tile.offset_bytes(k=16 * kk) >> 4),
                    db + (b_tile.offset_bytes(k=16 * kk) >> 4), 1, 1, 1, 0, 1)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(1)
            pipe.consumer.advance()
            with ptx.if_(kb > 0):
                release()
        ptx.wgmma.wait_group.sync.aligned(0)
        release()
        # Epilogue: the last tile's store must have read c_stage before we overwrite it.
        with ptx.if_(is_leader):
            ptx.cp.async_.bulk.wait_group.read(0)
        ptx.bar.sync(1 + wg, WG)
        for j in range(BN // 8):
            at, block = c_at[j % 4], (j // 4) * C_BLOCK_BYTES
            ptx.st.shared.v2.f32(ptx.addr(at, block), (acc[4 * j], acc[4 * j + 1]))
            ptx.st.shared.v2.f32(ptx.addr(at, block + 8 * 128), (acc[4 * j + 2], acc[4 * j + 3]))
        ptx.fence.proxy.async_.shared__cta()
        ptx.bar.sync(1 + wg, WG)
        with ptx.if_(is_leader):
            row0 = m0 + wg * C_ROWS
            for cb in range(BN // C_COLS):
                ptx.cp.async_.bulk.tensor._3d.global_.shared__cta.tile.bulk_group(
                    ptx.addr(C.tma_desc(), coords=(n0 + cb * C_COLS, row0, g)),
                    ptx.addr(c_rows, cb * C_BLOCK_BYTES))
            ptx.cp.async_.bulk.commit_group()
    with ptx.if_(is_leader):
        ptx.cp.async_.bulk.wait_group(0)


@functools.cache
def gemm_kernel(dtype_name: str) -> Kernel:
    """The ``@kernel`` for ``bf16`` or ``f16`` operands (template ``sms``:
    the persistent grid's CTA budget)."""
    t = {"bf16": bf16, "f16": f16}[dtype_name]

    def body(A: TensorArg, B: TensorArg, C: TensorArg, *, sms: int = SMS) -> None:
        _body(A, B, C, sms=sms)
    body.__name__ = body.__qualname__ = f"matmul_sm90_{dtype_name}"   # the entry's and primitive's name
    body.__doc__ = f"``C[g] = A[g] @ B[g]`` for {dtype_name} operands (module docstring)."
    return kernel(
        body,
        in_specs=(Tile("G", "M", "K", t, Layout.TMA_128B, tma_box=(1, BM, BK)),
                  Tile("G", "K", "N", t, Layout.TMA_128B, tma_box=(1, BK, SPAN))),
        out_specs=(Tile("G", "M", "N", f32, Layout.TMA_128B, tma_box=(1, C_ROWS, C_COLS)),),
        grid=_grid, block=((1 + CONSUMERS) * WG, 1, 1), cluster=(CLUSTER, 1, 1),
        arch="sm_90a", extern_smem=True)


def matmul_sm90(a: jax.Array, b: jax.Array, *, sms: int = SMS) -> jax.Array:
    """``a @ b`` per group on Hopper: ``a`` (G, M, K), ``b`` (G, K, N), both
    bf16 or both f16, K and N multiples of 8 (TMA's 16-byte row strides);
    returns (G, M, N) float32, one kernel launch.

    ``sms`` bounds the persistent grid (CTAs; 132 on an H100 SXM).

    Example::

        c = matmul_sm90(a, b)        # a: (2, 1000, 512) bf16, b: (2, 512, 384) bf16

    Raises:
        SpecError: wrong ranks, group counts, inner dims, dtypes, or K/N not
            multiples of 8.
    """
    if a.ndim != 3 or b.ndim != 3:
        raise SpecError(f"matmul_sm90: expected (G, M, K) and (G, K, N), got {a.shape} and {b.shape}")
    (g, m, k), (g2, k2, n) = a.shape, b.shape
    if g != g2 or k != k2:
        raise SpecError(f"matmul_sm90: shapes {a.shape} and {b.shape} do not match as (G, M, K) @ (G, K, N)")
    names = {np.dtype(a.dtype).name, np.dtype(b.dtype).name}
    if len(names) != 1 or not names <= {"bfloat16", "float16"}:
        raise SpecError(f"matmul_sm90: expected both bf16 or both f16, got {a.dtype} and {b.dtype}")
    if k % 8 or n % 8:
        raise SpecError(f"matmul_sm90: K ({k}) and N ({n}) must be multiples of 8 (TMA row strides)")
    return gemm_kernel("bf16" if names == {"bfloat16"} else "f16")(a, b, sms=sms)

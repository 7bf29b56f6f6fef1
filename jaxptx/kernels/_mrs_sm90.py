"""matmul_reduce_scatter on Hopper (sm_90a): TMA + ``wgmma`` tiles sent to
their owners as they finish.

The work split and the hand-off are the sm_80 variant's (:mod:`._mrs_sm80`,
:mod:`._mrs_protocol`): CTA ``(j, i)`` computes tile position ``t = i * Tn
+ j`` of every owner's slice in ring order, its own last. The GEMM is the
library's Hopper design (:mod:`._matmul_sm90`) without the cluster:

* ``x`` is viewed as (W, Ms, K/W), one group per owner, so a TMA box of an
  owner's rows reads zeros past its slice; ``w`` as (1, K/W, N);
* a :class:`~jaxptx.dsl.pipeline.Pipeline` of ``STAGES`` mbarrier pairs;
  warpgroup 0's thread 0 produces (two 64-column B boxes per stage), and
  warpgroups 1 and 2 consume 64 rows each with ``wgmma.m64n128k16``, one K
  block's group in flight, over every owner's K loop in one walk of the
  ring;
* the epilogue stores the accumulator fragment straight to the owner's slot
  (``st.global.v2.f32`` to a peer address: a TMA store needs a tensor map
  of the peer's buffer), a named barrier over the consumers, and their
  leader's release flag.
"""

from __future__ import annotations

import functools
from typing import Any

from ..dsl import Kernel, Layout, TensorArg, Tile, kernel, ptx, reg, smem
from ..dsl.declarations import in_place
from ..dsl.pipeline import Pipeline, PipelineState, role
from ..types import bf16, f16, f32, s32, u32
from . import _mrs_protocol as proto
from ._matmul_sm90 import BK, BM, BN, SPAN, STAGES

__all__ = ["mrs_kernel"]

WG = 128
CONSUMERS = 2
ROWS = BM // CONSUMERS          # 64 rows per consumer warpgroup
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _grid(S: int, N: int) -> tuple[int, int, int]:
    return (_cdiv(N, BN), _cdiv(S, BM), 1)


def _produce(x: TensorArg, w: TensorArg, a0: Any, b0: Any, a_stride: int, b_stride: int,
             pipe: Pipeline, m0: Any, n0: Any, rank: Any, W: int, kblocks: int) -> None:
    """Thread 0: every owner's K blocks in ring order into the stage ring."""
    load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
    for step in ptx.range_(1, W + 1, dtype=u32):
        owner = ptx.cvt.s32.u32((rank + step) % W)
        for kb in ptx.range_(0, kblocks, dtype=s32):
            s = pipe.wait_empty()
            bar = pipe.arm(A_BYTES + B_BYTES)
            k0 = kb * BK
            load(ptx.addr(a0 + s * a_stride), ptx.addr(x.tma_desc(), coords=(k0, m0, owner)), bar)
            for q in range(BN // SPAN):
                load(ptx.addr(b0 + s * b_stride + q * (BK * 128)),
                     ptx.addr(w.tma_desc(), coords=(n0 + q * SPAN, k0, 0)), bar)
            pipe.producer.advance()


class _Consumer:
    """Warpgroups 1 and 2: wgmma over one owner's K loop into ``acc``."""

    def __init__(self, a_tile: Any, b_tile: Any, a_stride: int, b_stride: int, pipe: Pipeline,
                 kblocks: int, tid: Any) -> None:
        self.a_tile, self.b_tile, self.pipe, self.kblocks = a_tile, b_tile, pipe, kblocks
        self.a_stride, self.b_stride = a_stride, b_stride
        wg = (tid >> 7) - 1
        lane, warp = tid & 31, (tid & (WG - 1)) >> 5
        self.is_lane0 = lane == 0
        self.a_desc0 = a_tile.matrix_desc() + ptx.cvt.u64.u32(wg * (a_tile.offset_bytes(mn=ROWS) >> 4))
        self.b_desc0 = b_tile.matrix_desc()
        kind = "f16" if a_tile.dtype.name == "f16" else "bf16"
        mma = getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{BN}k16").f32
        self.mma = getattr(getattr(mma, kind), kind)
        self.lag = PipelineState(STAGES, phase=0)
        self.acc = reg.array(f32, BN // 2)
        # D fragment (PTX ISA, wgmma D): warp w of the warpgroup holds rows
        # 16w + lane/4 (+8), columns 8j + 2 (lane % 4) (+1) in registers 4j..4j+3.
        row = wg * ROWS + warp * 16 + (lane >> 2)
        pairs = [(self.acc[4 * j + 2 * h], self.acc[4 * j + 2 * h + 1], 8 * h, 8 * j)
                 for j in range(BN // 8) for h in range(2)]
        self.fragment = proto.Fragment(row, (lane & 3) << 1, pairs)

    def _release(self) -> None:
        ptx.bar.warp.sync(0xFFFFFFFF)      # the warp's wgmma reads of the stage come first
        self.pipe.release(pred=self.is_lane0, state=self.lag)

    def product(self) -> None:
        """``acc`` = the next owner's tile (the ring's next ``kblocks`` stages)."""
        for r in self.acc:
            r.set(0.0)
        for kb in ptx.range_(0, self.kblocks, dtype=s32):
            s = self.pipe.wait_full()
            da = self.a_desc0 + ptx.cvt.u64.u32(s * (self.a_stride >> 4))
            db = self.b_desc0 + ptx.cvt.u64.u32(s * (self.b_stride >> 4))
            ptx.wgmma.fence.sync.aligned()
            for kk in range(BK // 16):
                self.mma(self.acc, da + (self.a_tile.offset_bytes(k=16 * kk) >> 4),
                         db + (self.b_tile.offset_bytes(k=16 * kk) >> 4), 1, 1, 1, 0, 1)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(1)
            self.pipe.consumer.advance()
            with ptx.if_(kb > 0):
                self._release()
        ptx.wgmma.wait_group.sync.aligned(0)
        self._release()


def _body(x: TensorArg, w: TensorArg, slots_in: TensorArg, flags_in: TensorArg, out: TensorArg,
          slots: TensorArg, flags: TensorArg) -> None:
    _, S, K = x.shape
    N = w.shape[2]
    W = ptx.world_size()
    kblocks = _cdiv(K, BK)
    a_tiles = [smem.tma_tile(x, major="K") for _ in range(STAGES)]                     # 128 x 64
    b_tiles = [smem.tma_tile(w, major="MN", boxes=BN // SPAN) for _ in range(STAGES)]  # 64 x 128
    a_stride = a_tiles[1].offset - a_tiles[0].offset
    b_stride = b_tiles[1].offset - b_tiles[0].offset
    pipe = Pipeline(STAGES, consumer_arrivals=CONSUMERS * WG // 32)
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        pipe.init()
    ptx.bar.sync(0)
    rank = ptx.rank()
    m0 = ptx.special.ctaid.y() * BM
    n0 = ptx.special.ctaid.x() * BN

    with role(0, dec=40), ptx.if_(tid == 0):
        _produce(x, w, a_tiles[0].base, b_tiles[0].base, a_stride, b_stride, pipe,
                 ptx.cvt.s32.u32(m0), ptx.cvt.s32.u32(n0), rank, W, kblocks)

    with role((1, 1 + CONSUMERS), inc=232):
        tile = proto.Tile(m0, n0, ptx.special.ctaid.y() * _cdiv(N, BN) + ptx.special.ctaid.x(), S, N, W)
        epoch = ptx.ld.global_.u32(proto.flag_address(flags.ptr, tile, rank))
        parity, value = epoch & 1, epoch + 1
        leader = tid == WG
        cons = _Consumer(a_tiles[0], b_tiles[0], a_stride, b_stride, pipe, kblocks, tid)
        if W > 1:
            for step in ptx.range_(1, W, dtype=u32):
                owner = (rank + step) % W
                cons.product()
                proto.send(cons.fragment, tile, slots.peer_ptr(owner), parity, rank)
                ptx.bar.sync(1, CONSUMERS * WG)
                with ptx.if_(leader):
                    proto.signal(flags.peer_ptr(owner), tile, rank, value)
        cons.product()
        proto.send(cons.fragment, tile, slots.ptr, parity, rank)
        with ptx.if_(leader):
            proto.wait_for_sources(flags.ptr, tile, rank, value)
        ptx.bar.sync(1, CONSUMERS * WG)
        proto.reduce_and_store(cons.fragment, tile, slots.ptr, parity, out.ptr)
        with ptx.if_(leader):     # every consumer read the epoch before the barriers above
            ptx.st.global_.u32(proto.flag_address(flags.ptr, tile, rank), value)


@functools.cache
def mrs_kernel(dtype: str) -> Kernel:
    """The sm_90a matmul_reduce_scatter kernel for ``dtype`` ("bf16" or "f16").

    Tensors: ``x`` (W, S, K) (this device's columns of the full x, one group
    per owner's rows), ``w`` (1, K, N), ``slots`` (2, W, S, N) f32 and
    ``flags`` (T, W) u32 (in place: the state, :mod:`._mrs_protocol`),
    ``out`` (S, N) f32.
    """
    t = {"bf16": bf16, "f16": f16}[dtype]

    def body(x, w, slots_in, flags_in, out, slots, flags):
        _body(x, w, slots_in, flags_in, out, slots, flags)
    body.__name__ = body.__qualname__ = f"matmul_reduce_scatter_sm90_{dtype}"
    body.__doc__ = "Partial products tile by tile to their owners (module docstring)."
    k = kernel(body,
               in_specs=(Tile("W", "S", "K", t, Layout.TMA_128B, tma_box=(1, BM, BK)),
                         Tile(1, "K", "N", t, Layout.TMA_128B, tma_box=(1, BK, SPAN)),
                         Tile(2, "W", "S", "N", f32), Tile("T", "W", u32)),
               out_specs=(Tile("S", "N", f32), Tile(2, "W", "S", "N", f32), Tile("T", "W", u32)),
               grid=_grid, block=((1 + CONSUMERS) * WG, 1, 1), arch="sm_90a", extern_smem=True,
               peers=("slots", "flags"))
    return in_place(slots="slots_in", flags="flags_in")(k)

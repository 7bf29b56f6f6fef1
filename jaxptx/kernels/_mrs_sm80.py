"""matmul_reduce_scatter on Ampere (sm_80): ``mma.sync`` tiles sent to their
owners as they finish.

CTA ``(j, i)`` of each device owns tile position ``t = i * Tn + j``: rows
``i * 128 ..`` and columns ``j * 128 ..`` of an (Ms, N) row slice. It
computes that tile of the device's partial product ``x @ w`` for every
owner's slice in ring order, ``rank + 1, rank + 2, ...``, its own slice
last: each finished tile is stored straight into the owner's ``slots``
(peer stores, then a release flag: :mod:`._mrs_protocol`) while the next
tile's GEMM runs; the last, its own, is summed with what the others sent.

The GEMM of one tile is the library's Ampere main loop
(:func:`._matmul_sm80.mainloop`: ``cp.async`` ring, swizzled ``ldmatrix``,
``mma.sync.m16n8k16``) over the owner's rows of ``x``: rows past the slice
read as zeros.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import ptx, smem
from ..dsl import Kernel, Tile, kernel
from ..dsl.declarations import in_place
from ..dsl.fragments import mma_base, mma_offset
from ..types import bf16, f16, f32, u32
from . import _mrs_protocol as proto
from ._matmul_sm80 import (
    BM,
    BN,
    MT,
    NT,
    SMEM_BYTES,
    THREADS,
    Operands,
    cdiv,
    mainloop,
    new_accumulators,
)

__all__ = ["mrs_kernel"]


def _grid(S: int, N: int) -> tuple[int, int, int]:
    return (cdiv(N, BN), cdiv(S, BM), 1)


def _fragment(acc: list, tid: Any) -> proto.Fragment:
    """The warp's 64 x 32 accumulator as (row, col) pairs of the CTA tile."""
    warp = tid >> 5
    row, col = mma_base("m16n8k16", tid & 31)
    row = row + ((warp >> 2) << 6)
    col = col + ((warp & 3) << 5)
    pairs = [(acc[i][j][2 * h], acc[i][j][2 * h + 1], i * 16 + mma_offset("m16n8k16", 2 * h)[0], j * 8)
             for i in range(MT) for h in range(2) for j in range(NT)]
    return proto.Fragment(row, col, pairs)


def _body(x: Any, w: Any, slots_in: Any, flags_in: Any, out: Any, slots: Any, flags: Any,
          dtype: str) -> None:
    K = x.shape[1]
    N = w.shape[1]
    S = out.shape[0]
    W = ptx.world_size()
    buf = smem.alloc(u32, (SMEM_BYTES // 4,), align=1024)
    tid = ptx.special.tid.x()
    rank = ptx.rank()
    m0 = ptx.special.ctaid.y() * BM
    n0 = ptx.special.ctaid.x() * BN
    tile = proto.Tile(m0, n0, ptx.special.ctaid.y() * cdiv(N, BN) + ptx.special.ctaid.x(), S, N, W)
    epoch = ptx.ld.global_.u32(proto.flag_address(flags.ptr, tile, rank))
    parity, value = epoch & 1, epoch + 1

    def product(owner: Any) -> list:
        ops = Operands(a=x.ptr + ptx.mul.wide.u32(owner, S * K * 2), b=w.ptr, m0=m0, n0=n0,
                       M=S, N=N, K=K, dtype=dtype)
        acc = new_accumulators()
        mainloop(ops, acc, buf.base, reuse=True)
        return acc

    if W > 1:
        for step in ptx.range_(1, W, dtype=u32):
            owner = (rank + step) % W
            acc = product(owner)
            proto.send(_fragment(acc, tid), tile, slots.peer_ptr(owner), parity, rank)
            ptx.bar.sync(0)
            with ptx.if_(tid == 0):
                proto.signal(flags.peer_ptr(owner), tile, rank, value)
    acc = product(rank)
    proto.send(_fragment(acc, tid), tile, slots.ptr, parity, rank)
    with ptx.if_(tid == 0):
        proto.wait_for_sources(flags.ptr, tile, rank, value)
    ptx.bar.sync(0)
    proto.reduce_and_store(_fragment(acc, tid), tile, slots.ptr, parity, out.ptr)
    with ptx.if_(tid == 0):     # every thread read the epoch before the barriers above
        ptx.st.global_.u32(proto.flag_address(flags.ptr, tile, rank), value)


@functools.cache
def mrs_kernel(dtype: str, arch: str = "sm_80") -> Kernel:
    """The sm_80 matmul_reduce_scatter kernel for ``dtype`` ("bf16" or "f16").

    Tensors: ``x`` (M, K) (this device's columns of the full x; M = W * S),
    ``w`` (K, N), ``slots`` (2, W, S, N) f32 and ``flags`` (T, W) u32 (in
    place: the state, :mod:`._mrs_protocol`), ``out`` (S, N) f32.
    """
    t = {"bf16": bf16, "f16": f16}[dtype]

    def body(x, w, slots_in, flags_in, out, slots, flags):
        _body(x, w, slots_in, flags_in, out, slots, flags, dtype)
    body.__name__ = body.__qualname__ = f"matmul_reduce_scatter_sm80_{dtype}"
    body.__doc__ = "Partial products tile by tile to their owners (module docstring)."
    k = kernel(body, in_specs=(Tile("M", "K", t), Tile("K", "N", t), Tile(2, "W", "S", "N", f32),
                               Tile("T", "W", u32)),
               out_specs=(Tile("S", "N", f32), Tile(2, "W", "S", "N", f32), Tile("T", "W", u32)),
               grid=_grid, block=(THREADS, 1, 1), arch=arch, extern_smem=True,
               peers=("slots", "flags"))
    return in_place(slots="slots_in", flags="flags_in")(k)

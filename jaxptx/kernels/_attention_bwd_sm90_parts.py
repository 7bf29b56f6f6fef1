"""Pieces the two Hopper attention-backward kernels share
(:mod:`._attention_bwd_sm90`, :mod:`._attention_bwd_sm90_dq`): the tile
sizes, the mbarrier set-up and waits, the TMA loads of 64-column slabs, the
two ``wgmma`` product forms and the causal mask.

Every Q, K, V, dO tile is stored as 64-column slabs (128 bytes of 16-bit
elements, 128-byte swizzled, what a ``(1, rows, 1, 64)`` TMA box writes);
a tile of ``rows`` rows and D columns is ``D / 64`` slabs of ``rows × 128``
bytes one after the other. The same tile is read two ways by ``wgmma``:

* K-major (rows are M or N, the reduction runs along D): the descriptor
  steps 32 bytes per k-step of 16 inside a slab and ``rows × 128`` bytes
  from slab to slab (:func:`kmajor_products`);
* MN-major (rows are the reduction, D is N): the transpose bit, LBO the
  slab stride (the next 64 columns of N), SBO 1024 bytes (8 rows of K), and
  ``16 × 128`` bytes per k-step (:func:`rs_products`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..dsl import Layout, Tile, ptx, reg
from ..types import PtxType, f32

__all__ = [
    "BK",
    "BQ",
    "CONSUMER_REGS",
    "KN",
    "NEG_INF",
    "PRODUCER_REGS",
    "QM",
    "SLAB",
    "STAGES",
    "WG",
    "as_u64",
    "at",
    "init_barriers",
    "kmajor_products",
    "mask",
    "pack_pairs",
    "rs_products",
    "signed",
    "tma_load",
    "tma_spec",
    "wait",
    "zeros",
]

BK = 128            # keys per dK/dV CTA (two consumer warpgroups of 64 keys)
BQ = 64             # query rows per block the dK/dV CTA streams
QM = 128            # query rows per dQ CTA (two consumer warpgroups of 64 rows)
KN = 64             # keys per block the dQ CTA streams
STAGES = 2          # ring depth: block t uses stage t & 1, phase (t >> 1) & 1
WG = 128            # threads per warpgroup
SLAB = 64           # 16-bit columns per 128-byte swizzled slab
NEG_INF = float("-inf")
# setmaxnreg budgets: 128 · 24 + 256 · 240 = 384 · 168 (the launch's registers).
PRODUCER_REGS, CONSUMER_REGS = 24, 240


def tma_spec(dtype: PtxType, rows: str, heads: str, head_dim: int, box_rows: int) -> Tile:
    """A (B, rows, heads, D) operand read by TMA in (1, box_rows, 1, 64) boxes."""
    return Tile("B", rows, heads, head_dim, dtype, Layout.TMA_128B, tma_box=(1, box_rows, 1, SLAB),
                tma_rank=4)


def at(bars: Any, index: Any) -> Any:
    """The address of mbarrier ``index`` (a register) of ``bars``."""
    return ptx.addr(bars.base + index * 8)


def wait(bar: Any, parity: Any) -> None:
    """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` completes."""
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


def init_barriers(tid: Any, counts: Sequence[tuple[Any, int, int]]) -> None:
    """Thread 0 initialises each ``(bars, n, arrivals)``: ``n`` barriers
    expecting ``arrivals`` arrivals; then the whole CTA syncs."""
    with ptx.if_(tid == 0):
        for bars, n, arrivals in counts:
            for i in range(n):
                ptx.mbarrier.init.shared.b64(bars[i], arrivals)
        ptx.fence.mbarrier_init.release.cluster()
    ptx.bar.sync(0)


def tma_load(bar: Any, jobs: Sequence[tuple[Any, Any, Any, Any, int]], b: Any, head_dim: int,
             copies: Sequence[tuple[Any, Any, int]] = ()) -> None:
    """Arm ``bar`` with the bytes of every job and copy, and issue them.

    Each job is ``(dst, src, head, row0, rows)``: a TMA load of rows ``row0
    ..`` of head ``head`` (batch ``b``) of tensor ``src`` into the slabs at
    ``dst`` (a shared address); rows past the end arrive as zeros. Each copy
    is ``(dst, src, nbytes)``: a plain bulk copy (``cp.async.bulk``) from the
    global address ``src``.
    """
    load = ptx.cp.async_.bulk.tensor._4d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
    copy = ptx.cp.async_.bulk.shared__cluster.global_.mbarrier__complete_tx__bytes
    nbytes = sum(job[4] for job in jobs) * head_dim * 2 + sum(c[2] for c in copies)
    ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar, nbytes)
    for dst, src, head, row0, rows in jobs:
        for c in range(head_dim // SLAB):
            load(ptx.addr(dst, c * rows * SLAB * 2), ptx.addr(src.tma_desc(), coords=(c * SLAB, head, row0, b)),
                 bar)
    for dst, src, size in copies:
        copy(ptx.addr(dst), ptx.addr(src), size, bar)


def zeros(n: int) -> Any:
    """``n`` f32 registers set to 0 (an accumulator)."""
    acc = reg.array(f32, n)
    for r in acc:
        r.set(0.0)
    return acc


def _wgmma(dtype: PtxType, n: int) -> Any:
    """``wgmma.mma_async.m64n{n}k16.f32.{dtype}.{dtype}``."""
    mma = getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{n}k16").f32
    return getattr(getattr(mma, dtype.name), dtype.name)


def kmajor_products(acc: Any, a_desc: Any, a_rows: int, b_desc: Any, b_rows: int, head_dim: int,
                    dtype: PtxType) -> None:
    """Issue ``acc = A·Bᵀ`` (64 × N, N = 2·len(acc)): A and B K-major
    slab tiles of ``head_dim`` columns, ``a_rows`` and ``b_rows`` rows per
    slab (the descriptors point at the first row this product reads)."""
    mma = _wgmma(dtype, 2 * len(acc))
    for kk in range(head_dim // 16):
        slab, col = divmod(kk, SLAB // 16)
        mma(acc, a_desc + (slab * a_rows * SLAB * 2 + col * 32) // 16,
            b_desc + (slab * b_rows * SLAB * 2 + col * 32) // 16, 1 if kk else 0, 1, 1, 0, 0)


def rs_products(acc: Any, frags: Any, b_desc: Any, dtype: PtxType) -> None:
    """Issue ``acc += A·B``: A (64 × 16·len(frags)/4) packed 16-bit pairs in
    registers (an accumulator fragment's layout, packed in order, is the A
    fragment's), B an MN-major slab tile whose rows are the reduction."""
    mma = _wgmma(dtype, 2 * len(acc))
    for kk in range(len(frags) // 4):
        mma(acc, tuple(frags[4 * kk:4 * kk + 4]), b_desc + kk * 16 * SLAB * 2 // 16, 1, 1, 1, 1)


def mask(acc: Any, rel: Sequence[Any], keep_below: bool) -> None:
    """Set masked scores to −inf.

    Register ``4j + 2i + e`` of a 64 × N accumulator holds column ``8j +
    2·(lane % 4) + e`` of fragment row ``i`` (PTX ISA, wgmma D fragments);
    ``rel[i]`` (s32) is that row's limit minus the column of ``j = e = 0``.
    ``keep_below``: columns ``<= rel[i]`` stay (keys up to the query row);
    else columns ``>= rel[i]`` stay (queries from the key row on).
    """
    for idx, s in enumerate(acc):
        j, i, e = idx // 4, (idx // 2) % 2, idx % 2
        drop = rel[i] < 8 * j + e if keep_below else rel[i] > 8 * j + e
        ptx.mov.f32(s, NEG_INF, pred=drop)


def pack_pairs(dst: Any, src: Any, dtype: PtxType) -> None:
    """``dst[i]`` ← 16-bit pair (``src[2i]`` low, ``src[2i + 1]`` high)."""
    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    for i, r in enumerate(dst):
        pack(r, src[2 * i + 1], src[2 * i])


def signed(x: Any) -> Any:
    """``x`` (u32) as s32."""
    return ptx.cvt.s32.u32(x)


def as_u64(x: Any) -> Any:
    """``x`` (u32) widened to u64 (a descriptor offset)."""
    return ptx.cvt.u64.u32(x)


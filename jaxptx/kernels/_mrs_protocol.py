"""How a matmul_reduce_scatter CTA hands its finished tiles to their owners,
and how an owner sums what it was sent. Shared by the sm_80 and sm_90a
variants, which differ only in how the tile's accumulator is computed.

Each device holds two peer buffers of its own, which every device writes:

* ``slots`` (2, W, Ms, N) f32: ``slots[p, src]`` is device ``src``'s partial
  product of this device's (Ms, N) row slice, for calls of parity ``p``
  (``slots[p, self]``: the device's own part, stored by itself).
* ``flags`` (T, W) u32, one row per (Ms, N) tile position ``t`` (a CTA):
  ``flags[t, src]`` (``src`` another device) is the number of calls for
  which ``src`` has delivered tile ``t`` here, stored by ``src`` with
  ``st.release.sys``; ``flags[t, self]`` is the number of calls this
  device's CTA ``t`` has finished (only it writes that word): its *epoch*.

A call of epoch ``e`` (``e`` earlier calls with this state) writes slots of
parity ``e % 2``, stores ``e + 1`` into the owners' flags, and the owner
waits for ``flags[t, src] >= e + 1`` for every other ``src``, sums the
sources in rank order 0..W-1 (its own registers at its own rank: the f32
sum is the same expression on every device and every run, whatever the
arrival order), then stores ``e + 1`` to its epoch word. The owner stores
its own part in ``slots[p, self]`` first, so the sum streams from memory
(few registers live) rather than mixing loads with its accumulator.

Why calls may run back to back on GPUs (each device's stream runs on): a
device can be at most one call ahead of an owner still summing call ``e``
(to finish call ``e + 1`` it needs the owner's call ``e + 1`` tile, which
the owner sends only after it finished call ``e``), so its call ``e + 1``
tile goes to the other parity, and its flag holds ``e + 2``, not a count
that could stand for another device's missing tile. With the fresh zero
state the public function passes each call, ``e`` is 0.

Ordering (PTX ISA, "Memory Consistency Model"): a sender's threads store
their fragment, a barrier over those threads orders the stores before the
leader's ``st.release.sys`` of the flag; the owner's leader spins with
``ld.acquire.sys`` and a barrier orders that before every thread's loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..dsl import ptx, reg
from ..types import f32, u32

__all__ = ["Fragment", "Tile", "reduce_and_store", "send", "wait_for_sources"]


@dataclass(frozen=True)
class Fragment:
    """The accumulator a thread holds: ``pairs[i] = (lo, hi, dr, dc)`` are
    two f32 registers at row ``row + dr`` and columns ``col + dc`` and
    ``col + dc + 1`` of the CTA's tile (``row``, ``col``: u32 registers)."""

    row: Any
    col: Any
    pairs: Sequence[tuple[Any, Any, int, int]]


@dataclass(frozen=True)
class Tile:
    """Where one CTA's tile lives in an (Ms, N) row slice.

    Attributes:
        m0, n0: the tile's first row and column within the slice (u32 regs).
        index: the tile position ``t`` (u32 register): its ``flags`` row.
        Ms, N, W: static sizes: slice rows, columns, devices.
    """

    m0: Any
    n0: Any
    index: Any
    Ms: int
    N: int
    W: int


def _masks(frag: Fragment, tile: Tile) -> tuple[Any, list[tuple[int, int, Any]]]:
    """The thread's byte offset in an (Ms, N) f32 matrix (clamped in
    bounds) and ``(dr, dc, ok)`` per pair: whether it lies inside the slice."""
    row, col = tile.m0 + frag.row, tile.n0 + frag.col
    base = ptx.mul.wide.u32(row.min(tile.Ms - 1) * tile.N + col.min(tile.N - 2), 4)
    out = []
    row_ok: dict[int, Any] = {}
    col_ok: dict[int, Any] = {}
    for _, _, dr, dc in frag.pairs:
        if dr >= tile.Ms or dc >= tile.N:
            out.append((dr, dc, None))      # no CTA has this pair inside: left out at trace time
            continue
        if dr not in row_ok:
            row_ok[dr] = row < tile.Ms - dr
        if dc not in col_ok:
            col_ok[dc] = col < tile.N - dc
        out.append((dr, dc, ptx.and_.pred(row_ok[dr], col_ok[dc])))
    return base, out


def _slot_offset(tile: Tile, parity: Any, src: Any) -> Any:
    """Bytes from ``slots`` to ``slots[parity, src]`` (u64 register)."""
    return ptx.mul.wide.u32(parity * tile.W + src, tile.Ms * tile.N * 4)


def send(frag: Fragment, tile: Tile, slots_of_owner: Any, parity: Any, rank: Any) -> None:
    """Store the fragment into ``slots[parity, rank]`` of the owner whose
    ``slots`` is at ``slots_of_owner`` (a u64 register: a peer address)."""
    base, masks = _masks(frag, tile)
    at = slots_of_owner + _slot_offset(tile, parity, rank) + base
    for (lo, hi, _, _), (dr, dc, ok) in zip(frag.pairs, masks):
        if ok is not None:
            ptx.st.global_.v2.f32(ptx.addr(at, (dr * tile.N + dc) * 4), (lo, hi), pred=ok)


def flag_address(flags: Any, tile: Tile, src: Any) -> Any:
    """The address of ``flags[t, src]`` in the flags at ``flags`` (u64)."""
    return flags + ptx.mul.wide.u32(tile.index * tile.W + src, 4)


def signal(flags_of_owner: Any, tile: Tile, rank: Any, value: Any) -> None:
    """Tell the owner this device's tile for call ``value - 1`` is there
    (one thread, after a barrier over the threads that stored it)."""
    ptx.st.release.sys.global_.u32(flag_address(flags_of_owner, tile, rank), value)


def wait_for_sources(flags: Any, tile: Tile, rank: Any, target: Any) -> None:
    """Spin until every other device's flag for this tile is ``>= target``
    (one thread; follow with a barrier over the threads that read)."""
    for src in range(tile.W):
        with ptx.if_(rank != src):
            at = flag_address(flags, tile, src)
            for _ in ptx.while_(lambda at=at: ptx.ld.acquire.sys.global_.u32(at) < target):
                pass


def reduce_and_store(frag: Fragment, tile: Tile, slots: Any, parity: Any, out: Any) -> None:
    """``out[tile] = slots[parity, 0] + slots[parity, 1] + ...`` (a fixed
    order), each thread over the positions of its fragment. The owner has
    stored its own part in its own slot first (:func:`send` to ``slots``):
    a thread reads back what it stored, so no barrier is needed for that."""
    base, masks = _masks(frag, tile)
    first = slots + _slot_offset(tile, parity, 0) + base
    stride = tile.Ms * tile.N * 4
    live = [(dr, dc, ok) for dr, dc, ok in masks if ok is not None]
    # Loads outside the slice are skipped (past the last slot they would
    # fault); their registers start at 0 so that nothing reads them undefined.
    totals, parts = reg.array(f32, 2 * len(live)), reg.array(f32, 2 * len(live))
    for r in (*totals, *parts):
        r.set(0.0)
    for n, (dr, dc, ok) in enumerate(live):
        ptx.ld.global_.v2.f32((totals[2 * n], totals[2 * n + 1]), ptx.addr(first, (dr * tile.N + dc) * 4),
                              pred=ok)
    if tile.W > 1:
        # A runtime loop over the other sources keeps one source's loads in
        # flight (unrolled, ptxas hoists them all and spills).
        at = first + stride
        for _ in ptx.range_(1, tile.W, dtype=u32):
            for n, (dr, dc, ok) in enumerate(live):
                c, d = parts[2 * n], parts[2 * n + 1]
                ptx.ld.global_.v2.f32((c, d), ptx.addr(at, (dr * tile.N + dc) * 4), pred=ok)
                ptx.add.f32(totals[2 * n], totals[2 * n], c)
                ptx.add.f32(totals[2 * n + 1], totals[2 * n + 1], d)
            ptx.add.u64(at, at, stride)
    dst = out + base
    for n, (dr, dc, ok) in enumerate(live):
        ptx.st.global_.v2.f32(ptx.addr(dst, (dr * tile.N + dc) * 4), (totals[2 * n], totals[2 * n + 1]),
                              pred=ok)

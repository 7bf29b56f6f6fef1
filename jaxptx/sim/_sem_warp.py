"""Emulator semantics: warp-level exchange, voting and reductions.

A warp is 32 consecutive threads of a CTA (``Step.warps``, ``Step.lanes``).
The lanes taking part in a ``.sync`` instruction are those of the thread's
warp that execute it now (the machine runs threads at the same PC together)
and whose bit is set in the thread's ``membermask``. PTX leaves a thread's
result undefined when its membermask names a lane that does not execute the
instruction; the emulator then just leaves that lane out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..types import TYPES
from ._step import Step

__all__ = ["SEMANTICS"]

_U32 = TYPES["u32"]
_FULL = np.uint64(0xFFFF_FFFF)
_CANONICAL_F32 = 0x7FFF_FFFF


# --- warp geometry -------------------------------------------------------------------------


def _lane_bits(s: Step) -> np.ndarray:
    """``1 << lane`` of each executing thread, as uint64."""
    return np.left_shift(np.uint64(1), s.lanes.astype(np.uint64))


def _warp_index(s: Step) -> tuple[np.ndarray, int]:
    """Dense index (0..nwarps-1) of each executing thread's warp, and nwarps."""
    _, inv = np.unique(s.warps, return_inverse=True)
    inv = inv.reshape(-1)
    return inv, int(inv.max()) + 1 if len(inv) else 0


def _per_warp_or(inv: np.ndarray, nwarps: int, bits: np.ndarray) -> np.ndarray:
    """OR of ``bits`` over the executing threads of each warp."""
    acc = np.zeros(nwarps, dtype=np.uint64)
    np.bitwise_or.at(acc, inv, bits)
    return acc


def _active(s: Step) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """``(warp index, lane bits, nwarps, executing-lane mask per thread)``."""
    inv, nwarps = _warp_index(s)
    bits = _lane_bits(s)
    return inv, bits, nwarps, _per_warp_or(inv, nwarps, bits)[inv]


def _mask(s: Step, k: int) -> np.ndarray:
    return s.src(k, TYPES["b32"]).astype(np.uint64)


def _source_positions(s: Step, lane_src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each executing thread, the position among the executing threads of
    lane ``lane_src`` of its own warp, and whether that lane executes."""
    local = s.threads % s.m.ntid
    target_local = local - s.lanes + lane_src
    target = s.threads - local + target_local
    order = np.argsort(s.threads, kind="stable")
    sorted_threads = s.threads[order]
    at = np.minimum(np.searchsorted(sorted_threads, target), max(s.n - 1, 0))
    found = (sorted_threads[at] == target) & (target_local < s.m.ntid) & (lane_src >= 0) & (lane_src < 32)
    return order[at], found


# --- instructions ---------------------------------------------------------------------------


def shfl_sync(s: Step) -> None:
    """``shfl.sync.mode.b32 d|p, a, b, c, membermask`` (PTX ISA, shfl.sync).

    ``c`` packs the clamp value (bits 0-4) and the segment mask (bits 8-12):
    ``maxLane = (lane & segmask) | (c & ~segmask)``, ``minLane = lane & segmask``;
    up: ``j = lane - b``, in range if ``j >= maxLane``; down: ``j = lane + b``,
    bfly: ``j = lane ^ b``, idx: ``j = minLane | (b & ~segmask)``, in range if
    ``j <= maxLane``. Out of range, a thread keeps its own ``a``; ``p`` says
    whether the source was in range. A source lane that does not execute the
    instruction gives an undefined value in PTX: here the thread's own ``a``."""
    a = s.src(1, TYPES["b32"])
    b = s.src(2, _U32).astype(np.int64) & 0x1F
    c = s.src(3, _U32).astype(np.int64)
    lane = s.lanes.astype(np.int64)
    clamp, segmask = c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (clamp & ~segmask)
    mode = s.mod("mode")
    if mode == "up":
        j = lane - b
        ok = j >= max_lane
    else:
        j = {"down": lane + b, "bfly": lane ^ b, "idx": (lane & segmask) | (b & ~segmask)}[mode]
        ok = j <= max_lane
    j = np.where(ok, j, lane)
    pos, found = _source_positions(s, j)
    s.dst(0, np.where(found, a[pos], a), TYPES["b32"])
    s.dst_pred_of_pair(0, ok)


def vote_sync(s: Step) -> None:
    """``vote.sync.{all,any,uni}.pred`` and ``vote.sync.ballot.b32`` over the
    lanes of ``membermask`` that execute it (PTX ISA, vote.sync: ballot sets
    bit ``i`` when lane ``i``'s predicate is true; uni: all equal)."""
    pred = s.pred(1)
    inv, bits, nwarps, active = _active(s)
    members = _mask(s, 2) & active
    true = _per_warp_or(inv, nwarps, np.where(pred, bits, np.uint64(0)))[inv] & members
    mode = s.mod("mode")
    if mode == "ballot":
        s.dst(0, true, TYPES["b32"])
        return
    result = {"all": true == members, "any": true != 0, "uni": (true == members) | (true == 0)}[mode]
    s.dst(0, result, TYPES["pred"])


def activemask(s: Step) -> None:
    """``activemask.b32 d``: bit ``i`` set for each lane of the warp executing
    this instruction now (PTX ISA, activemask)."""
    s.dst(0, _active(s)[3], TYPES["b32"])


def _f32_key(bits: np.ndarray) -> np.ndarray:
    """An int64 key ordering f32 bit patterns as numbers, -0 below +0."""
    signed = bits.astype(np.int64)
    return np.where(signed >= 0x8000_0000, -(signed & 0x7FFF_FFFF) - 1, signed)


def _f32_from_key(key: np.ndarray) -> np.ndarray:
    return np.where(key < 0, (-key - 1) | 0x8000_0000, key).astype(np.uint32)


def _reduce_int(op: str, values: np.ndarray, part: np.ndarray, inv: np.ndarray,
                nwarps: int) -> np.ndarray:
    """Per-warp reduction of ``values`` over the threads with ``part`` set."""
    info = np.iinfo(values.dtype)
    fn, identity = {"add": (np.add, 0), "min": (np.minimum, info.max), "max": (np.maximum, info.min),
                    "and": (np.bitwise_and, info.max), "or": (np.bitwise_or, 0),
                    "xor": (np.bitwise_xor, 0)}[op]
    acc = np.full(nwarps, identity, dtype=values.dtype)
    fn.at(acc, inv[part], values[part])
    return acc


def _reduce_f32(s: Step, want_max: bool, values: np.ndarray, part: np.ndarray, inv: np.ndarray,
                nwarps: int) -> np.ndarray:
    """PTX ISA, redux.sync .f32 min/max: ``.abs`` takes absolute values first;
    NaN inputs are ignored (the result is NaN only when all are NaN) unless
    ``.NaN``, which makes any NaN input give the canonical NaN; -0 < +0."""
    bits = values.view(np.uint32).astype(np.int64)
    if s.mod("abs"):
        bits &= 0x7FFF_FFFF
    nan = (bits & 0x7FFF_FFFF) > 0x7F80_0000
    key = _f32_key(bits)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    key = np.where(nan, lo if want_max else hi, key)
    acc = np.full(nwarps, lo if want_max else hi, dtype=np.int64)
    (np.maximum if want_max else np.minimum).at(acc, inv[part], key[part])
    any_nan = np.zeros(nwarps, dtype=bool)
    np.logical_or.at(any_nan, inv[part], nan[part])
    all_nan = acc == (lo if want_max else hi)
    out = _f32_from_key(np.where(all_nan, 0, acc))
    bad = all_nan | (any_nan if s.mod("nan") else False)
    return np.where(bad, np.uint32(_CANONICAL_F32), out).view(np.float32)


def redux_sync(s: Step) -> None:
    """``redux.sync.op.type d, a, membermask`` (PTX ISA, redux.sync): every
    participating lane gets the reduction of ``a`` over the lanes of
    membermask: add (wrapping), min, max (signed for .s32), and, or, xor,
    and f32 min/max with ``.abs`` / ``.NaN``."""
    t = s.type(1)
    values = s.src(1, t)
    op = s.mod("op")
    inv, bits, nwarps, active = _active(s)
    mask = _mask(s, 2)
    out = np.empty_like(values)
    for m in np.unique(mask):
        part = (bits & m) != 0
        if t.kind == "f":
            acc = _reduce_f32(s, op == "max", values, part, inv, nwarps)
        else:
            with np.errstate(over="ignore"):
                acc = _reduce_int(op, values, part, inv, nwarps)
        mine = mask == m
        out[mine] = acc[inv[mine]]
    s.dst(0, out, t)


def match_sync(s: Step) -> None:
    """``match.any.sync`` / ``match.all.sync`` (PTX ISA, match.sync).

    any: ``d`` = mask of the lanes in membermask whose ``a`` equals this
    lane's. all: ``d`` = membermask when all lanes in membermask hold the
    same ``a``, else 0; the ``d|p`` predicate says whether they do."""
    t = s.type(1)
    values = s.src(1, t).astype(np.uint64)
    inv, bits, nwarps, active = _active(s)
    mask = _mask(s, 2)
    out = np.zeros(s.n, dtype=np.uint64)
    same = np.ones(s.n, dtype=bool)
    if s.ins.opcode.startswith("match.any"):
        order = np.lexsort((values, inv))
        w, v = inv[order], values[order]
        first = np.ones(s.n, dtype=bool)
        first[1:] = (w[1:] != w[:-1]) | (v[1:] != v[:-1])
        group = np.empty(s.n, dtype=np.int64)
        group[order] = np.cumsum(first) - 1
        ngroups = int(first.sum())
        for m in np.unique(mask):
            acc = np.zeros(ngroups, dtype=np.uint64)
            np.bitwise_or.at(acc, group, bits & m)
            mine = mask == m
            out[mine] = acc[group[mine]]
        s.dst(0, out, TYPES["b32"])
        return
    for m in np.unique(mask):
        part = (bits & m) != 0
        lo = np.full(nwarps, np.iinfo(np.uint64).max, dtype=np.uint64)
        hi = np.zeros(nwarps, dtype=np.uint64)
        np.minimum.at(lo, inv[part], values[part])
        np.maximum.at(hi, inv[part], values[part])
        equal = lo >= hi   # one value, or no participating lane
        mine = mask == m
        same[mine] = equal[inv[mine]]
        out[mine] = np.where(same[mine], m, 0)
    s.dst(0, out, TYPES["b32"])
    s.dst_pred_of_pair(0, same)


def elect_sync(s: Step) -> None:
    """``elect.sync d|p, membermask`` (PTX ISA, elect.sync): the lowest lane
    of membermask that executes is the leader; every thread gets its lane id
    in ``d``, and ``p`` is true in the leader only."""
    _, bits, _, active = _active(s)
    members = _mask(s, 1) & active
    lowest = members & (~members + np.uint64(1))
    leader = np.where(members != 0, np.log2(np.maximum(lowest, 1).astype(np.float64)), 0).astype(np.uint32)
    s.dst(0, leader, _U32)
    s.dst_pred_of_pair(0, (members != 0) & (bits == lowest))


SEMANTICS: dict[str, Callable] = {
    "shfl_sync": shfl_sync, "vote_sync": vote_sync, "activemask": activemask,
    "redux_sync": redux_sync, "match_sync": match_sync, "elect_sync": elect_sync,
}

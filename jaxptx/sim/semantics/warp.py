"""Emulator semantics: warp-level exchange, voting and reductions.

A warp is 32 consecutive threads of a CTA (``Step.warps``, ``Step.lanes``).
The lanes taking part in a ``.sync`` instruction are those of the thread's
warp that execute it now (the machine runs threads at the same PC together)
and whose bit is set in the thread's ``membermask``. PTX leaves a thread's
result undefined when its membermask names a lane that does not execute the
instruction; the emulator then just leaves that lane out.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ...types import TYPES
from ..core.host import ShapeCache
from ..core.step import Step
from ..numerics.lanes import shfl_source_lanes
from .registry import register, semantics

if TYPE_CHECKING:
    from ..core.view import MachineView

__all__: list[str] = []

_U32 = TYPES["u32"]
_CANONICAL_F32 = 0x7FFF_FFFF


# --- warp geometry -------------------------------------------------------------------------


_GEOMETRY: "weakref.WeakKeyDictionary[MachineView, tuple[np.ndarray, ...]]" = weakref.WeakKeyDictionary()


def _grid_geometry(m: "MachineView") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per thread of the grid: index in its CTA, ``1 << lane``, global warp
    index; computed once per launch (the divisions cost more than a gather)."""
    geometry = _GEOMETRY.get(m)
    if geometry is None:
        threads = np.arange(m.nthreads, dtype=np.int64)
        local = threads % m.ntid
        bits = np.left_shift(np.uint64(1), (local & 31).astype(np.uint64))
        warp = (threads - local) // m.ntid * m.warps_per_cta + (local >> 5)
        for a in (local, bits, warp):
            a.flags.writeable = False       # shared by every step: never a register's storage
        geometry = _GEOMETRY[m] = (local, bits, warp)
    return geometry


class _Warps:
    """Where the executing threads sit in their warps, computed once per step.

    Attributes:
        local: index of each thread in its CTA; lane: its lane (0..31).
        bits: ``1 << lane`` (uint64). inv: dense index of its warp among the
        executing threads' warps. active: per thread, the mask of its warp's
        lanes executing now.
    """

    def __init__(self, s: Step) -> None:
        local, bits, warp = _grid_geometry(s.m)
        whole = s.n == s.m.nthreads             # then threads is arange(nthreads)
        self.local = local if whole else local[s.threads]
        self.lane = (self.local & 31).astype(np.int32)
        self.bits = bits if whole else bits[s.threads]
        self._warp = warp if whole else warp[s.threads]

    @functools.cached_property
    def _runs(self) -> tuple[np.ndarray | None, np.ndarray, int]:
        warp = self._warp
        if (warp[1:] >= warp[:-1]).all():       # threads in order: warps are contiguous runs
            first = np.ones(len(warp), dtype=bool)
            first[1:] = warp[1:] != warp[:-1]
            inv = np.cumsum(first) - 1
            return np.flatnonzero(first), inv, int(inv[-1]) + 1
        inv = np.unique(warp, return_inverse=True)[1].reshape(-1)
        return None, inv, int(inv.max()) + 1

    @property
    def inv(self) -> np.ndarray:
        return self._runs[1]

    @functools.cached_property
    def active(self) -> np.ndarray:
        return self.reduce(np.bitwise_or, self.bits, 0)[self.inv]

    def reduce(self, fn: np.ufunc, values: np.ndarray, identity) -> np.ndarray:
        """``fn`` over the executing threads of each warp (one value per warp)."""
        starts, inv, count = self._runs
        if starts is not None:
            return fn.reduceat(values, starts)
        acc = np.full(count, identity, dtype=values.dtype)
        fn.at(acc, inv, values)
        return acc

    def reduce_over(self, fn: np.ufunc, values: np.ndarray, part: np.ndarray, identity) -> np.ndarray:
        """``fn`` over the threads of each warp with ``part`` set (``identity``
        where none is)."""
        return self.reduce(fn, np.where(part, values, np.asarray(identity, dtype=values.dtype)), identity)


def _mask(s: Step, k: int) -> np.ndarray:
    """The membermask operand ``k``; all lanes for the legacy forms without
    one (``vote.ballot.b32``, deprecated since PTX 6.0, has none)."""
    if k >= len(s.ins.operands):
        return np.full(s.n, 0xFFFF_FFFF, dtype=np.uint64)
    return s.src(k, TYPES["b32"]).astype(np.uint64)


def _distinct(mask: np.ndarray) -> np.ndarray:
    """The distinct membermasks (one, nearly always)."""
    return mask[:1] if (mask == mask[0]).all() else np.unique(mask)


def _source_positions(s: Step, w: _Warps, lane_src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each executing thread, the position among the executing threads of
    lane ``lane_src`` (0..31) of its own warp, and whether that lane executes."""
    delta = lane_src - w.lane
    inside = w.local + delta < s.m.ntid          # a partial last warp has no such lane
    source = np.where(inside, s.threads + delta, s.threads)
    if s.n == s.m.nthreads:                      # every thread executes: positions are thread ids
        return source, inside
    where = np.full(s.m.nthreads, -1, dtype=np.int64)
    where[s.threads] = np.arange(s.n)
    pos = where[source]
    return np.maximum(pos, 0), inside & (pos >= 0)


# --- instructions ---------------------------------------------------------------------------


@semantics('shfl_sync')
def shfl_sync(s: Step) -> None:
    """``shfl.sync.mode.b32 d|p, a, b, c, membermask`` (PTX ISA, shfl.sync).

    ``c`` packs the clamp value (bits 0-4) and the segment mask (bits 8-12):
    ``maxLane = (lane & segmask) | (c & ~segmask)``, ``minLane = lane & segmask``;
    up: ``j = lane - b``, in range if ``j >= maxLane``; down: ``j = lane + b``,
    bfly: ``j = lane ^ b``, idx: ``j = minLane | (b & ~segmask)``, in range if
    ``j <= maxLane``. Out of range, a thread keeps its own ``a``; ``p`` says
    whether the source was in range. A source lane that does not execute the
    instruction gives an undefined value in PTX: here the thread's own ``a``."""
    mode = s.mod("mode")
    b_imm, c_imm = s.immediate(2, _U32), s.immediate(3, _U32)
    key = None
    if s.n == s.m.nthreads and b_imm is not None and c_imm is not None:
        # Every thread executes with immediate b and c (the usual butterfly):
        # the source of each thread depends only on the launch shape.
        key = (mode, b_imm, c_imm, s.m.ntid, s.m.nthreads)
    hit = _SHFL_SOURCES.get(key) if key is not None else None
    if hit is None:
        hit = _shfl_sources(s, mode)
        if key is not None:
            _SHFL_SOURCES.put(key, hit)
    pos, found, ok, every = hit
    a = s.src(1, TYPES["b32"])
    s.dst(0, a.take(pos) if every else np.where(found, a[pos], a), TYPES["b32"])
    s.dst_pred_of_pair(0, ok)


# (mode, b, c, ntid, nthreads) -> _shfl_sources of a whole-grid shfl.sync
_SHFL_SOURCES = ShapeCache()


def _shfl_sources(s: Step, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(source position, source executes, in range, every source executes)``
    of each executing thread (see :func:`shfl_sync`)."""
    w = _Warps(s)
    lane = w.lane
    j, ok = shfl_source_lanes(s.src(2, _U32).astype(np.int32), s.src(3, _U32).astype(np.int32), lane, mode)
    pos, found = _source_positions(s, w, np.where(ok, j, lane))
    return pos, found, ok, bool(found.all())


@semantics('vote_sync')
def vote_sync(s: Step) -> None:
    """``vote.sync.{all,any,uni}.pred`` and ``vote.sync.ballot.b32`` over the
    lanes of ``membermask`` that execute it (PTX ISA, vote.sync: ballot sets
    bit ``i`` when lane ``i``'s predicate is true; uni: all equal)."""
    w = _Warps(s)
    members = _mask(s, 2) & w.active
    true = w.reduce(np.bitwise_or, np.where(s.pred(1), w.bits, np.uint64(0)), 0)[w.inv] & members
    mode = s.mod("mode")
    if mode == "ballot":
        s.dst(0, true, TYPES["b32"])
        return
    result = {"all": true == members, "any": true != 0, "uni": (true == members) | (true == 0)}[mode]
    s.dst(0, result, TYPES["pred"])


@semantics('activemask')
def activemask(s: Step) -> None:
    """``activemask.b32 d``: bit ``i`` set for each lane of the warp executing
    this instruction now (PTX ISA, activemask)."""
    s.dst(0, _Warps(s).active, TYPES["b32"])


def _f32_key(bits: np.ndarray) -> np.ndarray:
    """An int64 key ordering f32 bit patterns as numbers, -0 below +0."""
    return np.where(bits >= 0x8000_0000, -(bits & 0x7FFF_FFFF) - 1, bits)


def _f32_from_key(key: np.ndarray) -> np.ndarray:
    return np.where(key < 0, (-key - 1) | 0x8000_0000, key).astype(np.uint32)


def _reduce_int(w: _Warps, op: str, values: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Per-warp reduction of ``values`` over the threads with ``part`` set."""
    info = np.iinfo(values.dtype)
    fn, identity = {"add": (np.add, 0), "min": (np.minimum, info.max), "max": (np.maximum, info.min),
                    "and": (np.bitwise_and, info.max), "or": (np.bitwise_or, 0),
                    "xor": (np.bitwise_xor, 0)}[op]
    return w.reduce_over(fn, values, part, identity)


def _reduce_f32(s: Step, w: _Warps, want_max: bool, values: np.ndarray, part: np.ndarray) -> np.ndarray:
    """PTX ISA, redux.sync .f32 min/max: ``.abs`` takes absolute values first;
    NaN inputs are ignored (the result is NaN only when all are NaN) unless
    ``.NaN``, which makes any NaN input give the canonical NaN; -0 < +0."""
    bits = values.view(np.uint32).astype(np.int64)
    if s.mod("abs"):
        bits &= 0x7FFF_FFFF
    nan = (bits & 0x7FFF_FFFF) > 0x7F80_0000
    none = np.iinfo(np.int64).min if want_max else np.iinfo(np.int64).max
    best = w.reduce_over(np.maximum if want_max else np.minimum, _f32_key(bits), part & ~nan, none)
    all_nan = best == none
    bad = all_nan | (w.reduce_over(np.logical_or, nan, part, False) if s.mod("nan") else False)
    return np.where(bad, np.uint32(_CANONICAL_F32), _f32_from_key(np.where(all_nan, 0, best))).view(np.float32)


@semantics('redux_sync')
def redux_sync(s: Step) -> None:
    """``redux.sync.op.type d, a, membermask`` (PTX ISA, redux.sync): every
    participating lane gets the reduction of ``a`` over the lanes of
    membermask: add (wrapping), min, max (signed for .s32), and, or, xor,
    and f32 min/max with ``.abs`` / ``.NaN``."""
    w = _Warps(s)
    t = s.type(1)
    values = s.src(1, t)
    op = s.mod("op")
    mask = _mask(s, 2)
    out = np.empty_like(values)
    for m in _distinct(mask):                  # one pass per distinct membermask (usually one)
        part = (w.bits & m) != 0
        if t.kind == "f":
            per_warp = _reduce_f32(s, w, op == "max", values, part)
        else:
            with np.errstate(over="ignore"):
                per_warp = _reduce_int(w, op, values, part)
        mine = mask == m
        out[mine] = per_warp[w.inv[mine]]
    s.dst(0, out, t)


def _match_any(w: _Warps, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per thread: the lanes of its membermask (executing) holding its value."""
    order = np.lexsort((values, w.inv))
    warp, v = w.inv[order], values[order]
    first = np.ones(len(values), dtype=bool)
    first[1:] = (warp[1:] != warp[:-1]) | (v[1:] != v[:-1])
    group = np.empty(len(values), dtype=np.int64)
    group[order] = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    out = np.zeros(len(values), dtype=np.uint64)
    for m in _distinct(mask):
        lanes = np.bitwise_or.reduceat((w.bits & m)[order], starts)
        mine = mask == m
        out[mine] = lanes[group[mine]]
    return out


def match_sync(any_: bool, s: Step) -> None:
    """``match.any.sync`` / ``match.all.sync`` (PTX ISA, match.sync).

    any: ``d`` = mask of the lanes in membermask whose ``a`` equals this
    lane's. all: ``d`` = membermask when all lanes in membermask hold the
    same ``a``, else 0; the ``d|p`` predicate says whether they do. (The
    table's sim names match_any_sync / match_all_sync choose ``any_``.)"""
    w = _Warps(s)
    values = s.src(1, s.type(1)).astype(np.uint64)
    mask = _mask(s, 2)
    if any_:
        s.dst(0, _match_any(w, values, mask), TYPES["b32"])
        return
    same = np.ones(s.n, dtype=bool)
    for m in _distinct(mask):
        part = (w.bits & m) != 0
        lo = w.reduce_over(np.minimum, values, part, np.iinfo(np.uint64).max)
        hi = w.reduce_over(np.maximum, values, part, 0)
        mine = mask == m
        same[mine] = (lo >= hi)[w.inv[mine]]     # one value, or no participating lane
    s.dst(0, np.where(same, mask, 0), TYPES["b32"])
    s.dst_pred_of_pair(0, same)


@semantics('elect_sync')
def elect_sync(s: Step) -> None:
    """``elect.sync d|p, membermask`` (PTX ISA, elect.sync): the lowest lane
    of membermask that executes is the leader; every thread gets its lane id
    in ``d``, and ``p`` is true in the leader only."""
    w = _Warps(s)
    members = _mask(s, 1) & w.active
    lowest = members & (~members + np.uint64(1))
    leader = np.log2(np.maximum(lowest, 1).astype(np.float64)).astype(np.uint32)   # exact: a power of 2
    s.dst(0, np.where(members != 0, leader, 0), _U32)
    s.dst_pred_of_pair(0, (members != 0) & (w.bits == lowest))


register("match_any_sync", functools.partial(match_sync, True))
register("match_all_sync", functools.partial(match_sync, False))

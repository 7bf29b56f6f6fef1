"""Emulator semantics: atomics (``atom``, ``atom.cas``, ``red``).

All executing threads' operations run at once, as if in one serial order:
the threads' order (lowest global thread index first) among those hitting
the same address. Each thread gets the value its operation saw in that
order, and memory ends with all of them applied. Associative integer
operations use segmented prefix scans over the accesses sorted by address;
the others (float adds, whose rounding depends on the order, and ``cas``,
``exch``, ``inc``, ``dec``) step through the order one "rank" at a time, all
distinct addresses together, so the loop runs as many times as the most
contended address has accesses. ``exch.b128`` and ``cas.b128`` take the
same serial path on :mod:`..numerics.b128` records, whose ``==`` compares all 128
bits.

Floating-point notes (PTX ISA, atom): ``add.f32`` rounds to nearest even
and flushes subnormal inputs and results to sign-preserving zero, here in
every state space (older PTX ISA versions said shared-memory f32 atomics
keep subnormals; that is not modelled);
``add.f64`` rounds to nearest and keeps subnormals; the ``.noftz`` half
adds (``f16``, ``bf16``, ``x2``) keep subnormals. ``min``/``max`` of halves
return the non-NaN operand and order -0 below +0. NaN results are the
canonical NaN (``0x7fffffff`` for f32, ``0x7fff`` for halves); f64 NaNs
propagate numpy's way (a hardware payload may differ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import ir
from ...types import PtxType
from ..errors import SimError, SimFault
from ..core import fastpaths
from ..core.step import Step
from .registry import semantics
from ..numerics.values import UINT, from_bits, to_bits

__all__ = ["rmw", "step_for"]

_F32_TINY = np.float32(2.0 ** -126)
_CANONICAL = {"f32": np.uint32(0x7FFF_FFFF), "f16": np.uint16(0x7FFF), "bf16": np.uint16(0x7FFF)}


# --- element operations (old value, operand[, operand]) -> new value -----------------


def _ftz32(x: np.ndarray) -> np.ndarray:
    """Flush f32 subnormals to zero, keeping the sign."""
    return np.where(np.abs(x) < _F32_TINY, np.copysign(np.float32(0), x), x).astype(np.float32)


def _canonical_nan(x: np.ndarray, t: PtxType) -> np.ndarray:
    name = t.element or t.name
    if name not in _CANONICAL:
        return x
    bits = np.ascontiguousarray(x).view(UINT[x.dtype.itemsize * 8])
    return np.where(np.isnan(x.astype(np.float32)), _CANONICAL[name], bits).view(x.dtype)


def _float_add(t: PtxType) -> Callable:
    """PTX ISA, atom: .add.f32 is .rn with subnormals flushed; f64 and the
    .noftz halves round to nearest and keep subnormals. Halves are added in
    float32 and rounded once more, which is exact: float32 carries more than
    twice the halves' precision plus two bits, so the double rounding is
    innocuous (the sum of two f16 or bf16 values rounds the same)."""
    def add(old: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if t.name == "f32":
                r = _ftz32(_ftz32(old) + _ftz32(b))
            elif t.name == "f64":
                return old + b
            else:
                r = (old.astype(np.float32) + b.astype(np.float32)).astype(old.dtype)
        return _canonical_nan(r, t)
    return add


def _float_minmax(t: PtxType, want_max: bool) -> Callable:
    """PTX ISA, atom .min/.max on halves: the non-NaN operand wins; both NaN
    gives the canonical NaN; -0.0 is below +0.0."""
    def pick(old: np.ndarray, b: np.ndarray) -> np.ndarray:
        x, y = old.astype(np.float32), b.astype(np.float32)
        y_wins = (y > x) if want_max else (y < x)
        tie = (x == y) & (np.signbit(x) != np.signbit(y))
        y_wins |= tie & (np.signbit(x) if want_max else np.signbit(y))
        y_wins |= np.isnan(x) & ~np.isnan(y)
        r = np.where(y_wins & ~np.isnan(y), b, old)
        return _canonical_nan(r, t)
    return pick


def _inc(old: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PTX ISA, atom .inc: ``(old >= b) ? 0 : old + 1`` (unsigned)."""
    return np.where(old >= b, np.zeros_like(old), old + np.ones_like(old))


def _dec(old: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PTX ISA, atom .dec: ``(old == 0 || old > b) ? b : old - 1`` (unsigned)."""
    return np.where((old == 0) | (old > b), b, old - np.ones_like(old))


def _exch(old: np.ndarray, b: np.ndarray) -> np.ndarray:
    return b


def _cas(old: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """PTX ISA, atom .cas: ``(old == b) ? c : old``, comparing bits."""
    return np.where(old == b, c, old)


_ASSOCIATIVE = {"add": np.add, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                "min": np.minimum, "max": np.maximum}


# --- serial application over all accesses ----------------------------------------------


def _segments(index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable sort of accesses by location: ``(order, segment id per sorted
    access, start of each segment)``."""
    order = np.argsort(index, kind="stable")
    idx = index[order]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = idx[1:] != idx[:-1]
    starts = np.flatnonzero(first)
    return order, np.cumsum(first) - 1, starts


def _scan(values: np.ndarray, seg: np.ndarray, fn: np.ufunc, longest: int) -> np.ndarray:
    """Inclusive segmented scan with an associative ``fn`` (Hillis-Steele)."""
    out = values.copy()
    d = 1
    while d < longest:
        same = seg[d:] == seg[:-d]
        out[d:] = np.where(same, fn(out[:-d], out[d:]), out[d:])
        d *= 2
    return out


def _apply_scan(fn: np.ufunc, mem0: np.ndarray, seg: np.ndarray, starts: np.ndarray,
                b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Old values and final values for an associative integer operation."""
    lengths = np.diff(np.append(starts, len(seg)))
    with np.errstate(over="ignore"):
        prefix = _scan(b, seg, fn, int(lengths.max()))
        old = mem0[seg].copy()
        later = np.ones(len(seg), dtype=bool)
        later[starts] = False
        old[later] = fn(old[later], prefix[np.flatnonzero(later) - 1])
        final = fn(mem0, prefix[starts + lengths - 1])
    return old, final


def _apply_serial(step: Callable, mem0: np.ndarray, seg: np.ndarray, starts: np.ndarray,
                  operands: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Old and final values of any operation, one rank of each address at a time."""
    rank = np.arange(len(seg)) - starts[seg]
    by_rank = np.argsort(rank, kind="stable")
    counts = np.bincount(rank)
    cur = mem0.copy()
    old = np.empty_like(operands[0])
    at = 0
    with np.errstate(all="ignore"):
        for count in counts:
            sel = by_rank[at:at + count]
            at += count
            where = seg[sel]
            seen = cur[where]
            old[sel] = seen
            cur[where] = step(seen, *(o[sel] for o in operands))
    return old, cur


def _float_add_chains(t: PtxType, mem0: np.ndarray, seg: np.ndarray, starts: np.ndarray,
                      b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The fast path of ``add.f32``/``add.f64`` (:mod:`..core.fastpaths`):
    when a few addresses take long chains of adds (a reduction into one
    word), each address's chain is one ``np.add.accumulate``, which adds in
    order and rounds every partial sum as :func:`_apply_serial` does. An
    f32 add also flushes subnormal inputs and results and makes NaN results
    canonical: inputs are flushed here, and when no partial sum is
    subnormal or NaN the rest does nothing; else ``None`` (the serial path
    runs). ``None`` too when the chains are short (the serial path's ranks
    are then few)."""
    ends = np.append(starts[1:], len(seg))
    if len(starts) * 4 > int((ends - starts).max()):
        return None
    f32 = t.name == "f32"
    with np.errstate(all="ignore"):
        first = _ftz32(mem0) if f32 else mem0
        addends = _ftz32(b) if f32 else b
        partial = np.concatenate([np.add.accumulate(np.concatenate((first[j:j + 1], addends[lo:hi])))[1:]
                                  for j, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist()))])
        if f32 and (np.isnan(partial) | ((np.abs(partial) < _F32_TINY) & (partial != 0))).any():
            return None
    old = np.empty_like(b)
    old[1:] = partial[:-1]
    old[starts] = mem0          # the first add of each address sees memory as it was
    return old, partial[ends - 1]


def step_for(op: str, t: PtxType) -> Callable:
    """The element operation ``op`` of type ``t``: ``(old, operand[, operand])
    -> new`` (also :mod:`.multimem`'s reductions)."""
    if op == "add" and t.kind == "f":
        return _float_add(t)
    if op in ("min", "max") and t.kind == "f":
        return _float_minmax(t, op == "max")
    return {"inc": _inc, "dec": _dec, "exch": _exch, "cas": _cas}.get(op) or _ASSOCIATIVE[op]


def rmw(s: Step, space: str, addr: np.ndarray, t: PtxType, op: str,
        operands: tuple[np.ndarray, ...], memory: Any = None, threads: np.ndarray | None = None) -> np.ndarray:
    """Apply ``op`` atomically at ``addr`` for every executing thread, in
    thread order per address; returns the old values (of ``t``).
    ``memory``/``threads``: another device's memory and the threads whose
    addresses ``addr`` holds (:mod:`.multimem`); default: the launch's, all."""
    width = t.nbytes
    threads = s.threads if threads is None else threads
    old_all = np.zeros((len(threads),) + operands[0].shape[1:], dtype=operands[0].dtype)
    memory = s.m.memory if memory is None else memory
    for view, index, pos in memory.locations(space, addr, threads, width, s.ins.name, atomic=True):
        order, seg, starts = _segments(index)
        where = index[order][starts]
        mem0 = from_bits(t, view[where])
        ops = tuple(o[pos[order]] for o in operands)
        if op in _ASSOCIATIVE and t.kind != "f":
            old, final = _apply_scan(_ASSOCIATIVE[op], mem0, seg, starts, ops[0])
        elif op == "add" and t.name in ("f32", "f64") and ops[0].ndim == 1 and fastpaths.on() and \
                (chains := _float_add_chains(t, mem0, seg, starts, ops[0])) is not None:
            old, final = chains
        else:
            old, final = _apply_serial(step_for(op, t), mem0, seg, starts, ops)
        old_all[pos[order]] = old
        view[where] = to_bits(t, final, width * 8)
    return old_all


# --- the instructions --------------------------------------------------------------------------


def _operation(s: Step) -> str:
    op = s.mod("op")
    if op is None:
        raise SimError(f"{s.ins.name}: no atomic operation")
    return op


def _run(s: Step, d: int | None, a: int, srcs: tuple[int, ...]) -> None:
    """Shared body of atom and red: destination ``d`` (or none), address
    operand ``a``, source operands ``srcs``. Vector forms (``.v2.f32``,
    ``.v8.f16`` ...) are one atomic per element (PTX ISA, atom: the vector
    as a whole is not one atomic access)."""
    op = _operation(s)
    t = s.type(srcs[0])
    space, addr = s.address(a)
    values = tuple(s.src(k, t) for k in srcs)
    count = len(s.ins.operands[srcs[0]].items) if isinstance(s.ins.operands[srcs[0]], ir.Vector) else 1
    if count == 1:
        old = rmw(s, space, addr, t, op, values)
    else:
        total = count * t.nbytes
        bad = np.flatnonzero((addr % np.uint64(total)) != 0)
        if len(bad):
            at, (cta, tid) = int(addr[bad[0]]), divmod(int(s.threads[bad[0]]), s.m.ntid)
            raise SimFault(f"{s.ins.name}: misaligned {total}-byte vector atomic at {at:#x}"
                           f"{s.m.memory.describe(at)} (CTA {cta}, thread {tid})")
        old = np.stack([rmw(s, space, addr + np.uint64(i * t.nbytes), t, op,
                             tuple(v[..., i] for v in values)) for i in range(count)], axis=-1)
    if d is not None:
        s.dst(d, old, t)


@semantics('atom')
def atom(s: Step) -> None:
    """``atom.op``: atomic read-modify-write returning the old value (PTX ISA,
    atom: and, or, xor, exch, add, inc, dec, min, max; integer adds wrap;
    min/max compare signed for .s types)."""
    _run(s, 0, 1, (2,))


@semantics('atom_cas')
def atom_cas(s: Step) -> None:
    """``atom.cas``: ``d = old; mem = (old == b) ? c : old`` (PTX ISA, atom)."""
    _run(s, 0, 1, (2, 3))


@semantics('red')
def red(s: Step) -> None:
    """``red.op``: atomic reduction without a result (PTX ISA, red: as atom)."""
    _run(s, None, 0, (1,))

"""Emulator semantics: comparison and selection (PTX ISA 9.7.6 and the half
precision comparisons of 9.7.7): ``setp``, ``set``, ``selp``, ``slct``.

Packed ``f16x2``/``bf16x2`` comparisons work per half: ``setp`` writes the
low half's result to ``p`` and the high half's to ``q`` of ``p|q``; ``set``
writes a result per half.
"""

from __future__ import annotations


import numpy as np

from ...types import TYPES, PtxType
from ..numerics.formats import FORMATS, flush
from ..core.step import Step
from .registry import semantics

__all__ = ["compare"]

_PRED = TYPES["pred"]
_ORDERED = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
# unordered: true when either operand is NaN, else the ordered comparison
_UNORDERED = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
_UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def compare(a: np.ndarray, b: np.ndarray, cmp: str, t: PtxType, ftz: bool = False) -> np.ndarray:
    """``a cmp b`` for values of ``t`` (PTX ISA, "Comparison and Selection
    Instructions": ordered float comparisons are false when an operand is
    NaN, the ``u`` forms true; ``num``/``nan`` test for NaNs; ``lo ls hi hs``
    compare unsigned). ``ftz`` flushes subnormal float inputs."""
    if t.kind == "f":
        f = FORMATS[t.element or t.name]
        if ftz:
            a, b = flush(a, f), flush(b, f)
        a, b = a.astype(np.float64), b.astype(np.float64)
        nan = np.isnan(a) | np.isnan(b)
        if cmp == "num":
            return ~nan
        if cmp == "nan":
            return nan
        if cmp in _UNORDERED:
            return nan | _ORDERED[_UNORDERED[cmp]](a, b)
        return ~nan & _ORDERED[cmp](a, b)
    if cmp in _UNSIGNED:
        cmp = _UNSIGNED[cmp]
        if a.dtype.kind == "i":
            a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
    return _ORDERED[cmp](a, b)


def _combine(r: np.ndarray, s: Step) -> tuple[np.ndarray, np.ndarray]:
    """``(r BoolOp c, !r BoolOp c)`` with the optional ``{!}c`` operand."""
    op = s.mod("boolop")
    if op is None:
        return r, ~r
    c = s.pred(3)
    if r.ndim == 2:
        c = c[:, None]
    fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    return fn(r, c), fn(~r, c)


@semantics('setp')
def setp(s: Step) -> None:
    """``setp``: compare, write ``p`` (and ``q`` of ``p|q``, the complement);
    with a BoolOp ``p = (a cmp b) op c`` and ``q = !(a cmp b) op c``. For
    f16x2/bf16x2 ``p`` is the low half's result and ``q`` the high half's,
    each combined with c (PTX ISA, setp)."""
    t = s.type(1)
    r = compare(s.src(1), s.src(2), s.mod("cmp"), t, s.mod("ftz") is not None)
    p, q = _combine(r, s)
    if t.lanes == 2:
        p, q = p[:, 0], p[:, 1]
    s.dst(0, p, _PRED)
    s.dst_pred_of_pair(0, q)


@semantics('set')
def set_(s: Step) -> None:
    """``set``: compare (with the optional BoolOp and c), write 1.0/0.0 to a
    float destination and all ones/0 to an integer one (PTX ISA, set). With
    packed sources each half is set: 1.0/0.0 halves for f16x2/bf16x2
    destinations, 0xFFFF/0 halves for u32/s32 ones."""
    st, dt = s.type(1), s.type(0)
    r = compare(s.src(1), s.src(2), s.mod("cmp"), st, s.mod("ftz") is not None)
    r, _ = _combine(r, s)
    if dt.kind == "f":
        f = FORMATS[dt.element or dt.name]
        s.dst(0, np.where(r, np.ones(1, f.dtype), np.zeros(1, f.dtype)))
        return
    if st.lanes == 2:
        halves = np.where(r, np.uint32(0xFFFF), np.uint32(0))
        s.dst(0, (halves[:, 0] | (halves[:, 1] << np.uint32(16))).astype(np.uint32), TYPES["u32"])
        return
    ones = np.full(1, (1 << dt.bits) - 1, dtype=f"u{dt.bits // 8}")
    s.dst(0, np.where(r, ones, np.zeros(1, ones.dtype)), TYPES[f"u{dt.bits}"])


@semantics('selp')
def selp(s: Step) -> None:
    """``selp``: d = c ? a : b (PTX ISA, selp)."""
    s.dst(0, np.where(s.pred(3), s.src(1), s.src(2)))


@semantics('slct')
def slct(s: Step) -> None:
    """``slct``: d = (c >= 0) ? a : b, c an s32 or f32 (``.ftz`` flushes a
    subnormal c; -0.0 counts as >= 0, NaN does not) (PTX ISA, slct)."""
    ct = s.type(3)
    c = s.src(3)
    if ct.kind == "f" and s.mod("ftz") is not None:
        c = flush(c, FORMATS["f32"])
    with np.errstate(invalid="ignore"):
        s.dst(0, np.where(c >= 0, s.src(1), s.src(2)))

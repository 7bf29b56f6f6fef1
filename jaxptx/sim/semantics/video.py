"""Emulator semantics: the video instructions (PTX ISA 9.7.18).

Scalar video instructions (``vadd`` ... ``vset``, 9.7.18.1) extract a byte,
half-word or word of each source (operand selectors ``.b0-.b3 .h0 .h1``),
sign- or zero-extend it to 33 bits by the source's type, compute a 34-bit
result, optionally saturate it to the destination's range (the byte or
half-word range when merging), then either apply the secondary operation
``.add/.min/.max`` with ``c`` or merge the low byte/half-word into ``c`` at
the destination selector. SIMD video instructions (9.7.18.2) pick two
half-words (``vop2``, selector ``.hxy``) or four bytes (``vop4``,
``.bxyzw``) out of the pair ``b:a``, compute per lane, and either merge the
lanes named by the destination mask into ``c`` or add them to ``c``.

The selectors are part of the operand (``%r2.b3``); :func:`_source` reads
them off the register name. Arithmetic is done in int64 (34-bit values fit);
``vmad``'s 66-bit product uses Python integers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np

from ... import ir
from ...types import TYPES
from ..core.step import Step
from .registry import register, semantics

__all__: list[str] = []

_U32 = TYPES["u32"]
_MASK32 = (1 << 32) - 1
# An operand selector on a register: .b0-.b3 / .h0 .h1 (scalar), .hxy and
# .bxyzw (SIMD sources), .h10 / .b3210 ... (SIMD destination masks).
_SELECTOR = re.compile(r"^(.+)\.([bh][0-7]{1,4})$")
_CMP: dict[str, Callable] = {"eq": np.equal, "ne": np.not_equal, "lt": np.less,
                             "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_SECOP: dict[str, Callable] = {"add": np.add, "min": np.minimum, "max": np.maximum}


def _split(s: Step, k: int) -> tuple[ir.Operand, str | None]:
    """Operand ``k`` without its selector, and the selector (``"b3"``)."""
    op = s.ins.operands[k]
    if isinstance(op, ir.Register) and op.name not in s.m.regs:
        m = _SELECTOR.match(op.name)
        if m is not None:
            return ir.Register(m.group(1)), m.group(2)
    return op, None


def _source(s: Step, k: int) -> tuple[np.ndarray, str | None]:
    """Operand ``k``'s 32 bits (int64, zero-extended) and its selector."""
    op, sel = _split(s, k)
    return s.value(op, _U32).astype(np.int64), sel


def _extend(bits: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """The low ``width`` bits of int64 ``bits``, sign- or zero-extended."""
    v = bits & ((1 << width) - 1)
    return np.where(v >= 1 << (width - 1), v - (1 << width), v) if signed else v


def _part(bits: np.ndarray, sel: str | None, signed: bool) -> np.ndarray:
    """PTX ISA 9.7.18.1: extract the selected byte, half-word or (no
    selector) word and sign- or zero-extend it by the operand's type."""
    if sel is None:
        return _extend(bits, 32, signed)
    width = 8 if sel[0] == "b" else 16
    return _extend(bits >> (width * int(sel[1])), width, signed)


def _signed(s: Step, slot: str) -> bool:
    return s.mod(slot) == "s32"


def _clamp(v: np.ndarray, width: int, signed: bool) -> np.ndarray:
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    return np.clip(v, lo, hi)


def _finish(s: Step, tmp: np.ndarray, signed: bool, sat: bool) -> None:
    """Saturate (to the merged part's range when merging), then apply the
    secondary operation or merge into ``c`` (PTX ISA 9.7.18.1, optSaturate,
    optSecOp, optMerge); the low 32 bits go to ``d``."""
    dest, dsel = _split(s, 0)
    width = 32 if dsel is None else (8 if dsel[0] == "b" else 16)
    if sat:
        tmp = _clamp(tmp, width, signed)
    secop = s.mod("secop")
    if secop is not None:
        c, _ = _source(s, 3)
        tmp = _SECOP[secop](tmp, _extend(c, 32, signed))
    elif dsel is not None:
        c, _ = _source(s, 3)
        shift = width * int(dsel[1])
        field = ((1 << width) - 1) << shift
        tmp = ((tmp << shift) & field) | (c & (_MASK32 ^ field))
    s.write(dest, (tmp & _MASK32).astype(np.uint32), _U32)


def _sources(s: Step) -> tuple[np.ndarray, np.ndarray]:
    (a, asel), (b, bsel) = _source(s, 1), _source(s, 2)
    return _part(a, asel, _signed(s, "atype")), _part(b, bsel, _signed(s, "btype"))


def scalar(op: str, s: Step) -> None:
    """``vadd vsub vabsdiff vmin vmax`` (PTX ISA 9.7.18.1.1); ``op`` comes
    from the table's ``sim`` name (``video_add`` ...)."""
    ta, tb = _sources(s)
    tmp = {"add": ta + tb, "sub": ta - tb, "absdiff": np.abs(ta - tb),
           "min": np.minimum(ta, tb), "max": np.maximum(ta, tb)}[op]
    _finish(s, tmp, _signed(s, "dtype"), s.mod("sat") is not None)


def shift(op: str, s: Step) -> None:
    """``vshl``/``vshr`` (PTX ISA 9.7.18.1.2): the amount is an unsigned
    selected part of b, limited to 32 (``.clamp``) or taken mod 32
    (``.wrap``); ``vshr`` of a signed source fills with its sign. The shifted
    value is kept to the 34 bits of the intermediate result."""
    (a, asel), (b, bsel) = _source(s, 1), _source(s, 2)
    ta = _part(a, asel, _signed(s, "atype"))
    tb = _part(b, bsel, False)
    tb = np.minimum(tb, 32) if s.mod("mode") == "clamp" else tb & 31
    if op == "shl":
        wide = (ta.astype(np.uint64) << tb.astype(np.uint64)) & np.uint64((1 << 34) - 1)
        tmp = _extend(wide.astype(np.int64), 34, True)
    else:
        tmp = ta >> tb
    _finish(s, tmp, _signed(s, "dtype"), s.mod("sat") is not None)


@semantics('video_set')
def vset(s: Step) -> None:
    """``vset`` (PTX ISA 9.7.18.1.4): 1 if the selected parts compare true,
    else 0; the result, ``c`` and ``d`` are unsigned."""
    ta, tb = _sources(s)
    tmp = _CMP[s.mod("cmp")](ta, tb).astype(np.int64)
    _finish(s, tmp, False, False)


@semantics('video_mad')
def vmad(s: Step) -> None:
    """``vmad`` (PTX ISA 9.7.18.1.3): ``ta * tb + c (+1 with .po)``, with c
    sign-extended when the result is signed (either source signed), shifted
    right by 7 or 15 with ``.shr7/.shr15``, and saturated to the signed or
    unsigned 32-bit range with ``.sat``. (Operand negation, ``-a``, is not
    representable in jaxptx's IR, so it never reaches the emulator.)"""
    ta, tb = (x.astype(object) for x in _sources(s))
    signed = _signed(s, "atype") or _signed(s, "btype")
    c, _ = _source(s, 3)
    tmp = ta * tb + _extend(c, 32, signed).astype(object) + (1 if s.mod("po") else 0)
    scale = s.mod("scale")
    if scale is not None:
        tmp = tmp >> (7 if scale == "shr7" else 15)
    if s.mod("sat") is not None:
        tmp = np.clip(tmp, *((-(1 << 31), (1 << 31) - 1) if signed else (0, _MASK32)))
    s.dst(0, np.array([int(v) & _MASK32 for v in tmp], dtype=np.uint32), _U32)


# SIMD ----------------------------------------------------------------------------
def _lanes(s: Step, k: int, lanes: int, default: str, signed: bool) -> np.ndarray:
    """SIMD source ``k``: the ``lanes`` parts of the pair ``b:a`` its
    selector names (the last digit is lane 0; ``default`` when it has none),
    extended by its type, as an ``(n, lanes)`` int64 array."""
    _, sel = _split(s, k)
    a, _ = _source(s, 1)
    b, _ = _source(s, 2)
    pair = a | (b << 32)
    width = 32 // lanes
    digits = (sel or default)[1:][::-1]
    return np.stack([_extend(pair >> (width * int(d)), width, signed) for d in digits], axis=1)


def _simd_finish(s: Step, t: np.ndarray, lanes: int) -> None:
    """Accumulate the masked lanes into ``c`` (``.add``) or merge them into
    ``c``'s lanes (PTX ISA 9.7.18.2: mask = the destination selector, all
    lanes by default)."""
    dest, dsel = _split(s, 0)
    mask = [str(i) in dsel[1:] for i in range(lanes)] if dsel is not None else [True] * lanes
    c, _ = _source(s, 3)
    width = 32 // lanes
    if s.mod("add") is not None:
        d = c + sum(t[:, i] for i in range(lanes) if mask[i])
    else:
        d = c
        for i in range(lanes):
            if mask[i]:
                field = ((1 << width) - 1) << (width * i)
                d = (d & (_MASK32 ^ field)) | ((t[:, i] << (width * i)) & field)
    s.write(dest, (d & _MASK32).astype(np.uint32), _U32)


def simd(lanes: int, op: str, s: Step) -> None:
    """``vadd2 vsub2 vavrg2 vabsdiff2 vmin2 vmax2`` and their ``4`` forms
    (PTX ISA 9.7.18.2.1-2); ``vavrg`` rounds halves away from zero."""
    va = _lanes(s, 1, lanes, "h10" if lanes == 2 else "b3210", _signed(s, "atype"))
    vb = _lanes(s, 2, lanes, "h32" if lanes == 2 else "b7654", _signed(s, "btype"))
    total = va + vb
    t = {"add": total, "sub": va - vb, "absdiff": np.abs(va - vb), "min": np.minimum(va, vb),
         "max": np.maximum(va, vb),
         "avrg": np.where(total >= 0, (total + 1) >> 1, total >> 1)}[op]
    if s.mod("sat") is not None:
        t = _clamp(t, 32 // lanes, _signed(s, "dtype"))
    _simd_finish(s, t, lanes)


def simd_set(lanes: int, s: Step) -> None:
    """``vset2``/``vset4`` (PTX ISA 9.7.18.2.3-4): 1 or 0 per lane."""
    va = _lanes(s, 1, lanes, "h10" if lanes == 2 else "b3210", _signed(s, "atype"))
    vb = _lanes(s, 2, lanes, "h32" if lanes == 2 else "b7654", _signed(s, "btype"))
    _simd_finish(s, _CMP[s.mod("cmp")](va, vb).astype(np.int64), lanes)


register("video_shl", functools.partial(shift, "shl"))
register("video_shr", functools.partial(shift, "shr"))
register("video2_set", functools.partial(simd_set, 2))
register("video4_set", functools.partial(simd_set, 4))
for _op in ("add", "sub", "absdiff", "min", "max"):
    register(f"video_{_op}", functools.partial(scalar, _op))
for _n in (2, 4):
    for _op in ("add", "sub", "avrg", "absdiff", "min", "max"):
        register(f"video{_n}_{_op}", functools.partial(simd, _n, _op))

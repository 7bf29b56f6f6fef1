"""Emulator semantics: integer arithmetic (PTX ISA 9.7.1 and the extended-
precision instructions of 9.7.2), and the dispatch of ``add``/``sub``/
``abs``/``neg``/``min``/``max`` to :mod:`.float_arith` for float types.

Integer results wrap modulo 2**width unless ``.sat`` says otherwise; packed
``u16x2``/``s16x2`` values operate per half. The carry flag ``CC.CF`` of
``add.cc``/``addc``/``sub.cc``/``subc``/``mad.cc``/``madc`` is per-thread
hidden state kept on the machine as ``m.carry`` (a bool array over all
threads, created on first use). It is the hardware carry: subtraction
stores NOT borrow, as ``a + ~b + 1`` would.
"""

from __future__ import annotations


import numpy as np

from ...types import TYPES, PtxType
from .float_arith import float_abs_neg, float_binary, float_minmax
from ..core.step import Step
from .registry import semantics
from ..numerics.values import UINT

__all__: list[str] = []

_M32 = np.uint64(0xFFFF_FFFF)
_S32 = np.uint64(32)


_B32 = TYPES["b32"]
_PACKED = {"u16x2": np.dtype(np.uint16), "s16x2": np.dtype(np.int16)}


def _is_float(s: Step) -> bool:
    return s.type(0).kind == "f"


def _halves(s: Step, k: int) -> np.ndarray:
    """Operand ``k`` of a ``u16x2``/``s16x2`` form as (n, 2) halves, low first."""
    dt = _PACKED[s.mod("type")]
    return np.ascontiguousarray(s.src(k, _B32)).view(dt).reshape(s.n, 2)


def _pack(s: Step, halves: np.ndarray) -> None:
    """Write (n, 2) halves to the destination as one 32-bit value."""
    dt = _PACKED[s.mod("type")]
    s.dst(0, np.ascontiguousarray(halves.astype(dt)).view(np.uint32).reshape(s.n), _B32)


def _unsigned(x: np.ndarray) -> np.ndarray:
    """The same bits as an unsigned array."""
    return x.view(UINT[x.dtype.itemsize * 8]) if x.dtype.kind == "i" else x


def _wrap(x: np.ndarray, t: PtxType) -> np.ndarray:
    """Integer values reduced modulo 2**bits into ``t``'s dtype."""
    bits = t.bits // t.lanes
    if x.dtype.kind in "iu" and x.dtype.itemsize * 8 == bits:     # already that wide
        return x.view(np.dtype(f"int{bits}") if t.kind == "s" else UINT[bits])
    u = x.astype(np.int64).view(np.uint64) if x.dtype.kind == "i" else x.astype(np.uint64)
    u = u.astype(UINT[bits])
    return u.view(np.dtype(f"int{bits}")) if t.kind == "s" else u


def _mul_wide64(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit product of two 64-bit values as (hi, lo) uint64; signed
    inputs give the signed product's two's-complement halves."""
    ua, ub = _unsigned(a).astype(np.uint64), _unsigned(b).astype(np.uint64)
    al, ah, bl, bh = ua & _M32, ua >> _S32, ub & _M32, ub >> _S32
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> _S32) + (lh & _M32) + (hl & _M32)
    lo = (mid << _S32) | (ll & _M32)
    hi = hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)
    if a.dtype.kind == "i":
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return hi, lo


def _product(a: np.ndarray, b: np.ndarray, mode: str, t: PtxType) -> np.ndarray:
    """``a * b`` of type ``t``: its low half, high half or (``wide``) all of it
    as int64/uint64 values (PTX ISA, mul: ".wide doubles the destination
    width"; ".hi/.lo: the upper or lower half of the 2n-bit product")."""
    bits = t.bits // t.lanes
    if bits == 64:
        hi, lo = _mul_wide64(a, b)
        return _wrap(hi if mode == "hi" else lo, t)
    big = np.int64 if t.kind == "s" else np.uint64
    p = np.multiply(a, b, dtype=big)        # exact: both factors have at most 32 bits
    if mode == "wide":
        return p
    return _wrap(p >> big(bits) if mode == "hi" else p, t)


# add / sub ---------------------------------------------------------------------
def _add_sub(s: Step, sign: int) -> None:
    if _is_float(s):
        float_binary(s, "add" if sign > 0 else "sub")
        return
    if s.mod("type") in _PACKED:
        a, b = _halves(s, 1), _halves(s, 2)
        _pack(s, a + b if sign > 0 else a - b)
        return
    a, b = s.src(1), s.src(2)
    t = s.type(0)
    if s.mod("sat") is not None:       # .sat.s32: clamp to [MININT, MAXINT]
        r = a.astype(np.int64) + sign * b.astype(np.int64)
        s.dst(0, np.clip(r, -2**31, 2**31 - 1).astype(np.int32))
        return
    s.dst(0, _wrap(a + b if sign > 0 else a - b, t))


@semantics('add')
def add(s: Step) -> None:
    """``add``: integers wrap (``.sat.s32`` saturates), packed ``x2`` per
    half; floats per :func:`.float_arith.float_binary`."""
    _add_sub(s, 1)


@semantics('sub')
def sub(s: Step) -> None:
    """``sub``: as :func:`add`, subtracting."""
    _add_sub(s, -1)


# multiply ---------------------------------------------------------------------
@semantics('mul_int')
def mul_int(s: Step) -> None:
    """``mul.hi/.lo/.wide`` on integers (PTX ISA, mul)."""
    s.dst(0, _product(s.src(1), s.src(2), s.mod("mode"), s.type(1)))


@semantics('mad_int')
def mad_int(s: Step) -> None:
    """``mad.hi/.lo/.wide`` on integers: the chosen part of a*b plus c,
    wrapping; ``mad.hi.sat.s32`` saturates the sum (PTX ISA, mad)."""
    t = s.type(1)
    mode = s.mod("mode")
    p = _product(s.src(1), s.src(2), mode, t)
    c = s.src(3)
    if s.mod("sat") is not None:
        r = p.astype(np.int64) + c.astype(np.int64)
        s.dst(0, np.clip(r, -2**31, 2**31 - 1).astype(np.int32))
        return
    s.dst(0, p + c.astype(p.dtype))


def _mul24(s: Step) -> np.ndarray:
    t = s.type(1)
    a, b = (v.astype(np.int64) & 0xFFFFFF for v in (s.src(1), s.src(2)))
    if t.kind == "s":               # sign-extend the 24-bit operands
        a, b = (np.where(v >= 1 << 23, v - (1 << 24), v) for v in (a, b))
    p = a * b                       # the 48-bit product
    return _wrap(p >> 16 if s.mod("mode") == "hi" else p, t)


@semantics('mul24')
def mul24(s: Step) -> None:
    """``mul24``: product of the low 24 bits of a and b (sign-extended for
    .s32); ``.lo`` gives bits 31..0 of the 48-bit product, ``.hi`` bits 47..16
    (PTX ISA, mul24)."""
    s.dst(0, _mul24(s))


@semantics('mad24')
def mad24(s: Step) -> None:
    """``mad24``: :func:`mul24` plus c, wrapping (PTX ISA, mad24)."""
    p = _mul24(s)
    s.dst(0, p + s.src(3).astype(p.dtype))


@semantics('sad')
def sad(s: Step) -> None:
    """``sad``: c + |a - b| (PTX ISA, sad), wrapping in the type."""
    a, b, c = s.src(1), s.src(2), s.src(3)
    diff = np.where(a > b, _unsigned(a) - _unsigned(b), _unsigned(b) - _unsigned(a))
    s.dst(0, _wrap(diff + _unsigned(c), s.type(0)))


def _quot_rem(s: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    a, b = s.src(1), s.src(2)
    ua, ub = _unsigned(a), _unsigned(b)
    if a.dtype.kind == "i":          # magnitudes as unsigned (|MININT| fits)
        ua = np.where(a < 0, -ua, ua)
        ub = np.where(b < 0, -ub, ub)
    zero = ub == 0
    safe = np.where(zero, 1, ub).astype(ua.dtype)
    return a, b, ua // safe, ua % safe


@semantics('div_int')
def div_int(s: Step) -> None:
    """``div`` on integers: truncates toward zero (PTX ISA, div). PTX leaves
    division by zero machine-specific; the emulator gives all ones (-1), and
    MININT / -1 wraps to MININT."""
    a, b, q, _ = _quot_rem(s)
    if a.dtype.kind == "i":
        q = np.where((a < 0) != (b < 0), -q, q)
    q = np.where(_unsigned(b) == 0, ~np.zeros(1, q.dtype), q)
    s.dst(0, q.view(a.dtype))


@semantics('rem')
def rem(s: Step) -> None:
    """``rem``: remainder with the sign of a (PTX ISA, rem: "a - (a / b) * b"
    with truncating division). Remainder by zero gives a (machine-specific
    per PTX)."""
    a, b, _, r = _quot_rem(s)
    if a.dtype.kind == "i":
        r = np.where(a < 0, -r, r)
    r = np.where(_unsigned(b) == 0, _unsigned(a), r)
    s.dst(0, r.view(a.dtype))


# abs / neg / min / max ---------------------------------------------------------
@semantics('abs')
def abs_(s: Step) -> None:
    """``abs``: integers wrap (|MININT| = MININT); floats clear the sign."""
    if _is_float(s):
        float_abs_neg(s, negate=False)
        return
    a = s.src(1)
    s.dst(0, np.where(a < 0, -a, a))


@semantics('neg')
def neg(s: Step) -> None:
    """``neg``: integers wrap (-MININT = MININT); floats flip the sign."""
    if _is_float(s):
        float_abs_neg(s, negate=True)
        return
    s.dst(0, -s.src(1))


def _minmax(s: Step, is_max: bool) -> None:
    if _is_float(s):
        float_minmax(s, is_max)
        return
    packed = s.mod("type") in _PACKED
    a, b = (_halves(s, k) if packed else s.src(k) for k in (1, 2))
    r = (np.maximum if is_max else np.minimum)(a, b)
    if s.mod("relu") is not None:      # .relu: clamp negative results to 0
        r = np.maximum(r, 0).astype(r.dtype)
    if packed:
        _pack(s, r)
    else:
        s.dst(0, r)


@semantics('min')
def min_(s: Step) -> None:
    """``min``: integers (packed per half; ``.relu`` clamps at 0); floats per
    :func:`.float_arith.float_minmax`."""
    _minmax(s, False)


@semantics('max')
def max_(s: Step) -> None:
    """``max``: see :func:`min_`."""
    _minmax(s, True)


# extended precision -----------------------------------------------------------------
def _carry(s: Step) -> np.ndarray:
    """The executing threads' carry flags (CC.CF), as 0/1 of the operand width."""
    c = getattr(s.m, "carry", None)
    if c is None:
        c = s.m.carry = np.zeros(s.m.nthreads, dtype=bool)
    return c[s.threads]


def _set_carry(s: Step, value: np.ndarray) -> None:
    if getattr(s.m, "carry", None) is None:
        s.m.carry = np.zeros(s.m.nthreads, dtype=bool)
    s.m.carry[s.threads] = value


def _add_carry(s: Step, x: np.ndarray, y: np.ndarray, cin: np.ndarray | None, write: bool) -> None:
    ux, uy = _unsigned(x), _unsigned(y)
    t = ux + uy
    carry = t < ux
    if cin is not None:
        d = t + cin.astype(t.dtype)
        carry |= d < t
        t = d
    s.dst(0, t.view(x.dtype))
    if write:
        _set_carry(s, carry)


def _sub_borrow(s: Step, bin_: np.ndarray | None, write: bool) -> None:
    """a - b - borrow-in. The flag holds the hardware carry of
    ``a + ~b + 1``, i.e. NOT borrow: ``addc`` after ``sub.cc`` reads 0 when
    the subtraction borrowed (ZLUDA's GPU-checked ``subc_cc_s32`` vector)."""
    a, b = s.src(1), s.src(2)
    ua, ub = _unsigned(a), _unsigned(b)
    d = ua - ub
    borrow = ua < ub
    if bin_ is not None:
        borrow = np.where(bin_, ua <= ub, borrow)
        d = d - bin_.astype(d.dtype)
    s.dst(0, d.view(a.dtype))
    if write:
        _set_carry(s, ~borrow)


@semantics('add_cc')
def add_cc(s: Step) -> None:
    """``add.cc``: a + b, writing the carry-out to CC.CF (PTX ISA, add.cc)."""
    _add_carry(s, s.src(1), s.src(2), None, True)


@semantics('addc')
def addc(s: Step) -> None:
    """``addc{.cc}``: a + b + CC.CF, optionally writing the carry-out."""
    _add_carry(s, s.src(1), s.src(2), _carry(s), s.mod("cc") is not None)


@semantics('sub_cc')
def sub_cc(s: Step) -> None:
    """``sub.cc``: a - b, writing the borrow-out to CC.CF (PTX ISA, sub.cc;
    stored as NOT borrow, see :func:`_sub_borrow`)."""
    _sub_borrow(s, None, True)


@semantics('subc')
def subc(s: Step) -> None:
    """``subc{.cc}``: a - (b + borrow-in), optionally writing the borrow-out
    (CC.CF holds NOT borrow, see :func:`_sub_borrow`)."""
    _sub_borrow(s, ~_carry(s), s.mod("cc") is not None)


@semantics('mad_cc')
def mad_cc(s: Step) -> None:
    """``mad.hi/.lo.cc``: the chosen half of a*b plus c, writing the carry-out
    (PTX ISA, mad.cc)."""
    p = _product(s.src(1), s.src(2), s.mod("mode"), s.type(1))
    _add_carry(s, p, s.src(3), None, True)


@semantics('madc')
def madc(s: Step) -> None:
    """``madc.hi/.lo{.cc}``: the chosen half of a*b plus c plus CC.CF,
    optionally writing the carry-out (PTX ISA, madc)."""
    p = _product(s.src(1), s.src(2), s.mod("mode"), s.type(1))
    _add_carry(s, p, s.src(3), _carry(s), s.mod("cc") is not None)


# dot products ------------------------------------------------------------------------
def _parts(x: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """The ``32 // width`` fields of 32-bit values as int64 columns (low first)."""
    u = _unsigned(x).astype(np.uint32)
    dt = {8: (np.int8, np.uint8), 16: (np.int16, np.uint16)}[width][0 if signed else 1]
    return np.ascontiguousarray(u).view(dt).reshape(len(u), 32 // width).astype(np.int64)


@semantics('dp4a')
def dp4a(s: Step) -> None:
    """``dp4a``: c + the sum of the four byte products of a and b (bytes
    sign- or zero-extended per .atype/.btype), wrapping to 32 bits (PTX ISA,
    dp4a)."""
    a = _parts(s.src(1), 8, s.type(1).kind == "s")
    b = _parts(s.src(2), 8, s.type(2).kind == "s")
    r = (a * b).sum(axis=1) + s.src(3).astype(np.int64)
    s.dst(0, r.astype(np.uint64).astype(np.uint32))


@semantics('dp2a')
def dp2a(s: Step) -> None:
    """``dp2a.lo/.hi``: c + the products of a's two 16-bit halves with bytes
    0-1 (``.lo``) or 2-3 (``.hi``) of b, wrapping to 32 bits (PTX ISA, dp2a)."""
    a = _parts(s.src(1), 16, s.type(1).kind == "s")
    b = _parts(s.src(2), 8, s.type(2).kind == "s")
    k = 2 if s.mod("mode") == "hi" else 0
    r = (a * b[:, k:k + 2]).sum(axis=1) + s.src(3).astype(np.int64)
    s.dst(0, r.astype(np.uint64).astype(np.uint32))

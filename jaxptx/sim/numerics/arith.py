"""Exact IEEE floating-point arithmetic for the emulator's semantics.

numpy rounds to nearest. The PTX rounding modifiers ``.rn/.rz/.rm/.rp``
need each result rounded in a chosen direction, so every operation here
produces the round-to-nearest ``float64`` result ``x`` *and* the sign of the
rounding error (``exact - x``: -1, 0 or +1), computed with error-free
transformations (TwoSum, Dekker's TwoProduct, exact expansion signs):

* f16 / bf16 / f32 operations run in float64 and are rounded once more
  to the target type. The float64 result is first made *round-to-odd*
  (Boldo & Melquiond), which makes the second rounding correct in every
  mode, since float64 has at least two more bits than the target.
* f64 operations correct numpy's result with the error sign. ``fma.f64``
  uses Boldo & Melquiond's emulation of a fused multiply-add by
  round-to-odd. Where an error-free transformation could over- or
  underflow (operands beyond 2**995, products below 2**-966, results
  outside [2**-960, 2**1000]) the few affected elements get their nearest
  value and error sign from :class:`fractions.Fraction` arithmetic instead.

NaN results are the canonical NaN of each type: positive with all payload
bits set (``0x7fffffff`` for f32, ``0x7fff`` for f16/bf16; the same pattern,
``0x7fffffffffffffff``, for f64, whose hardware NaN bits are not verified).
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from .formats import FORMATS, Format, canonical, flush, next_down, next_up, sign_bit, two_prod, with_sign

__all__ = ["arith", "round_to", "saturate"]

_F64 = FORMATS["f64"]


# error-free transformations (float64) --------------------------------------------
def _two_sum_err(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Knuth's TwoSum: ``a + b - s`` exactly (``s = fl(a + b)``, finite)."""
    bb = s - a
    return (a - (s - bb)) + (b - bb)


def _prod_safe(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where TwoProduct of float64 ``a``, ``b`` is exact (no over/underflow)."""
    aa, ab = np.abs(a), np.abs(b)
    ok_a = (aa == 0) | ((aa >= 2.0 ** -1022) & (aa < 2.0 ** 995))
    ok_b = (ab == 0) | ((ab >= 2.0 ** -1022) & (ab < 2.0 ** 995))
    p = aa * ab
    return ok_a & ok_b & ((aa == 0) | (ab == 0) | ((p >= 2.0 ** -966) & (p < 2.0 ** 1020)))


def _sign_of_sum(*terms: np.ndarray) -> np.ndarray:
    """Exact sign of a sum of float64 arrays (Shewchuk's Grow-Expansion keeps a
    nonoverlapping expansion; its largest nonzero component has the sum's sign)."""
    expansion: list[np.ndarray] = []
    for t in terms:
        q = t
        grown = []
        for e in expansion:
            s = q + e
            grown.append(_two_sum_err(q, e, s))
            q = s
        expansion = grown + [q]
    sign = np.zeros(np.shape(terms[0]), dtype=np.int8)
    for comp in reversed(expansion):
        sign = np.where(sign == 0, _sgn(comp), sign)
    return sign


def _sgn(v: np.ndarray) -> np.ndarray:
    """Sign as int8 (-1, 0, 1); NaN gives 0."""
    return (v > 0).astype(np.int8) - (v < 0).astype(np.int8)


def _round_odd(x: np.ndarray, err_sign: np.ndarray) -> np.ndarray:
    """Round-to-odd of ``x + (a tiny error of sign err_sign)``."""
    even = (x.view(np.uint64 if x.dtype == np.float64 else np.uint32) & 1) == 0
    bump = (err_sign != 0) & even & np.isfinite(x)
    if not bump.any():
        return x
    return np.where(bump, np.nextafter(x, np.where(err_sign > 0, np.inf, -np.inf).astype(x.dtype)), x)


# exact fallback ----------------------------------------------------------------------
def _round_fraction(q: Fraction, f: Format, mode: str) -> float:
    """The rational ``q`` rounded to format ``f`` in ``mode`` (as a Python float)."""
    if q == 0:
        return 0.0
    neg = q < 0
    n, d = abs(q.numerator), q.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1
    e = max(e, f.emin)
    shift = f.p - 1 - e
    m, rem = divmod(n << shift, d) if shift >= 0 else divmod(n, d << -shift)
    if rem:
        if mode == "rn":
            up = 2 * rem > d * (1 << max(0, -shift)) or (2 * rem == d * (1 << max(0, -shift)) and m & 1)
        else:
            up = {"rz": False, "rp": not neg, "rm": neg}[mode]
        m += int(up)
    if m.bit_length() + e - f.p + 1 > f.emax + 1:        # overflow
        to_inf = mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg)
        val = math.inf if to_inf else math.ldexp((1 << f.p) - 1, f.emax - f.p + 1)
    else:
        val = math.ldexp(m, e - f.p + 1)
    return -val if neg else val


def _exact(op: str, args: tuple[float, ...]) -> Fraction:
    a, b, *c = (Fraction(v) for v in args)
    if op == "add":
        return a + b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    return a * b + c[0]


# operations ----------------------------------------------------------------------------
def _wide(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, sign(exact - x))`` for f16/bf16/f32 operands held in float64:
    products are exact there, sums and quotients get their error sign."""
    if op == "mul":
        x = a * b
        return x, np.zeros(x.shape, np.int8)
    if op == "div":
        x = a / b
        p, pe = two_prod(x, b)
        sgn = _sign_of_sum(a, -p, -pe) * _sgn(b)
        sgn = np.where(np.isfinite(b) & (x != 0), sgn, 0)
    else:
        u, v = (a, b) if op == "add" else (a * b, c)
        x = u + v
        sgn = _sgn(_two_sum_err(u, v, x))
    return x, np.where(np.isfinite(x), sgn, 0).astype(np.int8)


def _f64(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
         mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, sign(exact - x))`` for f64 operands, ``x`` the nearest float64
    (the sign is only computed for directed modes, except inside fma)."""
    fin = np.isfinite(a) & np.isfinite(b) & (np.isfinite(c) if c is not None else True)
    unsafe = np.zeros(a.shape, bool)
    if op == "fma":
        uh, ul = two_prod(a, b)
        th = c + uh
        tl = _two_sum_err(c, uh, th)
        v = tl + ul
        vo = _round_odd(v, _sgn(_two_sum_err(tl, ul, v)))
        x = th + vo
        plain = ~fin | (a == 0) | (b == 0)
        x = np.where(plain, a * b + c, x)
        sgn = _sign_of_sum(th, tl, ul, -x) if mode != "rn" else np.zeros(x.shape, np.int8)
        sgn = np.where(plain, 0, sgn)
        ax = np.abs(x)
        unsafe = fin & ~plain & (~_prod_safe(a, b) | (np.abs(c) >= 2.0 ** 1000) |
                                 ((ax != 0) & (ax < 2.0 ** -960)) | (ax >= 2.0 ** 1000))
    else:
        x = {"add": np.add, "mul": np.multiply, "div": np.divide}[op](a, b)
        if mode == "rn":
            return x, np.zeros(x.shape, np.int8)
        if op == "add":
            sgn = _sgn(_two_sum_err(a, b, x))
        elif op == "mul":
            sgn = _sgn(two_prod(a, b)[1])
            unsafe = fin & ~_prod_safe(a, b)
        else:
            p, pe = two_prod(x, b)
            sgn = np.where(b == 0, 0, _sign_of_sum(a, -p, -pe) * _sgn(b))
            unsafe = fin & (b != 0) & (a != 0) & ~_prod_safe(x, b)
    overflow = fin & ~np.isfinite(x) & ((b != 0) if op == "div" else True)   # x / 0 is exact
    sgn = np.where(np.isfinite(x), sgn, np.where(overflow, -_sgn(x), 0)).astype(np.int8)
    sgn = np.where(fin, sgn, 0).astype(np.int8)
    if unsafe.any():
        x, sgn = x.copy(), sgn.copy()
        for i in zip(*np.nonzero(unsafe)):
            q = _exact(op, tuple(float(v[i]) for v in ((a, b) if c is None else (a, b, c))))
            if q != 0:          # an exact zero keeps numpy's signed zero
                x[i] = _round_fraction(q, _F64, "rn")
                sgn[i] = -np.sign(x[i]) if math.isinf(x[i]) else (q > Fraction(x[i])) - (q < Fraction(x[i]))
    return x, sgn


def _adjust(r: np.ndarray, sgn: np.ndarray, mode: str, f: Format) -> np.ndarray:
    """Move the nearest result ``r`` one step where the directed mode needs it."""
    if mode == "rn" or not sgn.any():
        return r
    pos = (r.astype(np.float64) if f.name == "bf16" else r) > 0
    neg = (r.astype(np.float64) if f.name == "bf16" else r) < 0
    up = (sgn > 0) & ((mode == "rp") | ((mode == "rz") & neg))
    down = (sgn < 0) & ((mode == "rm") | ((mode == "rz") & pos))
    if up.any():
        r = np.where(up, next_up(r, f), r)
    if down.any():
        r = np.where(down, next_down(r, f), r)
    return r.astype(f.dtype, copy=False)


def round_to(x: np.ndarray, sgn: np.ndarray | None, f: Format, mode: str) -> np.ndarray:
    """float64 ``x`` (the nearest float64 to an exact value whose error sign is
    ``sgn``) rounded to format ``f`` in ``mode``."""
    if sgn is None:
        sgn = np.zeros(x.shape, np.int8)
    if f.name == "f64":
        return _adjust(x, sgn, mode, f)
    x = _round_odd(x, sgn)
    if f.name == "bf16":            # ml_dtypes rounds float64 via float32: round to odd first
        y = x.astype(np.float32)
        r = _round_odd(y, _sgn(x - y.astype(np.float64))).astype(f.dtype)
    else:
        r = x.astype(f.dtype)
    if mode == "rn":
        return r
    rb = r.astype(np.float64)
    with np.errstate(invalid="ignore"):
        s2 = np.where(x == rb, 0, _sgn(x - rb)).astype(np.int8)
    return _adjust(r, s2, mode, f)


def arith(op: str, args: list[np.ndarray], f: Format, mode: str = "rn", *, ftz: bool = False,
          sat: bool = False, relu: bool = False) -> np.ndarray:
    """One IEEE operation (``add``, ``sub``, ``mul``, ``div``, ``fma``) on
    values of format ``f`` (any shape), as PTX defines it: ``.ftz`` flushes
    subnormal inputs and results, the result is rounded in ``mode``,
    ``.sat`` clamps to [+0, 1] (NaN → +0), ``.relu`` clamps negatives to +0,
    NaN results are canonical."""
    with np.errstate(all="ignore"):
        if ftz:
            args = [flush(v, f) for v in args]
        if mode == "rn" and op != "fma":
            r = _nearest(op, args, f)
        elif mode == "rn" and f.name != "f64":
            r = _fma_nearest(args, f)
        else:
            r = _directed(op, args, f, mode)
        if ftz:
            r = flush(r, f)
        r = canonical(r, f)
        if sat:
            r = saturate(r, f)
        if relu:
            rf = r.astype(np.float64)
            r = np.where(rf <= 0, np.zeros(1, f.dtype), r)
        return r.astype(f.dtype, copy=False)


_NUMPY_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _nearest(op: str, args: list[np.ndarray], f: Format) -> np.ndarray:
    """``add/sub/mul/div`` rounded to nearest: numpy's own IEEE operation for
    f32/f64; f16/bf16 computed in float32 and rounded once more, which is
    correct because float32 has at least 2p+2 bits for these formats
    (double rounding is then innocuous for + - * /)."""
    a, b = args
    if f.name in ("f32", "f64"):
        return _NUMPY_OPS[op](a, b)
    return _NUMPY_OPS[op](a.astype(np.float32), b.astype(np.float32)).astype(f.dtype)


def _midpoint(x: np.ndarray, p: int) -> np.ndarray:
    """Where float64 ``x`` lies exactly halfway between two ``p``-bit values
    (for ``x`` in the normal range of the ``p``-bit format)."""
    k = 53 - p
    low = x.view(np.uint64) & np.uint64((1 << k) - 1)
    return low == np.uint64(1 << (k - 1))


def _fma_nearest(args: list[np.ndarray], f: Format) -> np.ndarray:
    """f16/bf16/f32 fma rounded to nearest, fast: a*b + c in float64 has one
    rounding, and rounding that again to ``f`` is correct unless the float64
    value is a midpoint of ``f`` (or of float32 on bf16's way through it), or
    subnormal in ``f``; those few elements take the exact path."""
    x = np.multiply(args[0], args[1], dtype=np.float64)
    x += args[2]
    bits = x.view(np.uint64)
    suspect = _midpoint(x, 24 if f.name == "bf16" else f.p)
    suspect |= (bits & np.uint64(0x7FF0_0000_0000_0000)) < np.uint64((f.emin + 1023) << 52)
    if f.name == "bf16":
        y = x.astype(np.float32)
        suspect |= _midpoint(y.astype(np.float64), f.p)
        r = y.astype(f.dtype)
    else:
        r = x.astype(f.dtype)
    if suspect.any():
        idx = np.nonzero(suspect)
        r[idx] = _directed("fma", [v[idx] for v in args], f, "rn")
    return r


def _directed(op: str, args: list[np.ndarray], f: Format, mode: str) -> np.ndarray:
    """The general path: exact error signs, round-to-odd, directed rounding."""
    wide = [np.asarray(v).astype(np.float64) for v in args]
    if op == "sub":
        op, wide[1] = "add", -wide[1]
    a, b, c = wide[0], wide[1], (wide[2] if len(wide) > 2 else None)
    x, sgn = _f64(op, a, b, c, mode) if f.name == "f64" else _wide(op, a, b, c)
    r = round_to(x, sgn, f, mode)
    if op in ("add", "fma"):
        r = _zero_sign(r, x, sgn, a * b if op == "fma" else a, c if op == "fma" else b, mode, f)
    return r


def saturate(r: np.ndarray, f: Format) -> np.ndarray:
    """``.sat``: clamp to [+0.0, 1.0]; NaN and -0.0 give +0.0."""
    rf = r.astype(np.float64)
    r = np.where(np.isnan(rf) | (rf <= 0), np.zeros(1, f.dtype), r)
    return np.where(rf > 1, np.ones(1, f.dtype), r).astype(f.dtype)


def _zero_sign(r: np.ndarray, x: np.ndarray, sgn: np.ndarray, u: np.ndarray, v: np.ndarray,
               mode: str, f: Format) -> np.ndarray:
    """IEEE 754 §6.3: an exact zero sum is +0 in every mode but ``.rm``, where
    it is -0 — unless both addends are zeros of one sign."""
    if mode != "rm":
        return r
    exact_zero = (x == 0) & (sgn == 0)
    both_pos_zero = (u == 0) & (v == 0) & ~np.signbit(u) & ~np.signbit(v)
    fix = exact_zero & ~both_pos_zero
    return with_sign(r, fix | sign_bit(r, f), f) if fix.any() else r

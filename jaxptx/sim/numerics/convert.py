"""Floating-point formats and exact rounding for the emulator's semantics.

Every PTX floating-point format (f64 down to the 4-bit e2m1) is described by
a :class:`Format`. :func:`round_to` rounds float64 values to a format with any
PTX rounding mode, exactly: a value is scaled by a power of two so that the
format's quantum at its binade becomes 1, rounded to an integer, and scaled
back, all of which is exact in float64 for every format narrower than f64.
:func:`encode` and :func:`decode` turn values into register bits and back.

The shared helpers here serve ``cvt`` and the transcendental instructions;
arithmetic semantics with rounding modes can use them too (``round_to`` on a
float64 result that is exact, or on one that never lies on a rounding
boundary of the narrower format, is correctly rounded).
"""

from __future__ import annotations

import numpy as np

from .formats import FORMATS, Format, canonical_nan, decode, encode, flush_f64, two_prod

__all__ = ["round_to", "convert", "int_to_float64", "directed_f64"]


def round_to(x: np.ndarray, fmt: Format, mode: str, rbits: np.ndarray | None = None,
             rwidth: int = 0) -> np.ndarray:
    """Round float64 ``x`` to ``fmt`` (result as float64, exact in ``fmt``).

    ``mode`` is ``rn`` (nearest, ties to even), ``rna`` (nearest, ties away
    from zero), ``rz``, ``rm``, ``rp`` or ``rs`` (stochastic: the top
    ``rwidth`` discarded bits plus ``rbits`` carry into the kept part, PTX
    ISA cvt ``.rs``). The exponent range is unbounded above while rounding;
    a finite result beyond ``fmt.max`` then overflows as IEEE 754 says:
    to infinity for the nearest modes (and for rounding away from zero),
    to ±max otherwise. Infinities and NaN pass through.
    """
    if mode == "rn" and fmt.name in ("f32", "f64") and rbits is None:
        # numpy's float64 -> float32 conversion is IEEE round-to-nearest-even,
        # overflow and subnormals included: the common case without the
        # general algorithm below.
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(x, dtype=np.float64).astype(fmt.dtype).astype(np.float64)
    if fmt.name == "f64":
        return np.asarray(x, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ax = np.abs(x)
        e = np.maximum(np.frexp(ax)[1] - 1, fmt.emin)
        quantum = np.ldexp(1.0, e - (fmt.p - 1))
        y = ax / quantum                     # exact: a power-of-two scaling
        neg = np.signbit(x)
        down = np.floor(y)
        if mode == "rn":
            r = np.rint(y)
        elif mode == "rna":
            r = np.floor(y + 0.5)            # y < 2**p: exact
        elif mode == "rz":
            r = down
        elif mode == "rm":
            r = np.where(neg, np.ceil(y), down)
        elif mode == "rp":
            r = np.where(neg, down, np.ceil(y))
        elif mode == "rs":
            top = np.floor((y - down) * 2.0**rwidth)
            r = down + ((top + np.asarray(rbits, dtype=np.float64)) >= 2.0**rwidth)
        else:
            raise ValueError(f"unknown rounding mode {mode}")
        out = np.copysign(r * quantum, x)
        over = np.isfinite(x) & (np.abs(out) > fmt.max)
        if over.any():
            away = {"rn": True, "rna": True, "rs": True, "rz": False}.get(mode)
            if away is None:
                away = neg if mode == "rm" else ~neg
            big = np.where(away, np.inf, fmt.max)
            out = np.where(over, np.copysign(big, x), out)
    return out


def convert(x: np.ndarray, fmt: Format, mode: str = "rn", *, ftz: bool = False, sat: bool = False,
            relu: bool = False, satfinite: bool = False, rbits: np.ndarray | None = None,
            rwidth: int = 0) -> np.ndarray:
    """Float64 ``x`` → bits of ``fmt``, the way PTX ``cvt`` finishes a result.

    Rounds with ``mode``; ``ftz`` flushes subnormal results; ``sat`` clamps
    to [0, 1] with NaN → +0; ``relu`` clamps negative results (and -0) to +0
    and leaves NaN canonical; ``satfinite`` turns ±inf and overflow into
    ±max (NaN stays NaN, or becomes +max in formats without NaN). Without
    ``satfinite`` an overflow in a format without infinities is NaN.
    """
    if fmt.name == "f32" and mode == "rn" and rbits is None and not (ftz or sat or relu or satfinite):
        # The common case in one cast: numpy's float64 -> float32 conversion
        # rounds to nearest even (overflow and subnormals included).
        with np.errstate(over="ignore", invalid="ignore"):
            r32 = np.asarray(x, dtype=np.float64).astype(np.float32)
        nan = np.isnan(r32)
        bits = r32.view(np.uint32)
        return np.where(nan, np.uint32(fmt.nan), bits) if nan.any() else bits
    r = round_to(x, fmt, mode, rbits, rwidth)
    with np.errstate(invalid="ignore"):
        if ftz:
            r = flush_f64(r, fmt)
        if sat:
            r = np.where(np.isnan(r), 0.0, np.clip(r, 0.0, 1.0))
            r = np.where(r == 0, 0.0, r)
        if relu:
            r = np.where(np.signbit(r) & ~np.isnan(r), 0.0, r)
        if satfinite:
            r = np.where(np.isinf(r), np.copysign(fmt.max, r), r)
            if fmt.nan is None:
                r = np.where(np.isnan(r), fmt.max, r)
        elif not fmt.inf:
            r = np.where(np.isinf(r), np.nan, r)
    return encode(r, fmt)


# integers -----------------------------------------------------------------------
def _magnitude(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(negative, |v| as uint64) of an integer array, INT64_MIN included."""
    if v.dtype.kind == "u":
        return np.zeros(v.shape, dtype=bool), v.astype(np.uint64)
    w = v.astype(np.int64)
    neg = w < 0
    u = w.view(np.uint64)
    return neg, np.where(neg, np.uint64(0) - u, u)


def _round_uint(mag: np.ndarray, p: int, how: np.ndarray) -> np.ndarray:
    """Round uint64 magnitudes to ``p`` significant bits, as float64.

    ``how`` per element: 0 truncate, 1 away from zero, 2 nearest-even,
    3 round to odd (sticky: correct for any later rounding to ≤ p-2 bits).
    """
    with np.errstate(over="ignore"):
        e = np.frexp(mag.astype(np.float64))[1].astype(np.int64)   # bit length, or one more
    e = np.where((e > 0) & ((mag >> np.maximum(e - 1, 0).astype(np.uint64)) == 0), e - 1, e)
    k = np.maximum(e - p, 0).astype(np.uint64)
    t = mag >> k
    rem = mag - (t << k)
    half = np.where(k > 0, np.uint64(1) << np.maximum(k, np.uint64(1)) - np.uint64(1), np.uint64(0))
    inexact = rem != 0
    odd = (t & np.uint64(1)) == 1
    up = np.select([how == 1, how == 2], [inexact, (rem > half) | ((rem == half) & inexact & odd)],
                   default=False)
    t = np.where(how == 3, t | inexact.astype(np.uint64), t + up.astype(np.uint64))
    return np.ldexp(t.astype(np.float64), k.astype(np.int64))


def int_to_float64(v: np.ndarray, mode: str, p: int = 53) -> np.ndarray:
    """Integers rounded to ``p`` bits with ``mode`` (``rn rz rm rp``, or
    ``odd``: round to odd at ``p`` bits, for rounding again to a narrower
    format), as float64."""
    if v.dtype.kind in "iu" and v.dtype.itemsize <= 4 and p >= 32:
        # At most 32 significant bits: float64 holds each exactly, so no
        # mode rounds anything (what _round_uint computes, in one cast).
        return v.astype(np.float64)
    neg, mag = _magnitude(v)
    if mode == "odd":
        how = np.full(mag.shape, 3)
    elif mode == "rn":
        how = np.full(mag.shape, 2)
    elif mode == "rz":
        how = np.zeros(mag.shape, dtype=np.int64)
    else:   # rm rounds magnitudes of negatives up, rp those of positives
        how = np.where(neg == (mode == "rm"), 1, 0)
    r = _round_uint(mag, p, how)
    return np.where(neg, -r, r)


def directed_f64(q: np.ndarray, above: np.ndarray, below: np.ndarray, mode: str) -> np.ndarray:
    """From ``q``, the round-to-nearest float64 of an exact value ``t``,
    and where ``t > q`` (``above``) or ``t < q`` (``below``), the rounding of
    ``t`` in ``mode`` (``rn`` returns ``q``). Correct for subnormal and
    overflowing ``t`` too, since it steps to the adjacent float64."""
    if mode == "rn":
        return q
    if mode == "rm":
        return np.where(below, np.nextafter(q, -np.inf), q)
    if mode == "rp":
        return np.where(above, np.nextafter(q, np.inf), q)
    toward = np.where(np.signbit(q), above, below)          # rz: |t| < |q|
    return np.where(toward, np.nextafter(q, 0.0), q)

"""Emulator semantics: reciprocal, square root and the transcendentals
(PTX ISA "Floating-Point Instructions" rcp, sqrt, rsqrt, sin, cos, lg2, ex2,
tanh, and their half-precision forms).

IEEE forms (``rcp.rn``, ``sqrt.rz``...) are correctly rounded in every mode.
``.approx`` forms compute the function in float64 and round to nearest in
the result format: that is within the error bound the PTX ISA gives for
each, but the hardware's approximations (MUFU) differ from it in the last
bits, so results are not bit-exact against a GPU except where the true
result is exactly representable (``ex2(10) = 1024``, ``sqrt(0.25)``...).
NaN results are the format's canonical NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...types import TYPES
from ..numerics.convert import convert, directed_f64, round_to
from ..numerics.formats import FORMATS, Format, two_prod
from ..numerics.formats import flush_f64 as flush
from ..core.step import Step
from .registry import semantics

_HALF = {"f16": "f16", "f16x2": "f16", "bf16": "bf16", "bf16x2": "bf16", "f32": "f32", "f64": "f64"}
_UTYPE = {16: TYPES["u16"], 32: TYPES["u32"], 64: TYPES["u64"]}
# The f64 range with 20 stored mantissa bits: results of the upper-word forms.
_UPPER_WORD = Format("f64hi", 21, -1022, 1023, float(np.finfo(np.float64).max), True, None, storage="f64")


def _operand(s: Step) -> tuple[np.ndarray, Format, bool]:
    """The source as float64 (``(n, 2)`` for packed halves), its element
    format, and whether ``.ftz`` flushes subnormal inputs and results."""
    t = s.type(1)
    fmt = FORMATS[_HALF[t.name]]
    with np.errstate(invalid="ignore"):
        x = s.src(1).astype(np.float64)
    ftz = bool(s.mod("ftz"))
    if ftz:
        x = flush(x, fmt)
    return x, fmt, ftz


def _write(s: Step, y: np.ndarray, fmt: Format, ftz: bool, mode: str = "rn") -> None:
    """Round float64 results to ``fmt`` and write them (packed pairs with
    element 0 in the low half)."""
    bits = convert(y, fmt, mode, ftz=ftz)
    if bits.ndim == 2:
        b = bits.astype(np.uint32)
        s.dst(0, b[:, 0] | (b[:, 1] << np.uint32(16)), TYPES["u32"])
    else:
        s.dst(0, bits, _UTYPE[fmt.bits])


def _approx(s: Step, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """An ``.approx`` function: float64 ``fn``, rounded to nearest."""
    if isinstance(fn, np.ufunc) and s.type(1).name == "f32" and not s.mod("ftz"):
        # One pass: numpy widens each element to float64, applies fn and
        # rounds the result to float32 (nearest even) on the way out.
        with np.errstate(all="ignore"):
            y = fn(s.src(1), dtype=np.float64, out=np.empty(s.n, np.float32), casting="same_kind")
        nan = np.isnan(y)
        bits = y.view(np.uint32)
        s.dst(0, np.where(nan, np.uint32(FORMATS["f32"].nan), bits) if nan.any() else bits, TYPES["u32"])
        return
    x, fmt, ftz = _operand(s)
    with np.errstate(all="ignore"):
        y = fn(x)
    _write(s, y, fmt, ftz)


def _upper_word(s: Step, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """``rcp/rsqrt.approx.ftz.f64``: computed from the upper 32 bits of the
    operand (sign, exponent, 20 mantissa bits), result rounded to 20
    mantissa bits with the low 32 bits zero; subnormal inputs and results
    flush to zero; NaN → 0x7fffffff00000000 (PTX ISA, rcp.approx.ftz.f64)."""
    bits = s.src(1, TYPES["u64"]) & np.uint64(0xFFFF_FFFF_0000_0000)
    x = flush(bits.view(np.float64), FORMATS["f64"])
    with np.errstate(all="ignore"):
        y = round_to(fn(x), _UPPER_WORD, "rn")
        y = flush(y, FORMATS["f64"])
    out = y.view(np.uint64)
    out = np.where(np.isnan(y), np.uint64(0x7FFF_FFFF_0000_0000), out)
    s.dst(0, out, TYPES["u64"])


@semantics('rcp')
def rcp(s: Step) -> None:
    """``rcp``: 1/a. ``.rn/.rz/.rm/.rp`` are IEEE 754 correctly rounded
    (f32 via the float64 quotient, which never lies on an f32 rounding
    boundary unless exact; f64 from the nearest quotient and the exact sign
    of the residual 1 - a*q). ``rcp.approx.f32`` (PTX: max 1 ulp error) is
    the correctly rounded quotient here. ``rcp.approx.ftz.f64`` keeps the
    ISA's upper-word semantics. ``.ftz`` flushes f32 subnormals."""
    if s.mod("approx"):
        if s.type(1).name == "f64":
            _upper_word(s, lambda x: 1.0 / x)
        else:
            _approx(s, lambda x: 1.0 / x)
        return
    _correctly_rounded(s, lambda x: 1.0 / x, _rcp_sides)


def _correctly_rounded(s: Step, fn: Callable[[np.ndarray], np.ndarray],
                       sides: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]) -> None:
    """Write ``fn(a)`` rounded in the instruction's mode: f32 from the
    float64 result; f64 directed modes from the nearest result and
    ``sides(x, q)``, where the exact value lies above / below it."""
    x, fmt, ftz = _operand(s)
    mode = s.mod("rnd")
    with np.errstate(all="ignore"):
        q = fn(x)
        if fmt.name == "f64" and mode != "rn":
            q = directed_f64(q, *sides(x, q), mode)
            s.dst(0, np.where(np.isnan(q), np.uint64(FORMATS["f64"].nan), q.view(np.uint64)), TYPES["u64"])
            return
    _write(s, q, fmt, ftz, mode)


def _rcp_sides(x: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where 1/x lies above / below its nearest float64 ``q``: the sign of
    the exact residual 1 - x*q, computed on mantissas scaled to [1, 2)."""
    finite = np.isfinite(x) & (x != 0)
    ok = finite & np.isfinite(q) & (q != 0)
    mx, ex = np.frexp(np.where(ok, x, 1.0))
    mq, eq = np.frexp(np.where(ok, q, 1.0))
    p, e = two_prod(np.abs(mx) * 2, np.abs(mq) * 2)          # both in [1, 2)
    scale = ex + eq - 2
    res = (1.0 - np.ldexp(p, scale)) - np.ldexp(e, scale)     # 1 - P exact (Sterbenz)
    sign = np.sign(res) * np.sign(x)                          # sign of 1/x - q
    # q overflowed to infinity: the exact quotient is finite, so below |q|.
    sign = np.where(finite & np.isinf(q), -np.sign(q), np.where(ok, sign, 0.0))
    return sign > 0, sign < 0


@semantics('sqrt')
def sqrt(s: Step) -> None:
    """``sqrt``: IEEE forms correctly rounded in every mode (f32 via the
    float64 root; f64 from the nearest root and the exact sign of a - q*q);
    ``sqrt.approx.f32`` (PTX: max relative error 2**-23) is the correctly
    rounded root here. Negative inputs give NaN, sqrt(-0) = -0."""
    if s.mod("approx"):
        _approx(s, np.sqrt)
        return
    _correctly_rounded(s, np.sqrt, _sqrt_sides)


def _sqrt_sides(x: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where sqrt(x) lies above / below its nearest float64 ``q``: the sign
    of x - q*q, with x scaled by an even power of two into [1, 4)."""
    ok = np.isfinite(x) & (x > 0)
    m, e = np.frexp(np.where(ok, x, 1.0))                    # x = m * 2**e, m in [0.5, 1)
    odd = (e % 2) != 0
    m = np.where(odd, m * 2, m * 4)                          # [1, 4)
    k = np.where(odd, e - 1, e - 2) // 2
    qm = np.ldexp(np.where(ok, q, 1.0), -k)                  # sqrt(m) rounded, in [1, 2]
    p, err = two_prod(qm, qm)
    res = np.where(ok, (m - p) - err, 0.0)                   # m - p exact (Sterbenz)
    return res > 0, res < 0


@semantics('rsqrt')
def rsqrt(s: Step) -> None:
    """``rsqrt.approx``: 1/sqrt(a) (PTX: f32 max relative error 2**-22.9),
    computed in float64 and rounded to nearest; rsqrt(-0) = -inf.
    ``rsqrt.approx.ftz.f64`` keeps the ISA's upper-word semantics."""
    if s.type(1).name == "f64" and s.mod("ftz"):
        _upper_word(s, lambda x: 1.0 / np.sqrt(x))
        return
    _approx(s, lambda x: 1.0 / np.sqrt(x))


@semantics('sin')
def sin(s: Step) -> None:
    """``sin.approx.f32`` (PTX: max absolute error 2**-20.5 in [-2pi, 2pi],
    2**-14.7 in [-100pi, 100pi]); here float64 sin rounded to f32."""
    _approx(s, np.sin)


@semantics('cos')
def cos(s: Step) -> None:
    """``cos.approx.f32`` (PTX: same error bounds as sin); here float64 cos
    rounded to f32."""
    _approx(s, np.cos)


@semantics('lg2')
def lg2(s: Step) -> None:
    """``lg2.approx.f32`` (PTX: max absolute error 2**-22 in (0.5, 2), else
    relative 2**-22); lg2(±0) = -inf, negatives give NaN."""
    _approx(s, lambda x: np.where(x == 0, -np.inf, np.log2(x)))


@semantics('ex2')
def ex2(s: Step) -> None:
    """``ex2.approx`` on f32 (PTX: max 2 ulp), f16/f16x2 (relative 2**-9.9)
    and bf16/bf16x2 with ``.ftz`` (relative 2**-7): float64 2**a rounded to
    the format."""
    _approx(s, np.exp2)


@semantics('tanh')
def tanh(s: Step) -> None:
    """``tanh.approx`` on f32 (PTX: max relative error 2**-11) and f16/bf16
    and their pairs (max absolute error 2**-10.987 / 2**-8): float64 tanh
    rounded to the format; subnormals are supported."""
    _approx(s, np.tanh)

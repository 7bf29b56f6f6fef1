"""Emulator semantics: floating-point arithmetic (f16, bf16, f32, f64 and the
packed f16x2 / bf16x2 types, which operate per half).

Rounding is exact in every PTX rounding mode (see :mod:`..numerics.arith`). The
integer forms of ``add``/``sub``/``abs``/``neg``/``min``/``max`` live in
:mod:`.arith`, which calls the ``float_*`` functions here for float types.
"""

from __future__ import annotations


import numpy as np

from ..numerics.arith import arith
from ..numerics.formats import FORMATS, Format, canonical, flush, sign_bit, with_sign
from ..core.step import Step
from .registry import semantics

__all__ = ["fmt_of", "float_binary", "float_abs_neg", "float_minmax"]


def fmt_of(s: Step, k: int = 0) -> Format:
    """The IEEE format of operand ``k`` (the element format for x2 types)."""
    t = s.type(k)
    return FORMATS[t.element or t.name]


def _flags(s: Step) -> dict[str, bool]:
    values = s.values
    sat = values.get("sat")
    return {"ftz": values.get("ftz") is not None, "sat": sat == "sat",
            "relu": sat == "relu" or values.get("relu") is not None}


def float_binary(s: Step, op: str) -> None:
    """``add``/``sub``/``mul`` on floats (PTX ISA, add/sub/mul: IEEE 754 with
    ``.rn`` (the default), ``.rz``, ``.rm``, ``.rp``; ``.ftz`` flushes
    subnormal inputs and results to sign-preserving zero; ``.sat`` clamps the
    result to [0.0, 1.0], NaN to +0.0). Without a rounding modifier the
    instruction may be contracted into an fma by ptxas; the emulator rounds
    it like ``.rn``."""
    f = fmt_of(s)
    s.dst(0, arith(op, [s.src(1), s.src(2)], f, s.mod("rnd", "rn"), **_flags(s)))


@semantics('mul')
def mul(s: Step) -> None:
    """``mul`` (float): see :func:`float_binary`."""
    float_binary(s, "mul")


@semantics('fma')
def fma(s: Step) -> None:
    """``fma`` and float ``mad``: a*b + c computed exactly and rounded once
    (PTX ISA, fma: "computes the product of a and b to infinite precision and
    then adds c to this product, again in infinite precision; the resulting
    value is then rounded"). f16/bf16: ``.relu`` clamps negative results to
    +0.0 (NaN stays NaN, canonical); ``.sat`` clamps to [0, 1]."""
    f = fmt_of(s)
    s.dst(0, arith("fma", [s.src(1), s.src(2), s.src(3)], f, s.mod("rnd", "rn"), **_flags(s)))


@semantics('div_float')
def div_float(s: Step) -> None:
    """``div`` on floats (PTX ISA, div).

    ``.rn/.rz/.rm/.rp``: IEEE 754 division, exact in each mode.
    ``.full.f32``: PTX allows 2 ulp of error; the emulator returns the
    correctly rounded quotient (hardware may differ by up to 2 ulp).
    ``.approx.f32``: computed as ``a * (1/b)`` with both steps rounded to
    nearest in f32 and the reciprocal flushed to zero when subnormal, which
    gives PTX's stated behaviour for 2**126 < |b| < 2**128 (0, or NaN for
    infinite a) and stays within its 2-ulp bound elsewhere; hardware results
    can differ from the emulator's by an ulp or two.
    """
    f = fmt_of(s)
    flags = _flags(s)
    a, b = s.src(1), s.src(2)
    if s.mod("mode") == "approx":
        if flags["ftz"]:
            a, b = flush(a, f), flush(b, f)
        with np.errstate(all="ignore"):
            rcp = flush(np.float32(1.0) / b.astype(np.float32), f)
        s.dst(0, arith("mul", [a, rcp], f, "rn", ftz=flags["ftz"]))
        return
    s.dst(0, arith("div", [a, b], f, s.mod("rnd", "rn"), ftz=flags["ftz"]))


def float_abs_neg(s: Step, negate: bool) -> None:
    """``abs``/``neg`` on floats: clear or flip the sign bit (PTX ISA, abs/neg;
    ``.ftz`` flushes a subnormal input first). PTX leaves the NaN result
    unspecified; the emulator keeps the payload and changes only the sign."""
    f = fmt_of(s)
    a = s.src(1)
    if s.mod("ftz") is not None:
        a = flush(a, f)
    s.dst(0, with_sign(a, ~sign_bit(a, f) if negate else np.zeros(a.shape, bool), f))


def float_minmax(s: Step, is_max: bool) -> None:
    """``min``/``max`` on floats (PTX ISA, min/max): a NaN operand is ignored
    (all NaN: canonical NaN); ``.NaN`` makes any NaN operand give the
    canonical NaN; +0.0 counts as greater than -0.0; ``.xorsign.abs``
    compares magnitudes and gives the result the XOR of the operands' signs;
    ``.ftz`` flushes subnormal inputs (and so results). The sm_100 three-input
    ``.f32`` form (``max.f32 d, a, b, c``) is the same rules over all three
    inputs, which a pairwise fold gives exactly, since each rule is
    associative."""
    f = fmt_of(s)
    ins = [s.src(k) for k in range(1, len(s.ins.operands))]
    plain = not any(s.mod(m) for m in ("ftz", "xorsign", "abs", "nan"))
    if plain and ins[0].dtype in (np.float32, np.float64) and ins[0].ndim == 1:
        # Fast path: fmax/fmin already ignore a single NaN; only results that
        # are NaN (all NaN: canonical) or zero (-0 < +0) need the full rules.
        with np.errstate(invalid="ignore"):
            r = ins[0]
            for x in ins[1:]:
                r = np.fmax(r, x) if is_max else np.fmin(r, x)
            if not (np.isnan(r).any() or (r == 0).any()):
                s.dst(0, r)
                return
    if s.mod("ftz") is not None:
        ins = [flush(x, f) for x in ins]
    xorsign = s.mod("xorsign") is not None
    if xorsign:
        negative = sign_bit(ins[0], f) ^ sign_bit(ins[1], f)
    if s.mod("abs") is not None:
        ins = [with_sign(x, np.zeros(x.shape, bool), f) for x in ins]
    r = ins[0]
    for x in ins[1:]:
        r = _pick(r, x, f, is_max, s.mod("nan") is not None)
    r = canonical(r, f)
    if xorsign:
        r = np.where(np.isnan(r.astype(np.float64)), r, with_sign(r, negative, f))
    s.dst(0, r)


def _pick(a: np.ndarray, b: np.ndarray, f: Format, is_max: bool, nan_wins: bool) -> np.ndarray:
    """The larger (``is_max``) or smaller of native ``a`` and ``b`` under
    min/max's rules; a NaN result is left for the caller to make canonical."""
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.isnan(wa), np.isnan(wb)
    sa, sb = sign_bit(a, f), sign_bit(b, f)
    with np.errstate(invalid="ignore"):
        # order with -0 < +0: compare values, break zero ties on the sign bit
        a_first = (wa > wb) | ((wa == wb) & ~sa & sb) if is_max else (wa < wb) | ((wa == wb) & sa & ~sb)
    r = np.where(a_first | nb, a, b)
    r = np.where(na & ~nb, b, r)
    nan = (na | nb) if nan_wins else (na & nb)
    return np.where(nan, np.full(1, np.nan, f.dtype), r).astype(f.dtype)


@semantics('copysign')
def copysign(s: Step) -> None:
    """``copysign``: b with the sign of a (PTX ISA, copysign: "copy sign of a
    into value of b"); a bit operation, NaN payloads kept."""
    f = fmt_of(s)
    s.dst(0, with_sign(s.src(2), sign_bit(s.src(1), f), f))

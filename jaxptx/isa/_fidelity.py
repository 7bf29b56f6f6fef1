"""How closely the emulator follows each form: exact, within the ISA's
stated error, or by a documented reading.

Entries carry :class:`~._schema.Fidelity` clauses (``Inst.fidelity``),
built with :func:`approx` and :func:`reading`; :func:`fidelity_of` is the one
place that turns a resolved form into its class. A form with a chosen
``.approx`` modifier (or ``div.full``) is approximate even if its entry
states no bound: the modifier itself says so (PTX ISA, "Floating-Point
Instructions").
"""

from __future__ import annotations

from collections.abc import Mapping

from ._schema import Bound, Fidelity, Inst

__all__ = [
    "APPROX",
    "APPROX_MODIFIERS",
    "EXACT",
    "F64_MMA",
    "FLOAT_MMA",
    "READING",
    "absolute",
    "approx",
    "fidelity_of",
    "reading",
    "relative",
    "ulp",
]

EXACT, APPROX, READING = "exact", "approx", "reading"

APPROX_MODIFIERS = frozenset(["approx", "full"])
"""Modifier spellings that make a form approximate whatever its entry says
(``div.full.f32``: "not fully IEEE 754 compliant", 2 ulp)."""

_NO_BOUND = "the PTX ISA states no error bound for this form"


FLOAT_MMA = ("the PTX ISA leaves the order and intermediate precision of a floating-point MMA's sums "
             "unspecified (tensor cores truncate partial sums); the emulator multiplies exactly, sums in "
             "float64 and rounds once, so a result's last bit may differ from a GPU's")
"""The reading every floating-point matrix multiply-accumulate shares."""

F64_MMA = ("the PTX ISA makes an .f64 MMA 'identical to .f64 fused multiply-add' without saying in "
           "which order; the emulator chains fused multiply-adds in K order starting from C")
"""The reading of ``.f64`` matrix multiply-accumulates."""


def ulp(ulps: float, over: str = "") -> Bound:
    """A bound of ``ulps`` units in the last place."""
    return Bound("ulp", ulps=ulps, over=over)


def relative(log2: float, over: str = "") -> Bound:
    """A maximum relative error of ``2**log2``."""
    return Bound("relative", log2=log2, over=over)


def absolute(log2: float, over: str = "") -> Bound:
    """A maximum absolute error of ``2**log2``."""
    return Bound("absolute", log2=log2, over=over)


def _when(when: Mapping[str, str] | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((k, tuple(v.split())) for k, v in (when or {}).items()))


def approx(*bounds: Bound, note: str = "", when: Mapping[str, str] | None = None) -> Fidelity:
    """An approximate form and the error bounds the ISA states for it
    (none: ``note`` should say what the ISA does state). ``when`` maps a
    slot to the space-separated values the clause holds for."""
    return Fidelity("approx", tuple(bounds), note or ("" if bounds else _NO_BOUND), _when(when))


def reading(note: str, when: Mapping[str, str] | None = None) -> Fidelity:
    """A form whose result follows the emulator's reading of a point the
    ISA leaves to figures or unspecified (``note`` says which and how)."""
    return Fidelity("reading", (), note, _when(when))


def fidelity_of(inst: Inst, values: Mapping[str, str]) -> tuple[str, tuple[Fidelity, ...]]:
    """The class of a form with slot ``values`` chosen and the clauses that
    hold for it: ``(APPROX, ...)`` if an approximate clause holds or an
    :data:`APPROX_MODIFIERS` value is chosen, else ``(READING, ...)`` if a
    reading holds, else ``(EXACT, ())``."""
    held = tuple(f for f in inst.fidelity if f.applies(values))
    kinds = {f.kind for f in held}
    if APPROX in kinds:
        return APPROX, held
    if any(v in APPROX_MODIFIERS for v in values.values()):
        return APPROX, (Fidelity(APPROX, (), _NO_BOUND),) + held
    if READING in kinds:
        return READING, held
    return EXACT, ()

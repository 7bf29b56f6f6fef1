"""Instruction table entries: approximate and correctly rounded transcendentals.

PTX ISA "Floating-Point Instructions" (rcp, sqrt, rsqrt, sin, cos, lg2,
ex2, tanh) and "Half Precision Floating-Point Instructions" (ex2, tanh on
f16 / bf16 and their packed pairs).

Each ``.approx`` form carries the error bound its ISA section states (PTX
ISA 9.1, each instruction's "Notes"); the emulator computes these functions
in float64 and rounds once, which is within every bound but not the
hardware's bits (:mod:`jaxptx.sim.semantics.approx`).
"""

from __future__ import annotations

from ._schema import Bound, Inst, slot
from ._targets import Requires
from ._common import D, A, SM90_PTX78
from ._fidelity import absolute, approx, relative, ulp

RND = "rn rz rm rp"
SM75_PTX70 = Requires(sm=75, ptx=(7, 0))

DA = (D, A)

_FLT_SEC = "9.7.3 Floating-Point Instructions"
_HALF_SEC = "9.7.4 Half Precision Floating-Point Instructions"


# The stated bounds (PTX ISA 9.1, "Notes" of each instruction).
_SINE_BOUNDS = (absolute(-20.5, "inputs in [-2pi, 2pi]"), absolute(-14.7, "inputs in [-100pi, 100pi]"))
BOUNDS: dict[str, tuple[Bound, ...]] = {
    "rcp": (ulp(1),),
    "sqrt": (relative(-23, "the positive finite range"),),
    "rsqrt": (relative(-22.9, "the positive finite range"),),
    "sin": _SINE_BOUNDS,
    "cos": _SINE_BOUNDS,
    "lg2": (absolute(-22, "inputs in (0.5, 2)"), relative(-22, "positive finite inputs outside (0.5, 2)")),
    "ex2": (ulp(2),),
    "tanh": (relative(-11),),
}
"""Per opcode, the error bounds the ISA states for its ``.approx.f32`` form."""


def _approx_f32(opcode: str, summary: str, ftz: bool = True,
                requires: Requires = Requires()) -> Inst:
    """opcode.approx{.ftz}.f32 d, a."""
    slots = (slot("approx", "approx"),
             *((slot("ftz", "ftz", optional=True),) if ftz else ()), slot("type", "f32"))
    return Inst(opcode, slots, DA, requires=requires, section=f"{_FLT_SEC}: {opcode}",
                sim=opcode, summary=summary + " (approximate)", fidelity=(approx(*BOUNDS[opcode]),))


def _ieee(opcode: str, summary: str) -> tuple[Inst, ...]:
    """opcode.rnd{.ftz}.f32 and opcode.rnd.f64: IEEE 754 rounding."""
    return (
        Inst(opcode, (slot("rnd", RND), slot("ftz", "ftz", optional=True), slot("type", "f32")),
             DA, section=f"{_FLT_SEC}: {opcode}", sim=opcode,
             summary=summary + ", correctly rounded"),
        Inst(opcode, (slot("rnd", RND), slot("type", "f64")), DA,
             section=f"{_FLT_SEC}: {opcode}", sim=opcode,
             summary=summary + ", correctly rounded"),
    )


ENTRIES: tuple[Inst, ...] = (
    _approx_f32("rcp", "reciprocal 1/a"),
    *_ieee("rcp", "reciprocal 1/a"),
    Inst("rcp", (slot("approx", "approx"), slot("ftz", "ftz"), slot("type", "f64")), DA,
         section=f"{_FLT_SEC}: rcp", sim="rcp",
         summary="reciprocal 1/a, approximate (about 20 bits), denormals flushed",
         fidelity=(approx(note="a 'fast, gross approximation' from the upper 32 bits of a; the PTX ISA "
                               "states no error bound"),)),
    _approx_f32("sqrt", "square root"),
    *_ieee("sqrt", "square root"),
    _approx_f32("rsqrt", "reciprocal square root"),
    Inst("rsqrt", (slot("approx", "approx"), slot("ftz", "ftz", optional=True),
                   slot("type", "f64")), DA,
         section=f"{_FLT_SEC}: rsqrt", sim="rsqrt",
         summary="reciprocal square root (approximate)",
         fidelity=(approx(note="the PTX ISA states a bound for rsqrt.approx.f32 only"),)),
    _approx_f32("sin", "sine of a in radians"),
    _approx_f32("cos", "cosine of a in radians"),
    _approx_f32("lg2", "base-2 logarithm"),
    _approx_f32("ex2", "base-2 exponential"),
    _approx_f32("tanh", "hyperbolic tangent", ftz=False, requires=SM75_PTX70),
    Inst("ex2", (slot("approx", "approx"), slot("type", "f16 f16x2")), DA,
         requires=SM75_PTX70, section=f"{_HALF_SEC}: ex2", sim="ex2",
         summary="base-2 exponential of half values (approximate)", fidelity=(approx(relative(-9.9)),)),
    Inst("ex2", (slot("approx", "approx"), slot("ftz", "ftz"), slot("type", "bf16 bf16x2")), DA,
         requires=SM90_PTX78, section=f"{_HALF_SEC}: ex2", sim="ex2",
         summary="base-2 exponential of bf16 values (approximate)", fidelity=(approx(relative(-7)),)),
    Inst("tanh", (slot("approx", "approx"), slot("type", "f16 f16x2")), DA,
         requires=SM75_PTX70, section=f"{_HALF_SEC}: tanh", sim="tanh",
         summary="hyperbolic tangent of half values (approximate)", fidelity=(approx(absolute(-10.987)),)),
    Inst("tanh", (slot("approx", "approx"), slot("type", "bf16 bf16x2")), DA,
         requires=SM90_PTX78, section=f"{_HALF_SEC}: tanh", sim="tanh",
         summary="hyperbolic tangent of bf16 values (approximate)", fidelity=(approx(absolute(-8)),)),
)

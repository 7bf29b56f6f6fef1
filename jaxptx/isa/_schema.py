"""The shape of an instruction-table entry.

An :class:`Inst` is one syntax form from the PTX ISA: an opcode, ordered
modifier slots, operands, and what it needs from the target. Entries are
data: they name their emulator function (``sim``) and operand-count rules
(``count``) by string, never by lambda.

Operand ``type`` is a fixed type name (``"u32"``), a reference to the value
chosen in a slot (``"$type"``), the double-width type of a slot
(``"$type:wide"``) or ``None`` (any type). On a ``mem`` operand the type
names the address register (``u32`` for tensor-memory addresses) and a
``count`` gives the number of tensor coordinates (``[tmap, {c0, c1}]``). Operand ``count`` (vectors) is an
int, a slot reference whose value ends in digits (``"$vec"`` with ``v4`` → 4)
or the name of a function in :mod:`jaxptx.isa._counts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ._targets import Requires

__all__ = ["Slot", "Operand", "Rule", "Bound", "Fidelity", "Inst", "slot", "op", "KINDS", "FIDELITY_KINDS"]

# Operand kinds: reg (typed register), pred (predicate register, ``!`` allowed
# when ``neg``), imm (immediate), mem (``[address]``), vec (``{a, b}``),
# sym (label / function / variable name), sink (``_``), pair (``d|p``),
# list (a parenthesised operand list, as in ``call``).
KINDS = frozenset(["reg", "pred", "imm", "mem", "vec", "sym", "sink", "pair", "list"])


@dataclasses.dataclass(frozen=True)
class Slot:
    """One modifier position, e.g. the rounding mode of ``add.rn.f32``.

    Attributes:
        name: slot name, referenced by operand types (``"$type"``).
        values: allowed modifier spellings, without dots.
        optional: the slot may be left out.
        requires: per-value target requirements, ``((value, Requires), ...)``.
    """

    name: str
    values: tuple[str, ...]
    optional: bool = False
    requires: tuple[tuple[str, Requires], ...] = ()

    def requirement(self, value: str) -> Requires | None:
        """The requirement attached to ``value``, if any."""
        for v, req in self.requires:
            if v == value:
                return req
        return None


def slot(name: str, values: str, *, optional: bool = False,
         requires: dict[str, Requires] | None = None) -> Slot:
    """Build a :class:`Slot` from a space-separated list of values."""
    return Slot(name, tuple(values.split()), optional,
                tuple(sorted((requires or {}).items())))


@dataclasses.dataclass(frozen=True)
class Operand:
    """One operand position.

    Attributes:
        name: the ISA's operand name (``d``, ``a``, ``membermask``).
        kinds: accepted operand kinds (see ``KINDS``).
        type: type rule (see module docstring) or ``None`` for any.
        out: written by the instruction (a destination).
        count: vector length rule for ``vec`` operands.
        optional: may be omitted (only trailing operands).
        when: name of a slot whose presence makes this operand required, and
            whose absence forbids it (``.multicast::cluster`` → ``ctaMask``).
        widen: a register may be wider than the instruction type (``ld``,
            ``st``, ``cvt`` of narrow integers).
        neg: a predicate operand may be negated (``!%p``).
        example: the operand's text in generated examples (``"0x1f"``);
            each ``%{type}`` in it becomes a fresh register of that type
            (``"[%{u64}, {%{s32}, 0}]"``).
        multiple: ``(n, why)``: an immediate here must be a multiple of
            ``n`` (``bar``'s thread count: ``(32, "a thread count of whole
            warps")``).
    """

    name: str
    kinds: tuple[str, ...]
    type: str | None = None
    out: bool = False
    count: int | str | None = None
    optional: bool = False
    when: str | None = None
    widen: bool = False
    neg: bool = False
    example: str | None = None
    multiple: tuple[int, str] | None = None


def op(name: str, kinds: str = "reg", type: str | None = None, **fields: object) -> Operand:
    """Build an :class:`Operand`; ``kinds`` is space-separated (``"reg imm"``)."""
    parsed = tuple(kinds.split())
    bad = [k for k in parsed if k not in KINDS]
    if bad:
        raise ValueError(f"operand {name}: unknown kinds {bad}; expected some of {sorted(KINDS)}")
    return Operand(name, parsed, type, **fields)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Rule:
    """A constraint between slots.

    If slot ``when`` holds a value in ``when_values`` (any value when empty),
    then slot ``then`` must be present with a value in ``then_values`` (any
    when empty) — or, with ``absent=True``, must be left out.
    """

    when: str
    then: str
    when_values: tuple[str, ...] = ()
    then_values: tuple[str, ...] = ()
    absent: bool = False


FIDELITY_KINDS = ("approx", "reading")
"""How an entry's :class:`Fidelity` clause departs from bit-exact semantics:
``approx`` (the ISA states only an error bound) or ``reading`` (the ISA
leaves a point to figures or unspecified, and the emulator follows its
documented reading)."""


@dataclasses.dataclass(frozen=True)
class Bound:
    """An error bound the PTX ISA states for an approximate form.

    Attributes:
        measure: ``"ulp"``, ``"relative"`` or ``"absolute"``.
        ulps: the bound in units in the last place (``measure == "ulp"``).
        log2: the bound as a power of two, ``2**log2`` (relative and
            absolute bounds; the ISA writes them so: 2^-22.9).
        over: the inputs it holds for, in the ISA's words (``""``: all).
    """

    measure: str
    ulps: float | None = None
    log2: float | None = None
    over: str = ""

    @property
    def value(self) -> float:
        """The bound as a number: ulps, or ``2**log2``."""
        return float(self.ulps) if self.measure == "ulp" else 2.0 ** self.log2

    def __str__(self) -> str:
        size = f"{self.ulps:g} ulp" if self.measure == "ulp" else f"{self.measure} error 2^{self.log2:g}"
        return f"max {size}" + (f" for {self.over}" if self.over else "")


@dataclasses.dataclass(frozen=True)
class Fidelity:
    """Where the emulator's result for a form is not bit-exact PTX semantics.

    Attributes:
        kind: ``"approx"`` or ``"reading"`` (:data:`FIDELITY_KINDS`).
        bounds: for ``approx``, the error bounds the ISA states (empty when
            it states none; ``note`` then says so).
        note: what the ISA leaves open and what the emulator does.
        when: ``((slot, values), ...)``: the clause holds only for these slot
            values (``(("dtype", ("f32", "f16")),)``); empty: always.
    """

    kind: str
    bounds: tuple[Bound, ...] = ()
    note: str = ""
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def applies(self, values: Mapping[str, str]) -> bool:
        """Whether the clause holds for a form's chosen slot ``values``."""
        return all(values.get(name) in allowed for name, allowed in self.when)


@dataclasses.dataclass(frozen=True)
class Inst:
    """One syntax form of a PTX instruction.

    Attributes:
        opcode: base opcode (``"add"``, ``"cp.async.bulk.tensor"``).
        slots: modifier slots in PTX order.
        operands: operands in order.
        requires: what the whole form needs from the target.
        rules: constraints between slots.
        section: PTX ISA section, for docs and messages.
        sim: name of the emulator function that computes it (``None`` where
            it has no emulator semantics yet).
        summary: one line for generated docs.
        example: a complete PTX line used instead of a generated one in the
            table sweep (for forms whose operands need context); ``%{type}``
            placeholders become fresh registers as in ``Operand.example``.
        predicable: accepts a ``@p`` guard.
        carry: reads or writes the carry flag ``CC.CF``, state no operand
            names (PTX ISA "Extended-Precision Integer Arithmetic").
        fidelity: where the emulator is not bit-exact for this form
            (:class:`Fidelity` clauses; empty: exact). Read it through
            :func:`jaxptx.isa.fidelity_of`.
    """

    opcode: str
    slots: tuple[Slot, ...] = ()
    operands: tuple[Operand, ...] = ()
    requires: Requires = Requires()
    rules: tuple[Rule, ...] = ()
    section: str = ""
    sim: str | None = None
    summary: str = ""
    example: str | None = None
    predicable: bool = True
    carry: bool = False
    fidelity: tuple[Fidelity, ...] = ()

    def slot(self, name: str) -> Slot:
        """The slot called ``name``."""
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(f"{self.opcode} has no slot {name!r}")

    @property
    def form(self) -> str:
        """The syntax form in ISA notation: ``add{.sat}.s32 d, a, b``."""
        parts = [self.opcode]
        for s in self.slots:
            vals = ",".join("." + v for v in s.values)
            alt = vals if len(s.values) == 1 else "{" + vals + "}" if s.optional else "<" + vals + ">"
            parts.append("{" + vals + "}" if s.optional and len(s.values) == 1 else alt)
        ops = ", ".join(f"{{{o.name}}}" if o.optional or o.when else o.name for o in self.operands)
        return "".join(parts) + (" " + ops if ops else "")

"""Resolving an instruction name against the table: which form, which
slot values, and the operand types and counts those values imply.

Pure table logic; checking IR operands against it is ``jaxptx.validate``.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping

from ..errors import PtxModifierError
from ..types import TYPES, PtxType
from ._counts import COUNTS
from ._schema import Inst, Operand
from ._table import BY_OPCODE
from ._targets import Requires, Target

__all__ = ["Resolved", "resolve", "arity", "active_operands", "expected_type",
           "vector_count", "compatible"]


class Resolved:
    """A form chosen for an instruction: the entry and its slot values.

    ``operands``, ``types``, ``counts``, ``bounds`` and ``requirements`` are
    derived once per resolved form (resolution is cached, so tracing a
    50k-instruction kernel computes them once per distinct instruction).
    """

    __slots__ = ("inst", "values", "_derived")

    def __init__(self, inst: Inst, values: dict[str, str]) -> None:
        self.inst = inst
        self.values = values
        self._derived: tuple | None = None

    def check_target(self, name: str, target: Target, version: tuple[int, int]) -> None:
        """Raise if ``target``/``version`` lack this form or a chosen modifier.

        Raises:
            PtxTargetError, PtxVersionError: naming ``name`` (and the value).
        """
        if not self.inst.requires.allows(target, version):
            self.inst.requires.check(name, target, version)
        for v, req in self.requirements:
            if not req.allows(target, version):
                req.check(f"{name} (.{v})", target, version)

    @property
    def derived(self) -> tuple:
        """``(operands, types, counts, bounds, requirements)`` in one lookup."""
        return self._derived or self._derive()

    def _derive(self) -> tuple:
        if self._derived is None:
            ops = tuple(active_operands(self))
            reqs = tuple((v, req) for s in self.inst.slots
                         if (v := self.values.get(s.name)) is not None
                         and (req := s.requirement(v)) is not None)
            self._derived = (ops, tuple(expected_type(o, self.values) for o in ops),
                             tuple(vector_count(o, self.values) for o in ops), arity(self), reqs)
        return self._derived

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The operand positions present for these slot values."""
        return self._derive()[0]

    @property
    def types(self) -> tuple[PtxType | None, ...]:
        """The expected type of each present operand."""
        return self._derive()[1]

    @property
    def counts(self) -> tuple[int | None, ...]:
        """The vector length of each present operand (``None`` if not a vector)."""
        return self._derive()[2]

    @property
    def bounds(self) -> tuple[int, int]:
        """The least and most operands (see :func:`arity`)."""
        return self._derive()[3]

    @property
    def requirements(self) -> tuple[tuple[str, Requires], ...]:
        """``(value, Requires)`` for each chosen modifier value that has one."""
        return self._derive()[4]

    def __repr__(self) -> str:
        return f"Resolved({self.inst.opcode}, {self.values})"


def _assign_any_order(inst: Inst, mods: tuple[str, ...]) -> dict[str, str] | None:
    # ptxas accepts modifiers out of the ISA's order (``div.ftz.rn.f32``);
    # when the ordered match fails, each goes to the first free slot taking it.
    values: dict[str, str] = {}
    for mod in mods:
        s = next((s for s in inst.slots if s.name not in values and mod in s.values), None)
        if s is None:
            return None
        values[s.name] = mod
    return values


def _match(inst: Inst, mods: tuple[str, ...], any_order: bool = False
           ) -> tuple[dict[str, str], int, str | None]:
    """Assign modifiers to slots, in order (or, with ``any_order``, each to
    the first free slot taking it). Returns (values, matched, error)."""
    values: dict[str, str] = {}
    if any_order:
        assigned = _assign_any_order(inst, mods)
        if assigned is None:
            return values, 0, "no slot order fits"
        values = assigned
    else:
        pos = 0
        for i, mod in enumerate(mods):
            for j in range(pos, len(inst.slots)):
                if mod in inst.slots[j].values:
                    values[inst.slots[j].name] = mod
                    pos = j + 1
                    break
            else:
                return values, i, _bad_modifier(inst, mods, i, pos)
    for s in inst.slots:
        if not s.optional and s.name not in values:
            allowed = " ".join("." + v for v in s.values)
            return values, len(mods), f"missing its {s.name} modifier (one of {allowed})"
    for r in inst.rules:
        got = values.get(r.when)
        if got is None or (r.when_values and got not in r.when_values):
            continue
        then = values.get(r.then)
        if r.absent and then is not None:
            return values, len(mods), f".{got} cannot be combined with .{then}"
        if not r.absent and (then is None or (r.then_values and then not in r.then_values)):
            want = " or ".join("." + v for v in r.then_values) or f"its {r.then} modifier"
            return values, len(mods), f".{got} needs {want}" + (f", got .{then}" if then else "")
    return values, len(mods), None


def _bad_modifier(inst: Inst, mods: tuple[str, ...], i: int, pos: int) -> str:
    mod = mods[i]
    if any(mod in s.values for s in inst.slots):
        return f"modifier .{mod} is repeated or out of order"
    allowed = [v for s in inst.slots[pos:] for v in s.values]
    near = difflib.get_close_matches(mod, allowed, n=1)
    hint = f" (did you mean .{near[0]}?)" if near else ""
    shown = " ".join("." + v for v in allowed[:24]) + (" ..." if len(allowed) > 24 else "")
    return f"unknown modifier .{mod}{hint}; expected one of {shown or 'nothing more'}"


@functools.lru_cache(maxsize=4096)
def resolve(opcode: str, mods: tuple[str, ...], n_operands: int | None = None,
            kinds: tuple[str, ...] | None = None) -> Resolved:
    """Find the table form for ``opcode.mods``.

    Among forms whose modifiers match, one whose operand count fits
    ``n_operands`` is preferred, and among those one whose operand kinds
    accept ``kinds`` (``("reg", "mem", ...)``), when given. The result is
    cached; treat it as read-only.

    Raises:
        PtxModifierError: unknown opcode, or no form accepts the modifiers;
            the message comes from the form that matched the most modifiers.
    """
    forms = BY_OPCODE.get(opcode)
    name = ".".join((opcode, *mods))
    if not forms:
        near = difflib.get_close_matches(opcode, BY_OPCODE, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise PtxModifierError(f"{name}: unknown instruction {opcode!r}{hint}")
    matches: list[Resolved] = []
    best: tuple[int, str] = (-1, "")
    for inst in forms:
        values, matched, err = _match(inst, mods)
        if err is None:
            matches.append(Resolved(inst, values))
        elif matched > best[0]:
            best = (matched, err)
    if not matches:
        # ptxas also takes modifiers out of the ISA's order (div.ftz.rn.f32);
        # only when no form matches in order, so .f32.f16 keeps its meaning.
        for inst in forms:
            values, _, err = _match(inst, mods, any_order=True)
            if err is None:
                matches.append(Resolved(inst, values))
    if not matches:
        known = {v for inst in forms for s in inst.slots for v in s.values}
        unknown = [m for m in mods if m not in known]
        if unknown:
            near = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean .{near[0]}?)" if near else ""
            shown = " ".join("." + v for v in sorted(known))
            raise PtxModifierError(
                f"{name}: unknown modifier .{unknown[0]}{hint}; {opcode} takes {shown}")
        raise PtxModifierError(f"{name}: {best[1]}")
    if kinds is not None:
        n_operands = len(kinds)
    if n_operands is not None:
        fits = [r for r in matches if arity(r)[0] <= n_operands <= arity(r)[1]]
        if kinds is not None:
            for r in fits:
                if all(k in o.kinds for k, o in zip(kinds, active_operands(r))):
                    return r
        if fits:
            return fits[0]
    return matches[0]


def arity(r: Resolved) -> tuple[int, int]:
    """The least and most operands the resolved form takes."""
    lo = hi = 0
    for o in r.inst.operands:
        if o.when is not None:
            if o.when in r.values:
                lo += 1
                hi += 1
        elif o.optional:
            hi += 1
        else:
            lo += 1
            hi += 1
    return lo, hi


def active_operands(r: Resolved) -> list[Operand]:
    """The operand positions present for the chosen slot values."""
    return [o for o in r.inst.operands if o.when is None or o.when in r.values]


def expected_type(o: Operand, values: Mapping[str, str]) -> PtxType | None:
    """The PTX type operand ``o`` wants, given the slot values."""
    if o.type is None:
        return None
    rule, _, transform = o.type.partition(":")
    name = values.get(rule[1:]) if rule.startswith("$") else rule
    if name is None:
        return None
    t = TYPES.get(name)
    if t is None:
        return None
    if transform == "wide":
        return TYPES[f"{t.kind}{t.bits * 2}"]
    return t


def vector_count(o: Operand, values: Mapping[str, str]) -> int | None:
    """How many elements vector operand ``o`` has, or ``None`` if unknown."""
    c = o.count
    if c is None or isinstance(c, int):
        return c
    if c.startswith("$"):
        v = values.get(c[1:])
        digits = "".join(ch for ch in (v or "") if ch.isdigit())
        return int(digits) if digits else 1
    return COUNTS[c](values)


def compatible(want: PtxType, got: PtxType, widen: bool = False) -> bool:
    """Whether a ``got`` register may stand where ``want`` is expected.

    PTX ISA, "Operand Type Information": bit-size types match any type of
    the same size, signed and unsigned integers of one size match, and
    ``widen`` positions (ld/st/cvt) take wider integer registers.
    """
    if want is got:
        return True
    if "pred" in (want.kind, got.kind):
        return False
    if want.bits == got.bits and ("b" in (want.kind, got.kind) or (want.is_int and got.is_int)):
        return True
    if not widen or got.bits <= want.bits:
        return False
    return (got.kind in "bus" and want.kind in "bus") or got.kind == "b"



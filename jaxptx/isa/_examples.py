"""Example PTX generated from the table, one or more per form.

The table sweep assembles these with ptxas: every modifier value of every
form appears in at least one example, so the table and ptxas are checked
against each other, not against hand-written samples. A form whose operands
need context (labels, callees, tensor maps) carries its own ``example``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

from ..types import TYPES
from ._resolve import Resolved, _match, active_operands, expected_type, vector_count
from ._schema import Inst, Operand
from ._targets import Target, default_version, parse_target

__all__ = ["Example", "examples", "example_target", "example_modules"]

# Register types ptxas declares as written; others are declared as bits.
_DECLARABLE = {"pred", "b16", "b32", "b64", "b128", "u16", "u32", "u64", "s16", "s32",
               "s64", "f16", "f16x2", "f32", "f64"}
LABEL = "$L__example"


@dataclasses.dataclass(frozen=True)
class Example:
    """One instruction line, the registers it uses and where it assembles."""

    inst: Inst
    line: str
    regs: tuple[tuple[str, str], ...]   # (name, declared type)
    target: Target
    version: tuple[int, int]


def example_target(inst: Inst, values: dict[str, str]) -> tuple[Target, tuple[int, int]]:
    """The oldest convenient target (sm_80 at least) and version for a form."""
    reqs = [inst.requires] + [s.requirement(values[s.name]) for s in inst.slots
                              if s.name in values and s.requirement(values[s.name])]
    onlys = [r.only for r in reqs if r.only]
    only = [t for t in onlys[0] if all(t in o for o in onlys)] if onlys else []
    if only:
        target = parse_target(only[0])
    else:
        sm = max([80] + [r.sm for r in reqs])
        target = parse_target({90: "sm_90a", 100: "sm_100a", 120: "sm_120a"}.get(sm, f"sm_{sm}"))
    version = max([default_version(target)] + [r.ptx for r in reqs])
    return target, version


def _value_choices(inst: Inst) -> Iterator[dict[str, str]]:
    """Slot assignments that between them use every value of every slot."""
    for s in inst.slots:
        for v in s.values:
            others = [[None, *o.values] if o.optional else list(o.values)
                      for o in inst.slots if o is not s]
            for combo in itertools.islice(itertools.product(*others), 20000):
                values = {o.name: c for o, c in zip((o for o in inst.slots if o is not s), combo)
                          if c is not None}
                values[s.name] = v
                mods = tuple(values[o.name] for o in inst.slots if o.name in values)
                if _match(inst, mods)[2] is None:
                    yield values
                    break
    if not inst.slots:
        yield {}


class _Regs:
    def __init__(self) -> None:
        self.decls: list[tuple[str, str]] = []

    def new(self, type_name: str) -> str:
        t = TYPES[type_name]
        declared = type_name if type_name in _DECLARABLE else f"b{max(t.bits, 16)}"
        if t.kind == "pred":
            declared = "pred"
        name = f"%x{len(self.decls)}"
        self.decls.append((name, declared))
        return name


def _operand(o: Operand, r: Resolved, regs: _Regs) -> str:
    if o.example is not None:
        return _fill_placeholders(o.example, regs)
    want = expected_type(o, r.values)
    kinds = o.kinds
    if "vec" in kinds:
        n = vector_count(o, r.values) or 1
        return "{" + ", ".join(regs.new(want.name if want else "b32") for _ in range(n)) + "}"
    if "reg" in kinds:
        return regs.new(want.name if want else "b32")
    if "pred" in kinds:
        return regs.new("pred")
    if "pair" in kinds:
        return f"{regs.new(want.name if want else 'b32')}|{regs.new('pred')}"
    if "mem" in kinds:
        # A mem operand's type names its address register (u32 for tensor
        # memory and shared windows); a count adds tensor coordinates.
        base = regs.new(want.name if want is not None and want.kind in "bus" else "u64")
        n = vector_count(o, r.values)
        if n:
            coords = ", ".join(regs.new("s32") for _ in range(n))
            return f"[{base}, {{{coords}}}]"
        return f"[{base}]"
    if "imm" in kinds:
        return "1"
    if "sym" in kinds:
        return LABEL
    if "list" in kinds:
        return "()"
    return "_"


def _fill_placeholders(text: str, regs: _Regs) -> str:
    """Replace each ``%{type}`` in an example with a fresh register of that type."""
    out, rest = [], text
    while "%{" in rest:
        head, _, tail = rest.partition("%{")
        type_name, _, rest = tail.partition("}")
        out.append(head + regs.new(type_name))
    return "".join(out) + rest


def examples(inst: Inst) -> list[Example]:
    """Generated examples for one form (its own ``example`` if it has one)."""
    out = []
    for values in _value_choices(inst):
        r = Resolved(inst, values)
        target, version = example_target(inst, values)
        regs = _Regs()
        if inst.example is not None:
            line = _fill_placeholders(inst.example, regs)
            return [Example(inst, line, tuple(regs.decls), target, version)]
        mods = [values[s.name] for s in inst.slots if s.name in values]
        name = ".".join([inst.opcode, *mods])
        ops = ", ".join(_operand(o, r, regs) for o in active_operands(r))
        out.append(Example(inst, f"{name} {ops};" if ops else f"{name};",
                           tuple(regs.decls), target, version))
    return out


def example_modules(exs: list[Example]) -> dict[tuple[Target, tuple[int, int]], tuple[str, list[tuple[int, Example]]]]:
    """Group examples into one PTX module per (target, version).

    Returns:
        ``{(target, version): (ptx_text, [(line_number, example), ...])}``;
        the line numbers let ptxas diagnostics be traced to the example.
    """
    groups: dict[tuple[Target, tuple[int, int]], list[Example]] = {}
    for ex in exs:
        groups.setdefault((ex.target, ex.version), []).append(ex)
    out = {}
    for (target, version), group in sorted(groups.items(), key=lambda kv: (kv[0][0].sm, kv[0][0].suffix, kv[0][1])):
        lines = [f".version {version[0]}.{version[1]}", f".target {target.name}",
                 ".address_size 64", ""]
        where = []
        # One entry per example: some instructions may not share a function
        # (tcgen05 cta_group::1 and ::2 cannot mix).
        for i, ex in enumerate(group):
            lines.append(f".visible .entry example_{i}()")
            lines.append("{")
            for name, ty in ex.regs:
                lines.append(f"\t.reg .{ty} {name};")
            where.append((len(lines) + 1, ex))
            lines.append("\t" + ex.line)
            lines.append(f"{LABEL}:")
            lines.append("\tret;")
            lines.append("}")
        lines.append("")
        out[(target, version)] = ("\n".join(lines), where)
    return out

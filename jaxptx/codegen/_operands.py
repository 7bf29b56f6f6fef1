"""Operands as the Python the DSL converts back exactly: registers through
the arrays ``reg.declare`` returns (``r[3]``), numbers as Python literals
where the DSL spells them the same, ``ptx.imm("0x1F")`` where not, names,
addresses and initialisers."""

from __future__ import annotations

import keyword
import math
import re

from .. import ir
from ..check import check
from ..dsl import to_immediate
from ..errors import PtxError
from ..types import TYPES

__all__ = ["OperandWriter", "pyname", "TYPE_NAMES"]

TYPE_NAMES = set(TYPES)
_RESERVED = set(keyword.kwlist) | {"ptx", "reg", "kernel", "ir", "imm", "SINK"} | TYPE_NAMES


def pyname(name: str, taken: set[str]) -> str:
    """A Python identifier for PTX ``name``, not in ``taken`` (and added to it)."""
    base = re.sub(r"\W", "_", name.lstrip("%$")) or "r"
    if base[0].isdigit():
        base = "r" + base
    if base in _RESERVED:
        base += "_"
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


class OperandWriter:
    """The writer's state and its operands."""

    def __init__(self, module: ir.Module, name: str, sugar: bool) -> None:
        self.module = module
        self.name = name
        self.sugar = sugar
        self.lines: list[str] = []
        self.types_used: set[str] = set()
        self.regs: dict[str, str] = {}        # PTX register name -> Python expression
        self.reg_types: dict[str, str] = {}
        self.taken: set[str] = set()
        self.params: dict[str, str] = {}      # param name -> Python variable (sugar)
        self.validate = not any(d.severity == "error" for d in check(module))
        self.uses_ir = False                  # an initialiser written as an ir node

    # output ------------------------------------------------------------------
    def out(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    # operands ----------------------------------------------------------------
    def value(self, op: ir.Operand, want=None, kinds: tuple[str, ...] = ()) -> str:
        if isinstance(op, ir.Register):
            if op.name in self.regs:
                return self.regs[op.name]
            return repr(op.name)
        if isinstance(op, ir.Immediate):
            return self.immediate(op, want)
        if isinstance(op, ir.Symbol):
            if op.offset is not None or op.name.startswith("%") or kinds == ("mem",):
                return self.symbol(op)
            return repr(op.name)
        if isinstance(op, ir.Sink):
            return "ptx.SINK"
        if isinstance(op, ir.Negated):
            inner = op.operand
            if isinstance(inner, ir.Register) and self.reg_types.get(inner.name) == "pred":
                return "~" + self.regs[inner.name]
            return f"ptx.negate({self.value(inner)})"
        if isinstance(op, ir.Vector):
            items = [self.value(x, want) for x in op.items]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(op, ir.Parens):
            return "ptx.args(" + ", ".join(self.value(x) for x in op.items) + ")"
        if isinstance(op, ir.Pair):
            return f"ptx.pair({self.value(op.first)}, {self.value(op.second)})"
        if isinstance(op, ir.Address):
            return self.address(op)
        raise TypeError(f"cannot write operand {op!r}")

    def symbol(self, s: ir.Symbol) -> str:
        args = [repr(s.name)]
        if s.offset is not None:
            args.append(self.offset(s.offset))
        if s.minus:
            args.append("minus=True")
        return f"ptx.sym({', '.join(args)})"

    def offset(self, off: int | ir.Immediate) -> str:
        if isinstance(off, int):
            return str(off)
        # A constant expression (`[%rd1+(2*2)]`) traces back as its value.
        return f"ptx.imm({off.spelling(canonical=off.expr is not None)!r})"

    def address(self, a: ir.Address) -> str:
        if a.base is None:
            base = "None"
        elif isinstance(a.base, ir.Register):
            base = self.value(a.base)
        elif a.base.offset is None:
            base = self.params.get(a.base.name, repr(a.base.name))
        else:
            base = self.symbol(a.base)
        args = [base]
        if a.offset is not None:
            args.append(self.offset(a.offset))
        if a.extra is not None:
            if not isinstance(a.extra, ir.Vector):
                raise TypeError(f"cannot write address {a!r}")
            coords = self.value(a.extra, TYPES["s32"])
            args.append(f"coords={coords}")
        if a.minus:
            args.append("minus=True")
        return f"ptx.addr({', '.join(args)})"

    def immediate(self, imm: ir.Immediate, want) -> str:
        if imm.literal is None:
            try:
                same = to_immediate(imm.value, want if self.validate else None, "") == imm
            except PtxError:
                same = False      # the DSL would refuse the bare number here
            if same and (isinstance(imm.value, int) or math.isfinite(imm.value)):
                return repr(imm.value)
        return f"ptx.imm({imm.spelling()!r})"

    def init_value(self, v: ir.Operand) -> str:
        if isinstance(v, ir.Immediate):
            return self.immediate(v, None)
        if isinstance(v, ir.Vector):
            return "(" + "".join(self.init_value(x) + ", " for x in v.items) + ")"
        if isinstance(v, ir.Generic):
            self.uses_ir = True
            offset = "" if v.offset is None else f", {self.offset(v.offset)}"
            return f"ir.Generic({v.name!r}{offset})"
        if isinstance(v, ir.Field):
            self.uses_ir = True
            value = repr(v.value) if isinstance(v.value, str) else \
                f"ptx.imm({v.value.spelling(canonical=v.value.expr is not None)!r})"
            return f"ir.Field({v.name!r}, {value})"
        return self.value(v)

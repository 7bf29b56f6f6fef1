"""Statements as DSL calls: instructions, ``.reg`` declarations through
``reg.declare``, variables, directives and blocks; with ``sugar``, forward
branches over a block as ``with ptx.if_(...)`` and a label reached only by a
branch at the end of a block as ``with ptx.loop(...)``."""

from __future__ import annotations

from .. import ir, isa
from ..types import TYPES
from ..validate import operand_kind
from ._operands import OperandWriter, pyname

__all__ = ["StatementWriter", "count_label_refs"]


class StatementWriter(OperandWriter):
    """Statements, and the structured forms of ``sugar``."""

    # statements --------------------------------------------------------------
    def instruction(self, ins: ir.Instruction, depth: int) -> None:
        parts = [isa.to_python(p) for p in ins.name.split(".")]
        known = isa.split_name(tuple(ins.name.split("."))) is not None
        chain = ".".join(parts) if known else "inst." + ".".join(parts)
        wants: list = [None] * len(ins.operands)
        kinds: list[tuple[str, ...]] = [()] * len(ins.operands)
        if self.validate:
            r = isa.resolve(ins.opcode, ins.modifiers, len(ins.operands), tuple(operand_kind(o, self._type_of) for o in ins.operands))
            for i, (o, t) in enumerate(zip(r.operands, r.types)):
                if i < len(wants):
                    wants[i], kinds[i] = t, o.kinds
        args = [self.value(op, w, k) for op, w, k in zip(ins.operands, wants, kinds)]
        if ins.guard is not None:
            g = ins.guard.register.name
            if g in self.regs:
                args.append(f"pred={'~' if ins.guard.negated else ''}{self.regs[g]}")
            else:
                args.append(f"pred={('!' if ins.guard.negated else '') + g!r}")
        self.out(depth, f"ptx.{chain}({', '.join(args)})")

    def regdecl(self, d: ir.RegDecl, depth: int) -> None:
        self.types_used.add(d.type)
        targets, specs = [], []
        for n in d.names:
            py = pyname(n.name, self.taken)
            targets.append(py)
            if n.count is None:
                specs.append(repr(n.name))
                self.regs[n.name] = py
                self.reg_types[n.name] = d.type
            else:
                specs.append(f"({n.name!r}, {n.count})")
                for i in range(n.count):
                    self.regs[f"{n.name}{i}"] = f"{py}[{i}]"
                    self.reg_types[f"{n.name}{i}"] = d.type
        vec = f", vector={d.vector}" if d.vector else ""
        self.out(depth, f"{', '.join(targets)} = reg.declare({d.type}, {', '.join(specs)}{vec})")

    def decl_call(self, d: ir.VarDecl) -> str:
        args = [repr(d.space), repr(d.type), repr(d.name)]
        if d.linkage:
            args.append(f"linkage={d.linkage!r}")
        if d.align is not None:
            args.append(f"align={d.align}")
        if d.vector is not None:
            args.append(f"vector={d.vector}")
        if d.dims:
            args.append(f"dims={d.dims!r}")
        if d.init is not None:
            values = ", ".join(self.init_value(v) for v in d.init)
            args.append(f"init=({values},)" if d.init_braced and values else
                        "init=()" if d.init_braced else f"init={values}")
        if d.attributes:
            args.append(f"attributes={' '.join(d.attributes)!r}")
        if d.layout:
            args.append(f"layout={d.layout!r}")
        return ", ".join(args)

    def directive(self, d: ir.Directive, depth: int) -> None:
        args = " ".join(d.args).replace(" ,", ",")
        extra = ", semicolon=True" if d.semicolon else ""
        self.out(depth, f"ptx.directive({d.name!r}, {args!r}{extra})")

    def body(self, stmts: list[ir.Statement], depth: int) -> None:
        i = 0
        while i < len(stmts):
            used = self.sugared(stmts, i, depth) if self.sugar else 0
            if used:
                i += used
                continue
            self.statement(stmts[i], depth)
            i += 1

    def statement(self, s: ir.Statement, depth: int) -> None:
        if isinstance(s, ir.Instruction):
            self.instruction(s, depth)
        elif isinstance(s, ir.Label):
            self.out(depth, f"ptx.label({s.name!r})")
        elif isinstance(s, ir.RegDecl):
            self.regdecl(s, depth)
        elif isinstance(s, ir.VarDecl):
            self.out(depth, f"ptx.declare({self.decl_call(s)})")
        elif isinstance(s, ir.Directive):
            self.directive(s, depth)
        elif isinstance(s, ir.Block):
            self.out(depth, "with ptx.block():")
            self.body_or_pass(s.body, depth + 1)
        elif isinstance(s, ir.Comment):
            self.out(depth, f"ptx.comment({s.text.strip()!r})")
        else:
            raise TypeError(f"cannot write statement {s!r}")

    def body_or_pass(self, stmts: list[ir.Statement], depth: int) -> None:
        n = len(self.lines)
        self.body(stmts, depth)
        if len(self.lines) == n:
            self.out(depth, "pass")

    def _type_of(self, name: str):
        return TYPES.get(self.reg_types.get(name, ""))

    # sugar ---------------------------------------------------------------------
    def sugared(self, stmts: list[ir.Statement], i: int, depth: int) -> int:
        """Write a structured form starting at ``stmts[i]``; return how many
        statements it covered (0 when none applies)."""
        s = stmts[i]
        refs = self.label_refs
        if (isinstance(s, ir.Instruction) and s.opcode == "bra" and not s.modifiers
                and s.guard is not None and len(s.operands) == 1 and isinstance(s.operands[0], ir.Symbol)):
            target = s.operands[0].name
            end = _find_label(stmts, i + 1, target)
            inner = stmts[i + 1:end] if end is not None else []
            g = s.guard.register.name
            if end is not None and refs.get(target) == 1 and g in self.regs and self.closed(inner):
                cond = self.regs[g] if s.guard.negated else f"~{self.regs[g]}"
                self.out(depth, f"with ptx.if_({cond}, label={target!r}):")
                self.body_or_pass(inner, depth + 1)
                return end - i + 1
        if isinstance(s, ir.Label) and refs.get(s.name) == 1:
            back = _find_back_branch(stmts, i + 1, s.name)
            if back is not None:
                inner = stmts[i + 1:back]
                b = stmts[back]
                if self.closed(inner):
                    loop_var = pyname("loop", self.taken)
                    self.out(depth, f"with ptx.loop(label={s.name!r}) as {loop_var}:")
                    self.body(inner, depth + 1)
                    pred = ""
                    if b.guard is not None:
                        g = b.guard.register.name
                        reg = self.regs.get(g, repr(g))
                        pred = f"pred={'~' if b.guard.negated else ''}{reg}"
                    self.out(depth + 1, f"{loop_var}.again({pred})")
                    return back - i + 1
        return 0

    def closed(self, stmts: list[ir.Statement]) -> bool:
        """No branch from outside ``stmts`` reaches a label inside them."""
        inside = count_label_refs(stmts)
        return all(inside.get(s.name, 0) == self.label_refs.get(s.name, 0)
                   for s in ir.walk(stmts) if isinstance(s, ir.Label))


def count_label_refs(body: list[ir.Statement]) -> dict[str, int]:
    """How many instructions name each label (or other symbol) in ``body``."""
    counts: dict[str, int] = {}
    for s in ir.walk(body):
        if isinstance(s, ir.Instruction):
            for op in s.operands:
                if isinstance(op, ir.Symbol):
                    counts[op.name] = counts.get(op.name, 0) + 1
    return counts


def _find_label(stmts: list[ir.Statement], start: int, name: str) -> int | None:
    for j in range(start, len(stmts)):
        if isinstance(stmts[j], ir.Label) and stmts[j].name == name:
            return j
    return None


def _find_back_branch(stmts: list[ir.Statement], start: int, name: str) -> int | None:
    for j in range(start, len(stmts)):
        s = stmts[j]
        if (isinstance(s, ir.Instruction) and s.opcode == "bra" and len(s.operands) == 1
                and isinstance(s.operands[0], ir.Symbol) and s.operands[0].name == name and not s.modifiers):
            return j
    return None

"""PTX module → Python source of a ``@kernel(module=True)`` in the jaxptx DSL.

Tracing the generated kernel gives back the input module: its IR equals
``parse(input)`` and its text is ``emit(parse(input), style="canonical")``.
Operands are written as the DSL would convert them back exactly: registers
through the arrays ``reg.declare`` returns (``r[3]``), numbers as Python
literals where the DSL spells them the same, ``ptx.imm("0x1F")`` where not.

With ``sugar=True`` the body reads more like hand-written code: forward
branches over a block become ``with ptx.if_(...)``, a label reached only by a
branch at the end of a block becomes ``with ptx.loop(...)``, parameters get
Python names and the kernel's docstring lists them.
"""

from __future__ import annotations

import keyword
import math
import re

from .. import ir, isa
from ..check import check
from ..dsl._core import to_immediate
from ..emit import statement_tokens
from ..errors import PtxError
from ..validate import operand_kind
from ..types import TYPES

__all__ = ["to_python"]

_TYPE_NAMES = set(TYPES)
_RESERVED = set(keyword.kwlist) | {"ptx", "reg", "kernel", "ir", "imm", "SINK"} | _TYPE_NAMES


def _pyname(name: str, taken: set[str]) -> str:
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


class _Writer:
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
            py = _pyname(n.name, self.taken)
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
                    loop_var = _pyname("loop", self.taken)
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
        inside = _label_refs(stmts)
        return all(inside.get(s.name, 0) == self.label_refs.get(s.name, 0)
                   for s in ir.walk(stmts) if isinstance(s, ir.Label))

    # module ------------------------------------------------------------------
    def function(self, f: ir.Function, depth: int) -> None:
        self.regs, self.reg_types, self.taken, self.params = {}, {}, set(), {}
        self.label_refs = _label_refs(f.body or [])
        args = [repr(f.kind), repr(f.name)]
        if f.params and self.sugar:
            # Named parameters: one Python variable per .param, used in addresses.
            for p in f.params:
                short = p.name[len(f.name) + 1:] if p.name.startswith(f.name + "_") else p.name
                self.params[p.name] = _pyname(short, self.taken)
                self.out(depth, f"{self.params[p.name]} = ptx.decl({self.decl_call(p)})")
            args.append(f"params=[{', '.join(self.params[p.name] for p in f.params)}]")
        elif f.params:
            params = "".join(f"\n{'    ' * (depth + 2)}ptx.decl({self.decl_call(p)})," for p in f.params)
            args.append(f"params=[{params}\n{'    ' * (depth + 1)}]")
        if f.returns is not None:
            rets = ", ".join(f"ptx.decl({self.decl_call(p)})" for p in f.returns)
            args.append(f"returns=[{rets}]")
        if f.linkage:
            args.append(f"linkage={f.linkage!r}")
        if f.directives:
            ds = ", ".join(f"({d.name!r}, {' '.join(d.args).replace(' ,', ',')!r}"
                           + (", True)" if d.semicolon else ")") for d in f.directives)
            args.append(f"directives=[{ds}]")
        if f.body is None:
            args.append("declaration=True")
        if not f.params_parens:
            args.append("params_parens=False")
        self.out(depth, f"with ptx.function({', '.join(args)}):")
        for p in [*f.params, *(f.returns or [])]:
            if p.space == "reg":
                self.regs[p.name] = repr(p.name)
        if f.body is None:
            self.out(depth + 1, "pass")
        else:
            self.body_or_pass(f.body, depth + 1)

    def write(self) -> str:
        body_start = len(self.lines)
        for item in self.module.items:
            if isinstance(item, ir.Function):
                self.function(item, 1)
            elif isinstance(item, ir.Section):
                self.out(1, f"with ptx.section({item.name!r}):")
                self.label_refs = {}
                self.body_or_pass(item.body, 2)
            elif isinstance(item, ir.Unknown):
                self.out(1, f"ptx.unparsed(*{list(statement_tokens(item))!r})")
            else:
                self.statement(item, 1)
        if len(self.lines) == body_start:
            self.out(1, "pass")
        body = self.lines
        target = next((t for t in self.module.target if re.match(r"^sm_\d+[af]?$", t)), None)
        options = [f"arch={target or 'sm_90a'!r}", "module=True", f"name={self.name!r}"]
        if self.module.version is not None:
            options.insert(1, f"version={self.module.version!r}")
        if not self.validate:
            options.append("validate=False")
        types = sorted(self.types_used & _TYPE_NAMES)
        head = ['"""Transpiled from PTX by jaxptx.codegen; tracing it gives the input back."""',
                "", f"from jaxptx import {'ir, ' if self.uses_ir else ''}kernel, ptx, reg"]
        if types:
            head.append(f"from jaxptx.types import {', '.join(types)}")
        head += ["", ""]
        if not self.validate:
            head.append("# jaxptx.check reports errors in this PTX, so the table does not check it.")
        head.append(f"@kernel({', '.join(options)})")
        head.append(f"def {_pyname(self.name, set())}():")
        if self.sugar:
            names = ", ".join(f.name for f in self.module.functions) or "none"
            head.append(f'    """PTX module with functions: {names}."""')
        return "\n".join(head + body) + "\n"


def _label_refs(body: list[ir.Statement]) -> dict[str, int]:
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


def to_python(module: ir.Module, name: str = "kernel", sugar: bool = False) -> str:
    """Python source defining ``@kernel`` ``name`` that traces back to ``module``.

    PTX that :func:`jaxptx.check` rejects is written too, as a kernel with
    ``validate=False`` (the command line refuses it unless given
    ``--unchecked``).

    Raises:
        ValueError: the module holds no PTX statements (empty text, or only
            comments and whitespace).
    """
    if not any(not isinstance(item, ir.Comment) for item in module.items):
        raise ValueError("the module holds no PTX statements (empty, or only comments); "
                         "nothing to transpile")
    return _Writer(module, name, sugar).write()

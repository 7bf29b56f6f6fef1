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

The writer is layered: :mod:`._operands` (operands, initialisers),
:mod:`._statements` (statements and the structured forms), and here the
functions and the module.
"""

from __future__ import annotations

import re

from .. import ir
from ..emit import statement_tokens
from ._operands import TYPE_NAMES, pyname
from ._statements import StatementWriter, count_label_refs

__all__ = ["to_python"]


class _Writer(StatementWriter):
    """Functions, sections and the module: the whole ``@kernel`` source."""

    # module ------------------------------------------------------------------
    def function(self, f: ir.Function, depth: int) -> None:
        self.regs, self.reg_types, self.taken, self.params = {}, {}, set(), {}
        self.label_refs = count_label_refs(f.body or [])
        args = [repr(f.kind), repr(f.name)]
        if f.params and self.sugar:
            # Named parameters: one Python variable per .param, used in addresses.
            for p in f.params:
                short = p.name[len(f.name) + 1:] if p.name.startswith(f.name + "_") else p.name
                self.params[p.name] = pyname(short, self.taken)
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
        types = sorted(self.types_used & TYPE_NAMES)
        head = ['"""Transpiled from PTX by jaxptx.codegen; tracing it gives the input back."""',
                "", f"from jaxptx import {'ir, ' if self.uses_ir else ''}kernel, ptx, reg"]
        if types:
            head.append(f"from jaxptx.types import {', '.join(types)}")
        head += ["", ""]
        if not self.validate:
            head.append("# jaxptx.check reports errors in this PTX, so the table does not check it.")
        head.append(f"@kernel({', '.join(options)})")
        head.append(f"def {pyname(self.name, set())}():")
        if self.sugar:
            names = ", ".join(f.name for f in self.module.functions) or "none"
            head.append(f'    """PTX module with functions: {names}."""')
        return "\n".join(head + body) + "\n"


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

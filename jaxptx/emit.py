"""IR → PTX text.

``emit(module)`` writes a :class:`jaxptx.ir.Module` as PTX. Each node is a
sequence of tokens; a node that carries ``trivia`` (recorded by the parser)
gets exactly that whitespace and those comments between its tokens, and a
node without trivia is spaced canonically. ``style="canonical"`` ignores all
trivia and gives the normal form jaxptx itself writes.

Example:
    >>> from jaxptx import ir
    >>> from jaxptx.emit import emit_statement
    >>> emit_statement(ir.Instruction("add", ("f32",), (ir.Register("%f1"),
    ...     ir.Register("%f2"), ir.Immediate(1.0, "f32"))))
    '\\tadd.f32 %f1, %f2, 0f3F800000;\\n'
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import ir

__all__ = ["SourceMap", "source_map", "emit", "emit_statement", "operand_text", "statement_tokens",
           "function_header_tokens"]

INDENT = "\t"


def operand_text(op: ir.Operand) -> str:
    """An operand in canonical spelling (``[%rd1+4]``, ``{%f1, %f2}``; a
    constant expression as its value)."""
    if type(op) is ir.Register:
        return op.name  # the common case, without building a token list
    return "".join(", " if t == "," else t for t in _folded(op).tokens())


def _folded(op: ir.Operand) -> ir.Operand:
    """``op`` with constant expressions replaced by their values (canonical
    text spells values: an expression's tokens joined without their spacing
    can read differently, as ``-10%3`` does); ``[%rd1+(2*2)]`` reads
    ``[%rd1+4]``."""
    if isinstance(op, ir.Immediate) and op.expr is not None:
        return ir.Immediate(op.value, unsigned=op.unsigned)
    if isinstance(op, ir.Vector):
        items = tuple(_folded(x) for x in op.items)
        return op if all(a is b for a, b in zip(items, op.items)) else ir.Vector(items)
    if isinstance(op, ir.Generic) and _has_expr(op.offset):
        return ir.Generic(op.name, _folded(op.offset))
    if isinstance(op, ir.Field) and _has_expr(op.value):
        return ir.Field(op.name, _folded(op.value))
    if isinstance(op, ir.Symbol) and isinstance(op.offset, ir.Immediate) and op.offset.expr is not None:
        return ir.Symbol(op.name, _folded(op.offset), op.minus)
    if isinstance(op, ir.Address) and (_has_expr(op.offset) or isinstance(op.base, ir.Symbol)
                                       and _has_expr(op.base.offset)):
        base = op.base if op.base is None else _folded(op.base)
        return ir.Address(base, _folded(op.offset), op.extra, op.minus)
    return op


def _has_expr(offset: "int | ir.Immediate | None") -> bool:
    return isinstance(offset, ir.Immediate) and offset.expr is not None


def _join(tokens: list[str], trivia: ir.Trivia) -> str:
    if trivia is None or len(trivia) != len(tokens) + 1:
        raise ValueError(
            f"trivia must have {len(tokens) + 1} entries for {len(tokens)} tokens, "
            f"got {None if trivia is None else len(trivia)}")
    parts = [trivia[0]]
    for tok, gap in zip(tokens, trivia[1:]):
        parts.append(tok)
        parts.append(gap)
    return "".join(parts)


def _operand_list_tokens(ops: tuple[ir.Operand, ...]) -> list[str]:
    out: list[str] = []
    for i, op in enumerate(ops):
        if i:
            out.append(",")
        out.extend(op.tokens())
    return out


def _guard_tokens(g: ir.Guard | None) -> list[str]:
    if g is None:
        return []
    return ["@", "!", g.register.name] if g.negated else ["@", g.register.name]


VARDECL_ORDER = ("linkage", "space", "attr", "align", "vector", "type")


def _vardecl_tokens(d: ir.VarDecl, *, semicolon: bool, fold: bool = False) -> list[str]:
    groups = {
        "linkage": [f".{x}" for x in d.linkage],
        "space": [f".{d.space}"],
        "attr": list(d.attributes),
        "align": [] if d.align is None else [".align", str(d.align)],
        "vector": [] if d.vector is None else [f".v{d.vector}"],
        "type": [f".{d.type}"],
    }
    out = [t for key in (d.layout or VARDECL_ORDER) for t in groups[key]]
    out.append(d.name)
    for n in d.dims:
        out.extend(["[", "]"] if n < 0 else ["[", str(n), "]"])
    if d.init is not None:
        out.append("=")
        init = tuple(_folded(x) for x in d.init) if fold else d.init
        if d.init_braced or len(init) != 1:
            out.extend(["{", *_operand_list_tokens(init), "}"])
        else:
            out.extend(init[0].tokens())
    if semicolon:
        out.append(";")
    return out


def statement_tokens(s: ir.Statement) -> list[str]:
    """The tokens of one statement, in order (what trivia interleaves with)."""
    if isinstance(s, ir.Instruction):
        return [*_guard_tokens(s.guard), s.name, *_operand_list_tokens(s.operands), ";"]
    if isinstance(s, ir.Label):
        return [s.name, ":"]
    if isinstance(s, ir.Comment):
        return [f"/*{s.text}*/" if s.block else f"//{s.text}"]
    if isinstance(s, ir.RegDecl):
        out = [".reg"]
        if s.vector is not None:
            out.append(f".v{s.vector}")
        out.append(f".{s.type}")
        for i, n in enumerate(s.names):
            if i:
                out.append(",")
            out.append(n.name)
            if n.count is not None:
                out.extend(["<", str(n.count), ">"])
        out.append(";")
        return out
    if isinstance(s, ir.VarDecl):
        return _vardecl_tokens(s, semicolon=True)
    if isinstance(s, ir.Directive):
        return [f".{s.name}", *s.args, *([";"] if s.semicolon else [])]
    if isinstance(s, ir.Unknown):
        return list(s.tokens)
    raise TypeError(f"expected an ir statement, got {type(s).__name__}")


def _canonical_statement(s: ir.Statement, indent: str) -> str:
    if isinstance(s, ir.Instruction):
        return _canonical_instruction(s, indent)
    if isinstance(s, ir.Label):
        return f"{s.name}:\n"
    if isinstance(s, ir.VarDecl):
        return f"{indent}{_canonical_join(_vardecl_tokens(s, semicolon=True, fold=True))}\n"
    return f"{indent}{_canonical_join(statement_tokens(s))}\n"


def _canonical_instruction(s: ir.Instruction, indent: str) -> str:
    guard = s.guard
    head = indent if guard is None else f"{indent}@{'!' if guard.negated else ''}{guard.register.name} "
    ops = ", ".join([o.name if type(o) is ir.Register else operand_text(o) for o in s.operands])
    key = (s.opcode, s.modifiers)
    name = _NAMES.get(key)
    if name is None:
        name = s.name
        if len(_NAMES) < _NAMES_MAX:
            _NAMES[key] = name
    return f"{head}{name} {ops};\n" if ops else f"{head}{name};\n"


# Each (opcode, modifiers) written so far and its dotted name: emit writes
# one instruction per line, and a kernel repeats few names many times.
_NAMES: dict[tuple[str, tuple[str, ...]], str] = {}
_NAMES_MAX = 1 << 16


_NO_SPACE_BEFORE = frozenset([",", ";", "]", "}", ")", "<", ">", "["])
_NO_SPACE_AFTER = frozenset(["[", "<", "{", "("])


def _canonical_join(tokens: list[str]) -> str:
    out: list[str] = []
    for tok in tokens:
        if out and tok not in _NO_SPACE_BEFORE and out[-1] not in _NO_SPACE_AFTER \
                and not (tok == "(" and out[-1] == "generic"):     # generic(g), as nvcc writes it
            out.append(" ")
        out.append(tok)
    return "".join(out)


class _At:
    """A mark in :func:`emit`'s parts: the next part is instruction ``ins``
    (read by :func:`source_map`; ``source``: written from its trivia)."""

    __slots__ = ("ins", "source", "indent")

    def __init__(self, ins: ir.Instruction, source: bool, indent: str) -> None:
        self.ins, self.source, self.indent = ins, source, indent

    def lead(self) -> int:
        """Characters of the part before the opcode (after any guard): where
        the parser locates an instruction."""
        ins = self.ins
        if self.source:
            guard = len(_guard_tokens(ins.guard))
            tokens = statement_tokens(ins)
            return len(ins.trivia[0]) + sum(len(tokens[i]) + len(ins.trivia[i + 1]) for i in range(guard))
        guard = f"@{'!' if ins.guard.negated else ''}{ins.guard.register.name} " if ins.guard else ""
        return len(self.indent) + len(guard)


def _statement(s: ir.Statement, style: str, depth: int, marks: bool = True) -> Iterator[Any]:
    """The parts of statement ``s``; with ``marks``, an instruction's part
    comes after an :class:`_At` (for :func:`source_map`)."""
    if isinstance(s, ir.Block):
        yield from _block(s.body, s.trivia, style, depth + 1, marks)
        return
    if style == "source" and s.trivia is not None:
        if marks and isinstance(s, ir.Instruction):
            yield _At(s, True, "")
        yield _join(statement_tokens(s), s.trivia)
    else:
        if marks and isinstance(s, ir.Instruction):
            yield _At(s, False, INDENT * depth)
        yield _canonical_statement(s, INDENT * depth)


def _block(body: list[ir.Statement], braces: ir.Trivia, style: str, depth: int,
           marks: bool = True) -> Iterator[Any]:
    # braces trivia: (before "{", after "{", before "}", after "}")
    src = style == "source" and braces is not None
    pad = INDENT * (depth - 1)
    indent = INDENT * depth
    yield (braces[0] + "{" + braces[1]) if src else f"{pad}{{\n"
    for s in body:
        if type(s) is ir.Instruction and (s.trivia is None or style != "source"):
            # the common case written here: a traced instruction, spaced canonically
            if marks:
                yield _At(s, False, indent)
            yield _canonical_instruction(s, indent)
        else:
            yield from _statement(s, style, depth, marks)
    yield (braces[2] + "}" + braces[3]) if src else f"{pad}}}\n"


def emit_statement(s: ir.Statement, style: str = "source", depth: int = 1) -> str:
    """One statement as PTX text (with its newline)."""
    return "".join(p for p in _statement(s, style, depth) if type(p) is str)


def function_header_tokens(f: ir.Function) -> list[str]:
    """The tokens of a function's header, from its linkage to the ``)``."""
    out = [f".{x}" for x in f.linkage]
    out.append(f".{f.kind}")
    if f.returns is not None:
        out.append("(")
        for i, p in enumerate(f.returns):
            if i:
                out.append(",")
            out.extend(_vardecl_tokens(p, semicolon=False))
        out.append(")")
    out.append(f.name)
    if f.params or f.params_parens:
        out.append("(")
        for i, p in enumerate(f.params):
            if i:
                out.append(",")
            out.extend(_vardecl_tokens(p, semicolon=False))
        out.append(")")
    return out


def _canonical_header(f: ir.Function) -> str:
    head = " ".join([*(f".{x}" for x in f.linkage), f".{f.kind}"])
    if f.returns is not None:
        rets = ", ".join(_decl_text(p) for p in f.returns)
        head += f" ({rets})"
    head += f" {f.name}"
    if f.params:
        params = ",\n".join(INDENT + _decl_text(p) for p in f.params)
        head += f"(\n{params}\n)"
    elif f.params_parens:
        head += "()"
    return head + "\n"


def _decl_text(d: ir.VarDecl) -> str:
    return _canonical_join(_vardecl_tokens(d, semicolon=False, fold=True))


def _function(f: ir.Function, style: str, marks: bool = True) -> Iterator[Any]:
    src = style == "source"
    if src and f.trivia is not None:
        yield _join(function_header_tokens(f), f.trivia)
    else:
        yield _canonical_header(f)
    for d in f.directives:
        yield from _statement(d, style, 0, marks)
    if f.body is None:
        yield (f.brace_trivia[0] + ";" + f.brace_trivia[1]) if src and f.brace_trivia else ";\n"
        return
    yield from _block(f.body, f.brace_trivia, style, 1, marks)


def _section(sec: ir.Section, style: str, marks: bool = True) -> Iterator[Any]:
    tokens = [".section", sec.name]
    if style == "source" and sec.trivia is not None:
        yield _join(tokens, sec.trivia)
    else:
        yield f"\t.section\t{sec.name}\n"
    yield from _block(sec.body, sec.brace_trivia, style, 1, marks)


def emit(module: ir.Module, style: str = "source") -> str:
    """Write ``module`` as PTX text.

    Args:
        module: the module.
        style: ``"source"`` keeps recorded trivia (byte-exact for parsed
            modules); ``"canonical"`` ignores it.

    Returns:
        The PTX text.

    Raises:
        ValueError: unknown style, or trivia that does not fit its node.
    """
    return "".join(_parts(module, style, marks=False))


def _parts(module: ir.Module, style: str, marks: bool = True) -> list:
    """The module's text in parts; with ``marks``, each instruction's part
    after an :class:`_At`."""
    if style not in ("source", "canonical"):
        raise ValueError(f"style must be 'source' or 'canonical', got {style!r}")
    parts: list = []
    for item in module.items:
        if isinstance(item, ir.Function):
            if style == "canonical" or item.trivia is None:
                parts.append("\n")
            parts.extend(_function(item, style, marks))
        elif isinstance(item, ir.Section):
            parts.extend(_section(item, style, marks))
        else:
            parts.extend(_statement(item, style, 0, marks))
    if style == "source" and module.trailing is not None:
        parts.append(module.trailing)
    return parts


class SourceMap:
    """Where :func:`emit` writes each instruction of a module: the PTX line
    of a traced instruction (whose ``loc`` is its Python line), of a parsed
    one, or of one built by hand, in the text ``emit(module, style)`` returns.

    Attributes:
        text: that text.
        instructions: every instruction, in text order, with its
            :class:`jaxptx.ir.PtxLocation` (source ``"<emit>"``).
    """

    def __init__(self, text: str, instructions: list[tuple[ir.Instruction, ir.PtxLocation]]) -> None:
        self.text = text
        self.instructions = instructions
        self._by_id = {id(ins): loc for ins, loc in instructions}
        self._by_line = {loc.line: ins for ins, loc in reversed(instructions)}
        self._lines: list[str] | None = None

    def ptx(self, ins: ir.Instruction) -> ir.PtxLocation | None:
        """The PTX location of instruction ``ins`` (this very object)."""
        return self._by_id.get(id(ins))

    def at_line(self, line: int) -> ir.Instruction | None:
        """The (first) instruction on PTX line ``line``."""
        return self._by_line.get(line)

    def python(self, line: int) -> ir.PythonLocation | None:
        """The Python line that traced the instruction on PTX line ``line``."""
        ins = self.at_line(line)
        return ir.python_location(ins.loc) if ins is not None else None

    def line_text(self, line: int) -> str:
        """The text of PTX line ``line`` ("" past the end)."""
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines[line - 1] if 0 < line <= len(self._lines) else ""


def source_map(module: ir.Module, style: str = "source") -> SourceMap:
    """The text :func:`emit` writes for ``module`` and where each instruction
    is in it (see :class:`SourceMap`).

    Raises:
        ValueError: as :func:`emit`.
    """
    chunks: list[str] = []
    found: list[tuple[ir.Instruction, ir.PtxLocation]] = []
    line, offset, line_start = 1, 0, 0
    pending: _At | None = None
    for p in _parts(module, style):
        if type(p) is not str:
            pending = p
            continue
        if pending is not None:
            lead = pending.lead()
            at = offset + lead
            head = p[:lead]
            first_line = line + head.count("\n")
            start = (offset + head.rindex("\n") + 1) if "\n" in head else line_start
            found.append((pending.ins, ir.PtxLocation("<emit>", first_line, at - start + 1)))
            pending = None
        chunks.append(p)
        newlines = p.count("\n")
        if newlines:
            line += newlines
            line_start = offset + p.rindex("\n") + 1
        offset += len(p)
    return SourceMap("".join(chunks), found)

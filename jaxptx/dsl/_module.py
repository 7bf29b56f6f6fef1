"""Module-level building blocks: functions, variables, directives, sections,
nested blocks, and operand constructors for exact PTX.

In a kernel declared with ``module=True`` the body builds the whole module
with these (it is what ``python -m jaxptx.codegen`` writes); in an ordinary
kernel they add declarations and directives inside the kernel body::

    with ptx.function("func", "helper", params=[ptx.decl("param", "b32", "x")]):
        ...
    ptx.declare("global", "u32", "table", dims=(4,), init=(1, 2, 3, 4))
    ptx.directive("pragma", '"nounroll"', semicolon=True)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .. import ir
from ..errors import TraceError
from ..parse import immediate, lex
from ..types import TYPES
from ._constructs import tracked_context
from ._core import to_operand
from ._trace import current

__all__ = ["function", "section", "block", "decl", "declare", "directive", "unparsed",
           "imm", "sym", "args", "pair", "negate"]


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(lex(text, "<directive>").tokens)


def decl(space: str, type: str, name: str, *, linkage: Sequence[str] = (), align: int | None = None,
         vector: int | None = None, dims: Sequence[int] = (), init: Sequence[Any] | Any | None = None,
         braced: bool | None = None, attributes: str = "", layout: Sequence[str] | None = None) -> ir.VarDecl:
    """A variable or parameter declaration (not emitted; see :func:`declare`).

    ``init`` is one value or a sequence (``{...}``); ``attributes`` is the
    ``.ptr`` attribute text of a parameter (``".ptr .global .align 1"``).
    """
    values = None
    if init is not None:
        seq = init if isinstance(init, (list, tuple)) else (init,)
        values = tuple(to_operand(v, None, None, f"{name} initialiser") for v in seq)
        braced = isinstance(init, (list, tuple)) if braced is None else braced
    return ir.VarDecl(space.lstrip("."), type.lstrip("."), name, tuple(x.lstrip(".") for x in linkage),
                      align, vector, tuple(dims), values, bool(braced), _tokens(attributes),
                      layout=tuple(layout) if layout else None)


def declare(space: str, type: str, name: str, **fields: Any) -> ir.VarDecl:
    """Declare a variable here (module level, or inside the current function)."""
    d = decl(space, type, name, **fields)
    current().append(d)
    return d


def directive(name: str, args: str = "", *, semicolon: bool = False) -> ir.Directive:
    """Emit ``.name args`` (``args`` is PTX text: ``"128, 1, 1"``, ``'"nounroll"'``)."""
    d = ir.Directive(name.lstrip("."), _tokens(args), semicolon)
    current().append(d)
    return d


def unparsed(*tokens: str) -> ir.Unknown:
    """A top-level statement outside PTX's grammar, by its tokens (for
    transpiled files that ptxas itself would refuse)."""
    node = ir.Unknown(tuple(tokens))
    current().append(node)
    return node


@tracked_context("ptx.function(...)")
def function(kind: str, name: str, *, params: Sequence[ir.VarDecl] = (),
             returns: Sequence[ir.VarDecl] | None = None, linkage: Sequence[str] = (),
             directives: Sequence[tuple] = (), declaration: bool = False,
             params_parens: bool = True) -> Iterator[ir.Function]:
    """Define a ``.entry``/``.func`` in a ``module=True`` kernel; the ``with``
    body is the function body (empty for a ``declaration`` ending in ``;``).
    ``directives`` are ``(name, args)`` or ``(name, args, semicolon)``.

    Raises:
        TraceError: outside a module kernel, or nested in another function.
    """
    trace = current()
    if not trace.module_mode or trace.function is not None:
        raise TraceError("ptx.function(...) defines a function at the top level of a "
                         "@kernel(module=True) body")
    f = ir.Function(kind.lstrip("."), name, list(params), None if returns is None else list(returns),
                    tuple(x.lstrip(".") for x in linkage),
                    [ir.Directive(d[0].lstrip("."), _tokens(d[1]), *d[2:]) for d in directives],
                    None if declaration else [], params_parens)
    trace.items.append(f)
    if declaration:
        yield f
        return
    trace.function = f
    trace.scope, trace.entry, trace.lazy = f, [], {}   # registers and lazy values are per function
    module_symbols = set(trace._symbols)   # labels and registers are per function
    with trace.block(f.body):
        for p in [*f.params, *(f.returns or [])]:
            if p.space == "reg":
                trace.reg_types[p.name] = TYPES.get(p.type)
                if p.vector:
                    trace.vectors[p.name] = p.vector
        yield f
    f.body[0:0] = [*trace.register_decls(), *trace.entry]
    trace.function = None
    trace.scope, trace.entry, trace.lazy = trace, [], {}
    trace.reset_registers()
    trace._symbols = module_symbols


@tracked_context("ptx.section(...)")
def section(name: str) -> Iterator[ir.Section]:
    """A debug section ``.section name { ... }``: put directives and labels in it."""
    trace = current()
    sec = ir.Section(name)
    trace.append(sec)
    with trace.block(sec.body):
        yield sec


@tracked_context("ptx.block(...)")
def block() -> Iterator[ir.Block]:
    """A nested ``{ ... }`` scope inside a function body."""
    trace = current()
    b = ir.Block()
    trace.append(b)
    outer = set(trace._symbols)     # names declared in a block are local to it
    with trace.block(b.body):
        yield b
    trace._symbols = outer


def imm(literal: str) -> ir.Immediate:
    """An immediate spelled exactly as ``literal`` (``"0x1F"``, ``"0f3F800000"``)."""
    toks = lex(literal, "<immediate>")
    if len(toks.tokens) != 1:
        raise TraceError(f"ptx.imm: expected one numeric literal, got {literal!r}")
    return immediate(toks.tokens[0], toks, 0)


def sym(name: str, offset: int | None = None, *, minus: bool = False) -> ir.Symbol:
    """A name operand, optionally with an offset (``foo+4``)."""
    return ir.Symbol(name, offset, minus)


def args(*items: Any) -> ir.Parens:
    """A parenthesised operand list, as in ``call (r), f, (a, b)``."""
    return ir.Parens(tuple(to_operand(x, None, None, "argument list") for x in items))


def negate(operand: Any) -> ir.Negated:
    """``!operand`` for any operand (``~p`` does this for predicate registers)."""
    return ir.Negated(to_operand(operand, None, None, "negation"))


def pair(first: Any, second: Any) -> ir.Pair:
    """Two destinations ``d|p``."""
    return ir.Pair(to_operand(first, None, None, "pair"), to_operand(second, None, None, "pair"))

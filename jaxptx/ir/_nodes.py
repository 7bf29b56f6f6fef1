"""Statements, declarations, functions and modules as plain data.

Losslessness: every node renders to a sequence of tokens (see
``jaxptx.emit``). A node may carry ``trivia``: the whitespace and comments
found *between* its tokens (``len(tokens) + 1`` strings: before the first
token, between each pair, after the last). With ``trivia=None`` the emitter
spaces the tokens canonically. Trivia never holds a token, so the IR alone
decides what the program is; the parser only records how it was laid out.

Nodes read from text also carry ``loc``, the ``(source, line, column)`` of
their first token, for messages (``jaxptx.check`` reports a duplicate label
or an unknown directive there); like trivia it is neither emitted nor
compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Union

from ._operands import Operand, Register

Trivia = Union[tuple[str, ...], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Guard:
    """An instruction predicate: ``@%p1`` or ``@!%p1``."""

    register: Register
    negated: bool = False


@dataclasses.dataclass(slots=True)
class Instruction:
    """One PTX instruction.

    Attributes:
        opcode: the base opcode as the ISA table names it (``"add"``,
            ``"cp.async.bulk.tensor"``).
        modifiers: the dot-suffixes after the opcode, without dots, in
            source order (``("rn", "f32")``).
        operands: operands in order.
        guard: optional predicate guard.
        loc: where it came from, for messages (not emitted): the user's
            Python ``(file, line)`` for traced kernels, ``(source, line,
            column)`` for parsed PTX.
    """

    opcode: str
    modifiers: tuple[str, ...] = ()
    operands: tuple[Operand, ...] = ()
    guard: Guard | None = None
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)

    @property
    def name(self) -> str:
        """Opcode and modifiers joined with dots (``add.rn.f32``)."""
        return ".".join((self.opcode, *self.modifiers))


@dataclasses.dataclass(slots=True)
class Label:
    """A label definition ``name:``."""

    name: str
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Comment:
    """A comment on its own: ``// text`` (``block=False``) or ``/* text */``."""

    text: str
    block: bool = False
    trivia: Trivia = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class RegName:
    """One name in a ``.reg`` line: ``%f`` or the range ``%f<8>`` (count=8)."""

    name: str
    count: int | None = None


@dataclasses.dataclass(slots=True)
class RegDecl:
    """``.reg .type names;`` — one or several names or ranges on one line.

    ``vector`` is ``2``/``4`` for ``.reg .v2 .f32 ...``; ``align`` is rare.
    """

    type: str
    names: tuple[RegName, ...]
    vector: int | None = None
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class VarDecl:
    """A state-space variable: ``.shared .align 16 .b8 buf[1024];``.

    Attributes:
        space: ``shared``, ``global``, ``const``, ``local`` or ``param``.
        type: element type name (``b8``).
        name: variable name.
        linkage: ``extern``, ``visible``, ``weak`` or ``common`` prefixes.
        align: ``.align N`` or ``None``.
        vector: ``.v2``/``.v4`` element vectors.
        dims: array dimensions; ``-1`` renders an unsized ``[]``.
        init: initialiser operands (``= {1, 2}`` when more than one or when
            ``init_braced``): numbers, variable names (their address),
            :class:`~jaxptx.ir.Generic` addresses, nested ``{...}`` as
            :class:`~jaxptx.ir.Vector`, and the :class:`~jaxptx.ir.Field`
            items of a ``.texref``/``.samplerref``/``.surfref``.
        attributes: the tokens of ``.ptr`` attributes on params
            (``(".ptr", ".global", ".align", "16")``), emitted in order.
        layout: the order the qualifier groups were written in, when it is
            not the canonical one (``("space", "type", "attr", "align")``
            for ``.param .u64 .ptr .global .align 1 p``); keys are
            ``linkage``, ``space``, ``attr``, ``align``, ``vector``, ``type``.
    """

    space: str
    type: str
    name: str
    linkage: tuple[str, ...] = ()
    align: int | None = None
    vector: int | None = None
    dims: tuple[int, ...] = ()
    init: tuple[Operand, ...] | None = None
    init_braced: bool = False
    attributes: tuple[str, ...] = ()
    layout: tuple[str, ...] | None = dataclasses.field(default=None, compare=False)
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Directive:
    """A directive with plain arguments: ``.version 8.5``, ``.maxntid 128, 1, 1``,
    ``.pragma "nounroll";``, ``.loc 1 12 3``, ``.b8 1, 2, 3`` in a section.

    Attributes:
        name: directive name without the dot.
        args: the argument tokens in order, separators included: numbers,
            names, quoted strings (with their quotes), ``,``, ``(``, ``)``.
        semicolon: ends with ``;`` (``.pragma``).
    """

    name: str
    args: tuple[str, ...] = ()
    semicolon: bool = False

    @classmethod
    def listing(cls, name: str, *args: object, semicolon: bool = False) -> "Directive":
        """A directive whose arguments are separated by commas."""
        tokens: list[str] = []
        for i, a in enumerate(args):
            if i:
                tokens.append(",")
            tokens.append(str(a))
        return cls(name, tuple(tokens), semicolon)

    @property
    def values(self) -> tuple[str, ...]:
        """The arguments without the ``,`` separators."""
        return tuple(a for a in self.args if a != ",")
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Block:
    """A nested ``{ ... }`` scope inside a function body."""

    body: list["Statement"] = dataclasses.field(default_factory=list)
    trivia: Trivia = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Section:
    """A debug section: ``.section .debug_info { .b8 1, 2 ... }``.

    ``body`` holds data directives (``.b8``/``.b32``/``.b64``), labels and
    comments; ``trivia`` covers the ``.section name`` tokens and
    ``brace_trivia`` the braces, as for functions.
    """

    name: str
    body: list["Statement"] = dataclasses.field(default_factory=list)
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    brace_trivia: Trivia = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(slots=True)
class Unknown:
    """A top-level statement outside PTX's grammar, kept as its tokens so the
    text still round-trips; ``jaxptx.check`` reports it as an error."""

    tokens: tuple[str, ...]
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


Statement = Union[Instruction, Label, Comment, RegDecl, VarDecl, Directive, Block]


@dataclasses.dataclass(slots=True)
class Function:
    """A kernel (``.entry``) or device function (``.func``).

    Attributes:
        kind: ``entry`` or ``func``.
        name: symbol name.
        params: parameter declarations (``VarDecl`` with space ``param``
            or ``reg``).
        returns: ``.func`` return parameters (``.func (.reg .b32 r) f(...)``).
        linkage: ``visible``, ``extern``, ``weak`` prefixes.
        directives: performance-tuning directives between the signature and
            the body (``.maxntid``, ``.reqntid``, ``.reqnctapercluster``...).
        body: statements, or ``None`` for a declaration ending in ``;``.
        params_parens: the parameter list is written in parentheses (legacy
            PTX may write ``.entry k`` with none).
    """

    kind: str
    name: str
    params: list[VarDecl] = dataclasses.field(default_factory=list)
    returns: list[VarDecl] | None = None
    linkage: tuple[str, ...] = ()
    directives: list[Directive] = dataclasses.field(default_factory=list)
    body: list[Statement] | None = dataclasses.field(default_factory=list)
    params_parens: bool = True
    trivia: Trivia = dataclasses.field(default=None, compare=False)
    brace_trivia: Trivia = dataclasses.field(default=None, compare=False)
    loc: tuple | None = dataclasses.field(default=None, compare=False)


Item = Union[Directive, VarDecl, Function, Comment, Section, Unknown]


def walk(body: list[Statement]) -> Iterator[Statement]:
    """The statements of ``body`` in order, with nested blocks flattened."""
    # A list without blocks (most bodies) is iterated as it is: the
    # end-of-trace checks walk every function several times.
    if not isinstance(body, list) or any(issubclass(t, Block) for t in set(map(type, body))):
        return _walk_blocks(body)
    return iter(body)


def _walk_blocks(body: list[Statement]) -> Iterator[Statement]:
    for s in body:
        if isinstance(s, Block):
            yield from walk(s.body)
        else:
            yield s


@dataclasses.dataclass(slots=True)
class Module:
    """A PTX module: top-level items in order, plus trailing trivia.

    ``version``/``target``/``address_size`` read the corresponding
    directives for convenience.
    """

    items: list[Item] = dataclasses.field(default_factory=list)
    trailing: str | None = dataclasses.field(default=None, compare=False)

    def _directive(self, name: str) -> Directive | None:
        for item in self.items:
            if isinstance(item, Directive) and item.name == name:
                return item
        return None

    @property
    def version(self) -> tuple[int, int] | None:
        """The ``.version`` as ``(major, minor)``, or ``None``."""
        d = self._directive("version")
        if d is None:
            return None
        major, _, minor = d.args[0].partition(".")
        return int(major), int(minor or 0)

    @property
    def target(self) -> tuple[str, ...]:
        """The ``.target`` arguments (``("sm_90a",)``)."""
        d = self._directive("target")
        return d.values if d is not None else ()

    @property
    def functions(self) -> list[Function]:
        """The module's functions and kernels in order."""
        return [i for i in self.items if isinstance(i, Function)]

    def function(self, name: str) -> Function:
        """The function called ``name``.

        Raises:
            KeyError: no such function; the message lists the ones there are.
        """
        for f in self.functions:
            if f.name == name:
                return f
        names = ", ".join(f.name for f in self.functions) or "none"
        raise KeyError(f"no function {name!r} in module; functions: {names}")

"""Instruction operands as plain data.

Each operand knows how to spell itself as a list of tokens (``tokens()``);
the emitter joins the tokens of a statement, with canonical spacing or with
the whitespace the parser recorded between them. Nothing keeps source text:
an immediate keeps the *form* of its literal (hex, ``0f`` float bits), not the
characters it came from.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import Union


@dataclasses.dataclass(frozen=True, slots=True)
class Register:
    """A register or special register: ``%r1``, ``%tid.x``, ``%acc``."""

    name: str

    def tokens(self) -> list[str]:
        """The register name as one token."""
        return [self.name]


@dataclasses.dataclass(frozen=True, slots=True)
class Immediate:
    """An integer or floating-point constant.

    Attributes:
        value: the number.
        form: how it is spelled: ``"dec"``, ``"hex"`` (``0x1F``), ``"oct"``,
            ``"bin"``, ``"f32"`` (``0f3F800000``), ``"f64"`` (``0d...``) or
            ``"float"`` (decimal with a point or exponent).
        unsigned: trailing ``U`` suffix on an integer literal.
        upper: hex digits in upper case (``hex``, ``f32``, ``f64`` forms).
        pad: minimum number of hex digits (leading zeros) for ``hex``.
        literal: the parser's spelling of the literal where the fields above
            do not determine it (``1.50e-3``, ``0X1f``); the value is still
            ``value``. Not part of equality; canonical output ignores it.
        expr: the tokens of the constant expression this value folds
            (``("(", "1", "+", "2", ")")``), or ``None`` for a literal.
            Not part of equality.
    """

    value: int | float
    form: str = "dec"
    unsigned: bool = False
    upper: bool = True
    pad: int = 0
    literal: str | None = dataclasses.field(default=None, compare=False)
    expr: tuple[str, ...] | None = dataclasses.field(default=None, compare=False)

    def tokens(self) -> list[str]:
        """The literal as one token, or the constant expression's tokens."""
        return list(self.expr) if self.expr is not None else [self.spelling()]

    def spelling(self, canonical: bool = False) -> str:
        """The literal in PTX syntax (as written, unless ``canonical``; a
        constant expression's tokens joined)."""
        if self.expr is not None and not canonical:
            return "".join(self.expr)
        if self.literal is not None and not canonical:
            return self.literal
        v = self.value
        if self.form == "f32":
            return "0f" + _hex(struct.unpack("<I", struct.pack("<f", v))[0], 8, self.upper)
        if self.form == "f64":
            return "0d" + _hex(struct.unpack("<Q", struct.pack("<d", v))[0], 16, self.upper)
        if self.form == "float":
            return repr(float(v))
        sign, mag = ("-", -v) if v < 0 else ("", v)
        suffix = "U" if self.unsigned else ""
        if self.form == "hex":
            return f"{sign}0x{_hex(mag, self.pad, self.upper)}{suffix}"
        if self.form == "oct":
            return f"{sign}0{mag:o}{suffix}"
        if self.form == "bin":
            return f"{sign}0b{mag:b}{suffix}"
        return f"{v}{suffix}"


def _hex(value: int, width: int, upper: bool) -> str:
    text = f"{value:0{width}x}"
    return text.upper() if upper else text


@dataclasses.dataclass(frozen=True, slots=True)
class Symbol:
    """A named variable, parameter, function or label used as an operand.

    ``offset`` renders as ``name+offset`` (``name-offset`` when ``minus``):
    address arithmetic on a symbol.
    """

    name: str
    offset: "int | Immediate | None" = None
    minus: bool = False

    def tokens(self) -> list[str]:
        """``name`` or ``name``, ``+``/``-``, ``offset``."""
        if self.offset is None:
            return [self.name]
        return [self.name, "-" if self.minus else "+", *_offset_tokens(self.offset)]


def _offset_tokens(offset: "int | Immediate") -> list[str]:
    """An offset's tokens: one number, or a constant expression's tokens
    (``+(2*2)`` in ``[%rd1+(2*2)]``)."""
    return [str(offset)] if isinstance(offset, int) else offset.tokens()


@dataclasses.dataclass(frozen=True, slots=True)
class Sink:
    """The bit bucket ``_`` (an output whose value is discarded)."""

    def tokens(self) -> list[str]:
        """``_``."""
        return ["_"]


@dataclasses.dataclass(frozen=True, slots=True)
class Negated:
    """A logically negated predicate operand: ``!%p1``."""

    operand: "Operand"

    def tokens(self) -> list[str]:
        """``!`` then the operand."""
        return ["!", *self.operand.tokens()]


@dataclasses.dataclass(frozen=True, slots=True)
class Vector:
    """A brace-enclosed vector of operands: ``{%f1, %f2, %f3, %f4}``."""

    items: tuple["Operand", ...]

    def tokens(self) -> list[str]:
        """``{``, items separated by ``,``, ``}``."""
        return _enclosed("{", self.items, "}")


@dataclasses.dataclass(frozen=True, slots=True)
class Pair:
    """Two destinations joined by ``|``, as in ``setp`` and ``shfl.sync``."""

    first: "Operand"
    second: "Operand"

    def tokens(self) -> list[str]:
        """First, ``|``, second."""
        return [*self.first.tokens(), "|", *self.second.tokens()]


@dataclasses.dataclass(frozen=True, slots=True)
class Address:
    """A memory operand in brackets.

    Forms: ``[base]``, ``[base+offset]``, ``[offset]`` (absolute),
    ``[base, {c0, c1}]`` (tensor coordinates for TMA), ``[base, imm]``.

    Attributes:
        base: register or symbol, or ``None`` for an absolute address.
        offset: byte offset (an int, a spelled immediate or a constant
            expression's immediate: ``[%rd1+(2*2)]``), rendered as
            ``+offset`` (``+-4`` when negative, as nvcc writes it), as
            ``-offset`` when ``minus``, or alone when there is no base.
        extra: a second comma-separated element inside the brackets (the TMA
            coordinate vector or an immediate).
    """

    base: Register | Symbol | None
    offset: "int | Immediate | None" = None
    extra: "Operand | None" = None
    minus: bool = False

    def tokens(self) -> list[str]:
        """``[``, base, ``+``, offset, ``,`` extra, ``]``."""
        out = ["["]
        if self.base is not None:
            out.extend(self.base.tokens())
            if self.offset is not None:
                out.append("-" if self.minus else "+")
                out.extend(_offset_tokens(self.offset))
        elif self.offset is not None:
            out.extend(_offset_tokens(self.offset))
        if self.extra is not None:
            out.append(",")
            out.extend(self.extra.tokens())
        out.append("]")
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Parens:
    """A parenthesised operand list, as in ``call (r), f, (a, b);``."""

    items: tuple["Operand", ...]

    def tokens(self) -> list[str]:
        """``(``, items separated by ``,``, ``)``."""
        return _enclosed("(", self.items, ")")


def _enclosed(open_: str, items: tuple["Operand", ...], close: str) -> list[str]:
    out = [open_]
    for i, item in enumerate(items):
        if i:
            out.append(",")
        out.extend(item.tokens())
    out.append(close)
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Generic:
    """``generic(name)`` or ``generic(name)+offset`` in a variable's
    initialiser: the generic address of a ``.global`` or ``.const`` variable,
    plus ``offset`` bytes (PTX ISA, "Initializers"; ptxas takes only a ``+``
    offset here, and ``generic`` nowhere but in initialisers).

    Attributes:
        name: the variable.
        offset: byte offset (an int, a spelled immediate or a constant
            expression's immediate: ``generic(g)+(2*2)``), or ``None``.
    """

    name: str
    offset: "int | Immediate | None" = None

    def tokens(self) -> list[str]:
        """``generic``, ``(``, name, ``)``, then ``+`` and the offset."""
        out = ["generic", "(", self.name, ")"]
        if self.offset is not None:
            out.append("+")
            out.extend(_offset_tokens(self.offset))
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One ``name = value`` of a ``.texref``, ``.samplerref`` or ``.surfref``
    initialiser (``{ addr_mode_0 = clamp_to_border, filter_mode = nearest }``,
    PTX ISA "Texture Sampler and Surface Types").

    Attributes:
        name: the field (``filter_mode``, ``addr_mode_0``, ``width``...).
        value: an enumerator the ISA names for the field (``"nearest"``,
            ``"clamp_to_border"``), as a string, or a number.
    """

    name: str
    value: "str | Immediate"

    def tokens(self) -> list[str]:
        """name, ``=``, value."""
        value = [self.value] if isinstance(self.value, str) else self.value.tokens()
        return [self.name, "=", *value]


Operand = Union[Register, Immediate, Symbol, Sink, Negated, Vector, Pair, Address, Parens, Generic, Field]


def leaves(op: "Operand | int") -> Iterator["Register | Immediate | Symbol | Sink | int"]:
    """The leaves of an operand, in order: registers, symbols, immediates,
    sinks, and the plain-int offsets of addresses and symbols (``[%rd1+4]``
    gives ``%rd1`` then ``4``; ``generic(g)+4`` gives the symbol ``g`` then
    ``4``; a field gives its number, not its enumerator name)."""
    if isinstance(op, (Register, Immediate, Sink, int)):
        yield op
    elif isinstance(op, Symbol):
        yield op
        if op.offset is not None:
            yield op.offset
    elif isinstance(op, Address):
        for part in (op.base, op.offset, op.extra):
            if part is not None:
                yield from leaves(part)
    elif isinstance(op, (Vector, Parens)):
        for item in op.items:
            yield from leaves(item)
    elif isinstance(op, Pair):
        yield from leaves(op.first)
        yield from leaves(op.second)
    elif isinstance(op, Negated):
        yield from leaves(op.operand)
    elif isinstance(op, Generic):
        yield Symbol(op.name)
        if op.offset is not None:
            yield op.offset
    elif isinstance(op, Field) and isinstance(op.value, Immediate):
        yield op.value

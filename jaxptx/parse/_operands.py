"""Operands and initialisers: registers, immediates and constant
expressions, names with offsets, addresses, vectors, ``generic(...)`` and the
fields of opaque-type initialisers."""

from __future__ import annotations

from .. import ir
from ._constexpr import constant_expression, continues_expression, starts_expression
from ._cursor import NAME, Cursor
from ._literals import immediate, offset_value

__all__ = ["OperandParser", "is_number"]

# Tokens that begin a constant expression that does not begin with a number.
_EXPRESSION_START = frozenset(["(", "-", "+", "~", "!"])


class OperandParser(Cursor):
    """The operand grammar, on top of the cursor."""

    # initialisers --------------------------------------------------------------
    def initialiser(self) -> ir.Operand:
        """One item of a variable's initialiser: a nested ``{...}``,
        ``generic(name)[+offset]``, a ``name = value`` field of an opaque
        type, or an operand (a number, a name, ``name+offset``)."""
        t, i = self.t, self.i
        if t[i] == "{":
            self.i += 1
            items = []
            while self.peek() != "}":
                if items:
                    self.expect(",")
                items.append(self.initialiser())
            self.next()
            return ir.Vector(tuple(items))
        if t[i] == "generic" and t[i + 1] == "(":
            return self.generic()
        if t[i + 1] == "=" and NAME.match(t[i]):
            return self.field()
        return self.operand()

    def generic(self) -> ir.Generic:
        """``generic(name)``, then ``+offset`` if one follows."""
        self.i += 2                                 # `generic` `(`
        name = self.name("a variable name in generic(...)")
        self.expect(")")
        offset = None
        if self.t[self.i] == "+" and self.starts_offset(self.i + 1):
            self.i += 1
            offset = self.offset()
        elif self.t[self.i] == "-":
            raise self.toks.error(f"generic({name}) takes a '+' offset only (ptxas: syntax error at '-'); "
                                  f"write generic({name})+-N", self.i)
        return ir.Generic(name, offset)

    def field(self) -> ir.Field:
        """``name = value`` in the initialiser of a ``.texref``,
        ``.samplerref`` or ``.surfref``: an enumerator name or a number."""
        name = self.next()
        self.i += 1                                 # `=`
        tok = self.t[self.i]
        if tok[:1].isalpha() or tok[:1] == "_":
            self.i += 1
            return ir.Field(name, tok)
        value = self.operand()
        if not isinstance(value, ir.Immediate):
            raise self.toks.error(f"expected a number or a name as the value of field {name}, "
                                  f"got {' '.join(value.tokens())!r}", self.i - 1)
        return ir.Field(name, value)

    # operands ----------------------------------------------------------------
    def operand(self) -> ir.Operand:
        if self.i >= self.n:
            raise self.toks.error("expected an operand, got end of input", self.i)
        tok = self.t[self.i]
        nxt = self.t[self.i + 1] if self.i + 1 < self.n else None
        if starts_expression(self.t, self.i) or (is_number(tok) and continues_expression(nxt)):
            imm, self.i = constant_expression(self.toks, self.i)
            return imm
        self.i += 1
        if tok == "!":
            return ir.Negated(self.operand())
        if tok in ("{", "("):
            close = "}" if tok == "{" else ")"
            items = []
            while self.peek() != close:
                if items:
                    self.expect(",")
                items.append(self.operand())
            self.next()
            return ir.Vector(tuple(items)) if tok == "{" else ir.Parens(tuple(items))
        if tok == "[":
            return self.address()
        first = tok[:1]
        if first.isdigit() or (first == "-" and tok[1:2].isdigit()):
            return immediate(tok, self.toks, self.i - 1)
        if not (first.isalpha() or first in "_$%."):
            raise self.toks.error(f"expected an operand, got {tok!r}", self.i - 1)
        value = self.name_operand(tok)
        if self.t[self.i] == "|":
            self.next()
            return ir.Pair(value, self.operand())
        return value

    def name_operand(self, tok: str) -> ir.Operand:
        if tok == "_":
            return ir.Sink()
        nxt = self.t[self.i]
        if nxt != "+" and nxt != "-" and (tok[0] == "%" or self.is_register(tok)):
            return ir.Register(tok)
        if (nxt == "+" or nxt == "-") and self.starts_offset(self.i + 1):
            minus = self.next() == "-"
            return ir.Symbol(tok, self.offset(), minus)
        return ir.Symbol(tok)

    def starts_offset(self, i: int) -> bool:
        """Whether token ``i`` starts an offset: a number or a constant
        expression (``(2*2)``, ``~3``)."""
        tok = self.t[i]
        return is_number(tok) or tok in _EXPRESSION_START

    def offset(self) -> int | ir.Immediate:
        """The offset at the cursor: a number, or a constant expression
        (``[%rd1+(2*2)]``, ``[%rd1+4*2]``), whose tokens it keeps."""
        tok, nxt = self.t[self.i], self.t[self.i + 1]
        if is_number(tok) and not continues_expression(nxt):
            self.i += 1
            return offset_value(tok, self.toks, self.i - 1)
        imm, self.i = constant_expression(self.toks, self.i)   # or its error, at the token
        return imm

    def address(self) -> ir.Address:
        base = offset = extra = None
        minus = False
        if self.i >= self.n:
            raise self.toks.error("expected an address, got end of input", self.i)
        tok = self.t[self.i]
        if self.starts_offset(self.i):
            offset = self.offset()
        elif tok[:1].isalpha() or tok[:1] in "_$%":
            self.i += 1
            base = ir.Register(tok) if tok.startswith("%") or self.is_register(tok) else ir.Symbol(tok)
            if self.peek() in ("+", "-"):
                minus = self.next() == "-"
                if self.i >= self.n:
                    raise self.toks.error("expected an offset, got end of input", self.i)
                offset = self.offset()
        else:
            self.i += 1
            raise self.toks.error(f"expected a register, name or offset in [...], got {tok!r}", self.i - 1)
        if self.peek() == ",":
            self.next()
            extra = self.operand()
        self.expect("]")
        return ir.Address(base, offset, extra, minus)


def is_number(tok: str) -> bool:
    """Whether ``tok`` is a numeric literal (``-`` included)."""
    return tok[:1].isdigit() or (tok[:1] == "-" and tok[1:2].isdigit())

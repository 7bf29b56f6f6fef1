"""Integer constant expressions in operands, address offsets and
initialisers (PTX ISA "Constant Expressions"):
``or.b64 %rd1, %rd1, ((128 >> 4) << 16);``, ``ld.u32 %r1, [%rd1+(2*2)];``.

The expression folds to one :class:`jaxptx.ir.Immediate` whose ``value`` is
the result and whose ``expr`` keeps the expression's tokens, so the module
still re-emits byte for byte and everything downstream (check, the
emulator, the transpiler) sees a number.

Evaluation follows the ISA: 64-bit integers, signed unless an operand is
unsigned (a ``U`` suffix), then the whole expression is unsigned; C's
operators and precedence (unary ``+ - ! ~``; ``* / %``; ``+ -``;
``<< >>``; ``< > <= >=``; ``== !=``; ``&``; ``^``; ``|``; ``&&``; ``||``;
``?:``); ``>>`` is arithmetic for signed and logical for unsigned values;
``/`` and ``%`` truncate toward zero. Floating-point constants in an
expression are refused (the emulator and the table take integers here).
"""

from __future__ import annotations

from typing import Callable

from .. import ir
from ._lexer import Tokens
from ._literals import immediate

__all__ = ["constant_expression", "starts_expression", "continues_expression"]

_TWO = {(">", ">"): ">>", ("<", "<"): "<<", ("<", "="): "<=", (">", "="): ">=", ("=", "="): "==",
        ("!", "="): "!=", ("&", "&"): "&&", ("|", "|"): "||"}
_BINARY: dict[str, int] = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7,
                           "<=": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
_MASK = (1 << 64) - 1


def _quotient(p: int, q: int) -> int:
    """C's ``/``: truncated toward zero."""
    return abs(p) // abs(q) * (1 if (p < 0) == (q < 0) else -1)


_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda p, q: p + q, "-": lambda p, q: p - q, "*": lambda p, q: p * q,
    "/": _quotient, "%": lambda p, q: p - _quotient(p, q) * q,
    "<<": lambda p, q: p << (q & 63), ">>": lambda p, q: p >> (q & 63),
    "&": lambda p, q: p & q, "|": lambda p, q: p | q, "^": lambda p, q: p ^ q,
    "<": lambda p, q: int(p < q), ">": lambda p, q: int(p > q), "<=": lambda p, q: int(p <= q),
    ">=": lambda p, q: int(p >= q), "==": lambda p, q: int(p == q), "!=": lambda p, q: int(p != q),
    "&&": lambda p, q: int(bool(p) and bool(q)), "||": lambda p, q: int(bool(p) or bool(q)),
}
_LOGICAL = frozenset(["<", ">", "<=", ">=", "==", "!=", "&&", "||"])


def _number(tok: str) -> bool:
    return tok[:1].isdigit() or (tok[:1] == "-" and tok[1:2].isdigit())


def starts_expression(tokens: list[str], i: int) -> bool:
    """Whether the operand at ``tokens[i]`` is a constant expression that does
    not start with a number (``(1 + 2)``, ``-(4)``, ``~0xF``); a call's
    parenthesised argument list (``(1, %r2)``) is not one."""
    tok = tokens[i]
    nxt = tokens[i + 1] if i + 1 < len(tokens) else None
    if nxt is None:
        return False
    if tok in ("-", "+", "~", "!"):
        return _number(nxt) or (nxt == "(" and _constant_group(tokens, i + 1))
    return tok == "(" and nxt != ")" and _constant_group(tokens, i)


def _constant_group(tokens: list[str], i: int) -> bool:
    """Whether the parenthesised group at ``tokens[i]`` holds only numbers
    and operators (no names, no top-level commas); an unclosed group of
    those counts, so that its error comes from the expression parser."""
    depth = 0
    for tok in tokens[i:]:
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth == 0:
                return True
        elif tok == ";":
            return True         # unclosed: the expression parser says so
        elif (tok == "," and depth == 1) or tok in ("{", "}", "[", "]") or \
                (not _number(tok) and (tok[:1].isalpha() or tok[:1] in "%_$.")):
            return False
    return True


def continues_expression(nxt: str | None) -> bool:
    """Whether a number operand followed by ``nxt`` goes on as an expression."""
    return nxt is not None and (nxt in _BINARY or nxt in ("!", "=", "?"))


class _Reader:
    def __init__(self, toks: Tokens, start: int) -> None:
        self.toks, self.t, self.i = toks, toks.tokens, start

    def peek_op(self) -> tuple[str | None, int]:
        """The operator at the cursor (two-character ones joined when nothing
        separates them) and how many tokens it spans."""
        if self.i >= len(self.t):
            return None, 0
        a = self.t[self.i]
        if self.i + 1 < len(self.t) and self.toks.gaps[self.i + 1] == "":
            two = _TWO.get((a, self.t[self.i + 1]))
            if two is not None:
                return two, 2
        return a, 1

    def error(self, message: str) -> Exception:
        return self.toks.error(message, min(self.i, len(self.t) - 1))


def constant_expression(toks: Tokens, start: int) -> tuple[ir.Immediate, int]:
    """Parse the expression at token ``start``; returns the immediate and the
    index of the first token after it.

    Raises:
        ParseError: malformed, a floating-point operand, or division by zero.
    """
    r = _Reader(toks, start)
    value, unsigned = _ternary(r)
    value = value & _MASK if unsigned else _signed(value)
    return ir.Immediate(value, unsigned=unsigned, expr=tuple(toks.tokens[start:r.i])), r.i


def _signed(v: int) -> int:
    v &= _MASK
    return v - (1 << 64) if v >> 63 else v


def _ternary(r: _Reader) -> tuple[int, bool]:
    cond = _binary(r, 1)
    op, n = r.peek_op()
    if op != "?":
        return cond
    r.i += n
    a = _ternary(r)
    if r.peek_op()[0] != ":":
        raise r.error("expected ':' in a conditional constant expression")
    r.i += 1
    b = _ternary(r)
    return (a if cond[0] else b)[0], a[1] or b[1]


def _binary(r: _Reader, level: int) -> tuple[int, bool]:
    left = _unary(r)
    while True:
        op, n = r.peek_op()
        prec = _BINARY.get(op or "")
        if prec is None or prec < level:
            return left
        r.i += n
        right = _binary(r, prec + 1)
        left = _apply(r, op, left, right)


def _apply(r: _Reader, op: str, a: tuple[int, bool], b: tuple[int, bool]) -> tuple[int, bool]:
    unsigned = a[1] or b[1]
    x, y = (a[0] & _MASK, b[0] & _MASK) if unsigned else (_signed(a[0]), _signed(b[0]))
    if op in ("/", "%") and y == 0:
        raise r.error("division by zero in a constant expression")
    result = _OPS[op](x, y)
    if op in _LOGICAL:
        return result, False
    return (result & _MASK if unsigned else _signed(result)), unsigned


def _unary(r: _Reader) -> tuple[int, bool]:
    if r.i >= len(r.t):
        raise r.error("expected a constant, got end of input")
    tok = r.t[r.i]
    if tok in ("-", "+", "~", "!"):
        r.i += 1
        v, unsigned = _unary(r)
        if tok == "-":
            v = -v
        elif tok == "~":
            v = ~v
        elif tok == "!":
            return int(v == 0), False
        return (v & _MASK if unsigned else _signed(v)), unsigned
    if tok == "(":
        r.i += 1
        inner = _ternary(r)
        if r.i >= len(r.t) or r.t[r.i] != ")":
            raise r.error("expected ')' in a constant expression")
        r.i += 1
        return inner
    if _number(tok):
        imm = immediate(tok, r.toks, r.i)
        if not isinstance(imm.value, int):
            raise r.error(f"floating-point constant {tok!r} in a constant expression: the emulator and "
                          "the instruction table take integer constant expressions only")
        r.i += 1
        return imm.value, imm.unsigned
    raise r.error(f"expected a constant in a constant expression, got {tok!r}")

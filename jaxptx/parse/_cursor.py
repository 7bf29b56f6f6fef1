"""The parser's cursor over the token stream: look-ahead, expectations with
their errors, and the trivia (whitespace and comments) each node keeps.

A node's trailing trivia runs to the end of its line; the rest of the gap
leads the next node. :meth:`Cursor.finish` checks that a node's tokens (as
the emitter spells them) are exactly the tokens read, so anything the IR
cannot represent is a ParseError, never a silent change.
"""

from __future__ import annotations

import re

from .. import ir
from ._lexer import Tokens

__all__ = ["Cursor", "NAME"]

# A name: identifier, `%reg`, `$label`, `a::b` (PTX ISA "Identifiers").
NAME = re.compile(r"^[A-Za-z_$%][A-Za-z0-9_$.]*(?:::[A-Za-z0-9_$.]+)*$")


class Cursor:
    """Position ``i`` in the tokens ``t`` (gaps ``g``) of one text."""

    def __init__(self, toks: Tokens) -> None:
        self.toks = toks
        # Two sentinels let look-ahead run past the end without bounds checks.
        self.t = [*toks.tokens, "", ""]
        self.g = toks.gaps
        self.n = len(toks.tokens)
        self.i = 0
        self.rest: dict[int, str] = {}
        # Register names declared so far in the current function: PTX lets a
        # register be named without `%`, so only declarations tell them apart.
        self.registers: ir.Registers[bool] = ir.Registers()
        # (node, token): each instruction and its opcode token, each other
        # statement, declaration and function and its first token.
        self.located: list[tuple[object, int]] = []

    # token access --------------------------------------------------------
    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.t[j] if j < self.n else None

    def next(self, what: str = "a token") -> str:
        if self.i >= self.n:
            raise self.toks.error(f"expected {what}, got end of input", self.i)
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, tok: str) -> int:
        if self.peek() != tok:
            raise self.toks.error(f"expected {tok!r}, got {self._shown()}", self.i)
        self.i += 1
        return self.i - 1

    def name(self, what: str) -> str:
        """The next token, which must be a name (identifier, ``%reg``, ``$label``)."""
        tok = self.next(what)
        if not NAME.match(tok):
            raise self.toks.error(f"expected {what}, got {tok!r}", self.i - 1)
        return tok

    def int_token(self, what: str) -> int:
        tok = self.next(what)
        if not tok.isdigit():
            raise self.toks.error(f"expected {what} (a decimal integer), got {tok!r}", self.i - 1)
        return int(tok)

    def is_register(self, tok: str) -> bool:
        """A declared register, or a component of one (``v.x``)."""
        return tok in self.registers or tok.rsplit(".", 1)[0] in self.registers

    def _shown(self) -> str:
        tok = self.peek()
        return "end of input" if tok is None else repr(tok)

    # trivia ----------------------------------------------------------------
    def trivia(self, first: int, last: int) -> tuple[str, ...]:
        """Gaps of tokens ``first..last``: the lead, the inner gaps, and the
        trail up to the end of the line."""
        g = self.g
        lead = self.rest.pop(first, None)
        if lead is None:
            lead = g[first]
        after = g[last + 1]
        cut = after.find("\n") + 1
        if cut:
            self.rest[last + 1] = after[cut:]
            after = after[:cut]
        else:
            self.rest[last + 1] = ""
        return (lead, *g[first + 1:last + 1], after)

    def finish(self, node, first: int, tokens: list[str]):
        last = self.i - 1
        if tokens != self.t[first:self.i]:
            raise self.toks.error("jaxptx cannot represent this statement exactly: "
                                  f"read {' '.join(self.t[first:self.i])!r}", first)
        node.trivia = self.trivia(first, last)
        self.located.append((node, first))
        return node

    def locate(self) -> None:
        """Give each located node its ``(source, line, column)``, all in one pass."""
        starts, position, source = self.toks.starts, self.toks.position, self.toks.source
        for node, at in self.located:
            node.loc = ir.PtxLocation(source, *position(starts[at]))

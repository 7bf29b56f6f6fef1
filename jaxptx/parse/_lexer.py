"""PTX text → tokens and the trivia between them.

``lex(text)`` returns the tokens and ``len(tokens) + 1`` gap strings
(whitespace and comments): ``gaps[i]`` precedes ``tokens[i]`` and the last
gap follows the last token. Joining gaps and tokens alternately gives the
text back exactly; the parser hands each node its share of the gaps.

A ``-`` directly followed by a digit is part of the number unless it
directly follows a value (``foo-4`` is ``foo``, ``-``, ``4``; ``, -4`` and
``bar.sync -1`` have the literal ``-4`` / ``-1``).
"""

from __future__ import annotations

import bisect
import itertools
import re

from ..errors import ParseError

__all__ = ["Tokens", "lex", "excerpt"]

_NUMBER = (r"(?:0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+U?|0[bB][01]+U?"
           r"|[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|[0-9]+U?)(?![A-Za-z0-9_$])")
# One pass of findall splits the whole text into (gap, token, error) triples:
# the whitespace and comments before each token, the token (a string, number,
# name or operator), or what stands where no token can start. The last triple
# holds the trailing gap.
_PIECES = re.compile(r"""
    ((?:\s+|//[^\n]*|/\*.*?\*/)*)
    (?:( [A-Za-z_$%.][A-Za-z0-9_$.]*(?:::[A-Za-z0-9_$.]+)*
       | [,;:{}\[\]()<>@!|+\-=*~&^?]
       | """ + _NUMBER + r"""
       | "(?:[^"\\\n]|\\.)*"
       | /(?!\*) )
     | ( [0-9][A-Za-z0-9_$.]* | /\* | [\s\S] )
     | \Z)
""", re.VERBOSE | re.DOTALL)
_VALUE_END = re.compile(r"[A-Za-z0-9_$%.)\]]$")
_DOT_WORDS = re.compile(r"\.[^.]*")


class Tokens:
    """The lexed text: ``tokens``, ``gaps`` and each token's start offset."""

    __slots__ = ("text", "source", "tokens", "gaps", "_starts", "_newlines")

    def __init__(self, text: str, source: str, tokens: list[str], gaps: list[str]) -> None:
        self.text = text
        self.source = source
        self.tokens = tokens
        self.gaps = gaps
        self._starts: list[int] | None = None
        self._newlines: list[int] | None = None

    @property
    def starts(self) -> list[int]:
        """Each token's character offset (computed on first use)."""
        if self._starts is None:
            lengths = itertools.chain.from_iterable(
                zip(map(len, self.gaps), map(len, self.tokens)))
            ends = list(itertools.accumulate(lengths, initial=0))
            self._starts = ends[1::2]   # after each gap: where the token starts
        return self._starts

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        newlines = self._newlines
        if newlines is None:
            newlines = self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_left(newlines, offset)
        start = newlines[line - 1] + 1 if line else 0
        return line + 1, offset - start + 1

    def location(self, index: int) -> tuple[str, int, int]:
        """``(source, line, column)`` of token ``index``."""
        return (self.source, *self.position(self.starts[index]))

    def error(self, message: str, index: int) -> ParseError:
        """A ParseError pointing at token ``index`` (or the end of the text)."""
        offset = self.starts[index] if index < len(self.starts) else len(self.text)
        line, column = self.position(offset)
        return ParseError(message, source=self.source, line=line, column=column,
                          excerpt=excerpt(self.text, offset))


def excerpt(text: str, offset: int) -> str:
    """The line containing ``offset`` and a caret under it."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    line = text[start:end if end >= 0 else len(text)].rstrip("\r")
    shown = line.expandtabs(1)[:160]
    return f"  {shown}\n  {' ' * min(offset - start, 160)}^"


def lex(text: str, source: str = "<string>") -> Tokens:
    """Split ``text`` into tokens and gaps.

    Raises:
        ParseError: a character that starts no PTX token, a malformed number,
            or an unterminated comment or string.
    """
    pieces = _PIECES.findall(text)
    if len(pieces) > 1 and pieces[-2][1] == "" and not pieces[-2][2]:
        pieces.pop()           # findall's extra empty match after the trailing gap
    gaps, tokens, bads = (list(x) for x in zip(*pieces))
    tokens.pop()                         # the \Z match holds only the trailing gap
    if not any(bads) and "-" not in tokens and not _DOTTED_WORD.search(text):
        return Tokens(text, source, tokens, gaps)   # nothing to split or merge
    return _lex_slowly(text, source, pieces)


# A word like `.param.u64`, which the token loop splits in two; it may follow
# a number with no space (`64.ve.` lexes as `64`, `.ve.`).
_DOTTED_WORD = re.compile(r"(?<![A-Za-z0-9_$%.])[0-9]*\.[A-Za-z0-9_$]*\.")


def _lex_slowly(text: str, source: str, pieces: list[tuple[str, str, str]]) -> Tokens:
    tokens: list[str] = []
    gaps: list[str] = []
    for gap, tok, bad in pieces:
        if bad:
            # Point at the bad text: it stands where the next token would.
            toks = Tokens(text, source, tokens + [bad], gaps + [gap])
            raise toks.error(_problem(bad), len(tokens))
        if not tok:
            gaps.append(gap)      # the trailing gap (the \Z match)
            break
        c = tok[0]
        if c == "." and "::" not in tok and "." in tok[1:]:
            # `.param.u64` is two words written without a space.
            for k, word in enumerate(_DOT_WORDS.findall(tok)):
                gaps.append(gap if k == 0 else "")
                tokens.append(word)
        elif (c <= "9" and c >= "0" and gap == "" and tokens and tokens[-1] == "-"
                and not (len(tokens) > 1 and gaps[-1] == "" and _VALUE_END.search(tokens[-2]))):
            tokens[-1] = "-" + tok          # a negative literal
        else:
            gaps.append(gap)
            tokens.append(tok)
    return Tokens(text, source, tokens, gaps)


def _problem(bad: str) -> str:
    """Why ``bad`` is not a token."""
    if "0" <= bad[0] <= "9":
        return f"malformed number {bad!r}"
    if bad == "/*":
        return "unterminated comment"
    return "unterminated string" if bad == '"' else f"unexpected character {bad!r}"

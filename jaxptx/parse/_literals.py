"""Numeric literals: PTX spelling → :class:`jaxptx.ir.Immediate`.

The value and the fields that decide its spelling (form, case, padding,
``U`` suffix) are parsed out; where those fields do not reproduce the token
exactly (``0X1f``, ``1.50e-3``) the immediate keeps the token as its
``literal`` spelling.
"""

from __future__ import annotations

import struct

from .. import ir
from ._lexer import Tokens

__all__ = ["immediate", "offset_value"]


def _value(body: str) -> tuple[int | float, str, bool, bool, int]:
    """(value, form, unsigned, upper, pad) of an unsigned literal body."""
    head = body[:2].lower()
    if head == "0f":
        return struct.unpack("<f", int(body[2:], 16).to_bytes(4, "little"))[0], "f32", False, \
            body[2:].upper() == body[2:], 0
    if head == "0d":
        return struct.unpack("<d", int(body[2:], 16).to_bytes(8, "little"))[0], "f64", False, \
            body[2:].upper() == body[2:], 0
    unsigned = body.endswith("U")
    digits = body[:-1] if unsigned else body
    if head == "0x":
        return int(digits[2:], 16), "hex", unsigned, digits[2:].upper() == digits[2:], len(digits) - 2
    if head == "0b":
        return int(digits[2:], 2), "bin", unsigned, True, 0
    if "." in digits or "e" in digits or "E" in digits:
        return float(digits), "float", False, True, 0
    if len(digits) > 1 and digits.startswith("0"):
        return int(digits, 8), "oct", unsigned, True, 0
    return int(digits), "dec", unsigned, True, 0


def immediate(tok: str, toks: Tokens, index: int) -> ir.Immediate:
    """The immediate for literal token ``tok`` (``-`` included).

    Raises:
        ParseError: not a well-formed PTX number.
    """
    if tok.isdigit() and (tok[0] != "0" or len(tok) == 1):
        return ir.Immediate(int(tok))      # plain decimal: the common case
    neg = tok.startswith("-")
    try:
        value, form, unsigned, upper, pad = _value(tok[1:] if neg else tok)
    except (ValueError, OverflowError):
        raise toks.error(f"malformed number {tok!r}", index) from None
    imm = ir.Immediate(-value if neg else value, form, unsigned, upper, pad)
    if imm.spelling() != tok:
        imm = ir.Immediate(imm.value, form, unsigned, upper, pad, literal=tok)
    return imm


def offset_value(tok: str, toks: Tokens, index: int) -> int | ir.Immediate:
    """An address offset: a plain int where its decimal spelling is the token."""
    imm = immediate(tok, toks, index)
    if isinstance(imm.value, int) and str(imm.value) == tok:
        return imm.value
    return imm

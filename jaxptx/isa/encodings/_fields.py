"""Bit fields of packed words and the error every encoding raises.

A layout is a tuple of :class:`BitField` rows (name, lowest bit, width):
data, read by both directions of an encoding and by the emulator's
vectorised readers, so each bit position is written down once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import PtxError

__all__ = ["BitField", "EncodingError", "check", "reserved_bits"]


class EncodingError(PtxError, ValueError):
    """A field value the encoding cannot hold, or a word it does not define.

    ``str(error)`` reads ``"<field> must be <allowed>, got <value>"``; the
    DSL and the emulator put their own context (the instruction, the word)
    in front.

    Attributes:
        field: the field's name (with its bits where that helps).
        allowed: the values it may take, in words.
        value: the value given (or read).
    """

    def __init__(self, field: str, allowed: str, value: Any) -> None:
        super().__init__(f"{field} must be {allowed}, got {value}")
        self.field = field
        self.allowed = allowed
        self.value = value


@dataclasses.dataclass(frozen=True)
class BitField:
    """One field of a packed word: ``width`` bits from bit ``lo`` on.

    Attributes:
        name: the field's name.
        lo: its lowest bit.
        width: its width in bits.
    """

    name: str
    lo: int
    width: int

    @property
    def mask(self) -> int:
        """The field's bits in place."""
        return ((1 << self.width) - 1) << self.lo

    @property
    def bits(self) -> str:
        """``"bits 16-29"`` / ``"bit 52"``, for messages."""
        hi = self.lo + self.width - 1
        return f"bit {self.lo}" if hi == self.lo else f"bits {self.lo}-{hi}"

    def get(self, word: int) -> int:
        """The field's value in ``word``."""
        return (word >> self.lo) & ((1 << self.width) - 1)

    def put(self, value: int) -> int:
        """``value`` shifted into place.

        Raises:
            EncodingError: ``value`` does not fit the field.
        """
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << self.width:
            raise EncodingError(f"{self.name} ({self.bits})", f"an int in [0, {1 << self.width})", repr(value))
        return value << self.lo


def check(ok: bool, field: str, allowed: str, value: Any) -> None:
    """Raise :class:`EncodingError` unless ``ok``."""
    if not ok:
        raise EncodingError(field, allowed, value)


def reserved_bits(word: int, fields: tuple[BitField, ...], width: int) -> list[int]:
    """The set bits of a ``width``-bit ``word`` that no field of ``fields`` covers."""
    used = 0
    for f in fields:
        used |= f.mask
    extra = word & ~used & ((1 << width) - 1)
    return [b for b in range(width) if extra >> b & 1]


def byte_field(name: str, value: int, step: int = 16, width: int = 14) -> int:
    """``value >> 4`` for a byte offset stored in a ``width``-bit field of 16-byte units.

    Raises:
        EncodingError: ``value`` is not a multiple of ``step`` in range.
    """
    limit = step << width
    check(isinstance(value, int) and not isinstance(value, bool) and value % step == 0 and 0 <= value < limit,
          name, f"a multiple of {step} bytes in [0, {limit})", repr(value))
    return value // step

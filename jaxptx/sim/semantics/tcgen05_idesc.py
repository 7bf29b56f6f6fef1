"""The 32-bit instruction descriptor of ``tcgen05.mma`` (PTX ISA 9.7.16.4.2,
"Instruction descriptor", Tables 42-44) and the shapes it may give (Table 39,
"Various combinations of .kind and shapes"), read through
:class:`jaxptx.isa.encodings.InstrDesc` (the format's one statement,
encoder beside decoder).

:func:`decode_idesc` turns one descriptor word into an :class:`InstrDesc`,
refusing every field value the ISA does not define for the instruction's
``.kind`` (a reserved bit set, a type code of another kind, an M or N the
kind and CTA group do not take) with a :class:`~..errors.SimError` that names
the field, what was expected and what came.
"""

from __future__ import annotations

from ...isa.encodings import BLOCK_SCALED, EncodingError, InstrDesc
from ...types import TYPES
from ..errors import SimError

__all__ = ["InstrDesc", "decode_idesc", "BLOCK_SCALED", "element_bits"]


def element_bits(type_name: str) -> int:
    """Width in bits of one A/B element of ``type_name`` (its own width, not its container's)."""
    return TYPES[type_name].bits


def decode_idesc(word: int, kind: str, *, cta_group: int, ws: bool, what: str) -> InstrDesc:
    """Decode and check instruction descriptor ``word`` of a ``tcgen05.mma``
    of ``.kind`` ``kind`` (``cta_group`` 1 or 2, ``ws`` for ``.ws``):
    :meth:`InstrDesc.decode` and :meth:`InstrDesc.check_shape`.

    Raises:
        SimError: a field holds a value the ISA does not define for this
            instruction; ``what`` (the instruction's name) starts the message.
    """
    word = int(word) & 0xFFFF_FFFF
    try:
        desc = InstrDesc.decode(word, kind)
        desc.check_shape(cta_group, ws)
    except EncodingError as e:
        raise SimError(f"{what}: instruction descriptor {word:#010x}: {e} (PTX ISA 'Instruction descriptor')") \
            from None
    return desc

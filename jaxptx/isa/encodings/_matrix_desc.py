"""The 64-bit shared-memory matrix descriptors of ``wgmma`` (sm_90a) and
``tcgen05`` (sm_100a), encode beside decode.

wgmma, PTX ISA 9.7.15.5.1.1 "Matrix Descriptor Format"::

    bits   field
    0-13   matrix start address >> 4
    16-29  leading dimension byte offset (LBO) >> 4
    32-45  stride dimension byte offset (SBO) >> 4
    49-51  matrix base offset (where the swizzle pattern starts)
    62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B

tcgen05, PTX ISA 9.7.16.4.1 "Shared memory descriptor": the same start,
LBO, SBO and base offset, and::

    46-48  fixed 0b001 (the descriptor's version; wgmma has 0 here)
    52     LBO mode: 0 relative byte offset, 1 absolute address (sm_103a)
    61-63  swizzle: 0 none, 1 128B with 32B atomicity, 2 128B, 4 64B, 6 32B

Every other bit is 0. Byte fields are stored in 16-byte units, so the
descriptors hold multiples of 16 below 256 KiB. Swizzle codes come from
:mod:`._swizzle`. With the unused bits zero, both formats are bijective:
``decode(encode(d)) == d`` and ``encode(decode(w)) == w``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ._fields import BitField, byte_field, check, reserved_bits
from ._swizzle import Swizzle, codes, swizzle, swizzle_from_code

__all__ = ["TCGEN05_FIELDS", "WGMMA_FIELDS", "MatrixDescriptor", "SmemDescriptor", "wgmma_fields"]

_START, _LBO, _SBO = BitField("start", 0, 14), BitField("LBO", 16, 14), BitField("SBO", 32, 14)
_BASE = BitField("base_offset", 49, 3)
WGMMA_FIELDS = (_START, _LBO, _SBO, _BASE, BitField("swizzle", 62, 2))
"""The wgmma descriptor's fields (start, LBO and SBO in 16-byte units)."""
TCGEN05_FIELDS = (_START, _LBO, _SBO, BitField("version", 46, 3), _BASE, BitField("lbo_mode", 52, 1),
                  BitField("swizzle", 61, 3))
"""The sm_100 descriptor's fields (start, LBO and SBO in 16-byte units)."""
_FIELD = {f.name: f for f in TCGEN05_FIELDS}
_VERSION = 1


def _common(d: Any, fields: tuple[BitField, ...], code: int | None) -> int:
    check(code is not None, "swizzle", f"a mode of this descriptor, one of {[s.name for s in _modes(fields)]}",
          repr(d.swizzle))
    return (byte_field("start", d.start) | byte_field("LBO", d.lbo) << 16 | byte_field("SBO", d.sbo) << 32
            | _BASE.put(d.base_offset) | fields[-1].put(code))


def _modes(fields: tuple[BitField, ...]) -> list[Swizzle]:
    return list(codes("wgmma" if fields is WGMMA_FIELDS else "tcgen05").values())


def _reserved(word: int, fields: tuple[BitField, ...]) -> None:
    extra = reserved_bits(word, fields, 64)
    check(not extra, f"bit{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))} (unused)", "0",
          f"{word:#018x}")


@dataclasses.dataclass(frozen=True)
class MatrixDescriptor:
    """A wgmma shared-memory matrix descriptor (module docstring).

    Attributes:
        start: the matrix's shared::cta byte address.
        lbo: leading dimension byte offset.
        sbo: stride dimension byte offset.
        base_offset: 0..7, where the swizzle pattern starts.
        swizzle: ``"none"``, ``"32B"``, ``"64B"`` or ``"128B"``.

    Example:
        >>> hex(MatrixDescriptor(lbo=16, sbo=1024, swizzle="128B").encode())
        '0x4000004000010000'
    """

    start: int = 0
    lbo: int = 0
    sbo: int = 0
    base_offset: int = 0
    swizzle: str = "none"

    @property
    def mode(self) -> Swizzle:
        """The swizzle mode's row (:data:`~._swizzle.SWIZZLES`)."""
        return swizzle(self.swizzle)

    def encode(self) -> int:
        """The 64-bit word.

        Raises:
            EncodingError: a field out of range or a mode wgmma lacks.
        """
        return _common(self, WGMMA_FIELDS, swizzle(self.swizzle).wgmma)

    @classmethod
    def decode(cls, word: int) -> MatrixDescriptor:
        """The descriptor in ``word``.

        Raises:
            EncodingError: an unused bit set.
        """
        word = int(word) & (1 << 64) - 1
        _reserved(word, WGMMA_FIELDS)
        return cls(_START.get(word) << 4, _LBO.get(word) << 4, _SBO.get(word) << 4, _BASE.get(word),
                   swizzle_from_code("wgmma", WGMMA_FIELDS[-1].get(word)).name)


@dataclasses.dataclass(frozen=True)
class SmemDescriptor:
    """An sm_100 (``tcgen05``) shared-memory descriptor (module docstring).

    Attributes:
        start: the matrix's shared::cta byte address.
        lbo: leading dimension byte offset (an address when ``lbo_mode`` is 1).
        sbo: stride dimension byte offset.
        base_offset: 0..7, where the swizzle pattern starts.
        swizzle: ``"none"``, ``"128B_base32B"``, ``"128B"``, ``"64B"`` or ``"32B"``.
        lbo_mode: 0 (relative) or 1 (absolute; sm_103a only).

    Example:
        >>> hex(SmemDescriptor(lbo=16, sbo=1024, swizzle="128B").encode())
        '0x4000404000010000'
    """

    start: int = 0
    lbo: int = 16
    sbo: int = 0
    base_offset: int = 0
    swizzle: str = "none"
    lbo_mode: int = 0

    @property
    def mode(self) -> Swizzle:
        """The swizzle mode's row (:data:`~._swizzle.SWIZZLES`)."""
        return swizzle(self.swizzle)

    def encode(self) -> int:
        """The 64-bit word.

        Raises:
            EncodingError: a field out of range or a mode tcgen05 lacks.
        """
        return (_common(self, TCGEN05_FIELDS, swizzle(self.swizzle).tcgen05) | _FIELD["version"].put(_VERSION)
                | _FIELD["lbo_mode"].put(self.lbo_mode))

    @classmethod
    def decode(cls, word: int) -> SmemDescriptor:
        """The descriptor in ``word``.

        Raises:
            EncodingError: bits 46-48 are not 0b001, an unused bit set, or
                the swizzle field 3, 5 or 7.
        """
        word = int(word) & (1 << 64) - 1
        version = _FIELD["version"].get(word)
        check(version == _VERSION, "bits 46-48", "the fixed value 0b001 of sm_100 descriptors (a Hopper wgmma "
              "descriptor has 0 there)", f"{version:#05b}")
        _reserved(word, TCGEN05_FIELDS)
        code = _FIELD["swizzle"].get(word)
        check(code in codes("tcgen05"), "swizzle mode (bits 61-63)", "0, 1, 2, 4 or 6", code)
        return cls(_START.get(word) << 4, _LBO.get(word) << 4, _SBO.get(word) << 4, _BASE.get(word),
                   swizzle_from_code("tcgen05", code).name, _FIELD["lbo_mode"].get(word))


def wgmma_fields(desc: np.ndarray) -> dict[str, np.ndarray]:
    """The fields of many wgmma descriptors at once (a uint64 array), as
    int64 arrays: ``start``, ``lbo``, ``sbo`` in bytes, ``base_offset``,
    ``swizzle`` (the code) and ``atom_bytes`` (the swizzle atom's row
    bytes, 16 without swizzle). Unused bits are ignored, as the emulator's
    vectorised reader always has."""
    d = np.asarray(desc).astype(np.uint64)

    def get(f: BitField) -> np.ndarray:
        return ((d >> np.uint64(f.lo)) & np.uint64((1 << f.width) - 1)).astype(np.int64)
    out = {f.name.lower(): get(f) for f in WGMMA_FIELDS}
    for name in ("start", "lbo", "sbo"):
        out[name] = out[name] << 4
    atoms = np.array([swizzle_from_code("wgmma", c).atom_bytes for c in range(4)])
    out["atom_bytes"] = atoms[out["swizzle"]]
    return out


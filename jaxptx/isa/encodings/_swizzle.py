"""The shared-memory swizzle modes and their code in every encoding.

One row per mode: its span, the XOR pattern it applies (PTX ISA 9.7.16.10.6
"Shared Memory Layout and Swizzling"; CuTe ``Swizzle<b, granule, 3>``) and
the number each encoding stores for it:

===================  ====  ===  =====  =====  =======  ===========  =========
mode                 span  W    XOR    wgmma  tcgen05  CUtensorMap  tensormap
                                                       Swizzle      mode, atom
===================  ====  ===  =====  =====  =======  ===========  =========
none                 0     16   -      0      0        0            0, 0
32B                  32    32   4, 1   3      6        1            1, 0
64B                  64    64   4, 2   2      4        2            2, 0
128B                 128   128  4, 3   1      2        3            3, 0
128B_base32B         128   128  5, 2   -      1        4            3, 1
128B_atom32B_flip8B  128   128  -      -      -        5            3, 2
128B_atom64B         128   128  -      -      -        6            3, 3
===================  ====  ===  =====  =====  =======  ===========  =========

``W`` is the bytes of one row of the swizzle atom (a core matrix row, 16,
without swizzle); "XOR" is (granule bit, width b): address bits
``[granule, granule + b)`` XOR bits ``[7, 7 + b)``. wgmma: PTX ISA "Matrix
Descriptor Format" bits 62-63; tcgen05: "Shared memory descriptor" bits
61-63; CUtensorMap: the driver's ``CU_TENSOR_MAP_SWIZZLE_*`` enum (the last
three are ``_128B_ATOM_32B``, ``_128B_ATOM_32B_FLIP_8B``, ``_128B_ATOM_64B``);
tensormap: ``tensormap.replace``'s ``.swizzle_mode`` and
``.swizzle_atomicity`` codes, the two bytes jaxptx's tensor map keeps.
"""

from __future__ import annotations

import dataclasses

from ._fields import EncodingError

__all__ = ["ENCODINGS", "SWIZZLES", "Swizzle", "codes", "swizzle", "swizzle_from_code"]


@dataclasses.dataclass(frozen=True)
class Swizzle:
    """One swizzle mode (module docstring).

    Attributes:
        name: ``"none"``, ``"32B"``, ``"64B"``, ``"128B"``, ``"128B_base32B"``...
        title: the mode in words, for messages.
        span: bytes of one swizzled row (0 without swizzle).
        atom_bytes: bytes of one row of the swizzle atom (16 without swizzle).
        granule: lowest address bit the XOR changes (None: no XOR or a
            pattern only TMA writes).
        xor_bits: how many bits the XOR changes.
        wgmma: the wgmma descriptor's code, or None.
        tcgen05: the sm_100 shared-memory descriptor's code, or None.
        cu_tensor_map: the driver's ``CUtensorMapSwizzle`` value.
        tensormap_mode: ``tensormap.replace .swizzle_mode`` code.
        atomicity: ``tensormap.replace .swizzle_atomicity`` code.
        atom: the name of that atomicity (``"16B"`` for the plain modes).
    """

    name: str
    title: str
    span: int
    atom_bytes: int
    granule: int | None
    xor_bits: int
    wgmma: int | None
    tcgen05: int | None
    cu_tensor_map: int
    tensormap_mode: int
    atomicity: int
    atom: str = "16B"


SWIZZLES: tuple[Swizzle, ...] = (
    Swizzle("none", "no swizzle", 0, 16, None, 0, 0, 0, 0, 0, 0),
    Swizzle("32B", "32B", 32, 32, 4, 1, 3, 6, 1, 1, 0),
    Swizzle("64B", "64B", 64, 64, 4, 2, 2, 4, 2, 2, 0),
    Swizzle("128B", "128B", 128, 128, 4, 3, 1, 2, 3, 3, 0),
    Swizzle("128B_base32B", "128B with 32B atomicity", 128, 128, 5, 2, None, 1, 4, 3, 1, "32B"),
    Swizzle("128B_atom32B_flip8B", "128B with 32B atomicity and 8B flip", 128, 128, None, 0, None, None, 5, 3, 2,
            "32B with 8B flip"),
    Swizzle("128B_atom64B", "128B with 64B atomicity", 128, 128, None, 0, None, None, 6, 3, 3, "64B"),
)
"""Every mode, one row each (the module docstring's table)."""

ENCODINGS = ("wgmma", "tcgen05", "cu_tensor_map")
"""The encodings :func:`swizzle_from_code` reads."""

_BY_NAME = {s.name: s for s in SWIZZLES}
_BY_SPAN = {s.span: s for s in SWIZZLES[:4]}


def swizzle(key: str | int) -> Swizzle:
    """The mode named ``key``, or the plain mode of span ``key`` bytes (0, 32, 64, 128).

    Raises:
        EncodingError: no such mode.
    """
    if isinstance(key, str) and key in _BY_NAME:
        return _BY_NAME[key]
    if isinstance(key, int) and not isinstance(key, bool) and key in _BY_SPAN:
        return _BY_SPAN[key]
    raise EncodingError("swizzle", f"one of {list(_BY_NAME)} or a span of 0/32/64/128 bytes", repr(key))


def codes(encoding: str) -> dict[int, Swizzle]:
    """Code -> mode of one of :data:`ENCODINGS`."""
    return {getattr(s, encoding): s for s in SWIZZLES if getattr(s, encoding) is not None}


def swizzle_from_code(encoding: str, code: int) -> Swizzle:
    """The mode ``encoding`` (one of :data:`ENCODINGS`) stores as ``code``.

    Raises:
        EncodingError: ``code`` means no mode there.
    """
    table = codes(encoding)
    if code not in table:
        allowed = ", ".join(map(str, sorted(table)))
        raise EncodingError(f"{encoding} swizzle code", f"one of {allowed}", code)
    return table[code]

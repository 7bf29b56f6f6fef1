"""The stand-in driver's ``cuTensorMapEncodeTiled``: the driver's enums and
innermost-first arrays, turned into :func:`jaxptx.sim.tensor_map`'s terms."""

from __future__ import annotations

from collections.abc import Sequence

from .. import sim
from ..isa.encodings import SWIZZLES

__all__ = ["check_codes", "encode_tiled"]

# CUtensorMapDataType -> the emulator's type name, and its bytes.
_DTYPES = {0: "u8", 1: "u16", 2: "u32", 3: "s32", 4: "u64", 5: "s64", 6: "f16", 7: "f32",
           8: "f64", 9: "bf16", 10: "f32.ftz", 11: "tf32", 12: "tf32.ftz"}
_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
# CUtensorMapInterleave, CUtensorMapSwizzle (bytes), CUtensorMapFloatOOBfill,
# CUtensorMapL2promotion.
_INTERLEAVE = {0: 0, 1: 16, 2: 32}
_SWIZZLE = {s.cu_tensor_map: s.span for s in SWIZZLES if s.atom == "16B"}   # CUtensorMapSwizzle -> bytes
_OOB_FILL = {0: "zero", 1: "nan"}
_L2_PROMOTION = range(4)


def check_codes(dtype: int, interleave: int, swizzle: int, l2_promotion: int,
                oob_fill: int) -> None:
    """Check the enum arguments of ``cuTensorMapEncodeTiled``.

    Raises:
        ValueError: a code the stand-in does not know, named.
    """
    codes = ((dtype, _DTYPES, "data type"), (interleave, _INTERLEAVE, "interleave"),
             (swizzle, _SWIZZLE, "swizzle"), (oob_fill, _OOB_FILL, "OOB fill"),
             (l2_promotion, _L2_PROMOTION, "L2 promotion"))
    for value, known, what in codes:
        if value not in known:
            raise ValueError(f"unsupported {what} {value}")


def encode_tiled(dtype: int, address: int, dims: Sequence[int], strides: Sequence[int],
                 box: Sequence[int], element_strides: Sequence[int], interleave: int,
                 swizzle: int, oob_fill: int) -> bytes:
    """The 128-byte tensor map of checked (:func:`check_codes`) driver
    arguments; the arrays innermost first, as the driver takes them.

    Raises:
        ValueError: :func:`jaxptx.sim.tensor_map` refuses the map.
    """
    return sim.tensor_map(address, list(dims)[::-1], _DTYPES[dtype], list(box)[::-1],
                          strides=[*list(strides)[::-1], _BYTES[dtype]],
                          swizzle=_SWIZZLE[swizzle], oob_fill=_OOB_FILL[oob_fill],
                          element_strides=list(element_strides)[::-1],
                          interleave=_INTERLEAVE[interleave])

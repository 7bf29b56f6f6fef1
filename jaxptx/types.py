"""PTX fundamental types, their widths and their numpy / ml_dtypes equivalents.

Every type keeps its PTX spelling (PTX ISA, "Fundamental Types" and
"Alternate Floating-Point Data Formats"): ``u32`` is ``.u32``, ``f16x2`` is
``.f16x2``, ``pred`` is ``.pred``. ``TYPES`` maps each name to its
:class:`PtxType`.

Example:
    >>> from jaxptx.types import f32, u64, by_name
    >>> f32.bits, u64.kind, by_name(".bf16x2").lanes
    (32, 'u', 2)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "PtxType", "TYPES", "by_name", "from_dtype",
    "pred", "b8", "b16", "b32", "b64", "b128",
    "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
    "f16", "f16x2", "bf16", "bf16x2", "tf32", "f32", "f32x2", "f64",
    "e4m3", "e5m2", "e4m3x2", "e5m2x2", "e2m1", "e2m1x2", "e2m3", "e3m2",
    "e2m3x2", "e3m2x2", "ue8m0", "ue8m0x2", "u4", "s4", "b1",
]


@dataclasses.dataclass(frozen=True)
class PtxType:
    """One PTX fundamental type.

    Attributes:
        name: PTX spelling without the dot (``"f32"``).
        bits: width of one value of this type in bits (a packed ``x2`` type
            counts both halves).
        kind: ``"b"`` untyped bits, ``"u"`` unsigned, ``"s"`` signed,
            ``"f"`` floating point, ``"pred"`` predicate.
        lanes: number of packed elements (2 for ``f16x2``), else 1.
        element: name of one packed element (``"f16"`` for ``f16x2``).
        np_name: name of the numpy / ml_dtypes scalar type of one element,
            or ``None`` where no host type exists (``tf32``, ``b128``).
    """

    name: str
    bits: int
    kind: str
    lanes: int = 1
    element: str | None = None
    np_name: str | None = None

    @property
    def ptx(self) -> str:
        """The type as written in PTX, with its dot (``.f32``)."""
        return "." + self.name

    @property
    def nbytes(self) -> int:
        """Size in bytes, rounded up for sub-byte types."""
        return (self.bits + 7) // 8

    @property
    def is_float(self) -> bool:
        """True for floating-point types, packed or not."""
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integer types."""
        return self.kind in ("u", "s")

    @property
    def np_dtype(self) -> np.dtype | None:
        """The numpy dtype of one element, or ``None`` when there is none."""
        if self.np_name is None:
            return None
        return np.dtype(_NP_SCALARS[self.np_name])

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"jaxptx.types.{self.name}"


_NP_SCALARS: dict[str, Any] = {
    "bool": np.bool_,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "int4": ml_dtypes.int4,
    "uint4": ml_dtypes.uint4,
}

pred = PtxType("pred", 1, "pred", np_name="bool")
b1 = PtxType("b1", 1, "b")
b8 = PtxType("b8", 8, "b", np_name="uint8")
b16 = PtxType("b16", 16, "b", np_name="uint16")
b32 = PtxType("b32", 32, "b", np_name="uint32")
b64 = PtxType("b64", 64, "b", np_name="uint64")
b128 = PtxType("b128", 128, "b")
u4 = PtxType("u4", 4, "u", np_name="uint4")
s4 = PtxType("s4", 4, "s", np_name="int4")
u8 = PtxType("u8", 8, "u", np_name="uint8")
u16 = PtxType("u16", 16, "u", np_name="uint16")
u32 = PtxType("u32", 32, "u", np_name="uint32")
u64 = PtxType("u64", 64, "u", np_name="uint64")
s8 = PtxType("s8", 8, "s", np_name="int8")
s16 = PtxType("s16", 16, "s", np_name="int16")
s32 = PtxType("s32", 32, "s", np_name="int32")
s64 = PtxType("s64", 64, "s", np_name="int64")
f16 = PtxType("f16", 16, "f", np_name="float16")
f16x2 = PtxType("f16x2", 32, "f", 2, "f16", "float16")
bf16 = PtxType("bf16", 16, "f", np_name="bfloat16")
bf16x2 = PtxType("bf16x2", 32, "f", 2, "bf16", "bfloat16")
# tf32 lives in a 32-bit register; its host storage is float32 with the low
# 13 mantissa bits ignored (PTX ISA, "Alternate Floating-Point Data Formats").
tf32 = PtxType("tf32", 32, "f", np_name="float32")
f32 = PtxType("f32", 32, "f", np_name="float32")
f64 = PtxType("f64", 64, "f", np_name="float64")
# Two f32 values in one 64-bit register (sm_100 packed arithmetic).
f32x2 = PtxType("f32x2", 64, "f", 2, "f32", "float32")
e4m3 = PtxType("e4m3", 8, "f", np_name="float8_e4m3fn")
e5m2 = PtxType("e5m2", 8, "f", np_name="float8_e5m2")
e4m3x2 = PtxType("e4m3x2", 16, "f", 2, "e4m3", "float8_e4m3fn")
e5m2x2 = PtxType("e5m2x2", 16, "f", 2, "e5m2", "float8_e5m2")
e2m1 = PtxType("e2m1", 4, "f", np_name="float4_e2m1fn")
e2m1x2 = PtxType("e2m1x2", 8, "f", 2, "e2m1", "float4_e2m1fn")
e2m3 = PtxType("e2m3", 6, "f", np_name="float6_e2m3fn")
e3m2 = PtxType("e3m2", 6, "f", np_name="float6_e3m2fn")
e2m3x2 = PtxType("e2m3x2", 16, "f", 2, "e2m3", "float6_e2m3fn")
e3m2x2 = PtxType("e3m2x2", 16, "f", 2, "e3m2", "float6_e3m2fn")
ue8m0 = PtxType("ue8m0", 8, "f", np_name="float8_e8m0fnu")
ue8m0x2 = PtxType("ue8m0x2", 16, "f", 2, "ue8m0", "float8_e8m0fnu")

TYPES: dict[str, PtxType] = {
    t.name: t for t in (
        pred, b1, b8, b16, b32, b64, b128, u4, s4, u8, u16, u32, u64,
        s8, s16, s32, s64, f16, f16x2, bf16, bf16x2, tf32, f32, f32x2, f64,
        e4m3, e5m2, e4m3x2, e5m2x2, e2m1, e2m1x2, e2m3, e3m2, e2m3x2,
        e3m2x2, ue8m0, ue8m0x2,
    )
}

# The type used for a host array of each dtype; integers map to their
# signed/unsigned PTX type, floats to the float type of the same format.
_FROM_NUMPY: dict[np.dtype, PtxType] = {
    np.dtype(_NP_SCALARS[t.np_name]): t
    for t in (pred, u8, u16, u32, u64, s8, s16, s32, s64, f16, bf16, f32, f64,
              e4m3, e5m2, e2m1, e2m3, e3m2, ue8m0, u4, s4)
}


def by_name(name: str) -> PtxType:
    """Return the type named ``name`` (with or without its leading dot).

    Raises:
        KeyError: no PTX type has that name; the message lists the valid ones.
    """
    key = name[1:] if name.startswith(".") else name
    try:
        return TYPES[key]
    except KeyError:
        raise KeyError(
            f"unknown PTX type {name!r}; expected one of: {', '.join(TYPES)}"
        ) from None


def from_dtype(dtype: Any) -> PtxType:
    """Return the PTX type for a numpy / jax / ml_dtypes dtype or a PtxType.

    Raises:
        TypeError: the dtype has no PTX equivalent.
    """
    if isinstance(dtype, PtxType):
        return dtype
    try:
        key = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"expected a PtxType or a numpy dtype, got {dtype!r}") from None
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        raise TypeError(f"dtype {key} has no PTX equivalent") from None

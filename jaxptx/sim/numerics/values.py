"""Register bits ↔ typed numpy values.

Registers hold raw bits (``uint8``..``uint64``; ``bool`` for predicates;
the two-field record :data:`~._b128.B128` for ``.b128``). An instruction
reads them as the type it operates on: a ``.f32`` view of ``.b32`` bits,
the low 16 bits for a ``.u16`` read of a 32-bit register, a ``(n, 2)`` array
of halves for ``.f16x2`` (element 0 is the low half). ``.b128`` values stay
``B128`` records.
"""

from __future__ import annotations

import numpy as np

from ...types import PtxType
from . import b128 as _b128
from .b128 import B128
from ..errors import SimError

__all__ = ["UINT", "bits_dtype", "value_dtype", "from_bits", "to_bits", "constant"]

# Unsigned storage of each width; 128 bits is the record B128 (no arithmetic).
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64, 128: B128}
_SINT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def bits_dtype(t: PtxType) -> np.dtype:
    """The storage dtype of a register of type ``t``."""
    if t.kind == "pred":
        return np.dtype(np.bool_)
    if t.bits > 64 and t.bits != 128:
        raise SimError(f"registers of type .{t.name} ({t.bits} bits) are not supported by the emulator")
    return np.dtype(UINT[max(8, t.bits)])


def value_dtype(t: PtxType) -> np.dtype:
    """The dtype instructions compute with for type ``t`` (one element)."""
    dt = _VALUE_DTYPES.get(t.name)
    if dt is None:
        dt = _VALUE_DTYPES[t.name] = _value_dtype(t)
    return dt


_VALUE_DTYPES: dict[str, np.dtype] = {}


def _value_dtype(t: PtxType) -> np.dtype:
    if t.kind == "pred":
        return np.dtype(np.bool_)
    if t.bits == 128:
        return B128
    if t.kind == "s":
        return np.dtype(_SINT[max(8, t.bits // t.lanes)])
    if t.kind in "bu" or t.np_dtype is None:
        return np.dtype(UINT[max(8, t.bits // t.lanes)])
    return t.np_dtype


def from_bits(t: PtxType, bits: np.ndarray) -> np.ndarray:
    """Typed values of ``t`` from register bits (truncating or zero-extending)."""
    if t.lanes == 1 and bits.dtype.itemsize * 8 == t.bits and t.kind != "pred":     # the usual read
        return bits.view(value_dtype(t))
    if t.kind == "pred":
        return bits.astype(np.bool_, copy=False)
    if t.bits == 128 or bits.dtype.itemsize == 16:
        return _from_wide_bits(t, bits)
    width = max(8, t.bits)
    if bits.dtype.itemsize * 8 != width:
        bits = bits.astype(UINT[width])
    if t.lanes > 1:
        return bits.view(value_dtype(t)).reshape(len(bits), t.lanes) if t.bits // t.lanes >= 8 \
            else bits  # sub-byte packed types stay as bits
    if t.bits < 8:
        return bits
    return bits.view(value_dtype(t))


def to_bits(t: PtxType, values: np.ndarray, width: int) -> np.ndarray:
    """Register bits of ``width`` for values of type ``t`` (sign-extending
    signed types, zero-extending the rest)."""
    if t.kind == "pred":
        return np.asarray(values, dtype=np.bool_)
    values = np.asarray(values)
    if t.lanes == 1 and t.bits == width and values.dtype == value_dtype(t) and values.flags.c_contiguous:
        return values.view(UINT[width])                                         # the usual write
    if width == 128 or t.bits == 128:
        return _to_wide_bits(t, values, width)
    if t.lanes > 1 and values.ndim == 2:
        values = np.ascontiguousarray(values.astype(value_dtype(t), copy=False)).view(UINT[t.bits]).ravel()
    own = max(8, t.bits)
    if values.dtype != value_dtype(t) and not (t.lanes > 1 and values.dtype == UINT[own]):
        values = values.astype(value_dtype(t))
    bits = np.ascontiguousarray(values).view(UINT[own]) if values.dtype.itemsize * 8 == own \
        else values.astype(UINT[own])
    if own == width:
        return bits
    if own > width:
        return bits.astype(UINT[width])
    if t.kind == "s":
        return bits.view(_SINT[own]).astype(_SINT[width]).view(UINT[width])
    return bits.astype(UINT[width])


def _from_wide_bits(t: PtxType, bits: np.ndarray) -> np.ndarray:
    """Reads that involve 128 bits: a ``.b128`` read of a narrower register
    zero-extends; a narrower read of a ``.b128`` register takes the low bits
    (as for any register wider than the type)."""
    if t.bits == 128:
        return bits if bits.dtype == B128 else _b128.widen(bits.astype(np.uint64), False)
    return from_bits(t, _b128.low(bits))


def _to_wide_bits(t: PtxType, values: np.ndarray, width: int) -> np.ndarray:
    """Writes that involve 128 bits: ``.b128`` values into a ``.b128``
    register; narrower values into a ``.b128`` register, sign-extended for
    signed types and zero-extended for the others (PTX ISA, ld); ``.b128``
    values into a narrower register keep their low bits."""
    if t.bits == 128:
        if values.dtype != B128:        # integers (an initialiser, a scalar parameter)
            values = _b128.widen(values.astype(np.int64 if values.dtype.kind == "i" else np.uint64),
                                 values.dtype.kind == "i")
        if width == 128:
            return np.ascontiguousarray(values)
        return _b128.low(values).astype(UINT[width])
    low = to_bits(t, values, 64)
    return _b128.widen(low, t.kind == "s")


def constant(t: PtxType, value: int | float, n: int) -> np.ndarray:
    """An immediate as ``n`` values of type ``t`` (integers wrap to the width)."""
    if t.kind == "pred":
        return np.full(n, bool(value))
    if isinstance(value, float) and t.kind != "f":
        value = int(value)
    if t.bits == 128:
        return _b128.constant(int(value), n)
    if t.kind in "bus" and isinstance(value, int):
        width = max(8, t.bits)
        value &= (1 << width) - 1
        arr = np.full(n, value, dtype=UINT[width])
        if t.lanes > 1:         # packed u16x2 / s16x2: (n, 2) halves, low first
            return arr.view(value_dtype(t)).reshape(n, t.lanes)
        return arr.view(value_dtype(t)) if t.kind == "s" else arr
    if t.lanes > 1:
        return np.full((n, t.lanes), value, dtype=value_dtype(t))
    return np.full(n, value, dtype=value_dtype(t))

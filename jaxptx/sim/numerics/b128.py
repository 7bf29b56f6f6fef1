"""128-bit values: ``.reg .b128`` registers and 16-byte memory accesses.

numpy has no 128-bit integer, so one ``.b128`` lane is one element of the
record dtype :data:`B128`: two little-endian uint64 fields, ``lo`` (bits
0-63) and ``hi`` (bits 64-127). Its sixteen bytes are the value's own
little-endian bytes, so:

- a ``.b128`` register is an ``(n,)`` array like every other register (one
  element per thread), and the register file, the sanitizer and
  :class:`~jaxptx.sim.Step` need no second shape;
- a byte buffer viewed as ``B128`` loads and stores 16-byte values in one
  gather or scatter;
- ``==`` compares whole values, which is what ``atom.cas.b128`` needs.

``.b128`` has no arithmetic: the instruction table admits it only for
``mov``, ``ld``/``ldu``/``st`` and ``atom.exch``/``atom.cas`` (PTX ISA 8.3,
sm_70+, atomics sm_90), so nothing here adds or shifts; the functions build
and take apart values.
"""

from __future__ import annotations

import numpy as np

__all__ = ["B128", "pack", "unpack", "widen", "low", "constant"]

B128 = np.dtype([("lo", "<u8"), ("hi", "<u8")])
_MASK64 = (1 << 64) - 1


def pack(parts: np.ndarray) -> np.ndarray:
    """``(n, k)`` unsigned parts of ``128 // k`` bits each, element 0 the
    lowest (``mov.b128 d, {a, b}``), as a fresh ``(n,)`` ``B128`` array."""
    n, k = parts.shape
    # astype copies: the result owns its memory and shares none with a source.
    words = parts.astype(np.dtype(f"<u{16 // k}"))
    return words.view(B128).reshape(n)


def unpack(values: np.ndarray, count: int) -> np.ndarray:
    """``B128`` values as ``(n, count)`` unsigned parts of ``128 // count``
    bits each, element 0 the lowest (``mov.b128 {a, b}, d``); a copy."""
    words = np.ascontiguousarray(values).view(np.dtype(f"<u{16 // count}"))
    return words.reshape(len(values), count).copy()


def widen(low64: np.ndarray, signed: bool) -> np.ndarray:
    """64-bit patterns extended to 128 bits: sign-extended when ``signed``,
    else zero-extended (PTX ISA, ld: a destination register wider than the
    type)."""
    low64 = np.asarray(low64)
    out = np.empty(low64.shape, B128)
    out["lo"] = low64.astype(np.uint64)
    if signed:
        out["hi"] = np.where(low64.astype(np.int64) < 0, np.uint64(_MASK64), np.uint64(0))
    else:
        out["hi"] = 0
    return out


def low(values: np.ndarray) -> np.ndarray:
    """Bits 0-63 of ``B128`` values as a contiguous uint64 copy (a narrower
    access of a 128-bit register: PTX ISA, st: the low bits)."""
    return np.ascontiguousarray(values["lo"])


def constant(value: int, n: int) -> np.ndarray:
    """An immediate as ``n`` ``B128`` values. Python's integers are two's
    complement of any width, so ``-1`` is all ones; ptxas takes at most
    64-bit literals ("Constant overflow" beyond)."""
    value &= (1 << 128) - 1
    out = np.empty(n, B128)
    out["lo"] = value & _MASK64
    out["hi"] = value >> 64
    return out

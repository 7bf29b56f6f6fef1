"""Reading ``tcgen05.mma`` operands from shared memory through sm_100
shared-memory descriptors (PTX ISA 9.7.16.4.1 "Shared memory descriptor",
9.7.16.3 "Canonical Layouts", 9.7.16.10.6 "Shared Memory Layout and
Swizzling", 9.7.16.10.4 "Packing formats").

Addresses are computed per 16-byte chunk ("128-bit element"), as the ISA
normalises every layout: ``T`` elements share a chunk, contiguous along the
major mode. With ``W`` the swizzle atom's row bytes (16 without swizzle):

- K-major: row ``x`` = (r = x % 8, i = x / 8), K index ``y`` = (t = y % T,
  c = y / T): chunk at ``start + r*W + i*SBO + c*(16 if swizzled else LBO)``;
- MN-major: ``x`` = (t = x % T, c = (x / T) % (W/16), i = x / (T*W/16)),
  ``y`` = (r = y % 8, j = y / 8): chunk at ``start + c*16 + r*W +
  i*(LBO if swizzled else SBO) + j*(SBO if swizzled else LBO)``.

Swizzling XORs the chunk address: 128/64/32-byte modes XOR bits [4, 4+b)
with bits [7, 7+b) (b = 3/2/1), the 128-byte mode with 32-byte atomicity XORs
bits [5, 7) with bits [7, 9); the descriptor's base offset is subtracted
from bits [7, 10) first (it says where the repeating pattern starts).

Element ``t`` of a chunk sits at bit ``t * bits`` of it: 16/32/8-bit types
fill the chunk; for ``.kind::f8f6f4``/``mxf8f6f4`` a chunk holds 16 4-bit or
6-bit elements packed in its low 8 or 12 bytes (the rest is padding); for
``.kind::mxf4``/``mxf4nvf4`` 32 4-bit elements fill it.
"""

from __future__ import annotations

import numpy as np

from ...isa.encodings import EncodingError, SmemDescriptor
from ..core import fastpaths
from ..core.host import ShapeCache
from ..errors import SimError

__all__ = ["SmemDesc", "decode_smem_desc", "chunk_addresses", "read_matrix"]

SmemDesc = SmemDescriptor
"""The decoded descriptor (:class:`jaxptx.isa.encodings.SmemDescriptor`)."""


def decode_smem_desc(word: int, what: str) -> SmemDescriptor:
    """Decode and check a 64-bit sm_100 shared-memory descriptor
    (:meth:`SmemDescriptor.decode`) for an sm_100a instruction.

    Raises:
        SimError: bits 46-48 are not the fixed 0b001, an unused bit is set,
            the swizzle field is 3, 5 or 7, or bit 52 asks for the absolute
            leading-dimension address mode (sm_103a only).
    """
    word = int(word) & 0xFFFF_FFFF_FFFF_FFFF
    if fastpaths.on():
        hit = _TABLES.get(("desc", word))
        if hit is not None:             # decoded and checked before: the checks passed
            return hit
    try:
        d = SmemDescriptor.decode(word)
    except EncodingError as e:
        raise SimError(f"{what}: shared memory descriptor {word:#018x}: {e}") from None
    if d.lbo_mode:
        raise SimError(f"{what}: shared memory descriptor {word:#018x}: bit 52 selects the absolute "
                       "leading-dimension address mode, which only sm_103a runs (K of 48 bytes)")
    if fastpaths.on():
        _TABLES.put(("desc", word), d)
    return d


_TABLES = ShapeCache(32 << 20)


def chunk_addresses(d: SmemDesc, mn: int, k: int, per_chunk: int, mn_major: bool) -> np.ndarray:
    """Byte address ``(mn, k)`` of the 16-byte chunk holding each element
    ``[x, y]`` (x along M or N, y along K), ``per_chunk`` elements a chunk
    (module docstring); read-only and cached per descriptor on the fast path."""
    if not fastpaths.on():
        return _chunk_addresses(d, mn, k, per_chunk, mn_major)
    key = ("chunks", d, mn, k, per_chunk, mn_major)
    hit = _TABLES.get(key)
    if hit is None:
        hit = _TABLES.put(key, _chunk_addresses(d, mn, k, per_chunk, mn_major))
    return hit


def _chunk_addresses(d: SmemDesc, mn: int, k: int, per_chunk: int, mn_major: bool) -> np.ndarray:
    mode = d.mode
    width, granule, b = mode.atom_bytes, mode.granule, mode.xor_bits
    swizzled = mode.span != 0
    x = np.arange(mn)[:, None]
    y = np.arange(k)[None, :]
    if mn_major:
        chunks = width // 16
        addr = (((x // per_chunk) % chunks) * 16 + (y % 8) * width
                + (x // (per_chunk * chunks)) * (d.lbo if swizzled else d.sbo)
                + (y // 8) * (d.sbo if swizzled else d.lbo))
    else:
        addr = (x % 8) * width + (x // 8) * d.sbo + (y // per_chunk) * (16 if swizzled else d.lbo)
    addr = d.start + addr
    if b:
        phase = ((addr >> 7) - d.base_offset) & ((1 << b) - 1)
        addr = addr ^ (phase << granule)
    return addr


def read_matrix(load, d: SmemDesc, mn: int, k: int, bits: int, per_chunk: int, mn_major: bool) -> np.ndarray:
    """The raw element bits ``(mn, k)`` (int64) of one operand.

    Args:
        load: ``load(chunk addresses) -> uint8 bytes``, 16 per 16-byte
            chunk: one CTA's shared memory.
        d: the operand's descriptor.
        mn, k: the operand's extent along M (or N) and K.
        bits: bits of one element in shared memory (4, 6, 8, 16 or 32).
        per_chunk: elements a 16-byte chunk holds.
        mn_major: MN-major (transposed) rather than K-major.
    """
    base = chunk_addresses(d, mn, k, per_chunk, mn_major)
    x, y = np.arange(mn)[:, None], np.arange(k)[None, :]
    if mn_major:                            # the chunks, each read once: one load for the operand
        chunks, cx, cy, t = base[::per_chunk, :], x // per_chunk, y, x % per_chunk
    else:
        chunks, cx, cy, t = base[:, ::per_chunk], x, y // per_chunk, y % per_chunk
    data = load(chunks.reshape(-1))
    if fastpaths.on() and bits in (8, 16, 32) and per_chunk * bits == 128:
        # Whole-byte elements filling their chunks: element t of a chunk is
        # little-endian word t of it, so one view and one take (cached index).
        key = ("words", mn, k, bits, mn_major)
        index = _TABLES.get(key)
        if index is None:
            index = _TABLES.put(key, (cx * chunks.shape[1] + cy) * (128 // bits) + t)
        return np.ascontiguousarray(data).view(f"<u{bits // 8}").take(index).astype(np.int64)
    at = (cx * chunks.shape[1] + cy) * 16          # each element's chunk in ``data``
    first = (t * bits) // 8
    shift = (t * bits) % 8
    span = (bits + 7) // 8 + 1                 # bytes an element may straddle
    raw = np.zeros(base.shape, dtype=np.int64)
    for j in range(span):
        inside = first + j < 16
        byte = data.take(at + np.minimum(first + j, 15)).astype(np.int64)
        raw |= np.where(inside, byte, 0) << (8 * j)
    return (raw >> shift) & ((1 << bits) - 1)

"""jaxptx's 128-byte tensor map (what ``cp.async.bulk.tensor`` reads),
encode beside decode.

The CUDA driver's ``CUtensorMap`` is an opaque 128-byte blob whose layout is
not documented, so jaxptx defines its own (the emulator reads it; the CUDA
path hands the driver's own maps to the GPU). A tensor map lives in
global, const or param memory (PTX ISA, "Tensor-map"), 64-byte aligned.

Layout (little-endian; per-dimension arrays are innermost dimension first,
as PTX numbers dimensions and coordinates; unused entries are 0)::

    offset  size       field
    0       u32        magic 0x4D54504A ("JPTM")
    4       u8         version (1)
    5       u8         rank - 1 (zero-based, as tensormap.replace.rank writes it)
    6       u8         element type: the tensormap.replace .elemtype code
                       (0 u8, 1 u16, 2 u32, 3 s32, 4 u64, 5 s64, 6 f16, 7 f32,
                       8 f32.ftz, 9 f64, 10 bf16, 11 tf32, 12 tf32.ftz)
    7       u8         swizzle mode code (0 none, 1 32B, 2 64B, 3 128B)
    8       u8         interleave code (0 none, 1 16B, 2 32B)
    9       u8         fill mode code (0 zero fill, 1 OOB-NaN fill)
    10      u8         swizzle atomicity code (0 16B, 1 32B, 2 32B with 8B
                       flip, 3 64B; codes 1-3 with the 128B swizzle only)
    11      u8         mode (0 tiled, 1 im2col)
    12      u16        im2col: pixels per column (1..1024); tiled: 0
    14      u16        im2col: channels per pixel (1..256); tiled: 0
    16      u64        global address of element (0, ..., 0)
    24      u32[5]     global dims (elements)
    44      u32[5]     box dims (elements, 1..256; im2col maps: unused, 0)
    64      u64[4]     global strides in bytes of dims 1..4 (dim 0 is dense;
                       tensormap.replace.global_stride ord k writes entry k)
    96      u32[5]     element (traversal) strides (1..8)
    116     s16[3]     im2col: bounding-box lower corner, W first (W, H, D)
    122     s16[3]     im2col: bounding-box upper corner, W first

The enumerated codes are those of PTX ISA, "tensormap.replace", Table
"Tensormap new_val validity" (not the driver's ``CUtensorMapDataType``);
the swizzle and atomicity codes are :mod:`._swizzle`'s ``tensormap_mode``
and ``atomicity`` columns. Maps written before the im2col fields existed
have zeros there: tiled. The format is bijective on valid maps whose unused
entries are 0: ``TensorMap.decode(m.encode()) == m`` and back.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from ...types import TYPES
from ._fields import check
from ._swizzle import SWIZZLES, swizzle

__all__ = ["ATOMICITY_NAMES", "CORNER_BITS", "ELEMTYPES", "FLOAT_ELEMTYPES", "IM2COL", "INTERLEAVE_BYTES",
           "TENSOR_MAP_FIELDS", "TENSOR_MAP_MAGIC", "TENSOR_MAP_SIZE", "TENSOR_MAP_VERSION", "TensorMap"]

TENSOR_MAP_MAGIC = 0x4D54504A
TENSOR_MAP_VERSION = 1
TENSOR_MAP_SIZE = 128
_NAMES = ("u8", "u16", "u32", "s32", "u64", "s64", "f16", "f32", "f32.ftz", "f64", "bf16", "tf32", "tf32.ftz")
ELEMTYPES = {code: (name, TYPES[name.split(".")[0]].nbytes) for code, name in enumerate(_NAMES)}
"""Element type code -> (PTX type name, bytes per element)."""
FLOAT_ELEMTYPES = tuple(c for c, (name, _) in ELEMTYPES.items() if TYPES[name.split(".")[0]].is_float)
"""The floating-point element type codes (OOB-NaN fill needs one)."""
ATOMICITY_NAMES = {s.atomicity: s.atom for s in SWIZZLES if s.span == 128}
"""PTX ISA, tensormap.replace .swizzle_atomicity code -> name."""
INTERLEAVE_BYTES = {0: 0, 1: 16, 2: 32}
"""Interleave code -> bytes."""
_SWIZZLE_SPAN = {s.tensormap_mode: s.span for s in SWIZZLES if not s.atomicity}
TENSOR_MAP_FIELDS = {"global_address": (16, 8, 0), "rank": (5, 1, 0), "elemtype": (6, 1, 0),
          "swizzle_mode": (7, 1, 0), "interleave_layout": (8, 1, 0), "fill_mode": (9, 1, 0),
          "swizzle_atomicity": (10, 1, 0), "global_dim": (24, 4, 4), "box_dim": (44, 4, 4),
          "global_stride": (64, 8, 8), "element_stride": (96, 4, 4)}
"""tensormap.replace field -> (byte offset, bytes, stride between ordinals)."""
IM2COL = 1
CORNER_BITS = {3: 16, 4: 8, 5: 5}
"""PTX ISA, "im2col mode": bits of a signed bounding-box corner (and of an
unsigned im2col offset) by rank."""
_HEAD = "<IBBBBBBBBHH"


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A tensor map; per-dimension tuples are innermost first.

    Attributes:
        address: global address of element (0, ..., 0).
        elemtype: the element type code (see :data:`ELEMTYPES`).
        dims, box, element_strides: per dimension, ``rank`` entries.
        strides: byte strides of dimensions 1.. (``rank - 1`` entries).
        swizzle, interleave: in bytes (0: none).
        fill: 0 zero fill, 1 OOB-NaN fill.
        atomicity: swizzle atomicity code (:data:`ATOMICITY_NAMES`).
        mode: 0 tiled, 1 (:data:`IM2COL`) im2col.
        pixels, channels: im2col pixels per column and channels per pixel.
        lower, upper: im2col bounding-box corners, W first (``rank - 2``).
    """

    address: int
    elemtype: int
    dims: tuple[int, ...]
    box: tuple[int, ...]
    strides: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int = 0
    interleave: int = 0
    fill: int = 0
    atomicity: int = 0
    mode: int = 0
    pixels: int = 0
    channels: int = 0
    lower: tuple[int, ...] = ()
    upper: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        """Bytes of one element."""
        return ELEMTYPES[self.elemtype][1]

    @property
    def counts(self) -> tuple[int, ...]:
        """Elements the box holds per dimension: ``ceil(box / element stride)``
        (CUDA driver API, cuTensorMapEncodeTiled, elementStrides)."""
        return tuple(-(-b // e) for b, e in zip(self.box, self.element_strides))

    @property
    def box_bytes(self) -> int:
        """Bytes one copy moves (what it counts as transaction bytes)."""
        if self.mode == IM2COL:
            return self.pixels * self.channels * self.elem_bytes
        return int(np.prod(self.counts)) * self.elem_bytes

    @property
    def is_float(self) -> bool:
        """Whether the elements are floating point."""
        return self.elemtype in FLOAT_ELEMTYPES

    def encode(self) -> bytes:
        """The 128 bytes of this map.

        Raises:
            EncodingError: a map the CUDA driver would refuse to encode.
        """
        self.validate()
        out = bytearray(TENSOR_MAP_SIZE)
        inter = {v: k for k, v in INTERLEAVE_BYTES.items()}
        struct.pack_into(_HEAD, out, 0, TENSOR_MAP_MAGIC, TENSOR_MAP_VERSION, self.rank - 1, self.elemtype,
                         swizzle(self.swizzle).tensormap_mode, inter[self.interleave], self.fill, self.atomicity,
                         self.mode, self.pixels, self.channels)
        struct.pack_into("<Q", out, 16, self.address)
        for i, (lo, hi) in enumerate(zip(self.lower, self.upper)):
            struct.pack_into("<h", out, 116 + 2 * i, lo)
            struct.pack_into("<h", out, 122 + 2 * i, hi)
        for i in range(self.rank):
            struct.pack_into("<I", out, 24 + 4 * i, self.dims[i])
            struct.pack_into("<I", out, 44 + 4 * i, self.box[i])
            struct.pack_into("<I", out, 96 + 4 * i, self.element_strides[i])
        for i, stride in enumerate(self.strides):
            struct.pack_into("<Q", out, 64 + 8 * i, stride)
        return bytes(out)

    @classmethod
    def decode(cls, raw: bytes | np.ndarray) -> TensorMap:
        """Read and check a tensor map.

        Raises:
            EncodingError: not a jaxptx tensor map, or fields a TMA copy
                cannot use (the CUDA driver refuses to encode such maps).
        """
        raw = bytes(np.asarray(raw, dtype=np.uint8).tobytes()) if not isinstance(raw, bytes) else raw
        magic, version, rank1, elemtype, swz, inter, fill, atom, mode, pixels, channels = \
            struct.unpack_from(_HEAD, raw, 0)
        check(magic == TENSOR_MAP_MAGIC and version == TENSOR_MAP_VERSION, "magic and version",
              f"{TENSOR_MAP_MAGIC:#x} and {TENSOR_MAP_VERSION} (a jaxptx tensor map: build one with "
              "jaxptx.sim.tensor_map; the "
              "driver's CUtensorMap layout is opaque)", f"{magic:#x} and {version}")
        rank = rank1 + 1
        check(1 <= rank <= 5, "rank", "in 1..5", rank)
        check(elemtype in ELEMTYPES, "element type code", f"one of 0..{len(ELEMTYPES) - 1}", elemtype)
        for name, code, table in (("swizzle mode code", swz, _SWIZZLE_SPAN),
                                  ("interleave code", inter, INTERLEAVE_BYTES),
                                  ("fill mode code", fill, (0, 1)), ("swizzle atomicity code", atom, ATOMICITY_NAMES),
                                  ("mode", mode, (0, IM2COL))):
            check(code in table, name, f"one of {', '.join(map(str, table))}", code)
        u32 = struct.unpack_from("<20I", raw, 24)
        spatial = rank - 2 if mode == IM2COL else 0
        tm = cls(struct.unpack_from("<Q", raw, 16)[0], elemtype, u32[:rank], u32[5:5 + rank],
                 struct.unpack_from(f"<{rank - 1}Q", raw, 64) if rank > 1 else (),
                 struct.unpack_from(f"<{rank}I", raw, 96), _SWIZZLE_SPAN[swz], INTERLEAVE_BYTES[inter], fill,
                 atom, mode, pixels, channels, struct.unpack_from(f"<{spatial}h", raw, 116),
                 struct.unpack_from(f"<{spatial}h", raw, 122))
        tm.validate()
        return tm

    def validate(self) -> None:
        """Refuse a map the CUDA driver would not encode (cuTensorMapEncodeTiled's
        and cuTensorMapEncodeIm2col's rules).

        Raises:
            EncodingError: the first rule broken.
        """
        check(1 <= self.rank <= 5 and len(self.strides) == self.rank - 1 and len(self.element_strides) == self.rank
              and len(self.box) == self.rank, "rank (dims, box, element strides; strides one fewer)",
              "1..5 entries each", (self.dims, self.box, self.element_strides, self.strides))
        check(self.elemtype in ELEMTYPES, "element type code", f"one of 0..{len(ELEMTYPES) - 1}", self.elemtype)
        check(self.swizzle in _SWIZZLE_SPAN.values(), "swizzle", "0, 32, 64 or 128 (bytes)", self.swizzle)
        check(self.interleave in INTERLEAVE_BYTES.values(), "interleave", "0, 16 or 32 (bytes)", self.interleave)
        check(self.fill in (0, 1) and self.mode in (0, IM2COL), "fill and mode", "0 or 1 each", (self.fill, self.mode))
        check(all(1 <= d < 1 << 32 for d in self.dims), "global dims", "in 1..2^32 - 1 (u32 fields)", self.dims)
        check(self.mode == IM2COL or all(1 <= b <= 256 for b in self.box), "box dims", "in 1..256", self.box)
        check(all(1 <= e <= 8 for e in self.element_strides), "element strides", "in 1..8", self.element_strides)
        check(self.address % 16 == 0, "global address", "16-byte aligned", f"{self.address:#x}")
        check(all(s % 16 == 0 and 0 <= s < 1 << 40 for s in self.strides), "global strides",
              "multiples of 16 below 2^40", self.strides)
        if self.mode == IM2COL:
            self._validate_im2col()
        else:
            check(not (self.pixels or self.channels or self.lower or self.upper), "im2col fields of a tiled map",
                  "0 and empty", (self.pixels, self.channels, self.lower, self.upper))
        inner = (self.channels if self.mode == IM2COL else self.box[0]) * self.elem_bytes
        if self.interleave == 0:
            check(inner % 16 == 0, "the inner box dimension", "a multiple of 16 bytes", f"{inner} bytes")
            check(not self.swizzle or inner <= self.swizzle, "the inner box dimension",
                  f"at most the {self.swizzle}-byte swizzle span", f"{inner} bytes")
        check(self.interleave != 32 or self.swizzle == 32, "the swizzle of a 32-byte interleaved map", "32 bytes",
              self.swizzle)
        check(not self.atomicity or self.swizzle == 128, "swizzle atomicity",
              "16B (code 0) without the 128-byte swizzle", f"{ATOMICITY_NAMES.get(self.atomicity)} (code "
              f"{self.atomicity}) with {self.swizzle or 'no'}-byte swizzle")
        check(self.fill == 0 or self.is_float, "the element type of an OOB-NaN fill map", "a floating-point type",
              ELEMTYPES[self.elemtype][0])

    def _validate_im2col(self) -> None:
        check(3 <= self.rank, "an im2col map's rank", "3..5", self.rank)
        check(len(self.lower) == len(self.upper) == self.rank - 2, "im2col corners",
              f"{self.rank - 2} entries each", (self.lower, self.upper))
        check(1 <= self.channels <= 256, "channels per pixel", "in 1..256", self.channels)
        check(1 <= self.pixels <= 1024, "pixels per column", "in 1..1024", self.pixels)
        bits = CORNER_BITS[self.rank]
        check(all(-(1 << bits - 1) <= c < 1 << bits - 1 for c in self.lower + self.upper),
              "bounding-box corners", f"in [-2^{bits - 1}, 2^{bits - 1} - 1] for a {self.rank}-d tensor",
              (self.lower, self.upper))

    @staticmethod
    def elemtype_of(name: str) -> int:
        """The element type code of PTX type ``name`` (``"bf16"``, ``"f32.ftz"``...).

        Raises:
            EncodingError: no TMA element type has that name.
        """
        codes = {n: c for c, (n, _) in ELEMTYPES.items()}
        check(name in codes, "element type", f"one of {list(codes)}", repr(name))
        return codes[name]


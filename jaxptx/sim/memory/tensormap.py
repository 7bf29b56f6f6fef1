"""jaxptx's tensor maps: the 128-byte objects that TMA copies
(``cp.async.bulk.tensor``) read.

The CUDA driver's ``CUtensorMap`` is an opaque 128-byte blob whose layout is
not documented, so the emulator defines its own. A tensor map lives in
global, const or param memory (PTX ISA, "Tensor-map": a 128-byte object in
``.const``, ``.param`` or ``.global`` space), 64-byte aligned. Build one on
the host with :func:`tensor_map`; kernels may rewrite fields with
``tensormap.replace`` and copy maps with ``tensormap.cp_fenceproxy``.

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
"Tensormap new_val validity" (not the driver's ``CUtensorMapDataType``).
Maps written before the im2col fields existed have zeros there: tiled.

An im2col map (PTX ISA, "Tensors: im2col mode") describes an N(D)(H)WC
tensor: dim 0 is C, the last is N, the ones between are the spatial
W(, H(, D)). The bounding box of filter-base positions along spatial dim s
is ``[lower[s], dims[s] + upper[s])`` (both corners are signed offsets, the
upper one from the far end), walked with the traversal stride of that dim.
A copy at coordinates ``{c, w, (h, (d,)) n}`` with im2col offsets
``{ow, (oh, (od))}`` reads ``pixels`` pixels: starting at the filter base
``(w, h, d)`` of image ``n``, W fastest, each dim wrapping to its lower
corner and carrying into the next, past D into the next image; pixel
``(n, base)`` is element ``base + offsets`` of image ``n``, and from each
pixel ``channels`` channels from ``c`` on. Elements outside the tensor read
as the fill value. See :func:`im2col_elements`.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import SimError

__all__ = ["tensor_map", "ArgTensorMap", "TensorMap", "decode", "encode", "im2col_elements", "FIELDS", "MAGIC",
           "VERSION", "SIZE", "ELEMTYPES", "IM2COL", "Im2col", "ATOMICITY_NAMES"]

MAGIC = 0x4D54504A
VERSION = 1
SIZE = 128
# code -> (PTX type name, bytes per element)
ELEMTYPES = {0: ("u8", 1), 1: ("u16", 2), 2: ("u32", 4), 3: ("s32", 4), 4: ("u64", 8), 5: ("s64", 8),
             6: ("f16", 2), 7: ("f32", 4), 8: ("f32.ftz", 4), 9: ("f64", 8), 10: ("bf16", 2),
             11: ("tf32", 4), 12: ("tf32.ftz", 4)}
_FLOATS = (6, 7, 8, 9, 10, 11, 12)
SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}
# PTX ISA, tensormap.replace .swizzle_atomicity codes.
ATOMICITY_NAMES = {0: "16B", 1: "32B", 2: "32B with 8B flip", 3: "64B"}
INTERLEAVE_BYTES = {0: 0, 1: 16, 2: 32}
# tensormap.replace field -> (byte offset, bytes, stride between ordinals)
FIELDS = {"global_address": (16, 8, 0), "rank": (5, 1, 0), "elemtype": (6, 1, 0),
          "swizzle_mode": (7, 1, 0), "interleave_layout": (8, 1, 0), "fill_mode": (9, 1, 0),
          "swizzle_atomicity": (10, 1, 0), "global_dim": (24, 4, 4), "box_dim": (44, 4, 4),
          "global_stride": (64, 8, 8), "element_stride": (96, 4, 4)}
_NUMPY = {"uint8": 0, "int8": 0, "bool": 0, "uint16": 1, "int16": 1, "uint32": 2, "int32": 3,
          "uint64": 4, "int64": 5, "float16": 6, "float32": 7, "float64": 9, "bfloat16": 10}
_NAMES = {name: code for code, (name, _) in ELEMTYPES.items()}
IM2COL = 1
# PTX ISA, "im2col mode": bounding-box corner and im2col offset ranges by
# rank, as bit widths (signed corners, unsigned offsets).
_CORNER_BITS = {3: 16, 4: 8, 5: 5}
_OFFSET_BITS = {3: 16, 4: 8, 5: 5}


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A decoded tensor map; per-dimension tuples are innermost first.

    Attributes:
        address: global address of element (0, ..., 0).
        elemtype: the element type code (see :data:`ELEMTYPES`).
        dims, box, element_strides: per dimension, ``rank`` entries.
        strides: byte strides of dimensions 1.. (``rank - 1`` entries).
        swizzle, interleave: in bytes (0: none).
        atomicity: swizzle atomicity code (:data:`ATOMICITY_NAMES`).
        fill: 0 zero fill, 1 OOB-NaN fill.
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
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
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
        return self.elemtype in _FLOATS


@dataclasses.dataclass(frozen=True)
class Im2col:
    """The im2col part of a tensor map (cuTensorMapEncodeIm2col's arguments).

    Attributes:
        lower, upper: bounding-box corners per spatial dim in numpy order
            (D, H, W; ``rank - 2`` entries): the filter-base positions along
            a dim of size ``n`` are ``lower .. n + upper - 1`` (so ``-pad``
            and ``pad - (kernel - 1) * dilation`` for a padded convolution).
        channels: channels per pixel one copy reads (1..256).
        pixels: pixels per column one copy reads (1..1024).
    """

    lower: tuple[int, ...]
    upper: tuple[int, ...]
    channels: int
    pixels: int


def encode(tm: TensorMap) -> bytes:
    """The 128 bytes of ``tm`` in jaxptx's layout."""
    out = bytearray(SIZE)
    inv = {v: k for k, v in SWIZZLE_BYTES.items()}
    inter = {v: k for k, v in INTERLEAVE_BYTES.items()}
    struct.pack_into("<IBBBBBBBBHH", out, 0, MAGIC, VERSION, tm.rank - 1, tm.elemtype, inv[tm.swizzle],
                     inter[tm.interleave], tm.fill, tm.atomicity, tm.mode, tm.pixels, tm.channels)
    struct.pack_into("<Q", out, 16, tm.address)
    for i, (lo, hi) in enumerate(zip(tm.lower, tm.upper)):
        struct.pack_into("<h", out, 116 + 2 * i, lo)
        struct.pack_into("<h", out, 122 + 2 * i, hi)
    for i in range(tm.rank):
        struct.pack_into("<I", out, 24 + 4 * i, tm.dims[i])
        struct.pack_into("<I", out, 44 + 4 * i, tm.box[i])
        struct.pack_into("<I", out, 96 + 4 * i, tm.element_strides[i])
    for i, stride in enumerate(tm.strides):
        struct.pack_into("<Q", out, 64 + 8 * i, stride)
    return bytes(out)


def decode(raw: bytes | np.ndarray) -> TensorMap:
    """Read and check a tensor map.

    Raises:
        SimError: not a jaxptx tensor map, or fields a TMA copy cannot use
            (the CUDA driver refuses to encode such maps).
    """
    raw = bytes(np.asarray(raw, dtype=np.uint8).tobytes()) if not isinstance(raw, bytes) else raw
    magic, version, rank1, elemtype, swz, inter, fill, atom, mode, pixels, channels = \
        struct.unpack_from("<IBBBBBBBBHH", raw, 0)
    if magic != MAGIC or version != VERSION:
        raise SimError(f"not a jaxptx tensor map (magic {magic:#x}, version {version}); build tensor maps "
                       "with jaxptx.sim.tensor_map (the driver's CUtensorMap layout is opaque)")
    rank = rank1 + 1
    if not 1 <= rank <= 5:
        raise SimError(f"tensor map rank {rank} is not in 1..5")
    if elemtype not in ELEMTYPES:
        raise SimError(f"tensor map element type code {elemtype} is not supported by the emulator")
    if swz not in SWIZZLE_BYTES or inter not in INTERLEAVE_BYTES or fill > 1 or atom > 3 or mode > 1:
        raise SimError(f"tensor map swizzle/interleave/fill/atomicity/mode codes "
                       f"{swz}/{inter}/{fill}/{atom}/{mode} are not supported by the emulator")
    u32 = struct.unpack_from("<20I", raw, 24)
    dims, box = u32[:rank], u32[5:5 + rank]
    estr = struct.unpack_from(f"<{rank}I", raw, 96)
    strides = struct.unpack_from(f"<{rank - 1}Q", raw, 64) if rank > 1 else ()
    spatial = rank - 2 if mode == IM2COL else 0
    tm = TensorMap(struct.unpack_from("<Q", raw, 16)[0], elemtype, dims, box, strides, estr,
                   SWIZZLE_BYTES[swz], INTERLEAVE_BYTES[inter], fill, atom, mode, pixels, channels,
                   struct.unpack_from(f"<{spatial}h", raw, 116), struct.unpack_from(f"<{spatial}h", raw, 122))
    problem = _problem(tm)
    if problem:
        raise SimError(f"invalid tensor map: {problem}")
    return tm


def _problem(tm: TensorMap) -> str | None:
    """Why ``tm`` is not a valid tensor map (cuTensorMapEncodeTiled's and
    cuTensorMapEncodeIm2col's rules)."""
    if any(d < 1 or d > 1 << 32 for d in tm.dims):
        return f"global dims {tm.dims} must be in 1..2^32"
    if tm.mode != IM2COL and any(b < 1 or b > 256 for b in tm.box):
        return f"box dims {tm.box} must be in 1..256"
    if any(e < 1 or e > 8 for e in tm.element_strides):
        return f"element strides {tm.element_strides} must be in 1..8"
    if tm.address % 16:
        return f"global address {tm.address:#x} must be 16-byte aligned"
    if any(s % 16 or s >= 1 << 40 for s in tm.strides):
        return f"global strides {tm.strides} must be multiples of 16 below 2^40"
    if tm.mode == IM2COL:
        problem = _im2col_problem(tm)
        if problem:
            return problem
    inner = (tm.channels if tm.mode == IM2COL else tm.box[0]) * tm.elem_bytes
    if tm.interleave == 0 and inner % 16:
        return f"the inner box dimension is {inner} bytes, not a multiple of 16"
    if tm.interleave == 0 and tm.swizzle and inner > tm.swizzle:
        return f"the inner box dimension ({inner} bytes) exceeds the {tm.swizzle}-byte swizzle span"
    if tm.interleave == 32 and tm.swizzle != 32:
        return "32-byte interleave requires 32-byte swizzle"
    if tm.atomicity and tm.swizzle != 128:
        return (f"swizzle atomicity {ATOMICITY_NAMES[tm.atomicity]} (code {tm.atomicity}) needs the 128-byte "
                f"swizzle, not {tm.swizzle or 'no'}-byte")
    if tm.fill == 1 and not tm.is_float:
        return "OOB-NaN fill needs a floating-point element type"
    return None


def _im2col_problem(tm: TensorMap) -> str | None:
    if tm.rank < 3:
        return f"an im2col tensor map needs rank 3..5, got {tm.rank}"
    if not 1 <= tm.channels <= 256 or not 1 <= tm.pixels <= 1024:
        return (f"channels per pixel {tm.channels} and pixels per column {tm.pixels} must be in "
                "1..256 and 1..1024")
    bits = _CORNER_BITS[tm.rank]
    if any(not -(1 << bits - 1) <= c < 1 << bits - 1 for c in tm.lower + tm.upper):
        return (f"bounding-box corners {tm.lower}, {tm.upper} must be in "
                f"[-2^{bits - 1}, 2^{bits - 1} - 1] for a {tm.rank}-d tensor")
    return None


def im2col_elements(tm: TensorMap, coords: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Tensor coordinates ``(n, pixels * channels, rank)`` (innermost dim
    first) of the elements an im2col copy reads, in shared-memory order
    (pixel-major, channels fastest), for copies at ``coords`` ``(n, rank)``
    with im2col ``offsets`` ``(n, rank - 2)`` (see the module docstring).

    Raises:
        SimError: a filter base outside the bounding box or off its
            traversal-stride grid, or a channel traversal stride other than 1.
    """
    rank = tm.rank
    if tm.element_strides[0] != 1:
        raise SimError(f"im2col: the emulator needs channel traversal stride 1, got {tm.element_strides[0]}")
    lo = np.asarray(tm.lower, dtype=np.int64)
    step = np.asarray(tm.element_strides[1:rank - 1], dtype=np.int64)
    hi = np.asarray(tm.dims[1:rank - 1], dtype=np.int64) + np.asarray(tm.upper, dtype=np.int64)
    count = np.maximum(-(-(hi - lo) // step), 1)           # filter-base positions per spatial dim
    base = coords[:, 1:rank - 1]
    rel = base - lo
    if ((rel < 0) | (rel >= count * step) | (rel % step != 0)).any():
        bad = int(np.nonzero(((rel < 0) | (rel >= count * step) | (rel % step != 0)).any(axis=1))[0][0])
        raise SimError(f"im2col: filter base {tuple(int(x) for x in base[bad])} (W first) is not on the "
                       f"bounding box [{tuple(int(x) for x in lo)}, {tuple(int(x) for x in hi)}) with "
                       f"traversal strides {tuple(int(x) for x in step)}")
    # pixel index within the image, W fastest, then across images
    per_image = int(np.prod(count))
    radix = np.concatenate([[1], np.cumprod(count)[:-1]])
    first = (rel // step * radix).sum(axis=1) + coords[:, rank - 1] * per_image
    flat = first[:, None] + np.arange(tm.pixels, dtype=np.int64)[None, :]    # (n, P)
    image, within = np.divmod(flat, per_image)
    index = (within[..., None] // radix) % count                            # (n, P, S)
    offs = offsets.astype(np.int64) & ((1 << _OFFSET_BITS[rank]) - 1)
    spatial = lo + index * step + offs[:, None, :]
    chan = coords[:, 0, None] + np.arange(tm.channels, dtype=np.int64)      # (n, C)
    n, p, c = len(coords), tm.pixels, tm.channels
    g = np.empty((n, p, c, rank), dtype=np.int64)
    g[..., 0] = chan[:, None, :]
    g[..., 1:rank - 1] = spatial[:, :, None, :]
    g[..., rank - 1] = image[:, :, None]
    return g.reshape(n, p * c, rank)


def _elemtype(dtype: Any) -> int:
    if isinstance(dtype, str) and dtype.lstrip(".") in _NAMES:
        return _NAMES[dtype.lstrip(".")]
    name = np.dtype(dtype).name
    if name not in _NUMPY:
        raise ValueError(f"tensor_map: no TMA element type for {dtype!r}")
    return _NUMPY[name]


def tensor_map(address: int, shape: Sequence[int], dtype: Any, box: Sequence[int] | None = None,
               strides: Sequence[int] | None = None, swizzle: int = 0, oob_fill: str = "zero",
               element_strides: Sequence[int] | None = None, interleave: int = 0, *,
               im2col: Im2col | None = None, swizzle_atomicity: str = "16B") -> bytes:
    """A tensor map for ``cp.async.bulk.tensor`` in jaxptx's 128-byte layout.

    Shapes follow numpy (outermost dimension first); the map stores them
    innermost first, and the copy instruction's coordinate ``c0`` is the
    innermost (last numpy) axis.

    Args:
        address: global address of the tensor's first element (in the
            emulator, a launch's k-th global buffer starts at ``(k+1) << 36``).
        shape: the tensor's shape, 1 to 5 dims (im2col: N(D)(H)WC, 3 to 5).
        dtype: a numpy dtype (int8/int16 copy as u8/u16 bits) or a PTX type
            name (``"bf16"``, ``"tf32"``, ``"f32.ftz"`` ...).
        box: the box (tile) one copy moves, same rank, each 1..256 (tiled
            maps; leave out for im2col maps).
        strides: byte strides like ``ndarray.strides`` (default C-contiguous);
            the innermost must equal the element size, the others multiples
            of 16.
        swizzle: 0, 32, 64 or 128 (bytes) — the shared-memory swizzle.
        oob_fill: ``"zero"`` or ``"nan"`` (floating-point types only).
        element_strides: traversal strides, 1..8 (default 1).
        interleave: 0, 16 or 32 (bytes).
        im2col: makes an im2col-mode map (cuTensorMapEncodeIm2col).
        swizzle_atomicity: ``"16B"`` (default), or with ``swizzle=128``
            ``"32B"``, ``"32B with 8B flip"`` or ``"64B"`` (the driver's
            ``CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B`` / ``_ATOM_32B_FLIP_8B`` /
            ``_ATOM_64B``).

    Raises:
        ValueError: a map the CUDA driver would refuse to encode.
    """
    shape = [int(d) for d in shape]
    code = _elemtype(dtype)
    size = ELEMTYPES[code][1]
    rank = len(shape)
    if (box is None) == (im2col is None):
        raise ValueError("tensor_map: give a box (tiled map) or im2col=Im2col(...), not both or neither")
    if not 1 <= rank <= 5 or (box is not None and len(box) != rank):
        raise ValueError(f"tensor_map: shape {shape} and box {list(box or ())} need the same rank, 1..5")
    if strides is None:
        strides = [size * int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(rank)]
    if len(strides) != rank or int(strides[-1]) != size:
        raise ValueError(f"tensor_map: strides {list(strides)} must have rank entries, the last being "
                         f"the element size {size}")
    estr = [1] * rank if element_strides is None else [int(e) for e in element_strides]
    if swizzle not in (0, 32, 64, 128) or interleave not in (0, 16, 32) or oob_fill not in ("zero", "nan"):
        raise ValueError(f"tensor_map: swizzle {swizzle}, interleave {interleave}, oob_fill {oob_fill!r} "
                         "must be in (0, 32, 64, 128), (0, 16, 32), ('zero', 'nan')")
    atoms = {v: k for k, v in ATOMICITY_NAMES.items()}
    if swizzle_atomicity not in atoms:
        raise ValueError(f"tensor_map: swizzle_atomicity {swizzle_atomicity!r} must be one of {list(atoms)}")
    extra: dict[str, Any] = {"atomicity": atoms[swizzle_atomicity]}
    if im2col is not None:
        if not 3 <= rank or len(im2col.lower) != rank - 2 or len(im2col.upper) != rank - 2:
            raise ValueError(f"tensor_map: an im2col map needs rank 3..5 and {max(rank - 2, 1)} corner "
                             f"entries each, got shape {shape}, corners {im2col.lower}, {im2col.upper}")
        extra.update(mode=IM2COL, pixels=int(im2col.pixels), channels=int(im2col.channels),
                     lower=tuple(int(c) for c in im2col.lower[::-1]),
                     upper=tuple(int(c) for c in im2col.upper[::-1]))
    tm = TensorMap(int(address), code, tuple(shape[::-1]), tuple(int(b) for b in (box or [0] * rank)[::-1]),
                   tuple(int(s) for s in strides[::-1][1:]), tuple(estr[::-1]), swizzle, interleave,
                   1 if oob_fill == "nan" else 0, **extra)
    problem = _problem(tm)
    if problem:
        raise ValueError(f"tensor_map: {problem}")
    return encode(tm)


class ArgTensorMap:
    """A tensor map over one of a launch's array arguments, for a
    ``.param .align 64 .b8 t[128]`` parameter: :func:`jaxptx.sim.launch`
    encodes it with that array's address once it has placed the arrays.

    Args:
        arg: index (among the launch's arguments) of the array it describes.
        *args, **kwargs: the rest of :func:`tensor_map`'s arguments.

    Raises:
        ValueError: a map the CUDA driver would refuse to encode (checked now).
    """

    def __init__(self, arg: int, *args: Any, **kwargs: Any) -> None:
        if not isinstance(arg, int) or isinstance(arg, bool) or arg < 0:
            raise ValueError(f"ArgTensorMap: arg must be an argument index >= 0, got {arg!r}")
        self.arg = arg
        self._args = args
        self._kwargs = kwargs
        tensor_map(_CHECK_ADDRESS, *args, **kwargs)

    def encode(self, address: int) -> bytes:
        """The map's 128 bytes for a tensor at ``address``."""
        return tensor_map(address, *self._args, **self._kwargs)

    def __repr__(self) -> str:
        return f"ArgTensorMap(arg={self.arg}, {self._args}, {self._kwargs})"


# Any address aligned as the driver asks (32 bytes covers interleaved maps).
_CHECK_ADDRESS = 1 << 36

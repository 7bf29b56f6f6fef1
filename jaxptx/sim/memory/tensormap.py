"""jaxptx's tensor maps: the 128-byte objects that TMA copies
(``cp.async.bulk.tensor``) read.

The CUDA driver's ``CUtensorMap`` is an opaque 128-byte blob whose layout is
not documented, so the emulator defines its own. A tensor map lives in
global, const or param memory (PTX ISA, "Tensor-map": a 128-byte object in
``.const``, ``.param`` or ``.global`` space), 64-byte aligned. Build one on
the host with :func:`tensor_map`; kernels may rewrite fields with
``tensormap.replace`` and copy maps with ``tensormap.cp_fenceproxy``.

The 128-byte layout, its codes and its validity rules live in
:mod:`jaxptx.isa.encodings` (:class:`~jaxptx.isa.encodings.TensorMap`, its
``encode`` beside its ``decode``); this module builds maps from numpy-order
arguments, turns an encoding error into the emulator's :class:`SimError`
when a copy reads a map, and walks im2col boxes.

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
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...isa.encodings import ATOMICITY_NAMES, CORNER_BITS, ELEMTYPES, IM2COL, EncodingError, TensorMap
from ...isa.encodings import TENSOR_MAP_FIELDS as FIELDS
from ...isa.encodings import TENSOR_MAP_MAGIC as MAGIC
from ...isa.encodings import TENSOR_MAP_SIZE as SIZE
from ...isa.encodings import TENSOR_MAP_VERSION as VERSION
from ...isa.encodings import swizzle_from_code
from ...launch import TMA_RECORD
from ...types import TYPES
from ..errors import SimError

__all__ = ["maps_from_records", "CU_DTYPE_NAMES", "tensor_map", "ArgTensorMap", "TensorMap", "decode", "encode", "im2col_elements", "FIELDS", "MAGIC",
           "VERSION", "SIZE", "ELEMTYPES", "IM2COL", "Im2col", "ATOMICITY_NAMES"]

_NUMPY = {"uint8": 0, "int8": 0, "bool": 0, "uint16": 1, "int16": 1, "uint32": 2, "int32": 3,
          "uint64": 4, "int64": 5, "float16": 6, "float32": 7, "float64": 9, "bfloat16": 10}
# im2col offsets are unsigned, as wide as the corners (PTX ISA, "im2col mode").
_OFFSET_BITS = CORNER_BITS


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
    """The 128 bytes of ``tm`` (:meth:`TensorMap.encode`).

    Raises:
        ValueError: a map the CUDA driver would refuse to encode.
    """
    return tm.encode()


def decode(raw: bytes | np.ndarray) -> TensorMap:
    """Read and check a tensor map (:meth:`TensorMap.decode`).

    Raises:
        SimError: not a jaxptx tensor map, or fields a TMA copy cannot use
            (the CUDA driver refuses to encode such maps).
    """
    try:
        return TensorMap.decode(raw)
    except EncodingError as e:
        raise SimError(f"invalid tensor map: {e}") from None


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
    if isinstance(dtype, str) and dtype.lstrip(".") in {name for name, _ in ELEMTYPES.values()}:
        return TensorMap.elemtype_of(dtype.lstrip("."))
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
    if oob_fill not in ("zero", "nan"):
        raise ValueError(f"tensor_map: oob_fill must be 'zero' or 'nan', got {oob_fill!r}")
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
    try:
        tm = TensorMap(int(address), code, tuple(shape[::-1]), tuple(int(b) for b in (box or [0] * rank)[::-1]),
                       tuple(int(s) for s in strides[::-1][1:]), tuple(estr[::-1]), swizzle, interleave,
                       1 if oob_fill == "nan" else 0, **extra)
        return tm.encode()
    except EncodingError as e:
        raise ValueError(f"tensor_map: {e}") from None


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


# CUtensorMapDataType -> the emulator's name for the type (the dtype field of
# a launch's TMA records; jaxptx/jax/_tma.py writes them).
CU_DTYPE_NAMES = {0: "u8", 1: "u16", 2: "u32", 3: "s32", 4: "u64", 5: "s64", 6: "f16", 7: "f32",
                  8: "f64", 9: "bf16", 10: "f32.ftz", 11: "tf32", 12: "tf32.ftz"}


def maps_from_records(tma: Sequence[int]) -> tuple[ArgTensorMap, ...]:
    """The emulator's maps for a launch's TMA records (a custom call's
    ``tma`` attribute, or a capture's: ``TMA_RECORD`` int64s each, buffer
    indices counting inputs then outputs); the same records give the same
    (immutable) maps, checked once.

    Raises:
        ValueError: not whole records, or a record that is invalid.
    """
    return _maps_from_records(tuple(int(v) for v in tma))


@functools.lru_cache(maxsize=256)
def _maps_from_records(tma: tuple[int, ...]) -> tuple[ArgTensorMap, ...]:
    if len(tma) % TMA_RECORD:
        raise ValueError(f"the tma attribute has {len(tma)} entries, not a multiple of {TMA_RECORD}")
    try:
        return tuple(_map_of(tma[i:i + TMA_RECORD]) for i in range(0, len(tma), TMA_RECORD))
    except KeyError as e:
        raise ValueError(f"the tma attribute has an unknown code {e}") from None


def _map_of(rec: Sequence[int]) -> ArgTensorMap:
    rank = int(rec[2])
    shape = [int(x) for x in rec[4:4 + rank]][::-1]
    elem = TYPES[CU_DTYPE_NAMES[int(rec[1])].split(".")[0]].bits // 8
    strides = [int(x) for x in rec[9:9 + rank - 1]][::-1] + [elem]
    box = [int(x) for x in rec[13:13 + rank]][::-1]
    swizzle = swizzle_from_code("cu_tensor_map", int(rec[3])).span
    return ArgTensorMap(int(rec[0]), shape, CU_DTYPE_NAMES[int(rec[1])], box, strides=strides,
                        swizzle=swizzle, oob_fill="nan" if rec[25] else "zero")

"""TMA descriptors a kernel asks the runtime for (``x.tma_desc()``).

A kernel that copies a tensor with ``cp.async.bulk.tensor`` names the
tensor's descriptor; the runtime encodes it for each call from the buffer's
address and passes it by value, as a ``.param .align 64 .b8 <name>_tma[128]``
kernel parameter (CUDA's ``__grid_constant__ const CUtensorMap``): no device
allocation, no copy, no fence. The kernel reads it through its generic
address (``cvta.param``; ptxas refuses the bare param symbol as a tensor-map
operand). Everything but the global address is fixed when the kernel is
specialised, and recorded here as a :class:`TmaDescriptor`.

The descriptor describes the array as JAX stores it (C order, the tile's
shape), outermost dim first like numpy; TMA coordinates run the other way
(``c0`` is the innermost, last numpy axis). The box is the spec's
``tma_box`` (the whole tensor when ``None``); the swizzle is the layout's
(``Layout.TMA_128B`` ...). ``tma_rank=3`` on a 2-d tile is the reshaped
descriptor that lets one copy bring a box wider than the swizzle span: the
``(H, W)`` array is described as ``(W / S, H, S)`` with ``S`` the swizzle
span in elements, so a ``(bh, bw)`` box lands in shared memory as ``bw / S``
swizzled ``(bh, S)`` blocks, one after another (coordinates ``{0, row,
col / S}``).

``tma_padding=True`` (``tma_rank=3`` only) widens the innermost box dim by
``PAD_ELEMS`` elements past the span, so each ``(bh, S)`` block is laid out in
shared memory with rows of ``S + PAD_ELEMS`` elements (a bank-conflict-free
stride for ``stmatrix``). The extra elements lie outside the descriptor's
innermost global dim (``S``): a store drops them, a load fills them. With no
swizzle the span is 128 bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import SpecError
from ._specs import Layout, Tile

__all__ = ["TmaDescriptor", "describe_tma"]

# What one copy may move per dim (cuTensorMapEncodeTiled's boxDim limit).
MAX_BOX = 256
# Elements tma_padding adds to the innermost box dim (pyptx: 64 -> 72).
PAD_ELEMS = 8


@dataclasses.dataclass(frozen=True)
class TmaDescriptor:
    """A tensor map the runtime builds for each call; all but the address.

    Attributes:
        param: the ``.param`` symbol the kernel reads it from.
        tensor: index of the tensor among the kernel's (inputs, then outputs).
        dtype: the PTX element type name (``"bf16"``, ``"f32"`` ...).
        shape, strides, box: numpy order (outermost first); strides in bytes,
            the last being the element size.
        swizzle: the shared-memory swizzle span in bytes (0, 32, 64, 128).
    """

    param: str
    tensor: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


def describe_tma(name: str, index: int, spec: Tile | None, shape: tuple[Any, ...],
                 param: str, kernel: str) -> TmaDescriptor:
    """The descriptor of tensor ``name`` (number ``index``) with ``spec`` and
    bound ``shape``, read from ``param``.

    Raises:
        SpecError: no spec, an unbound dim, a box past 256 or not dividing
            the reshaped span, or a spec option the runtime does not build.
    """
    where = f"kernel {kernel}: {name}.tma_desc()"
    if spec is None:
        raise SpecError(f"{where}: a TMA descriptor is built from the tensor's spec; "
                        "declare in_specs/out_specs")
    dims = [d if isinstance(d, int) else None for d in shape]
    if None in dims:
        raise SpecError(f"{where}: dim(s) {[str(d) for d in shape if not isinstance(d, int)]} "
                        "are not bound; the descriptor needs the tensor's shape")
    if spec.dtype.bits < 8 or spec.dtype.lanes != 1:
        raise SpecError(f"{where}: TMA copies elements of 8 bits or more, got .{spec.dtype.name}")
    if spec.layout is Layout.INTERLEAVED:
        raise SpecError(f"{where}: the runtime builds tiled, non-interleaved descriptors; "
                        "Layout.INTERLEAVED is not supported")
    if spec.tma_padding and (spec.tma_rank != 3 or len(dims) != 2 or spec.layout.swizzle_bytes):
        raise SpecError(f"{where}: the runtime pads only the reshaped (tma_rank=3) descriptor of "
                        "a 2-d Layout.ROW tile; other uses of tma_padding are not supported")
    env = {k: v for k, v in zip(spec.shape, dims) if isinstance(k, str)}
    box = [int(d) for d in dims] if spec.tma_box is None else \
        [b if isinstance(b, int) else env.get(b, -1) for b in spec.tma_box]
    if -1 in box:
        raise SpecError(f"{where}: tma_box {spec.tma_box} names a dim the tensor does not bind")
    elem = spec.dtype.bits // 8
    swizzle = spec.layout.swizzle_bytes
    strides = [elem] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    rank = len(dims)
    if spec.tma_rank == 3 and rank == 2:
        dims, strides, box = _reshaped(where, dims, box, elem, swizzle, spec.tma_padding)
    elif spec.tma_rank not in (2, rank):
        raise SpecError(f"{where}: tma_rank={spec.tma_rank} for a rank-{rank} tile; the "
                        "descriptor has the tile's rank (or 3, reshaped, for a 2-d tile)")
    if any(not 1 <= b <= MAX_BOX for b in box):
        raise SpecError(f"{where}: TMA box {tuple(box)} has a dim outside 1..{MAX_BOX}; give the "
                        "Tile a tma_box (the part of the tensor one copy moves)")
    return TmaDescriptor(param, index, spec.dtype.name, tuple(dims), tuple(strides),
                         tuple(box), swizzle)


def _reshaped(where: str, dims: list[int], box: list[int], elem: int, swizzle: int,
              padding: bool = False) -> tuple[list[int], list[int], list[int]]:
    """``(H, W)`` as ``(W / S, H, S)``, S the swizzle span in elements (128
    bytes unswizzled, where only a padded store descriptor is allowed)."""
    if not swizzle and not padding:
        raise SpecError(f"{where}: tma_rank=3 splits rows into swizzle spans; it needs a "
                        "Layout.TMA_32B/64B/128B tile (or tma_padding=True on Layout.ROW)")
    span = (swizzle or 128) // elem
    (h, w), (bh, bw) = dims, box
    if w % span or bw % span:
        raise SpecError(f"{where}: tma_rank=3 needs the row length {w} and box width {bw} to be "
                        f"multiples of the swizzle span ({span} elements)")
    return [w // span, h, span], [span * elem, w * elem, elem], \
        [bw // span, bh, span + (PAD_ELEMS if padding else 0)]

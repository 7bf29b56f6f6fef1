"""Shared-memory pictures: the TMA / wgmma XOR swizzles and a TMA box over a
tensor, computed by the emulator's own code (``tma.swizzle`` and the
box walk of ``cp.async.bulk.tensor``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._draw import cell_grid, figure_with_data, pyplot

__all__ = ["swizzle_chunks", "swizzle_pattern", "tma_box_data", "tma_box"]


def swizzle_chunks(span: int = 128, rows: int = 8) -> np.ndarray:
    """``(rows, span // 16)`` ints: the 16-byte chunk where logical chunk
    ``c`` of row ``r`` (a tile of ``span``-byte rows) lands under the
    ``span``-byte swizzle, from :func:`jaxptx.sim.semantics.tma.swizzle`
    (the function the emulator's TMA copies use).

    Raises:
        ValueError: ``span`` is not 32, 64 or 128.
    """
    from ..sim.semantics.tma import swizzle
    if span not in (32, 64, 128):
        raise ValueError(f"swizzle_chunks: span must be 32, 64 or 128 bytes, got {span!r}")
    r, c = np.meshgrid(np.arange(rows), np.arange(span // 16), indexing="ij")
    addr = (r * span + c * 16).astype(np.uint64)
    landed = swizzle(addr, span).astype(np.int64)
    return (landed - r * span) // 16


def swizzle_pattern(span: int = 128, rows: int = 8) -> Any:
    """The ``span``-byte swizzle (TMA ``CU_TENSOR_MAP_SWIZZLE_<span>B``, the
    wgmma/tcgen05 descriptor swizzle modes): shared memory as it is laid
    out, each 16-byte slot labelled with the logical chunk ``c`` stored
    there, coloured by that chunk.

    Returns:
        A ``Figure``; ``fig.data`` is :func:`swizzle_chunks` (the landing
        chunk of each logical chunk, ``(rows, span // 16)``).
    """
    data = swizzle_chunks(span, rows)
    stored = np.empty_like(data)            # memory view: which logical chunk sits in each slot
    r = np.arange(rows)[:, None]
    stored[r, data] = np.arange(data.shape[1])[None, :]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(3.0, 0.55 * data.shape[1] + 1.6), 0.4 * rows + 1.3))
    labels = np.vectorize(lambda c: f"c{c}")(stored)
    cell_grid(ax, stored, labels, title=f"{span}B swizzle: logical chunk in each 16-byte slot",
              xlabel="16-byte slot in the row", ylabel=f"row ({span} bytes)", fontsize=7)
    fig.tight_layout()
    return figure_with_data(fig, data)


def tma_box_data(shape: Sequence[int], box: Sequence[int], coords: Sequence[int], dtype: str = "f32",
                 swizzle: int = 0) -> np.ndarray:
    """Shared-memory image of one 2-d TMA tile load: ``(box_rows, box_cols)``
    ints, the flat index (``row * cols + col``) of the tensor element each
    shared-memory element receives, or -1 where the box lies outside the
    tensor (zero fill). The box walk is the emulator's
    (``cp.async.bulk.tensor``'s), and so is the swizzle placement.

    Args:
        shape: the tensor's (rows, cols).
        box: the box's (rows, cols).
        coords: the box origin in numpy order (row, col); may be negative or
            run past the end.
        dtype: element type name (``"f32"``, ``"bf16"``, ``"f16"``, ``"u8"`` ...).
        swizzle: 0, 32, 64 or 128; with a swizzle, ``box_cols * element size``
            must not exceed it (the driver's rule).
    """
    from ..sim.memory.tensormap import decode, tensor_map
    from ..sim.semantics.tma import tma_box_addresses
    from ..sim.semantics.tma import swizzle as swz
    base = 1 << 36
    tm = decode(tensor_map(base, shape, dtype, box=box, swizzle=swizzle))
    gaddr, inb = tma_box_addresses(tm, np.asarray([list(coords)[::-1]], dtype=np.int64))
    w = tm.elem_bytes
    src = np.where(inb[0], (gaddr[0].astype(np.int64) - base) // w, -1)
    slot = swz(np.arange(src.size, dtype=np.uint64) * np.uint64(w), tm.swizzle).astype(np.int64) // w
    out = np.full(src.size, -1, dtype=np.int64)
    out[slot] = src
    return out.reshape(tuple(box))


def tma_box(shape: Sequence[int] = (12, 40), box: Sequence[int] = (8, 32), coords: Sequence[int] = (6, 16),
            dtype: str = "f32", swizzle: int = 128) -> Any:
    """A TMA box over a 2-d tensor (left) and the shared-memory tile it
    fills (right): cells coloured by the tensor row they come from, the part
    of the box outside the tensor hatched (it reads as zeros), 16-byte
    chunks outlined in the tile.

    Returns:
        A ``Figure``; ``fig.data`` is :func:`tma_box_data` for the same
        arguments.
    """
    data = tma_box_data(shape, box, coords, dtype, swizzle)
    rows, cols = shape
    plt = pyplot()
    from matplotlib.patches import Rectangle
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [cols + 8, box[1]]})
    ext_r, ext_c = max(rows, coords[0] + box[0]), max(cols, coords[1] + box[1])
    r, c = np.meshgrid(np.arange(ext_r), np.arange(ext_c), indexing="ij")
    in_box = (r >= coords[0]) & (r < coords[0] + box[0]) & (c >= coords[1]) & (c < coords[1] + box[1])
    inside = (r < rows) & (c < cols)
    cell_grid(left, np.where(in_box & inside, r, -1), None, title=f"tensor {rows}x{cols} {dtype}, "
              f"box {tuple(box)} at {tuple(coords)}", xlabel="column", ylabel="row", tick_every=4)
    left.add_patch(Rectangle((-0.5, -0.5), cols, rows, fill=False, edgecolor="black", linewidth=1.5))
    left.add_patch(Rectangle((coords[1] - 0.5, coords[0] - 0.5), box[1], box[0], fill=False,
                             edgecolor="#d62728", linewidth=2, linestyle="--"))
    for (i, j) in zip(*np.nonzero(in_box & ~inside)):
        left.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="#888888"))
    cell_grid(right, np.where(data >= 0, data // cols, -1), None,
              title=f"shared tile ({swizzle or 'no'}{'B' if swizzle else ''} swizzle)",
              xlabel="element", ylabel="tile row", tick_every=4)
    per_chunk = 16 // {"f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "u16": 2, "u8": 1,
                       "s8": 1, "f64": 8, "u64": 8}.get(dtype, 4)
    for x in range(0, box[1] + 1, per_chunk):
        right.axvline(x - 0.5, color="black", linewidth=1.2)
    for (i, j), v in np.ndenumerate(data):
        if v < 0:
            right.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="#888888"))
        elif j % per_chunk == 0:
            right.text(j + per_chunk / 2 - 0.5, i, f"r{v // cols}:{(v % cols) // per_chunk}", ha="center",
                       va="center", fontsize=6, family="monospace")
    fig.tight_layout()
    return figure_with_data(fig, data)

"""``pyptx.specs``: :class:`Tile` and :class:`Layout`.

``Tile`` is jaxptx's :class:`jaxptx.Tile` (same constructor, same checks)
with pyptx's wgmma operand shortcuts :meth:`Tile.wgmma_a` and
:meth:`Tile.wgmma_b`; ``Layout`` is jaxptx's.
"""

from __future__ import annotations

from ..dsl import Dim, Layout
from ..dsl import Tile as _Tile
from ..types import PtxType

__all__ = ["Tile", "Layout", "wgmma_layout"]


def wgmma_layout(inner: Dim, dtype: PtxType, operand: str = "A") -> Layout:
    """The TMA layout of a wgmma operand whose contiguous row holds ``inner``
    elements: the canonical GMMA swizzle for that row width (16 bytes: no
    swizzle; 32, 64: that swizzle; 128 or more: 128-byte swizzle).

    A symbolic ``inner`` gives ``Layout.ROW``, as pyptx does.

    Raises:
        ValueError: a row width that is not 16, 32, 64 or >= 128 bytes.
    """
    if isinstance(inner, str):
        return Layout.ROW
    row = int(inner) * max(dtype.bits // 8, 1)
    if row >= 128:
        return Layout.TMA_128B
    layouts = {16: Layout.ROW, 32: Layout.TMA_32B, 64: Layout.TMA_64B}
    if row not in layouts:
        raise ValueError(f"wgmma_{operand.lower()}: a row of {inner} x {dtype} is {row} bytes; "
                         "wgmma operand rows are 16, 32, 64 or a multiple of 128 bytes")
    return layouts[row]


class Tile(_Tile):
    """jaxptx's :class:`~jaxptx.Tile` plus pyptx's wgmma operand shortcuts."""

    @classmethod
    def wgmma_a(cls, m: Dim, k: Dim, dtype: PtxType, *, tile_m: Dim | None = None,
                tile_k: Dim | None = None) -> "Tile":
        """A wgmma A operand (row-major ``m x k``, K-major).

        The layout is the swizzle of one ``tile_k`` (default ``k``) row; the
        TMA box is ``(tile_m or m, tile_k or k)`` when either is given, else
        the whole tensor. Size the shared tile to the box:
        ``smem.wgmma_tile(dtype, (tile_m, tile_k), major="K")``.
        """
        box = None if tile_m is None and tile_k is None else (
            m if tile_m is None else tile_m, k if tile_k is None else tile_k)
        return cls(m, k, dtype=dtype, layout=wgmma_layout(k if tile_k is None else tile_k, dtype, "A"),
                   tma_box=box)

    @classmethod
    def wgmma_b(cls, k: Dim, n: Dim, dtype: PtxType, *, tile_k: Dim | None = None,
                tile_n: Dim | None = None) -> "Tile":
        """A wgmma B operand (row-major ``k x n``, MN-major): as :meth:`wgmma_a`
        with the row ``tile_n`` (default ``n``) wide and box ``(tile_k, tile_n)``."""
        box = None if tile_k is None and tile_n is None else (
            k if tile_k is None else tile_k, n if tile_n is None else tile_n)
        return cls(k, n, dtype=dtype, layout=wgmma_layout(n if tile_n is None else tile_n, dtype, "B"),
                   tma_box=box)

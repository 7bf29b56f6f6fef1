"""The ``smem`` namespace: shared-memory arrays, wgmma tiles, mbarriers.

wgmma tiles know their major-ness and swizzle: ``tile.matrix_desc(k=, mn=)``
is the matrix descriptor of the operand starting ``k`` / ``mn`` elements in
(LBO/SBO from :func:`descriptor_strides`, whose docstring draws the
layouts); :func:`tma_tile` declares the tile a tensor's TMA box fills and
:func:`check_tma` refuses a box whose swizzle or shape disagrees with a tile.

Static arrays become module-level ``.shared`` declarations; in a kernel
declared with ``extern_smem=True`` they are carved out of the one dynamic
``.extern .shared`` array instead (what launches above 48 KB need).

Example:
    >>> from jaxptx import kernel, smem, ptx
    >>> from jaxptx.types import bf16, f32
    >>> @kernel(arch="sm_90a")
    ... def k():
    ...     buf = smem.alloc(f32, (128,))
    ...     tile = smem.wgmma_tile(bf16, (64, 64), major="K")
    ...     bars = smem.mbarrier(2)
    ...     ptx.ret()
    >>> ".shared .align 1024 .b8 wgmma_tile_0[8192];" in k.ptx()
    True
"""

from __future__ import annotations

import math
from typing import Any

from .. import ir
from ..errors import TraceError
from ..isa.encodings import SWIZZLES, EncodingError, MatrixDescriptor, swizzle as swizzle_mode
from ..types import PtxType, b64, from_dtype
from ._core import Reg, emit_instruction
from ._specs import Layout
from ._trace import current, user_location, with_location
from ._values import Addr

__all__ = ["SmemArray", "alloc", "wgmma_tile", "mbarrier", "matrix_descriptor_bits", "descriptor_strides",
           "tma_tile", "check_tma"]

_SPANS = tuple(sorted(s.span for s in SWIZZLES if s.wgmma is not None))     # 0, 32, 64, 128 bytes

class SmemArray:
    """A shared-memory array: ``arr[i]``/``arr[r, c]`` give addresses.

    Attributes:
        symbol: the ``.shared`` symbol holding it.
        offset: byte offset within the symbol (non-zero when carved from
            dynamic shared memory).
        dtype, shape: element type and shape (row-major).
        swizzle: 0, 32, 64 or 128 (wgmma tiles).
        major: ``"K"`` or ``"MN"`` for wgmma tiles, else ``None``.
    """

    def __init__(self, symbol: str, offset: int, dtype: PtxType, shape: tuple[int, ...],
                 swizzle: int = 0, major: str | None = None) -> None:
        self.symbol = symbol
        self.offset = offset
        self.dtype = dtype
        self.shape = shape
        self.swizzle = swizzle
        self.major = major

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return math.prod(self.shape) * self.dtype.nbytes

    @property
    def layout(self) -> Layout:
        """The TMA layout matching this array's swizzle."""
        return Layout.for_swizzle(self.swizzle)

    def __ptx_symbol__(self) -> Addr:
        return Addr(self.symbol, self.offset or None)

    @property
    def base(self) -> Reg:
        """The array's shared-window address in a u32 register (emitted once)."""
        return current().materialise(("smem_base", self.symbol, self.offset), self._base)

    def _base(self) -> Reg:
        r = emit_instruction("mov", ("u32",), (self.symbol,))
        return emit_instruction("add", ("u32",), (r, self.offset)) if self.offset else r

    def __getitem__(self, index: Any) -> Addr:
        """The address of element ``index`` (one int or u32 register per dim).

        Raises:
            TraceError: a wrong number of indices, or a constant index
                outside the array, at the user's line.
        """
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != len(self.shape):
            raise _error(f"shared array {self.symbol}: expected {len(self.shape)} indices, got {len(idx)}")
        strides = [math.prod(self.shape[k + 1:]) * self.dtype.nbytes for k in range(len(self.shape))]
        static = self.offset
        dynamic: Reg | None = None
        for k, (i, stride) in enumerate(zip(idx, strides)):
            if isinstance(i, Reg):
                term = emit_instruction("mul", ("lo", "u32"), (i, stride))
                dynamic = term if dynamic is None else emit_instruction("add", ("u32",), (dynamic, term))
            elif isinstance(i, int) and not isinstance(i, bool):
                if not 0 <= i < self.shape[k]:
                    raise _error(f"shared array {self.symbol} of shape {self.shape}: index {i} of "
                                 f"dim {k} is out of range 0..{self.shape[k] - 1}")
                static += i * stride
            else:
                raise _error(f"shared array {self.symbol} index: expected int or u32 register, got {i!r}")
        if dynamic is None:
            return Addr(self.symbol, static or None)
        return Addr(emit_instruction("add", ("u32",), (dynamic, self.base)), (static - self.offset) or None)

    def desc(self, *, k: int = 0, mn: int = 0, lbo: int | None = None, sbo: int | None = None,
             base_offset: int = 0) -> Reg:
        """The 64-bit wgmma shared-memory matrix descriptor of this tile,
        starting ``k`` elements along K and ``mn`` along M/N into it.

        K-major tiles (swizzled or not) get their LBO/SBO from
        :func:`descriptor_strides`; an MN-major tile needs explicit ``lbo``
        and ``sbo`` here (this method's original contract) — or call
        :meth:`matrix_desc`, which derives them for every layout.
        """
        if (lbo is None or sbo is None) and self.major != "K":
            raise TraceError(f"{self.symbol}.desc(): pass lbo= and sbo= for a "
                             f"{self.major or 'plain'}-major, swizzle={self.swizzle} tile, "
                             "or call .matrix_desc(), which derives them")
        return self.matrix_desc(k=k, mn=mn, lbo=lbo, sbo=sbo, base_offset=base_offset)

    def matrix_desc(self, *, k: int = 0, mn: int = 0, lbo: int | None = None,
                    sbo: int | None = None, base_offset: int = 0) -> Reg:
        """The wgmma matrix descriptor of this ``wgmma_tile`` (any swizzle,
        K- or MN-major), ``k`` elements along K and ``mn`` along M/N into
        it: the start address advances by :meth:`offset_bytes` and LBO/SBO
        come from :func:`descriptor_strides` unless given.

        Example (the ``kk``-th K=16 step of a 128B-swizzled K-major tile,
        and the second 64-row half of it)::

            tile.matrix_desc(k=16 * kk, mn=64)
        """
        if self.major is None:
            raise TraceError(f"{self.symbol}: a matrix descriptor needs a smem.wgmma_tile "
                             "(its major-ness and swizzle)")
        d_lbo, d_sbo = descriptor_strides(self.major, self.swizzle, self.shape[0])
        lbo = d_lbo if lbo is None else lbo
        sbo = d_sbo if sbo is None else sbo
        const = matrix_descriptor_bits(0, lbo, sbo, self.swizzle, base_offset)
        start = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (self.base, 0x3FFFF)), 4))
        wide = emit_instruction("cvt", ("u64", "u32"), (start,))
        d = emit_instruction("or", ("b64",), (wide, const))
        advance = self.offset_bytes(k=k, mn=mn)
        return emit_instruction("add", ("s64",), (d, advance >> 4)) if advance else d

    def offset_bytes(self, *, k: int = 0, mn: int = 0) -> int:
        """Bytes from the tile's start to element (``mn``, ``k``) of the
        operand (see :func:`descriptor_strides` for the layout): what a
        descriptor's start address advances by to begin there.

        Raises:
            TraceError: an offset that does not start a whole core matrix /
                swizzle atom (K-major: ``mn`` a multiple of 8 and ``k`` of 16
                bytes; MN-major: ``k`` a multiple of 8 and ``mn`` of the
                atom's row), or one outside the tile.
        """
        if self.major not in ("K", "MN"):
            raise TraceError(f"{self.symbol}: offsets need a smem.wgmma_tile")
        size = self.dtype.nbytes
        width = self.swizzle or 16
        rows, cols = self.shape
        k_along_rows = self.major == "MN"
        along_rows, along_cols = (k, mn) if k_along_rows else (mn, k)
        if not (0 <= along_rows < rows and 0 <= along_cols < cols) and (k or mn):
            raise TraceError(f"{self.symbol}: offset k={k}, mn={mn} is outside the {self.major}-major "
                             f"tile of shape {self.shape}")
        col_bytes = along_cols * size
        row_step = 8
        whole = (col_bytes % width == 0) if k_along_rows else (col_bytes % 16 == 0)
        if along_rows % row_step or not whole:
            raise TraceError(f"{self.symbol}: offset k={k}, mn={mn} does not start a whole "
                             f"{'swizzle atom' if k_along_rows else 'core matrix'} of this "
                             f"{self.major}-major, swizzle={self.swizzle} tile")
        return (col_bytes // width) * rows * width + along_rows * width + col_bytes % width

    def __repr__(self) -> str:
        return f"SmemArray({self.symbol}+{self.offset}, {self.dtype}, {self.shape})"


def _error(message: str) -> TraceError:
    return with_location(TraceError(message), user_location())


def _span(swizzle: int) -> str:
    """The mode name of a wgmma tile's swizzle span (0, 32, 64 or 128 bytes)."""
    if isinstance(swizzle, bool) or swizzle not in _SPANS:
        raise TraceError(f"swizzle: expected 0, 32, 64 or 128, got {swizzle!r}")
    return swizzle_mode(swizzle).name


def matrix_descriptor_bits(start: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """Pack a wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format";
    :class:`jaxptx.isa.encodings.MatrixDescriptor`): start, LBO and SBO in
    bytes, ``swizzle`` the span in bytes (0, 32, 64, 128).

    Raises:
        TraceError: a swizzle span or field the descriptor cannot hold.
    """
    try:
        return MatrixDescriptor(start, lbo, sbo, base_offset, _span(swizzle)).encode()
    except EncodingError as e:
        raise _error(f"wgmma matrix descriptor: {e}") from None


def descriptor_strides(major: str, swizzle: int, rows: int) -> tuple[int, int]:
    """``(LBO, SBO)`` in bytes for a ``wgmma_tile`` of ``rows`` rows.

    A wgmma tile's shape is ``(rows, cols)`` with ``cols`` contiguous: rows
    are M/N for a K-major tile (``A[m, k]`` rows of K) and K for an MN-major
    one (``B[k, n]`` as a K×N row-major matrix gives). Each row is stored
    ``W`` bytes wide, ``W`` the swizzle span (16 bytes without swizzle), so
    a tile with wider rows is ``cols * size / W`` column blocks of ``rows x
    W`` bytes, one after the other — what TMA writes for a box as wide as
    the span (or a ``tma_rank=3`` box). Swizzling XORs the 16-byte chunk
    index (address bits 4 and up) with the 128-byte line index (bits 7 and
    up), both modulo ``W / 16``: with 128-byte rows, chunk ``c`` of row ``r``
    lands at chunk ``c ^ (r % 8)``; the pattern repeats every ``8 W`` bytes
    (an atom; tiles are 1024-byte aligned so it starts at the tile)::

        K-major, 128B swizzle, bf16 (64 K elements per row):

              K ->  chunk 0   chunk 1   ...  chunk 7       (16 B = 8 elements)
        row 0    [ k0..7  | k8..15  | ... | k56..63 ]   <- 128 B
        row 1    [ k8..15 | k0..7   | ... |         ]   (chunks XOR row % 8)
         ...
        row 7    ---------------------------------       one 1024 B atom
        row 8    next atom: SBO = 8 * 128 = 1024 B further
        K steps of 16 elements = +32 B on the start address (the hardware
        applies the XOR to the final address); LBO unused (16).

        MN-major, 128B swizzle, bf16 (B as K x N, 64 N per block):

             N ->   n0..63      | n64..127
        k 0..7      atom        | atom        LBO = rows * 128 B: next N block
        k 8..15     atom (+SBO) | ...         SBO = 8 * 128 = 1024 B: next 8 K
        a K=16 step = +16 rows * 128 B = +2048 B.

        No swizzle (W = 16): core matrices of 8 rows x 16 B (128 B):
        K-major   LBO = rows * 16 (next 8 K elements), SBO = 128 (next 8 rows);
        MN-major  LBO = 128 (next 8 K rows), SBO = rows * 16 (next 8 M/N).

    (PTX ISA, "Shared Memory Matrix Layout" and "Matrix Descriptor Format":
    for swizzled K-major layouts LBO is not used; for MN-major ones LBO is
    the stride between swizzle atoms along M/N and SBO along K; without
    swizzle LBO strides along K and SBO along M/N for both.)

    Raises:
        TraceError: an unknown ``major`` or ``swizzle``.
    """
    if major not in ("K", "MN"):
        raise TraceError(f"descriptor_strides major: expected 'K' or 'MN', got {major!r}")
    _span(swizzle)
    if not swizzle:
        return (rows * 16, 128) if major == "K" else (128, rows * 16)
    return (16, 8 * swizzle) if major == "K" else (rows * swizzle, 8 * swizzle)


def _declare(dtype: PtxType, shape: tuple[int, ...], align: int, hint: str,
             name: str | None, swizzle: int = 0, major: str | None = None) -> SmemArray:
    if any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in shape):
        raise TraceError(f"shared array shape: expected positive ints, got {shape!r}")
    if align <= 0 or align & (align - 1):
        raise TraceError(f"shared array align: expected a power of two, got {align!r}")
    trace = current()
    nbytes = math.prod(shape) * dtype.nbytes
    if trace.extern_smem is not None:
        offset = -(-trace.smem_offset // align) * align
        trace.smem_offset = offset + nbytes
        return SmemArray(trace.extern_smem, offset, dtype, shape, swizzle, major)
    symbol = trace.new_symbol(name) if name else trace.fresh_symbol(hint)
    trace.shared.append(ir.VarDecl("shared", "b8", symbol, align=align, dims=(nbytes,)))
    return SmemArray(symbol, 0, dtype, shape, swizzle, major)


def alloc(dtype: Any, shape: int | tuple[int, ...], *, align: int = 16, name: str | None = None) -> SmemArray:
    """A shared-memory array of ``dtype`` and ``shape`` (row-major)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _declare(from_dtype(dtype), shape, align, "smem", name)


def wgmma_tile(dtype: Any, shape: tuple[int, int], *, major: str = "K", swizzle: int | None = None,
               name: str | None = None) -> SmemArray:
    """A wgmma operand tile, 1024-byte aligned, with its swizzle mode.

    ``swizzle`` defaults to the widest mode the contiguous row fits
    (128, 64 or 32 bytes; 0 below 32 bytes).
    """
    t = from_dtype(dtype)
    if major not in ("K", "MN"):
        raise TraceError(f"smem.wgmma_tile major: expected 'K' or 'MN', got {major!r}")
    if swizzle is None:
        row = shape[1] * t.nbytes
        swizzle = next((s for s in (128, 64, 32) if row >= s), 0)
    if isinstance(swizzle, bool) or swizzle not in _SPANS:
        raise TraceError(f"smem.wgmma_tile swizzle: expected 0, 32, 64 or 128, got {swizzle!r}")
    return _declare(t, tuple(shape), 1024, "wgmma_tile", name, swizzle, major)


def mbarrier(count: int = 1, *, name: str | None = None) -> SmemArray:
    """``count`` 64-bit mbarrier objects (``bars[i]`` is the i-th address)."""
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise TraceError(f"smem.mbarrier count: expected a positive int, got {count!r}")
    return _declare(b64, (count,), 8, "mbar", name)



def _spec_of(tensor: Any) -> Any:
    """The :class:`Tile` of a kernel tensor argument, or ``tensor`` itself."""
    spec = getattr(tensor, "spec", tensor)
    if spec is None or not hasattr(spec, "tma_box"):
        raise TraceError(f"expected a Tile spec or a kernel tensor with one, got {tensor!r}")
    return spec


def _box_2d(spec: Any, where: str) -> tuple[int, int]:
    box = spec.tma_box
    if box is None or any(not isinstance(b, int) for b in box):
        raise TraceError(f"{where}: the Tile needs a tma_box of ints, got {box!r}")
    if any(b != 1 for b in box[:-2]) or len(box) < 2:
        raise TraceError(f"{where}: tma_box {box} must be 1 in every dim but the last two "
                         "(one 2-d box per copy)")
    return box[-2], box[-1]


def check_tma(tensor: Any, tile: SmemArray, *, boxes: int = 1) -> None:
    """Check that ``boxes`` TMA copies of ``tensor``'s box (a :class:`Tile`
    with ``tma_box``, or a kernel tensor argument) side by side fill
    ``tile`` as a wgmma operand: same element type, same swizzle, the box
    rows = the tile's rows and ``boxes`` box widths = its columns, each
    box row exactly one swizzle span wide (16 bytes without swizzle), as
    :func:`descriptor_strides`' column-block layout needs.

    Example::

        b_spec = Tile("G", "K", "N", bf16, Layout.TMA_128B, tma_box=(1, 64, 64))
        check_tma(b_spec, smem.wgmma_tile(bf16, (64, 128), major="MN"), boxes=2)

    Raises:
        TraceError: naming what disagrees (swizzles, shapes, types).
    """
    spec = _spec_of(tensor)
    where = f"smem.check_tma({tile.symbol})"
    rows, width = _box_2d(spec, where)
    swizzle = spec.layout.swizzle_bytes
    if swizzle != tile.swizzle:
        raise TraceError(f"{where}: the TMA layout swizzles {swizzle or 'no'} bytes "
                         f"({spec.layout.name}) but the shared tile swizzle={tile.swizzle}; "
                         "a copy would land in a layout the descriptor does not read")
    if spec.dtype.name != tile.dtype.name:
        raise TraceError(f"{where}: the TMA copies .{spec.dtype.name}, the tile holds .{tile.dtype.name}")
    span = (swizzle or 16) // tile.dtype.nbytes
    if width != span:
        raise TraceError(f"{where}: a TMA box row of {width} elements is not one swizzle span "
                         f"({span} .{tile.dtype.name} elements for swizzle={swizzle}); split the "
                         "copy into span-wide boxes")
    if (rows, width * boxes) != tuple(tile.shape):
        raise TraceError(f"{where}: {boxes} box(es) of {rows} x {width} do not fill the tile "
                         f"of shape {tuple(tile.shape)}")


def tma_tile(tensor: Any, *, major: str = "K", boxes: int = 1, name: str | None = None) -> SmemArray:
    """A ``wgmma_tile`` that ``boxes`` TMA copies of ``tensor``'s box fill
    (columns side by side, one swizzle span each), with the TMA layout's
    swizzle; checked with :func:`check_tma`.

    Example::

        @kernel(in_specs=(Tile("G", "K", "N", bf16, Layout.TMA_128B, tma_box=(1, 64, 64)),), ...)
        def k(b):
            tile = smem.tma_tile(b, major="MN", boxes=2)     # (64, 128) bf16, 128B swizzle
    """
    spec = _spec_of(tensor)
    rows, width = _box_2d(spec, "smem.tma_tile")
    tile = wgmma_tile(spec.dtype, (rows, width * boxes), major=major, swizzle=spec.layout.swizzle_bytes,
                      name=name)
    check_tma(spec, tile, boxes=boxes)
    return tile

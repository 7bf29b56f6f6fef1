"""The ``smem`` namespace: shared-memory arrays, wgmma tiles, mbarriers.

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
from ..types import PtxType, b64, from_dtype
from ._core import Addr, Reg, emit_instruction
from ._specs import Layout
from ._trace import current, user_location, with_location

__all__ = ["SmemArray", "alloc", "wgmma_tile", "mbarrier", "matrix_descriptor_bits"]

_SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}


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

    def desc(self, *, lbo: int | None = None, sbo: int | None = None, base_offset: int = 0) -> Reg:
        """The 64-bit wgmma shared-memory matrix descriptor of this tile.

        Defaults (K-major swizzled tiles): SBO = 8 rows × swizzle width,
        LBO = 16 bytes (unused by swizzled K-major layouts). Other layouts
        need explicit ``lbo``/``sbo``.
        """
        if lbo is None or sbo is None:
            if self.major != "K" or not self.swizzle:
                raise TraceError(f"{self.symbol}.desc(): pass lbo= and sbo= for a "
                                 f"{self.major or 'plain'}-major, swizzle={self.swizzle} tile")
            lbo = 16 if lbo is None else lbo
            sbo = 8 * self.swizzle if sbo is None else sbo
        const = matrix_descriptor_bits(0, lbo, sbo, self.swizzle, base_offset)
        start = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (self.base, 0x3FFFF)), 4))
        wide = emit_instruction("cvt", ("u64", "u32"), (start,))
        return emit_instruction("or", ("b64",), (wide, const))

    def __repr__(self) -> str:
        return f"SmemArray({self.symbol}+{self.offset}, {self.dtype}, {self.shape})"


def _error(message: str) -> TraceError:
    return with_location(TraceError(message), user_location())


def matrix_descriptor_bits(start: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """Pack a wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format").

    start>>4 in bits 0–13, LBO>>4 in 16–29, SBO>>4 in 32–45, base offset in
    49–51, swizzle mode in 62–63 (0 none, 1 128B, 2 64B, 3 32B).
    """
    if swizzle not in _SWIZZLE_CODE:
        raise TraceError(f"swizzle: expected 0, 32, 64 or 128, got {swizzle!r}")
    return (((start & 0x3FFFF) >> 4)
            | (((lbo >> 4) & 0x3FFF) << 16)
            | (((sbo >> 4) & 0x3FFF) << 32)
            | ((base_offset & 0x7) << 49)
            | (_SWIZZLE_CODE[swizzle] << 62))


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
    if swizzle not in _SWIZZLE_CODE:
        raise TraceError(f"smem.wgmma_tile swizzle: expected 0, 32, 64 or 128, got {swizzle!r}")
    return _declare(t, tuple(shape), 1024, "wgmma_tile", name, swizzle, major)


def mbarrier(count: int = 1, *, name: str | None = None) -> SmemArray:
    """``count`` 64-bit mbarrier objects (``bars[i]`` is the i-th address)."""
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise TraceError(f"smem.mbarrier count: expected a positive int, got {count!r}")
    return _declare(b64, (count,), 8, "mbar", name)


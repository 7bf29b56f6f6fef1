"""``pyptx.smem``: shared-memory arrays, wgmma tiles and mbarriers.

Each allocation is a jaxptx :class:`~jaxptx.dsl.smem.SmemArray` (a
module-level ``.shared`` array, or carved from the kernel's
``extern_smem`` array) wrapped with pyptx's indexing rules:

* ``sA[stage]`` (int or u32 register) is a :class:`SharedSlice`: the
  address of stage ``stage`` (the first axis) for TMA, wgmma, cp.async.
  pyptx 0.1.1 writes every static ``sA[k]`` as ``[sA]``, dropping the
  stage offset; here ``sA[k]`` is stage ``k``'s address (the same for 0).
* ``sA[row, col]`` on a 2-d array *loads* the element (``ld.shared``) and
  returns the register; ``sA[row, col] = v`` stores it (``st.shared``).
* ``bar = smem.mbarrier(n)``; ``bar[i]`` is the i-th 8-byte barrier.
* ``sA.name`` of an array carved from the extern array at a non-zero
  offset is a :class:`CarvedName`: it compares equal to the extern
  symbol (``"dyn_smem"``, as in pyptx) but as an operand of ``ptx.*`` it
  is ``dyn_smem+offset`` (``mov.b32 r, sA.name`` gives the array's
  address; pyptx writes ``dyn_smem`` alone, the extern array's start).
"""

from __future__ import annotations

import math
from typing import Any

from .. import ir
from ..dsl import smem as _smem
from ..dsl import Addr, current, emit_instruction, new_reg
from ..dsl import Reg as _CoreReg
from ..errors import TraceError
from ..isa.encodings import SWIZZLES
from ..isa.encodings import swizzle as swizzle_mode
from ..types import PtxType, from_dtype, u32
from ._regs import Reg, adopt

__all__ = ["CarvedName", "SharedAlloc", "SharedSlice", "MbarrierArray", "MbarrierRef", "alloc", "wgmma_tile",
           "alloc_with_layout", "mbarrier", "base", "load", "store", "apply_swizzle", "GmmaLayout",
           "gmma_layout"]

# pyptx's swizzle names (None, "NONE", "32B", "64B", "128B") -> span in bytes.
_SWIZZLE_BYTES = {None: 0, **{s.name.upper(): s.span for s in SWIZZLES if s.wgmma is not None}}


class GmmaLayout:
    """The canonical GMMA layout of a wgmma operand tile: descriptor LBO/SBO
    (bytes), swizzle span (bytes) and major-ness ("K" or "MN")."""

    __slots__ = ("lbo", "sbo", "swizzle", "major")

    def __init__(self, lbo: int, sbo: int, swizzle: int, major: str) -> None:
        self.lbo, self.sbo, self.swizzle, self.major = lbo, sbo, swizzle, major

    @property
    def swizzle_code(self) -> int:
        """The wgmma descriptor's 2-bit swizzle mode (0 none, 1 128B, 2 64B, 3 32B)."""
        return swizzle_mode(self.swizzle).wgmma

    def __repr__(self) -> str:
        return f"GmmaLayout({self.major}-major, swizzle={self.swizzle}, lbo={self.lbo}, sbo={self.sbo})"


def gmma_layout(dtype: PtxType, shape: tuple[int, int], major: str) -> GmmaLayout:
    """The canonical layout of a ``(M, K)`` K-major or ``(K, N)`` MN-major tile.

    PTX ISA, "Shared Memory Matrix Layout": a swizzled row is 32, 64 or 128
    bytes (wider rows are 128-byte stripes, one after another); SBO is the
    stride between groups of 8 rows, LBO between stripes (16 when there is
    one stripe, 8 rows for an unswizzled 16-byte row).

    Raises:
        ValueError: a row width that is not 16, 32, 64 or a multiple of 128.
    """
    elem = max(dtype.bits // 8, 1)
    outer, inner = shape
    row = inner * elem
    if row > 128:
        if row % 128:
            raise ValueError(f"wgmma tile row of {row} bytes is not a multiple of 128")
        return GmmaLayout(outer * 128, 8 * 128, 128, major)
    if row == 16:
        return GmmaLayout(16, 8 * 16, 0, major) if major == "K" else GmmaLayout(8 * 16, 16, 0, major)
    if row not in (32, 64, 128):
        raise ValueError(f"wgmma tile row of {row} bytes: expected 16, 32, 64 or 128 per row")
    return GmmaLayout(16, 8 * row, row, major)


class CarvedName(str):
    """The name of a shared array carved from the extern array at
    ``offset``: the extern symbol as a string, ``symbol+offset`` as an
    operand (see :func:`operand`)."""

    offset: int

    def __new__(cls, symbol: str, offset: int) -> "CarvedName":
        name = super().__new__(cls, symbol)
        name.offset = offset
        return name


def operand(value: Any) -> Any:
    """``value`` as an instruction operand: a :class:`CarvedName` becomes
    the symbol plus its offset (``dyn_smem+12288``); anything else as is."""
    if isinstance(value, CarvedName):
        return ir.Symbol(str.__str__(value), value.offset)
    return value


class SharedAlloc:
    """A pyptx shared allocation (see the module docstring).

    Attributes:
        array: the jaxptx shared array behind it.
        dtype, shape: element type and shape.
        swizzle: pyptx's swizzle name (``"128B"``...) or None.
        gmma: the :class:`GmmaLayout` for ``smem.wgmma_tile`` tiles, else None.
    """

    def __init__(self, array: _smem.SmemArray, swizzle: str | None, gmma: GmmaLayout | None = None) -> None:
        self.array = array
        self.swizzle = swizzle
        self.gmma = gmma

    @property
    def name(self) -> str:
        """The ``.shared`` symbol (a :class:`CarvedName` when carved at a
        non-zero offset of the extern array)."""
        a = self.array
        return CarvedName(a.symbol, a.offset) if a.offset else a.symbol

    dtype = property(lambda self: self.array.dtype, doc="Element type.")
    shape = property(lambda self: self.array.shape, doc="Shape (row-major).")
    byte_offset = property(lambda self: self.array.offset, doc="Offset in the extern array.")
    nbytes = property(lambda self: self.array.nbytes, doc="Size in bytes.")

    @property
    def stage_bytes(self) -> int:
        """Bytes of one stage (one index of the first axis)."""
        return math.prod(self.shape[1:]) * self.dtype.nbytes if len(self.shape) > 1 else self.dtype.nbytes

    @property
    def base(self) -> Reg:
        """The array's shared address in a u32 register (emitted once)."""
        return adopt(self.array.base)

    def __ptx_symbol__(self) -> Addr:
        return self.array.__ptx_symbol__()

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, tuple) and len(idx) == 2:
            return load(self.dtype, _element(self, idx[0], idx[1]))
        if isinstance(idx, tuple):
            raise TraceError(f"shared array {self.name}: index with sA[stage] or sA[row, col], got {idx!r}")
        return SharedSlice(self, idx)

    def __setitem__(self, idx: Any, value: Any) -> None:
        if not (isinstance(idx, tuple) and len(idx) == 2):
            raise TraceError(f"shared array {self.name}: assignment needs sA[row, col] = value, got {idx!r}")
        store(self.dtype, _element(self, idx[0], idx[1]), value)

    def __repr__(self) -> str:
        return f"SharedAlloc({self.name!r}, {self.dtype}, {self.shape})"


def _element(a: SharedAlloc, row: Any, col: Any) -> Addr:
    """The address of ``a[row, col]`` (row-major, no swizzle)."""
    if len(a.shape) != 2:
        raise TraceError(f"shared array {a.name} of shape {a.shape}: sA[row, col] needs a 2-d array")
    return a.array[row, col]


class SharedSlice:
    """Stage ``stage`` of a shared allocation: an address operand."""

    __slots__ = ("alloc", "stage")

    def __init__(self, alloc: SharedAlloc, stage: Any) -> None:
        self.alloc = alloc
        self.stage = stage

    @property
    def name(self) -> str:
        """The shared symbol."""
        return self.alloc.name

    @property
    def byte_offset(self) -> int:
        """Offset of a constant stage from the allocation's start."""
        if not isinstance(self.stage, int):
            raise TraceError(f"{self!r}: a register stage has no constant offset")
        return self.stage * self.alloc.stage_bytes

    def __ptx_symbol__(self) -> Addr:
        a = self.alloc
        if isinstance(self.stage, _CoreReg):
            off = emit_instruction("mul", ("lo", "u32"), (self.stage, a.stage_bytes))
            return Addr(emit_instruction("add", ("u32",), (a.base, off)), None)
        if not isinstance(self.stage, int) or not 0 <= self.stage < max(a.shape[0], 1):
            raise TraceError(f"shared array {a.name}: stage {self.stage!r} outside 0..{a.shape[0] - 1}")
        off = a.byte_offset + self.stage * a.stage_bytes
        return Addr(a.array.symbol, off or None)

    def __repr__(self) -> str:
        return f"SharedSlice({self.alloc.name!r}[{self.stage}])"


class MbarrierArray:
    """``count`` mbarriers in shared memory; ``bars[i]`` is an :class:`MbarrierRef`."""

    def __init__(self, array: _smem.SmemArray) -> None:
        self.array = array

    name = property(lambda self: self.array.symbol, doc="The ``.shared`` symbol.")
    count = property(lambda self: self.array.shape[0], doc="Number of barriers.")
    byte_offset = property(lambda self: self.array.offset, doc="Offset in the extern array.")

    def __getitem__(self, idx: Any) -> "MbarrierRef":
        if isinstance(idx, int) and not 0 <= idx < self.count:
            raise IndexError(f"mbarrier index {idx} out of range for {self.name}[{self.count}]")
        return MbarrierRef(self, idx)

    def __ptx_symbol__(self) -> Addr:
        return self.array.__ptx_symbol__()

    def __repr__(self) -> str:
        return f"MbarrierArray({self.name!r}, {self.count})"


class MbarrierRef:
    """One mbarrier (``bars[i]``), usable wherever an address is."""

    __slots__ = ("array", "idx")

    def __init__(self, array: MbarrierArray, idx: Any) -> None:
        self.array = array
        self.idx = idx

    name = property(lambda self: self.array.name, doc="The ``.shared`` symbol.")

    def __ptx_symbol__(self) -> Addr:
        return self.array.array[self.idx]

    def __repr__(self) -> str:
        return f"MbarrierRef({self.array.name!r}[{self.idx}])"


def _declare(dtype: Any, shape: Any, align: int | None, name: str | None) -> _smem.SmemArray:
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    return _smem.alloc(from_dtype(dtype), shape, align=align or 128, name=name)


def alloc(dtype: PtxType, shape: tuple[int, ...] | int, swizzle: str | None = None,
          align: int | None = None, name: str | None = None) -> SharedAlloc:
    """A shared array of ``dtype`` and ``shape`` (128-byte aligned by default).

    ``swizzle`` (``"32B"``, ``"64B"``, ``"128B"``) is recorded, as in pyptx
    (addresses are not swizzled; :func:`apply_swizzle` does that).
    """
    _swizzle_bytes(swizzle)
    return SharedAlloc(_declare(dtype, shape, align, name), swizzle)


def _swizzle_bytes(swizzle: str | None) -> int:
    key = swizzle.upper() if isinstance(swizzle, str) else swizzle
    if key not in _SWIZZLE_BYTES:
        raise ValueError(f"swizzle: expected None, '32B', '64B' or '128B', got {swizzle!r}")
    return _SWIZZLE_BYTES[key]


def wgmma_tile(dtype: PtxType, shape: tuple[int, int], major: str = "K", *, align: int | None = None,
               name: str | None = None) -> SharedAlloc:
    """A wgmma operand tile in its canonical layout: ``(M, K)`` K-major (A) or
    ``(K, N)`` MN-major (B), 1024-byte aligned, swizzled for its row width.

    ``ptx.wgmma.mma_async(a=tile, b=tile, ...)`` builds the descriptors from it.
    """
    major = major.upper()
    if major not in ("K", "MN"):
        raise ValueError(f"wgmma_tile major: expected 'K' or 'MN', got {major!r}")
    t = from_dtype(dtype)
    layout = gmma_layout(t, (int(shape[0]), int(shape[1])), major)
    swz = swizzle_mode(layout.swizzle).name if layout.swizzle else None
    return SharedAlloc(_declare(t, shape, align or 1024, name), swz, layout)


def alloc_with_layout(dtype: PtxType, shape: tuple[int, ...] | int, swizzle: str | None = None,
                      align: int | None = None, name: str | None = None, *,
                      gmma_layout: GmmaLayout | None = None, gmma_major: str | None = None) -> SharedAlloc:
    """:func:`alloc` with a :class:`GmmaLayout` attached."""
    return SharedAlloc(_declare(dtype, shape, align, name), swizzle, gmma_layout)


def mbarrier(count: int, name: str | None = None) -> MbarrierArray:
    """``count`` 64-bit mbarriers (8-byte aligned)."""
    return MbarrierArray(_smem.mbarrier(count, name=name))


def base(name: str | None = None) -> Reg:
    """The u32 shared address of the kernel's extern shared array (or of the
    symbol ``name``): one ``mov``.

    Raises:
        TraceError: no ``name`` and the kernel declares no ``extern_smem``.
    """
    symbol = name or current().extern_smem
    if symbol is None:
        raise TraceError("smem.base(): the kernel has no extern shared array; declare "
                         "@kernel(extern_smem=True, smem=...) or pass a symbol name")
    return adopt(emit_instruction("mov", ("u32",), (symbol,)))


def _address(address: Any) -> Any:
    if isinstance(address, _CoreReg):
        return Addr(address, None)
    return address


def load(dtype: PtxType, address: Any) -> Reg:
    """``ld.shared.<dtype>`` from ``address`` (register, address or shared
    object) into a new register."""
    return adopt(emit_instruction("ld", ("shared", from_dtype(dtype).name), (_address(address),)))


def store(dtype: PtxType, address: Any, value: Any) -> None:
    """``st.shared.<dtype> [address], value``."""
    emit_instruction("st", ("shared", from_dtype(dtype).name), (_address(address), value))


def apply_swizzle(logical_offset: Reg, swizzle: str | None) -> Reg:
    """The physical byte offset of ``logical_offset`` in a tile swizzled by
    ``swizzle`` (PTX ISA swizzle modes: bits [4:6] XOR bits [7:9], masked to
    the span): ``and``, ``shr``, ``xor``. ``None``/``"NONE"``: unchanged."""
    span = _swizzle_bytes(swizzle)
    if not span:
        return logical_offset
    mask = {32: 0x80, 64: 0x180, 128: 0x380}[span]
    bits = emit_instruction("and", ("b32",), (new_reg(u32), logical_offset, mask))
    emit_instruction("shr", ("u32",), (bits, bits, 3))
    return adopt(emit_instruction("xor", ("b32",), (new_reg(u32), logical_offset, bits)))

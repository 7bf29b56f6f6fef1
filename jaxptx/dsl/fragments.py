"""Where accumulator registers live, for epilogues; and the XOR swizzle.

Every accumulator layout below is *separable*: the (row, col) of thread
``t``'s register ``j`` is ``base(t) + offset(j)``. The pure-Python functions
(:func:`mma_coords`, :func:`wgmma_coords`, :func:`tcgen05_ld_coords`) give
the whole map; the DSL forms (:func:`mma_base`, :func:`wgmma_base`,
:func:`tcgen05_ld_base`) emit ``base(t)`` as two u32 registers from
``%laneid`` / ``%tid.x``, and :func:`mma_offset`, :func:`wgmma_offset`,
:func:`tcgen05_ld_offset` give ``offset(j)`` as Python ints, so an epilogue
adds constants::

    row, col = fragments.mma_base("m16n8k16")          # 4 instructions
    for j in range(4):
        dr, dc = fragments.mma_offset("m16n8k16", j)
        ... store acc[j] at (row + dr, col + dc) ...

The maps are read from the one table of fragment layouts,
:mod:`jaxptx.isa.fragments` (:func:`~jaxptx.isa.fragments.mma`,
:func:`~jaxptx.isa.fragments.wgmma_d`, :func:`~jaxptx.isa.fragments.tcgen05`),
which the emulator and :mod:`jaxptx.viz` read too: PTX ISA "Matrix
Fragments for mma.m16n8k*" (accumulators C/D), "Register Fragments and
Shared Memory Matrix Layouts" for ``wgmma`` (matrix D) and "Matrix
fragments for tcgen05.ld/st" (PTX ISA 9.7.16.2.3). The DSL forms emit the
table's thread digits as shifts and masks. ``groupID = lane >> 2``,
``tig = lane % 4`` (threadID_in_group) throughout.

:func:`swizzle` is the XOR swizzle of the TMA/wgmma swizzle modes (and of
ldmatrix-friendly shared layouts): the 16-byte chunk index within a row of
``bytes`` bytes is XORed with bits 7.. of the row's byte offset.
"""

from __future__ import annotations

from typing import Any

from ..errors import TraceError
from ..isa import fragments as layouts
from ._core import Reg, emit_instruction
from ._special import special

__all__ = ["mma_coords", "mma_offset", "mma_base", "mma_registers",
           "wgmma_coords", "wgmma_offset", "wgmma_base",
           "tcgen05_ld_coords", "tcgen05_ld_offset", "tcgen05_ld_base", "tcgen05_ld_registers",
           "swizzle"]

# --- the table, as registers ---------------------------------------------------------------


def _base(layout: layouts.FragmentLayout, index: Reg, *, bounded: bool) -> tuple[Reg, Reg]:
    """Emit the (row, col) that ``layout``'s thread digits give for the thread
    index in register ``index``, as u32 registers. ``bounded``: ``index`` is
    below ``layout.threads`` (``%laneid``), so its top digit needs no mask."""
    out = []
    for axis in ("row", "col"):
        terms, place = [], 1
        for i, d in enumerate(layout.thread):
            stride = getattr(d, axis)
            if stride:
                top = bounded and i == len(layout.thread) - 1
                terms.append(_digit(index, place, d.size, stride, top))
            place *= d.size
        total = terms[0] if terms else emit_instruction("mov", ("u32",), (0,))
        for term in terms[1:]:
            total = emit_instruction("add", ("u32",), (total, term))
        out.append(total)
    return out[0], out[1]


def _digit(index: Reg, place: int, size: int, stride: int, top: bool) -> Reg:
    """``(index // place) % size * stride`` (``% size`` left out for the top
    digit of a bounded index), for powers of two as shifts and a mask."""
    assert all(v & (v - 1) == 0 for v in (place, size, stride)), (place, size, stride)
    down, up = place.bit_length() - 1, stride.bit_length() - 1
    if top:
        value = emit_instruction("shr", ("u32",), (index, down)) if down else index
        return emit_instruction("shl", ("b32",), (value, up)) if up else value
    if down >= up:          # shift the digit into place, then mask it there
        value = emit_instruction("shr", ("u32",), (index, down - up)) if down > up else index
        return emit_instruction("and", ("b32",), (value, (size - 1) << up))
    value = emit_instruction("and", ("b32",), (index, (size - 1) << down))
    return emit_instruction("shl", ("b32",), (value, up - down))


def _offset(layout: layouts.FragmentLayout, reg: int) -> tuple[int, int]:
    _, row, col = layout.register_offset(reg)
    return int(row), int(col)


def _coords(layout: layouts.FragmentLayout, thread: int, reg: int) -> tuple[int, int]:
    _, row, col = layout.coords(thread, reg)
    return int(row), int(col)


# --- mma.sync -------------------------------------------------------------------

# Shapes whose accumulator is 16 x 8 (four 32-bit registers, or two f16x2).
_M16N8 = ("m16n8k4", "m16n8k8", "m16n8k16", "m16n8k32", "m16n8k64", "m16n8k128", "m16n8k256")
# 8 x 8 accumulators (two registers): m8n8k4 f64, the integer m8n8 shapes.
_M8N8 = ("m8n8k4", "m8n8k16", "m8n8k32", "m8n8k128")
_CTYPES = ("f32", "s32", "f64", "f16")


def _mma_c(shape: str, ctype: str) -> layouts.FragmentLayout:
    """The accumulator layout, or a TraceError for what this module does not describe."""
    if ctype not in _CTYPES:
        raise TraceError(f"mma fragment ctype: expected one of {_CTYPES}, got {ctype!r}")
    if shape in _M16N8 or shape in _M8N8 and ctype in ("f64", "s32"):
        return layouts.mma(shape, "c", ctype)
    raise TraceError(f"mma fragment: no accumulator layout for shape {shape!r} with .{ctype} "
                     f"(m16n8k* shapes, or m8n8 with .f64/.s32)")


def mma_registers(shape: str, ctype: str = "f32") -> int:
    """Accumulator registers per thread of ``mma.sync.<shape>`` with ``ctype``
    accumulators (f16 accumulators pack two per ``.f16x2`` register).

    Raises:
        TraceError: a shape or type this module does not describe (the
            quad-pair ``m8n8k4`` f16/f32 forms among them).
    """
    return _mma_c(shape, ctype).registers


def mma_offset(shape: str, reg: int, ctype: str = "f32") -> tuple[int, int]:
    """(row, col) of accumulator register ``reg`` relative to register 0.

    For ``.f16`` accumulators register ``reg`` holds two elements: this is
    the low half's column; the high half is the next column.

    Raises:
        TraceError: an unknown shape or type, or ``reg`` out of range.
    """
    layout = _mma_c(shape, ctype)
    if not 0 <= reg < layout.registers:
        raise TraceError(f"mma fragment: register {reg} out of range 0..{layout.registers - 1}")
    return _offset(layout, reg)


def mma_coords(shape: str, lane: int, reg: int, ctype: str = "f32") -> tuple[int, int]:
    """(row, col) of ``mma.sync.<shape>`` accumulator register ``reg`` of ``lane``.

    m16n8k* with f32/s32/f64 accumulators, four registers ``{c0, c1, c2, c3}``;
    each cell shows the lane and register holding that element::

                col 0      col 1      col 2      col 3   ...  col 7
        row 0   T0:c0      T0:c1      T1:c0      T1:c1   ...  T3:c1
        row 1   T4:c0      T4:c1      T5:c0      T5:c1   ...  T7:c1
         ...
        row 7   T28:c0     T28:c1     T29:c0     T29:c1  ...  T31:c1
        row 8   T0:c2      T0:c3      T1:c2      T1:c3   ...  T3:c3
         ...
        row 15  T28:c2     T28:c3     T29:c2     T29:c3  ...  T31:c3

    i.e. row = groupID + 8 * (reg // 2), col = 2 * tig + reg % 2. The 8x8
    accumulators (m8n8k4 .f64, integer m8n8k*) are the top half, registers
    c0, c1. ``.f16`` accumulators: register ``reg`` (``.f16x2``) holds row
    groupID + 8 * reg, columns 2 * tig (low half) and 2 * tig + 1. The map
    is :func:`jaxptx.isa.fragments.mma`'s.

    Raises:
        TraceError: an unknown shape or type, or ``lane``/``reg`` out of range.
    """
    if not 0 <= lane < 32:
        raise TraceError(f"mma fragment: lane {lane} out of range 0..31")
    mma_offset(shape, reg, ctype)
    return _coords(_mma_c(shape, ctype), lane, reg)


def mma_base(shape: str = "m16n8k16", lane: Reg | None = None, ctype: str = "f32") -> tuple[Reg, Reg]:
    """Emit the (row, col) of accumulator register 0 as u32 registers.

    ``lane`` defaults to ``%laneid``. Register ``j`` is at ``mma_offset(shape, j)``
    from it (see :func:`mma_coords` for the picture).
    """
    layout = _mma_c(shape, ctype)
    return _base(layout, lane if lane is not None else _special("laneid"), bounded=True)


# --- wgmma ------------------------------------------------------------------------


def _wgmma_d(n: int, reg: int | None = None) -> layouts.FragmentLayout:
    if not isinstance(n, int) or not 8 <= n <= 256 or n % 8:
        raise TraceError(f"wgmma fragment: N must be a multiple of 8 in 8..256, got {n!r}")
    if reg is not None and not 0 <= reg < n // 2:
        raise TraceError(f"wgmma fragment: register {reg} out of range 0..{n // 2 - 1} for N={n}")
    return layouts.wgmma_d(n)


def wgmma_offset(n: int, reg: int) -> tuple[int, int]:
    """(row, col) of ``wgmma`` m64nNk* f32/s32 accumulator register ``reg``
    relative to register 0 (see :func:`wgmma_coords`).

    Raises:
        TraceError: ``n`` is not a wgmma N, or ``reg`` is out of range.
    """
    return _offset(_wgmma_d(n, reg), reg)


def wgmma_coords(n: int, thread: int, reg: int) -> tuple[int, int]:
    """(row, col) of ``wgmma.mma_async.m64nNk*`` D register ``reg`` of
    warpgroup thread ``thread`` (0..127), 32-bit accumulators, N/2 registers.

    Warp ``w = thread // 32`` owns rows 16w..16w+15; within them, each
    8-column block ``b`` repeats the mma.sync m16n8 picture with registers
    ``d[4b] .. d[4b+3]``::

                  cols 0..7              cols 8..15           ...
        row 16w   T0:d0 T0:d1 T1:d0 ..   T0:d4 T0:d5 T1:d4 .. ...
         ...
        row 16w+8 T0:d2 T0:d3 T1:d2 ..   T0:d6 T0:d7 T1:d6 .. ...

    row = 16w + groupID + 8 * ((reg // 2) % 2), col = 8 * (reg // 4) + 2 * tig + reg % 2
    (:func:`jaxptx.isa.fragments.wgmma_d`).

    Raises:
        TraceError: ``n`` is not a wgmma N, or ``thread``/``reg`` out of range.
    """
    if not 0 <= thread < 128:
        raise TraceError(f"wgmma fragment: thread {thread} out of range 0..127")
    return _coords(_wgmma_d(n, reg), thread, reg)


def wgmma_base(thread: Reg | None = None) -> tuple[Reg, Reg]:
    """Emit the (row, col) of wgmma D register 0 as u32 registers.

    ``thread`` defaults to ``%tid.x``; only its low 7 bits (the thread's
    place in its warpgroup) are used. Register ``j`` is at
    ``wgmma_offset(N, j)`` from it.
    """
    tid = thread if thread is not None else _special("tid.x")
    return _base(layouts.wgmma_d(8), tid, bounded=False)        # the thread part is the same for every N


# --- tcgen05.ld ---------------------------------------------------------------------

_TC_SHAPES = tuple(s for s in layouts.TCGEN05_SHAPES if s != "16x32bx2")


def _tcgen05(shape: str, num: int, reg: int | None = None) -> layouts.FragmentLayout:
    shape = shape.lstrip(".")
    if shape not in _TC_SHAPES:
        raise TraceError(f"tcgen05.ld fragment: expected a shape in {_TC_SHAPES}, got {shape!r}")
    if num not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise TraceError(f"tcgen05.ld fragment: .x{num} is not a repeat count (1, 2, 4, ..., 128)")
    layout = layouts.tcgen05(shape, num)
    if reg is not None and not 0 <= reg < layout.registers:
        raise TraceError(f"tcgen05.ld fragment: register {reg} out of range 0..{layout.registers - 1}")
    return layout


def tcgen05_ld_registers(shape: str, num: int = 1) -> int:
    """Registers per thread of ``tcgen05.ld.<shape>.x<num>`` (32-bit, unpacked).

    Raises:
        TraceError: an unknown shape or repeat count.
    """
    return _tcgen05(shape, num).registers


def tcgen05_ld_offset(shape: str, reg: int, num: int = 1) -> tuple[int, int]:
    """(lane, column) of register ``reg`` relative to register 0 (see
    :func:`tcgen05_ld_coords`).

    Raises:
        TraceError: an unknown shape or repeat count, or ``reg`` out of range.
    """
    return _offset(_tcgen05(shape, num, reg), reg)


def tcgen05_ld_coords(shape: str, thread: int, reg: int, num: int = 1) -> tuple[int, int]:
    """(lane, column) of tensor memory that register ``reg`` of warp thread
    ``thread`` (0..31) holds after ``tcgen05.ld.sync.aligned.<shape>.x<num>.b32``,
    relative to ``taddr`` (add its lane, bits 16-31, and column, bits 0-15).
    Each ``.xN`` repeat continues along the columns
    (:func:`jaxptx.isa.fragments.tcgen05`).

    ``.32x32b``: thread t holds lane t, register j column j::

                 col 0   col 1   ...
        lane 0   T0:r0   T0:r1
        lane 1   T1:r0   T1:r1
         ...
        lane 31  T31:r0  T31:r1

    ``.16x64b`` (16 lanes x 2 columns per repeat): lane t/4 + 8 (t%2),
    column 2j + (t/2)%2::

                 col 0   col 1
        lane 0   T0:r0   T2:r0
        lane 1   T4:r0   T6:r0   ...   lane 7  T28:r0  T30:r0
        lane 8   T1:r0   T3:r0   ...   lane 15 T29:r0  T31:r0

    ``.16x128b`` (16 lanes x 4 columns): lane t/4 + 8 (j%2), column
    4 (j/2) + t%4::

                 col 0   col 1   col 2   col 3
        lane 0   T0:r0   T1:r0   T2:r0   T3:r0
         ...
        lane 7   T28:r0  T29:r0  T30:r0  T31:r0
        lane 8   T0:r1   T1:r1   T2:r1   T3:r1
         ...

    ``.16x256b`` (16 lanes x 8 columns): the mma.sync m16n8 picture, lane
    t/4 + 8 ((j/2)%2), column 8 (j/4) + 2 (t%4) + j%2::

                 col 0   col 1   col 2   col 3  ...  col 7
        lane 0   T0:r0   T0:r1   T1:r0   T1:r1  ...  T3:r1
         ...
        lane 8   T0:r2   T0:r3   T1:r2   T1:r3  ...  T3:r3

    Raises:
        TraceError: an unknown shape or repeat count, or ``thread``/``reg``
            out of range.
    """
    if not 0 <= thread < 32:
        raise TraceError(f"tcgen05.ld fragment: thread {thread} out of range 0..31")
    return _coords(_tcgen05(shape, num, reg), thread, reg)


def tcgen05_ld_base(shape: str, lane: Reg | None = None) -> tuple[Reg, Reg]:
    """Emit the (lane, column) offsets of register 0 of ``tcgen05.ld.<shape>``
    as u32 registers (``lane`` defaults to ``%laneid``); register ``j`` adds
    ``tcgen05_ld_offset(shape, j, num)``."""
    layout = _tcgen05(shape, 1)
    return _base(layout, lane if lane is not None else _special("laneid"), bounded=True)


# --- swizzle ------------------------------------------------------------------------

_SPANS = {128: 7, 64: 3, 32: 1}


def swizzle(row: Any, col_bytes: Any, *, bytes: int = 128) -> Any:  # noqa: A002 - the ISA's word
    """Byte offset of (``row``, ``col_bytes``) in a tile of ``bytes``-wide rows
    under the ``bytes``-byte XOR swizzle: the 16-byte chunk index
    ``col_bytes // 16`` is XORed with ``(row * bytes >> 7) & (bytes // 16 - 1)``.

    That is the TMA / wgmma swizzle mode of the same name when the tile's
    rows are exactly the span wide (128B: chunk ^= row % 8; 64B: chunk ^=
    (row / 2) % 4; 32B: chunk ^= (row / 4) % 2), and it lets ``ldmatrix``
    read 8 rows of one chunk column without bank conflicts. 128B, rows 0-7
    (each cell the stored position of logical chunk c)::

        row 0:  c0 c1 c2 c3 c4 c5 c6 c7
        row 1:  c1 c0 c3 c2 c5 c4 c7 c6
        row 2:  c2 c3 c0 c1 c6 c7 c4 c5
         ...
        row 7:  c7 c6 c5 c4 c3 c2 c1 c0      (then repeats from row 8)

    ``row`` and ``col_bytes`` are Python ints (returns an int) or u32
    registers (emits the arithmetic; returns a u32 register). A tile wider
    than the span is stored as column panels of ``bytes``-wide rows.

    Raises:
        TraceError: ``bytes`` is not 128, 64 or 32, or a constant ``col_bytes``
            is outside the row.
    """
    if bytes not in _SPANS:
        raise TraceError(f"swizzle: bytes must be 128, 64 or 32, got {bytes!r}")
    mask = _SPANS[bytes]
    shift = {128: 0, 64: 1, 32: 2}[bytes]          # row -> bits 7.. of row * bytes
    if isinstance(row, int) and isinstance(col_bytes, int):
        if not 0 <= col_bytes < bytes:
            raise TraceError(f"swizzle: col_bytes {col_bytes} outside a {bytes}-byte row")
        return row * bytes + (col_bytes ^ (((row >> shift) & mask) << 4))
    if isinstance(col_bytes, int) and not 0 <= col_bytes < bytes:
        raise TraceError(f"swizzle: col_bytes {col_bytes} outside a {bytes}-byte row")
    row_r = row if isinstance(row, Reg) else emit_instruction("mov", ("u32",), (row,))
    sel = emit_instruction("shr", ("u32",), (row_r, shift)) if shift else row_r
    key = emit_instruction("shl", ("b32",), (emit_instruction("and", ("b32",), (sel, mask)), 4))
    col = emit_instruction("xor", ("b32",), (col_bytes, key) if isinstance(col_bytes, Reg) else (key, col_bytes))
    return emit_instruction("mad", ("lo", "u32"), (row_r, bytes, col))


def _special(name: str) -> Reg:
    """Read ``%laneid`` or ``%tid.x`` into a fresh u32 register."""
    obj: Any = special
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj()

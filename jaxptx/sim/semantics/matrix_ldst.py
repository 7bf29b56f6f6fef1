"""Emulator semantics: warp-level matrix loads and stores between shared
memory and registers (``ldmatrix``, ``stmatrix``; PTX ISA 9.7.14.5.15
"Warp-level matrix load instruction: ldmatrix" and 9.7.14.5.16
"Warp-level matrix store instruction: stmatrix").

Every form moves whole matrices whose rows are 16 bytes of shared memory,
each row at an address given by one lane: lanes ``R*j .. R*j+R-1`` give the
``R`` rows of matrix ``j`` (``R`` = 8, or 16 for ``.m16n16``); other lanes'
addresses are unused. A form is a map from (lane, register of the matrix,
element of the register) to (row, column) of the matrix as it lies in memory:

============================ ===== ================ ======================================
form                          rows  register         lane ``l`` (g = l/4, q = l%4) holds
============================ ===== ================ ======================================
``.m8n8 .b16``                8     2 x 16-bit       row g, columns 2q, 2q+1
``.m8n8 .trans .b16``         8     2 x 16-bit       rows 2q, 2q+1 of column g
``.m16n16 .trans`` (8-bit)    16    4 x 8-bit (x2)   register r: rows 4q..4q+3 of column
                                                     g + 8r (row g + 8r, columns 4q..4q+3
                                                     of the transpose)
``.m8n16`` (8-bit)            8     4 x 8-bit        row g, columns 4q..4q+3
``stmatrix .m16n8 .trans``    8     4 x 8-bit        byte k: row 2q + k%2 of column
                                                     g + 8(k/2) (the 16x8 matrix element
                                                     (g + 8(k/2), 2q + k%2), stored
                                                     transposed: 8 rows of 16 bytes)
============================ ===== ================ ======================================

The maps are :func:`jaxptx.isa.fragments.ldmatrix`'s. The 8-bit maps are the
ISA's Figures for ``.m16n16``/``.m8n16``/``.m16n8`` ("each thread loads 4
consecutive columns across 2 rows"); CUTLASS's
``SM100_U8x8_LDSM_T``/``SM100_SU4_DU8x16_x1_LDSM_N``/``SM100_U8x4_STSM_T``
copy traits encode the same maps. The 6- and 4-bit source formats
(``.b6x16_p32``, ``.b4x16_p64``) hold 16 elements packed in the low 12 or 8
bytes of a row, element ``t`` at bit ``6t`` / ``4t`` (the rest is padding);
each is unpacked into an 8-bit container as in PTX ISA 9.7.16.9.1 "Optional
Decompression": a 6-bit element in bits 0-5, a 4-bit element in bits 2-5,
the other bits zero.

A warp that executes one of these with fewer than 32 lanes is undefined
behaviour in PTX; the emulator raises, as for a row address that is not
16-byte aligned.
"""

from __future__ import annotations

import numpy as np

from ...isa import fragments as layouts
from ..core import fastpaths
from ..core.host import ShapeCache
from ..core.step import Step
from ..errors import SimError
from .fragments import groups, ordered
from .memory import check_cta_window
from .mma import registers, write_registers
from .registry import semantics

__all__ = ["ldmatrix", "stmatrix", "fragment_map"]

_NUM = {"x1": 1, "x2": 2, "x4": 4}


def fragment_map(shape: str, trans: bool, num: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(row, column)`` in memory of each (lane, register, element of the
    register), arrays of shape ``(32, registers, elements)``, matrix ``j``'s
    rows from ``R*j``: the cells of :func:`jaxptx.isa.fragments.ldmatrix`
    (see the module docstring)."""
    _, row, col = layouts.ldmatrix(shape, trans, num).grid
    return row, col


def _setup(s: Step, k: int) -> tuple[str, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """``(space, row addresses, slot, rank, warps, matrices, rows per
    matrix)``; raises when a row address that is used is not 16-byte aligned."""
    slot, rank, count = groups(s)
    space, addr = s.address(k)
    nmat = _NUM[s.mod("num")]
    rows = layouts.LDMATRIX_SHAPES[s.mod("shape")]
    used = rank < rows * nmat
    bad = used & ((addr % np.uint64(16)) != 0)
    if bad.any():
        raise SimError(f"{s.ins.name}: row address {int(addr[bad][0]):#x} of lane {int(rank[bad][0])} "
                       "is not 16-byte aligned")
    if space == "shared" and s.m.memory.cta_ranks is not None:     # .shared{::cta}: the executing CTA's rows
        check_cta_window(s, addr, "row address", used)
    return space, addr, slot, rank, count, nmat, rows


def _elements(row_bytes: np.ndarray, s: Step) -> np.ndarray:
    """The elements of 16-byte rows ``(n, 16)`` uint8 as register elements
    (uint32): 8 x 16-bit for ``.b16``, 16 bytes for ``.b8``, 16 unpacked
    6- or 4-bit elements for ``.b6x16_p32`` / ``.b4x16_p64``."""
    fmt = s.mod("src_fmt") or s.mod("type", "b16")
    n = len(row_bytes)
    if fmt == "b16":
        return row_bytes.view(np.uint16).reshape(n, 8).astype(np.uint32)
    if fmt == "b8":
        return row_bytes.astype(np.uint32)
    width = 6 if fmt == "b6x16_p32" else 4
    bits = np.unpackbits(row_bytes, axis=1, bitorder="little")[:, :16 * width].reshape(n, 16, width)
    values = (bits.astype(np.uint32) << np.arange(width, dtype=np.uint32)).sum(axis=2, dtype=np.uint32)
    return values if width == 6 else values << np.uint32(2)


def _positions(shape: str, trans: bool, nmat: int, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row (counting the rows of all matrices, matrix ``j``'s from ``R*j``)
    and column of each executing lane's (register, element):
    ``(n, registers, elements)`` each."""
    row, col = fragment_map(shape, trans, nmat)
    return row[rank], col[rank]


def _pack(elems: np.ndarray, bits: int) -> np.ndarray:
    """``(n, regs, per)`` elements (lowest first) as ``(n, regs)`` 32-bit registers."""
    shifts = np.arange(elems.shape[2], dtype=np.uint32) * np.uint32(bits)
    return np.bitwise_or.reduce(elems.astype(np.uint32) << shifts, axis=2).astype(np.uint32)


@semantics('ldmatrix')
def ldmatrix(s: Step) -> None:
    """``ldmatrix.sync.aligned`` (every shape, ``.num``, ``.trans`` and
    source format of the table): read each matrix's 16-byte rows from the
    addresses of its row lanes and hand every lane its fragment (module
    docstring). The result is written as bits; nothing is converted."""
    space, addr, slot, rank, count, nmat, rows = _setup(s, 1)
    src = rank < rows * nmat
    th, a = s.threads[src], addr[src]
    halves = [s.m.memory.load(space, a + np.uint64(8 * h), th, 8, s.ins.name) for h in range(2)]
    row_bytes = np.stack(halves, -1).astype(np.uint64, copy=False).view(np.uint8).reshape(-1, 16)
    if fastpaths.on():
        write_registers(s, 0, _gathered(s, row_bytes, slot, rank, count, nmat, rows, src))
        return
    elems = _elements(row_bytes, s)
    table = np.zeros((count, rows * nmat, elems.shape[1]), dtype=np.uint32)
    table[slot[src], rank[src]] = elems
    r, c = _positions(s.mod("shape"), s.mod("trans") is not None, nmat, rank)
    got = table[slot[:, None, None], r, c]
    write_registers(s, 0, _pack(got, 16 if s.mod("shape") == "m8n8" else 8))


def _gathered(s: Step, row_bytes: np.ndarray, slot: np.ndarray, rank: np.ndarray, count: int,
              nmat: int, rows: int, src: np.ndarray) -> np.ndarray:
    """The fast path of :func:`ldmatrix`: every lane's registers ``(n,
    registers)`` uint32 as one byte gather per warp from its matrices'
    rows (:func:`_byte_map`), the registers' bytes viewed as words. The
    bytes :func:`_pack` assembles from the same elements, little-endian."""
    fmt = s.mod("src_fmt") or s.mod("type", "b16")
    cells = row_bytes if fmt in ("b16", "b8") else _elements(row_bytes, s).astype(np.uint8)
    index = _byte_map(s.mod("shape"), s.mod("trans") is not None, nmat, 2 if fmt == "b16" else 1)
    whole = src.all() and rows * nmat == 32 and ordered(slot, rank, count, 32)
    if whole:       # the warps' lanes in order, every lane a row: the rows are the table
        table = cells.reshape(count, -1)
    else:
        table = np.zeros((count, rows * nmat, 16), dtype=np.uint8)
        table[slot[src], rank[src]] = cells
        table = table.reshape(count, -1)
    words = np.take(table, index, axis=1).view(np.uint32).reshape(count, 32, -1)
    return words.reshape(len(slot), -1) if whole else words[slot, rank]


def _byte_map(shape: str, trans: bool, nmat: int, width: int) -> np.ndarray:
    """Flat byte offset into a warp's rows (``16`` bytes each, matrix ``j``'s
    from row ``R*j``) of each byte of each lane's registers, in lane,
    register, byte order: ``(32 * registers * 4,)``. ``width`` is the bytes
    an element takes in a row (2 for ``.b16``, else 1: 8-bit containers)."""
    key = (shape, trans, nmat, width)
    hit = _BYTE_MAPS.get(key)
    if hit is None:
        row, col = fragment_map(shape, trans, nmat)
        start = row.astype(np.int64) * 16 + col.astype(np.int64) * width
        hit = _BYTE_MAPS.put(key, (start[..., None] + np.arange(width)).reshape(-1))
    return hit


_BYTE_MAPS = ShapeCache(1 << 20)


@semantics('stmatrix')
def stmatrix(s: Step) -> None:
    """``stmatrix.sync.aligned`` (``.m8n8 .b16`` with optional ``.trans``,
    ``.m16n8 .trans .b8``): the inverse of ``ldmatrix`` — each lane's
    registers hold its fragment (module docstring) and the row lanes give
    the addresses each matrix's 16-byte rows are stored to."""
    space, addr, slot, rank, count, nmat, rows = _setup(s, 0)
    shape = s.mod("shape")
    bits = 16 if shape == "m8n8" else 8
    per = 32 // bits
    regs = registers(s, 1)
    elems = (regs[:, :, None] >> (np.arange(per, dtype=np.uint32) * np.uint32(bits))) & np.uint32((1 << bits) - 1)
    r, c = _positions(shape, s.mod("trans") is not None, nmat, rank)
    dtype = np.uint16 if bits == 16 else np.uint8
    table = np.zeros((count, rows * nmat, 16 * 8 // bits), dtype=dtype)
    table[np.broadcast_to(slot[:, None, None], r.shape), r, c] = elems.astype(dtype)
    src = rank < rows * nmat
    th, a = s.threads[src], addr[src]
    words = np.ascontiguousarray(table[slot[src], rank[src]]).view(np.uint64)    # two 8-byte words a row
    for h in range(2):
        s.m.memory.store(space, a + np.uint64(8 * h), th, words[:, h], 8, s.ins.name)

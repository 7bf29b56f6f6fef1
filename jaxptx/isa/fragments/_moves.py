"""Fragments of the data-movement instructions: ``tcgen05.ld``/``st`` and
``ldmatrix``/``stmatrix``."""

from __future__ import annotations

import functools
import math

from ._layout import Digit, FragmentLayout, layout

__all__ = ["LDMATRIX_SHAPES", "TCGEN05_SHAPES", "ldmatrix", "tcgen05"]


# --- tcgen05.ld / tcgen05.st ------------------------------------------------------------------
# PTX ISA "Matrix fragments for tcgen05.ld/st": shape -> (thread digits,
# register digits of one .x1 repeat, 32-bit columns one repeat spans); rows
# are tensor-memory lanes relative to taddr. Each .xN repeat continues along
# the columns.

_TCGEN05 = {
    "32x32b": ((Digit(32, row=1),), (), 1),
    "16x64b": ((Digit(2, row=8), Digit(2, col=1), Digit(8, row=1)), (), 2),
    "16x128b": ((Digit(4, col=1), Digit(8, row=1)), (Digit(2, row=8),), 4),
    "16x256b": ((Digit(4, col=2), Digit(8, row=1)), (Digit(2, col=1), Digit(2, row=8)), 8),
    "16x32bx2": ((Digit(16, row=1),), (), 1),
}
# Registers per thread of one .x1 repeat of each shape.
TCGEN05_SHAPES = {shape: math.prod(d.size for d in regs) for shape, (_, regs, _) in _TCGEN05.items()}


@functools.cache
def tcgen05(shape: str, num: int = 1, packed: bool = False, split: int = 0) -> FragmentLayout:
    """The tensor-memory cells (row = lane, col = 32-bit column, relative to
    ``taddr``) of the registers of ``tcgen05.ld``/``st.<shape>.x<num>``.

    ``.32x32b``: thread ``t`` register ``j`` at (``t``, ``j``); ``.16x64b``:
    (``t/4 + 8 (t%2)``, ``2j + (t/2)%2``); ``.16x128b``: (``t/4 + 8 (j%2)``,
    ``4 (j/2) + t%4``); ``.16x256b``: (``t/4 + 8 ((j/2)%2)``, ``8 (j/4) +
    2 (t%4) + j%2``); ``.16x32bx2``: (``t%16``, ``j``), plus ``split``
    columns for threads 16-31.

    Args:
        shape: a key of :data:`TCGEN05_SHAPES`.
        num: the ``.x<num>`` repeat count.
        packed: ``.pack::16b`` / ``.unpack::16b``: each register covers
            two adjacent columns (its low and high 16 bits, elements 0 and 1).
        split: ``immHalfSplitoff`` of ``.16x32bx2``, added after the
            doubling that ``packed`` makes.

    Raises:
        ValueError: an unknown shape or a repeat count that is not a power of two.
    """
    if shape not in _TCGEN05:
        raise ValueError(f"tcgen05 fragment: expected a shape in {tuple(_TCGEN05)}, got {shape!r}")
    if num not in (1, 2, 4, 8, 16, 32, 64, 128):
        raise ValueError(f"tcgen05 fragment: .x{num} is not a repeat count (1, 2, 4, ..., 128)")
    thread, x1, span = _TCGEN05[shape]
    sequence = x1 + (Digit(num, col=span),)
    width = 2 if packed else 1
    thread = tuple(Digit(d.size, d.row, d.col * width) for d in thread)
    sequence = tuple(Digit(d.size, d.row, d.col * width) for d in sequence)
    if shape == "16x32bx2":
        thread += (Digit(2, col=split),)
    element = (Digit(2, col=1),) if packed else ()
    lanes = 32 if shape == "32x32b" else 16
    name = f"tcgen05.{shape}.x{num}{'.pack::16b' if packed else ''}"
    return layout(name, (1, lanes, span * num * width + split), thread, element + sequence, width)


# --- ldmatrix / stmatrix ----------------------------------------------------------------------
# PTX ISA "ldmatrix" / "stmatrix": (shape, .trans) -> (thread digits, digits
# of one matrix's elements, elements per register, columns of a matrix row).
# Matrix j of .x<num> follows in rows 8j.. (16j.. for .m16n16); its row
# addresses come from lanes R*j .. R*j+R-1.

_LDMATRIX = {
    ("m8n8", False): ((Digit(4, col=2), Digit(8, row=1)), (Digit(2, col=1),), 2, 8),
    ("m8n8", True): ((Digit(4, row=2), Digit(8, col=1)), (Digit(2, row=1),), 2, 8),
    ("m16n16", True): ((Digit(4, row=4), Digit(8, col=1)), (Digit(4, row=1), Digit(2, col=8)), 4, 16),
    ("m8n16", False): ((Digit(4, col=4), Digit(8, row=1)), (Digit(4, col=1),), 4, 16),
    ("m16n8", True): ((Digit(4, row=2), Digit(8, col=1)), (Digit(2, row=1), Digit(2, col=8)), 4, 16),
}
# Rows of one matrix (16-byte rows in memory) of each shape.
LDMATRIX_SHAPES = {"m8n8": 8, "m16n16": 16, "m8n16": 8, "m16n8": 8}


@functools.cache
def ldmatrix(shape: str, trans: bool = False, num: int = 1) -> FragmentLayout:
    """Where ``ldmatrix`` puts (and ``stmatrix`` takes) each element of
    ``num`` matrices, as (row, col) of the matrices stacked downwards as
    they lie in memory (rows of 16 bytes: 8 ``.b16`` or 16 8-bit columns).

    Lane ``l`` (g = l/4, q = l%4) holds: ``.m8n8``: row g, columns 2q, 2q+1
    (``.trans``: rows 2q, 2q+1 of column g); ``.m16n16`` (always
    transposed): register r holds rows 4q..4q+3 of column g + 8r;
    ``.m8n16``: row g, columns 4q..4q+3; ``stmatrix .m16n8`` (always
    transposed): byte e at row 2q + e%2, column g + 8 (e/2).

    Args:
        shape: a key of :data:`LDMATRIX_SHAPES`.
        trans: ``.trans`` (``m8n8`` only; the 8-bit shapes fix it).
        num: 1, 2 or 4 matrices.

    Raises:
        ValueError: an unknown shape or matrix count.
    """
    if shape not in LDMATRIX_SHAPES:
        raise ValueError(f"ldmatrix fragment: expected a shape in {tuple(LDMATRIX_SHAPES)}, got {shape!r}")
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix fragment: num must be 1, 2 or 4, got {num!r}")
    key = (shape, bool(trans)) if shape == "m8n8" else next(k for k in _LDMATRIX if k[0] == shape)
    thread, one, per, cols = _LDMATRIX[key]
    rows = LDMATRIX_SHAPES[shape]
    name = f"ldmatrix.{shape}{'.trans' if key[1] else ''}.x{num}"
    return layout(name, (1, rows * num, cols), thread, one + (Digit(num, row=rows),), per)

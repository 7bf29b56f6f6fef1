"""Blackwell tensor memory (PTX ISA "Tensor Memory"): per CTA, 128 lanes x
512 columns of 32-bit cells, which ``tcgen05.alloc`` hands out in blocks of
columns (all 128 lanes of each).

A tensor-memory address is 32 bits: the lane in bits 31-16, the column in
bits 15-0. The emulator keeps each CTA's cells as a ``(128, 512)`` uint32
array, made on the CTA's first use, and the CTA's allocations: which
columns each ``tcgen05.alloc`` holds and the PTX line that made it.
Reading or writing a cell in a column that no allocation holds is an error
(on hardware it is undefined behaviour), and so is a column still held when
the kernel ends (:func:`check_released`, run by the machine at exit).

Allocation: the ISA does not say where the allocator places a block. The
emulator takes the lowest free block aligned to its own size (the sizes are
powers of two), so results are deterministic and a program that assumes
natural alignment works. Newly allocated cells read as zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..core import fastpaths
from ..errors import SimError

if TYPE_CHECKING:
    from ..core.view import MachineView
    from ..core.step import Step

__all__ = ["LANES", "COLUMNS", "read", "write", "allocate", "deallocate", "relinquish", "check_released",
           "held_columns", "lane_of", "column_of"]

LANES = 128
"""Lanes (rows) of one CTA's tensor memory."""
COLUMNS = 512
"""32-bit columns of one CTA's tensor memory."""


def lane_of(address: int) -> int:
    """The lane of a tensor-memory address (bits 31-16)."""
    return (int(address) >> 16) & 0xFFFF


def column_of(address: int) -> int:
    """The column of a tensor-memory address (bits 15-0)."""
    return int(address) & 0xFFFF


@dataclass
class _Block:
    """One allocation: ``count`` columns from ``column``, made at ``where``."""
    column: int
    count: int
    where: str


@dataclass
class _Cta:
    """One CTA's tensor memory: cells, which columns are held, allocations."""
    cells: np.ndarray = field(default_factory=lambda: np.zeros((LANES, COLUMNS), dtype=np.uint32))
    held: np.ndarray = field(default_factory=lambda: np.zeros(COLUMNS, dtype=bool))
    blocks: list[_Block] = field(default_factory=list)
    reserved: list[_Block] = field(default_factory=list)   # a cta_group::2 peer's alloc, not yet ours
    relinquished: str | None = None      # where tcgen05.relinquish_alloc_permit ran


def _state(m: "MachineView") -> dict[int, _Cta]:
    """The machine's tensor memory by linear CTA index (made on first use)."""
    state = getattr(m, "_tensor_memory", None)
    if state is None:
        state = m._tensor_memory = {}
        m.exit_checks.append(check_released)
    return state


def _cta(m: "MachineView", cta: int) -> _Cta:
    state = _state(m)
    c = state.get(cta)
    if c is None:
        if not 0 <= cta < m.nctas:
            raise SimError(f"tensor memory: CTA {cta} is not in the grid ({m.nctas} CTAs)")
        c = state[cta] = _Cta()
    return c


def _cells(s: "Step", cta: int, lanes: np.ndarray, cols: np.ndarray, what: str) -> tuple[_Cta, np.ndarray, np.ndarray]:
    """Check ``(lanes, cols)`` against CTA ``cta``'s allocations."""
    lanes, cols = np.broadcast_arrays(np.asarray(lanes, dtype=np.int64), np.asarray(cols, dtype=np.int64))
    c = _cta(s.m, cta)
    if lanes.size == 0:
        return c, lanes, cols
    if fastpaths.on():
        # The usual access: in range, every column in [lo, hi] held.
        lo, hi = int(cols.min()), int(cols.max())
        if 0 <= lo and hi < COLUMNS and 0 <= int(lanes.min()) and int(lanes.max()) < LANES and \
                c.held[lo:hi + 1].all():
            return c, lanes, cols
    bad = (lanes < 0) | (lanes >= LANES)
    if bad.any():
        at = np.flatnonzero(bad.ravel())[0]
        raise SimError(f"{what}: tensor memory lane {lanes.ravel()[at]} (address "
                       f"{_address(lanes.ravel()[at], cols.ravel()[at])}) of CTA {cta} is outside its "
                       f"{LANES} lanes")
    outside = (cols < 0) | (cols >= COLUMNS)
    unheld = outside.copy()
    unheld[~outside] = ~c.held[cols[~outside]]
    if unheld.any():
        at = np.flatnonzero(unheld.ravel())[0]
        col = int(cols.ravel()[at])
        raise SimError(f"{what}: tensor memory column {col} (address {_address(lanes.ravel()[at], col)}) of "
                       f"CTA {cta} is not allocated; allocated: {_held_text(c)}")
    return c, lanes, cols


def _address(lane: int, col: int) -> str:
    return f"0x{((int(lane) & 0xFFFF) << 16) | (int(col) & 0xFFFF):08x}"


def _held_text(c: _Cta) -> str:
    if not c.blocks:
        return "none"
    return ", ".join(f"columns {b.column}..{b.column + b.count - 1}" for b in sorted(c.blocks, key=lambda b: b.column))


def read(s: "Step", cta: int, lanes: np.ndarray, cols: np.ndarray, what: str) -> np.ndarray:
    """32-bit cells of CTA ``cta``'s tensor memory.

    Args:
        s: the executing instruction (its machine holds the tensor memory).
        cta: linear CTA index in the grid (``thread // ntid``).
        lanes, cols: absolute lane and column of each cell (broadcast together).
        what: the instruction and operand, for errors.

    Returns:
        uint32 array of the broadcast shape of ``lanes`` and ``cols``.

    Raises:
        SimError: a lane >= 128, or a column no allocation of the CTA holds.
    """
    c, lanes, cols = _cells(s, cta, lanes, cols, what)
    return c.cells[lanes, cols]


def write(s: "Step", cta: int, lanes: np.ndarray, cols: np.ndarray, values: np.ndarray, what: str) -> None:
    """Store 32-bit ``values`` (broadcast to the cells' shape) into CTA
    ``cta``'s tensor memory at ``(lanes, cols)``; where a cell appears twice
    the later value wins. Raises like :func:`read`."""
    c, lanes, cols = _cells(s, cta, lanes, cols, what)
    c.cells[lanes, cols] = np.broadcast_to(np.asarray(values).astype(np.uint32, copy=False), lanes.shape)


def block(s: "Step", cta: int, lane: int, col: int, rows: int, cols: int, what: str) -> np.ndarray:
    """CTA ``cta``'s cells ``[lane, lane + rows) x [col, col + cols)`` as a
    writable view (read it, assign into it): the cells :func:`read` gives
    for that rectangle, without an index per cell. Raises like :func:`read`
    (through it) when a cell is outside the lanes or unallocated."""
    c = _cta(s.m, cta)
    if 0 <= lane and lane + rows <= LANES and 0 <= col and col + cols <= COLUMNS and \
            c.held[col:col + cols].all():
        return c.cells[lane:lane + rows, col:col + cols]
    read(s, cta, lane + np.arange(rows)[:, None], col + np.arange(cols)[None, :], what)     # raises
    raise AssertionError("unreachable: read accepted cells block refused")


def allocate(m: "MachineView", cta: int, count: int, where: str, peer: int | None = None) -> int:
    """Allocate ``count`` columns (a power of two, 32..512) in CTA ``cta``.

    With ``peer`` (``.cta_group::2``: the other CTA of the pair), the block
    lies at the same columns in both CTAs. The two warps' allocs are one
    collective operation; the emulator runs them one after the other, so
    the first allocates in both CTAs and reserves the peer's block, and the
    peer's alloc takes that reservation.

    Returns:
        The first column of the block.

    Raises:
        SimError: a bad count, a CTA that relinquished its permit, a peer
            reservation of another size, or no free block (on hardware the
            alloc would wait; in the emulator no other thread runs
            meanwhile, so it would wait forever).
    """
    if count < 32 or count > COLUMNS or count & (count - 1):
        raise SimError(f"{where}: tcgen05.alloc of {count} columns; expected a power of two from 32 to {COLUMNS}")
    c = _cta(m, cta)
    if c.relinquished is not None:
        raise SimError(f"{where}: CTA {cta} allocates tensor memory after giving up its allocation permit "
                       f"({c.relinquished})")
    if peer is not None and c.reserved:
        block = c.reserved.pop(0)
        if block.count != count:
            raise SimError(f"{where}: tcgen05.alloc.cta_group::2 of {count} columns in CTA {cta}, but its peer "
                           f"CTA {peer} allocated {block.count} ({block.where}); the pair must ask for the same")
        c.blocks.append(_Block(block.column, count, where))
        return block.column
    states = [c] if peer is None else [c, _cta(m, peer)]
    for column in range(0, COLUMNS, count):
        if not any(x.held[column:column + count].any() for x in states):
            for x in states:
                x.held[column:column + count] = True
                x.cells[:, column:column + count] = 0
            c.blocks.append(_Block(column, count, where))
            if peer is not None:
                states[1].reserved.append(_Block(column, count, where))
            return column
    held = "; ".join(f"CTA {k} holds {_held_text(x)}" for k, x in zip([cta, peer], states))
    raise SimError(f"{where}: tcgen05.alloc of {count} columns cannot be satisfied: {held} (on hardware the "
                   f"alloc waits for columns to be freed; here nothing else runs, so it would wait forever)")


def deallocate(m: "MachineView", cta: int, column: int, count: int, where: str) -> None:
    """Free the block of ``count`` columns at ``column`` in CTA ``cta``.

    Raises:
        SimError: no allocation of exactly that block (a double free, or
            columns that were never allocated or were allocated differently).
    """
    c = _cta(m, cta)
    match = [b for b in c.blocks if b.column == column and b.count == count]
    if not match:
        raise SimError(f"{where}: tcgen05.dealloc of {count} columns at column {column} of CTA {cta}: no "
                       f"allocation holds exactly these columns (freed twice, or never allocated?); "
                       f"allocated: {_held_text(c)}")
    c.blocks.remove(match[0])
    c.held[column:column + count] = False


def relinquish(m: "MachineView", cta: int, where: str) -> None:
    """Give up CTA ``cta``'s allocation permit: any later ``tcgen05.alloc``
    there is an error (PTX ISA, tcgen05.relinquish_alloc_permit)."""
    c = _cta(m, cta)
    if c.relinquished is None:
        c.relinquished = where


def held_columns(m: "MachineView", cta: int) -> list[tuple[int, int]]:
    """``(first column, count)`` of each allocation CTA ``cta`` holds, by column."""
    state = getattr(m, "_tensor_memory", None) or {}
    c = state.get(cta)
    return [] if c is None else sorted((b.column, b.count) for b in c.blocks)


def check_released(m: "MachineView") -> None:
    """At kernel exit: every CTA must have freed its tensor memory (PTX ISA,
    tcgen05.alloc: all allocated columns must be deallocated before the
    kernel exits).

    Raises:
        SimError: naming the first CTA still holding columns and the allocation's PTX line.
    """
    state = sorted((getattr(m, "_tensor_memory", None) or {}).items())
    for cta, c in state:
        if c.reserved:
            b = c.reserved[0]
            raise SimError(f"{m.program.name}: CTA {cta} exited without its half of the tcgen05.alloc.cta_group::2 "
                           f"that its peer made ({b.where}, columns {b.column}..{b.column + b.count - 1})")
    for cta, c in state:
        if c.blocks:
            b = min(c.blocks, key=lambda b: b.column)
            more = f" (and {len(c.blocks) - 1} more allocation(s))" if len(c.blocks) > 1 else ""
            raise SimError(f"{m.program.name}: CTA {cta} exited still holding tensor memory columns "
                           f"{b.column}..{b.column + b.count - 1}, allocated by {b.where}{more}; "
                           f"tcgen05.dealloc every allocation before the kernel exits")

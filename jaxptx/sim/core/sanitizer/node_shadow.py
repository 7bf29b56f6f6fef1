"""Shadow state of one global buffer as the grids of a node access it.

Each grid's sanitizer checks its own threads' accesses against each other
(:mod:`.global_shadow`). What is left are pairs of accesses by different
grids (different devices, or two grids of one device), kept here per cell of
``grain`` bytes:

- the last plain write, by any grid: its grid, grid-wide thread, stamp
  (the thread's own clock entry then) and PC;
- per grid, the last of its plain reads, of its strong reads and of its
  strong writes (atomics, ``.relaxed``/``.release`` stores at gpu or sys
  scope) since that write, each with its thread, stamp, PC and whether it
  had system scope (strong accesses of two devices are morally strong only
  when both are ``.sys``).

Like the per-warp read records of one grid, a grid keeps its *last* access
of each kind per cell: a write that another grid orders after that one is
not compared with the same grid's earlier ones.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NodeShadow", "Slot", "KINDS"]

KINDS = ("read", "strong read", "strong write")
"""The per-grid records of a cell, in the order :attr:`NodeShadow.slots` holds them."""


class Slot:
    """One grid's last access of one kind, per cell (``thread`` -1: none)."""

    __slots__ = ("thread", "stamp", "pc", "sys")

    def __init__(self, n: int) -> None:
        self.thread = np.full(n, -1, dtype=np.int64)
        self.stamp = np.zeros(n, dtype=np.int32)
        self.pc = np.zeros(n, dtype=np.int32)
        self.sys = np.zeros(n, dtype=bool)

    def put(self, idx: np.ndarray, threads: np.ndarray, stamps: np.ndarray, pc: int, sys: bool) -> None:
        """Record accesses of cells ``idx``."""
        self.thread[idx] = threads
        self.stamp[idx] = stamps
        self.pc[idx] = pc
        self.sys[idx] = sys

    def split(self, ratio: int) -> None:
        """Each cell becomes ``ratio`` cells with its history."""
        for name in self.__slots__:
            setattr(self, name, np.repeat(getattr(self, name), ratio))


class NodeShadow:
    """The node's records of one global buffer (``n`` cells of ``grain`` bytes)."""

    def __init__(self, n: int, grain: int) -> None:
        self.grain = grain
        self.w_grid = np.full(n, -1, dtype=np.int16)
        self.w_thread = np.zeros(n, dtype=np.int64)
        self.w_stamp = np.zeros(n, dtype=np.int32)
        self.w_pc = np.zeros(n, dtype=np.int32)
        self.slots: dict[int, list[Slot | None]] = {}      # grid -> one Slot (or None) per KINDS

    def slot(self, grid: int, kind: int) -> Slot:
        """Grid ``grid``'s records of kind ``KINDS[kind]``, made if needed."""
        mine = self.slots.setdefault(grid, [None] * len(KINDS))
        if mine[kind] is None:
            mine[kind] = Slot(len(self.w_grid))
        return mine[kind]

    def write(self, idx: np.ndarray, grid: int, threads: np.ndarray, stamps: np.ndarray, pc: int) -> None:
        """A plain write of cells ``idx``: the last write; what came before
        it is forgotten (ordered before it, or reported)."""
        self.w_grid[idx] = grid
        self.w_thread[idx] = threads
        self.w_stamp[idx] = stamps
        self.w_pc[idx] = pc
        for mine in self.slots.values():
            for s in mine:
                if s is not None:
                    s.thread[idx] = -1

    def split(self, grain: int) -> None:
        """Finer cells of ``grain`` bytes, each with its cell's history."""
        ratio = self.grain // grain
        if ratio <= 1:
            return
        for name in ("w_grid", "w_thread", "w_stamp", "w_pc"):
            setattr(self, name, np.repeat(getattr(self, name), ratio))
        for mine in self.slots.values():
            for s in mine:
                if s is not None:
                    s.split(ratio)
        self.grain = grain

"""Shadow state of one global buffer: who accessed each cell, when.

Global memory is checked both ways PTX's memory model orders it:

- **between CTAs**, by the CTA of the last write (``w_cta``), of the plain
  reads since (``r_cta``; -2: several CTAs) and of the gpu-scope strong
  accesses since (``s_cta``), each with the gpu-fence epoch of its CTA then
  (kernels with gpu-scope fences or releases only: see :mod:`.memory`);
- **within a CTA**, by the thread records of :class:`.shadow.CellRecords`
  (the last write's CTA-local thread, stamp and PC; the last reading lane
  per warp; the last strong access per warp), checked with the CTA's
  vector clocks (:mod:`.clocks`) as shared memory is. The records of a cell
  are those of one CTA only while its CTA tags say so: ``w_cta`` for the
  write, ``r_cta`` for the reads and ``a_cta`` for the strong accesses
  (-2: several CTAs; then the thread records are not consulted, and what
  matters is the check between CTAs).

A ``.cta``-scoped strong access is strong within its CTA and plain between
CTAs (it orders nothing there): its write is kept as the last write,
marked strong (``w_atomic``), and its read with the strong accesses.

As in shared memory, strong loads are kept with the atomics (one slot per
warp), so a plain load after another thread's strong load of the same
bytes, unordered, is reported though neither writes; and a store of the
value already there by another thread (not a race outside ``"strict"``)
still becomes the last write.
"""

from __future__ import annotations

import numpy as np

from .shadow import CellRecords
from .values import increasing, pack_at, repeated

__all__ = ["GlobalShadow"]


class GlobalShadow(CellRecords):
    """The per-cell records of one global buffer (``n`` cells of ``grain``
    bytes); ``epochs``: keep the CTAs' gpu-fence epochs of the accesses."""

    def __init__(self, n: int, ntid: int, grain: int, epochs: bool) -> None:
        super().__init__(n, ntid, grain)
        self.ntid = ntid
        self.w_cta = np.full(n, -1, dtype=np.int32)     # the last write's CTA
        self.r_cta: np.ndarray | None = None            # the plain reads' since (-2: several; made at the first)
        self.r_at = np.zeros(n, dtype=np.int64)         # the last of them: thread << 20 | pc
        self.w_epoch = np.zeros(n, dtype=np.int32) if epochs else None
        self.r_epoch = np.zeros(n, dtype=np.int32) if epochs else None
        # made at the first strong access: the CTA of the gpu-scope strong
        # accesses since the last write and the last one (thread << 20 | pc);
        # the CTA of the strong accesses of any scope in the atomics slots
        self.s_cta = self.s_at = self.a_cta = None
        self.scratch: np.ndarray | None = None           # for repeats()
        self.read_any = False         # whether any read (plain or strong) was recorded (else no r_cta)

    def strong_records(self) -> None:
        """Make the records of strong accesses, if not yet made."""
        if self.s_cta is None:
            n = len(self.w_cta)
            self.s_cta = np.full(n, -1, dtype=np.int32)
            self.s_at = np.zeros(n, dtype=np.int64)
            self.a_cta = np.full(n, -1, dtype=np.int32)

    def w_at(self, cell: int) -> int:
        """The last write of ``cell`` as thread << 20 | pc (global thread)."""
        return int(pack_at(int(self.w_cta[cell]) * self.ntid + int(self.w_tid[cell]), int(self.w_pc[cell])))

    def repeats(self, idx: np.ndarray) -> bool:
        """Whether a cell appears twice in ``idx`` (two passes over a
        scratch array, not a sort; none for increasing cells)."""
        if increasing(idx):
            return False
        if self.scratch is None or len(self.scratch) != len(self.w_cta):
            self.scratch = np.zeros(len(self.w_cta), dtype=np.int64)
        return repeated(idx, self.scratch)

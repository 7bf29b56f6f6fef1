"""Shadow state of shared memory: who wrote and read each byte, when.

Per byte (of every CTA's shared memory): the last write (CTA-local thread,
its clock stamp, PC; or an async-proxy write), whether it is initialised,
whether a ``fence.proxy.async`` has ordered its generic write before
async-proxy reads, and what is still in flight into it (a ``cp.async``
before its ``wait_group``, a TMA copy before its mbarrier phase). Reads
since the last write are kept per (byte, warp): the last reading lane of
each warp and its stamp, so a write checks every warp's reads in one
vectorised comparison (with a second slot per warp for an earlier read by
another lane that the last reader did not come after). An async-proxy read (``wgmma``, ``tcgen05.mma``, a
TMA store's source) is "in flight" (``flying``) until the issuing thread
waits for it; then it is recorded as a read stamped with the clock of the
wait.

A conflict is two accesses to one byte by different threads, at least one
a write (atomics do not conflict with atomics), where the earlier one's
stamp is not known to the later thread (:mod:`.clocks`). Accesses to
another CTA's shared memory (distributed shared memory in a cluster) are
checked for initialisation only: clocks are kept per CTA.
"""

from __future__ import annotations

import numpy as np

from .values import distinct

__all__ = ["SharedShadow", "ASYNC", "CP_ASYNC", "TMA"]

ASYNC = -2                  # w_tid of a byte last written by the async proxy
CP_ASYNC, TMA = 1, 2        # pend: a cp.async copy, a TMA / bulk copy in flight


class SharedShadow:
    """The per-byte state of a launch's shared memory (all CTAs)."""

    def __init__(self, nctas: int, size: int, ntid: int) -> None:
        n = nctas * size
        self.size = size
        self.warps = max(1, (ntid + 31) // 32)
        self.init = np.zeros(n, dtype=bool)
        self.w_tid = np.full(n, -1, dtype=np.int32)
        self.w_clock = np.zeros(n, dtype=np.int32)
        self.w_pc = np.full(n, -1, dtype=np.int32)
        self.w_atomic = np.zeros(n, dtype=bool)
        self.fenced = np.zeros(n, dtype=bool)
        self.flying = np.zeros(n, dtype=bool)          # an async read not yet waited for
        self.mark = np.zeros(n, dtype=bool)            # scratch for set membership (kept all False)
        self.who = np.zeros(n, dtype=np.int64)         # scratch: the writer of each marked byte
        self.pend = np.zeros(n, dtype=np.int8)
        self.pend_key = np.zeros(n, dtype=np.int64)    # cp.async: global thread; TMA: mbarrier word
        self.pend_seq = np.zeros(n, dtype=np.int64)    # cp.async: group; TMA: completions at issue
        # two slots per warp: its last reading lane, and an earlier read by
        # another lane of the warp that the last one did not come after
        # (the second slots are rare: ``has2`` marks the bytes that use any).
        # Slot-major, so that the bytes one warp reads lie side by side.
        self.r_tid = np.full((2 * self.warps, n), -1, dtype=np.int16 if ntid < 2**15 else np.int32)
        self.r_clock = np.zeros((2 * self.warps, n), dtype=np.int32)
        self.r_pc = np.zeros((2 * self.warps, n), dtype=np.int32)
        self.has2 = np.zeros(n, dtype=bool)
        self.reading_warps = np.zeros(0, dtype=np.int64)   # the warps whose first slots any read took
        # distributed shared memory (clusters only): the CTA of the last write
        # and its cluster-barrier epoch, the cluster ranks that read since
        self.x_writer = self.x_wepoch = self.x_readers = self.x_repoch = self.x_at = None
        self.a_tid: np.ndarray | None = None           # atomics: last atomic lane per warp
        self.a_clock: np.ndarray | None = None
        self.a_pc: np.ndarray | None = None

    def cluster_arrays(self) -> None:
        """Allocate the distributed-shared-memory records."""
        n = len(self.init)
        self.x_writer = np.full(n, -1, dtype=np.int32)
        self.x_wepoch = np.full(n, -1, dtype=np.int32)
        self.x_readers = np.zeros(n, dtype=np.int64)
        self.x_repoch = np.full(n, -1, dtype=np.int32)
        self.x_at = np.zeros(n, dtype=np.int64)         # thread << 20 | pc of the last access

    def record_atomic(self, idx: np.ndarray, tid: np.ndarray, clock: np.ndarray, pc: int) -> None:
        """An atomic (or strong) access of bytes ``idx`` by CTA-local
        threads ``tid``: each takes its warp's atomic slot (allocated on first use)."""
        if self.a_tid is None:
            self.a_tid = np.full((self.warps, len(self.init)), -1, dtype=self.r_tid.dtype)
            self.a_clock = np.zeros(self.a_tid.shape, dtype=np.int32)
            self.a_pc = np.zeros(self.a_tid.shape, dtype=np.int32)
        warp = tid // 32
        self.a_tid[warp, idx] = tid
        self.a_clock[warp, idx] = clock
        self.a_pc[warp, idx] = pc

    def reader(self, byte: int, slot: int) -> tuple[int, int]:
        """``(CTA-local thread, PC)`` of the read kept in ``slot`` of ``byte``."""
        return int(self.r_tid[slot, byte]), int(self.r_pc[slot, byte])

    def atomic_access(self, byte: int, slot: int) -> tuple[int, int]:
        """``(CTA-local thread, PC)`` of the atomic kept in ``slot`` of ``byte``."""
        return int(self.a_tid[slot, byte]), int(self.a_pc[slot, byte])

    def record_write(self, idx: np.ndarray, tid: np.ndarray, clock: np.ndarray, pc: int) -> None:
        """A plain write of bytes ``idx`` by CTA-local threads ``tid`` stamped ``clock``."""
        at = span(idx)
        self.init[at] = True
        self.w_tid[at] = tid
        self.w_clock[at] = clock
        self.w_pc[at] = pc
        self.w_atomic[at] = False
        self.fenced[at] = False
        self.pend[at] = 0
        self.r_tid[_cells(self.reading_warps, at)] = -1    # (stale stamps behind a -1 lane are never read)
        second = idx[self.has2[at]]
        if len(second):
            self.r_tid[self.warps:, second] = -1
            self.has2[second] = False
        if self.a_tid is not None:
            self.a_tid[:, at] = -1

    def record_read(self, idx: np.ndarray, tid: np.ndarray, clock: np.ndarray | np.int32, pc: int,
                    knows=None) -> None:
        """Reads of bytes ``idx`` by CTA-local threads ``tid``: each takes its
        warp's slot; the read it displaces moves to the warp's second slot
        when the new reader did not come after it (``knows(rows, lanes)``:
        the new readers' clock entries). Lanes of one warp reading a byte in
        the same instruction are unordered: the last two keep both slots."""
        if len(idx) and tid[0] == tid[-1] and (tid == tid[0]).all():
            self._read_by_one(idx, int(tid[0]), clock, pc, knows)
            return
        warp = tid // 32
        self._reading(distinct(warp))
        clock = np.broadcast_to(np.asarray(clock, dtype=np.int32), idx.shape)
        if knows is not None:
            old = self.r_tid[warp, idx].astype(np.int64)
            rows = np.nonzero((old >= 0) & (old != tid))[0]
            if len(rows):
                rows = rows[self.r_clock[warp[rows], idx[rows]] > knows(rows, old[rows])]
                self._second(idx[rows], warp[rows], old[rows], self.r_clock[warp[rows], idx[rows]],
                             self.r_pc[warp[rows], idx[rows]])
        if len(idx) > 1:                    # (one reader took the branch above: no ties)
            order = np.lexsort((tid, warp, idx))
            i, w, t = idx[order], warp[order], tid[order]
            new_group = np.r_[True, (i[1:] != i[:-1]) | (w[1:] != w[:-1])]
            last = np.r_[new_group[1:], True]
            before = np.nonzero(last[1:] & ~new_group[1:] & (t[1:] != t[:-1]))[0]   # next to a group's last
            if len(before):
                rows = order[before]
                self._second(idx[rows], warp[rows], tid[rows], clock[rows], pc)
            rows = order[last]
            idx, warp, tid, clock = idx[rows], warp[rows], tid[rows], clock[rows]
        self.r_tid[warp, idx] = tid
        self.r_clock[warp, idx] = clock
        self.r_pc[warp, idx] = pc

    def _read_by_one(self, idx: np.ndarray, tid: int, clock, pc: int, knows) -> None:
        """:meth:`record_read` for one reading thread (an async operand
        read, a single lane): one warp's slots, scalar stamps."""
        w = tid // 32
        self._reading(np.array([w]))
        at = span(idx)
        lanes, stamps, pcs = self.r_tid[w], self.r_clock[w], self.r_pc[w]
        if knows is not None:
            old = lanes[at]
            rows = np.flatnonzero((old >= 0) & (old != tid))
            if len(rows):
                b = idx[rows]
                rows = rows[stamps[b] > knows(rows, old[rows].astype(np.int64))]
                if len(rows):
                    b = idx[rows]
                    self._second(b, np.full(len(b), w), lanes[b], stamps[b], pcs[b])
        lanes[at] = tid
        stamps[at] = clock
        pcs[at] = pc

    def _reading(self, warps: np.ndarray) -> None:
        if not np.isin(warps, self.reading_warps).all():
            self.reading_warps = np.union1d(self.reading_warps, warps)

    def _second(self, idx: np.ndarray, warp: np.ndarray, tid: np.ndarray, clock: np.ndarray, pc) -> None:
        col = self.warps + warp
        self.has2[idx] = True
        self.r_tid[col, idx] = tid
        self.r_clock[col, idx] = clock
        self.r_pc[col, idx] = pc

    def unordered_reads(self, idx: np.ndarray, tid: np.ndarray, knows) -> np.ndarray:
        """For each byte, the slot of a read by another thread that the
        writer has not synchronised with (``knows(rows, readers)``: the
        writer of row ``rows``' clock entries for ``readers``), or -1."""
        w = self.warps
        at = span(idx)
        rows = self.reading_warps
        out = _unordered(self.r_tid[_cells(rows, at)], self.r_clock[_cells(rows, at)], tid, knows)
        out = np.where(out >= 0, rows[np.maximum(out, 0)] if len(rows) else -1, -1)
        two = np.flatnonzero(self.has2[at] & (out < 0))
        if len(two):
            second = _unordered(self.r_tid[w:, idx[two]], self.r_clock[w:, idx[two]], tid[two],
                                lambda rows, lanes: knows(two[rows], lanes))
            out[two] = np.where(second >= 0, second + w, -1)
        return out

    def unordered_atomics(self, idx: np.ndarray, tid: np.ndarray, knows) -> np.ndarray:
        """As :meth:`unordered_reads`, for the atomics on each byte."""
        if self.a_tid is None:
            return np.full(len(idx), -1)
        at = span(idx)
        return _unordered(self.a_tid[:, at], self.a_clock[:, at], tid, knows)

    def cta_range(self, cta: int) -> slice:
        """The flat byte range of CTA ``cta``'s shared memory."""
        return slice(cta * self.size, (cta + 1) * self.size)


def _cells(rows: np.ndarray, at: np.ndarray | slice) -> tuple:
    """The index of slot ``rows`` by bytes ``at`` of a slot-major record."""
    return (rows, at) if isinstance(at, slice) else (rows[:, None], at)


def span(idx: np.ndarray) -> np.ndarray | slice:
    """``idx`` as a slice when it is one increasing run of consecutive
    bytes (then gathers and scatters through it are copies), else itself."""
    n = len(idx)
    if n > 1 and idx[-1] - idx[0] == n - 1 and idx[1] - idx[0] == 1 and (np.diff(idx) == 1).all():
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _unordered(lanes: np.ndarray, stamps: np.ndarray, tid: np.ndarray, knows) -> np.ndarray:
    """Per byte (a column of slot-major records), the first slot holding an
    access by another lane whose stamp the byte's accessor does not know, or -1."""
    out = np.full(lanes.shape[1], -1)
    if out.size == 0:
        return out
    slots, rows = np.nonzero((lanes >= 0) & (lanes != tid))
    if len(rows) == 0:
        return out
    others = lanes[slots, rows].astype(np.int64)
    bad = stamps[slots, rows] > knows(rows, others)
    if bad.any():
        rows, slots = rows[bad], slots[bad]
        order = np.lexsort((slots, rows))       # the first slot of each byte
        rows, slots = rows[order], slots[order]
        first = np.r_[True, rows[1:] != rows[:-1]]
        out[rows[first]] = slots[first]
    return out

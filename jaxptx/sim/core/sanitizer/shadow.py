"""Shadow state of shared memory: who wrote and read each byte, when.

The state is kept per cell of ``grain`` bytes (:data:`.values.GRAIN` at
first, split when an access covers part of a cell; below, "byte" means
cell). Per byte (of every CTA's shared memory): the last write (CTA-local
thread, its clock stamp, PC; or an async-proxy write), whether it is initialised,
whether a ``fence.proxy.async`` has ordered its generic write before
async-proxy reads, and what is still in flight into it (a ``cp.async``
before its ``wait_group``, a TMA copy before its mbarrier phase). Reads
since the last write are kept per (byte, warp): the last reading lane of
each warp, its stamp and PC packed in one 64-bit record (:class:`Slots`),
with a second slot per warp for an earlier read by another lane that the
last reader did not come after. A warp's slots are allocated when it first
reads, so shared memory only the async proxy reads costs one slot per
issuing warp. An async-proxy read (``wgmma``, ``tcgen05.mma``, a TMA
store's source) is "in flight" (``flying``) until the issuing thread
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

from .values import grain_of, increasing, repeated

__all__ = ["SharedShadow", "Slots", "ASYNC", "CP_ASYNC", "TMA"]

ASYNC = -2                  # w_tid of a byte last written by the async proxy
CP_ASYNC, TMA = 1, 2        # pend: a cp.async copy, a TMA / bulk copy in flight


class Slots:
    """Per-byte access records in numbered slots: ``stamp << 36 | pc << 16
    | (lane + 1)``, 0 for none (stamps stay below 2**27 releases, PCs below
    2**20, lanes below 2**16). A slot gets its row of storage when first
    written, so slots nothing uses cost nothing; records of many slots are
    gathered and scattered in one flat operation."""

    def __init__(self, count: int, n: int) -> None:
        self.n = n
        self.row_of = np.full(count, -1, dtype=np.int64)
        self.store = np.zeros((0, n), dtype=np.int64)
        self.scratch = np.zeros(0, dtype=np.int64)      # for repeats(), as large as the storage
        self.used: list[int] = []               # the slots with storage, in order

    def split(self, ratio: int) -> None:
        """Each byte's records now stand for ``ratio`` bytes (see
        :meth:`SharedShadow.split`)."""
        self.store = np.repeat(self.store, ratio, axis=1)
        self.n *= ratio
        self.scratch = np.zeros(0, dtype=np.int64)

    def rows(self, slots: np.ndarray | int) -> np.ndarray:
        """The storage rows of ``slots``, given storage if they had none."""
        rows = self.row_of[slots]
        if np.any(rows < 0):
            new = [int(s) for s in np.unique(np.asarray(slots)[np.asarray(rows) < 0])]
            have = len(self.used)
            if have + len(new) > len(self.store):
                grown = np.zeros((max(have + len(new), 2 * len(self.store)), self.n), dtype=np.int64)
                grown[:have] = self.store[:have]
                self.store = grown
            self.row_of[new] = np.arange(have, have + len(new))
            self.used = sorted(self.used + new)
            rows = self.row_of[slots]
        return rows

    def cells(self, slots: np.ndarray | int, idx: np.ndarray) -> np.ndarray:
        """Flat indices of bytes ``idx`` in ``slots`` (one, or one per byte),
        for :meth:`take` and :meth:`fill`."""
        return self.rows(slots) * self.n + idx

    def take(self, cells: np.ndarray) -> np.ndarray:
        """The records at flat ``cells``."""
        return self.store.reshape(-1).take(cells)

    def fill(self, cells: np.ndarray, lane, stamp, pc) -> None:
        """Record accesses at flat ``cells`` (made by :meth:`cells`, which
        gives the slots storage)."""
        self.store.reshape(-1)[cells] = pack(lane, stamp, pc)

    def repeats(self, cells: np.ndarray) -> bool:
        """Whether a cell appears twice in ``cells`` (two passes over a
        scratch array the size of the storage, not a sort; none for
        increasing cells)."""
        if increasing(cells):
            return False
        if self.scratch.size < self.store.size:
            self.scratch = np.zeros(self.store.size, dtype=np.int64)
        return repeated(cells, self.scratch)

    def put(self, slots: np.ndarray | int, at, lane, stamp, pc) -> None:
        """Record accesses of bytes ``at`` (an index, or a slice with one
        slot) in ``slots`` (one, or one per byte)."""
        if np.ndim(slots) == 0:
            row = int(self.rows(slots))                 # (first: it may grow the storage)
            self.store[row][at] = pack(lane, stamp, pc)
        else:
            self.fill(self.cells(slots, at), lane, stamp, pc)

    def clear(self, at, slots: list[int] | None = None) -> None:
        """Forget the records of bytes ``at`` in ``slots`` (default: all)."""
        if slots is None:
            slots = self.used
        if slots:
            rows = self.row_of[slots]
            if isinstance(at, slice):
                self.store[rows, at] = 0
            elif len(rows) <= 8 or len(at) >= 4096:     # (row by row: no slots x bytes index to build)
                for row in rows.tolist():
                    self.store[row][at] = 0
            else:
                self.store.reshape(-1)[(rows[:, None] * self.n + at).reshape(-1)] = 0

    def access(self, slot: int, byte: int) -> tuple[int, int]:
        """``(lane, PC)`` of the record in ``slot`` of ``byte``."""
        rec = int(self.store[self.row_of[slot], byte])
        return (rec & 0xFFFF) - 1, (rec >> 16) & 0xFFFFF

    def first_unordered(self, slots: list[int], at, tid: np.ndarray, knows) -> np.ndarray:
        """Per byte of ``at``, the first of ``slots`` holding an access by a
        lane other than ``tid`` whose stamp the byte's accessor does not
        know (``knows(rows, lanes)``), or -1."""
        out = np.full(len(tid), -1)
        if not slots:
            return out
        rows = self.row_of[slots]
        if isinstance(at, slice):
            rec = self.store[rows, at]
        else:                                   # (a flat take: faster than a 2-D fancy gather)
            rec = self.take(rows[:, None] * self.n + at)
        lane = (rec & 0xFFFF) - 1
        other = (lane >= 0) & (lane != tid)
        if not other.any():
            return out
        bad = other & ((rec >> 36) > knows(np.arange(len(tid))[None, :], np.maximum(lane, 0)))
        if bad.any():
            hit = bad.any(axis=0)
            out[hit] = np.asarray(slots)[bad.argmax(axis=0)[hit]]
        return out


def pack(lane, stamp, pc) -> np.ndarray:
    """One :class:`Slots` record per access."""
    return (np.asarray(stamp, dtype=np.int64) << 36) | (np.asarray(pc, dtype=np.int64) << 16) \
        | (np.asarray(lane, dtype=np.int64) + 1)


class CellRecords:
    """Which thread of a CTA last wrote, read and atomically accessed each
    cell, and when: the records that happens-before is checked against
    (:class:`SharedShadow` for shared memory; ``GlobalShadow`` of
    :mod:`.global_shadow` per global buffer). Threads are CTA-local: the
    holder knows which CTA a cell's records belong to."""

    def __init__(self, n: int, ntid: int, grain: int) -> None:
        self.grain = grain
        self.warps = max(1, (ntid + 31) // 32)
        self.w_tid = np.full(n, -1, dtype=np.int32)
        self.w_clock = np.zeros(n, dtype=np.int32)
        self.w_pc = np.full(n, -1, dtype=np.int32)
        self.w_atomic = np.zeros(n, dtype=bool)        # the last write was a strong one
        # reads: slot w is warp w's last reading lane, slot warps + w an
        # earlier read by another lane of the warp that the last one did not
        # come after (rare: ``has2`` marks the bytes that have one)
        self.reads = Slots(2 * self.warps, n)
        self.has2 = np.zeros(n, dtype=bool)
        self.atomics = Slots(self.warps, n)             # the last atomic lane per warp

    def split(self, grain: int) -> int:
        """Make the cells ``grain`` bytes (a divisor of the current grain):
        each record is repeated for the cells its cell becomes. Returns the
        ratio, for the holders of cell indices to expand theirs
        (:func:`.values.expand`)."""
        ratio = self.grain // grain
        if ratio > 1:
            for name, value in vars(self).items():
                if isinstance(value, np.ndarray):
                    setattr(self, name, np.repeat(value, ratio))
            self.reads.split(ratio)
            self.atomics.split(ratio)
            self.grain = grain
        return ratio

    def record_atomic(self, idx: np.ndarray, tid: np.ndarray, clock: np.ndarray, pc: int) -> None:
        """An atomic (or strong) access of bytes ``idx`` by CTA-local
        threads ``tid``: each takes its warp's atomic slot."""
        self.atomics.put(tid // 32, idx, tid, clock, pc)

    def reader(self, byte: int, slot: int) -> tuple[int, int]:
        """``(CTA-local thread, PC)`` of the read kept in ``slot`` of ``byte``."""
        return self.reads.access(slot, byte)

    def atomic_access(self, byte: int, slot: int) -> tuple[int, int]:
        """``(CTA-local thread, PC)`` of the atomic kept in ``slot`` of ``byte``."""
        return self.atomics.access(slot, byte)

    def record_write(self, idx: np.ndarray | slice, tid: np.ndarray | int, clock: np.ndarray | int,
                     pc: int, strong: bool = False) -> np.ndarray | slice:
        """A write of bytes ``idx`` (or a range of them) by CTA-local threads
        ``tid`` stamped ``clock`` (``strong``: a strong store kept as the
        last write): the reads and atomics before it are forgotten. Returns
        the bytes as a range where they are one."""
        if not isinstance(idx, slice):
            idx, tid, clock = _last_of_runs(idx, tid, clock)
        at = idx if isinstance(idx, slice) else span(idx)
        self.w_tid[at] = tid
        self.w_clock[at] = clock
        self.w_pc[at] = pc
        self.w_atomic[at] = strong
        self.reads.clear(at, [s for s in self.reads.used if s < self.warps])
        second = _bytes(at, np.flatnonzero(self.has2[at])) if self.reads.used[-1:] >= [self.warps] else ()
        if len(second):
            self.reads.clear(second, [s for s in self.reads.used if s >= self.warps])
            self.has2[second] = False
        self.atomics.clear(at)
        return at

    def record_read(self, idx: np.ndarray, tid: np.ndarray, clock: np.ndarray | np.int32, pc: int,
                    knows=None, ascending: bool = False) -> None:
        """Reads of bytes ``idx`` by CTA-local threads ``tid``: each takes its
        warp's slot; the read it displaces moves to the warp's second slot
        when the new reader did not come after it (``knows(rows, lanes)``:
        the new readers' clock entries, ``rows`` positions in ``idx``).
        Lanes of one warp reading a byte in the same instruction are
        unordered: the last two keep both slots. ``ascending``: the readers'
        global threads never decrease along ``idx`` (the emulator's order),
        so the readers of a byte come in lane order and nothing is sorted."""
        if len(idx) == 0:
            return
        if tid[0] == tid[-1] and (tid == tid[0]).all():
            self.record_read_by_one(idx, int(tid[0]), clock, pc, knows)
            return
        clock = np.broadcast_to(np.asarray(clock, dtype=np.int64), idx.shape)
        warp = tid // 32
        cells = self.reads.cells(warp, idx)
        if increasing(idx) or not self.reads.repeats(cells):   # no warp reads a byte twice: nothing to order
            if knows is not None:
                self._displace_at(cells, np.arange(len(idx)), idx, warp, tid, knows)
            self.reads.fill(cells, tid, clock, pc)
            return
        # lanes reading one word in runs (a broadcast) go by runs; interleaved readers in lane order by scatters
        if (cells[0] == cells[1] or not ascending) and self._record_runs(cells, idx, warp, tid, clock, pc, knows):
            return
        if ascending:
            self._record_in_order(cells, idx, warp, tid, clock, pc, knows)
            return
        order = np.lexsort((tid, warp, idx))        # by byte, then warp, then lane
        i, w, t = idx[order], warp[order], tid[order]
        if knows is not None:
            self._displace_at(cells[order], order, i, w, t, knows)
        last = np.ones(len(i), dtype=bool)
        last[:-1] = (i[1:] != i[:-1]) | (w[1:] != w[:-1])     # each (warp, byte)'s last reader
        tie = np.flatnonzero(~last[:-1] & last[1:] & (t[1:] != t[:-1]))   # just before a last
        if len(tie):
            self._second(i[tie], w[tie], t[tie], clock[order[tie]], pc)
        self.reads.fill(cells[order[last]], t[last], clock[order[last]], pc)

    def _record_in_order(self, cells: np.ndarray, idx: np.ndarray, warp: np.ndarray, tid: np.ndarray,
                         clock: np.ndarray, pc: int, knows) -> None:
        """:meth:`record_read` where the readers of each (warp, byte) come in
        lane order, however interleaved (a warp's lanes reading a few words
        in turn: a reduction's partial sums): the last and the one before it
        are found by two scatters of positions into the scratch, not a sort
        (a scatter keeps the last position written to each cell)."""
        scratch = self.reads.scratch        # (sized by the repeats() test before)
        pos = np.arange(len(cells))
        scratch[cells] = pos
        last_at = scratch[cells]
        last = last_at == pos               # each (warp, byte)'s last reader
        if knows is not None:
            self._displace_at(cells, pos, idx, warp, tid, knows)
        rest = np.flatnonzero(~last)
        if len(rest):
            held = cells[rest]
            scratch[held] = rest
            before = rest[scratch[held] == rest]            # the reader just before each last
            tie = before[tid[before] != tid[last_at[before]]]
            if len(tie):
                self._second(idx[tie], warp[tie], tid[tie], clock[tie], pc)
        ends = np.flatnonzero(last)
        self.reads.fill(cells[ends], tid[ends], clock[ends], pc)

    def _record_runs(self, cells: np.ndarray, idx: np.ndarray, warp: np.ndarray, tid: np.ndarray,
                     clock: np.ndarray, pc: int, knows) -> bool:
        """:meth:`record_read` where each (warp, byte)'s readers come in one
        run, lanes increasing (lanes of a warp reading one word: a broadcast):
        the last lane of each run keeps the slot, the one before it the
        second slot, without sorting. Returns False, doing nothing, when the
        readers do not come so."""
        change = cells[1:] != cells[:-1]
        ends = np.flatnonzero(np.r_[change, True])            # each run's last reader
        if not ((tid[1:] > tid[:-1]) | change).all() or self.reads.repeats(cells[ends]):
            return False
        if knows is not None:       # (order does not matter: a displaced record is the same for a whole run)
            self._displace_at(cells, np.arange(len(idx)), idx, warp, tid, knows)
        starts = np.r_[0, ends[:-1] + 1]
        tie = ends[ends > starts] - 1                          # the reader before a run's last
        if len(tie):
            self._second(idx[tie], warp[tie], tid[tie], clock[tie], pc)
        self.reads.fill(cells[ends], tid[ends], clock[ends], pc)
        return True

    def record_read_by_one(self, idx: np.ndarray, tid: int, clock, pc: int | np.ndarray, knows) -> None:
        """:meth:`record_read` for one reading thread (an async operand
        read, a single lane): one warp's slot, a scalar stamp (``pc``: one,
        or one per byte)."""
        w = tid // 32
        if knows is not None:
            self._displace_at(self.reads.cells(w, idx), np.arange(len(idx)), idx, w, tid, knows)
        self.reads.put(w, span(idx), tid, clock, pc)

    def _displace_at(self, cells: np.ndarray, rows: np.ndarray, idx: np.ndarray, w, tid, knows) -> None:
        """Before warps ``w`` and lanes ``tid`` (one, or one each) read bytes
        ``idx`` (their records at flat ``cells``; positions ``rows`` for
        ``knows``): each held read by another lane that the new reader did
        not come after moves to the warp's second slot."""
        rec = self.reads.take(cells)
        lane = (rec & 0xFFFF) - 1
        other = np.flatnonzero((lane >= 0) & (lane != tid))
        if len(other):
            other = other[(rec[other] >> 36) > knows(rows[other], lane[other])]
            if len(other):
                self._second(idx[other], w if np.ndim(w) == 0 else w[other], lane[other],
                             rec[other] >> 36, (rec[other] >> 16) & 0xFFFFF)

    def _second(self, idx: np.ndarray, w, lane, stamp, pc) -> None:
        self.has2[idx] = True
        self.reads.put(self.warps + w, idx, lane, stamp, pc)

    def unordered_reads(self, idx: np.ndarray | slice, tid: np.ndarray, knows) -> np.ndarray:
        """For each byte of ``idx`` (or of a range), the slot of a read by
        another thread that the writer has not synchronised with
        (``knows(rows, readers)``: the writer of row ``rows``' clock entries
        for ``readers``), or -1."""
        at = idx if isinstance(idx, slice) else span(idx)
        first = [s for s in self.reads.used if s < self.warps]
        out = self.reads.first_unordered(first, at, tid, knows)
        two = np.flatnonzero(self.has2[at] & (out < 0))
        if len(two):
            second = [s for s in self.reads.used if s >= self.warps]
            out[two] = self.reads.first_unordered(second, _bytes(at, two), tid[two],
                                                  lambda rows, lanes: knows(two[rows], lanes))
        return out

    def unordered_atomics(self, idx: np.ndarray, tid: np.ndarray, knows) -> np.ndarray:
        """As :meth:`unordered_reads`, for the atomics on each byte."""
        return self.atomics.first_unordered(self.atomics.used, span(idx), tid, knows)


class SharedShadow(CellRecords):
    """The per-cell state of a launch's shared memory (all CTAs)."""

    def __init__(self, nctas: int, size: int, ntid: int) -> None:
        self.size = size                        # bytes per CTA
        grain = grain_of(size)
        n = nctas * (size // grain)
        super().__init__(n, ntid, grain)
        self.init = np.zeros(n, dtype=bool)
        self.fenced = np.zeros(n, dtype=bool)
        self.flying = np.zeros(n, dtype=np.int16)      # async reads not yet waited for
        self.mark = np.zeros(n, dtype=bool)            # scratch for set membership (kept all False)
        self.who = np.zeros(n, dtype=np.int64)         # scratch: the writer of each marked byte
        self.seen = np.zeros(n, dtype=np.int64)        # scratch for as_range()
        self.pend = np.zeros(n, dtype=np.int8)
        self.pend_key = np.zeros(n, dtype=np.int64)    # cp.async: global thread; TMA: mbarrier word
        self.pend_seq = np.zeros(n, dtype=np.int32)    # cp.async: group; TMA: completions at issue
        self.pend_col = np.zeros(n, dtype=np.int32)    # TMA: the mbarrier's clock column
        # distributed shared memory (clusters only): the CTA of the last write
        # and its cluster-barrier epoch, the cluster ranks that read since
        self.x_writer = self.x_wepoch = self.x_readers = self.x_repoch = self.x_at = None

    @property
    def cells(self) -> int:
        """Cells per CTA."""
        return self.size // self.grain

    def offset(self, cell: int) -> int:
        """The byte offset of ``cell`` in its CTA's shared memory."""
        return int(cell) % max(self.cells, 1) * self.grain

    def cta_of(self, idx: np.ndarray) -> np.ndarray:
        """The CTA whose shared memory holds each cell of ``idx``."""
        return idx // max(self.cells, 1)

    def cluster_arrays(self) -> None:
        """Allocate the distributed-shared-memory records."""
        n = len(self.init)
        self.x_writer = np.full(n, -1, dtype=np.int32)
        self.x_wepoch = np.full(n, -1, dtype=np.int32)
        self.x_readers = np.zeros(n, dtype=np.int64)
        self.x_repoch = np.full(n, -1, dtype=np.int32)
        self.x_at = np.zeros(n, dtype=np.int64)         # thread << 20 | pc of the last access

    def record_write(self, idx: np.ndarray | slice, tid: np.ndarray | int, clock: np.ndarray | int,
                     pc: int, strong: bool = False) -> np.ndarray | slice:
        """A plain write (see :meth:`CellRecords.record_write`): the bytes
        are initialised, unfenced and no async copy is pending into them."""
        at = super().record_write(idx, tid, clock, pc, strong)
        self.init[at] = True
        self.fenced[at] = False
        self.pend[at] = 0
        return at

    def cta_range(self, cta: int) -> slice:
        """The flat cell range of CTA ``cta``'s shared memory."""
        return slice(cta * self.cells, (cta + 1) * self.cells)


def _bytes(at: np.ndarray | slice, rows: np.ndarray) -> np.ndarray:
    """The bytes at positions ``rows`` of an index or a range."""
    return at.start + rows if isinstance(at, slice) else at[rows]


def as_range(idx: np.ndarray, scratch: np.ndarray) -> np.ndarray | slice:
    """``idx`` as a slice when its bytes are exactly one range, in any order
    (``scratch``: a per-byte array it may scribble on), else itself; for
    uses where the order of the bytes does not matter."""
    n = len(idx)
    if n < 2:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if hi - lo + 1 != n:
        return idx
    return idx if repeated(idx, scratch) else slice(lo, hi + 1)


def _last_of_runs(idx: np.ndarray, tid, clock) -> tuple:
    """A write's bytes (and per-byte ``tid``, ``clock``) reduced to the
    last write of each run of one byte (the lanes of a warp storing to one
    word): the same records, since a scatter keeps the last value written
    to a byte, scattered once per run instead of once per lane."""
    if len(idx) < 2:
        return idx, tid, clock
    change = idx[1:] != idx[:-1]
    if change.all():
        return idx, tid, clock
    ends = np.flatnonzero(np.r_[change, True])
    return (idx[ends], tid[ends] if np.ndim(tid) else tid, clock[ends] if np.ndim(clock) else clock)


def span(idx: np.ndarray) -> np.ndarray | slice:
    """``idx`` as a slice when it is one increasing run of consecutive
    bytes (then gathers and scatters through it are copies), else itself."""
    n = len(idx)
    if n > 1 and idx[-1] - idx[0] == n - 1 and idx[1] - idx[0] == 1 and (np.diff(idx) == 1).all():
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx

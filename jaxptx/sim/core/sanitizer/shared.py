"""The sanitizer's checks of shared memory: races by happens-before,
uninitialised bytes, async copies still in flight."""

from __future__ import annotations

import numpy as np

from .shadow import CP_ASYNC, TMA
from .values import (ASYNC_READERS, as_cells, ascending, bytes_of, cells, differ, first_differing_byte, fitting_grain,
                     local_thread, pack_at, sort_order, unpack_at)

__all__ = ["SharedChecks"]


class SharedChecks:
    """Mixed into :class:`Sanitizer`: shared memory."""

    def shared_access(self, linear: np.ndarray, threads: np.ndarray, width: int, write: bool,
                      atomic: bool = False, values: np.ndarray | None = None) -> None:
        """Check and record an access of ``width`` bytes at each flat shared
        index by ``threads`` (``values``: what a store writes)."""
        linear = np.asarray(linear, dtype=np.int64)
        if self.reader is not None:
            threads = np.full(len(linear), self.reader)
        idx = self.shared_cells(linear, width)
        per = width // self.shadow.grain
        th = np.asarray(threads, dtype=np.int64)
        if per > 1:
            th = np.repeat(th, per)
        cell_values = None             # (what a store writes, per cell: as_cells)
        if values is not None:
            cell_values = as_cells(bytes_of(values, width), self.shadow.grain)
        if self.cluster_checks:
            self._cluster_access(idx, th, write, atomic or self._semantics()[0], cell_values)
        local = True if self.lone_ctas else self.shadow.cta_of(idx) == th // self.ntid
        if not np.all(local):               # another CTA's shared memory: initialisation only
            far = ~local
            if not write:
                self._check_init(idx[far], th[far], "read of")
            else:
                self.shadow.init[idx[far]] = True
            idx, th = idx[local], th[local]
            cell_values = None if cell_values is None else cell_values[local]
        if len(idx) == 0:
            return
        kind = ASYNC_READERS.get(self.sim)
        strong, release, acquire = self._semantics()
        if write and self.sim == "cp_async":
            self.cp_async_written(idx, th)
        elif atomic or strong:
            self._atomic(idx, th, reads=atomic or not write, writes=atomic or write)
            self._location_sync(linear, np.asarray(threads, dtype=np.int64), 0, write or atomic,
                                not write or atomic, release, acquire)
        elif write:
            self._write(idx, th, cell_values)
        elif kind is not None:
            self.async_read(idx, th, kind)
        else:
            self._read(idx, th)

    def shared_cells(self, offsets: np.ndarray, width: int) -> np.ndarray:
        """The shadow cells of ``width``-byte accesses at flat shared byte
        ``offsets``, splitting the cells first if they cover part of one."""
        grain = fitting_grain(self.shadow.grain, offsets, width)
        if grain < self.shadow.grain:
            self._expand_async(self.shadow.split(grain))
        return cells(offsets, width, grain)

    def _memory_cells(self, idx: np.ndarray) -> np.ndarray:
        """The contents of shared cells ``idx`` (as :func:`as_cells`)."""
        return as_cells(self.m.memory.shared, self.shadow.grain)[idx]

    def _cluster_access(self, idx: np.ndarray, th: np.ndarray, write: bool, strong: bool,
                        cell_values: np.ndarray | None) -> None:
        """Distributed shared memory: between CTAs of a cluster only
        ``barrier.cluster`` orders plain accesses here (kernels that order
        them through remote mbarrier arrivals are not checked this way).
        Two CTAs touching a byte in one cluster-barrier epoch, one writing,
        is a race."""
        if strong:
            return
        sh = self.shadow
        cta = (th // self.ntid).astype(np.int32)
        owner = sh.cta_of(idx)
        epoch = self.cluster_epoch[self.m.cluster_first(owner)]
        rank = np.left_shift(1, (cta - self.m.cluster_first(cta)).astype(np.int64) % 31)
        same = sh.x_wepoch[idx] == epoch
        clash = same & (sh.x_writer[idx] >= 0) & (sh.x_writer[idx] != cta)
        if write and cell_values is not None and not self.strict:
            clash &= differ(self._memory_cells(idx), cell_values)
        if write:
            clash |= (sh.x_repoch[idx] == epoch) & ((sh.x_readers[idx] & ~rank) != 0)
        if clash.any():
            k = int(np.argmax(clash))
            within = 0
            if write and cell_values is not None and not self.strict:
                within = first_differing_byte(self._memory_cells(idx[k]), cell_values[k])
            other_thread, other_pc = unpack_at(sh.x_at[idx[k]])
            self.report("race", f"distributed shared-memory race: {'write' if write else 'read'} of CTA "
                        f"{int(owner[k])}'s shared offset {sh.offset(idx[k]) + within:#x} at {self.at(int(th[k]))} "
                        f"conflicts with the access at {self.line(other_pc)} by {self.who(other_thread)}: no "
                        "barrier.cluster orders them", self.line(self.pc), self.line(other_pc))
        sh.x_at[idx] = pack_at(th, self.pc)
        if write:
            sh.x_writer[idx], sh.x_wepoch[idx] = cta, epoch
            sh.x_readers[idx] = 0
        else:
            fresh = sh.x_repoch[idx] != epoch
            sh.x_readers[idx] = np.where(fresh, rank, sh.x_readers[idx] | rank)
            sh.x_repoch[idx] = epoch

    def _check_init(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        bad = ~self.shadow.init[idx]
        if bad.any():
            k = int(np.argmax(bad))
            self.report("uninitialised", f"{what} uninitialised shared memory at offset "
                        f"{self.shadow.offset(idx[k]):#x} at {self.at(int(th[k]))}", self.line(self.pc))

    def _knows(self, th: np.ndarray):
        return lambda rows, others: self.clocks.knows(th[rows], others)

    def _representatives(self, idx: np.ndarray, th: np.ndarray, cell_values: np.ndarray | None) -> np.ndarray | None:
        """The positions of an access that decide its checks when it comes
        in runs of one cell (lanes of a warp storing or reading one word),
        or None: each run's first two accessors, when the bytes never
        decrease, the threads of each run are distinct and increasing,
        share one clock row and store one value. A check against the records
        then differs between a run's accessors only by whether the record is
        the accessor's own, so the first accessor it fails for is the run's
        first or second, as over every accessor."""
        n = len(idx)
        if n < 4 or self.reader is not None:
            return None
        change = idx[1:] != idx[:-1]
        runs = int(np.count_nonzero(change)) + 1
        if 2 * runs > n or not ascending(idx) or not ((th[1:] > th[:-1]) | change).all():
            return None
        rows = self.clocks.row_of[th]
        if not ((rows[1:] == rows[:-1]) | change).all():
            return None
        if cell_values is not None and (differ(cell_values[1:], cell_values[:-1]) & ~change).any():
            return None
        start = np.flatnonzero(np.r_[True, change])
        keep = np.zeros(n, dtype=bool)
        keep[start] = True
        keep[start[np.diff(np.r_[start, n]) >= 2] + 1] = True
        return np.flatnonzero(keep)

    def _read(self, idx: np.ndarray, th: np.ndarray) -> None:
        sh = self.shadow
        every_idx, every_th = idx, th
        sel = self._representatives(idx, th, None)
        if sel is not None:
            idx, th = idx[sel], th[sel]
        self._check_init(idx, th, "read of")
        self._check_pending(idx, th, "read")
        tid = local_thread(th, self.ntid)
        self._unordered_write(idx, th, tid, "read")
        slot = sh.unordered_atomics(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("read", idx[k], th[k], "atomic", *sh.atomic_access(int(idx[k]), int(slot[k])))
        idx, th = every_idx, every_th
        sh.record_read(idx, local_thread(th, self.ntid), self.clocks.own(th), self.pc, self._knows(th),
                       ascending=ascending(th))

    def _write(self, idx: np.ndarray, th: np.ndarray, cell_values: np.ndarray | None) -> None:
        sh = self.shadow
        every_idx, every_th = idx, th
        sel = self._representatives(idx, th, cell_values)
        if sel is not None:
            idx, th = idx[sel], th[sel]
            cell_values = None if cell_values is None else cell_values[sel]
        tid = local_thread(th, self.ntid)
        same = None
        if cell_values is not None and not self.strict:
            same = ~differ(self._memory_cells(idx), cell_values) & sh.init[idx]
        self._check_pending(idx, th, "write")
        self._unordered_write(idx, th, tid, "write", None if same is None else ~same, cell_values)
        self._check_in_flight(idx, th, "write")
        slot = sh.unordered_reads(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("write", idx[k], th[k], "read", *sh.reader(int(idx[k]), int(slot[k])))
        slot = sh.unordered_atomics(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("write", idx[k], th[k], "atomic", *sh.atomic_access(int(idx[k]), int(slot[k])))
        self._same_step_conflicts(idx, th, cell_values)
        sh.record_write(every_idx, local_thread(every_th, self.ntid), self.clocks.own(every_th), self.pc)

    def _same_step_conflicts(self, idx: np.ndarray, th: np.ndarray, cell_values: np.ndarray | None) -> None:
        """Several threads writing one byte in the same instruction (with
        different values, unless strict)."""
        if len(idx) < 2:
            return
        order = sort_order(idx)
        i, t = (idx, th) if order is None else (idx[order], th[order])
        dup = (i[1:] == i[:-1]) & (t[1:] != t[:-1])
        if cell_values is not None and not self.strict:
            v = cell_values if order is None else cell_values[order]
            dup &= differ(v[1:], v[:-1])
        if dup.any():
            k = int(np.argmax(dup))
            within = 0 if cell_values is None or self.strict else first_differing_byte(v[k], v[k + 1])
            self._race("write", i[k + 1], t[k + 1], "write", int(t[k] % self.ntid), self.pc, within)

    def _atomic(self, idx: np.ndarray, th: np.ndarray, reads: bool = True, writes: bool = True) -> None:
        """An atomic or strong (``.relaxed``/``.acquire``/``.release``/
        ``.volatile``) access: it does not race with other such accesses,
        only with plain ones nothing orders."""
        sh = self.shadow
        if reads:
            self._check_init(idx, th, "atomic on")
        if writes:
            sh.init[idx] = True
        tid = local_thread(th, self.ntid)
        self._unordered_write(idx, th, tid, "atomic on", ~sh.w_atomic[idx])
        self._check_in_flight(idx, th, "atomic on")
        slot = sh.unordered_reads(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("atomic on", idx[k], th[k], "read", *sh.reader(int(idx[k]), int(slot[k])))
        sh.record_atomic(idx, tid, self.clocks.own(th), self.pc)

    def _unordered_write(self, idx: np.ndarray, th: np.ndarray, tid: np.ndarray, kind: str,
                         among: np.ndarray | None = None, new: np.ndarray | None = None) -> np.ndarray:
        """Report the first byte whose last write, by another thread, the
        accessing thread has not synchronised with (only bytes ``among``
        where given: those a store of ``new`` changes); returns each byte's
        writer (CTA-local, -1: none)."""
        sh = self.shadow
        writer = sh.w_tid[idx]
        other = (writer >= 0) & (writer != tid)
        if among is not None:
            other &= among
        if not other.any():
            return writer
        if other.all():                     # (every byte another thread's: no selecting)
            late = sh.w_clock[idx] > self.clocks.knows(th, writer.astype(np.int64))
        else:
            late = np.zeros(len(idx), dtype=bool)
            late[other] = sh.w_clock[idx[other]] > self.clocks.knows(th[other], writer[other].astype(np.int64))
        if late.any():
            k = int(np.argmax(late))
            within = 0 if new is None else first_differing_byte(self._memory_cells(idx[k]), new[k])
            self._race(kind, idx[k], th[k], "write", int(writer[k]), int(sh.w_pc[idx[k]]), within)
        return writer

    def _race(self, kind: str, byte: int, thread: int, other_kind: str, other_tid: int, other_pc: int,
              within: int = 0) -> None:
        """Report a race at cell ``byte`` (its byte ``within``)."""
        other_line = self.line(other_pc)
        other = f"the {other_kind} at {other_line} by {self._thread_at(thread, other_tid)}"
        of = "" if kind.endswith(" on") else " of"
        self.report("race", f"shared-memory race: {kind}{of} offset {self.shadow.offset(byte) + within:#x} at "
                    f"{self.at(int(thread))} conflicts with {other}: no barrier or mbarrier orders them",
                    self.line(self.pc), other_line)

    def _check_pending(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        sh = self.shadow
        pend = sh.pend[idx]
        low, high = pend.min(), pend.max()
        if high == 0:
            return
        if low <= CP_ASYNC and (pend == CP_ASYNC).any():
            k = int(np.argmax(pend == CP_ASYNC))
            issuer = int(sh.pend_key[idx[k]])
            copy = self.line(int(sh.w_pc[idx[k]]))
            self.report("async", f"{what} of shared offset {sh.offset(idx[k]):#x} at "
                        f"{self.at(int(th[k]))}: the cp.async at {copy} by "
                        f"{self._thread_at(th[k], issuer % self.ntid)} is still copying into it (no "
                        "cp.async.wait_group completed it)", self.line(self.pc), copy)
        tma = np.arange(len(idx)) if low == TMA else np.flatnonzero(pend == TMA)   # (usually every byte)
        if len(tma):
            b, t = (idx, th) if low == TMA else (idx[tma], th[tma])
            late = self.clocks.knows(t, sh.pend_col[b]) <= sh.pend_seq[b]
            if late.any():
                k = int(tma[np.argmax(late)])
                word = int(sh.pend_key[idx[k]])
                copy = self.line(int(sh.w_pc[idx[k]]))
                self.report("async", f"{what} of shared offset {sh.offset(idx[k]):#x} at "
                            f"{self.at(int(th[k]))}: the async copy at {copy} completes on the "
                            f"mbarrier at shared offset {word * 8 % sh.size:#x}, and this thread has "
                            "not observed that phase complete (try_wait/test_wait, or a barrier "
                            "after a thread that did)", self.line(self.pc), copy)

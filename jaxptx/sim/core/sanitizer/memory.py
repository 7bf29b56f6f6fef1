"""The sanitizer's checks of local memory (reads of bytes never written) and
global memory: races between CTAs and between threads of one CTA (the
records are described in :mod:`.global_shadow`)."""

from __future__ import annotations

import numpy as np

from .global_shadow import GlobalShadow
from .values import (as_cells, ascending, bytes_of, cells, differ, first_differing_byte, fitting_grain, grain_of,
                     local_thread, pack_at, sort_order, unpack_at)

__all__ = ["MemoryChecks", "READ_LOG_BYTES"]

# Plain reads of a global buffer nothing has written yet are kept as they
# came, up to this many bytes, and recorded only when the buffer is first
# written: inputs that are only read never cost a per-byte record. A logged
# read costs 16 bytes per element (offset, thread, stamp), about a sixth of
# the per-cell records it would otherwise make at a 4-byte grain, so the log
# may hold a 64 MiB input read once (a 4096 x 4096 float32 matrix) before
# the records are made.
READ_LOG_BYTES = 1 << 26


class GlobalAccess:
    """One access of a global buffer, cell by cell (``th``: the accessing
    thread of each cell; ``new``: what a store writes, per cell): what the
    checks of :class:`MemoryChecks` share. ``scoped``: a ``.cta``-scoped
    strong access (plain between CTAs)."""

    __slots__ = ("_old", "atomic", "buf", "cta", "idx", "key", "new", "r", "scoped", "shadow", "strong", "th", "tid",
                 "w", "write")

    def __init__(self, key: int, buf: np.ndarray, shadow: GlobalShadow, idx: np.ndarray, th: np.ndarray,
                 ntid: int, new: np.ndarray | None, write: bool, atomic: bool, strong: bool, scoped: bool) -> None:
        self.key, self.buf, self.shadow, self.idx, self.th, self.new = key, buf, shadow, idx, th, new
        if ntid & (ntid - 1) == 0:         # (a power of two: shifts and masks, not divisions)
            self.cta = (th >> (ntid.bit_length() - 1)).astype(np.int32)
            self.tid = th & (ntid - 1)
        else:
            self.cta = (th // ntid).astype(np.int32)
            self.tid = th % ntid
        self.write, self.atomic, self.strong, self.scoped = write, atomic, strong, scoped
        self.w: np.ndarray | None = None      # each cell's last writing CTA, once gathered
        self.r: np.ndarray | None = None      # ... and reading CTA(s)
        self._old: np.ndarray | None = None

    def old(self) -> np.ndarray:
        """The cells' contents before a store (as :func:`.values.as_cells`)."""
        if self._old is None:
            self._old = as_cells(self.buf, self.shadow.grain)[self.idx]
        return self._old

    def kind(self) -> str:
        """How a finding names this access."""
        return "atomic on" if self.atomic else "strong access to" if self.strong else \
            "write of" if self.write else "read of"


class MemoryChecks:
    """Mixed into :class:`Sanitizer`: local and global memory."""

    def other_access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int,
                     write: bool, atomic: bool = False, values: np.ndarray | None = None) -> None:
        """Local memory (reads of bytes never written) and global memory
        (conflicting accesses nothing orders, by threads of different CTAs
        or of one CTA) for ``threads``."""
        given, off = off, np.asarray(off, dtype=np.int64)
        if buf is self.m.memory.local:
            self._local_access(off, threads, width, write)
            return
        key = self._globals.get(id(buf))
        if key is None:
            return
        th = np.asarray(threads, dtype=np.int64)
        strong, release, acquire = self._semantics()
        strong = strong or atomic
        if self.node is not None:         # pairs with other grids of a node (before the orderings below tick)
            self.node.access(self, buf, off, th, width, write, atomic, strong, release, acquire, values)
        if strong:
            self._location_sync(off, th, key + 1, write or atomic, not write or atomic, release, acquire)
        if key in self._read_log and self._log_read(key, off, th, width, plain=not (write or strong),
                                                    owned=off is not given):
            return
        a = self._global_access(key, buf, off, th, width, write, atomic, strong, values)
        if strong and not a.scoped:
            self._strong_between_ctas(a)
        else:
            self._plain_between_ctas(a)
        self._within_cta(a)
        self._record_global(a)

    def _local_access(self, off: np.ndarray, threads: np.ndarray, width: int, write: bool) -> None:
        """Local memory: a read of bytes the thread never wrote."""
        idx = (off[:, None] + np.arange(width)).ravel()
        if write:
            self.local_init[idx] = True
        elif not self.local_init[idx].all():
            k = int(np.argmax(~self.local_init[idx])) // width
            self.report("uninitialised", f"read of uninitialised local memory at {self.at(int(threads[k]))}",
                        self.line(self.pc))

    def _log_read(self, key: int, off: np.ndarray, th: np.ndarray, width: int, plain: bool,
                  owned: bool = False) -> bool:
        """Plain reads of a buffer with nothing but plain reads so far have
        nothing to conflict with: they are kept as they came (with the
        readers' clocks), and recorded at the buffer's first other access
        or once they pass :data:`READ_LOG_BYTES`. Returns whether this
        access is done with (kept, or recorded with the rest). ``owned``:
        ``off`` is the sanitizer's own array (a conversion), kept uncopied."""
        log = self._read_log[key]
        if plain:
            log.append((off if owned else off.copy(), th.astype(np.int32), width, self.pc, self.fence_epoch.copy(), self.clocks.own(th)))
            self._logged[key] += len(off) * width
            if self._logged[key] < READ_LOG_BYTES:
                return True
        del self._read_log[key]
        for off_, th_, width_, pc, epochs, stamps in log:
            idx = self._global_cells(key, off_, width_)
            per = width_ // self._global_grain[key]
            self._record_global_reads(self._global_records(key), idx, np.repeat(th_, per), pc, epochs,
                                      np.repeat(stamps, per))
        return plain

    def _global_access(self, key: int, buf: np.ndarray, off: np.ndarray, th: np.ndarray, width: int,
                       write: bool, atomic: bool, strong: bool, values: np.ndarray | None) -> GlobalAccess:
        """The access cell by cell, with the buffer's records."""
        idx = self._global_cells(key, off, width)
        grain = self._global_grain[key]
        if width > grain:
            th = np.repeat(th, width // grain)
        new = None if values is None else as_cells(bytes_of(values, width), grain)
        return GlobalAccess(key, buf, self._global_records(key, strong), idx, th, self.ntid, new, write, atomic,
                            strong, strong and self._cta_scoped())

    def _global_cells(self, key: int, offsets: np.ndarray, width: int) -> np.ndarray:
        """The shadow cells of global buffer ``key`` that ``width``-byte
        accesses at byte ``offsets`` cover, splitting its cells first if
        they cover part of one (see :data:`.values.GRAIN`)."""
        grain = self._global_grain.get(key)
        if grain is None:
            grain = self._global_grain[key] = grain_of(len(self._buffers[key]))
        fit = fitting_grain(grain, offsets, width)
        if fit < grain:
            shadow = self._global_shadow.get(key)
            if shadow is not None:
                shadow.split(fit)
            self._global_grain[key] = grain = fit
        return cells(offsets, width, grain)

    def _global_records(self, key: int, strong: bool = False) -> GlobalShadow:
        """Global buffer ``key``'s records, made at its first recorded
        access (the records of strong accesses at the first strong one)."""
        shadow = self._global_shadow.get(key)
        if shadow is None:
            grain = self._global_grain[key]
            shadow = self._global_shadow[key] = GlobalShadow(len(self._buffers[key]) // grain, self.ntid,
                                                             grain, epochs=self.cta_sync)
        if strong:
            shadow.strong_records()
        return shadow

    # between CTAs ---------------------------------------------------------------------------
    def _unpublished(self, a: GlobalAccess) -> tuple[np.ndarray, np.ndarray | None]:
        """Per cell, whether its last write and (for writes and strong
        accesses) its reads are another CTA's, not published since: with no
        gpu-scope fence or release by that CTA after them, which may order
        them before this access through a flag."""
        g, idx, cta = a.shadow, a.idx, a.cta
        w = a.w = g.w_cta[idx]
        w_open = (w >= 0) & (w != cta)
        if g.w_epoch is not None:
            w_open &= ~self._published(w, g.w_epoch[idx])
        r_open = None
        if (a.write or a.strong) and not g.read_any:     # never read: no reads to conflict with
            r_open = np.zeros(len(idx), dtype=bool)
        elif a.write or a.strong:
            r = a.r = g.r_cta[idx]
            several = (r == -2) if not self.cta_sync else np.zeros(len(r), dtype=bool)   # readers not tracked one by one
            r_open = several | ((r >= 0) & (r != cta))
            if g.r_epoch is not None:
                r_open &= ~self._published(r, g.r_epoch[idx]) | several
        return w_open, r_open

    def _strong_between_ctas(self, a: GlobalAccess) -> None:
        """An atomic or gpu-scope strong access: it races with plain
        accesses of other CTAs, not with their strong ones."""
        w_open, r_open = self._unpublished(a)
        plain = w_open | r_open if a.write or a.atomic else w_open
        if plain.any():
            k = int(np.argmax(plain))
            at = a.shadow.w_at(a.idx[k]) if a.w[k] >= 0 and a.w[k] != a.cta[k] else int(a.shadow.r_at[a.idx[k]])
            self._global_race("atomic" if a.atomic else "strong access", k, a.th, at, "the plain access")

    def _plain_between_ctas(self, a: GlobalAccess) -> None:
        """A plain access (or a ``.cta``-scoped strong one): it races with
        other CTAs' accesses since their last publication, a read only with
        writes and strong accesses."""
        g, idx = a.shadow, a.idx
        w_open, r_open = self._unpublished(a)
        if g.s_cta is not None:
            s = g.s_cta[idx]
            mixed = (s == -2) | ((s >= 0) & (s != a.cta))
            if mixed.any():
                k = int(np.argmax(mixed))
                self._global_race("write" if a.write else "read", k, a.th, int(g.s_at[idx[k]]),
                                  "the atomic or strong access")
        clash = w_open
        if a.write and a.new is not None and not self.strict and clash.any():
            clash &= differ(a.old(), a.new)
        if a.write:
            self._same_step_writes(a)
            if r_open.any() and not clash.any():
                k = int(np.argmax(r_open))
                self._global_race("write", k, a.th, int(g.r_at[idx[k]]), "a read")
        if clash.any():
            k = int(np.argmax(clash))
            self._global_race("write" if a.write else "read", k, a.th, g.w_at(idx[k]), "the write")

    def _same_step_writes(self, a: GlobalAccess) -> None:
        """Threads storing to one cell in the same instruction (different
        values, unless strict): CTAs racing first, then threads of one CTA
        (not for ``.cta``-scoped strong stores: strong within the CTA)."""
        idx = a.idx
        if len(idx) < 2 or not a.shadow.repeats(idx):
            return
        order = sort_order(idx)
        i, t, c = (idx, a.th, a.cta) if order is None else (idx[order], a.th[order], a.cta[order])
        dup = (i[1:] == i[:-1]) & (t[1:] != t[:-1])
        values_differ = a.new is not None and not self.strict
        if values_differ:
            v = a.new if order is None else a.new[order]
            dup &= differ(v[1:], v[:-1])
        across = dup & (c[1:] != c[:-1])
        if across.any():
            j = int(np.argmax(across))
            k = j + 1 if order is None else int(order[j + 1])
            self._global_race("write", k, a.th, int(pack_at(t[j], self.pc)), "the write")
        within = dup & ~across
        if within.any() and not a.scoped:
            j = int(np.argmax(within))
            byte = first_differing_byte(v[j], v[j + 1]) if values_differ else 0
            k = j + 1 if order is None else int(order[j + 1])
            self._cta_race(a, k, "write", int(t[j]), self.pc, byte)

    def _published(self, ctas: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Whether each CTA has run a gpu-scope fence or release since the
        access stamped with its ``epochs`` (always False in kernels without
        any: nothing there can order CTAs)."""
        if not self.cta_sync:
            return np.zeros(len(ctas), dtype=bool)
        return self.fence_epoch[np.maximum(ctas, 0)] > epochs

    def _global_race(self, kind: str, k: int, th: np.ndarray, at: int, other: str) -> None:
        tid, pc = unpack_at(at)
        self.report("race", f"global-memory race between CTAs: {kind} at {self.at(int(th[k]))} conflicts with "
                    f"{other} at {self.line(pc)} by {self.who(tid)}: nothing orders accesses of different "
                    "CTAs (no gpu-scope fence or release by that CTA between them)",
                    self.line(self.pc), self.line(pc))

    # within a CTA ---------------------------------------------------------------------------
    def _within_cta(self, a: GlobalAccess) -> None:
        """Conflicts with accesses by other threads of the same CTA that
        nothing orders before this one (:mod:`.clocks`): the last write
        (for a store: unless it stores the same value, or strict); for
        writes, the reads since; for plain accesses, the strong ones since.
        Strong accesses do not race with each other."""
        g, idx, th, tid, cta = a.shadow, a.idx, a.th, a.tid, a.cta
        w = a.w if a.w is not None else g.w_cta[idx]
        other = (w == cta) & (g.w_tid[idx] != tid)
        if a.strong:
            other &= ~g.w_atomic[idx]
        elif a.write and a.new is not None and not self.strict and other.any():
            other &= differ(a.old(), a.new)
        if other.any():
            sel = np.flatnonzero(other)
            writer = g.w_tid[idx[sel]].astype(np.int64)
            late = g.w_clock[idx[sel]] > self.clocks.knows(th[sel], writer)
            if late.any():
                k = int(sel[np.argmax(late)])
                byte = first_differing_byte(a.old()[k], a.new[k]) if a.write and not a.strong \
                    and a.new is not None and not self.strict else 0
                self._cta_race(a, k, "write", int(cta[k]) * self.ntid + int(g.w_tid[idx[k]]),
                               int(g.w_pc[idx[k]]), byte)
        if (a.write or a.atomic) and g.reads.used:
            r = a.r if a.r is not None else g.r_cta[idx]
            self._unordered_in_cta(a, np.flatnonzero(r == cta), g.unordered_reads, g.reader, "read")
        if not a.strong and g.a_cta is not None and g.atomics.used:
            self._unordered_in_cta(a, np.flatnonzero(g.a_cta[idx] == cta), g.unordered_atomics,
                                   g.atomic_access, "atomic or strong access")

    def _unordered_in_cta(self, a: GlobalAccess, sel: np.ndarray, unordered, access, other_kind: str) -> None:
        """Report the first of cells ``sel`` whose slot records (reads or
        strong accesses: ``unordered`` finds them, ``access`` names one)
        hold an access by another thread this one does not come after."""
        if len(sel) == 0:
            return
        th = a.th[sel]
        slot = unordered(a.idx[sel], a.tid[sel], lambda rows, lanes: self.clocks.knows(th[rows], lanes))
        if (slot >= 0).any():
            j = int(np.argmax(slot >= 0))
            k = int(sel[j])
            lane, pc = access(int(a.idx[k]), int(slot[j]))
            self._cta_race(a, k, other_kind, int(a.cta[k]) * self.ntid + lane, pc)

    def _cta_race(self, a: GlobalAccess, k: int, other_kind: str, other_thread: int, other_pc: int,
                  within: int = 0) -> None:
        """Report a race within a CTA at cell ``k`` of the access (its byte ``within``)."""
        name = self._names.get(a.key)
        where = f"offset {int(a.idx[k]) * a.shadow.grain + within:#x}" + (f" of {name}" if name else "")
        self.report("race", f"global-memory race within a CTA: {a.kind()} {where} at {self.at(int(a.th[k]))} "
                    f"conflicts with the {other_kind} at {self.line(other_pc)} by {self.who(other_thread)}: "
                    "no barrier, mbarrier or release/acquire orders them", self.line(self.pc), self.line(other_pc))

    # recording ------------------------------------------------------------------------------
    def _record_global(self, a: GlobalAccess) -> None:
        """Record the access: a gpu-scope strong one with the strong
        accesses; a write (plain or ``.cta``-scoped strong) as the last
        write, forgetting the reads and strong accesses before it; a read
        with the reads."""
        g, idx, cta = a.shadow, a.idx, a.cta
        if a.strong and not a.scoped:
            s = g.s_cta[idx]
            g.s_cta[idx] = np.where((s == -1) | (s == cta), cta, -2)
            g.s_at[idx] = pack_at(a.th, self.pc)
            self._record_strong_in_cta(g, idx, a.th, self.clocks.own(a.th))
        elif a.write:
            if g.s_cta is not None:
                g.s_cta[idx] = -1
                g.a_cta[idx] = -1
            g.w_cta[idx] = cta
            if g.read_any:
                g.r_cta[idx] = -1
            if g.w_epoch is not None:
                g.w_epoch[idx] = self.fence_epoch[cta]
            g.record_write(idx, a.tid, self.clocks.own(a.th), self.pc, strong=a.strong)
        else:
            self._record_global_reads(g, idx, a.th, self.pc, self.fence_epoch, self.clocks.own(a.th),
                                      self._knows(a.th), strong=a.strong)

    def _record_global_reads(self, g: GlobalShadow, idx: np.ndarray, th: np.ndarray, pc: int,
                             fence_epoch: np.ndarray, stamps: np.ndarray, knows=None, strong: bool = False) -> None:
        """Record reads of cells ``idx`` by ``th`` (at ``pc``, stamped
        ``stamps``, the CTAs' fence epochs then; ``knows``: the readers'
        clocks now, None for reads recorded late: see :meth:`._log_read`).
        A ``.cta``-scoped strong read is a read between CTAs and a strong
        access within its CTA."""
        cta = (th // self.ntid).astype(np.int32)
        if not g.read_any:          # (a buffer only ever written needs no reader tags)
            g.read_any = True
            g.r_cta = np.full(len(g.w_cta), -1, dtype=np.int32)
        r = g.r_cta[idx]
        g.r_cta[idx] = np.where((r == -1) | (r == cta), cta, -2)
        g.r_at[idx] = pack_at(th, pc)
        if g.r_epoch is not None:
            g.r_epoch[idx] = fence_epoch[cta]
        if strong:
            self._record_strong_in_cta(g, idx, th, stamps)
        else:
            g.record_read(idx, local_thread(th, self.ntid), stamps, pc, knows, ascending=ascending(th))

    def _record_strong_in_cta(self, g: GlobalShadow, idx: np.ndarray, th: np.ndarray, stamps: np.ndarray) -> None:
        cta = (th // self.ntid).astype(np.int32)
        s = g.a_cta[idx]
        g.a_cta[idx] = np.where((s == -1) | (s == cta), cta, -2)
        g.record_atomic(idx, th % self.ntid, stamps, self.pc)

"""The sanitizer's checks of the async proxy: TMA and bulk copies, cp.async,
wgmma/tcgen05 operand reads, proxy fences."""

from __future__ import annotations

import numpy as np

from .shadow import ASYNC, CP_ASYNC, TMA, as_range
from .values import distinct, expand

__all__ = ["AsyncChecks"]


class AsyncChecks:
    """Mixed into :class:`Sanitizer`: the async proxy."""

    def copy_read(self, offsets: np.ndarray, threads: np.ndarray, width: int) -> None:
        """A bulk copy by ``threads`` reads ``width`` bytes of shared memory
        at each byte offset (the async proxy, in flight until the
        ``cp.async.bulk.wait_group.read``)."""
        idx = self.shared_cells(offsets, width)
        self.async_read(idx, np.repeat(threads, width // self.shadow.grain), "bulk")

    def copy_write(self, offsets: np.ndarray, threads: np.ndarray, width: int) -> None:
        """A TMA or bulk copy by ``threads`` writes ``width`` bytes of shared
        memory at each byte offset (see :meth:`async_write`)."""
        idx = self.shared_cells(offsets, width)
        self.async_write(idx, np.repeat(threads, width // self.shadow.grain))

    def _expand_async(self, ratio: int) -> None:
        """The shadow's cells split into ``ratio`` each: the cell indices
        held for async operations in flight follow."""
        if ratio == 1:
            return
        self.in_flight = [(kind, seq, issuer, expand(where, ratio), pc)
                          for kind, seq, issuer, where, pc in self.in_flight]
        self._tma_bytes = [(t, expand(at, ratio)) for t, at in self._tma_bytes]
        self._cp_copies = [(expand(idx, ratio), np.repeat(th, ratio), np.repeat(seq, ratio))
                           for idx, th, seq in self._cp_copies]

    def async_read(self, idx: np.ndarray, th: np.ndarray, kind: str) -> None:
        """Shared cells read by the async proxy for ``th``'s instruction:
        initialised, complete, ordered after their writes, fenced; in flight
        until the thread waits (``kind``: ``wgmma``, ``tcgen05``, ``bulk``)."""
        sh = self.shadow
        self._check_init(idx, th, "async-proxy read of")
        self._check_pending(idx, th, "async-proxy read")
        tid = th % self.ntid
        writer = self._unordered_write(idx, th, tid, "async-proxy read")
        generic = writer >= 0                   # (bytes the async proxy wrote need no fence)
        unfenced = generic & ~sh.fenced[idx] if generic.any() else generic
        if unfenced.any():
            k = int(np.argmax(unfenced))
            self.report("proxy", f"the async proxy reads shared offset {sh.offset(idx[k]):#x} at "
                        f"{self.at(int(th[k]))}, written through the generic proxy at "
                        f"{self.line(int(sh.w_pc[idx[k]]))} by {self._thread_at(th[k], writer[k])} with "
                        "no fence.proxy.async between them", self.line(self.pc), self.line(int(sh.w_pc[idx[k]])))
        opened = self.wg_open if kind == "wgmma" else self.bulk_open if kind == "bulk" else None
        for t, part in _by_thread(idx, th):       # one entry per issuing thread: each lands at its own wait
            sh.flying[part] += 1
            self.in_flight.append((kind, int(opened[t]) if opened is not None else 0, t, part, self.pc))

    def _check_in_flight(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        """A write to bytes an async read (wgmma, tcgen05.mma, a bulk
        store) may still be reading: nothing waited for it yet, or (for
        reads tied to an mbarrier by a commit) the writer has not observed
        the phase that completes them."""
        sh = self.shadow
        flying = sh.flying[idx] > 0
        if not flying.any():
            return
        mark = sh.mark
        mark[idx[flying]] = True                # the bytes written that are in flight
        sh.who[idx[flying]] = th[flying]        # and who writes each
        keep = []
        for entry in self.in_flight:
            kind, seq, issuer, where, pc = entry
            hit = mark[where]
            if not hit.any():
                keep.append(entry)
                continue
            if "@" in kind:                      # seq: {mbarrier word: its completions at the arrive}
                writers = distinct(sh.who[where[hit]])
                if any((self.clocks.knows(writers, self._mbar_column[w]) > n).all() for w, n in seq.items()):
                    sh.flying[where] -= 1          # the writer saw a phase of a commit's mbarrier complete
                    continue
            byte = int(where[np.argmax(hit)])
            t = int(th[np.argmax(idx == byte)])
            self.report("async", f"{what} of shared offset {sh.offset(byte):#x} at {self.at(t)} while "
                        f"the async read by {self.line(pc)} ({self._thread_at(t, issuer % self.ntid)}) "
                        "is still in flight (no wait for it orders the write after it)",
                        self.line(self.pc), self.line(pc))
            keep.append(entry)
        mark[idx] = False
        self.in_flight = keep

    def async_write(self, idx: np.ndarray, th: np.ndarray) -> None:
        """Shared cells written by a TMA or bulk copy issued by ``th``:
        checked like a write of the issuing thread (the stage must be free),
        then in flight until the copy's mbarrier phase is observed."""
        sh = self.shadow
        idx = np.asarray(idx, dtype=np.int64)
        th = np.asarray(th, dtype=np.int64)
        for t, part in _by_thread(idx, th):
            at = as_range(part, sh.seen)        # a copy's box is usually one range of bytes
            # only the issuer's own CTA's bytes are checked (clocks are per CTA):
            # in a cluster a copy may also write other CTAs' shared memory
            mine = part if self.lone_ctas else part[sh.cta_of(part) == t // self.ntid]
            if len(mine):
                self._async_overwrite(mine, t, at if mine is part else as_range(mine, sh.seen))
            sh.record_write(at, ASYNC, 0, self.pc)
            self._tma_bytes.append((t, at))

    def _async_overwrite(self, idx: np.ndarray, thread: int, at: np.ndarray | slice) -> None:
        """An async-proxy write by ``thread`` of bytes ``idx`` of its CTA
        (also given as ``at``: the same bytes, perhaps as a range in another
        order): no async read may still be reading them, and every read of
        them must be ordered before."""
        sh = self.shadow
        th = np.broadcast_to(np.int64(thread), idx.shape)
        self._check_in_flight(idx, th, "async-proxy write")
        slot = sh.unordered_reads(at, np.broadcast_to(np.int64(thread % self.ntid), idx.shape),
                                  lambda rows, others: self.clocks.knows(thread, others))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            byte = at.start + k if isinstance(at, slice) else int(idx[k])
            self._race("async-proxy write", byte, thread, "read", *sh.reader(byte, int(slot[k])))

    def tma_signal(self, threads: np.ndarray, words: np.ndarray) -> None:
        """The copies this instruction issued for ``threads`` complete-tx on
        their mbarrier ``words`` (called before the phase can complete)."""
        sh = self.shadow
        word_of = dict(zip(np.asarray(threads).tolist(), np.asarray(words).tolist()))
        rest = []
        for t, b in self._tma_bytes:
            word = word_of.get(t)
            if word is None:
                rest.append((t, b))
                continue
            sh.pend[b] = TMA
            sh.pend_key[b] = word
            sh.pend_col[b] = self._column(word)
            sh.pend_seq[b] = self.completions.get(word, 0)
        self._tma_bytes = rest

    def _column(self, word: int) -> int:
        """The clock column standing for mbarrier ``word``'s completed phases.
        Clocks of different clusters never meet, so each cluster numbers its
        mbarriers' columns from the first (the clocks stay as narrow as one
        cluster's mbarriers)."""
        col = self._mbar_column.get(word)
        if col is None:
            cluster = int(self.m.cluster_first(word * 8 // max(self.shadow.size, 1)))
            k = self._cluster_columns.get(cluster, 0)
            self._cluster_columns[cluster] = k + 1
            col = self._mbar_column[word] = self.clocks.column(k)
        return col

    def proxy_fence(self, threads: np.ndarray) -> None:
        """``fence.proxy.async`` by ``threads``: the generic writes each has
        seen become visible to the async proxy."""
        sh = self.shadow
        for cta in np.unique(threads // self.ntid).tolist():
            mine = threads[threads // self.ntid == cta]
            known = self.clocks.joined(mine)[:self.ntid]
            r = sh.cta_range(cta)
            w = sh.w_tid[r].astype(np.int64)
            ok = (w >= 0) & (sh.w_clock[r] <= known[np.where(w >= 0, w, 0)])
            sh.fenced[r] |= ok

    def _resolve(self, kind: str, threads: np.ndarray, done: np.ndarray | None = None) -> None:
        """Async reads of ``kind`` issued by ``threads`` are complete now
        (for wgmma: the groups below ``done`` per thread): they become reads
        stamped with their issuing thread's clock."""
        mine = np.zeros(self.m.nthreads, dtype=bool)
        mine[threads] = True
        keep, finished = [], {}
        for entry in self.in_flight:
            k, seq, issuer = entry[:3]
            if k == kind and mine[issuer] and (done is None or seq < done[issuer]):
                finished.setdefault(issuer, []).append(entry)
            else:
                keep.append(entry)
        if not finished:
            return
        sh = self.shadow
        for issuer, entries in finished.items():    # each issuer's reads land in one record
            idx = np.concatenate([e[3] for e in entries])
            pcs = np.concatenate([np.full(len(e[3]), e[4], dtype=np.int32) for e in entries])
            for e in entries:
                sh.flying[e[3]] -= 1
            sh.record_read_by_one(idx, issuer % self.ntid, self.clocks.own(np.array([issuer]))[0], pcs,
                                  lambda rows, others, t=issuer: self.clocks.knows(t, others))
        self.in_flight = keep

    def cp_async_written(self, idx: np.ndarray, th: np.ndarray) -> None:
        """``cp.async`` bytes: written (checked like a store), then in flight
        in the issuing thread's open group."""
        sh = self.shadow
        self._write(idx, th, None)
        seq = self.cp_open[th]
        sh.pend[idx] = CP_ASYNC
        sh.pend_key[idx] = th
        sh.pend_seq[idx] = seq
        self._cp_copies.append((idx, th, seq))

    def _cp_still_pending(self, threads: np.ndarray, extra=None):
        """Per in-flight ``cp.async`` copy, the bytes issued by ``threads``
        (and where ``extra(idx, th, seq)`` holds) that no later write has
        replaced: ``(entry, mask)`` pairs; copies left with no byte pending
        are forgotten."""
        sh = self.shadow
        issuing = np.zeros(self.m.nthreads, dtype=bool)
        issuing[threads] = True
        keep, out = [], []
        for idx, th, seq in self._cp_copies:
            alive = (sh.pend[idx] == CP_ASYNC) & (sh.pend_key[idx] == th) & (sh.pend_seq[idx] == seq)
            mine = alive & issuing[th]
            if extra is not None:
                mine &= extra(idx, th, seq)
            if mine.any():
                out.append(((idx, th, seq), mine))
            rest = alive & ~mine
            if rest.all():
                keep.append((idx, th, seq))
            elif rest.any():
                keep.append((idx[rest], th[rest], seq[rest]))
        self._cp_copies = keep
        return out

    def _complete_cp_async(self, threads: np.ndarray) -> None:
        sh = self.shadow
        for (idx, th, _), done in self._cp_still_pending(
                threads, lambda idx, th, seq: seq < self.cp_done[th]):
            b = idx[done]
            sh.pend[b] = 0
            sh.w_clock[b] = self.clocks.own(th[done])

    def cp_async_to_mbarrier(self, threads: np.ndarray, words: np.ndarray) -> None:
        """``cp.async.mbarrier.arrive``: the threads' cp.async copies so far
        complete on the mbarrier's current phase."""
        sh = self.shadow
        word_of = np.zeros(self.m.nthreads, dtype=np.int64)
        word_of[threads] = words
        for (idx, th, _), mine in self._cp_still_pending(threads):
            b, w = idx[mine], word_of[th[mine]]
            sh.pend[b] = TMA
            sh.pend_key[b] = w
            for word in distinct(w).tolist():
                at = b[w == word]
                sh.pend_seq[at] = self.completions.get(word, 0)
                sh.pend_col[at] = self._column(word)

    def _tie(self, kind: str, threads: np.ndarray, words: np.ndarray) -> None:
        """The ``kind`` async reads of ``threads`` complete with the current
        phase of their commit's mbarrier: a write to those bytes must come
        from a thread that observed that phase, or a phase of another
        mbarrier a commit of the same thread arrived on since — the same
        commit's other CTAs with ``.multicast::cluster``, or a later commit
        (a commit tracks all the thread's prior async tcgen05 operations,
        PTX ISA tcgen05.commit). Tied entries are ``(kind + "@", {word:
        completions of the word at the arrive}, issuer, bytes, pc)``."""
        order = np.argsort(threads, kind="stable")
        keys, vals = np.asarray(threads)[order], np.asarray(words, dtype=np.int64)[order]
        tied = []
        for entry in self.in_flight:
            k, seq, issuer, idx, pc = entry
            at = min(int(np.searchsorted(keys, issuer)), len(keys) - 1)
            if k not in (kind, f"{kind}@") or keys[at] != issuer:
                tied.append(entry)
                continue
            word = int(vals[at])
            self._column(word)
            words = {} if k == kind else dict(seq)
            words.setdefault(word, self.completions.get(word, 0))
            tied.append((f"{kind}@", words, issuer, idx, pc))
        self.in_flight = tied


def _by_thread(idx: np.ndarray, th: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``idx`` split by the thread of each byte (``th``), threads in order of
    first appearance; per-byte thread arrays hold each thread in one run."""
    if len(th) == 0:
        return []
    if th[0] == th[-1] and (th == th[0]).all():         # (one issuing thread: the usual case)
        return [(int(th[0]), idx)]
    cut = np.flatnonzero(th[1:] != th[:-1]) + 1
    firsts = th[np.concatenate(([0], cut))]
    if len(set(firsts.tolist())) == len(firsts):
        return list(zip(firsts.tolist(), np.split(idx, cut)))
    return [(t, idx[th == t]) for t in dict.fromkeys(firsts.tolist())]

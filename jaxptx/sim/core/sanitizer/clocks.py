"""Vector clocks over the threads of each CTA: what orders what.

Every thread ``t`` carries a clock vector ``vc[t]`` with one entry per
thread of its CTA: ``vc[t][u]`` is the latest step of thread ``u`` that
``t`` is known to come after. A thread's own entry counts its *releases*
(``bar.sync``/``bar.arrive``/``bar.warp.sync``/mbarrier arrivals): an
access stamped ``(u, c)`` happened before everything thread ``t`` does from
the moment ``vc[t][u] >= c``. Synchronisation joins clocks (elementwise
maximum) in the direction PTX's memory model orders:

* ``bar.sync``/``barrier.sync``/``bar.red``: every participant acquires the
  join of the participants' clocks and of the clocks released into the
  barrier by ``bar.arrive`` since it last completed;
* ``bar.arrive``: releases only (the thread does not wait);
* ``bar.warp.sync``: the lanes of the member mask join;
* mbarrier arrive (also ``cp.async.mbarrier.arrive``, ``tcgen05.commit``):
  releases into the mbarrier; a ``test_wait``/``try_wait`` that observes a
  completed phase acquires what was released into it;
* ``barrier.cluster``: as ``bar.sync`` within each CTA (orderings between
  CTAs are not tracked: see :mod:`.shadow`).

An mbarrier keeps what was released into its current phase apart from what
its completed phases hold: observing a phase acquires only completed
phases' releases (arrivals a fast thread already made towards the next
phase stay out).

Storage: threads that synchronised together hold the same vector but for
their own entries, so a thread's vector is a shared *row* (``row_of[t]``
into one table) with its own entry kept apart (``mine[t]``). A barrier of
a whole CTA makes one row for it, however many threads it has (a join
costs the CTA's distinct rows, not a row per thread), and a thread gets a
row of its own only when it acquires something its row-mates did not.
Rows nobody refers to any more are dropped when the table fills.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Clocks"]


def _runs(keys: np.ndarray, inverse: bool = False):
    """The distinct values of ``keys`` (sorted), and with ``inverse`` each
    element's index among them; cheap when equal keys come in runs (the
    threads of a group): only the heads of the runs are sorted."""
    if len(keys) == 0 or keys[0] == keys[-1] and (keys == keys[0]).all():
        return (keys[:1], np.zeros(len(keys), dtype=np.int64)) if inverse else keys[:1]
    if inverse:
        distinct, where = np.unique(keys, return_inverse=True)
        return distinct, where.reshape(-1)
    heads = keys[np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])]
    return np.unique(heads)


class Clocks:
    """The vector clocks of one launch, and the clocks parked in barriers."""

    def __init__(self, nctas: int, ntid: int) -> None:
        self.ntid = ntid
        self.n = n = nctas * ntid
        self.width = ntid
        self.tid = np.arange(n, dtype=np.int64) % max(ntid, 1)
        self.mine = np.ones(n, dtype=np.int32)              # each thread's own entry
        self.row_of = np.zeros(n, dtype=np.int64)          # ... and the row holding the others
        self.table = np.zeros((max(16, 2 * nctas), ntid), dtype=np.int32)   # row 0: all zero
        self.rows = 1                                      # rows of the table in use
        self._arrived: dict[int, np.ndarray] = {}     # CTA * 16 + barrier id -> released clocks
        self._mbarrier: dict[int, np.ndarray] = {}    # flat mbarrier word -> released into the current phase
        self._completed: dict[int, np.ndarray] = {}   # ... -> released into its completed phases

    def column(self, k: int) -> int:
        """Clock column ``k`` after the threads' own entries (standing for
        an mbarrier's completed phases), made if needed: zero for every
        thread and every parked clock. Columns grow in blocks: a zero
        column changes no join, so spare ones cost nothing."""
        col = self.ntid + k
        if col >= self.width:
            grow = max(16, col + 1 - self.width, (self.width - self.ntid) // 2)
            self.table = np.pad(self.table, ((0, 0), (0, grow)))
            self.width += grow
            for table in (self._mbarrier, self._completed, self._arrived):
                for key, held in list(table.items()):
                    table[key] = np.pad(held, (0, self.width - len(held)))
        return col

    # reading ----------------------------------------------------------------------------
    def own(self, threads: np.ndarray) -> np.ndarray:
        """Each thread's own clock entry (the stamp of its accesses now)."""
        return self.mine[threads]

    def knows(self, threads: np.ndarray, others: np.ndarray) -> np.ndarray:
        """``vc[t][u]`` for pairs (``threads``, CTA-local ``others``; or a
        clock column), broadcast together."""
        t = np.asarray(threads, dtype=np.int64)
        # one flat take: several times faster than a 2-D fancy gather
        seen = self.table.reshape(-1).take(self.row_of[t] * self.width + others)
        self_entry = self.tid[t] == others
        if np.any(self_entry):
            seen = np.where(self_entry, self.mine[t], seen)
        return seen

    def row(self, thread: int) -> np.ndarray:
        """Thread ``thread``'s whole clock vector (a copy)."""
        out = self.table[self.row_of[thread]].copy()
        out[self.tid[thread]] = self.mine[thread]
        return out

    def joined(self, threads: np.ndarray) -> np.ndarray:
        """The join (elementwise maximum) of ``threads``' clock vectors."""
        threads = np.asarray(threads, dtype=np.int64)
        rows = _runs(self.row_of[threads])
        out = self.table[rows].max(axis=0) if len(rows) > 1 else self.table[rows[0]].copy()
        np.maximum.at(out, self.tid[threads], self.mine[threads])
        return out

    # writing ----------------------------------------------------------------------------
    def tick(self, threads: np.ndarray) -> None:
        """``threads`` start a new step (their own entries count one more)."""
        self.mine[threads] += 1

    def _new_rows(self, values: np.ndarray) -> int:
        """Append rows ``values`` to the table; returns the first's index."""
        k = len(values)
        if self.rows + k > len(self.table):
            self._compact(k)
        first = self.rows
        self.table[first:first + k] = values
        self.rows += k
        return first

    def _compact(self, need: int) -> None:
        """Make room for ``need`` rows: keep only the rows threads refer to
        (marked, not sorted), and grow the table while they would fill more
        than a quarter of it."""
        used = np.zeros(self.rows, dtype=bool)
        used[self.row_of] = True
        live = np.flatnonzero(used)
        size = len(self.table)
        while len(live) + need > size // 4:
            size *= 2
        table = np.zeros((size, self.width), dtype=np.int32)
        table[:len(live)] = self.table[live]
        remap = np.cumsum(used) - 1
        self.table, self.row_of, self.rows = table, remap[self.row_of], len(live)

    def join(self, threads: np.ndarray, extra: np.ndarray | None = None) -> None:
        """``threads`` (of one CTA) synchronise: each acquires the join of
        all their clocks (and ``extra``), then starts a new step."""
        if len(threads) == 0:
            return
        threads = np.asarray(threads, dtype=np.int64)
        joined = self.joined(threads)
        if extra is not None:
            np.maximum(joined, extra, out=joined)
        self.row_of[threads] = self._new_rows(joined[None, :])
        self.mine[threads] = joined[self.tid[threads]] + 1

    def join_ctas(self, nctas: int) -> None:
        """Every thread of every CTA at one barrier (the machine's fast path)."""
        ntid, size = self.ntid, len(self.table)
        cta = np.arange(self.n, dtype=np.int64) // max(ntid, 1)
        pairs = _runs(cta * size + self.row_of)       # each CTA's distinct rows, CTA by CTA
        heads = np.flatnonzero(np.r_[True, pairs[1:] // size != pairs[:-1] // size])
        joined = np.maximum.reduceat(self.table[pairs % size], heads, axis=0)
        np.maximum(joined[:, :ntid], self.mine.reshape(nctas, ntid), out=joined[:, :ntid])
        for key in [k for k in self._arrived if k // 16 < nctas]:
            c = key // 16
            np.maximum(joined[c], self._arrived.pop(key), out=joined[c])
        first = self._new_rows(joined)
        self.row_of[:] = first + cta
        self.mine[:] = joined[:, :ntid].reshape(-1) + 1

    def acquire(self, threads: np.ndarray, held: np.ndarray) -> None:
        """``threads`` acquire clock ``held`` (the first ``len(held)``
        columns): each vector becomes its join with it."""
        if len(threads) == 0:
            return
        threads = np.asarray(threads, dtype=np.int64)
        held = np.asarray(held, dtype=np.int32)[:self.width]
        cols = len(held)
        own_cols = min(cols, self.ntid)
        t_mine = self.tid[threads] < own_cols
        if t_mine.any():
            sel = threads[t_mine]
            self.mine[sel] = np.maximum(self.mine[sel], held[self.tid[sel]])
        rows, inverse = _runs(self.row_of[threads], inverse=True)
        old = self.table[rows, :cols]
        new = np.maximum(old, held)
        if (new == old).all():
            return
        full = self.table[rows].copy()
        full[:, :cols] = new
        self.row_of[threads] = self._new_rows(full) + inverse

    def raise_column(self, threads: np.ndarray, col: int, value: int) -> None:
        """``vc[t][col] = max(vc[t][col], value)`` for ``threads`` (a
        column past the threads' own entries)."""
        held = np.zeros(col + 1, dtype=np.int32)
        held[col] = value
        self.acquire(threads, held)

    # barriers ---------------------------------------------------------------------------
    def barrier_release(self, threads: np.ndarray, key: int) -> None:
        """``bar.arrive`` by ``threads`` at barrier ``key`` (CTA * 16 + id)."""
        joined = self.joined(threads)
        held = self._arrived.get(key)
        self._arrived[key] = joined if held is None else np.maximum(held, joined)
        self.tick(threads)

    def barrier_complete(self, threads: np.ndarray, key: int) -> None:
        """Barrier ``key`` completed for the waiting ``threads``."""
        self.join(threads, self._arrived.pop(key, None))

    # mbarriers --------------------------------------------------------------------------
    def mbarrier_release(self, threads: np.ndarray, words: np.ndarray) -> None:
        """Arrivals of ``threads`` on the mbarriers at flat words ``words``."""
        for word in np.unique(words).tolist():
            mine = threads[words == word]
            joined = self.joined(mine)
            held = self._mbarrier.get(word)
            self._mbarrier[word] = joined if held is None else np.maximum(held, joined)
        self.tick(threads)

    def mbarrier_complete(self, word: int) -> None:
        """A phase of mbarrier ``word`` completed: what was released into it
        becomes visible to the threads that observe it."""
        held = self._mbarrier.pop(word, None)
        if held is not None:
            done = self._completed.get(word)
            self._completed[word] = held if done is None else np.maximum(done, held)

    def mbarrier_acquire(self, threads: np.ndarray, words: np.ndarray) -> None:
        """``threads`` observed a completed phase of the mbarriers ``words``."""
        for word in np.unique(words).tolist():
            held = self._completed.get(word)
            if held is not None:
                self.acquire(threads[words == word], held)

    def mbarrier_reset(self, words: np.ndarray) -> None:
        """``mbarrier.init``/``inval``: nothing released so far counts."""
        for word in np.unique(words).tolist():
            self._mbarrier.pop(word, None)
            self._completed.pop(word, None)

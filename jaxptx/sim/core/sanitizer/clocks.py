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
"""

from __future__ import annotations

import numpy as np

__all__ = ["Clocks"]


class Clocks:
    """The vector clocks of one launch, and the clocks parked in barriers."""

    def __init__(self, nctas: int, ntid: int) -> None:
        self.ntid = ntid
        n = nctas * ntid
        self.vc = np.zeros((n, ntid), dtype=np.int32)
        self.tid = np.arange(n, dtype=np.int64) % max(ntid, 1)
        self.vc[np.arange(n), self.tid] = 1
        self._arrived: dict[int, np.ndarray] = {}     # CTA * 16 + barrier id -> released clocks
        self._mbarrier: dict[int, np.ndarray] = {}    # flat mbarrier word -> released into the current phase
        self._completed: dict[int, np.ndarray] = {}   # ... -> released into its completed phases

    def column(self, k: int) -> int:
        """Clock column ``k`` after the threads' own entries (standing for
        an mbarrier's completed phases), made if needed: zero for every
        thread and every parked clock. Columns grow in blocks: a zero
        column changes no join, so spare ones cost nothing."""
        col = self.ntid + k
        if col >= self.vc.shape[1]:
            grow = max(16, col + 1 - self.vc.shape[1], (self.vc.shape[1] - self.ntid) // 2)
            self.vc = np.pad(self.vc, ((0, 0), (0, grow)))
            for table in (self._mbarrier, self._completed, self._arrived):
                for key, held in list(table.items()):
                    table[key] = np.pad(held, (0, self.vc.shape[1] - len(held)))
        return col

    def own(self, threads: np.ndarray) -> np.ndarray:
        """Each thread's own clock entry (the stamp of its accesses now)."""
        return self.knows(threads, self.tid[threads])

    def knows(self, threads: np.ndarray, others: np.ndarray) -> np.ndarray:
        """``vc[t][u]`` for pairs (``threads``, CTA-local ``others``; or a
        clock column), broadcast together."""
        # one flat take: several times faster than a 2-D fancy gather
        return self.vc.reshape(-1).take(np.asarray(threads, dtype=np.int64) * self.vc.shape[1] + others)

    def _tick(self, threads: np.ndarray) -> None:
        self.vc[threads, self.tid[threads]] += 1

    # barriers ---------------------------------------------------------------------------
    def join(self, threads: np.ndarray, extra: np.ndarray | None = None) -> None:
        """``threads`` (of one CTA) synchronise: each acquires the join of
        all their clocks (and ``extra``), then starts a new step."""
        if len(threads) == 0:
            return
        joined = self.vc[threads].max(axis=0)
        if extra is not None:
            np.maximum(joined, extra, out=joined)
        self.vc[threads] = joined
        self._tick(threads)

    def join_ctas(self, nctas: int) -> None:
        """Every thread of every CTA at one barrier (the machine's fast path)."""
        per_cta = self.vc.reshape(nctas, self.ntid, -1)
        per_cta[:] = per_cta.max(axis=1, keepdims=True)
        for key in [k for k in self._arrived if k // 16 < nctas]:
            cta = key // 16
            np.maximum(per_cta[cta], self._arrived.pop(key), out=per_cta[cta])
        self._tick(np.arange(len(self.vc)))

    def barrier_release(self, threads: np.ndarray, key: int) -> None:
        """``bar.arrive`` by ``threads`` at barrier ``key`` (CTA * 16 + id)."""
        joined = self.vc[threads].max(axis=0)
        held = self._arrived.get(key)
        self._arrived[key] = joined if held is None else np.maximum(held, joined)
        self._tick(threads)

    def barrier_complete(self, threads: np.ndarray, key: int) -> None:
        """Barrier ``key`` completed for the waiting ``threads``."""
        self.join(threads, self._arrived.pop(key, None))

    # mbarriers --------------------------------------------------------------------------
    def mbarrier_release(self, threads: np.ndarray, words: np.ndarray) -> None:
        """Arrivals of ``threads`` on the mbarriers at flat words ``words``."""
        for word in np.unique(words).tolist():
            mine = threads[words == word]
            joined = self.vc[mine].max(axis=0)
            held = self._mbarrier.get(word)
            self._mbarrier[word] = joined if held is None else np.maximum(held, joined)
        self._tick(threads)

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
                mine = threads[words == word]
                self.vc[mine] = np.maximum(self.vc[mine], held)

    def mbarrier_reset(self, words: np.ndarray) -> None:
        """``mbarrier.init``/``inval``: nothing released so far counts."""
        for word in np.unique(words).tolist():
            self._mbarrier.pop(word, None)
            self._completed.pop(word, None)

"""Asynchronous operations that complete late: the random schedule's other half.

Under the default schedule every asynchronous operation completes when it is
issued: the copies (``cp.async``, ``cp.async.bulk``,
``cp.async.bulk.tensor``, the response of
``clusterlaunchcontrol.try_cancel``) and the tensor-core operations
(``wgmma.mma_async``; ``tcgen05.mma``, ``.cp`` and ``.shift`` with the
arrive of the ``tcgen05.commit`` that tracks them). The PTX ISA promises
less: an operation completes at some point before whatever waits for it —
``cp.async.wait_group`` / ``wait_all`` for ``cp.async`` groups,
``cp.async.bulk.wait_group`` for bulk groups, the complete-tx on its
mbarrier for the mbarrier forms, ``wgmma.wait_group`` for wgmma groups, the
``tcgen05.commit`` mbarrier arrive for tcgen05 operations — and a kernel
that reads the destination earlier, or overwrites a source, gets whatever
the memory held at the time. Under ``schedule="random"`` the semantics hand
the operation's effect to :func:`later` instead, and :class:`Deferred`
completes it at a step of its seeded choosing, or when a wait needs it, or
when nothing else can run (a warp waiting on its mbarrier must not deadlock
the launch), or before the grid completes. So a missing wait shows as an
output that changes with the seed (``sim.explore``'s ``outputs_differ``),
where the default schedule hides it.

The tensor-core operations of one thread (``"wgmma"``: of one warpgroup)
complete in the order they were issued, as on hardware, where MMAs into
one accumulator are pipelined in order (PTX ISA "wgmma.mma_async": no fence
is needed between them; "tcgen05 Memory Consistency Model": pipelined
``tcgen05.cp`` → ``tcgen05.mma`` and ``mma`` → ``mma`` pairs of one thread):
completing one completes its earlier ones first. The arrive of a
``tcgen05.commit`` is queued behind them, so it happens only after every
earlier tcgen05 operation of its threads has completed.

A checked launch (``check=``) completes everything at issue on every
schedule: the sanitizer models the in-flight window itself and reports a
read of bytes a copy may not have written yet, whatever the schedule.

The operands (addresses, sizes, masks, coordinates, descriptors, the
mbarrier) are read when the operation is issued; memory and register
sources are read and the destination written when it completes, as on
hardware, where either may happen at any point in between.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .step import Step

__all__ = ["Deferred", "later", "deferred_of", "COMPLETE_PER_STEP"]

COMPLETE_PER_STEP = 0.25
"""The chance that a step completes one pending operation (chosen at random
among the pending ones, with the earlier ones it must follow) before it
runs."""

_IN_ORDER = ("wgmma", "tcgen05")
"""Kinds whose operations complete in issue order among those sharing a thread."""

_GROUPED = ("cp_async", "wgmma")
"""Kinds grouped by a per-thread ``commit_group``."""


class _Pending(NamedTuple):
    effect: Callable[[], None]
    threads: np.ndarray
    kind: str                    # "mbarrier", "bulk", "cp_async", "wgmma" or "tcgen05"
    groups: np.ndarray | None    # cp_async, wgmma: each thread's commit count when it issued the operation


class Deferred:
    """The operations of one launch issued and not yet complete (see the
    module docstring), and each thread's count of ``cp.async.commit_group``
    and of ``wgmma.commit_group``.

    Args:
        seed: the random schedule's seed (its own stream of choices).
        nthreads: the launch's threads.
    """

    def __init__(self, seed: int, nthreads: int) -> None:
        self.rng = np.random.default_rng(np.random.SeedSequence([seed % (1 << 64), 0xA5C]))
        self.pending: list[_Pending] = []
        self.nthreads = nthreads
        self.commits = {kind: np.zeros(nthreads, dtype=np.int64) for kind in _GROUPED}

    def add(self, effect: Callable[[], None], threads: np.ndarray, kind: str) -> None:
        """An operation issued by ``threads``: ``effect`` performs it."""
        groups = self.commits[kind][threads] if kind in _GROUPED else None
        self.pending.append(_Pending(effect, np.array(threads, dtype=np.int64), kind, groups))

    def tick(self) -> None:
        """Before a step: maybe complete one pending operation (and those it follows)."""
        if self.pending and self.rng.random() < COMPLETE_PER_STEP:
            self._complete_at([int(self.rng.integers(len(self.pending)))])

    def complete_all(self) -> bool:
        """Complete every pending operation, in issue order; whether there was any."""
        done = False
        while self.pending:
            self.pending.pop(0).effect()
            done = True
        return done

    def _complete(self, due: Callable[[_Pending], bool]) -> None:
        """Complete, in issue order, every pending operation ``due`` names."""
        self._complete_at([i for i, p in enumerate(self.pending) if due(p)])

    def _complete_at(self, indices: list[int]) -> None:
        """Complete the pending operations at ``indices`` and, for the in-order
        kinds, every earlier one of the same kind they follow (sharing a
        thread with one completing, transitively), all in issue order."""
        now = set(indices)
        for kind in _IN_ORDER:
            last = max((i for i in now if self.pending[i].kind == kind), default=-1)
            covered = np.zeros(self.nthreads if last >= 0 else 0, dtype=bool)
            for i in range(last, -1, -1):
                p = self.pending[i]
                if p.kind != kind:
                    continue
                if i in now or covered[p.threads].any():
                    now.add(i)
                    covered[p.threads] = True
        done = [p for i, p in enumerate(self.pending) if i in now]
        self.pending = [p for i, p in enumerate(self.pending) if i not in now]
        for p in done:
            p.effect()

    def bulk_wait(self, threads: np.ndarray) -> None:
        """``cp.async.bulk.wait_group{.read} N`` by ``threads``: their bulk-group
        copies complete (all of them: completing early is allowed)."""
        self._complete(lambda p: p.kind == "bulk" and np.isin(p.threads, threads).any())

    def commit(self, threads: np.ndarray, kind: str = "cp_async") -> None:
        """``cp.async.commit_group`` (or ``wgmma.commit_group``, ``kind="wgmma"``) by ``threads``."""
        self.commits[kind][threads] += 1

    def cp_async_wait(self, threads: np.ndarray, n: int | None) -> None:
        """``cp.async.wait_group n`` by ``threads`` (``None``: ``wait_all``, which
        commits first): every copy of theirs in a group older than their
        ``n`` most recent completes."""
        if n is None:
            self.commit(threads)
            n = 0
        self._wait_groups("cp_async", threads, n)

    def wgmma_wait(self, threads: np.ndarray, n: int) -> None:
        """``wgmma.wait_group n`` by ``threads``: every ``wgmma.mma_async`` of
        their warpgroups in a group older than their ``n`` most recent
        completes (the whole MMA, also for the warpgroup's other warps)."""
        self._wait_groups("wgmma", threads, n)

    def _wait_groups(self, kind: str, threads: np.ndarray, n: int) -> None:
        """The operations of ``kind`` in a group of ``threads`` older than
        their ``n`` most recent complete."""
        mine = np.zeros(self.nthreads, dtype=bool)
        mine[threads] = True
        commits = self.commits[kind]

        def due(p: _Pending) -> bool:
            return p.kind == kind and bool((mine[p.threads] & (p.groups < commits[p.threads] - n)).any())
        self._complete(due)

    def cp_async_arrive(self, threads: np.ndarray) -> None:
        """``cp.async.mbarrier.arrive`` by ``threads``: their copies complete
        first (the arrive-on happens when they have)."""
        self._complete(lambda p: p.kind == "cp_async" and np.isin(p.threads, threads).any())


def deferred_of(s: Step) -> Deferred | None:
    """The launch's :class:`Deferred`, or None when operations complete at
    issue (the default schedule, or a checked launch)."""
    schedule = s.m.schedule
    if schedule is None or s.m.check:
        return None
    return schedule.deferred


def later(s: Step, effect: Callable[[], None], kind: str, threads: np.ndarray | None = None) -> None:
    """Perform ``effect`` (an operation issued by ``threads``, default
    ``s``'s threads) now, or under a random schedule at a later step
    (module docstring)."""
    d = deferred_of(s)
    if d is None:
        effect()
    else:
        d.add(effect, s.threads if threads is None else threads, kind)

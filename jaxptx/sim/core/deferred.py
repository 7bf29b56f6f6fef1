"""Asynchronous copies that complete late: the random schedule's other half.

Under the default schedule every asynchronous copy (``cp.async``,
``cp.async.bulk``, ``cp.async.bulk.tensor``, and the response of
``clusterlaunchcontrol.try_cancel``) completes when it is issued.
The PTX ISA promises less: a copy completes at some point before whatever
waits for it — ``cp.async.wait_group`` / ``wait_all`` for ``cp.async``
groups, ``cp.async.bulk.wait_group`` for bulk groups, the complete-tx on
its mbarrier for the mbarrier forms — and a kernel that reads the
destination earlier reads whatever was there. Under ``schedule="random"``
the semantics hand the copy's memory effect to :func:`later` instead, and
:class:`Deferred` completes it at a step of its seeded choosing, or when a
wait needs it, or when nothing else can run (a warp waiting on the copy's
mbarrier must not deadlock the launch), or before the grid completes. So a
missing wait shows as an output that changes with the seed
(``sim.explore``'s ``outputs_differ``), where the default schedule hides it.

A checked launch (``check=``) completes copies at issue on every schedule:
the sanitizer models the in-flight window itself and reports a read of bytes
a copy may not have written yet, whatever the schedule.

The operands (addresses, sizes, masks, coordinates, the mbarrier) are read
when the copy is issued; the source is read and the destination written when
it completes, as on hardware, where either may happen at any point in
between.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .step import Step

__all__ = ["Deferred", "later", "deferred_of", "COMPLETE_PER_STEP"]

COMPLETE_PER_STEP = 0.25
"""The chance that a step completes one pending copy (chosen at random among
the pending ones) before it runs."""


class _Pending(NamedTuple):
    effect: Callable[[], None]
    threads: np.ndarray
    kind: str                    # "mbarrier", "bulk" or "cp_async"
    groups: np.ndarray | None    # cp.async: each thread's commit count when it issued the copy


class Deferred:
    """The copies of one launch issued and not yet complete (see the module
    docstring), and each thread's count of ``cp.async.commit_group``.

    Args:
        seed: the random schedule's seed (its own stream of choices).
        nthreads: the launch's threads.
    """

    def __init__(self, seed: int, nthreads: int) -> None:
        self.rng = np.random.default_rng(np.random.SeedSequence([seed % (1 << 64), 0xA5C]))
        self.pending: list[_Pending] = []
        self.commits = np.zeros(nthreads, dtype=np.int64)

    def add(self, effect: Callable[[], None], threads: np.ndarray, kind: str) -> None:
        """A copy issued by ``threads``: ``effect`` performs it."""
        groups = self.commits[threads] if kind == "cp_async" else None
        self.pending.append(_Pending(effect, threads.copy(), kind, groups))

    def tick(self) -> None:
        """Before a step: maybe complete one pending copy."""
        if self.pending and self.rng.random() < COMPLETE_PER_STEP:
            self.pending.pop(int(self.rng.integers(len(self.pending)))).effect()

    def complete_all(self) -> bool:
        """Complete every pending copy, in issue order; whether there was any."""
        done = False
        while self.pending:
            self.pending.pop(0).effect()
            done = True
        return done

    def _complete(self, keep: Callable[[_Pending], bool]) -> None:
        """Complete, in issue order, every pending copy ``keep`` says not to keep."""
        now, self.pending = [p for p in self.pending if not keep(p)], [p for p in self.pending if keep(p)]
        for p in now:
            p.effect()

    def bulk_wait(self, threads: np.ndarray) -> None:
        """``cp.async.bulk.wait_group{.read} N`` by ``threads``: their bulk-group
        copies complete (all of them: completing early is allowed)."""
        self._complete(lambda p: p.kind != "bulk" or not np.isin(p.threads, threads).any())

    def commit(self, threads: np.ndarray) -> None:
        """``cp.async.commit_group`` by ``threads``."""
        self.commits[threads] += 1

    def cp_async_wait(self, threads: np.ndarray, n: int | None) -> None:
        """``cp.async.wait_group n`` by ``threads`` (``None``: ``wait_all``, which
        commits first): every copy of theirs in a group older than their
        ``n`` most recent completes."""
        if n is None:
            self.commit(threads)
            n = 0
        mine = np.zeros(len(self.commits), dtype=bool)
        mine[threads] = True

        def keep(p: _Pending) -> bool:
            if p.kind != "cp_async":
                return True
            due = mine[p.threads] & (p.groups < self.commits[p.threads] - n)
            return not due.any()
        self._complete(keep)

    def cp_async_arrive(self, threads: np.ndarray) -> None:
        """``cp.async.mbarrier.arrive`` by ``threads``: their copies complete
        first (the arrive-on happens when they have)."""
        self._complete(lambda p: p.kind != "cp_async" or not np.isin(p.threads, threads).any())


def deferred_of(s: Step) -> Deferred | None:
    """The launch's :class:`Deferred`, or None when copies complete at issue
    (the default schedule, or a checked launch)."""
    schedule = s.m.schedule
    if schedule is None or s.m.check:
        return None
    return schedule.deferred


def later(s: Step, effect: Callable[[], None], kind: str) -> None:
    """Perform ``effect`` (a copy issued by ``s``'s threads) now, or under a
    random schedule at a later step (module docstring)."""
    d = deferred_of(s)
    if d is None:
        effect()
    else:
        d.add(effect, s.threads, kind)

"""Other interleavings: the random schedule of ``launch(schedule="random", seed=N)``.

The default schedule runs, each step, every running thread at the smallest
PC: one interleaving, the same every time. :class:`RandomSchedule` runs one
warp a step instead, chosen by probabilistic concurrency testing (PCT,
Burckhardt et al., ASPLOS 2010): every warp gets a distinct random
priority; each step runs the running warp of highest priority (its lanes
at their smallest PC, so a diverged warp reconverges as usual); at ``depth
- 1`` random steps (the change points) the warp running then drops below
every other. A bug that needs ``d`` orderings between warps to show is
found by one run with probability at least ``1 / (warps × steps^(d-1))``,
where uniform coin flips give no such bound. Busy-wait loops do not starve
the others: the machine puts a warp that spins without changing anything
aside until the shared state changes (:mod:`.hangs`).

Instructions that the four warps of a warpgroup execute together
(``isa.UNITS[...].warpgroup``: ``wgmma.mma_async``) run for the whole
warpgroup in one step; a warp that reaches one waits (runs its lagging
peers first) until its warpgroup is there.

Asynchronous copies complete late under this schedule (:mod:`.deferred`):
each step may complete one pending copy, waits complete what they wait for.

The schedule is a function of the seed and of the kernel's behaviour only,
so a seed reproduces its run, its findings and its error bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import isa
from ..errors import SimError
from .barriers import EXITED
from .deferred import Deferred
from .progress import setting

if TYPE_CHECKING:
    from .view import MachineView

__all__ = ["RandomSchedule", "SCHEDULE_ENV", "schedule_option", "DEFAULT_DEPTH"]

SCHEDULE_ENV = "JAXPTX_SIM_SCHEDULE"
"""``random:N`` runs every launch that does not choose a schedule under
``schedule="random", seed=N`` (the JAX CPU path reads it this way)."""

DEFAULT_DEPTH = 3
"""PCT's bug depth: two change points."""


def schedule_option(schedule: str | None, seed: int | None) -> tuple[str | None, int | None]:
    """The ``(schedule, seed)`` a launch runs under: its own, else
    ``JAXPTX_SIM_SCHEDULE``'s, else the default schedule ``(None, None)``.

    Raises:
        SimError: an unknown schedule, a random schedule without an int
            seed, a seed without a random schedule, or a malformed variable.
    """
    if schedule is None and seed is None:
        return setting(SCHEDULE_ENV, _env_schedule)
    if schedule in (None, "default"):
        if seed is not None:
            raise SimError(f"launch seed={seed!r}: a seed chooses a random schedule; pass schedule='random'")
        return None, None
    if schedule != "random":
        raise SimError(f"launch schedule: expected 'default' or 'random', got {schedule!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise SimError(f"launch schedule='random': seed must be an int, got {seed!r}")
    return "random", int(seed)


def _env_schedule(raw: str | None) -> tuple[str | None, int | None]:
    """:func:`schedule_option`'s reading of ``JAXPTX_SIM_SCHEDULE`` (value ``raw``)."""
    text = (raw or "").strip()
    if not text or text == "default":
        return None, None
    kind, _, number = text.partition(":")
    if kind != "random" or not number.strip().lstrip("-").isdigit():
        raise SimError(f"{SCHEDULE_ENV}: expected 'random:<seed>' or 'default', got {text!r}")
    return "random", int(number)


class RandomSchedule:
    """PCT over the warps of one launch (see the module docstring).

    Args:
        m: the machine. seed: the schedule's seed.
        depth: PCT's depth (``depth - 1`` priority change points).
        horizon: the steps the change points are drawn from (default: an
            estimate of the launch's warp-steps, four per instruction per warp).
    """

    def __init__(self, m: "MachineView", seed: int, depth: int = DEFAULT_DEPTH, horizon: int | None = None) -> None:
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        t = m.all_threads
        self.m = m
        self.ntid = m.ntid
        self.per_cta = m.warps_per_cta
        self.warp_of = (t // m.ntid) * m.warps_per_cta + (t % m.ntid) // 32
        nwarps = m.nctas * m.warps_per_cta
        self.priority = rng.permutation(nwarps).astype(np.int64) + depth
        steps = horizon if horizon is not None else max(4 * len(m.program.code) * nwarps, depth)
        self.changes = sorted(int(x) for x in rng.choice(np.arange(1, steps + 1), size=min(depth - 1, steps),
                                                         replace=False))
        self._next_change = 0
        resolved = m.program.resolved
        self._together = {pc for pc, r in enumerate(resolved)
                          if r is not None and isa.UNITS.get(r.inst.sim) is not None
                          and isa.UNITS[r.inst.sim].warpgroup}
        self.deferred = Deferred(seed, len(t))

    def pick(self, groups: dict[int, np.ndarray], steps: int) -> tuple[int, np.ndarray]:
        """The PC and threads to run at step ``steps`` (1-based); the
        machine takes them out of ``groups``."""
        self.deferred.tick()
        deferred: list[int] = []
        while True:
            warp = self._highest(groups, deferred)
            if warp < 0:                # every running warp waits for its warpgroup: run one anyway
                pc, threads = self._lanes(groups, self._highest(groups, []))
                break
            pc, threads = self._lanes(groups, warp)
            if pc not in self._together:
                break
            whole = self._warpgroup(groups, pc, warp)
            if whole is not None:
                pc, threads = whole
                break
            deferred.append(warp)
        if self._next_change < len(self.changes) and steps >= self.changes[self._next_change]:
            self._next_change += 1
            self.priority[self.warp_of[threads]] = self._next_change     # PCT: the i-th change point gives priority i
        return pc, threads

    def _highest(self, groups: dict[int, np.ndarray], deferred: list[int]) -> int:
        """The running warp of highest priority, not counting ``deferred`` (-1: none)."""
        best, warp = -1, -1
        for threads in groups.values():
            ws = self.warp_of[threads]
            p = self.priority[ws]
            if deferred:
                p = np.where(np.isin(ws, deferred), -1, p)
            i = int(p.argmax())
            if p[i] > best:
                best, warp = int(p[i]), int(ws[i])
        return warp

    def _lanes(self, groups: dict[int, np.ndarray], warp: int) -> tuple[int, np.ndarray]:
        """``warp``'s running lanes at their smallest PC."""
        for pc in sorted(groups):
            threads = groups[pc]
            mine = threads[self.warp_of[threads] == warp]
            if len(mine):
                return pc, mine
        raise SimError(f"the schedule lost warp {warp}")      # unreachable: the warp was running

    def _warpgroup(self, groups: dict[int, np.ndarray], pc: int, warp: int) -> tuple[int, np.ndarray] | None:
        """At a warpgroup instruction: the whole warpgroup's threads at
        ``pc`` when every live thread of it is there; else a running member
        elsewhere (it catches up first); else None (the members wait on a
        barrier or an mbarrier: ``warp`` waits too)."""
        cta, local = divmod(warp, self.per_cta)
        first = cta * self.ntid + (local - local % 4) * 32
        members = np.arange(first, min(first + 128, (cta + 1) * self.ntid))
        live = members[self.m.state[members] != EXITED]
        threads = groups[pc]
        here = threads[(threads >= first) & (threads < first + 128)]
        if len(here) == len(live):
            return pc, here
        for other in sorted(groups):
            theirs = groups[other]
            theirs = theirs[(theirs >= first) & (theirs < first + 128)]
            if other != pc and len(theirs):
                return other, theirs[self.warp_of[theirs] == self.warp_of[theirs][0]]
        return None

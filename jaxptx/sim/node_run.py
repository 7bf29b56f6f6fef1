"""Running the grids of a node together: turns, stalls and the node's deadlock.

Each launch of :meth:`jaxptx.sim.System.launch` is one
:class:`~.core.machine.Machine`. They run in turns, round robin in the
order given: a turn is at most :data:`TURN_STEPS` steps of one machine
(:meth:`~.core.machine.Machine.run_until`; the bound rides on the
comparison the machine already makes each step, so a lone launch pays
nothing for it). A device spinning on a flag that another device sets
therefore makes progress: the other device runs in its turns.

A machine with no ready thread (every live thread waits at a barrier, is
parked on an mbarrier, or spins in a loop proven to change nothing) is
*stalled*: it skips its turns, since only another device can change what it
waits on. When every machine that has not finished is stalled, each is
asked to wake what changed memory may release
(:meth:`~.core.machine.Machine.unstall`; its proofs hash every device's
memory, :mod:`.core.hangs`). When none wakes, no thread on any device can
make progress: :class:`~.errors.SimDeadlock` names each device's stuck
threads and what they wait on, its ``warps`` carrying their ``device``.

A grid may also start late (:attr:`NodeLaunch.gate`: a launch sequence's
dependent grid, :mod:`.sequence`): it takes no turn until its gate opens,
and under a random schedule not until 0 to :data:`MAX_HOLD` rounds after
that, drawn from the schedule's turns (so the moment it starts varies by
seed too); when nothing else can run, a held grid starts at once. A grid
that finishes tells its sequence (:attr:`NodeLaunch.finished`), which may
wake another grid's waiting threads.

Memory operations complete when they execute, in each thread's program
order, and one step runs at a time; so ``.sys``-scope releases,
acquires, fences and atomics order memory across devices by construction
(the emulator has no weaker behaviour for them to rule out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ir
from .core.barriers import EXITED
from .core.forensics import stuck_warps, table
from .core.hangs import hang_message
from .core.machine import Machine
from .core.program import Program
from .core.sanitizer import SanitizerError
from .errors import SimDeadlock, SimError, SimFault
from .faults import located

__all__ = ["NodeLaunch", "TURN_STEPS", "MAX_HOLD", "run_together", "results"]

TURN_STEPS = 64
"""Steps a machine runs before the next device's turn."""

MAX_HOLD = 3
"""Rounds a random schedule may hold back a grid whose gate has opened."""


@dataclasses.dataclass
class NodeLaunch:
    """One grid of a node launch: its device, machine and kernel.

    Attributes:
        name: what messages call it (default: ``device N``).
        gate: for a grid that starts late, called each round until it
            starts: ``None`` once it may start, else why not (in words,
            for a deadlock report). ``None``: it starts with the others.
        finished: called once when every thread of the grid has exited.
        started: whether it has started; hold: rounds a random schedule
            still holds it back once its gate opened (-1: not open yet).
    """

    device: int
    machine: Machine
    module: ir.Module
    program: Program
    done: bool = False
    name: str = ""
    gate: Callable[[], str | None] | None = None
    finished: Callable[[], None] | None = None
    started: bool = True
    hold: int = -1

    def __post_init__(self) -> None:
        self.name = self.name or f"device {self.device}"
        self.started = self.gate is None


def run_together(runs: list[NodeLaunch], turn: int = TURN_STEPS, turns: np.random.Generator | None = None) -> None:
    """Run every launch's machine to the end, in turns of ``turn`` steps
    (with ``turns``, a random schedule's: of 1 to ``2 * turn`` steps drawn
    from it, so that devices meet in other interleavings too).

    Raises:
        SimDeadlock: no thread on any device can make progress.
        SimError: a fault or another error on one device (the message
            starts with the device).
    """
    for r in runs:
        r.machine.start()
    ok = False
    try:
        _turns(runs, turn, turns)
        ok = True
    finally:
        for r in runs:
            r.machine.clock.finish(ok and r.done)


def _turns(runs: list[NodeLaunch], turn: int, turns: np.random.Generator | None) -> None:
    live = list(runs)
    while live:
        ran = False
        for r in live:
            if not r.started and not _starts(r, turns):
                continue
            m = r.machine
            if not m.groups and (m.state != EXITED).any():
                continue                # stalled: another device must change something first
            before = m.steps
            r.done = _turn(r, m.steps + (turn if turns is None else int(turns.integers(1, 2 * turn + 1))))
            ran = ran or m.steps > before
            if r.done and r.finished is not None:
                r.finished()
        live = [r for r in live if not r.done]
        if live and not ran:
            held = [r for r in live if not r.started and r.hold >= 0]
            if held:                    # nothing else can run: a grid the schedule held back starts now
                held[0].hold = 0
                continue
            woke = [r.machine.unstall() for r in live if r.started]     # every one: each takes its new proof
            if not any(woke):
                raise _deadlock(runs)


def _starts(r: NodeLaunch, turns: np.random.Generator | None) -> bool:
    """Whether a grid that has not started starts this round (see the module docstring)."""
    if r.hold < 0:
        if r.gate() is not None:
            return False
        r.hold = 0 if turns is None else int(turns.integers(0, MAX_HOLD + 1))
    if r.hold > 0:
        r.hold -= 1
        return False
    r.started = True
    return True


def _turn(r: NodeLaunch, until: int) -> bool:
    """One turn of ``r``'s machine; errors say which device raised them."""
    try:
        return r.machine.run_until(until)
    except SimFault as e:
        fault = located(e, r.module, r.program, r.machine.current_pc)
        raise SimFault(f"{r.name}: {fault}", fault.fault) from None
    except SimDeadlock:
        raise
    except SanitizerError as e:
        raise SanitizerError(f"{r.name}: {e}", e.findings) from None
    except SimError as e:
        raise type(e)(f"{r.name}: {e}") from None


def _deadlock(runs: list[NodeLaunch]) -> SimDeadlock:
    """The node's deadlock: each grid's stuck groups, then every stuck warp
    (one table per grid for the named grids of a launch sequence)."""
    parts, warps, tables = [], [], []
    by_grid = any(r.name != f"device {r.device}" for r in runs)      # a launch sequence's grids
    for r in runs:
        m = r.machine
        if r.done:
            parts.append(f"{r.name}: {m.program.name} has finished")
            continue
        if not r.started:
            why = r.gate() if r.gate is not None else None
            parts.append(f"{r.name}: {m.program.name} has not started" + (f": {why}" if why else ""))
            continue
        parts.append(f"{r.name}: " + hang_message(m, m.steps).replace("\n", "\n  "))
        mine = stuck_warps(m, device=r.device)
        warps += mine
        tables.append(f"stuck warps of {r.name}:\n    " + table(mine).replace("\n", "\n    "))
    warps.sort(key=lambda w: (w.device, w.cta[2], w.cta[1], w.cta[0], w.warp))
    if not by_grid:
        tables = ["stuck warps:\n    " + table(warps).replace("\n", "\n    ")]
    head = "node deadlock: no thread on any device can make progress" if not by_grid else \
        "deadlock: no thread of any grid of the sequence can make progress"
    return SimDeadlock(f"{head}\n  " + "\n  ".join(parts + tables), warps)


def results(runs: list[NodeLaunch], check: Any) -> list[Any]:
    """Each launch's result: the sanitizer's findings under ``check="all"``,
    else ``None``."""
    return [r.machine.sanitizer.findings if check == "all" and r.machine.sanitizer is not None else None
            for r in runs]

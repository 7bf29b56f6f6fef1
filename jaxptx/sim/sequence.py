"""Launch sequences: grids in stream order on one device, and programmatic
dependent launch (:meth:`jaxptx.sim.Device.launch_sequence`).

Without ``programmatic`` each grid of a sequence starts once the grid before
it has completed, as kernels launched one after another on a stream.

With it (CUDA's programmatic stream serialization; PTX ISA,
griddepcontrol) grid ``k`` may start once every CTA of grid ``k - 1`` has
executed ``griddepcontrol.launch_dependents`` or exited, and runs *together*
with the grids before it: the grids are the machines of a node launch on one
device (:mod:`.node_run`), each starting late behind its gate
(:meth:`_Grid.gate`), so turns, stalls, deadlocks and the node's sanitizer
(:mod:`.core.sanitizer.node`) are the node's. ``griddepcontrol.wait`` in grid
``k`` (:mod:`.semantics.griddep`) waits until every grid before it has
completed (they are all its prerequisites: each one's completion follows the
completion of those before it only if it waited on them, so the wait names
them all); for the sanitizer a completed grid releases everything it did and
knew, and the threads passing ``wait`` acquire it. ``launch_dependents``
orders no memory: a dependent's access before its ``wait`` that conflicts
with a prerequisite's is a race naming both grids.

Under ``schedule="random", seed=N`` every grid runs under a random schedule
of its own (:func:`sequence_seed`), turns have random lengths, and a grid
whose gate opens starts 0 to :data:`.node_run.MAX_HOLD` rounds later: the
same seed gives the same run, results and findings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir
from .core.barriers import EXITED
from .core.forensics import Waiting
from .core.machine import Machine
from .core.program import Program
from .core.sanitizer.node import NodeChecker
from .errors import SimError
from .node_run import NodeLaunch, results, run_together
from .observing import open_observers
from .semantics.griddep import WAIT_KEY

__all__ = ["KEYS", "sequence_items", "item_shape", "sequence_seed", "run_sequence"]

KEYS = ("source", "params", "grid", "block", "cluster", "smem", "kernel", "launch")
"""The keys an item of a launch sequence may have (``source`` is required)."""

_SHAPE = ("grid", "block", "cluster", "smem")
_STREAM = 1 << 33           # the seed stream of a sequence (a node launch's are its devices and 1 << 32)
_SHOWN = 4                  # CTAs a message lists


def sequence_items(launches: Any) -> list[Mapping[str, Any]]:
    """The items of ``Device.launch_sequence``, checked.

    Raises:
        SimError: not a non-empty list of dicts, an item without ``source``
            or with a key outside :data:`KEYS`, or with both ``launch`` and
            a shape key.
    """
    if isinstance(launches, (Mapping, str, bytes)) or not isinstance(launches, Sequence) or not launches:
        raise SimError("launch_sequence launches: expected a non-empty list of dicts, one per grid in stream order "
                       f"(dict(source=ptx, params=[...], grid=..., block=...)), got {launches!r:.80}")
    for k, item in enumerate(launches):
        if not isinstance(item, Mapping):
            raise SimError(f"launch_sequence item {k}: expected a dict, got {type(item).__name__}")
        unknown = sorted(set(item) - set(KEYS))
        if unknown or "source" not in item:
            raise SimError(f"launch_sequence item {k}: takes source, params and optionally grid, block, cluster, "
                           f"smem, launch, kernel; got keys {sorted(item)}"
                           + (f" (unknown: {', '.join(unknown)})" if unknown else " (source is missing)"))
        if "launch" in item and any(key in item for key in _SHAPE):
            raise SimError(f"launch_sequence item {k}: give launch= or grid/block/cluster/smem, not both")
    return list(launches)


def item_shape(item: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(grid, block, cluster, smem)`` of a checked item (its ``launch``'s, if it has one)."""
    shape = item.get("launch")
    if shape is not None:
        return shape.grid, shape.block, shape.cluster, shape.smem
    return item.get("grid", (1, 1, 1)), item.get("block", (1, 1, 1)), item.get("cluster", (1, 1, 1)), \
        item.get("smem", 0)


def sequence_seed(seed: int | None, place: int) -> int | None:
    """The random schedule's seed of the ``place``-th grid of a sequence run
    under ``seed`` (``None`` without one): a stream of its own."""
    if seed is None:
        return None
    state = np.random.SeedSequence([seed % (1 << 64), _STREAM, place]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


@dataclasses.dataclass(frozen=True)
class _DeviceView:
    """What the node's sanitizer reads of the sequence's device."""

    index: int
    _buffers: list
    _first_slot: int


class _Grid:
    """Grid ``index`` of a programmatic sequence: what its ``griddepcontrol``
    sees (a :class:`.semantics.griddep.GridDependency`), the gate of the
    grid after it, and what its completion does."""

    def __init__(self, runs: list[NodeLaunch], index: int, node: NodeChecker | None) -> None:
        self.runs, self.index, self.node = runs, index, node
        self.triggered = np.zeros(runs[index].machine.nctas, dtype=bool)

    def launch_dependents(self, ctas: np.ndarray) -> None:
        """CTAs ``ctas`` executed ``griddepcontrol.launch_dependents``."""
        self.triggered[ctas] = True

    def completed(self) -> bool:
        """Whether every grid before this one has completed."""
        return all(r.done for r in self.runs[:self.index])

    def acquire(self, threads: np.ndarray) -> None:
        """``threads`` passed ``griddepcontrol.wait``: they acquire the completions of the grids before."""
        if self.node is not None and self.index:
            self.node.acquire_completion(self.index, threads, range(self.index))

    def describe(self, key: int) -> Waiting:
        """What threads in ``griddepcontrol.wait`` wait for (a hang report):
        the grids before this one still running (their names in words,
        their places in ``grids``)."""
        running = [k for k, r in enumerate(self.runs[:self.index]) if not r.done]
        names = ", ".join(self.runs[k].name for k in running)
        return Waiting(f"the completion of {names}", {"state": "griddepcontrol.wait", "grids": running})

    def gate(self) -> str | None:
        """The next grid's gate: ``None`` once every CTA of this grid has
        executed ``launch_dependents`` or exited, else why not."""
        r = self.runs[self.index]
        if r.done:
            return None
        if not r.started:
            return f"{r.name} has not started"
        m = r.machine
        exited = (m.state.reshape(m.nctas, m.ntid) == EXITED).all(axis=1)
        left = np.flatnonzero(~(self.triggered | exited))
        if not len(left):
            return None
        gx, gy, _ = m.grid
        shown = ", ".join(str((c % gx, c // gx % gy, c // (gx * gy))) for c in left[:_SHOWN].tolist())
        more = f" and {len(left) - _SHOWN} more" if len(left) > _SHOWN else ""
        return (f"{len(left)} CTAs of {r.name} ({shown}{more}) have neither executed "
                "griddepcontrol.launch_dependents nor exited")

    def finish(self) -> None:
        """This grid completed: its completion is released, and the later
        grids whose prerequisites have all completed leave ``wait``."""
        if self.node is not None:
            self.node.complete(self.index)
        for later in self.runs[self.index + 1:]:
            if later.started and later.machine.grid_dependency.completed():
                later.machine.changed(np.array([WAIT_KEY]), np.array([1]))


def run_sequence(device: int, buffers: list, first_slot: int, prepared: list[tuple[Machine, ir.Module, Program]],
                 check: Any, seed: int | None) -> list[Any]:
    """Run the prepared grids of a programmatic sequence on device
    ``device`` (its allocations ``buffers``, the first at slot
    ``first_slot``) together, each starting behind its gate.

    Args:
        prepared: each grid's machine (seeded with :func:`sequence_seed`),
            module and program, in stream order; the caller closes the
            machines.
        check: the launch's sanitizer mode (a valid one).
        seed: the random schedule's seed (``None``: the default schedule).

    Returns:
        One item per grid: its sanitizer findings under ``check="all"``,
        else ``None``.

    Raises:
        SimDeadlock: no thread of any grid can make progress (naming each
            grid's stuck warps, or why it has not started).
        SimError: a fault or a finding in one grid (the message starts with it).
    """
    runs = [NodeLaunch(device, machine, module, program, name=f"grid {k} ({program.name})")
            for k, (machine, module, program) in enumerate(prepared)]
    node = None
    if check and len(runs) > 1:
        node = NodeChecker([_DeviceView(device, buffers, first_slot)], strict=check == "strict")
        for r in runs:
            r.machine.sanitizer.join_node(node, device)
            node.name(r.machine.sanitizer.node_grid, r.name)
    grids = [_Grid(runs, k, node) for k in range(len(runs))]
    for k, r in enumerate(runs):
        r.machine.grid_dependency = grids[k]
        r.finished = grids[k].finish
        if k:
            r.gate, r.started = grids[k - 1].gate, False
        for make in open_observers():
            r.machine.observe(make(r.machine))
    turns = None if seed is None else np.random.default_rng([seed % (1 << 64), _STREAM])
    try:
        run_together(runs, turns=turns)
        return results(runs, check)
    finally:
        for r in runs:              # break the cycle machine -> grid -> runs -> machine
            r.machine.grid_dependency = None
            r.gate = r.finished = None

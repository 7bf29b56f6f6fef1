"""Who writes where, and when, on an emulated node: the stores each device
makes into its peers' memory, and the flags it releases and acquires, from
a :meth:`jaxptx.sim.System.launch` run.

:class:`NodeRecorder` is a launch tool (``node.launch(items,
observers=[recorder])``): it joins every grid's machine and hears the
emulator's memory accesses (:mod:`jaxptx.sim.core.observers`). An access
to a buffer of another device is a *peer store* (plain stores, atomics and
``multimem`` copies alike); a memory operation with ``.release`` or
``.acq_rel`` is a *release*, one with ``.acquire`` or ``.acq_rel`` an
*acquire*, whichever device's memory it touches. Time is the node's step
count: the grids run in turns, one step of one device at a time
(:mod:`jaxptx.sim.node_run`), so the sum of every grid's steps orders the
events of all devices on one axis. :func:`node_timeline` draws them, one
row per device.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..sim.core.observers import ATOMIC, STORE, Observer
from ..sim.core.view import MachineView
from ._draw import figure_with_data, pyplot

__all__ = ["NODE_KINDS", "NodeTrace", "NodeRecorder", "node_timeline"]

NODE_KINDS = ("peer store", "release", "acquire")
"""What an event of a :class:`NodeTrace` is, by its kind code."""
PEER_STORE, RELEASE, ACQUIRE = range(len(NODE_KINDS))

_SCOPES = ("cta", "cluster", "gpu", "sys")

TARGET_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")
"""The colour of a peer store into device ``d``: ``TARGET_COLOURS[d % 8]``."""


@dataclasses.dataclass
class NodeTrace:
    """What a :class:`NodeRecorder` heard.

    Attributes:
        devices: the node's number of devices (the figure's rows).
        events: ``(node step, device, device step, kind code, target
            device, threads)`` of every recorded access, in the order they
            ran: ``kind code`` indexes :data:`NODE_KINDS`, ``target`` is the
            device whose memory was accessed, ``threads`` how many threads
            of the step made it. One access by the threads of one step is
            one event (a ``multimem`` access: one per member device).
        scopes: the scope of each event's instruction (``"sys"``,
            ``"gpu"`` ...; ``""`` for a plain access), parallel to ``events``.
        steps: the node's steps when the last grid finished.
    """

    devices: int
    events: list[tuple[int, int, int, int, int, int]] = dataclasses.field(default_factory=list)
    scopes: list[str] = dataclasses.field(default_factory=list)
    steps: int = 0

    def array(self) -> np.ndarray:
        """:attr:`events` as an ``(n, 6)`` int64 array."""
        return np.asarray(self.events, dtype=np.int64).reshape(-1, 6)

    def of_kind(self, kind: str) -> np.ndarray:
        """The events of one kind (a name from :data:`NODE_KINDS`) as an ``(n, 6)`` array.

        Raises:
            ValueError: ``kind`` is not one of :data:`NODE_KINDS`.
        """
        if kind not in NODE_KINDS:
            raise ValueError(f"NodeTrace.of_kind: expected one of {', '.join(NODE_KINDS)}, got {kind!r}")
        a = self.array()
        return a[a[:, 3] == NODE_KINDS.index(kind)]


class NodeRecorder:
    """Record peer stores and flag releases/acquires of every grid of a
    node launch: pass it as a launch tool.

    Args:
        system: the node whose launches it watches (it tells which device
            owns each buffer).

    Attributes:
        trace: the :class:`NodeTrace` recorded so far (one recorder may
            watch several launches; their node steps follow each other).

    Example::

        recorder = viz.NodeRecorder(node)
        node.launch(items, observers=[recorder])
        fig = viz.node_timeline(recorder.trace)
    """

    def __init__(self, system: Any) -> None:
        self.system = system
        self.trace = NodeTrace(len(system.devices))
        self._machines: list[MachineView] = []
        self._base = 0              # node steps of the launches before this one

    def __call__(self, machine: MachineView) -> Observer:
        """The observer of one grid's machine (``System.launch`` calls this once per grid)."""
        if any(m.steps for m in self._machines):    # every grid of a launch joins before any runs
            self._base = self.trace.steps           # a new launch: its steps follow the last one's
            self._machines = []
        self._machines.append(machine)
        owners: dict[int, int] = {}
        device = 0
        for d in self.system.devices:
            if d.buffers is machine.memory.globals:
                device = d.index
            for buf in d.buffers:
                owners[id(buf)] = d.index
        return _Listener(self, machine, device, owners)

    def node_steps(self) -> int:
        """Steps run so far by every grid of the current launch, after the earlier launches'."""
        return self._base + sum(m.steps for m in self._machines)


class _Listener(Observer):
    """One grid's accesses, heard as the emulator's ``access`` events."""

    def __init__(self, recorder: NodeRecorder, machine: MachineView, device: int, owners: dict[int, int]) -> None:
        self.recorder, self.m, self.device, self.owners = recorder, machine, device, owners
        self._kinds: dict[int, tuple[bool, bool, str]] = {}     # pc -> (release, acquire, scope)

    def _semantics(self, pc: int) -> tuple[bool, bool, str]:
        """Whether the instruction at ``pc`` releases or acquires, and its scope."""
        found = self._kinds.get(pc)
        if found is None:
            code = self.m.program.code
            mods = set(code[pc].modifiers) if 0 <= pc < len(code) else set()
            scope = next((s for s in _SCOPES if s in mods), "")
            found = self._kinds[pc] = (bool(mods & {"release", "acq_rel"}), bool(mods & {"acquire", "acq_rel"}),
                                       scope)
        return found

    def access(self, buf: Any, off: Any, threads: Any, width: int, kind: str, values: Any = None) -> None:
        """A memory access: a peer store, a release or an acquire is an event."""
        target = self.owners.get(id(buf))
        if target is None:              # shared, local, param memory: not the node's
            return
        pc = self.m.current_pc
        release, acquire, scope = self._semantics(-1 if pc is None else pc)
        writes = kind in (STORE, ATOMIC)
        rec = self.recorder
        tick, step, n = rec.node_steps(), self.m.steps, len(threads)
        trace = rec.trace
        if writes and target != self.device:
            trace.events.append((tick, self.device, step, PEER_STORE, target, n))
            trace.scopes.append(scope)
        if release and writes:
            trace.events.append((tick, self.device, step, RELEASE, target, n))
            trace.scopes.append(scope)
        if acquire and (kind != STORE):
            trace.events.append((tick, self.device, step, ACQUIRE, target, n))
            trace.scopes.append(scope)
        trace.steps = max(trace.steps, tick)

    def after(self, sim: str, step: Any) -> None:
        """Keep the node's step count current (the last step may record nothing)."""
        trace = self.recorder.trace
        trace.steps = max(trace.steps, self.recorder.node_steps())


def node_timeline(trace: NodeTrace, title: str = "node", until: int | None = None) -> Any:
    """Draw a node run: one row per device, node steps across; a coloured
    bar where the device stores into a peer (the colour names the target
    device), ``▲`` where it releases (a flag store or reduction) and ``▼``
    where it acquires (each load of a spin is one).

    Args:
        trace: from a :class:`NodeRecorder`.
        title: the figure's title.
        until: draw node steps ``0..until`` only (default: the whole run).

    Returns:
        A ``Figure``; ``fig.data`` is the drawn events (``(n, 6)``, as
        :meth:`NodeTrace.array`).
    """
    events = trace.array()
    end = int(trace.steps if until is None else until) + 1
    events = events[events[:, 0] < end]
    plt = pyplot()
    n = trace.devices
    fig, ax = plt.subplots(figsize=(11, 0.42 * n + 1.9))
    stores = events[events[:, 3] == PEER_STORE]
    for target in np.unique(stores[:, 4]).tolist():
        mine = stores[stores[:, 4] == target]
        ax.plot(mine[:, 0], mine[:, 1], "|", color=TARGET_COLOURS[target % len(TARGET_COLOURS)], markersize=13,
                markeredgewidth=1.6, label=f"store into device {target}")
    for code, marker, label, offset in ((RELEASE, "^", "release (flag set)", -0.3),
                                        (ACQUIRE, "v", "acquire (flag read)", 0.3)):
        mine = events[events[:, 3] == code]
        if len(mine):
            ax.plot(mine[:, 0], mine[:, 1] + offset, marker, color="black" if code == RELEASE else "#888888",
                    markersize=5 if code == RELEASE else 3, linestyle="none", label=label)
    ax.set_yticks(range(n), [f"device {d}" for d in range(n)], fontsize=8)
    ax.set_ylim(n - 0.4, -0.6)
    ax.set_xlim(0, end)
    ax.set_xlabel("node step (devices run in turns; one step runs one instruction on one device)", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", color="#dddddd")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return figure_with_data(fig, events)

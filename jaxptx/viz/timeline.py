"""A kernel's pipeline over time, from an emulator run: when each mbarrier
completes a phase, and when threads issue TMA copies, MMAs and commits.

:func:`record_pipeline` joins an observer to every emulator launch inside
a ``with`` block (``sim.launch``, ``sim.Device.launch``, a kernel called
under ``jax.jit`` on the CPU), which hears the asynchronous families' issues
(mbarrier, bulk/tensor copies, ``wgmma``, ``tcgen05.mma``/``commit``) and
every mbarrier phase completion. Time is the emulator's step counter (what ``%clock`` reads): one
step runs one instruction for the threads at one PC.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..isa import UNITS
from ..sim.core.observers import Observer
from ..sim.core.view import MachineView
from ..sim.observing import observing
from ._draw import figure_with_data, pyplot

__all__ = ["PipelineTrace", "record_pipeline", "pipeline_timeline", "EVENT_KINDS"]

# Semantics names recorded as issue events, by the kind they are drawn as
# (the MMAs: every form that reads shared memory through the async proxy).
EVENT_KINDS: dict[str, str] = {
    "cp_async_bulk_tensor": "TMA copy", "cp_async_bulk": "bulk copy",
    **{sim: "MMA issue" for sim, unit in UNITS.items() if unit.cls == "tensor" and unit.async_reads},
    "wgmma_commit_group": "commit", "tcgen05_commit": "commit",
    "mbarrier_arrive": "arrive", "mbarrier_arrive_expect_tx": "arrive", "mbarrier_arrive_noComplete": "arrive",
    "mbarrier_try_wait_parity": "wait", "mbarrier_try_wait": "wait", "mbarrier_test_wait_parity": "wait",
    "mbarrier_test_wait": "wait",
}
KIND_CODES = ("TMA copy", "bulk copy", "MMA issue", "commit", "arrive", "wait")
_KIND_CODE = {sim: KIND_CODES.index(kind) for sim, kind in EVENT_KINDS.items()}


@dataclasses.dataclass
class PipelineTrace:
    """What :func:`record_pipeline` saw.

    Attributes:
        launches: how many emulator launches were recorded (a kernel under
            ``jax.jit`` on the CPU may launch more than once per call).
        flips: ``(launch, step, cta, shared offset, new phase)`` of every
            mbarrier phase completion, in order.
        events: ``(launch, step, kind code, cta, warp)`` of every step that
            ran a recorded instruction (one event for all the threads at that
            PC; ``cta``/``warp`` of the first), ``kind code`` indexing
            :data:`KIND_CODES`.
        barriers: ``(launch, cta, shared offset)`` of every ``mbarrier.init``.
    """

    launches: int = 0
    flips: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    events: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    barriers: list[tuple[int, ...]] = dataclasses.field(default_factory=list)

    def flip_array(self) -> np.ndarray:
        """:attr:`flips` as an ``(n, 5)`` int64 array."""
        return np.asarray(self.flips, dtype=np.int64).reshape(-1, 5)

    def event_array(self) -> np.ndarray:
        """:attr:`events` as an ``(n, 5)`` int64 array."""
        return np.asarray(self.events, dtype=np.int64).reshape(-1, 5)


class _Recorder(Observer):
    """One launch's pipeline events, heard as the emulator's events
    (:mod:`jaxptx.sim.core.observers`) and added to ``trace``."""

    def __init__(self, trace: PipelineTrace, machine: MachineView) -> None:
        self.trace = trace
        self.m = machine
        self.launch = trace.launches
        trace.launches += 1

    def after(self, sim: str, step: Any) -> None:
        """A recorded instruction ran: an event at this step."""
        kind = _KIND_CODE.get(sim)
        if kind is not None:
            first, per_cta = int(step.threads[0]), self.m.ntid
            self.trace.events.append((self.launch, self.m.steps, kind, first // per_cta, (first % per_cta) // 32))

    def mbarrier_init(self, words: Any) -> None:
        """Mbarriers initialised: rows of the figure."""
        for idx in np.unique(words).tolist():
            self.trace.barriers.append((self.launch, *self._where(int(idx))))

    def mbarrier_phases(self, words: Any, completed: Any) -> None:
        """Phase bits about to flip (the words still hold the old phase)."""
        shared = self.m.memory.shared.view(np.uint64)
        for idx, flip in zip(np.asarray(words).reshape(-1).tolist(), np.asarray(completed).reshape(-1).tolist()):
            if flip:
                new = int(shared[idx] >> np.uint64(63)) ^ 1
                self.trace.flips.append((self.launch, self.m.steps, *self._where(idx), new))

    def _where(self, idx: int) -> tuple[int, int]:
        size = self.m.memory.shared_size or 1
        cta, off = divmod(idx * 8, size)
        return cta, off


@contextlib.contextmanager
def record_pipeline() -> Iterator[PipelineTrace]:
    """Record mbarrier phase completions and asynchronous issues of every
    emulator launch inside the block (an observer of each launch, through
    :func:`jaxptx.sim.observing`).

    Example::

        with viz.record_pipeline() as trace:
            jaxptx.sim.launch(kernel, a, b, c, **dims)
        fig = viz.pipeline_timeline(trace)
    """
    trace = PipelineTrace()
    with observing(lambda machine: _Recorder(trace, machine)):
        yield trace


def pipeline_timeline(trace: PipelineTrace, cta: int = 0, names: Mapping[int, str] | None = None,
                      title: str = "pipeline", launch: int = 0) -> Any:
    """Draw one CTA's pipeline: a row per mbarrier (its phase over time, a
    tick at each completion) and a row per issue kind (TMA copies, MMAs,
    commits, waits), emulator steps across.

    Args:
        trace: from :func:`record_pipeline`.
        cta: which CTA (its linear index in the grid).
        names: labels for barriers by shared offset (``{0: "full[0]"}``);
            default ``mbar +0x<offset>``.
        title: the figure title.
        launch: which recorded launch (0: the first; -1: the last).

    Returns:
        A ``Figure``; ``fig.data`` is the CTA's flips ``(n, 3)``: step,
        shared offset, new phase; ``fig.events`` its events ``(n, 3)``:
        step, kind code (:data:`KIND_CODES`), warp.
    """
    launch = launch % max(trace.launches, 1)
    flips = trace.flip_array()
    flips = flips[(flips[:, 0] == launch) & (flips[:, 2] == cta)][:, [1, 3, 4]]
    events = trace.event_array()
    events = events[(events[:, 0] == launch) & (events[:, 3] == cta)][:, [1, 2, 4]]
    bars = sorted({off for n, c, off in trace.barriers if c == cta and n == launch})
    kinds = [k for k in range(len(KIND_CODES)) if (events[:, 1] == k).any()]
    end = int(max(flips[:, 0].max(initial=0), events[:, 0].max(initial=0))) + 1
    plt = pyplot()
    rows = len(bars) + len(kinds)
    fig, ax = plt.subplots(figsize=(11, 0.38 * rows + 1.6))
    labels = []
    for y, off in enumerate(bars):
        mine = flips[flips[:, 1] == off]
        edges = [0, *mine[:, 0].tolist(), end]
        for k in range(len(edges) - 1):
            ax.broken_barh([(edges[k], edges[k + 1] - edges[k])], (y - 0.35, 0.7),
                           facecolors="#a6cee3" if k % 2 == 0 else "#1f78b4")
        ax.plot(mine[:, 0], np.full(len(mine), y), "k|", markersize=10)
        labels.append((names or {}).get(off, f"mbar +{off:#x}"))
    colours = ("#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f")
    for i, k in enumerate(kinds):
        y = len(bars) + i
        at = events[events[:, 1] == k][:, 0]
        ax.plot(at, np.full(len(at), y), "|", color=colours[k], markersize=9)
        labels.append(KIND_CODES[k])
    ax.set_yticks(range(rows), labels, fontsize=8)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, end)
    ax.set_xlabel("emulator step (light/dark: barrier phase 0/1; | a phase completes)", fontsize=8)
    ax.set_title(f"{title} (CTA {cta})", fontsize=10)
    ax.grid(axis="x", color="#dddddd")
    fig.tight_layout()
    return figure_with_data(fig, flips, events=events)

"""Emulator semantics: programmatic dependent launch (``griddepcontrol``).

PTX ISA, griddepcontrol: ``.launch_dependents`` signals that the grid's
dependents may be scheduled once every CTA of the grid has issued it or
completed (repeated invocations by a CTA's threads have no effect past the
first); ``.wait`` makes the executing thread wait until every prerequisite
grid in flight has completed and its memory operations are performed and
visible to the current grid.

A grid learns its place in a launch sequence through
``machine.grid_dependency`` (a :class:`GridDependency`, set by
:meth:`jaxptx.sim.Device.launch_sequence`); a grid launched on its own has
none, so it has no prerequisite and no dependent: ``wait`` returns at once
and ``launch_dependents`` does nothing. A ``wait`` whose prerequisites are
still running parks its threads on :data:`WAIT_KEY` (they run the ``wait``
again when woken); the sequence wakes them when the last prerequisite
completes, and the ``wait`` that then passes acquires the prerequisites'
completion for the sanitizer.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..core.step import Step
from .registry import semantics

__all__ = ["GridDependency", "WAIT_KEY"]

WAIT_KEY = -2
"""The park key of threads in ``griddepcontrol.wait`` (mbarrier words, the
other keys, are never negative; -1 marks a thread parked on nothing)."""


class GridDependency(Protocol):
    """A grid's place in a launch sequence, as ``griddepcontrol`` sees it."""

    def launch_dependents(self, ctas: np.ndarray) -> None:
        """CTAs ``ctas`` (linear indices, repeats allowed) issued ``launch_dependents``."""

    def completed(self) -> bool:
        """Whether every prerequisite grid has completed."""

    def acquire(self, threads: np.ndarray) -> None:
        """``threads`` passed ``wait``: the prerequisites' memory happens before what they do next."""

    def describe(self, key: int) -> str:
        """What a thread parked in ``wait`` waits for, in words (a hang report)."""


@semantics("griddepcontrol")
def griddepcontrol(s: Step) -> None:
    """``griddepcontrol.launch_dependents`` marks the executing threads'
    CTAs; ``griddepcontrol.wait`` passes once the prerequisites completed,
    else parks the executing threads until they have."""
    dependency: GridDependency | None = s.m.grid_dependency
    if dependency is None:
        return
    if s.values["action"] == "launch_dependents":
        dependency.launch_dependents(s.threads // s.m.ntid)
    elif dependency.completed():
        dependency.acquire(s.threads)
    else:
        s.m.park(s.threads, np.full(s.n, WAIT_KEY, dtype=np.int64), np.zeros(s.n, dtype=np.int64),
                 dependency.describe, again=True)

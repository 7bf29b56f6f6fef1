"""The machine as semantics, observers and the scheduler's helpers see it.

:class:`MachineView` is the narrow protocol that :class:`.step.Step`, the
semantics families, the observers (the sanitizer, ``jaxptx.profile``'s
counter, the fidelity tracker) and the scheduler's helper modules
(``barriers``, ``hangs``, ``progress``) are written against. It names the
launch's state and the handful of operations they call; it imports nothing
else of the emulator, so none of those modules depends on the concrete
:class:`.machine.Machine` (which implements it), and the emulator's modules
import each other in one direction. A second machine — one device of a node,
a schedule explorer's replay — implements the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

__all__ = ["MachineView"]


class MachineView(Protocol):
    """One launch's state and the operations its readers call.

    Attributes:
        program: the prepared kernel (:class:`.program.Program`).
        memory: its address spaces (:class:`jaxptx.sim.memory.spaces.Memory`).
        observers: the launch's :class:`.observers.Observers` (events go here).
        semantics: ``sim`` name → semantics function.
        launch: the :class:`jaxptx.launch.Launch` (``grid``, ``block``,
            ``cluster`` and ``dynamic_smem`` are its fields).
        ntid: threads per CTA (``nctas`` CTAs, ``nthreads`` threads,
            ``warps_per_cta`` warps per CTA).
        regs: the :class:`.registers.RegisterFile`.
        pc: every thread's PC (``state``: running, waiting, parked …).
        barrier: each thread's barrier bookkeeping, with ``barrier_count``,
            ``barrier_pc``, ``barrier_pred``, ``warp_mask``, ``arrived``,
            ``cluster_arrivals``, ``cluster_phase`` and ``arrived_phase``
            (see :mod:`.barriers`).
        groups: PC → running threads (``parked``, ``spinners``, ``frames``:
            waiting and calling threads; see :mod:`.hangs`, :mod:`.calls`).
        all_threads: ``arange(nthreads)``.
        steps: steps taken so far (``%clock``; ``current_pc``: the executing PC).
        exit_checks: checks run once every thread has exited.
        schedule: ``None`` (the default schedule) or the random schedule,
            whose ``deferred`` holds the copies not yet complete.
        grid_dependency: this grid's place in a launch sequence
            (``jaxptx.sim.sequence``), which ``griddepcontrol`` asks; ``None``
            for a launch of its own.
        residency: the :class:`.launch_state.Residency` of a launch with
            ``max_resident_ctas`` (which clusters run, wait or were
            canceled), else ``None``.
        check: the sanitizer's mode (False: unchecked): a checked launch
            reports what an unchecked one faults on (a divergent
            ``.aligned`` barrier) as a finding.
        on_register_read: the hook of the observers' register reads (and
            ``on_register_write`` of their writes); ``None`` when none
            listens, so a read or write may take a fast path.
    """

    program: Any
    memory: Any
    observers: Any
    semantics: Mapping[str, Callable[..., None]]
    launch: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem: int
    ntid: int
    nctas: int
    nthreads: int
    warps_per_cta: int
    regs: Any
    pc: np.ndarray
    state: np.ndarray
    barrier: np.ndarray
    barrier_count: np.ndarray
    barrier_pc: np.ndarray
    barrier_pred: np.ndarray
    warp_mask: np.ndarray
    arrived: np.ndarray
    cluster_arrivals: np.ndarray
    cluster_phase: np.ndarray
    arrived_phase: np.ndarray
    groups: dict[int, np.ndarray]
    parked: dict[int, Any]
    spinners: Any
    frames: dict[str, np.ndarray]
    all_threads: np.ndarray
    steps: int
    current_pc: int | None
    exit_checks: list[Callable[[Any], None]]
    residency: Any
    schedule: Any
    grid_dependency: Any
    check: Any
    on_register_read: Callable[[str, np.ndarray], None] | None
    on_register_write: Callable[[str, np.ndarray], None] | None

    def read_register(self, name: str, threads: np.ndarray) -> np.ndarray:
        """Raw bits of register ``name`` (or a special register) for ``threads``."""

    def write_register(self, name: str, threads: np.ndarray, bits: np.ndarray) -> None:
        """Write raw bits to register ``name`` for ``threads``."""

    def register_width(self, name: str) -> int:
        """Bits of register ``name``'s storage."""

    def variable_address(self, v: Any) -> int:
        """A variable's address in its own space."""

    def cluster_first(self, cta: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of rank 0 in each CTA's cluster."""

    def cluster_cta(self, cta: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of ``rank`` in each CTA's cluster."""

    def cluster_register(self, base: str, axis: int, cta: np.ndarray) -> np.ndarray:
        """``%cluster_ctarank`` and friends for CTAs ``cta``."""

    def cancel_clusters(self, n: int) -> np.ndarray:
        """``clusterlaunchcontrol.try_cancel`` for ``n`` requests, in order: the
        first CTA of each canceled cluster, -1 where none was waiting."""

    def park(self, threads: np.ndarray, keys: np.ndarray, marks: np.ndarray, describe: Callable[[int], str],
             again: bool = False) -> None:
        """Park executing threads until ``changed`` reports a new mark for their key."""

    def changed(self, keys: np.ndarray, marks: np.ndarray) -> None:
        """Objects ``keys`` now have ``marks``: wake threads parked on a changed key."""

    def spin(self, threads: np.ndarray, pcs: frozenset[int]) -> None:
        """Put aside running threads proven to loop without changing anything."""

    def sync_pcs(self) -> None:
        """Write the running threads' PCs into ``pc``."""

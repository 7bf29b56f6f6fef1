"""The state of one launch, and what semantics and the scheduler ask of it.

:class:`LaunchState` holds every thread's registers (numpy arrays over all
threads), PC, state and barrier bookkeeping, the groups of running threads
by PC, and the threads parked on mbarriers or put aside as spinning. Its
methods are what semantics functions call on the machine (registers, a
variable's address, cluster geometry, parking on an mbarrier) and the
group bookkeeping the scheduler shares with them. :class:`.machine.Machine`
adds the scheduler: which group runs next, and the instructions that move
threads (branches, calls, barriers, exits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ...launch import Launch
from .barriers import EXITED, PARKED, RUNNING, SPINNING
from .hangs import Spinners, shared_state
from ..memory.spaces import Memory
from .program import Program, Variable
from ..errors import SimError
from .observers import Observer, Observers
from .sanitizer import Sanitizer
from .registers import RegisterFile, SpecialRegisters, register_dtypes

if TYPE_CHECKING:
    from .view import MachineView

__all__ = ["LaunchState", "Residency"]


def _each(fns: tuple[Callable[..., None], ...]) -> Callable[..., None]:
    """One hook that calls each of ``fns`` in turn."""
    def each(*args: Any, **kwargs: Any) -> None:
        for fn in fns:
            fn(*args, **kwargs)
    return each


class Residency:
    """Which clusters of a launch are resident (``max_resident_ctas``): at
    most ``slots`` clusters run at once; the others wait, in grid order
    (cluster x fastest, then y, then z), and start as residents exit, unless
    ``clusterlaunchcontrol.try_cancel`` cancels them first.

    Attributes:
        members: ``(clusters, cluster size)`` linear CTA indices, clusters
            in launch order, each cluster's CTAs by ``%cluster_ctarank``.
        max_ctas: the launch's ``max_resident_ctas``; slots: clusters resident at once.
        next: index in ``members`` of the next cluster to start or cancel.
        started: clusters that started; canceled: clusters canceled.
    """

    def __init__(self, grid: tuple[int, int, int], cluster: tuple[int, int, int], ntid: int,
                 max_ctas: int) -> None:
        (gx, gy, gz), (cx, cy, cz) = grid, cluster
        rank = np.arange(cx * cy * cz)
        inner = rank % cx + gx * ((rank // cx) % cy) + gx * gy * (rank // (cx * cy))
        kz, ky, kx = np.meshgrid(np.arange(gz // cz), np.arange(gy // cy), np.arange(gx // cx), indexing="ij")
        first = (kx * cx + gx * (ky * cy + gy * kz * cz)).reshape(-1)
        self.members = first[:, None] + inner[None, :]
        self.ntid = ntid
        self.max_ctas = max_ctas
        self.slots = max_ctas // len(rank)
        self._cluster_of = np.empty(gx * gy * gz, dtype=np.int64)
        self._cluster_of[self.members.reshape(-1)] = np.repeat(np.arange(len(first)), len(rank))
        self._live = np.full(len(first), len(rank) * ntid, dtype=np.int64)
        self.next = self.started = min(self.slots, len(first))
        self.canceled = 0

    def initial(self) -> np.ndarray:
        """The threads of the clusters that start with the launch (ascending)."""
        return self._threads(self.members[:self.next])

    def exited(self, threads: np.ndarray) -> np.ndarray:
        """``threads`` exited: the threads of the clusters that start in the
        slots their exits freed (ascending; empty when none)."""
        clusters, counts = np.unique(self._cluster_of[threads // self.ntid], return_counts=True)
        self._live[clusters] -= counts
        freed = int(np.count_nonzero(self._live[clusters] == 0))
        start = self.members[self.next:self.next + freed]
        self.next += len(start)
        self.started += len(start)
        return self._threads(start)

    def waiting(self) -> np.ndarray:
        """Linear indices of the CTAs still waiting to start (ascending)."""
        return np.sort(self.members[self.next:].reshape(-1))

    def cancel(self, n: int) -> np.ndarray:
        """Cancel the next ``n`` waiting clusters (one per request, in
        order): the linear index of each one's first CTA, -1 where none was
        left to cancel."""
        taken = self.members[self.next:self.next + n, 0]
        self.next += len(taken)
        self.canceled += len(taken)
        return np.concatenate((taken, np.full(n - len(taken), -1, dtype=np.int64)))

    def _threads(self, members: np.ndarray) -> np.ndarray:
        ctas = np.sort(members.reshape(-1))
        return (ctas[:, None] * self.ntid + np.arange(self.ntid)[None, :]).reshape(-1)


class LaunchState:
    """The threads of one launch of a prepared program (the base of
    :class:`.machine.Machine`).

    Attributes:
        program: the kernel. memory: its address spaces.
        semantics: ``sim`` name → semantics function (the registry of
            :mod:`jaxptx.sim.semantics`; passed in, so that the machine core
            does not depend on the instruction families).
        launch: the launch's :class:`jaxptx.launch.Launch`; ``grid``,
            ``block``, ``cluster``, ``dynamic_smem`` its fields; ``ntid`` threads per CTA,
            ``nthreads`` in all.
        groups: PC → the running threads at that PC (ascending); ``pc`` holds
            the PC of every other thread (:meth:`sync_pcs` brings it up to date).
        parked: mbarrier word → ``(threads, mark, describe)`` of the threads
            parked on it (:meth:`park`).
        spinners: threads proven to loop without changing anything.
        observers: the launch's :class:`.observers.Observers`: what the
            semantics and the scheduler tell the tools watching the launch
            (:meth:`observe` adds one).
        sanitizer: the launch's :class:`.sanitizer.Sanitizer` (``None``
            unless ``check``), one of the observers; read for its findings.
        steps, thread_steps: the steps the scheduler took so far (``%clock``
            reads it) and, after :meth:`.machine.Machine.run`, the
            thread-instructions they executed (statistics for benchmarks).
        exit_checks: checks run when every thread has exited.
    """

    def __init__(self, program: Program, launch: Launch, memory: Memory, semantics: Mapping[str, Callable], *,
                 global_bases: dict[str, int] | None = None, check: bool = False,
                 max_resident_ctas: int | None = None) -> None:
        self.program = program
        self.semantics = semantics
        self.launch = launch
        self.grid, self.block, self.cluster = launch.grid, launch.block, launch.cluster
        self.dynamic_smem = launch.smem
        self.global_bases = global_bases or {}
        self.memory = memory
        self.ntid = launch.threads
        self.nctas = launch.blocks
        self.nthreads = self.ntid * self.nctas
        self.warps_per_cta = -(-self.ntid // 32)
        n = self.nthreads
        self.regs = RegisterFile(program.registers, n,
                                 program.derive("register dtypes", lambda: register_dtypes(program.registers)))
        # The per-thread int64 arrays are rows of two blocks (zeros, then -1s)
        # and the small ones share a third: a few allocations a launch
        # rather than one an array (a tiny launch pays per allocation).
        zeros = np.zeros((3, n), dtype=np.int64)
        ones = np.empty((4, n), dtype=np.int64)
        ones.fill(-1)
        flags = np.zeros((3, n), dtype=np.int8)
        self.pc, self.barrier_count, self.warp_mask = zeros
        self.state = flags[0]
        self.barrier, self.barrier_pc, self.arrived_phase, self.park_word = ones
        # bar.warp.sync members awaited: warp_mask. bar.red: each waiting
        # thread's predicate and the PC of its bar.red (-1 for bar.sync);
        # bar.arrive: arrivals without waiting per (CTA, barrier).
        self.barrier_pred = flags[1].view(bool)
        self.arrived = np.zeros(self.nctas * 16, dtype=np.int64)
        self.all_threads = np.arange(n, dtype=np.int64)
        self.frames: dict[str, np.ndarray] = {}   # function -> calling PC per thread (-1: not in it)
        self.current_pc: int | None = None
        self.observers = Observers()
        self.on_register_read = self.on_register_write = None       # hooks of the hot register events, None when unwatched (see observe)
        self._accesses: tuple[Callable[..., None], ...] = ()      # hear_accesses' listeners
        self.check = check
        self.sanitizer = self.observe(Sanitizer(self, check)) if check else None
        memory.cluster_cta = self.cluster_cta
        size = self.cluster[0] * self.cluster[1] * self.cluster[2]
        # Shared addresses carry the CTA's cluster rank (jaxptx.sim.memory.spaces).
        memory.set_clusters(self.cluster_register("cluster_ctarank", 0, np.arange(self.nctas)) if size > 1 else None,
                            size)
        self.cluster_arrivals = np.zeros(self.nctas, dtype=np.int64)   # by rank-0 CTA
        self.cluster_phase = np.zeros(self.nctas, dtype=np.int64)      # completed phases, by rank-0 CTA
        # arrived_phase: the phase each thread arrived in and has not waited on yet (-1: none)
        self.groups: dict[int, np.ndarray] = {0: self.all_threads} if self.nthreads else {}
        # max_resident_ctas: the CTAs not resident yet wait as EXITED (no
        # barrier, schedule or hang counts them) until Machine starts them.
        self.residency: Residency | None = None
        if max_resident_ctas is not None and max_resident_ctas < self.nctas and self.nthreads:
            self.residency = Residency(self.grid, self.cluster, self.ntid, max_resident_ctas)
            self.state[:] = EXITED
            first = self.residency.initial()
            self.state[first] = RUNNING
            self.groups = {0: first}
        self.park_again = flags[2].view(bool)     # parked to run their instruction again (park(again=))
        # Programmatic dependent launch: this grid's place in a launch sequence
        # (jaxptx.sim.sequence), which griddepcontrol asks; None for a launch of its own.
        self.grid_dependency: Any = None
        self.parked: dict[int, tuple[np.ndarray, int, Callable[[int], str]]] = {}
        self._parking: list[tuple[np.ndarray, np.ndarray, np.ndarray, Callable[[int], str]]] = []
        self.spinners = Spinners()
        self.steps = self.thread_steps = 0
        # Checks run when every thread has exited (tensor memory leaks); state
        # that needs one registers it here.
        self.exit_checks: list[Callable[["MachineView"], None]] = []
        self._special = SpecialRegisters(self)

    def close(self) -> None:
        """Drop the per-thread state and the references back to the machine
        (memory hooks, special registers, sanitizer). Without this the
        machine and its megabytes of registers live in a reference cycle
        until the cycle collector runs, and every launch maps fresh pages."""
        self.memory.cluster_cta = lambda cta, rank: cta
        self.memory.set_clusters(None, 1)
        self.memory.on_access = None
        self.memory.elsewhere = self.memory.multicast = self.memory.peer_globals = None     # a node's seams
        self._special = None
        self.sanitizer = None
        if len(self.observers):         # an empty hub holds no references to drop
            self.observers = Observers()
        self.on_register_read = self.on_register_write = None
        self._accesses = ()
        self.regs = None
        self.frames = {}
        self.parked = {}
        self.groups = {}

    def observe(self, observer: Observer) -> Observer:
        """Join ``observer`` to the launch (before :meth:`.machine.Machine.run`);
        returns it."""
        self.observers.add(observer)
        self.on_register_read = self.observers.hook("read_register")
        self.on_register_write = self.observers.hook("write_register")
        self._connect_accesses()
        return observer

    def hear_accesses(self, access: Callable[..., None]) -> None:
        """Call ``access`` with every memory access of the launch, as
        :meth:`Observer.access <.observers.Observer.access>` hears them,
        without joining an observer to the hub (which costs a tiny launch
        more than the launch itself): the device's store recorder."""
        self._accesses += (access,)
        self._connect_accesses()

    def _connect_accesses(self) -> None:
        """Point the memory's access hook at the observers' and :meth:`hear_accesses`' listeners."""
        hook = self.observers.hook("access")
        fns = ((hook,) if hook is not None else ()) + self._accesses
        self.memory.on_access = None if not fns else fns[0] if len(fns) == 1 else _each(fns)

    # registers ---------------------------------------------------------------
    def read_register(self, name: str, threads: np.ndarray) -> np.ndarray:
        """Raw bits of register ``name`` (or a special register) for ``threads``."""
        reg = self.regs.get(name)
        if reg is not None:
            if self.on_register_read is not None:
                self.on_register_read(name, threads)
            return reg if len(threads) == self.nthreads else reg[threads]
        return self._special.read(name, threads)

    def write_register(self, name: str, threads: np.ndarray, bits: np.ndarray) -> None:
        """Write raw bits to register ``name`` for ``threads``."""
        if name not in self.regs.dtypes:
            raise SimError(f"write to undeclared register {name}")
        if len(threads) == self.nthreads:
            self.regs.replace(name, bits)
        else:
            self.regs.get(name)[threads] = bits
        if self.on_register_write is not None:
            self.on_register_write(name, threads)

    def register_width(self, name: str) -> int:
        """Bits of register ``name``'s storage."""
        dtype = self.regs.dtypes.get(name)
        if dtype is None:
            raise SimError(f"write to undeclared register {name}")
        return 1 if dtype == np.bool_ else dtype.itemsize * 8

    def variable_address(self, v: Variable) -> int:
        """A variable's address in its own space (a shared variable's offset
        in its CTA's window: the executing CTA's cluster rank, which its
        shared addresses also carry, is :meth:`Memory.rank_bits
        <jaxptx.sim.memory.spaces.Memory.rank_bits>`)."""
        if v.space == "global":
            return self.global_bases[v.name]
        if v.space == "shared" and v.offset < 0:    # the .extern dynamic array
            return -(-self.program.shared_size // 16) * 16
        return v.offset

    def cluster_first(self, cta: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of rank 0 in each CTA's cluster."""
        gx, gy, _ = self.grid
        cx, cy, cz = self.cluster
        x, y, z = cta % gx, (cta // gx) % gy, cta // (gx * gy)
        return (x - x % cx) + gx * ((y - y % cy) + gy * (z - z % cz))

    def cluster_cta(self, cta: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of ``rank`` in each CTA's cluster."""
        gx, gy, _ = self.grid
        cx, cy, _ = self.cluster
        first = self.cluster_first(cta)
        return first + rank % cx + gx * ((rank // cx) % cy) + gx * gy * (rank // (cx * cy))

    def cluster_register(self, base: str, axis: int, cta: np.ndarray) -> np.ndarray:
        """``%cluster_ctarank`` and friends for CTAs ``cta``."""
        gx, gy, _ = self.grid
        cx, cy, cz = self.cluster
        pos = (cta % gx, (cta // gx) % gy, cta // (gx * gy))
        inner = (pos[0] % cx, pos[1] % cy, pos[2] % cz)
        outer = (pos[0] // cx, pos[1] // cy, pos[2] // cz)
        if base == "cluster_ctarank":
            return inner[0] + cx * (inner[1] + cy * inner[2])
        if base == "cluster_nctarank":
            return np.full(len(cta), cx * cy * cz)
        if base == "cluster_ctaid":
            return inner[axis]
        if base == "cluster_nctaid":
            return np.full(len(cta), self.cluster[axis])
        if base == "clusterid":
            return outer[axis]
        return np.full(len(cta), (self.grid[axis] // self.cluster[axis]))

    def cancel_clusters(self, n: int) -> np.ndarray:
        """``clusterlaunchcontrol.try_cancel`` for ``n`` requests, in order:
        the linear index of the first CTA of each cluster canceled (it will
        never start), -1 where no cluster was waiting to start."""
        if self.residency is None:
            return np.full(n, -1, dtype=np.int64)
        return self.residency.cancel(n)

    # waiting -------------------------------------------------------------------
    def park(self, threads: np.ndarray, keys: np.ndarray, marks: np.ndarray,
             describe: Callable[[int], str], again: bool = False) -> None:
        """Park some of the executing threads after this step until
        :meth:`changed` reports a new mark for their key (an mbarrier
        word: its phase and validity bits). ``describe(key)`` words the
        key for a hang message. ``again``: when woken, the threads run the
        instruction again rather than the next (a wait with no loop of its
        own, ``griddepcontrol.wait``: any wake-up re-checks it)."""
        self._parking.append((threads, keys, marks, describe, again))

    def changed(self, keys: np.ndarray, marks: np.ndarray) -> None:
        """Objects ``keys`` now have ``marks``: wake the threads parked on a
        key whose mark differs from the one they parked with."""
        if not self.parked:
            return
        for key, mark in zip(keys.tolist(), marks.tolist()):
            entry = self.parked.get(key)
            if entry is not None and entry[1] != mark:
                del self.parked[key]
                self._wake(entry[0])

    def spin(self, threads: np.ndarray, pcs: frozenset[int]) -> None:
        """Put aside running ``threads`` proven to loop over ``pcs`` without
        changing anything (:class:`.hangs.CycleWatch`)."""
        threads = threads[self.state[threads] == RUNNING]
        if len(threads) == 0:
            return
        self.sync_pcs()
        for pc in list(self.groups):
            g = self.groups[pc]
            keep = g[~np.isin(g, threads, assume_unique=True)]
            if len(keep) != len(g):
                if len(keep):
                    self.groups[pc] = keep
                else:
                    del self.groups[pc]
        self.state[threads] = SPINNING
        self.spinners.add(threads, shared_state(self), pcs)

    def sync_pcs(self) -> None:
        """Write the running threads' PCs into ``pc``."""
        for pc, threads in self.groups.items():
            self.pc[threads] = pc

    def _park(self, threads: np.ndarray, pc: int) -> np.ndarray:
        """Park the threads :meth:`park` named this step (at ``pc``); returns the others."""
        requests, self._parking = self._parking, []
        for who, keys, marks, describe, again in requests:
            self.state[who] = PARKED
            self.pc[who] = pc
            self.park_again[who] = again
            self.park_word[who] = keys
            for key in np.unique(keys).tolist():
                sel = keys == key
                mark = int(marks[sel][0])
                entry = self.parked.get(key)
                ts = who[sel] if entry is None else np.sort(np.concatenate((entry[0], who[sel])))
                self.parked[key] = (ts, mark, describe)
        return threads[self.state[threads] == RUNNING]

    def _wake(self, threads: np.ndarray) -> None:
        """Threads parked or spinning run again from their PCs (those parked
        with ``again``: from the instruction they parked at)."""
        self.state[threads] = RUNNING
        self.park_word[threads] = -1
        again = threads[self.park_again[threads]]
        if len(again):
            self.pc[again] -= 1
            self.park_again[again] = False
        self._place_at_pcs(threads)

    # groups --------------------------------------------------------------------
    def _place(self, pc: int, threads: np.ndarray) -> None:
        """Add running ``threads`` (ascending) to the group at ``pc``."""
        if len(threads) == 0:
            return
        group = self.groups.get(pc)
        self.groups[pc] = threads if group is None else np.sort(np.concatenate((group, threads)))

    def _place_at_pcs(self, threads: np.ndarray) -> None:
        """Add running ``threads`` to the groups of their ``pc`` entries."""
        if len(threads) == 0:
            return
        pcs = self.pc[threads]
        first = pcs[0]
        if (pcs == first).all():
            self._place(int(first), threads)
            return
        for pc in np.unique(pcs).tolist():
            self._place(pc, threads[pcs == pc])


"""The sanitizer of ``launch(..., check=...)``: a happens-before checker.

It watches every register read and write, every memory access (by
threads, and in shared memory by the async proxy too: TMA, bulk copies,
``wgmma``, ``tcgen05.mma``) and every synchronisation, and reports:

- **races**: two accesses to a byte of shared or global memory by
  different threads, at least one a write and not both atomic or strong
  (``.relaxed``/``.acquire``/``.release``/``.volatile``), that nothing
  orders. Within a CTA, :mod:`.clocks` says what orders what: barriers
  among their participants only, ``bar.arrive`` as a release,
  ``bar.warp.sync``, mbarrier arrive → phase completion → ``try_wait``,
  ``cp.async.wait_group``, ``wgmma.wait_group``, ``tcgen05.commit``,
  release/acquire through a memory location (and fences with strong
  accesses). Between CTAs, in global memory, only a gpu-scope fence or
  release by the earlier access's CTA since may order it (:mod:`.memory`);
  in distributed shared memory, ``barrier.cluster``. Several threads
  storing the *same* value is a race only in ``check="strict"`` (compilers
  emit such stores on purpose);
- **async data used too early**: reading a ``cp.async`` destination before
  ``cp.async.wait_group``, a TMA destination before its mbarrier phase is
  observed, ``wgmma`` accumulators before ``wgmma.wait_group``,
  ``tcgen05.ld`` results before ``tcgen05.wait::ld``; overwriting shared
  memory an async copy or MMA is still reading;
- **a missing proxy fence**: a generic-proxy write to shared memory read by
  the async proxy with no ``fence.proxy.async`` after it;
- **uninitialised reads** of registers and shared memory (a register an
  instruction ignores — ``wgmma`` accumulators with scale-d false — is not
  read);
- **barrier divergence**: an ``.aligned`` barrier reached by part of a warp.

Each finding names both accesses (instruction, PTX line or the kernel's
Python line, CTA and thread) and what ordering was missing. ``check=True``
(or ``"strict"``) raises :class:`SanitizerError` at the first finding;
``check="all"`` collects every distinct finding and the launch returns
them. Lanes are ordered by program order within a thread only; reads are
remembered per (byte, warp): the last reading lane of each warp (in shared
memory and in each global buffer alike: :class:`.shadow.CellRecords`).
In a node launch (:class:`jaxptx.sim.System`) each grid's sanitizer checks
its own threads in every buffer they touch, peers' included, and hands each
global access to the node's checker (:mod:`.node`), which reports races
between grids: accesses of two devices that no release/acquire chain at
``.sys`` scope orders (findings carry ``device`` and ``other_device``).
The shadows keep one record per cell of up to 16 bytes while every access
covers whole cells, and split them at the first that does not
(:data:`.values.GRAIN`): the findings are those of per-byte records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..observers import ATOMIC, LOAD, STORE, Observer
from .asyncs import AsyncChecks
from .clocks import Clocks
from .global_shadow import GlobalShadow
from .locations import LocationChecks
from .memory import MemoryChecks
from .registers import RegisterChecks
from .report import Finding, Reporting, SanitizerError
from .shadow import SharedShadow
from .shared import SharedChecks
from .sync import SyncChecks
from .values import orders_ctas, remote_mbarrier

__all__ = ["Sanitizer", "SanitizerError", "Finding", "MODES"]

MODES = (True, "strict", "all")


class Sanitizer(Reporting, RegisterChecks, SharedChecks, MemoryChecks, LocationChecks, AsyncChecks, SyncChecks,
                Observer):
    """The shadow state of one launch and the checks on it (each family of
    checks in its own module): an :class:`..observers.Observer` of the
    launch's events."""

    def __init__(self, machine, mode: Any = True) -> None:
        self.m = machine
        self.mode = mode
        self.strict = mode == "strict"
        self.findings: list[Finding] = []
        self._seen: set[tuple] = set()
        n = machine.nthreads
        self.ntid = machine.ntid
        self.written = {name: np.zeros(n, dtype=bool) for name in machine.regs}
        self._defined_everywhere: set[str] = set()   # registers every thread has written: reads need no check
        self.clocks = Clocks(machine.nctas, machine.ntid)
        self.shadow = SharedShadow(machine.nctas, machine.memory.shared_size, machine.ntid)
        self.sim: str | None = None          # the executing instruction's semantics name
        self.pc = -1
        self._quiet = False
        self._moving = False
        self.partial: dict[str, np.ndarray] = {}   # register -> defined-byte mask where partly defined
        self.reader: int | None = None        # set while an issuer reads through another CTA's window
        memory = machine.memory
        self.local_init = np.zeros(len(memory.local), dtype=bool)
        self._globals = {id(b): k for k, b in enumerate(memory.globals)}
        self._buffers: list[np.ndarray] = list(memory.globals)     # key -> buffer (a node adds its peers')
        self._names: dict[int, str] = dict(memory.names)
        # A node's launch (jaxptx.sim.System): the checker of accesses between
        # grids, this grid's index there and its device (join_node); else None.
        self.node: Any = None
        self.node_grid = -1
        self.device: int | None = None
        self._sem_cache: dict[int, tuple[bool, bool, bool]] = {}
        self.location_clocks: dict[tuple, np.ndarray] = {}
        self.pending_acquire: dict[int, tuple] = {}
        self.fenced_threads = np.zeros(machine.nthreads, dtype=bool)
        self._global_shadow: dict[int, GlobalShadow] = {}
        self._global_grain: dict[int, int] = {}     # bytes per shadow cell, per global buffer
        # plain reads of global buffers nothing has written yet (see memory.py)
        self._read_log: dict[int, list[tuple]] = {k: [] for k in range(len(memory.globals))}
        self._logged = [0] * len(memory.globals)
        # Orderings between CTAs come only from gpu-scope fences and
        # release/acquire operations: an access a CTA has published with one
        # since is not a race with another CTA's.
        self.cta_sync = any(orders_ctas(ins) for ins in machine.program.code if ins is not None)
        self.fence_epoch = np.zeros(machine.nctas, dtype=np.int32)   # gpu-scope fences/releases per CTA
        # Distributed shared memory is checked by cluster-barrier epochs, in
        # clusters whose CTAs do not also order each other through mbarriers.
        self.cluster_checks = (int(np.prod(machine.cluster)) > 1
                               and not any(remote_mbarrier(ins) for ins in machine.program.code if ins is not None))
        self.cluster_epoch = np.zeros(machine.nctas, dtype=np.int32)
        self.lone_ctas = int(np.prod(machine.cluster)) == 1    # no CTA can reach another's shared memory
        if self.cluster_checks:
            self.shadow.cluster_arrays()
        # cp.async groups, wgmma groups, tcgen05.ld issues per thread
        self.cp_open = np.zeros(n, dtype=np.int64)
        self.cp_done = np.zeros(n, dtype=np.int64)
        self.wg_open = np.zeros(n, dtype=np.int64)
        self.wg_done = np.zeros(n, dtype=np.int64)
        self.ld_open = np.zeros(n, dtype=np.int64)
        self.bulk_open = np.zeros(n, dtype=np.int64)
        self.bulk_done = np.zeros(n, dtype=np.int64)
        self.flying_regs: dict[str, tuple[np.ndarray, np.ndarray]] = {}   # wgmma A operands: (group, pc)
        self.ld_done = np.zeros(n, dtype=np.int64)
        self.pending_regs: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}   # name -> (kind, tag, pc)
        self._open_groups: tuple | None = None   # (threads, their open wgmma/tcgen05.ld groups) this instruction
        # async reads in flight: (kind, group or phase, issuing thread, flat bytes, PC)
        self.in_flight: list[tuple[str, int, int, np.ndarray, int]] = []
        self.completions: dict[int, int] = {}   # mbarrier word -> phases completed
        self._mbar_column: dict[int, int] = {}  # mbarrier word -> its column in the clocks
        self._cluster_columns: dict[int, int] = {}   # cluster (its first CTA) -> mbarrier columns taken
        self._tma_bytes: list[tuple[int, np.ndarray]] = []   # (issuing thread, bytes) of the executing copy
        self._cp_copies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []   # cp.async in flight: bytes, issuer, group

    def access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, kind: str,
               values: np.ndarray | None = None) -> None:
        """Every access of ``width`` bytes at byte offsets ``off`` of ``buf``
        by ``threads``, to the checks of its space. Read-modify-writes other
        than atomics (mbarrier words, async-proxy copies) are checked
        through their own events."""
        if kind == LOAD:
            write = atomic = False
        elif kind == STORE:
            write, atomic = True, False
        elif kind == ATOMIC:
            write = atomic = True
        else:
            return
        if buf is self.m.memory.shared:
            self.shared_access(off, threads, width, write, atomic=atomic, values=values)
        else:
            self.other_access(buf, off, threads, width, write, atomic=atomic, values=values)

    def join_node(self, node: Any, device: int) -> None:
        """Check this grid as device ``device``'s in a node: accesses to the
        other devices' buffers are checked between this grid's threads too,
        and every global access goes to ``node`` (a
        :class:`.node.NodeChecker`) for the pairs with other grids."""
        self.node = node
        self.device = device
        self.node_grid = node.join(self, device)
        for buf, name in node.peers(device):
            if id(buf) not in self._globals:
                self._globals[id(buf)] = len(self._buffers)
                self._names[len(self._buffers)] = name
                self._buffers.append(buf)

    def on_behalf_of(self, thread: int | None) -> None:
        """Shared-memory reads until ``on_behalf_of(None)`` are ``thread``'s."""
        self.reader = thread

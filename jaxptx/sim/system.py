"""``jaxptx.sim.System``: a node of emulated GPUs that run kernels together.

==================================  ==========================================
``System(n)``                       ``n`` devices (``system.devices[i]``: a
                                    :class:`jaxptx.sim.Device`)
``enable_peer_access()``            ``cuCtxEnablePeerAccess`` between every
                                    pair of devices
``multicast(nbytes)``               ``cuMulticastCreate`` (+ ``AddDevice``);
                                    ``mc.bind(device, addr)``: ``BindAddr``
``launch([dict(device=i, ...)])``   one grid per device (or several), run
                                    together until all are done
==================================  ==========================================

Addresses are unique across the node, as with CUDA's unified addressing:
device ``d``'s allocations start at ``(d << 48) + (1 << 36)`` (device 0's
are a lone :class:`~jaxptx.sim.Device`'s). A kernel loads, stores and runs
atomics on another device's memory through its addresses once peer access is
enabled (before, such an access faults, naming both devices and the
address); ``multimem.ld_reduce`` / ``multimem.st`` / ``multimem.red`` reach
every buffer bound to a multicast object through ``mc.address``
(:mod:`.multicast`, :mod:`.node_memory`).

:meth:`System.launch` runs every grid in turns (:mod:`.node_run`): a device
spinning on a flag that another device sets makes progress, and a device
waiting for a flag no thread on any device will set is a
:class:`~jaxptx.sim.SimDeadlock` naming each device's waiting threads.
Memory operations complete in program order, one step at a time, so
``.sys``-scope ``ld.acquire`` / ``st.release`` / ``atom`` / ``red`` and
``fence.acq_rel.sys`` / ``fence.sc.sys`` order memory across devices by
construction. ``check=`` runs each grid's sanitizer over the accesses of its
own threads (to its device's memory and its peers') and, for pairs of
accesses by different grids, the node's (:mod:`.core.sanitizer.node`): a
race between devices is an access pair that no release/acquire chain at
``.sys`` scope orders (``.gpu`` scope orders a device's own grids only).
``schedule="random", seed=N`` runs every grid under a random schedule of its
own, seeded from ``N`` and its device, and varies the turns' lengths: the
same seed gives the same run, results and findings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..launch import Launch
from .checking import check_mode, valid_mode
from .core.observers import Observer
from .core.sanitizer.node import NodeChecker
from .core.schedules import schedule_option
from .core.view import MachineView
from .device import Device, launch_of
from .device_memory import is_int
from .errors import SimError
from .memory.spaces import DEVICE_SHIFT, GLOBAL_SHIFT, Memory
from .multicast import Multicast
from .node_memory import NodeLink
from .node_run import NodeLaunch, results, run_together
from .observing import open_observers

__all__ = ["System"]

MAX_DEVICES = 255           # device index 0xFF marks multicast addresses
_NODE_STREAM = 1 << 32      # the seed stream of the turns' lengths (devices' are their indices)
_KEYS = ("device", "source", "params", "grid", "block", "cluster", "smem", "kernel", "launch")


def grid_seed(seed: int, device: int, place: int) -> int:
    """The random schedule's seed of the ``place``-th grid of ``device`` in
    a node launch under ``seed``: a stream of its own, the same every time."""
    state = np.random.SeedSequence([seed % (1 << 64), device, place]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


class NodeDevice(Device):
    """Device ``index`` of a node: a :class:`~jaxptx.sim.Device` whose
    allocations have addresses unique in the node, and whose launches reach
    the other devices' memory (:mod:`.node_memory`)."""

    _capturable = False

    def __init__(self, system: "System", index: int, arch: str | None) -> None:
        super().__init__(arch)
        self.system = system
        self.index = index
        self._first_slot = (index << (DEVICE_SHIFT - GLOBAL_SHIFT)) + 1

    def _connect(self, memory: Memory) -> None:
        NodeLink(self.system, self.index, memory)

    def _locate(self, address: Any, nbytes: int, what: str) -> tuple[int, int]:
        if is_int(address) and int(address) >= 0 and (int(address) >> DEVICE_SHIFT) != self.index:
            other = int(address) >> DEVICE_SHIFT
            where = f"device {other}'s" if other < len(self.system.devices) else "no device's"
            raise SimError(f"{what}: {int(address):#x} is {where} address, not device {self.index}'s (use "
                           f"that device's read/write, or a kernel with peer access)")
        return super()._locate(address, nbytes, what)

    def __repr__(self) -> str:
        return f"<jaxptx.sim.Device {self.index} of a System of {len(self.system.devices)}>"


class System:
    """A node of ``n`` emulated GPUs with peer memory and multicast objects.

    Args:
        n: the number of devices (1 to 255).
        arch: the target every module is checked and run for (default:
            each module's own ``.target``).

    Attributes:
        devices: the devices, ``devices[i]`` of index ``i``.
        peer_access: whether kernels may access other devices' memory.
        multicasts: the multicast objects, in the order made.

    Example:
        >>> import numpy as np
        >>> from jaxptx import sim
        >>> ptx = '''.version 8.5
        ... .target sm_90a
        ... .address_size 64
        ... .visible .entry put(.param .u64 peer, .param .u32 v)
        ... {
        ...     .reg .b32 %r<2>; .reg .b64 %rd<2>;
        ...     ld.param.u64 %rd1, [peer];
        ...     ld.param.u32 %r1, [v];
        ...     st.release.sys.global.u32 [%rd1], %r1;
        ...     ret;
        ... }'''
        >>> node = sim.System(2)
        >>> node.enable_peer_access()
        >>> a, b = (d.alloc(4) for d in node.devices)
        >>> node.launch([dict(device=0, source=ptx, params=[b, 7]),
        ...              dict(device=1, source=ptx, params=[a, 5])])
        [None, None]
        >>> node.devices[1].from_device(b, like=np.zeros(1, np.uint32))
        array([7], dtype=uint32)
    """

    def __init__(self, n: int, arch: str | None = None) -> None:
        if not is_int(n) or not 1 <= int(n) <= MAX_DEVICES:
            raise SimError(f"System: expected a number of devices from 1 to {MAX_DEVICES}, got {n!r}")
        self.devices: tuple[Device, ...] = tuple(NodeDevice(self, i, arch) for i in range(int(n)))
        self.peer_access = False
        self.multicasts: list[Multicast] = []
        # (device, start, end, object): ranges mapped to a multicast object (map_multicast)
        self.multicast_ranges: list[tuple[int, int, int, Multicast]] = []

    def enable_peer_access(self) -> None:
        """Let every device load, store and run atomics on every other
        device's memory (``cuCtxEnablePeerAccess`` for each pair)."""
        self.peer_access = True

    def index_of(self, device: Any, what: str) -> int:
        """The index of ``device`` (an index or one of :attr:`devices`).

        Raises:
            SimError: neither, naming ``what``.
        """
        if isinstance(device, NodeDevice) and device.system is self:
            return device.index
        if is_int(device) and 0 <= int(device) < len(self.devices):
            return int(device)
        raise SimError(f"{what}: expected a device of this System (an index 0..{len(self.devices) - 1} or one "
                       f"of system.devices), got {device!r:.60}")

    def multicast(self, nbytes: int, devices: Sequence[Any] | None = None) -> Multicast:
        """A multicast object of ``nbytes`` over ``devices`` (default: all):
        each member binds a buffer with :meth:`Multicast.bind`, and
        ``multimem`` instructions use :attr:`Multicast.address`.

        Raises:
            SimError: ``nbytes`` is not an int in 1..2**36, or ``devices``
                names no device of the node or one twice.
        """
        if not is_int(nbytes) or not 1 <= int(nbytes) <= 1 << GLOBAL_SHIFT:
            raise SimError(f"System.multicast: nbytes must be an int in 1..2**{GLOBAL_SHIFT}, got {nbytes!r}")
        members = range(len(self.devices)) if devices is None else \
            [self.index_of(d, "System.multicast devices") for d in devices]
        if not members or len(set(members)) != len(members):
            raise SimError(f"System.multicast: devices must name each member once, got {list(members)}")
        mc = Multicast(self, len(self.multicasts), int(nbytes), tuple(sorted(members)))
        self.multicasts.append(mc)
        return mc

    def map_multicast(self, mc: Multicast, device: Any, address: int) -> None:
        """Give multicast object ``mc`` a second address on ``device``: its
        ``multimem`` instructions on ``address .. address + mc.nbytes`` reach
        ``mc`` as they do at ``mc.address`` (``cuMemMap`` of a multicast
        handle into a range the device reserved).

        Raises:
            SimError: ``mc`` of another node, a device that is not a member,
                or an address that is not an int.
        """
        index = self.index_of(device, "System.map_multicast device")
        if mc not in self.multicasts or index not in mc.devices:
            raise SimError(f"System.map_multicast: device {index} is not a member of this node's multicast object "
                           f"at {getattr(mc, 'address', mc)!r}")
        if not is_int(address) or int(address) < 0:
            raise SimError(f"System.map_multicast address: expected a device address (an int), got {address!r}")
        self.multicast_ranges.append((index, int(address), int(address) + mc.nbytes, mc))

    def multicast_address(self, device: int, addr: np.ndarray) -> np.ndarray:
        """``addr`` with the addresses ``device`` mapped to a multicast object
        (:meth:`map_multicast`) taken to that object's own addresses."""
        if not self.multicast_ranges:
            return addr
        addr = np.array(addr, dtype=np.uint64)
        for index, start, end, mc in self.multicast_ranges:
            if index == device:
                inside = (addr >= np.uint64(start)) & (addr < np.uint64(end))
                addr[inside] = addr[inside] - np.uint64(start) + np.uint64(mc.address)
        return addr

    def launch(self, launches: Sequence[Mapping[str, Any]], *, check: Any = None, max_steps: int | None = None,
               max_seconds: float | None = None, schedule: str | None = None, seed: int | None = None,
               observers: Sequence[Callable[[MachineView], Observer]] = ()) -> list[Any]:
        """Run one grid per item, all together, until every one is done.

        Args:
            launches: one mapping per grid: ``device`` (an index or a
                device), ``source`` (PTX text or a module), ``params`` (as
                :meth:`jaxptx.sim.Device.launch` takes them), and optionally
                ``grid``, ``block``, ``cluster``, ``smem`` (or ``launch``, a
                :class:`jaxptx.launch.Launch`) and ``kernel``.
            check: the sanitizer, as ``Device.launch`` takes it: each grid's
                over its own threads, and the node's over pairs of accesses
                by different grids (races between devices, named with both
                devices, CTAs, threads and lines).
            max_steps: a bound on each grid's steps.
            max_seconds: a bound on each grid's wall time.
            schedule, seed: ``schedule="random"`` with an int ``seed``: each
                grid runs under a random schedule seeded from ``seed``, its
                device and its place among that device's grids, and the
                devices take turns of random lengths; the same seed gives
                the same run. Default: as ``JAXPTX_SIM_SCHEDULE`` says, else
                the default schedule.
            observers: tools to watch every grid, as ``Device.launch``
                takes them (each is called once per grid's machine).

        Returns:
            One item per grid: its sanitizer findings under ``check="all"``,
            else ``None``.

        Raises:
            PrecheckError: PTX that ptxas would reject or the emulator
                cannot run.
            SimDeadlock: no thread on any device can make progress (its
                ``warps`` name their devices).
            SimError: a bad item or launch, or a fault on a device (the
                message starts with the device).
        """
        if isinstance(launches, Mapping) or not isinstance(launches, Sequence) or not launches:
            raise SimError("System.launch: expected a non-empty list of dicts, one per grid "
                           "(dict(device=0, source=ptx, params=[...], grid=..., block=...))")
        check = check_mode() if check is None else valid_mode(check)
        schedule, seed = schedule_option(schedule, seed)
        runs: list[NodeLaunch] = []
        try:
            nth: dict[int, int] = {}
            for k, item in enumerate(launches):
                runs.append(self._prepare(k, item, check, max_steps, max_seconds, schedule, seed, nth))
            if check and len(runs) > 1:
                node = NodeChecker(self.devices, strict=check == "strict")
                for r in runs:
                    r.machine.sanitizer.join_node(node, r.device)
            for r in runs:
                for dev in self.devices:        # writes to a peer count on the peer's masks too
                    recorder = dev.store_recorder() if dev.index != r.device else None
                    if recorder is not None:
                        r.machine.observe(recorder)
                for make in (*open_observers(), *observers):
                    r.machine.observe(make(r.machine))
            turns = None if seed is None else np.random.default_rng([seed % (1 << 64), _NODE_STREAM])
            run_together(runs, turns=turns)
            return results(runs, check)
        finally:
            for r in runs:
                r.machine.close()

    def _prepare(self, k: int, item: Mapping[str, Any], check: Any, max_steps: int | None,
                 max_seconds: float | None, schedule: str | None, seed: int | None,
                 nth: dict[int, int]) -> NodeLaunch:
        """Grid ``k``'s machine, checked and ready to run (``nth``: grids
        per device so far, which seeds each grid's schedule apart)."""
        if not isinstance(item, Mapping):
            raise SimError(f"System.launch item {k}: expected a dict, got {type(item).__name__}")
        unknown = sorted(set(item) - set(_KEYS))
        if unknown or "device" not in item or "source" not in item:
            raise SimError(f"System.launch item {k}: takes device, source, params and optionally grid, block, "
                           f"cluster, smem, launch, kernel; got keys {sorted(item)}")
        device = self.devices[self.index_of(item["device"], f"System.launch item {k} device")]
        source: str | ir.Module = item["source"]
        module, program, bases = device._entry(source, item.get("kernel"))
        shape: Launch | None = item.get("launch")
        if shape is not None:
            if any(key in item for key in ("grid", "block", "cluster", "smem")):
                raise SimError(f"System.launch item {k}: give launch= or grid/block/cluster/smem, not both")
            grid, block, cluster, smem = shape.grid, shape.block, shape.cluster, shape.smem
        else:
            grid, block = item.get("grid", (1, 1, 1)), item.get("block", (1, 1, 1))
            cluster, smem = item.get("cluster", (1, 1, 1)), item.get("smem", 0)
        launch = launch_of(program, grid, block, cluster, smem)
        place = nth[device.index] = nth.get(device.index, -1) + 1
        own = None if seed is None else grid_seed(seed, device.index, place)
        machine = device._machine(program, bases, item.get("params", ()), launch, check, max_steps, max_seconds,
                                  "default" if schedule is None else schedule, own)
        return NodeLaunch(device.index, machine, module, program)

    def close(self) -> None:
        """Close every device (their memory is released)."""
        for d in self.devices:
            d.close(report_leaks=False)

    def __enter__(self) -> "System":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<jaxptx.sim.System of {len(self.devices)} devices, peer access "
                f"{'on' if self.peer_access else 'off'}, {len(self.multicasts)} multicast objects>")

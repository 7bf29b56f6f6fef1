"""The stand-in CUDA driver over several emulated GPUs: the CUDA handler of
a kernel with peers (``ffi/cuda_peers.cc``), run with no GPU.

:class:`StandInNode` is :class:`~jaxptx.testing.standin.StandInDriver` over
the N devices of one :class:`jaxptx.sim.System`: a context and a stream per
device, a stack of current contexts per thread (as the driver keeps), and
the entry points a call with peers adds:

==============================  ==========================================
driver entry point              stand-in
==============================  ==========================================
``cuDeviceGetCount``            N (or ``visible=``)
``cuCtxGetDevice``              the current context's device index
``cuDeviceCanAccessPeer``       yes, but for the pairs in ``no_peer_access``
``cuCtxEnablePeerAccess``       recorded per (device, peer);
                                ``CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED``
                                when asked twice
``cuMemAlloc``                  the current context's device
``cuMemcpyHtoDAsync``           the device of the destination address
``cuLaunchKernelEx``            a kernel with peers (its last parameter is
                                ``jaxptx_peers``) waits until every rank of
                                the run launched; the last launch runs all
                                of them together in the System, with peer
                                access on only if the handlers enabled it
                                between every pair
``cuMemcpyDtoDAsync``           after the launches queued on its stream's
                                device (stream order), else at once
``cuDeviceGetAttribute``        ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``:
                                1, but for the devices in ``no_multicast``
``cuMulticastCreate``,          a multicast object; once every member is
``cuMulticastAddDevice``        added, a ``System.multicast`` over them
``cuMulticastBindMem``          ``Multicast.bind`` of the memory's address
``cuMemCreate``                 an allocation on its device
``cuMemAddressReserve``         a placeholder allocation on the current
                                context's device: the range's address
``cuMemMap``                    memory: the range's bytes become the
                                memory's (one buffer, two addresses);
                                a multicast object: ``multimem`` accesses
                                in the range go to its ``mc.address``
``cuMemSetAccess``              recorded per range (:attr:`access`)
``cuMulticastGetGranularity``,  8 KiB and 4 KiB
``cuMemGetAllocationGranularity``
==============================  ==========================================

Ranges are mapped whole (the offsets 0, the sizes the range's), and a
plain load or store in a range mapping a multicast object reaches the
placeholder, not the members' memory.

:meth:`StandInNode.run` calls the real handler once per rank, each from a
thread of its own and all at once, as XLA runs each device's thunk.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import _ffi, sim
from ..dsl import PEER_TABLE_PARAM
from .standin import (
    _DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
    _HANDLES,
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
    CudaCall,
    DriverError,
    HandlerError,
    Ran,
    StandInDriver,
    _Function,
    _xla_dtype,
    installed,
)

__all__ = ["StandInNode"]

# How long run() waits for a rank's handler to return: far past any
# $JAXPTX_PEER_TIMEOUT a test sets, so that a handler that hangs fails the
# test rather than the test run.
_JOIN_SECONDS = 600.0
# The stand-in's granularities (cuMulticastGetGranularity,
# cuMemGetAllocationGranularity): unequal, so that a size rounded to one only
# is refused.
MULTICAST_GRANULARITY = 8192
ALLOCATION_GRANULARITY = 4096
# cuda.h enums the multicast entry points take.
_MEM_ALLOCATION_TYPE_PINNED = 1
_MEM_LOCATION_TYPE_DEVICE = 1
_MEM_ACCESS_FLAGS = {1: "r", 3: "rw"}     # CU_MEM_ACCESS_FLAGS_PROT_READ, _READWRITE


@dataclasses.dataclass
class _MulticastHandle:
    """A stand-in multicast object: its size, its members as added, and the
    node's ``sim.Multicast`` once every member is."""

    size: int
    members: int
    devices: list[int]
    sim: Any = None


class _Scratch:
    """The call frame's scratch allocator of one device. Frees are stream
    ordered, as XLA's are: memory freed while a launch on the device is still
    queued is released after that launch ran."""

    def __init__(self, node: "StandInNode", device: sim.Device) -> None:
        self.node, self.device = node, device

    def alloc(self, size: int, alignment: int) -> int:
        address = self.device.alloc(size)
        if alignment <= 0 or address % alignment:
            raise ValueError(f"cannot align an allocation to {alignment} bytes")
        self.node.log.append(("alloc", (address, size)))
        return address

    def free(self, address: int, size: int) -> None:
        self.node.log.append(("free", (address, size)))
        self.node._free(self.device, address)


class StandInNode(StandInDriver):
    """The CUDA driver's entry points on the ``n`` devices of a
    :class:`jaxptx.sim.System`.

    Args:
        n: the number of devices.
        arch: the devices' target (default: each module's own).
        no_peer_access: pairs of device indices that cannot access each
            other's memory (``cuDeviceCanAccessPeer`` says no, both ways).
        visible: what ``cuDeviceGetCount`` answers (default ``n``).
        no_multicast: devices without multicast support
            (``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`` is 0).

    Attributes:
        system: the :class:`jaxptx.sim.System`.
        contexts, streams: each device's context and stream handles.
        peer_access: the (device, peer) pairs whose access the handlers
            enabled (``cuCtxEnablePeerAccess`` from device's context).
        node_launches: the groups of grids run together, as device indices.
        access: mapped range's address -> the (device, "rw" or "r") that
            ``cuMemSetAccess`` let at it.
    """

    def __init__(self, n: int, arch: str | None = None, *,
                 no_peer_access: Iterable[tuple[int, int]] = (), visible: int | None = None,
                 no_multicast: Iterable[int] = ()) -> None:
        self._local = threading.local()
        super().__init__(arch)
        self.device.close()           # the base's lone device: the node's are used instead
        self.system = sim.System(n, arch)
        self.devices = self.system.devices
        self.contexts = [next(_HANDLES) for _ in self.devices]
        self.streams = [next(_HANDLES) for _ in self.devices]
        self.device, self.context, self.stream = self.devices[0], self.contexts[0], self.streams[0]
        self.no_peer_access = {frozenset(p) for p in no_peer_access}
        self.visible = len(self.devices) if visible is None else visible
        self.peer_access: set[tuple[int, int]] = set()
        self.node_launches: list[list[int]] = []
        self._pending: list[dict[str, Any]] = []
        self._deferred: list[Callable[[], None]] = []       # frees and copies waiting for a queued launch
        self._deferred_errors: list[str] = []
        self._busy: dict[int, int] = {}                      # device -> its launches queued or running
        self._expected = len(self.devices)
        self._lock = threading.Lock()
        self.no_multicast = set(no_multicast)
        self.access: dict[int, set[tuple[int, str]]] = {}
        self._multicasts: dict[int, _MulticastHandle] = {}
        self._memory: dict[int, tuple[int, int, int]] = {}          # handle -> (device, address, size)
        self._ranges: dict[int, tuple[int, int, int | None]] = {}   # address -> (device, size, handle mapped)

    # the current context, per thread ---------------------------------------------
    @property
    def _current(self) -> list[int]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @_current.setter
    def _current(self, value: list[int]) -> None:
        self._local.stack = value

    # where things live -------------------------------------------------------------
    def _index_of_context(self, ctx: int) -> int:
        if ctx not in self.contexts:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"unknown context {ctx:#x}")
        return self.contexts.index(ctx)

    def _device_for(self, ctx: int) -> sim.Device:
        return self.devices[self._index_of_context(ctx)]

    def _device_at(self, address: int) -> sim.Device:
        index = int(address) >> 48          # a System's addresses name their device (sim.system)
        if index >= len(self.devices):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{address:#x} is no device's address")
        return self.devices[index]

    def _check_stream(self, stream: int) -> None:
        if stream not in (0, *self.streams):
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown stream {stream:#x}")

    def _check_context(self, ctx: int) -> None:
        self._index_of_context(ctx)

    def stream_get_ctx(self, stream: int) -> int:
        """``cuStreamGetCtx``: the context of a device's stream."""
        if stream not in self.streams:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown stream {stream:#x}")
        return self.contexts[self.streams.index(stream)]

    # the devices -------------------------------------------------------------------
    def device_get_count(self) -> int:
        """``cuDeviceGetCount``."""
        return self.visible

    def ctx_get_device(self) -> int:
        """``cuCtxGetDevice``: the current context's device index."""
        return self._index_of_context(self._current_context("cuCtxGetDevice"))

    def device_can_access_peer(self, device: int, peer: int) -> bool:
        """``cuDeviceCanAccessPeer``: every pair but those in ``no_peer_access``."""
        for d in (device, peer):
            if not 0 <= d < len(self.devices):
                raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"no device {d} (the node has "
                                  f"{len(self.devices)})")
        self.log.append(("device_can_access_peer", (device, peer)))
        return device != peer and frozenset((device, peer)) not in self.no_peer_access

    def ctx_enable_peer_access(self, peer: int, flags: int) -> None:
        """``cuCtxEnablePeerAccess``: the current context's device may access
        ``peer``'s memory from now on."""
        if flags:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuCtxEnablePeerAccess flags must be 0, got {flags}")
        device = self._index_of_context(self._current_context("cuCtxEnablePeerAccess"))
        other = self._index_of_context(peer)
        if other == device or frozenset((device, other)) in self.no_peer_access:
            raise DriverError(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                              f"device {device} cannot access device {other}")
        if (device, other) in self.peer_access:
            raise DriverError(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                              f"device {device} has access to device {other} already")
        self.peer_access.add((device, other))
        self.log.append(("ctx_enable_peer_access", (device, other)))

    def _after_launches(self, device: int, action: Callable[[], None]) -> None:
        """Run ``action`` after the launches queued on ``device``, or now."""
        with self._lock:
            if self._busy.get(device):
                self._deferred.append(action)
                return
        action()

    def _free(self, device: sim.Device, address: int) -> None:
        self._after_launches(self.devices.index(device), lambda: device.free(address))

    def _release(self, items: list[dict[str, Any]]) -> None:
        """The frees and copies that waited for ``items``, which ran (or
        never will). A copy that fails then is reported by :meth:`run_ranks`."""
        with self._lock:
            for i in items:
                self._busy[i["device"]] -= 1
            deferred, self._deferred = self._deferred, []
        for action in deferred:
            try:
                action()
            except DriverError as e:
                self._deferred_errors.append(str(e))

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """``cuMemcpyDtoDAsync``: in stream order, after the launches queued
        on the stream's device."""
        self._check_stream(stream)
        copy = super().memcpy_dtod
        if stream not in self.streams:
            return copy(dst, src, nbytes, stream)
        return self._after_launches(self.streams.index(stream), lambda: copy(dst, src, nbytes, stream))

    # multicast objects and mapped memory (kernels that take multimem_ptr) ------------------
    def device_get_attribute(self, attribute: int, device: int) -> int:
        """``cuDeviceGetAttribute``: ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`` only."""
        self._device_index(device)
        if attribute != _DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"device attribute {attribute}")
        self.log.append(("device_get_attribute", (attribute, device)))
        return int(device not in self.no_multicast)

    def _device_index(self, device: int) -> int:
        if not 0 <= device < len(self.devices):
            raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"no device {device} (the node has "
                              f"{len(self.devices)})")
        return device

    def multicast_get_granularity(self, num_devices: int, size: int, handle_types: int, flags: int,
                                  option: int) -> int:
        """``cuMulticastGetGranularity`` (minimum and recommended alike)."""
        if option not in (0, 1):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"granularity option {option}")
        return MULTICAST_GRANULARITY

    def mem_get_allocation_granularity(self, kind: int, location_type: int, location: int,
                                       option: int) -> int:
        """``cuMemGetAllocationGranularity`` of pinned memory on a device."""
        if kind != _MEM_ALLOCATION_TYPE_PINNED or location_type != _MEM_LOCATION_TYPE_DEVICE \
                or option not in (0, 1):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"allocation type {kind}, location type "
                              f"{location_type}, option {option}: the stand-in has pinned device memory")
        self._device_index(location)
        return ALLOCATION_GRANULARITY

    def multicast_create(self, num_devices: int, size: int, handle_types: int, flags: int) -> int:
        """``cuMulticastCreate``: an object of ``size`` bytes for ``num_devices``."""
        if not 1 <= num_devices <= len(self.devices) or size <= 0 or size % MULTICAST_GRANULARITY \
                or flags:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuMulticastCreate of {size} bytes over "
                              f"{num_devices} devices, flags {flags}: the size must be a multiple of "
                              f"{MULTICAST_GRANULARITY} (the granularity), the flags 0")
        if handle_types:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, "the stand-in's multicast objects are not shareable")
        handle = next(_HANDLES)
        self._multicasts[handle] = _MulticastHandle(size, num_devices, [])
        self.log.append(("multicast_create", (handle, num_devices, size)))
        return handle

    def _multicast(self, handle: int) -> _MulticastHandle:
        if handle not in self._multicasts:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown multicast object {handle:#x}")
        return self._multicasts[handle]

    def multicast_add_device(self, handle: int, device: int) -> None:
        """``cuMulticastAddDevice``: once all are added, the node's object is made."""
        mc = self._multicast(handle)
        self._device_index(device)
        if device in self.no_multicast:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"device {device} has no multicast support")
        if device in mc.devices or len(mc.devices) == mc.members:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"device {device}: the object's members are "
                              f"{mc.devices} of {mc.members}")
        mc.devices.append(device)
        if len(mc.devices) == mc.members:
            mc.sim = self.system.multicast(mc.size, mc.devices)
        self.log.append(("multicast_add_device", (handle, device)))

    def _complete(self, mc: _MulticastHandle, what: str) -> Any:
        if mc.sim is None:     # the driver would wait for ever: no other thread adds them here
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{what} before every member of the multicast "
                              f"object was added ({len(mc.devices)} of {mc.members})")
        return mc.sim

    def multicast_bind_mem(self, handle: int, mc_offset: int, memory: int, mem_offset: int,
                           size: int, flags: int) -> None:
        """``cuMulticastBindMem``: ``Multicast.bind`` of the memory's address
        (whole objects only)."""
        mc = self._multicast(handle)
        if memory not in self._memory:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown memory {memory:#x}")
        device, address, nbytes = self._memory[memory]
        if mc_offset or mem_offset or size != mc.size or nbytes < size or flags:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"a bind of {size} bytes at offsets {mc_offset}, "
                              f"{mem_offset} (flags {flags}): the stand-in binds {mc.size} bytes from "
                              f"offset 0 of both")
        try:
            self._complete(mc, "cuMulticastBindMem").bind(device, address)
        except sim.SimError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
        self.log.append(("multicast_bind_mem", (handle, device, address)))

    def mem_create(self, size: int, kind: int, handle_types: int, location_type: int, location: int,
                   flags: int) -> int:
        """``cuMemCreate``: ``size`` bytes on device ``location``."""
        granule = self.mem_get_allocation_granularity(kind, location_type, location, 0)
        if size <= 0 or size % granule or flags or handle_types:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuMemCreate of {size} bytes (handle types "
                              f"{handle_types}, flags {flags}): a multiple of {granule}, not shareable")
        handle = next(_HANDLES)
        self._memory[handle] = (location, self.devices[location].alloc(size), size)
        self.log.append(("mem_create", (handle, location, size)))
        return handle

    def mem_address_reserve(self, size: int, alignment: int, hint: int, flags: int) -> int:
        """``cuMemAddressReserve``: a placeholder allocation on the current
        context's device (aligned to 2**36, as every emulator allocation)."""
        device = self._index_of_context(self._current_context("cuMemAddressReserve"))
        if size <= 0 or size % ALLOCATION_GRANULARITY or flags or alignment & (alignment - 1):
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuMemAddressReserve of {size} bytes, alignment "
                              f"{alignment}, flags {flags}")
        address = self.devices[device].alloc(size)
        self._ranges[address] = (device, size, None)
        self.log.append(("mem_address_reserve", (address, size, alignment)))
        return address

    def mem_map(self, address: int, size: int, offset: int, handle: int, flags: int) -> None:
        """``cuMemMap`` of memory or a multicast object onto a whole range."""
        if address not in self._ranges or self._ranges[address][2] is not None:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{address:#x} starts no unmapped range")
        device, reserved, _ = self._ranges[address]
        if size != reserved or offset or flags:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"a map of {size} bytes at offset {offset} "
                              f"(flags {flags}): the stand-in maps whole ranges of {reserved} bytes")
        if handle in self._multicasts:
            mc = self._multicasts[handle]
            self._complete(mc, "cuMemMap of a multicast object")
            if mc.size != size:
                raise DriverError(CUDA_ERROR_INVALID_VALUE, f"the object has {mc.size} bytes, the range {size}")
            with self._lock:
                self.system.map_multicast(mc.sim, device, address)
        elif handle in self._memory:
            owner, physical, nbytes = self._memory[handle]
            if owner != device or nbytes != size:
                raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"memory of {nbytes} bytes on device {owner} into "
                                  f"a range of {size} on device {device}: the stand-in maps memory whole, "
                                  f"into a range reserved with its device's context current")
            self.devices[device].alias(address, physical)
        else:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown handle {handle:#x}")
        self._ranges[address] = (device, size, handle)
        self.log.append(("mem_map", (address, handle)))

    def mem_set_access(self, address: int, size: int, access: list[tuple[int, int, int]]) -> None:
        """``cuMemSetAccess`` on a whole mapped range."""
        if address not in self._ranges or self._ranges[address][2] is None or \
                self._ranges[address][1] != size:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{size} bytes at {address:#x} are no mapped range")
        granted = set()
        for location_type, device, flags in access:
            if location_type != _MEM_LOCATION_TYPE_DEVICE or flags not in _MEM_ACCESS_FLAGS:
                raise DriverError(CUDA_ERROR_INVALID_VALUE, f"access ({location_type}, {device}, {flags})")
            granted.add((self._device_index(device), _MEM_ACCESS_FLAGS[flags]))
        self.access.setdefault(address, set()).update(granted)
        self.log.append(("mem_set_access", (address, sorted(granted))))

    # launches: a kernel with peers runs with the other ranks' --------------------------
    def _run_grid(self, f: _Function, params: list[bytes], grid: tuple, block: tuple,
                  cluster: tuple, smem: int) -> None:
        entry = next(fn for fn in f.source.functions if fn.kind == "entry" and fn.name == f.name)
        if not entry.params or entry.params[-1].name != PEER_TABLE_PARAM:
            return super()._run_grid(f, params, grid, block, cluster, smem)
        item = dict(device=self._index_of_context(f.context), source=f.source, kernel=f.name,
                    params=params, grid=grid, block=block, cluster=cluster, smem=smem)
        with self._lock:
            self._pending.append(item)
            self._busy[item["device"]] = self._busy.get(item["device"], 0) + 1
            if len(self._pending) < self._expected:
                return None            # as on a GPU: the launch is queued, the call returns
            items, self._pending = self._pending, []
        devices = [i["device"] for i in items]
        self.node_launches.append(devices)
        try:
            # The devices whose handlers enabled access between them run together
            # (each group of a mesh's axis is one); with access as the handlers
            # left it: a kernel reaching a peer without it faults, as on a GPU.
            for group in self._groups(devices):
                self.system.peer_access = all((a, b) in self.peer_access
                                              for a, b in itertools.permutations(group, 2))
                self.system.launch([i for i in items if i["device"] in group])
        finally:
            self._release(items)
        return None

    def _groups(self, devices: list[int]) -> list[list[int]]:
        """``devices`` split into the sets linked by enabled peer access."""
        groups: list[set[int]] = []
        for d in devices:
            linked = [g for g in groups if any((d, e) in self.peer_access or (e, d) in self.peer_access for e in g)]
            merged = {d}.union(*linked)
            groups = [g for g in groups if g not in linked] + [merged]
        return [sorted(g) for g in groups]

    # running a call on every rank ------------------------------------------------------
    def run(self, call: CudaCall, *arrays: np.ndarray, **kwargs: Any) -> Ran:
        """A node runs calls of kernels with peers: see :meth:`run_ranks`."""
        raise TypeError("StandInNode.run_ranks(call, shards) runs a call on every rank; "
                        "StandInDriver().run(call, *arrays) runs a call on one device")

    def run_ranks(self, call: CudaCall, shards: Sequence[Sequence[np.ndarray]], *,
                  ranks: Sequence[int] | None = None,
                  devices: Mapping[int, int] | None = None) -> list[Ran | HandlerError]:
        """Call the CUDA handler once per rank, concurrently (a thread per
        rank), as XLA runs each device's part of a ``shard_map``.

        Args:
            call: a call of a kernel with peers (its last input is the rank).
            shards: ``shards[r]`` is rank ``r``'s inputs but the rank.
            ranks: the ranks that call (default: all; fewer make a call
                whose other ranks never arrive).
            devices: rank -> device index (default: rank r on device r).

        Returns:
            Each calling rank's outputs and inputs afterwards, or the
            :class:`HandlerError` its handler returned.
        """
        ranks = list(range(len(shards)) if ranks is None else ranks)
        devices = {r: r for r in ranks} if devices is None else dict(devices)
        *tensors, (rank_shape, rank_dtype) = call.inputs
        frames = {}
        for r in ranks:
            if len(shards[r]) != len(tensors):
                raise ValueError(f"rank {r}: the call takes {len(tensors)} inputs besides the "
                                 f"rank, got {len(shards[r])}")
            dev = self.devices[devices[r]]
            arrays = [np.ascontiguousarray(a) for a in shards[r]] + \
                [np.full(rank_shape, r, rank_dtype)]
            inputs = [dev.to_device(a) for a in arrays]
            aliased = dict(call.aliases)
            outputs = [inputs[aliased[j]] if j in aliased else
                       dev.alloc(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize)
                       for j, (s, d) in enumerate(call.outputs)]
            frames[r] = (dev, arrays, inputs, outputs)
        results: dict[int, Any] = {}
        self._expected = len(ranks)

        def one(r: int) -> None:
            dev, arrays, inputs, outputs = frames[r]
            frame_in = [(_xla_dtype(a.dtype), p, a.shape) for a, p in zip(arrays, inputs)]
            frame_out = [(_xla_dtype(d), p, s) for (s, d), p in zip(call.outputs, outputs)]
            results[r] = _ffi.call_cuda_handler(frame_in, frame_out, list(call.attributes),
                                                self.streams[devices[r]], _Scratch(self, dev), False)

        with installed(self):
            threads = [threading.Thread(target=one, args=(r,), name=f"rank {r}") for r in ranks]
            for t in threads:
                t.start()
            for t in threads:
                t.join(_JOIN_SECONDS)
            if any(t.is_alive() for t in threads):
                raise TimeoutError(f"a rank's CUDA handler did not return in {_JOIN_SECONDS} s")
        errors, self._deferred_errors = self._deferred_errors, []
        if errors:
            raise RuntimeError(f"a copy ordered after the launches failed: {errors[0]}")
        if self._pending:
            devices_left = sorted(i["device"] for i in self._pending)
            stuck, self._pending = self._pending, []
            self._release(stuck)
            raise RuntimeError(f"the launches on devices {devices_left} never ran: their peers never "
                               f"launched (on GPUs these kernels would wait for ever)")
        out: list[Ran | HandlerError] = []
        for r in ranks:
            code, message = results[r]
            if code:
                out.append(HandlerError(code, message))
                continue
            dev, arrays, inputs, outputs = frames[r]
            out.append(Ran([dev.from_device(p, np.empty(s, d)) for (s, d), p in zip(call.outputs, outputs)],
                           [dev.from_device(p, a) for a, p in zip(arrays, inputs)]))
        return out

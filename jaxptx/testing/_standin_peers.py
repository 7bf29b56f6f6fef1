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
==============================  ==========================================

:meth:`StandInNode.run` calls the real handler once per rank, each from a
thread of its own and all at once, as XLA runs each device's thunk.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import _ffi, sim
from ..dsl import PEER_TABLE_PARAM
from .standin import (
    _HANDLES,
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
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

    Attributes:
        system: the :class:`jaxptx.sim.System`.
        contexts, streams: each device's context and stream handles.
        peer_access: the (device, peer) pairs whose access the handlers
            enabled (``cuCtxEnablePeerAccess`` from device's context).
        node_launches: the groups of grids run together, as device indices.
    """

    def __init__(self, n: int, arch: str | None = None, *,
                 no_peer_access: Iterable[tuple[int, int]] = (), visible: int | None = None) -> None:
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
        self._frees: list[tuple[sim.Device, int]] = []     # waiting for a queued launch
        self._busy: dict[int, int] = {}                      # device -> its launches queued or running
        self._expected = len(self.devices)
        self._lock = threading.Lock()

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

    def _free(self, device: sim.Device, address: int) -> None:
        with self._lock:
            if self._busy.get(self.devices.index(device)):
                self._frees.append((device, address))
                return
        device.free(address)

    def _release(self, items: list[dict[str, Any]]) -> None:
        """The frees that waited for ``items``, which ran (or never will)."""
        with self._lock:
            for i in items:
                self._busy[i["device"]] -= 1
            frees, self._frees = self._frees, []
        for device, address in frees:
            device.free(address)

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
        # Peer access as the handlers left it: a kernel reaching a peer
        # without it faults, as on a GPU.
        self.system.peer_access = all((a, b) in self.peer_access
                                      for a, b in itertools.permutations(devices, 2))
        try:
            self.system.launch(items)
        finally:
            self._release(items)
        return None

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

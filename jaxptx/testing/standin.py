"""A stand-in CUDA driver on the emulator: the CUDA launch handler, run with no GPU.

The shim's CUDA handler (``ffi/cuda_launch.cc``, ``jaxptx_launch_v2``) reaches
the driver only through a table of entry points, which
``jaxptx._ffi.set_cuda_driver`` swaps for a table given as a capsule. This
layer's own extension, ``jaxptx.testing._standin`` (``ffi/standin_driver.cc``,
never part of ``jaxptx._ffi``), makes one that forwards each call to a
:class:`StandInDriver` on a :class:`jaxptx.sim.Device`, and
``jaxptx._ffi.call_cuda_handler`` calls the handler with buffers at that
device's addresses. So the handler's own C++ runs here: attribute decoding,
the id check, reading the kernel's parameters from the driver and checking
the call against them, packing, tensor maps, launch attributes, private
copies of inputs, and every error return.

==============================  ==========================================
driver entry point              stand-in
==============================  ==========================================
``cuModuleLoadDataEx``          ``Device.load`` (PTX only; the reason for a
                                refusal goes to the JIT error log)
``cuModuleGetFunction``         the entry, its parameters (``param_info``)
``cuFuncGetParamInfo``          each parameter's offset and size, from the
                                module the device loaded
``cuFuncSetAttribute``          the dynamic shared-memory opt-in, checked
``cuLaunchKernelEx``            ``Device.launch`` with each parameter's bytes
``cuMemcpyDtoDAsync``           ``Device.copy``
``cuMemcpyDtoH``                ``Device.read`` (captures only)
``cuStreamSynchronize``         nothing to wait for (captures only)
``cuTensorMapEncodeTiled``      :func:`jaxptx.sim.tensor_map`
``cuMemAlloc``,                 ``Device.alloc``, ``Device.write`` (the peer
``cuMemcpyHtoDAsync``           tables of kernels with peers)
``cuDeviceGetCount``,           one device, which has no peers
``cuCtxGetDevice``, peer access
``cuDeviceGetAttribute``        no multicast support (a lone device)
contexts and streams            one context, one stream, checked
==============================  ==========================================

:class:`jaxptx.testing._standin_peers.StandInNode` is the same
driver over the N devices of a :class:`jaxptx.sim.System`, on which the
handlers of a kernel with peers run concurrently, one thread per rank.

Example (``x`` a numpy array, ``f`` a jitted function of one kernel call)::

    call, = cuda_calls(jax.jit(f).trace(x).lower(lowering_platforms=("cuda",)))
    y, = StandInDriver().run(call, x).outputs
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from .. import _ffi, capture, isa, sim
from ..launch import MAX_SMEM_PER_BLOCK, MAX_STATIC_SMEM
from ..runtime import XLA_DTYPES as XLA_DTYPES
from ..runtime import CudaCall as CudaCall
from ..runtime import cuda_calls as cuda_calls
from . import _standin
from ._tensor_maps import check_codes, encode_tiled

__all__ = ["StandInDriver", "DriverError", "HandlerError", "CudaCall", "Ran", "cuda_calls",
           "installed", "XLA_DTYPES", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_INVALID_CONTEXT",
           "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_NOT_FOUND",
           "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_INVALID_DEVICE",
           "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"]

# CUresult codes (cuda.h).
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_NOT_SUPPORTED = 801

# cuda.h enums the stand-in reads.
_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# XLA_FFI_Error_Code -> name.
_FFI_CODES = {1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
              8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION", 12: "UNIMPLEMENTED",
              13: "INTERNAL"}

# Handles (contexts, streams, modules, functions) are never reused in a
# process (the handler caches loaded functions by context), and lie outside
# x86-64's canonical addresses, so none is ever a real driver's pointer.
_HANDLES = itertools.count(0x7EA1 << 48, 0x100)
# One stand-in is installed at a time.
_INSTALL = threading.Lock()


class DriverError(Exception):
    """A stand-in driver call failed with CUresult ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class HandlerError(Exception):
    """The CUDA handler returned an FFI error: ``code`` (an
    ``XLA_FFI_Error_Code``) and its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{_FFI_CODES.get(code, code)}: {message}")
        self.code, self.message = code, message


@dataclasses.dataclass(frozen=True)
class _Function:
    module: int
    context: int
    name: str
    source: Any            # the parsed module
    params: tuple[tuple[int, int], ...]   # (offset, size) of each parameter
    max_smem: int          # the opt-in limit of its target


class Ran(NamedTuple):
    """A handler call's result: the outputs, and the inputs as they are on
    the device afterwards (a kernel must not have changed them)."""

    outputs: list[np.ndarray]
    inputs: list[np.ndarray]


class StandInDriver:
    """The CUDA driver's entry points the launch handler uses, on an
    emulated device. Everything it is asked is logged in :attr:`log` as
    ``(entry point, details)``.

    Args:
        arch: the device's target (``sim.Device``'s ``arch``); default:
            each module's own.

    Attributes:
        device: the :class:`jaxptx.sim.Device` holding memory and modules.
        context, stream: the handles of its one context and stream.
    """

    def __init__(self, arch: str | None = None) -> None:
        self.device = sim.Device(arch)
        self.context = next(_HANDLES)
        self.stream = next(_HANDLES)
        self.log: list[tuple[str, Any]] = []
        self._current: list[int] = []
        self._modules: dict[int, tuple[Any, int]] = {}
        self._functions: dict[int, _Function] = {}
        self._smem_opt_in: dict[int, int] = {}

    # running a call ------------------------------------------------------------
    def run(self, call: CudaCall, *arrays: np.ndarray, scratch: bool = True,
            retired: bool = False) -> Ran:
        """Put ``arrays`` (the call's inputs) on the device, call the CUDA
        handler with them and fresh outputs (an in-place output shares its
        input's buffer, as under XLA), and read the results back.

        Args:
            scratch: give the frame scratch memory (else every allocation
                fails, as when XLA has none left).
            retired: call the retired ``jaxptx_launch_v1`` handler instead
                (which refuses every call).

        Raises:
            HandlerError: the handler returned an error.
        """
        if len(arrays) != len(call.inputs):
            raise ValueError(f"the call takes {len(call.inputs)} inputs, got {len(arrays)}")
        inputs = [self.device.to_device(np.ascontiguousarray(a)) for a in arrays]
        aliased = dict(call.aliases)
        outputs = [inputs[aliased[j]] if j in aliased else
                   self.device.alloc(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize)
                   for j, (s, d) in enumerate(call.outputs)]
        frame_in = [(_xla_dtype(a.dtype), p, a.shape) for a, p in zip(arrays, inputs)]
        frame_out = [(_xla_dtype(d), p, s) for (s, d), p in zip(call.outputs, outputs)]
        with installed(self):
            code, message = _ffi.call_cuda_handler(frame_in, frame_out, list(call.attributes),
                                                   self.stream, self if scratch else None, retired)
        if code:
            raise HandlerError(code, message)
        read = self.device.from_device
        return Ran([read(p, np.empty(s, d)) for (s, d), p in zip(call.outputs, outputs)],
                   [read(p, a) for a, p in zip(arrays, inputs)])

    # where things live (StandInNode has several devices) ------------------------
    def _device_for(self, ctx: int) -> sim.Device:
        """The device of context ``ctx``."""
        return self.device

    def _device_at(self, address: int) -> sim.Device:
        """The device whose memory holds ``address``."""
        return self.device

    def _check_stream(self, stream: int) -> None:
        if stream not in (0, self.stream):
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown stream {stream:#x}")

    def _check_context(self, ctx: int) -> None:
        if ctx != self.context:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"unknown context {ctx:#x}")

    def calls(self, entry_point: str) -> list[Any]:
        """The details of every logged call of ``entry_point``."""
        return [details for name, details in self.log if name == entry_point]

    # scratch memory (the call frame's allocator) -------------------------------
    def alloc(self, size: int, alignment: int) -> int:
        """``XLA_FFI_DeviceMemory_Allocate``: ``size`` bytes on the device."""
        address = self.device.alloc(size)
        if alignment <= 0 or address % alignment:
            raise ValueError(f"cannot align an allocation to {alignment} bytes")
        self.log.append(("alloc", (address, size)))
        return address

    def free(self, address: int, size: int) -> None:
        """``XLA_FFI_DeviceMemory_Free``."""
        self.log.append(("free", (address, size)))
        self.device.free(address)

    # driver entry points (called by ffi/standin_driver.cc) -----------------------
    def init(self, flags: int) -> None:
        """``cuInit``."""
        if flags:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuInit flags must be 0, got {flags}")

    def stream_get_ctx(self, stream: int) -> int:
        """``cuStreamGetCtx``: the context of the device's stream."""
        if stream == 0:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown stream {stream:#x}")
        self._check_stream(stream)
        return self.context

    def ctx_get_current(self) -> int:
        """``cuCtxGetCurrent``: 0 when none is current."""
        return self._current[-1] if self._current else 0

    def ctx_push(self, ctx: int) -> None:
        """``cuCtxPushCurrent``."""
        self._check_context(ctx)
        self._current.append(ctx)
        self.log.append(("ctx_push", ctx))

    def ctx_pop(self) -> int:
        """``cuCtxPopCurrent``."""
        if not self._current:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, "no context is current")
        self.log.append(("ctx_pop", self._current[-1]))
        return self._current.pop()

    def _current_context(self, what: str) -> int:
        if not self._current:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"{what} with no current context")
        return self._current[-1]

    def module_load(self, image: bytes) -> int:
        """``cuModuleLoadDataEx``: parse and check PTX as the JIT would."""
        ctx = self._current_context("module load")
        try:
            module = self._device_for(ctx).load(image.decode())
        except Exception as e:  # noqa: BLE001 - any refusal is the JIT's
            raise DriverError(CUDA_ERROR_INVALID_PTX, f"{type(e).__name__}: {e}") from None
        handle = next(_HANDLES)
        self._modules[handle] = (module, ctx)
        self.log.append(("module_load", handle))
        return handle

    def module_get_function(self, module: int, name: str) -> int:
        """``cuModuleGetFunction``."""
        if module not in self._modules:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown module {module:#x}")
        source, ctx = self._modules[module]
        if name not in [f.name for f in source.functions if f.kind == "entry"]:
            raise DriverError(CUDA_ERROR_NOT_FOUND, f"the module has no entry {name!r}")
        try:
            params = tuple((p.offset, p.size) for p in self._device_for(ctx).param_info(source, name))
        except Exception as e:  # noqa: BLE001 - the JIT would refuse it
            raise DriverError(CUDA_ERROR_INVALID_PTX, f"{type(e).__name__}: {e}") from None
        target = (source.target or ("",))[0]
        sm = isa.parse_target(target).sm if target else 0
        handle = next(_HANDLES)
        self._functions[handle] = _Function(module, ctx, name, source, params,
                                            MAX_SMEM_PER_BLOCK.get(sm, MAX_STATIC_SMEM))
        self._smem_opt_in[handle] = MAX_STATIC_SMEM
        self.log.append(("module_get_function", name))
        return handle

    def _function(self, fn: int) -> _Function:
        if fn not in self._functions:
            raise DriverError(CUDA_ERROR_INVALID_HANDLE, f"unknown function {fn:#x}")
        return self._functions[fn]

    def func_set_attribute(self, fn: int, attribute: int, value: int) -> None:
        """``cuFuncSetAttribute``: the dynamic shared-memory opt-in only."""
        f = self._function(fn)
        if attribute != _FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"function attribute {attribute}")
        if not 0 <= value <= f.max_smem:
            raise DriverError(CUDA_ERROR_INVALID_VALUE,
                              f"{f.name}: {value} bytes of dynamic shared memory exceed the "
                              f"target's {f.max_smem}")
        self._smem_opt_in[fn] = value
        self.log.append(("func_set_attribute", (f.name, attribute, value)))

    def func_get_param_info(self, fn: int, index: int) -> tuple[int, int]:
        """``cuFuncGetParamInfo``: ``(offset, size)`` in bytes of parameter
        ``index`` of ``fn``, as the device laid out the entry's ``.param`` s.

        Raises:
            DriverError: ``CUDA_ERROR_INVALID_VALUE`` past the last parameter
                (how a caller finds the count), or an unknown ``fn``.
        """
        f = self._function(fn)
        self.log.append(("func_get_param_info", (f.name, index)))
        if not 0 <= index < len(f.params):
            raise DriverError(CUDA_ERROR_INVALID_VALUE,
                              f"{f.name} has {len(f.params)} parameters, no parameter {index}")
        return f.params[index]

    def param_sizes(self, fn: int) -> list[int]:
        """The byte size of each parameter of ``fn``: what the stand-in's
        cuLaunchKernelEx copies through each parameter pointer."""
        return [size for _, size in self._function(fn).params]

    def launch(self, fn: int, grid: tuple, block: tuple, smem: int, stream: int,
               attributes: list, params: list[bytes]) -> None:
        """``cuLaunchKernelEx``, with each parameter's bytes."""
        f = self._function(fn)
        if self._current_context("launch") != f.context:
            raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"{f.name} was loaded in another context")
        self._check_stream(stream)
        cluster = (1, 1, 1)
        for attr_id, value in attributes:
            if attr_id != _LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"launch attribute {attr_id}")
            cluster = tuple(value)
        if smem > self._smem_opt_in[fn]:
            raise DriverError(CUDA_ERROR_INVALID_VALUE,
                              f"{f.name}: {smem} bytes of dynamic shared memory, but the function "
                              f"allows {self._smem_opt_in[fn]} (cuFuncSetAttribute)")
        self.log.append(("launch", dict(name=f.name, grid=tuple(grid), block=tuple(block),
                                        cluster=cluster, smem=smem, params=list(params))))
        try:
            with capture.suppressed():          # the handler captures its launches itself
                self._run_grid(f, params, tuple(grid), tuple(block), cluster, smem)
        except sim.SimLaunchError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"{type(e).__name__}: {e}") from None
        except sim.SimError as e:
            raise DriverError(CUDA_ERROR_LAUNCH_FAILED, f"{type(e).__name__}: {e}") from None

    def _run_grid(self, f: _Function, params: list[bytes], grid: tuple, block: tuple,
                  cluster: tuple, smem: int) -> None:
        """Run a launch the driver accepted (on the device of its context)."""
        self._device_for(f.context).launch(f.source, params, grid=grid, block=block,
                                           cluster=cluster, smem=smem, kernel=f.name)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """``cuMemcpyDtoDAsync`` (synchronous here)."""
        self._check_stream(stream)
        try:
            self._device_at(dst).copy(dst, src, nbytes)
        except sim.SimError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
        self.log.append(("memcpy_dtod", (dst, src, nbytes)))

    def stream_synchronize(self, stream: int) -> None:
        """``cuStreamSynchronize`` (every call is synchronous here)."""
        self._check_stream(stream)
        self.log.append(("stream_synchronize", stream))

    def memcpy_dtoh(self, src: int, nbytes: int) -> bytes:
        """``cuMemcpyDtoH``: ``nbytes`` of device memory at ``src``."""
        try:
            data = self._device_at(src).read(src, nbytes)
        except sim.SimError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
        self.log.append(("memcpy_dtoh", (src, nbytes)))
        return data

    def memcpy_htod(self, dst: int, data: bytes, stream: int) -> None:
        """``cuMemcpyHtoDAsync`` (synchronous here): ``data`` to ``dst``."""
        self._check_stream(stream)
        try:
            self._device_at(dst).write(dst, data)
        except sim.SimError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
        self.log.append(("memcpy_htod", (dst, bytes(data))))

    def mem_alloc(self, nbytes: int) -> int:
        """``cuMemAlloc``: ``nbytes`` on the current context's device."""
        ctx = self._current_context("cuMemAlloc")
        if nbytes <= 0:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, f"cuMemAlloc of {nbytes} bytes")
        address = self._device_for(ctx).alloc(nbytes)
        self.log.append(("mem_alloc", (address, nbytes)))
        return address

    # the devices (kernels with peers; StandInNode has several) ----------------------
    def device_get_count(self) -> int:
        """``cuDeviceGetCount``: one device."""
        return 1

    def ctx_get_device(self) -> int:
        """``cuCtxGetDevice``: the current context's device ordinal."""
        self._current_context("cuCtxGetDevice")
        return 0

    def device_can_access_peer(self, device: int, peer: int) -> bool:
        """``cuDeviceCanAccessPeer``: one device has no peer."""
        raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"devices {device} and {peer}: the stand-in "
                          f"has device 0 only")

    def ctx_enable_peer_access(self, peer: int, flags: int) -> None:
        """``cuCtxEnablePeerAccess``: one context has no peer."""
        raise DriverError(CUDA_ERROR_INVALID_CONTEXT, f"context {peer:#x}: the stand-in has one "
                          f"context only")

    def device_get_attribute(self, attribute: int, device: int) -> int:
        """``cuDeviceGetAttribute``: ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``
        only, 0 (a lone device has no multicast objects)."""
        if device != 0:
            raise DriverError(CUDA_ERROR_INVALID_DEVICE, f"device {device}: the stand-in has device 0 only")
        if attribute != _DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
            raise DriverError(CUDA_ERROR_NOT_SUPPORTED, f"device attribute {attribute}")
        self.log.append(("device_get_attribute", (attribute, device)))
        return 0

    def tensor_map_encode_tiled(self, dtype: int, rank: int, address: int, dims: list[int],
                                strides: list[int], box: list[int], element_strides: list[int],
                                interleave: int, swizzle: int, l2_promotion: int,
                                oob_fill: int) -> bytes:
        """``cuTensorMapEncodeTiled``: the driver's enums and innermost-first
        arrays, encoded by :func:`jaxptx.sim.tensor_map`."""
        try:
            check_codes(dtype, interleave, swizzle, l2_promotion, oob_fill)
        except ValueError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
        details = dict(dtype=dtype, rank=rank, address=address, dims=tuple(dims),
                       strides=tuple(strides), box=tuple(box), swizzle=swizzle)
        self.log.append(("tensor_map_encode_tiled", details))
        try:
            return encode_tiled(dtype, address, dims, strides, box, element_strides, interleave,
                                swizzle, oob_fill)
        except ValueError as e:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, str(e)) from None


@contextlib.contextmanager
def installed(driver: StandInDriver) -> Iterator[StandInDriver]:
    """Make ``driver`` the CUDA handler's driver for the ``with`` block (one
    stand-in at a time; libcuda.so.1 again afterwards): its table from
    ``jaxptx.testing._standin``, swapped in with ``jaxptx._ffi.set_cuda_driver``.

    Example::

        with installed(StandInDriver()) as driver:
            jaxptx._ffi.call_cuda_handler(...)   # the handler asks `driver`
    """
    with _INSTALL:
        _standin.install(driver)
        _ffi.set_cuda_driver(_standin.driver_table())
        try:
            yield driver
        finally:
            _ffi.set_cuda_driver(None)
            _standin.uninstall()


def _xla_dtype(dtype: Any) -> int:
    name = np.dtype(dtype).name
    if name not in XLA_DTYPES:
        raise ValueError(f"no XLA_FFI_DataType for {name}")
    return XLA_DTYPES[name]

"""``jaxptx.sim.Device``: the emulator as a device with memory, driven the
way the CUDA driver API drives a GPU.

==============================  ======================================
``Device``                      ``cuCtxCreate`` (``arch=``: the target)
``alloc(nbytes)``               ``cuMemAlloc`` (zero-filled here)
``free(address)``               ``cuMemFree``
``write(address, data)``        ``cuMemcpyHtoD``
``read(address, nbytes)``       ``cuMemcpyDtoH``
``copy(dst, src, nbytes)``      ``cuMemcpyDtoD``
``memset(address, byte, n)``    ``cuMemsetD8``
``load(ptx)``                   ``cuModuleLoadData`` (checked, see below)
``global_address(ptx, name)``   ``cuModuleGetGlobal``
``param_info(ptx, kernel)``     ``cuFuncGetParamInfo``
``launch(ptx, params, ...)``    ``cuLaunchKernelEx``
==============================  ======================================

plus ``to_device(array)`` (alloc + write) and ``from_device(address,
like=array)`` (read into a new array). Memory persists between launches: one
kernel's output feeds the next. Device addresses are ints; allocation ``k``
starts at ``(k + 1) << 36`` (:mod:`.memory.spaces`), so any address inside
an allocation may be passed to a kernel, packed into a struct parameter or
put in a tensor map (:func:`jaxptx.sim.tensor_map`).

Never silently stale: a freed allocation's addresses are not handed out
again, so a pointer kept after ``free`` faults in a kernel (a use after free)
and is refused by ``read``/``write``, until the device has made
``_MAX_ALLOCATIONS`` (1791) allocations: the address space holds no more, and
from then on the slot freed longest ago is reused. ``leaks()`` lists the
live allocations; ``close(report_leaks=True)`` (or ``with
Device(report_leaks=True) as dev:``) raises if any remain.

Never silently wrong: before a kernel first runs, its module is checked
against the target as :func:`jaxptx.check` checks it, and every instruction
the emulator cannot run is listed (:mod:`.precheck`); either refuses the
launch with each offending PTX line. Parsing and checks happen once per
module (PTX text is cached by its text, a module by its identity).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import capture, ir, isa
from ..launch import validate_launch
from ..errors import LaunchError, PtxError, TraceError
from ..parse import parse
from ..types import TYPES
from .core.host import tune_allocator
from .core.machine import Machine
from .core.progress import max_seconds_option
from .core.program import Program, prepare
from .errors import SimError, SimFault, SimLaunchError
from .faults import located
from .memory.spaces import GLOBAL_SHIFT, SHARED_WINDOW, Memory
from .numerics.values import to_bits
from .params import pack_params
from . import capturing
from .checking import check_mode, valid_mode
from .fidelity import attach as track_fidelity
from .precheck import PrecheckError, module_problems, program_problems
from .semantics import SEMANTICS

__all__ = ["Device", "ParamInfo"]

_OFFSET_MASK = (1 << GLOBAL_SHIFT) - 1
_MAX_ALLOCATIONS = (SHARED_WINDOW >> GLOBAL_SHIFT) - 1      # addresses stay below the shared window
_CACHE_SIZE = 32
# While a jaxptx.profile.profiling() block is open, in any thread (XLA runs
# CPU custom calls on threads of its own), PROFILING[0] is the function the
# profile layer registers to take each launch's Profile and its module;
# None otherwise, and a launch pays this one lookup.
PROFILING: list[Any] = [None]


class ParamInfo(NamedTuple):
    """One ``.param`` of a kernel: its name, PTX type, byte offset in the
    parameter space and size in bytes (what ``launch`` wants for it)."""

    name: str
    type: str
    offset: int
    size: int


def _padded(nbytes: int) -> np.ndarray:
    return np.zeros(max(16, -(-nbytes // 16) * 16), dtype=np.uint8)


class Device:
    """An emulated GPU: memory that persists, and kernel launches on it.

    Args:
        arch: the target every module is checked and run for (``"sm_90a"``);
            default: each module's own ``.target``.

    Example:
        >>> import numpy as np
        >>> from jaxptx import sim
        >>> ptx = '''.version 8.5
        ... .target sm_90a
        ... .address_size 64
        ... .visible .entry scale(.param .u64 x, .param .f32 k)
        ... {
        ...     .reg .b32 %r<3>; .reg .b64 %rd<4>; .reg .f32 %f<3>;
        ...     ld.param.u64 %rd1, [x];
        ...     ld.param.f32 %f1, [k];
        ...     mov.u32 %r1, %tid.x;
        ...     mul.wide.u32 %rd2, %r1, 4;
        ...     add.u64 %rd3, %rd1, %rd2;
        ...     ld.global.f32 %f2, [%rd3];
        ...     mul.f32 %f2, %f2, %f1;
        ...     st.global.f32 [%rd3], %f2;
        ...     ret;
        ... }'''
        >>> dev = sim.Device()
        >>> x = dev.to_device(np.arange(4, dtype=np.float32))
        >>> dev.launch(ptx, [x, 2.0], block=4)
        >>> dev.launch(ptx, [x, 10.0], block=4)       # memory persists
        >>> dev.from_device(x, like=np.zeros(4, np.float32))
        array([ 0., 20., 40., 60.], dtype=float32)
    """

    def __init__(self, arch: str | None = None, *, report_leaks: bool = False) -> None:
        if arch is not None:
            try:
                isa.parse_target(arch)
            except PtxError as e:
                raise SimError(f"Device: {e}") from None
        self.arch = arch
        self._buffers: list[np.ndarray] = []
        self._sizes: list[int] = []
        self._owners: list[str | None] = []       # "alloc", "module" or None (freed)
        self._free_slots: collections.deque[int] = collections.deque()     # freed, oldest first
        self._modules: dict[int, tuple[ir.Module, dict[str, int]]] = {}
        self._stored: dict[int, np.ndarray] | None = None      # allocation -> bytes plain stores wrote
        self._updated: dict[int, np.ndarray] = {}               # ... and read-modify-writes (atomics)
        self._report_leaks = bool(report_leaks)
        self._closed = False

    # memory --------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of zero-filled device memory (``cuMemAlloc``).

        Returns:
            The device address of the first byte (16-byte aligned).

        Addresses are not reused: a freed allocation's range stays unused,
        so that a stale pointer faults, until the device has made 1791
        allocations (the ranges below the shared window); then the range
        freed longest ago is handed out again.

        Raises:
            SimError: ``nbytes`` is not an int in ``0 .. 2**36``, or the
                device has no address range left (1791 live allocations),
                or it is closed.
        """
        if not _is_int(nbytes) or not 0 <= int(nbytes) <= 1 << GLOBAL_SHIFT:
            raise SimError(f"alloc: nbytes must be an int in 0..2**{GLOBAL_SHIFT}, got {nbytes!r}")
        return self._allocate(int(nbytes), "alloc")

    def _allocate(self, nbytes: int, owner: str) -> int:
        self._check_open("alloc")
        k = len(self._buffers)
        if k < _MAX_ALLOCATIONS:          # a fresh range: freed ones stay unused while any is left
            self._buffers.append(_padded(nbytes))
            self._sizes.append(nbytes)
            self._owners.append(owner)
        elif self._free_slots:
            k = self._free_slots.popleft()
            self._buffers[k], self._sizes[k], self._owners[k] = _padded(nbytes), nbytes, owner
        else:
            raise SimError(f"alloc: the device has {k} live allocations, the most it can address")
        return (k + 1) << GLOBAL_SHIFT

    def free(self, address: int) -> None:
        """Free the allocation that starts at ``address`` (``cuMemFree``).

        Raises:
            SimError: ``address`` is not the start of a live allocation made
                by :meth:`alloc` or :meth:`to_device`.
        """
        k, offset = self._locate(address, 0, "free")
        if offset:
            base = (k + 1) << GLOBAL_SHIFT
            raise SimError(f"free: {int(address):#x} is inside the allocation at {base:#x}, not its start")
        if self._owners[k] != "alloc":
            raise SimError(f"free: {int(address):#x} holds a module's global variables; it is not freed "
                           "by free()")
        self._buffers[k], self._sizes[k], self._owners[k] = _padded(0), 0, None
        self._free_slots.append(k)
        if self._stored is not None:
            self._stored.pop(k, None)
        self._updated.pop(k, None)

    def _locate(self, address: Any, nbytes: int, what: str) -> tuple[int, int]:
        """``(allocation index, offset)`` of ``nbytes`` at ``address``."""
        if not _is_int(address):
            raise SimError(f"{what}: expected a device address (an int), got {type(address).__name__} "
                           f"{address!r:.60}")
        self._check_open(what)
        address = int(address)
        k, offset = (address >> GLOBAL_SHIFT) - 1, address & _OFFSET_MASK
        if address >= 0 and 0 <= k < len(self._owners) and self._owners[k] is None:
            raise SimError(f"{what}: {address:#x} is in the allocation at {(k + 1) << GLOBAL_SHIFT:#x}, "
                           "which was freed (a use after free)")
        if address < 0 or not 0 <= k < len(self._owners):
            raise SimError(f"{what}: {address:#x} is not an address on this device (it is in no live "
                           "allocation)")
        if offset + nbytes > self._sizes[k]:
            base = (k + 1) << GLOBAL_SHIFT
            raise SimError(f"{what}: {nbytes} bytes at {address:#x} go past the end of the allocation at "
                           f"{base:#x} ({self._sizes[k]} bytes; the access starts at offset {offset})")
        return k, offset

    def _bytes(self, address: Any, nbytes: int, what: str) -> np.ndarray:
        """A writable uint8 view of ``nbytes`` of device memory."""
        k, offset = self._locate(address, nbytes, what)
        return self._buffers[k][offset:offset + nbytes]

    def write(self, address: int, data: Any) -> None:
        """Copy host bytes (``bytes``-like or a numpy array's contents) to
        ``address`` (``cuMemcpyHtoD``).

        Raises:
            SimError: the bytes do not fit in the allocation at ``address``.
        """
        raw = _host_bytes(data, "write")
        self._bytes(address, len(raw), "write")[:] = raw

    def read(self, address: int, nbytes: int) -> bytes:
        """``nbytes`` of device memory at ``address`` (``cuMemcpyDtoH``).

        Raises:
            SimError: the range is not inside one allocation.
        """
        if not _is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"read: nbytes must be an int >= 0, got {nbytes!r}")
        return self._bytes(address, int(nbytes), "read").tobytes()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from device address ``src`` to ``dst`` (``cuMemcpyDtoD``)."""
        if not _is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"copy: nbytes must be an int >= 0, got {nbytes!r}")
        data = self._bytes(src, int(nbytes), "copy source").copy()
        self._bytes(dst, int(nbytes), "copy destination")[:] = data

    def memset(self, address: int, value: int, nbytes: int) -> None:
        """Set ``nbytes`` bytes at ``address`` to ``value`` (``cuMemsetD8``)."""
        if not _is_int(value) or not 0 <= int(value) <= 255:
            raise SimError(f"memset: value must be a byte 0..255, got {value!r}")
        if not _is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"memset: nbytes must be an int >= 0, got {nbytes!r}")
        self._bytes(address, int(nbytes), "memset")[:] = int(value)

    def track_stores(self) -> None:
        """From now on, record which bytes of device memory the plain stores
        of every launch write (``st``, vector stores, bulk and TMA stores to
        global memory; not atomics): see :meth:`stored`; and which bytes any
        write reaches, atomics included: see :meth:`written`."""
        self._stored = {}
        self._updated = {}

    def written(self, address: int, nbytes: int) -> np.ndarray:
        """Per byte of the ``nbytes`` at ``address``: whether a store, a
        bulk or tensor copy or an atomic of a launch since
        :meth:`track_stores` wrote it (every way a kernel writes global
        memory; what the unwritten-output check reads).

        Raises:
            SimError: the range is not inside one allocation.
        """
        k, offset = self._locate(address, int(nbytes), "written")
        out = self.stored(address, nbytes)
        mask = self._updated.get(k)
        if mask is not None:
            out |= mask[offset:offset + int(nbytes)].astype(bool)
        return out

    def stored(self, address: int, nbytes: int) -> np.ndarray:
        """Per byte of the ``nbytes`` at ``address``: whether a plain store
        of a launch since :meth:`track_stores` wrote it (all False when
        nothing is recorded).

        Raises:
            SimError: the range is not inside one allocation.
        """
        k, offset = self._locate(address, int(nbytes), "stored")
        mask = (self._stored or {}).get(k)
        if mask is None:
            return np.zeros(int(nbytes), dtype=bool)
        return mask[offset:offset + int(nbytes)].astype(bool)

    def _store_recorder(self, stored: dict[int, np.ndarray]) -> Any:
        """The memory's ``stored`` (or ``updated``) hook for a launch: it
        marks the bytes of each store in a per-allocation mask of ``stored``
        (one scatter of ``width``-byte words of 0x01 bytes per store)."""
        index = {id(b): k for k, b in enumerate(self._buffers)}

        def record(buf: np.ndarray, off: np.ndarray, width: int) -> None:
            k = index.get(id(buf))
            if k is None:                       # shared or local memory
                return
            mask = stored.get(k)
            if mask is None:
                mask = stored[k] = np.zeros(len(buf), dtype=np.uint8)
            at = np.asarray(off, dtype=np.int64)
            if width == 16:
                words = mask.view(np.uint64)
                words[at >> 3] = _ONES[8]
                words[(at >> 3) + 1] = _ONES[8]
            else:
                mask.view(_ONES[width].dtype)[at // width] = _ONES[width]
        return record

    def to_device(self, array: Any) -> int:
        """Allocate device memory for ``array`` (a numpy array or bytes) and
        copy it in; returns its device address."""
        raw = _host_bytes(array, "to_device")
        address = self._allocate(len(raw), "alloc")
        self._bytes(address, len(raw), "to_device")[:] = raw
        return address

    def from_device(self, address: int, like: Any) -> np.ndarray:
        """A new array shaped and typed like ``like`` (anything with
        ``shape`` and ``dtype``), filled from device memory at ``address``.

        Raises:
            SimError: ``like`` has no shape/dtype, or its size runs past the
                allocation at ``address``.
        """
        try:
            shape, dtype = tuple(like.shape), np.dtype(like.dtype)
        except (AttributeError, TypeError):
            raise SimError(f"from_device: like must have a shape and a dtype (a numpy array), "
                           f"got {type(like).__name__}") from None
        if dtype.hasobject:
            raise SimError(f"from_device: like has dtype {dtype}, which holds Python objects, not bytes")
        out = np.empty(shape, dtype)
        out.reshape(-1).view(np.uint8)[:] = self._bytes(address, out.nbytes, "from_device")
        return out

    def leaks(self) -> list[tuple[int, int]]:
        """``(address, nbytes)`` of every live allocation made by
        :meth:`alloc` or :meth:`to_device` (not a module's global
        variables), in the order they were made."""
        return [((k + 1) << GLOBAL_SHIFT, self._sizes[k]) for k, owner in enumerate(self._owners)
                if owner == "alloc"]

    def close(self, report_leaks: bool | None = None) -> None:
        """Release all device memory and modules (``cuCtxDestroy``); any
        later use of the device is an error. Closing twice does nothing.

        Args:
            report_leaks: raise if allocations are still live (they are
                released all the same); default: the ``report_leaks`` the
                device was made with.

        Raises:
            SimError: ``report_leaks`` and :meth:`leaks` is not empty,
                naming each allocation.
        """
        if self._closed:
            return
        leaks = self.leaks()
        self._closed = True
        self._buffers, self._sizes, self._owners = [], [], []
        self._free_slots.clear()
        self._modules.clear()
        self._stored, self._updated = None, {}
        if leaks and (self._report_leaks if report_leaks is None else report_leaks):
            listed = ", ".join(f"{a:#x} ({n} bytes)" for a, n in leaks[:8])
            more = f" and {len(leaks) - 8} more" if len(leaks) > 8 else ""
            raise SimError(f"Device.close: {len(leaks)} allocation{'s' if len(leaks) != 1 else ''} never "
                           f"freed: {listed}{more}")

    def __enter__(self) -> "Device":
        """``with sim.Device(report_leaks=True) as dev:`` closes the device
        at the end of the block, reporting leaks when asked."""
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        """Close the device; leaks are not reported while another error
        propagates (it is the one to see)."""
        self.close(report_leaks=None if kind is None else False)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise SimError(f"{what}: the device is closed")

    # modules -------------------------------------------------------------------
    def load(self, source: str | ir.Module) -> ir.Module:
        """Parse PTX text (once per text) and check it against the target
        (once per module), as ``cuModuleLoadData`` does.

        Returns:
            The module (pass it, or the same text, to :meth:`launch`).

        Raises:
            ParseError: text that does not parse.
            PrecheckError: PTX that ptxas would reject, each problem with
                its line.
        """
        module = _module(source)
        problems = module_problems(module, self.arch)
        if problems:
            raise PrecheckError(_module_name(module), problems)
        return module

    def _entry(self, source: str | ir.Module, kernel: str | None) -> tuple[ir.Module, Program, dict[str, int]]:
        """The checked module, its prepared kernel and the addresses of the
        global variables it uses (allocated on this device on first use)."""
        self._check_open("launch")
        module = _module(source)
        problems = module_problems(module, self.arch)
        try:
            program = _prepared(module, kernel, self.arch)
        except SimError:
            if problems:
                raise PrecheckError(_module_name(module, kernel), problems) from None
            raise
        problems = problems + program_problems(module, program)
        if problems:
            raise PrecheckError(program.name, problems)
        return module, program, self._globals(module, program)

    def _globals(self, module: ir.Module, program: Program) -> dict[str, int]:
        held = self._modules.get(id(module))
        if held is None or held[0] is not module:
            held = self._modules[id(module)] = (module, {})
        bases = held[1]
        new = [v for v in program.global_vars if v.name not in bases]
        for v in new:
            bases[v.name] = self._allocate(max(v.size, 1), "module")
        for v in new:
            if v.init:
                data = _initial_bytes(v.type, [_address(program, bases, x) for x in v.init], v.size)
                self._buffers[(bases[v.name] >> GLOBAL_SHIFT) - 1][:len(data)] = data
        return {v.name: bases[v.name] for v in program.global_vars}

    def global_address(self, source: str | ir.Module, name: str, kernel: str | None = None) -> int:
        """The device address of global variable ``name`` of a module
        (``cuModuleGetGlobal``); the module's globals are allocated (and
        initialised) on first use, and keep their values across launches.

        Raises:
            SimError: no ``.global`` variable ``name`` in the kernel's module.
        """
        _, program, bases = self._entry(source, kernel)
        if name not in bases:
            names = ", ".join(sorted(bases)) or "none"
            raise SimError(f"global_address: {program.name}'s module has no .global variable {name!r} "
                           f"(it has: {names})")
        return bases[name]

    def param_info(self, source: str | ir.Module, kernel: str | None = None) -> list[ParamInfo]:
        """The parameters of ``kernel`` (the only entry when None), in
        order: what :meth:`launch` expects for each (``cuFuncGetParamInfo``)."""
        _, program, _ = self._entry(source, kernel)
        return [ParamInfo(p.name, p.type, p.offset, p.size) for p in program.params]

    # launch --------------------------------------------------------------------
    def launch(self, source: str | ir.Module, params: Sequence[Any], *, grid: Any = (1, 1, 1),
               block: Any = (1, 1, 1), cluster: Any = (1, 1, 1), smem: int = 0, kernel: str | None = None,
               check: Any = None, max_steps: int | None = None, profile: bool = False,
               fidelity: bool = False, max_seconds: float | None = None) -> Any:
        """Run a kernel on the device's memory (``cuLaunchKernelEx``).

        Args:
            source: PTX text or a module (parsed or traced).
            params: one item per ``.param`` of the entry, in order: ``bytes``
                of exactly the parameter's size (a packed struct holding
                device addresses, a 128-byte tensor map), or an int/float for
                a scalar parameter (range- and kind-checked; a device address
                for a ``.u64`` pointer).
            grid, block, cluster: launch shape, 1 to 3 ints each.
            smem: bytes of dynamic shared memory.
            kernel: the ``.entry`` to run when the module has several.
            check: run the sanitizer (:mod:`jaxptx.sim.core.sanitizer`):
                ``True`` raises ``SanitizerError`` at the first finding,
                ``"strict"`` also reports same-value stores by several
                threads, ``"all"`` runs to the end and returns every finding;
                ``None`` (the default): as an open :func:`jaxptx.sim.checking`
                block or ``JAXPTX_SIM_CHECK`` says, else off.
            max_steps: a bound on the emulator's steps (default: the
                machine's own).
            profile: count every warp-level request and return a
                :class:`jaxptx.profile.Profile` (the sanitizer's findings,
                if any, in its ``findings``).
            fidelity: return a :class:`jaxptx.sim.Fidelity` instead: which
                instructions ran exactly, within the ISA's stated error or
                by the emulator's reading of the ISA, and whether a value of
                the last two kinds reached an address, a branch or a barrier
                (the findings of ``check="all"`` in its ``findings``, the
                profile of ``profile=True`` in its ``profile``).
            max_seconds: a bound on the launch's wall time, in seconds
                (default: ``JAXPTX_SIM_TIMEOUT``, else none; ``math.inf``:
                none). A launch that runs longer than a few seconds reports
                its progress (``JAXPTX_SIM_PROGRESS_SECONDS``).

        Raises:
            PrecheckError: PTX that ptxas would reject, or instructions the
                emulator cannot run (each listed with its line).
            SimError: a bad launch (parameters, shape) before anything
                runs, or a fault while running.
        """
        module, program, bases = self._entry(source, kernel)
        where = capture.directory()
        was = None
        if where is not None:
            try:
                was = capturing.before(self, bases, where)
            except capturing.TooLarge:
                pass
        result = self._run(program, bases, params, grid, block, cluster, smem, check, max_steps,
                           profile=module if profile else None, fidelity=fidelity, max_seconds=max_seconds,
                           module=module)
        if was is not None:
            capturing.record(self, source, module, program, bases,
                             pack_params(program.name, program.params, params),
                             _launch_shape(program, grid, block, cluster, smem), smem, was)
        return result

    def _run(self, program: Program, bases: dict[str, int], params: Sequence[Any], grid: Any, block: Any,
             cluster: Any, smem: Any, check: Any, max_steps: int | None, profile: Any = None,
             fidelity: bool = False, max_seconds: float | None = None, module: ir.Module | None = None) -> Any:
        """:meth:`launch` once the kernel is prepared and checked (``module``:
        the one ``program`` came from, for the PTX and Python lines of a fault)."""
        grid, block, cluster = _launch_shape(program, grid, block, cluster, smem)
        raw = pack_params(program.name, program.params, params)
        options: dict[str, Any] = {}
        if max_steps is not None:
            if not _is_int(max_steps) or int(max_steps) < 1:
                raise SimError(f"launch max_steps: expected an int >= 1, got {max_steps!r}")
            options["max_steps"] = int(max_steps)
        if max_seconds is not None:
            options["max_seconds"] = max_seconds_option(max_seconds)
        nctas = grid[0] * grid[1] * grid[2]
        ntid = block[0] * block[1] * block[2]
        # Each CTA's shared memory starts 16-aligned (8-byte mbarriers of every CTA stay aligned).
        shared = -(-(-(-program.shared_size // 16) * 16 + smem) // 16) * 16
        _check_host_memory(program, nctas, ntid, shared)
        memory = Memory(nctas, ntid, shared, program.local_size, program.param_size, program.const_size)
        # static, then dynamic from the next 16-byte boundary: the bytes a kernel may touch
        memory.shared_limit = (-(-program.shared_size // 16) * 16 + smem) if smem else program.shared_size
        memory.globals, memory.sizes = self._buffers, self._sizes
        for p, data in zip(program.params, raw):
            memory.param[p.offset:p.offset + len(data)] = np.frombuffer(data, np.uint8)
        for v in program.variables.values():
            if v.space == "const" and v.init:
                data = _initial_bytes(v.type, [_address(program, bases, x) for x in v.init], v.size)
                memory.const[v.offset:v.offset + len(data)] = data
        if self._stored is not None:
            memory.stored = self._store_recorder(self._stored)
            memory.updated = self._store_recorder(self._updated)
        memory.names = self._buffer_names(program, bases, params)
        memory.freed = frozenset(k for k, owner in enumerate(self._owners) if owner is None)
        tune_allocator()
        check = check_mode() if check is None else valid_mode(check)
        machine = Machine(program, grid, block, memory, SEMANTICS, cluster=cluster, dynamic_smem=smem,
                          global_bases=bases, check=check, **options)
        hook = PROFILING[0]
        counted = profile if profile is not None else module if hook is not None else None
        counter = None
        if counted is not None:         # the module: jaxptx.profile counts this launch
            from ..profile.counters import attach
            counter = attach(machine, counted)
        tracker = track_fidelity(machine) if fidelity else None
        try:
            machine.run()
            findings = machine.sanitizer.findings if check == "all" else None
            report = counter.result(findings) if counter is not None else None
            if hook is not None and report is not None:
                hook(report, counted)   # a profiling() block's copy; the caller gets what it asked for
                report = report if profile is not None else None
            if tracker is not None:
                return tracker.result(findings, report)
            return report if report is not None else findings
        except SimFault as e:
            raise located(e, module, program, machine.current_pc) from None
        finally:
            machine.close()

    def _buffer_names(self, program: Program, bases: dict[str, int], params: Sequence[Any]) -> dict[int, str]:
        """Allocation index -> what a fault calls it: the first pointer
        parameter whose value is inside it (``parameter 'x'``), or the
        global variable it holds."""
        names = {(a >> GLOBAL_SHIFT) - 1: f"global variable '{name}'" for name, a in bases.items()}
        for p, value in zip(program.params, params):
            if _is_int(value) and p.size == 8:
                k = (int(value) >> GLOBAL_SHIFT) - 1
                if 0 <= k < len(self._owners) and self._owners[k] == "alloc":
                    names.setdefault(k, f"parameter '{p.name}'")
        return names


# A store's bytes in a :meth:`Device.track_stores` mask: a word of 0x01 bytes per width.
_ONES = {1: np.uint8(1), 2: np.uint16(0x0101), 4: np.uint32(0x0101_0101), 8: np.uint64(0x0101_0101_0101_0101)}


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _host_bytes(data: Any, what: str) -> np.ndarray:
    """The bytes of host data as a uint8 array."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, np.uint8)
    if isinstance(data, np.ndarray) and not data.dtype.hasobject:
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    raise SimError(f"{what}: expected a numpy array or bytes, got {type(data).__name__}")


# Per-thread bytes the machine keeps besides registers: PC, state, barrier
# bookkeeping and the index arrays of a step (a generous bound).
_THREAD_OVERHEAD = 64


def _check_host_memory(program: Program, nctas: int, ntid: int, shared: int) -> None:
    """Refuse, before anything is allocated, a launch whose per-thread state
    cannot fit in this host's memory: every register of every thread, the
    shared memory of every CTA and the local memory of every thread."""
    nthreads = nctas * ntid
    per_thread = _THREAD_OVERHEAD + program.local_size + \
        sum(max(1, t.bits // 8) for t in program.registers.values())
    need = nthreads * per_thread + nctas * shared
    have = _host_memory()
    if have and need > have:
        raise SimLaunchError(
            f"launch of {program.name}: {nthreads:,} threads ({nctas:,} CTAs of {ntid}) need about "
            f"{need / 2**30:,.1f} GiB of emulator state ({per_thread} bytes a thread, {shared:,} bytes of "
            f"shared memory a CTA); this host has {have / 2**30:,.1f} GiB. Launch fewer CTAs.")


def _host_memory() -> int:
    """Bytes of physical memory (0 where the host does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _launch_shape(program: Program, grid: Any, block: Any, cluster: Any, smem: Any):
    """The launch's (grid, block, cluster), checked once against CUDA's limits
    for the program's target (:func:`jaxptx.launch.validate_launch`)."""
    try:
        launch = validate_launch(grid, block, cluster, smem, program.shared_size, program.target,
                                 where=f"launch of {program.name}")
    except LaunchError as e:
        raise SimLaunchError(str(e)) from None
    block = launch.block
    if program.reqntid is not None and tuple(program.reqntid) + (1,) * (3 - len(program.reqntid)) != block:
        raise SimError(f"launch block {block} does not match {program.name}'s .reqntid {program.reqntid}")
    return launch.grid, block, launch.cluster


def _address(program: Program, bases: dict[str, int], name: Any) -> Any:
    """An initialiser item: a number, or the address a variable name stands for."""
    if not isinstance(name, str):
        return name
    v = program.variables.get(name)
    if v is None:
        raise SimError(f"initialiser names {name!r}, which is not a variable of the module")
    return bases[name] if v.space == "global" else v.offset


def _initial_bytes(type_name: str, values: list, size: int) -> np.ndarray:
    t = TYPES[type_name]
    bits = to_bits(t, np.asarray(values), max(8, t.bits))
    return np.ascontiguousarray(bits).view(np.uint8)[:size]


def _module_name(module: ir.Module, kernel: str | None = None) -> str:
    entries = [f.name for f in module.functions if f.kind == "entry" and f.body is not None]
    return kernel or (entries[0] if len(entries) == 1 else "module")


_TEXTS: "collections.OrderedDict[str, ir.Module]" = collections.OrderedDict()
_PREPARED: "collections.OrderedDict[tuple[int, str | None, str | None], tuple[ir.Module, Program]]" = \
    collections.OrderedDict()


def _module(source: Any) -> ir.Module:
    """A module from PTX text (parsed once per text) or a module."""
    if isinstance(source, ir.Module):
        return source
    if not isinstance(source, str):
        raise SimError(f"expected PTX text or a jaxptx.ir.Module, got {type(source).__name__} "
                       "(for a traced kernel pass kernel.module(...))")
    module = _TEXTS.get(source)
    if module is None:
        module = _TEXTS[source] = parse(source)
        if len(_TEXTS) > _CACHE_SIZE:
            _TEXTS.popitem(last=False)
    else:
        _TEXTS.move_to_end(source)
    return module


def _prepared(module: ir.Module, kernel: str | None, arch: str | None) -> Program:
    # Preparing a kernel (flattening, resolving every instruction) costs more
    # than a short run; a kernel launched again reuses it. Keyed by the
    # module's identity, which the entry keeps alive; a few dozen at most.
    key = (id(module), kernel, arch)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is module:
        _PREPARED.move_to_end(key)
        return hit[1]
    program = prepare(module, kernel, isa.parse_target(arch) if arch else None)
    _PREPARED[key] = (module, program)
    if len(_PREPARED) > _CACHE_SIZE:
        _PREPARED.popitem(last=False)
    return program

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
``launch_sequence([...])``      launches on one stream, with programmatic
                                dependent launch (:mod:`.sequence`)
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

``Device`` is one class built in three layers, a module each:
:class:`~.device_memory.DeviceMemory` (allocations, copies, leaks, the
record of written bytes), :class:`~.device_modules.DeviceModules` (loading,
checking and preparing modules, their global variables) and, here, the
launches and the device's lifetime (``close``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import capture, ir, isa
from ..launch import Launch, validate_launch
from ..errors import LaunchError, PtxError
from .core.host import tune_allocator
from .core.machine import Machine
from .core.observers import Observer
from .core.view import MachineView
from .core.progress import environ_value, max_seconds_option
from .core.program import Program
from .core.schedules import schedule_option
from .device_memory import is_int
from .device_modules import DeviceModules, ParamInfo, initial_bytes
from .errors import SimDeadlock, SimError, SimFault, SimLaunchError
from .faults import located
from .memory.spaces import GLOBAL_SHIFT, Memory
from .memory_model import check_fits
from .params import pack_params
from . import capturing
from .checking import check_mode, valid_mode
from .observing import open_observers
from .fidelity.tracker import Tracker as FidelityTracker
from .semantics import SEMANTICS
from .sequence import item_shape, run_sequence, sequence_items, sequence_seed

__all__ = ["Device", "ParamInfo"]

# The profile layer's counter: PROFILER[0](machine, module) joins a
# jaxptx.profile counter to a prepared machine as an observer and returns it
# (its .result(findings) is the Profile). jaxptx.profile registers it when it
# is imported: the emulator never imports the layers above it.
PROFILER: list[Any] = [None]

# While a jaxptx.profile.profiling() block is open, in any thread (XLA runs
# CPU custom calls on threads of its own), PROFILING[0] is the function the
# profile layer registers to take each launch's Profile and its module;
# None otherwise, and a launch pays this one lookup.
PROFILING: list[Any] = [None]


class Device(DeviceModules):
    """An emulated GPU: memory that persists, and kernel launches on it.

    Args:
        arch: the target every module is checked and run for (``"sm_90a"``);
            default: each module's own ``.target``.
        report_leaks: :meth:`close` raises when allocations are still live.
        captured: whether ``JAXPTX_CAPTURE_DIR`` captures the device's
            launches (``False``: a caller that records its launches itself,
            as the JAX CPU handler does).

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

    def __init__(self, arch: str | None = None, *, report_leaks: bool = False, captured: bool = True) -> None:
        if arch is not None:
            try:
                isa.parse_target(arch)
            except PtxError as e:
                raise SimError(f"Device: {e}") from None
        super().__init__(arch)
        self._report_leaks = bool(report_leaks)
        if not captured:
            self._capturable = False

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

    # launch --------------------------------------------------------------------
    def launch(self, source: str | ir.Module, params: Sequence[Any], *, grid: Any = (1, 1, 1),
               block: Any = (1, 1, 1), cluster: Any = (1, 1, 1), smem: int = 0, kernel: str | None = None,
               check: Any = None, max_steps: int | None = None, profile: bool = False,
               fidelity: bool = False, max_seconds: float | None = None,
               observers: Sequence[Callable[[MachineView], Observer]] = (), launch: Launch | None = None,
               schedule: str | None = None, seed: int | None = None, max_resident_ctas: int | None = None) -> Any:
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
            launch: the whole shape as a :class:`jaxptx.launch.Launch`
                instead of ``grid``/``block``/``cluster``/``smem``.
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
                if any, in its ``findings``). The profiler is
                ``jaxptx.profile``'s: importing it registers it here.
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
            observers: tools to watch the launch: each is called with the
                prepared machine (a :class:`jaxptx.sim.MachineView`) and
                returns a :class:`jaxptx.sim.Observer`, which hears the
                launch's events (:mod:`jaxptx.sim.core.observers`);
                :func:`jaxptx.sim.observing` adds tools to every launch.
            schedule, seed: ``schedule="random"`` with an int ``seed`` runs
                another interleaving of the warps, the same for the same seed
                (:mod:`jaxptx.sim.core.schedules`); default: as
                ``JAXPTX_SIM_SCHEDULE`` says (``random:N``), else the default
                schedule.
            max_resident_ctas: at most this many CTAs run at once (counted
                in whole clusters when the launch has clusters); the others
                start in grid order (``%ctaid.x`` fastest, then y, then z)
                as resident ones exit, unless
                ``clusterlaunchcontrol.try_cancel`` cancels them first.
                Default: every CTA is resident from the start.

        Raises:
            PrecheckError: PTX that ptxas would reject, or instructions the
                emulator cannot run (each listed with its line).
            SimError: a bad launch (parameters, shape) before anything
                runs, or a fault while running.
        """
        module, program, bases = self._entry(source, kernel)
        if launch is None:
            launch = launch_of(program, grid, block, cluster, smem)
        elif (grid, block, cluster, smem) != ((1, 1, 1), (1, 1, 1), (1, 1, 1), 0):
            raise SimError(f"launch of {program.name}: give launch= or grid/block/cluster/smem, not both")
        else:
            launch = launch_of(program, launch.grid, launch.block, launch.cluster, launch.smem)
        # The variable looked up first: capture.directory() costs a tiny launch several microseconds.
        where = capture.directory() if self._capturable and environ_value(capture.ENV_DIR) else None
        was = None
        if where is not None:
            try:
                was = capturing.before(self, bases, where)
            except capturing.TooLarge:
                pass
        try:
            result = self._run(program, bases, params, launch, check, max_steps,
                               profile=module if profile else None, fidelity=fidelity, max_seconds=max_seconds,
                               module=module, observers=observers, schedule=schedule, seed=seed,
                               max_resident_ctas=max_resident_ctas)
        except SimDeadlock as e:        # saved for replay too: the hang is the point of the capture
            if was is not None:
                e.capture = capturing.record(self, source, module, program, bases,
                                             pack_params(program.name, program.params, params), launch, was)
                if e.capture is not None:
                    e.args = (f"{e.args[0]}\n  the launch is saved for replay: {e.capture}",)
            raise
        if was is not None:
            capturing.record(self, source, module, program, bases,
                             pack_params(program.name, program.params, params), launch, was)
        return result

    def launch_sequence(self, launches: Sequence[Mapping[str, Any]], *, programmatic: bool = True,
                        check: Any = None, schedule: str | None = None, seed: int | None = None,
                        max_steps: int | None = None) -> list[Any]:
        """Run grids in stream order on the device, with programmatic
        dependent launch (:mod:`.sequence`).

        Args:
            launches: one dict per grid, in stream order: ``source``,
                ``params`` (as :meth:`launch` takes them), and optionally
                ``grid``, ``block``, ``cluster``, ``smem`` (or ``launch``)
                and ``kernel``.
            programmatic: a grid may start once every CTA of the grid
                before it has executed ``griddepcontrol.launch_dependents``
                or exited, and runs together with it; its
                ``griddepcontrol.wait`` waits until every grid before it has
                completed (and orders their memory before what follows).
                ``False``: each grid starts once the one before completed,
                as :meth:`launch` calls one after another.
            check: the sanitizer, as :meth:`launch` takes it; with
                ``programmatic``, races between grids too (a dependent's
                access before its ``wait`` against a prerequisite's),
                naming both grids.
            schedule, seed: ``schedule="random"`` with an int ``seed``:
                each grid runs under a random schedule of its own, and when
                a dependent starts once allowed varies too; the same seed
                gives the same run. Default: as ``JAXPTX_SIM_SCHEDULE``
                says, else the default schedule.
            max_steps: a bound on each grid's steps.

        Returns:
            One item per grid, as :meth:`launch` returns (its findings
            under ``check="all"``, else ``None``).

        Raises:
            PrecheckError: PTX that ptxas would reject or the emulator
                cannot run, before anything runs.
            SimDeadlock: no thread of any grid can make progress (a
                dependent waiting on a grid that waits on it), naming each
                grid's stuck warps.
            SimError: a bad list or item (before anything runs), or a fault
                in a grid (the message starts with the grid).
        """
        items = sequence_items(launches)
        if not isinstance(programmatic, bool):
            raise SimError(f"launch_sequence programmatic: expected True or False, got {programmatic!r}")
        check = check_mode() if check is None else valid_mode(check)
        schedule, seed = schedule_option(schedule, seed)
        schedule = "default" if schedule is None else schedule
        if not programmatic:
            found = []
            for k, item in enumerate(items):
                grid, block, cluster, smem = item_shape(item)
                found.append(self.launch(item["source"], item.get("params", ()), grid=grid, block=block,
                                         cluster=cluster, smem=smem, kernel=item.get("kernel"), check=check,
                                         max_steps=max_steps, schedule=schedule, seed=sequence_seed(seed, k)))
            return found
        prepared: list[tuple[Machine, ir.Module, Program]] = []
        try:
            for k, item in enumerate(items):
                module, program, bases = self._entry(item["source"], item.get("kernel"))
                shape = launch_of(program, *item_shape(item))
                machine = self._machine(program, bases, item.get("params", ()), shape, check, max_steps,
                                        schedule=schedule, seed=sequence_seed(seed, k))
                prepared.append((machine, module, program))
            index = getattr(self, "index", 0)       # a System's device has its index; a lone device is device 0
            return run_sequence(index, self._buffers, self._first_slot, prepared, check, seed)
        finally:
            for machine, _, _ in prepared:
                machine.close()

    def _run(self, program: Program, bases: dict[str, int], params: Sequence[Any], launch: Launch,
             check: Any, max_steps: int | None, profile: Any = None,
             fidelity: bool = False, max_seconds: float | None = None, module: ir.Module | None = None,
             observers: Sequence[Callable[[MachineView], Observer]] = (), schedule: str | None = None,
             seed: int | None = None, max_resident_ctas: int | None = None, fits_checked: bool = False) -> Any:
        """:meth:`launch` once the kernel is prepared and checked (``module``:
        the one ``program`` came from, for the PTX and Python lines of a fault;
        ``launch``: checked for it by :func:`launch_of`; ``fits_checked``: the
        caller has checked that it fits in memory, :func:`check_fits`)."""
        check = check_mode() if check is None else valid_mode(check)
        machine = self._machine(program, bases, params, launch, check, max_steps, max_seconds, schedule, seed,
                                max_resident_ctas, fits_checked)
        hook = PROFILING[0]
        counted = profile if profile is not None else module if hook is not None else None
        counter = None
        if counted is not None:         # the module: jaxptx.profile counts this launch
            if PROFILER[0] is None:
                raise SimError("launch(profile=True): the profiler is jaxptx.profile's; import jaxptx.profile "
                               "first (the emulator does not import the layers above it)")
            counter = PROFILER[0](machine, counted)
        tracker = machine.observe(FidelityTracker(machine)) if fidelity else None
        for make in (*open_observers(), *observers):
            machine.observe(make(machine))
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

    def _machine(self, program: Program, bases: dict[str, int], params: Sequence[Any], launch: Launch,
                 check: Any, max_steps: int | None, max_seconds: float | None = None,
                 schedule: str | None = None, seed: int | None = None,
                 max_resident_ctas: int | None = None, fits_checked: bool = False) -> Machine:
        """The machine of one launch, ready to run: its memory holds the
        parameters and constants and sees the device's allocations; the
        device's store recorder watches it (``check``: a valid mode).
        :meth:`_run` runs it; a node (:class:`jaxptx.sim.System`) runs
        several together."""
        raw = pack_params(program.name, program.params, params)
        options: dict[str, Any] = {}
        if max_steps is not None:
            if not is_int(max_steps) or int(max_steps) < 1:
                raise SimError(f"launch max_steps: expected an int >= 1, got {max_steps!r}")
            options["max_steps"] = int(max_steps)
        if max_seconds is not None:
            options["max_seconds"] = max_seconds_option(max_seconds)
        if max_resident_ctas is not None:
            options["max_resident_ctas"] = _resident_ctas(max_resident_ctas, launch)
        nctas, ntid, smem = launch.blocks, launch.threads, launch.smem
        # Each CTA's shared memory starts 16-aligned (8-byte mbarriers of every CTA stay aligned).
        shared = -(-(-(-program.shared_size // 16) * 16 + smem) // 16) * 16
        # Refused before anything is allocated when it would not fit (memory_model).
        if not fits_checked:
            check_fits(program, launch, check=check, global_bytes=sum(b.nbytes for b in self._buffers))
        memory = Memory(nctas, ntid, shared, program.local_size, program.param_size, program.const_size)
        # static, then dynamic from the next 16-byte boundary: the bytes a kernel may touch
        memory.shared_limit = (-(-program.shared_size // 16) * 16 + smem) if smem else program.shared_size
        memory.globals, memory.sizes = self._buffers, self._sizes
        memory.first_slot = self._first_slot
        for p, data in zip(program.params, raw):
            memory.param[p.offset:p.offset + len(data)] = np.frombuffer(data, np.uint8)
        for v in program.variables.values():
            if v.space == "const" and v.init:
                data = initial_bytes(program, bases, v)
                memory.const[v.offset:v.offset + len(data)] = data
        memory.names = self._buffer_names(program, bases, params)
        memory.freed = frozenset(k for k, owner in enumerate(self._owners) if owner is None)
        self._connect(memory)
        tune_allocator()
        schedule, seed = schedule_option(schedule, seed)
        machine = Machine(program, launch, memory, SEMANTICS, global_bases=bases, check=check, schedule=schedule,
                          seed=seed, **options)
        recorder = self.store_recorder()
        if recorder is not None:
            machine.hear_accesses(recorder.access)
        return machine

    def _connect(self, memory: Memory) -> None:
        """Join a launch's memory to the rest of the machine the device is
        part of: nothing for a lone device; a node's device
        (:class:`jaxptx.sim.System`) sets the memory's seams to its peers
        and multicast objects."""

    # A lone device's launches may be captured for replay (JAXPTX_CAPTURE_DIR);
    # a node's are not (a capture holds one device's memory).
    _capturable = True

    def _buffer_names(self, program: Program, bases: dict[str, int], params: Sequence[Any]) -> dict[int, str]:
        """Allocation index -> what a fault calls it: the first pointer
        parameter whose value is inside it (``parameter 'x'``), or the
        global variable it holds."""
        first = self._first_slot
        names = {(a >> GLOBAL_SHIFT) - first: f"global variable '{name}'" for name, a in bases.items()}
        for p, value in zip(program.params, params):
            if is_int(value) and p.size == 8:
                k = (int(value) >> GLOBAL_SHIFT) - first
                if 0 <= k < len(self._owners) and self._owners[k] == "alloc":
                    names.setdefault(k, f"parameter '{p.name}'")
        return names


def _resident_ctas(value: Any, launch: Launch) -> int:
    """``max_resident_ctas`` checked: an int of at least one cluster's CTAs.

    Raises:
        SimLaunchError: not an int, below 1, or below the CTAs of one cluster.
    """
    if not is_int(value) or int(value) < 1:
        raise SimLaunchError(f"launch max_resident_ctas: expected an int >= 1, got {value!r}")
    size = launch.cluster[0] * launch.cluster[1] * launch.cluster[2]
    if int(value) < size:
        raise SimLaunchError(f"launch max_resident_ctas: expected at least the {size} CTAs of one cluster "
                             f"(cluster {launch.cluster}), got {int(value)}")
    return int(value)


def launch_of(program: Program, grid: Any, block: Any, cluster: Any, smem: Any) -> Launch:
    """The launch of ``program``, checked once against CUDA's limits for the
    program's target (:func:`jaxptx.launch.validate_launch`) and its ``.reqntid``.

    A shape given as plain ints (an int, or a tuple or list of them) is
    checked once per prepared program: later launches of that shape get the
    same :class:`Launch` from the program's :attr:`~.core.program.Program.derived`
    (at most :data:`_SHAPES_KEPT` shapes a program)."""
    key = _shape_key(grid, block, cluster, smem)
    if key is None:
        return _checked_launch(program, grid, block, cluster, smem)
    shapes = program.derive("launch shapes", dict)
    hit = shapes.get(key)
    if hit is None:
        hit = _checked_launch(program, grid, block, cluster, smem)
        if len(shapes) >= _SHAPES_KEPT:
            shapes.clear()
        shapes[key] = hit
    return hit


_SHAPES_KEPT = 64


def _shape_key(*dims: Any) -> tuple | None:
    """A launch shape as a key: each dim an int or a tuple of ints (a list
    becomes a tuple); ``None`` when any part is something else (a numpy
    int, a bool), which is checked afresh every time."""
    key = []
    for d in dims:
        if type(d) is int:
            key.append(d)
        elif type(d) in (tuple, list) and all(type(x) is int for x in d):
            key.append(tuple(d))
        else:
            return None
    return tuple(key)


def _checked_launch(program: Program, grid: Any, block: Any, cluster: Any, smem: Any) -> Launch:
    """:func:`launch_of` without the cache."""
    try:
        launch = validate_launch(grid, block, cluster, smem, program.shared_size, program.target,
                                 where=f"launch of {program.name}")
    except LaunchError as e:
        raise SimLaunchError(str(e)) from None
    block = launch.block
    if program.reqntid is not None and tuple(program.reqntid) + (1,) * (3 - len(program.reqntid)) != block:
        raise SimError(f"launch block {block} does not match {program.name}'s .reqntid {program.reqntid}")
    return launch


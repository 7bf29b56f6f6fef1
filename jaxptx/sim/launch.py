"""``jaxptx.sim.launch``: run a kernel on the CPU, on numpy arrays.

The convenient form of :class:`~.device.Device`: a fresh device per call;
numpy arrays passed for pointer parameters are copied to device memory,
the kernel runs, and the memory is copied back into the same arrays (so
they are read and written in place). Numbers fill scalar parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..dsl import Kernel, bind_specs
from .core.program import Variable
from .checking import check_mode
from .device import Device, launch_of
from .errors import SimError
from .unwritten import UnwrittenOutputError, exempt_outputs, message, unwritten
from .memory.tensormap import SIZE as TENSOR_MAP_SIZE
from .memory.tensormap import ArgTensorMap
from .memory_model import check_fits

__all__ = ["launch", "launch_sequence", "from_kernel"]

_POINTER_TYPES = ("u64", "s64", "b64")
_ITEM_KEYS = ("source", "args", "grid", "block", "cluster", "smem", "kernel")


def launch(source: str | ir.Module | Kernel, *args: Any, kernel: str | None = None,
           grid: Any = None, block: Any = None, cluster: Any = None, smem: int = 0,
           check: Any = None, max_steps: int | None = None, profile: bool = False,
           max_seconds: float | None = None, allow_unwritten: bool | Sequence[str] = False,
           schedule: str | None = None, seed: int | None = None, max_resident_ctas: int | None = None,
           **template: Any) -> Any:
    """Run one kernel on the CPU emulator.

    Args:
        source: PTX text, a parsed module, or a jaxptx ``Kernel`` (then
            ``grid``/``block``/``cluster``/``smem`` default to its specialisation, and
            keyword arguments are its template values).
        *args: one per ``.param``: numpy arrays for pointers (read and
            written in place), numbers for scalars, an :class:`ArgTensorMap`
            (or 128 bytes from ``tensor_map``) for a tensor-map parameter,
            a numpy array of exactly a parameter's size for its bytes.
        kernel: which ``.entry`` to run when the module has several.
        grid, block, cluster: launch shape (1 to 3 ints each).
        smem: bytes of dynamic shared memory.
        check: run the sanitizer (:mod:`jaxptx.sim.core.sanitizer`: races
            by happens-before, async data used before its completion,
            missing proxy fences, uninitialised reads, barrier divergence):
            ``True`` raises ``SanitizerError`` at the first finding,
            ``"strict"`` also reports same-value stores by several threads,
            ``"all"`` runs to the end and returns the list of findings;
            ``None`` (the default): as an open :func:`jaxptx.sim.checking`
            block or ``JAXPTX_SIM_CHECK`` says, else off.
        max_steps: a bound on the emulator's steps (default: the machine's).
        profile: return a :class:`jaxptx.profile.Profile` of the launch
            (see :func:`jaxptx.profile.profile`).
        max_seconds: a bound on the launch's wall time, in seconds (default:
            ``JAXPTX_SIM_TIMEOUT``, else none; ``math.inf``: none).
        allow_unwritten: outputs of a traced kernel it may leave partly
            unwritten (names, or True for all), besides those declared with
            :func:`jaxptx.jax.allow_unwritten`; every other output (not an
            in-place one, nor an array also passed as an input) must be
            written in full (:mod:`jaxptx.sim.unwritten`).
        schedule, seed: ``schedule="random"`` with an int ``seed`` runs
            another interleaving of the warps, reproducible by its seed
            (:mod:`jaxptx.sim.core.schedules`); default: as
            ``JAXPTX_SIM_SCHEDULE`` says, else the default schedule.
        max_resident_ctas: at most this many CTAs (whole clusters) run at
            once; the rest start in grid order as resident ones exit, unless
            ``clusterlaunchcontrol.try_cancel`` cancels them first (default:
            all resident from the start).

    Raises:
        PrecheckError: PTX that ptxas would reject, or that the emulator
            cannot run, each listed with its line, before anything runs.
        SimMemoryError: the launch would need more host memory than
            ``JAXPTX_SIM_MAX_MEMORY`` allows (default: 3/4 of the host's),
            before the arrays are copied in (:func:`estimate_memory`).
        SimError: a bad launch (wrong argument count or types, block not
            matching ``.reqntid``) before anything runs; a fault, a hang or
            a bound (``max_steps``, ``max_seconds``) reached while running
            (a fault as :class:`~jaxptx.sim.SimFault`).
        UnwrittenOutputError: a traced kernel left bytes of an output
            unwritten (the arrays are updated first).
    """
    traced = source if isinstance(source, Kernel) else None
    if traced is not None:
        source, grid, block, cluster, smem = from_kernel(source, args, grid, block, cluster, smem, template)
    elif template:
        raise SimError(f"launch: unexpected keyword arguments {sorted(template)}")
    elif allow_unwritten:
        raise SimError("launch: allow_unwritten names outputs of a traced kernel; PTX text has none")
    device = Device()
    # Placing the kernel first allocates the module's global variables, so
    # the arrays get the addresses they always had (after the globals).
    module, program, bases = device._entry(source, kernel)
    shape = launch_of(program, grid or (1, 1, 1), block or (1, 1, 1), cluster or (1, 1, 1), smem)
    # Refused before the arrays are copied in when it would not fit (memory_model).
    arrays = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    check_fits(program, shape, check=check_mode() if check is None else check,
               global_bytes=arrays + sum(b.nbytes for b in device.buffers))
    params, outputs = _params(device, program.name, program.params, args)
    checked = _checked_outputs(traced, args, allow_unwritten) if traced is not None else []
    if checked:
        device.track_stores()
    findings = device._run(program, bases, params, shape, check, max_steps, profile=module if profile else None,
                           max_seconds=max_seconds, module=module, schedule=schedule, seed=seed,
                           max_resident_ctas=max_resident_ctas, fits_checked=True)
    before = {i: args[i].reshape(-1).view(np.uint8).copy() for _, i in checked}
    for _, array, address in outputs:
        array.reshape(-1).view(np.uint8)[:] = np.frombuffer(device.read(address, array.nbytes), np.uint8)
    address = {i: a for i, _, a in outputs}
    for j, i in checked:
        a = args[i]
        mask = unwritten(before[i], a.reshape(-1).view(np.uint8), device.written(address[i], a.nbytes))
        if mask.any():
            raise UnwrittenOutputError(message(traced.name, j, traced.tensors[i], mask, a.dtype, a.shape))
    return findings


def launch_sequence(launches: Sequence[Mapping[str, Any]], *, programmatic: bool = True, check: Any = None,
                    schedule: str | None = None, seed: int | None = None,
                    max_steps: int | None = None) -> list[Any]:
    """Run kernels in stream order on one fresh device, on numpy arrays:
    :meth:`jaxptx.sim.Device.launch_sequence` as :func:`launch` is
    :meth:`~jaxptx.sim.Device.launch`.

    Args:
        launches: one dict per grid, in stream order: ``source`` (PTX text,
            a module or a traced ``Kernel``), ``args`` (as :func:`launch`
            takes them), and optionally ``grid``, ``block``, ``cluster``,
            ``smem`` and ``kernel``. An array passed to several grids (the
            same numpy array object) is one buffer on the device: one
            grid's output is the next one's input. Arrays are written back
            in place once every grid has run.
        programmatic, check, schedule, seed, max_steps: as
            ``Device.launch_sequence`` takes them.

    Returns:
        One item per grid: its sanitizer findings under ``check="all"``,
        else ``None``.

    Raises:
        SimError: a bad list or item; two different arrays that share
            memory (pass the same array object); or what
            ``Device.launch_sequence`` raises.
    """
    if isinstance(launches, Mapping) or not isinstance(launches, Sequence) or not launches:
        raise SimError("launch_sequence launches: expected a non-empty list of dicts, one per grid "
                       f"(dict(source=ptx, args=(x, y), grid=..., block=...)), got {launches!r:.80}")
    device = Device()
    shared: dict[int, int] = {}
    items, outputs = [], []
    for k, item in enumerate(launches):
        if not isinstance(item, Mapping) or sorted(set(item) - set(_ITEM_KEYS)) or "source" not in item:
            got = sorted(item) if isinstance(item, Mapping) else type(item).__name__
            raise SimError(f"launch_sequence item {k}: takes source, args and optionally grid, block, cluster, "
                           f"smem, kernel; got {got}")
        source, args = item["source"], tuple(item.get("args", ()))
        grid, block, cluster, smem = (item.get(key) for key in ("grid", "block", "cluster", "smem"))
        if isinstance(source, Kernel):
            source, grid, block, cluster, smem = from_kernel(source, args, grid, block, cluster, smem or 0, {})
        _same_objects(k, args, outputs)
        module, program, _ = device._entry(source, item.get("kernel"))
        params, placed = _params(device, program.name, program.params, args, shared)
        outputs += placed
        items.append(dict(source=module, params=params, grid=grid or (1, 1, 1), block=block or (1, 1, 1),
                          cluster=cluster or (1, 1, 1), smem=smem or 0, kernel=item.get("kernel")))
    found = device.launch_sequence(items, programmatic=programmatic, check=check, schedule=schedule, seed=seed,
                                   max_steps=max_steps)
    for _, array, address in outputs:
        array.reshape(-1).view(np.uint8)[:] = np.frombuffer(device.read(address, array.nbytes), np.uint8)
    return found


def _same_objects(k: int, args: tuple, placed: list[tuple[int, np.ndarray, int]]) -> None:
    """Refuse an array of item ``k`` that shares memory with one an earlier
    item placed but is another object: it would get a buffer of its own."""
    for a in args:
        if isinstance(a, np.ndarray):
            for _, b, _ in placed:
                if a is not b and np.shares_memory(a, b):
                    raise SimError(f"launch_sequence item {k}: an array shares memory with one an earlier grid "
                                   "takes but is another array object; pass the same array object to both")


def _checked_outputs(k: Kernel, args: tuple, allow: bool | Sequence[str]) -> list[tuple[int, int]]:
    """``(output index, argument index)`` of the outputs to check for
    unwritten bytes: arrays not exempt (:func:`.unwritten.exempt_outputs`)
    and sharing no memory with another argument (an in-place update)."""
    exempt = exempt_outputs(k, allow)
    n_in = len(k.in_specs)
    arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    out = []
    for j in range(len(k.out_specs)):
        i = n_in + j
        a = args[i] if i < len(args) else None
        if j in exempt or not isinstance(a, np.ndarray) or a.nbytes == 0:
            continue
        if not any(h != i and np.shares_memory(a, b) for h, b in arrays):
            out.append((j, i))
    return out


def from_kernel(k: Kernel, args: tuple, grid: Any, block: Any, cluster: Any, smem: int, template: dict):
    """The traced module and its launch (the specialisation's, where the call
    does not give grid, block, cluster or smem)."""
    specs = k.in_specs + k.out_specs
    env = {}
    if specs:
        arrays = [(np.shape(a), np.asarray(a).dtype) for a in args[:len(specs)]]
        env = bind_specs(specs, arrays, list(k.tensors))
    spec = k.specialize(**{**env, **template})
    launch = spec.launch
    return (spec.module, grid or launch.grid, block or launch.block, cluster or launch.cluster,
            smem or launch.smem)


def _params(device: Device, name: str, info: list[Variable], args: tuple,
            shared: dict[int, int] | None = None) -> tuple[list, list[tuple[int, np.ndarray, int]]]:
    """The device launch's params for ``args``, and the arrays to copy back
    (``(argument index, array, device address)``). ``shared``: the device
    addresses of arrays already placed (by ``id``), reused, not copied back
    again; new ones are added."""
    if len(args) != len(info):
        names = ", ".join(f".{p.type} {p.name}" for p in info) or "none"
        raise SimError(f"{name} takes {len(info)} parameters ({names}), got {len(args)} arguments")
    params: list[Any] = []
    outputs = []
    placed: dict[int, int] = {}  # argument index -> its device address
    for i, (p, a) in enumerate(zip(info, args)):
        if isinstance(a, ArgTensorMap):
            if p.size != TENSOR_MAP_SIZE:
                raise SimError(f"{name} parameter {p.name} (.{p.type}, {p.size} bytes): a "
                               f"tensor map needs a {TENSOR_MAP_SIZE}-byte parameter")
            params.append(a)
        elif isinstance(a, np.ndarray) and p.type in _POINTER_TYPES and p.size == 8:
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise SimError(f"{name} parameter {p.name}: the array must be C-contiguous "
                               "and writeable (it is written in place)")
            if shared is not None and id(a) in shared:
                placed[i] = shared[id(a)]
            else:
                placed[i] = device.to_device(a)
                outputs.append((i, a, placed[i]))
                if shared is not None:
                    shared[id(a)] = placed[i]
            params.append(placed[i])
        elif isinstance(a, np.ndarray):
            if p.size != a.nbytes:
                raise SimError(f"{name} parameter {p.name} (.{p.type}): expected a pointer-sized "
                               f"parameter for an array argument, got a {a.dtype} array")
            params.append(a.tobytes())
        elif isinstance(a, (int, float, np.integer, np.floating, bytes, bytearray, memoryview)):
            params.append(a)
        else:
            raise SimError(f"{name} parameter {p.name} (.{p.type}): expected a numpy array or a number, "
                           f"got {type(a).__name__}")
    for i, (p, a) in enumerate(zip(info, args)):
        if isinstance(a, ArgTensorMap):
            if a.arg not in placed:
                raise SimError(f"{name} parameter {p.name}: its tensor map describes argument "
                               f"{a.arg}, which is not an array passed for a pointer parameter")
            params[i] = a.encode(placed[a.arg])
    return params, outputs

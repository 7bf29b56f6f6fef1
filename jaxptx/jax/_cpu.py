"""The CPU handler's Python half: run a kernel on the emulator.

The shim's ``jaxptx_cpu`` handler takes the GIL and calls :func:`run` with
memoryviews over XLA's buffers and the call's PTX, valid only during the
call. A kernel lowered in this process runs from its registered entry (its
parsed module; buffer sizes checked against the lowered shapes); any other
id (a deserialised export) runs from the PTX the call carries, parsed once.
Inputs are copied (the emulator writes its pointer arguments back, and
XLA's inputs must not change); outputs are written in place through
zero-copy views.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .. import ir, sim
from ..launch import Launch
from ..types import TYPES
from ..parse import parse
from . import _registry, _tma

__all__ = ["run"]

# XLA may run several custom calls at once (one per device under
# shard_map); the emulator's caches are shared, so launches take turns.
_LAUNCH_LOCK = threading.Lock()
# Kernel id -> module parsed from a call's PTX (ids not lowered here).
_PARSED: dict[int, ir.Module] = {}


def run(kernel_id: int, inputs: Sequence[memoryview], outputs: Sequence[memoryview],
        ptx: memoryview, entry: str, grid: tuple[int, int, int], block: tuple[int, int, int],
        cluster: tuple[int, int, int], smem: int, scalars: Sequence[int] = (),
        tma: Sequence[int] = ()) -> str | None:
    """Run kernel ``kernel_id``; return None, or the error for XLA to raise.

    ``grid``, ``block``, ``cluster`` and ``smem`` are the call's
    :class:`~jaxptx.launch.Launch` attributes, checked again here (a
    deserialised call was validated by no one in this process).
    ``scalars`` holds a ``(bytes, bits)`` pair per raw scalar param; ``tma``
    the call's TMA descriptor records (``_tma``), which the emulator encodes
    with the addresses it gives the buffers.

    Never raises: every failure (buffer size mismatch, unparsable PTX, an
    emulator fault) comes back as the message of an FFI error.
    """
    name = f"{entry} (id {kernel_id})"
    try:
        launch = Launch.from_attributes(grid, block, cluster, smem)
        registered = _registry.find(kernel_id)
        if registered is not None:
            module = registered.spec.module
            ins = [np.array(_view(mv, t, "input", i))
                   for i, (mv, t) in enumerate(zip(inputs, registered.inputs))]
            outs = [_view(mv, t, "output", i)
                    for i, (mv, t) in enumerate(zip(outputs, registered.outputs))]
            if len(inputs) != len(registered.inputs) or len(outputs) != len(registered.outputs):
                return (f"jaxptx_cpu: kernel {name}: expected {len(registered.inputs)} inputs and "
                        f"{len(registered.outputs)} outputs, got {len(inputs)} and {len(outputs)}")
        else:
            module = _PARSED.get(kernel_id)
            if module is None:
                module = _PARSED.setdefault(kernel_id, parse(bytes(ptx).decode()))
            ins = [np.frombuffer(mv, np.uint8).copy() for mv in inputs]
            outs = [np.frombuffer(mv, np.uint8) for mv in outputs]
        values = _scalar_values(module, entry, len(ins) + len(outs), scalars)
        maps = _tma.sim_maps(tma)
        with _LAUNCH_LOCK:
            sim.launch(module, *ins, *outs, *values, *maps, kernel=entry, grid=launch.grid,
                       block=launch.block, cluster=launch.cluster, smem=launch.smem)
        del ins, outs  # no view may outlive the call
        return None
    except BaseException as e:  # noqa: BLE001 - every failure becomes an FFI error
        return f"jaxptx_cpu: kernel {name}: {type(e).__name__}: {e}"


def _scalar_values(module: ir.Module, entry: str, buffers: int,
                   scalars: Sequence[int]) -> list[np.generic]:
    """The raw param values of a call, typed as the entry declares them."""
    if len(scalars) % 2:
        raise ValueError(f"the scalars attribute has {len(scalars)} entries, not (bytes, bits) pairs")
    function = next(f for f in module.functions if f.name == entry)
    values = []
    for param, (nbytes, bits) in zip(function.params[buffers:], zip(scalars[::2], scalars[1::2])):
        dtype = TYPES[param.type].np_dtype
        if dtype is None or dtype.itemsize != nbytes:
            raise ValueError(f"raw param {param.name} (.{param.type}) got a {nbytes}-byte value")
        raw = (int(bits) & (2**64 - 1)).to_bytes(8, "little")[:nbytes]
        values.append(np.frombuffer(raw, dtype)[0])
    return values


def _view(mv: memoryview, buffer: _registry.BufferType, what: str, index: int) -> np.ndarray:
    shape, dtype = buffer
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if mv.nbytes != expected:
        raise ValueError(f"{what} {index}: expected {expected} bytes for {dtype}{list(shape)}, "
                         f"got {mv.nbytes}")
    return np.frombuffer(mv, dtype=dtype).reshape(shape)

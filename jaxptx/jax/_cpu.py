"""The CPU handler's Python half: run a registered kernel on the emulator.

The shim's ``jaxptx_cpu`` handler takes the GIL and calls :func:`run` with
memoryviews over XLA's buffers, valid only during the call. Inputs are copied
(the emulator writes its pointer arguments back, and XLA's inputs must not
change); outputs are written in place through zero-copy views.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .. import sim
from . import _registry

__all__ = ["run"]

# XLA may run several custom calls at once (one per device under
# shard_map); the emulator's caches are shared, so launches take turns.
_LAUNCH_LOCK = threading.Lock()


def run(kernel_id: int, inputs: Sequence[memoryview], outputs: Sequence[memoryview]) -> str | None:
    """Run kernel ``kernel_id``; return None, or the error for XLA to raise.

    Never raises: every failure (unknown id, buffer size mismatch, an
    emulator fault) comes back as the message of an FFI error.
    """
    name = str(kernel_id)
    try:
        entry = _registry.lookup(kernel_id)
        name = f"{entry.kernel.name} (id {kernel_id})"
        ins = [np.array(_view(mv, t, "input", i)) for i, (mv, t) in enumerate(zip(inputs, entry.inputs))]
        outs = [_view(mv, t, "output", i) for i, (mv, t) in enumerate(zip(outputs, entry.outputs))]
        if len(ins) != len(entry.inputs) or len(outs) != len(entry.outputs):
            return (f"jaxptx_cpu: kernel {name}: expected {len(entry.inputs)} inputs and "
                    f"{len(entry.outputs)} outputs, got {len(inputs)} and {len(outputs)}")
        spec = entry.spec
        with _LAUNCH_LOCK:
            sim.launch(spec.module, *ins, *outs, kernel=entry.entry, grid=entry.grid,
                       block=spec.block, cluster=spec.cluster, smem=spec.smem)
        del ins, outs  # no view may outlive the call
        return None
    except BaseException as e:  # noqa: BLE001 - every failure becomes an FFI error
        return f"jaxptx_cpu: kernel {name}: {type(e).__name__}: {e}"


def _view(mv: memoryview, buffer: _registry.BufferType, what: str, index: int) -> np.ndarray:
    shape, dtype = buffer
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if mv.nbytes != expected:
        raise ValueError(f"{what} {index}: expected {expected} bytes for {dtype}{list(shape)}, "
                         f"got {mv.nbytes}")
    return np.frombuffer(mv, dtype=dtype).reshape(shape)

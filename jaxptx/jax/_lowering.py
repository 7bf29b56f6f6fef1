"""Lowering a kernel's primitive to typed-FFI custom calls.

Both calls carry the same attributes: ``kernel_id`` (int64), ``ptx`` and
``entry`` (strings), ``grid``, ``block``, ``cluster`` (int32 arrays of 3) and
``smem`` (int64). A call is self-contained: a serialised export runs with
no registry, in a process that never traced the kernel.

* CPU: ``jaxptx_cpu``. The shim's handler calls back into Python
  (``_cpu.run``), which runs the kernel on the emulator.
* CUDA: ``jaxptx_launch``. The shim loads the id's module once per context
  and launches it on XLA's stream.

Both register the specialisation under its id (``_registry``) as they lower.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.interpreters import mlir

from .. import _ffi
from ..dsl import Kernel
from . import _cpu, _registry

__all__ = ["register", "CPU_TARGET", "CUDA_TARGET"]

CPU_TARGET = "jaxptx_cpu"
CUDA_TARGET = "jaxptx_launch"


def _register_targets() -> None:
    handlers = _ffi.handlers()
    jax.ffi.register_ffi_target(CPU_TARGET, handlers[CPU_TARGET], platform="cpu")
    jax.ffi.register_ffi_target(CUDA_TARGET, handlers[CUDA_TARGET], platform="CUDA")
    _ffi.set_cpu_callback(_cpu.run)


_cpu_call = jax.ffi.ffi_lowering(CPU_TARGET)
_cuda_call = jax.ffi.ffi_lowering(CUDA_TARGET)


def _entry(kernel: Kernel, ctx: Any, template: tuple, sizes: tuple, grid: tuple) -> _registry.Entry:
    return _registry.register(kernel, template, sizes, grid,
                              [_registry.buffer_type(a) for a in ctx.avals_in],
                              [_registry.buffer_type(a) for a in ctx.avals_out])


def _attributes(entry: _registry.Entry) -> dict[str, Any]:
    spec = entry.spec
    return dict(kernel_id=np.int64(entry.kernel_id), ptx=spec.ptx, entry=entry.entry,
                grid=np.array(entry.grid, np.int32), block=np.array(spec.block, np.int32),
                cluster=np.array(spec.cluster, np.int32), smem=np.int64(spec.smem))


def kernel_lowering_cpu(kernel: Kernel, ctx: Any, *args: Any, template: tuple, sizes: tuple,
                        grid: tuple) -> Any:
    """The emulator's custom call."""
    entry = _entry(kernel, ctx, template, sizes, grid)
    return _cpu_call(ctx, *args, **_attributes(entry))


def kernel_lowering_cuda(kernel: Kernel, ctx: Any, *args: Any, template: tuple, sizes: tuple,
                         grid: tuple) -> Any:
    """The GPU launch's custom call."""
    entry = _entry(kernel, ctx, template, sizes, grid)
    return _cuda_call(ctx, *args, **_attributes(entry))


def register(prim: Any, kernel: Kernel) -> None:
    """Register the CPU and CUDA lowerings of ``kernel``'s primitive."""
    mlir.register_lowering(prim, functools.partial(kernel_lowering_cpu, kernel), platform="cpu")
    mlir.register_lowering(prim, functools.partial(kernel_lowering_cuda, kernel), platform="cuda")


_register_targets()

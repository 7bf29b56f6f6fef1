"""Lowering a kernel's primitive to typed-FFI custom calls.

Both calls carry the same attributes: ``kernel_id`` (int64), ``ptx`` and
``entry`` (strings), ``launch`` (the call's :class:`~jaxptx.launch.Launch` as
one dictionary attribute ``{block, cluster, grid, smem}``: int32 arrays of 3
and an int64, ``Launch.attributes()``), ``scalars`` (int64 array: a
``(bytes, bits)`` pair per raw scalar param, the values of this call) and
``tma`` (int64 array: the kernel's TMA descriptors but for their addresses,
see ``_tma``). A call is self-contained: a serialised export runs with no
registry, in a process that never traced the kernel.

The launch is a dictionary rather than four attributes or one packed array
because XLA's typed FFI passes a dictionary attribute through to a handler
as is (``xla::ffi::Dictionary``), JAX lowers a Python dict to one, and it
keeps its member names and types in the StableHLO and in a ``jax.export``
artifact (``launch = {block = dense<[128, 1, 1]> : tensor<3xi32>, ...}``):
a reader sees what each number is, and the handlers decode it into one
``LaunchShape`` by name, refusing a missing, extra or mistyped member.

* CPU: ``jaxptx_cpu_v2`` (:data:`CPU_TARGET`). The shim's handler calls back into Python
  (``_cpu.run``), which runs the kernel on the emulator.
* CUDA: ``jaxptx_launch_v2`` (:data:`CUDA_TARGET`). The shim loads the id's module once per context
  and launches it on XLA's stream: the cubin registered at lowering where
  the GPUs are in this process (compiled through the on-disk cache), else
  the call's PTX, JIT-compiled by the driver.

The version-1 targets (grid, block, cluster and smem as four attributes)
stay registered with handlers that refuse every call, naming the version
and the fix (:data:`RETIRED_TARGETS`).

Both register the specialisation under its id (``_registry``) as they lower.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.interpreters import mlir

from .. import _ffi, isa
from ..dsl import Kernel
from ..errors import SpecError
from ..launch import Launch
from ..runtime import arch_from_capability, module_image
from ..dsl import declarations
from . import _cpu, _partition, _peers, _registry, _tma, _writes

__all__ = ["register", "cuda_target", "arch_for_devices", "CPU_TARGET", "CUDA_TARGET",
           "CPU_LABEL", "CUDA_LABEL", "RETIRED_TARGETS", "launch_attribute"]

# The FFI target names carry a version: a change to the attributes a call
# carries makes new names, so an artifact from another jaxptx never has its
# attributes misread. The shim's handlers are keyed by the same names
# (ffi/handlers.h). A process that runs a deserialised export registers them
# with register_ffi_targets() (jaxptx.jax.deserialize does it); XLA's error
# for a missing handler names the target, jaxptx_cpu_v2 or jaxptx_launch_v2.
CPU_LABEL = _cpu.LABEL
CUDA_LABEL = "jaxptx_launch_v2"
CPU_TARGET = CPU_LABEL
CUDA_TARGET = CUDA_LABEL
# Earlier lowerings named the same version-2 targets with the fix for a
# missing handler appended, which every lowering then printed as if it were
# an error; their artifacts still run: those names are registered too.
_HINTED = " (call jaxptx.jax.register_ffi_targets() first)"
# Retired targets -> platform: their handlers refuse every call (an artifact
# lowered by an older jaxptx, whose target names were the hinted ones) with
# the version and the fix.
RETIRED_TARGETS = {"jaxptx_cpu_v1": "cpu", "jaxptx_launch_v1": "CUDA"}


def _register_targets() -> None:
    handlers, retired = _ffi.handlers(), getattr(_ffi, "retired_handlers", dict)()
    if set(handlers) != {CPU_LABEL, CUDA_LABEL} or set(retired) != set(RETIRED_TARGETS):
        raise ImportError(f"jaxptx._ffi has handlers {sorted(handlers) + sorted(retired)}, this "
                          f"jaxptx expects {CPU_LABEL}, {CUDA_LABEL} and the retired "
                          f"{', '.join(RETIRED_TARGETS)}: rebuild it (pip install -e .)")
    for name in (CPU_TARGET, CPU_TARGET + _HINTED):
        jax.ffi.register_ffi_target(name, handlers[CPU_LABEL], platform="cpu")
    for name in (CUDA_TARGET, CUDA_TARGET + _HINTED):
        jax.ffi.register_ffi_target(name, handlers[CUDA_LABEL], platform="CUDA")
    for label, platform in RETIRED_TARGETS.items():
        jax.ffi.register_ffi_target(label + _HINTED, retired[label], platform=platform)
    _ffi.set_cpu_callback(_cpu.run)
    atexit.register(_ffi.cpu_shutdown)


def _call(target: str, kernel: Kernel, ctx: Any, args: tuple, attributes: dict) -> Any:
    """The custom call, with the kernel's in-place outputs as aliases."""
    aliases = declarations.aliases_of(kernel)
    for i, j in aliases.items():
        given, made = ctx.avals_in[i], ctx.avals_out[j]
        if (given.shape, given.dtype) != (made.shape, made.dtype):
            output = kernel.tensors[len(kernel.in_specs) + j]
            raise SpecError(f"kernel {kernel.name}: in-place output {output!r} is "
                            f"{made.str_short()} but its input {kernel.tensors[i]!r} is "
                            f"{given.str_short()}; an in-place output has its input's shape and dtype")
    lowering = jax.ffi.ffi_lowering(target, operand_output_aliases=aliases or None)
    return lowering(ctx, *args, **attributes)


def _entry(kernel: Kernel, ctx: Any, target: isa.Target, template: tuple, sizes: tuple,
           launch: Launch, shared: tuple, axis: tuple) -> _registry.Entry:
    names = [kernel.tensors[i] for i in shared]
    return _registry.register(kernel, target, template, sizes, launch,
                              [_registry.buffer_type(a) for a in ctx.avals_in],
                              [_registry.buffer_type(a) for a in ctx.avals_out], names,
                              world=axis[1] if axis else None)


def cuda_target(kernel: Kernel, ctx: Any) -> isa.Target:
    """The target of a CUDA lowering: the kernel's ``arch``, or for
    ``"auto"`` the compute capability of the devices being lowered for
    (``JAXPTX_ARCH``, then the fallback, when there are none, as when
    lowering for CUDA on a CPU-only machine)."""
    if kernel.arch != "auto" or os.environ.get("JAXPTX_ARCH", "").strip():
        return kernel.resolve_arch()
    arch = _device_arch(kernel, ctx)
    return isa.parse_target(arch) if arch else kernel.resolve_arch()


def _device_arch(kernel: Kernel, ctx: Any) -> str | None:
    backend = ctx.module_context.backend
    gpu = backend is not None and backend.platform in ("cuda", "gpu")
    return arch_for_devices(backend.local_devices() if gpu else [], kernel.name)


def _register_cubin(kernel: Kernel, ctx: Any, entry: _registry.Entry) -> None:
    """Where this process has the GPUs being lowered for, compile the PTX
    for their arch now (through the on-disk cache) and hand the cubin to the
    shim, so no launch waits for the driver's JIT. ptxas errors surface here,
    with their PTX line, rather than at the first launch."""
    if _ffi.cuda_registered(entry.kernel_id) or _ffi.cuda_driver_error():
        return
    arch = _device_arch(kernel, ctx)
    if arch is None:
        return
    image = module_image(entry.spec.ptx, arch)  # a cubin, or PTX for the driver to JIT
    _ffi.cuda_register(entry.kernel_id, image, entry.spec.ptx, entry.entry,
                       len(entry.inputs) + len(entry.outputs))


def arch_for_devices(devices: Sequence[Any], name: str) -> str | None:
    """The one ``sm_XX`` target of ``devices`` (by ``compute_capability``,
    as ``"9.0"``), or None for no devices.

    Raises:
        SpecError: the devices have different compute capabilities.
    """
    caps = sorted({str(d.compute_capability) for d in devices})
    if not caps:
        return None
    if len(caps) > 1:
        raise SpecError(f"kernel {name}: arch='auto' but the devices have compute capabilities "
                        f"{caps}; give the kernel an explicit arch")
    major, minor = (int(x) for x in caps[0].split("."))
    return arch_from_capability(major, minor)


def _attributes(entry: _registry.Entry, scalars: tuple, ctx: Any, axis: tuple) -> dict[str, Any]:
    spec = entry.spec
    tma = _tma.records(spec.tma, entry.kernel.name, entry.inputs + entry.outputs)
    attributes = dict(kernel_id=np.int64(entry.kernel_id), ptx=spec.ptx, entry=entry.entry,
                      launch=launch_attribute(entry.launch),
                      scalars=scalar_records(entry.kernel, scalars), tma=tma,
                      may_write_inputs=np.int64(_writes.may_write_inputs(entry)),
                      allow_unwritten=np.int64(declarations.unwritten_mask(entry.kernel)))
    if axis:
        attributes["peers"] = _peers.attribute(entry.kernel, spec, axis, _peers.site(ctx))
    return attributes


def launch_attribute(launch: Launch) -> dict[str, np.ndarray]:
    """The ``launch`` attribute of a custom call: a dictionary of ``grid``,
    ``block``, ``cluster`` (int32 arrays of 3) and ``smem`` (int64), which
    JAX lowers to one MLIR dictionary attribute."""
    return launch.attributes()


def scalar_records(kernel: Kernel, values: Sequence[Any]) -> np.ndarray:
    """The ``scalars`` attribute: ``(bytes, bits)`` of each raw param value,
    the bits little-endian in the low bytes of an int64."""
    out = []
    for (ptype, _), value in zip(kernel.raw_params, values):
        nbytes = ptype.bits // 8
        if ptype.kind == "f":
            bits = int.from_bytes(np.array(value, dtype=ptype.np_dtype).tobytes(), "little")
        else:
            bits = int(value) & ((1 << ptype.bits) - 1)
        out += [nbytes, bits]
    return np.array(out, np.uint64).view(np.int64)


def kernel_lowering_cpu(kernel: Kernel, ctx: Any, *args: Any, template: tuple, sizes: tuple,
                        launch: Launch, batch: int, shared: tuple, scalars: tuple,
                        axis: tuple = ()) -> Any:
    """The emulator's custom call."""
    entry = _entry(kernel, ctx, kernel.resolve_arch(), template, sizes, launch, shared, axis)
    return _call(CPU_TARGET, kernel, ctx, args, _attributes(entry, scalars, ctx, axis))


def kernel_lowering_cuda(kernel: Kernel, ctx: Any, *args: Any, template: tuple, sizes: tuple,
                         launch: Launch, batch: int, shared: tuple, scalars: tuple,
                         axis: tuple = ()) -> Any:
    """The GPU launch's custom call."""
    entry = _entry(kernel, ctx, cuda_target(kernel, ctx), template, sizes, launch, shared, axis)
    _register_cubin(kernel, ctx, entry)
    return _call(CUDA_TARGET, kernel, ctx, args, _attributes(entry, scalars, ctx, axis))


def _sharded_or(lowering: Any, prim: Any, kernel: Kernel) -> Any:
    """``lowering``, or for a shardable kernel lowered across devices the
    ``custom_partitioning`` that runs it per shard (``_partition``)."""
    def rule(ctx: Any, *args: Any, **params: Any) -> Any:
        if _partition.needs_partitioning(kernel, ctx):
            fn = _partition.partitioned(prim, kernel, params)
            return mlir.lower_fun(fn, multiple_results=True)(ctx, *args)
        return lowering(kernel, ctx, *args, **params)
    return rule


def register(prim: Any, kernel: Kernel) -> None:
    """Register the CPU and CUDA lowerings of ``kernel``'s primitive.

    A kernel with peers numbers its call sites as it lowers (``_peers.site``),
    so JAX must not reuse one lowering for two equal calls."""
    cacheable = not kernel.peers
    mlir.register_lowering(prim, _sharded_or(kernel_lowering_cpu, prim, kernel), platform="cpu",
                           cacheable=cacheable)
    mlir.register_lowering(prim, _sharded_or(kernel_lowering_cuda, prim, kernel), platform="cuda",
                           cacheable=cacheable)


_register_targets()

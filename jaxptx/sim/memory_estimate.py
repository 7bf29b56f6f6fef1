"""``jaxptx.sim.estimate_memory``: the host memory a launch would need,
stated before running it (the model is :mod:`.memory_model`'s)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ir
from ..dsl import Kernel
from .checking import valid_mode
from .device import Device, launch_of
from .errors import SimError
from .launch import from_kernel
from .memory_model import MemoryEstimate, estimate

__all__ = ["estimate_memory"]


def estimate_memory(source: str | ir.Module | Kernel, *args: Any, kernel: str | None = None, grid: Any = None,
                    block: Any = None, cluster: Any = None, smem: int = 0, check: Any = False,
                    global_bytes: int = 0, **template: Any) -> MemoryEstimate:
    """The host bytes an emulated launch would need, per thread, per CTA and
    for the launch, without running it: what :func:`jaxptx.sim.launch`,
    :meth:`jaxptx.sim.Device.launch` and ``jax.jit`` on the CPU compare with
    ``JAXPTX_SIM_MAX_MEMORY`` before allocating.

    It counts the register file (every register the kernel uses, at its
    storage width, over every thread), the machine's per-thread state and
    step temporaries, local memory; per CTA shared memory, tensor memory
    (``tcgen05.alloc``) and the temporaries of tensor-core and bulk-copy
    steps; the global memory (the arrays in ``args``, the module's global
    variables, ``global_bytes``); and with ``check`` the sanitizer's shadow
    state. It is within ±30% of the peak ``tracemalloc`` measures on the
    library softmax and GEMMs (:mod:`.memory_model` lists each part;
    ``benchmarks/memory.py`` measures them).

    Args:
        source: PTX text, a parsed module, or a jaxptx ``Kernel`` (then the
            launch shape defaults to its specialisation for ``args``' shapes,
            or for the template values in ``template``).
        *args: the launch's arguments as :func:`jaxptx.sim.launch` takes
            them; only numpy arrays matter (their bytes are global memory).
        kernel: the ``.entry`` when the module has several.
        grid, block, cluster, smem: the launch shape (as ``launch`` takes it).
        check: a sanitizer mode; true counts its shadow state.
        global_bytes: more global memory the launch's device holds.
        **template: a ``Kernel``'s template values.

    Returns:
        A :class:`jaxptx.sim.MemoryEstimate`: ``total``, ``per_thread``,
        ``per_cta``, ``per_launch`` and the named parts of each.

    Raises:
        PrecheckError: PTX the emulator would refuse to run.
        SimError: a bad launch shape, ``check`` or ``global_bytes``.

    Example:
        >>> from jaxptx import sim
        >>> ptx = '''.version 8.5
        ... .target sm_90a
        ... .address_size 64
        ... .visible .entry k()
        ... {
        ...     .reg .b32 %r<2>;
        ...     mov.u32 %r1, %tid.x;
        ...     ret;
        ... }'''
        >>> e = sim.estimate_memory(ptx, grid=1024, block=256)
        >>> e.threads, e.ctas, e.per_thread
        (262144, 1024, 295)
    """
    check = valid_mode(check, "estimate_memory check")
    if not isinstance(global_bytes, (int, np.integer)) or isinstance(global_bytes, bool) or global_bytes < 0:
        raise SimError(f"estimate_memory global_bytes: expected an int >= 0, got {global_bytes!r}")
    if isinstance(source, Kernel):
        if args:
            source, grid, block, cluster, smem = from_kernel(source, args, grid, block, cluster, smem, template)
        else:
            spec = source.specialize(**template)
            launch = spec.launch
            source, grid, block = spec.module, grid or launch.grid, block or launch.block
            cluster, smem = cluster or launch.cluster, smem or launch.smem
    elif template:
        raise SimError(f"estimate_memory: unexpected keyword arguments {sorted(template)} (template values "
                       "are for a traced Kernel)")
    device = Device()
    try:
        _, program, _ = device._entry(source, kernel)
        shape = launch_of(program, grid or (1, 1, 1), block or (1, 1, 1), cluster or (1, 1, 1), smem)
        held = sum(b.nbytes for b in device.buffers)      # the module's global variables
    finally:
        device.close()
    arrays = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    return estimate(program, shape, check=check, global_bytes=held + arrays + int(global_bytes))

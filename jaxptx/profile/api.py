"""``jaxptx.profile(kernel_or_ptx, *args, ...)``: run a kernel on the
emulator with every warp-level request counted, and attach ptxas's
resources, the occupancy they allow and roofline estimates."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import ir
from .occupancy import LIMITS, limits_for, occupancy
from .report import Profile
from ..runtime import resources_all
from ..sim.launch import from_kernel

__all__ = ["profile", "attach_resources"]


def profile(source: Any, *args: Any, kernel: str | None = None, grid: Any = None, block: Any = None,
            cluster: Any = None, smem: int = 0, check: Any = None, max_steps: int | None = None,
            arch: str | None = None, resources: bool = True, allow_unwritten: Any = False,
            **template: Any) -> Profile:
    """Run one kernel on the CPU emulator and count what it does.

    Takes the arguments of :func:`jaxptx.sim.launch` (arrays are read and
    written in place, as there). The counts are exact for the emulator's
    execution: every warp-level request, its sectors and wavefronts, per PTX
    line (see :mod:`jaxptx.profile.requests`).

    Args:
        source: a jaxptx ``Kernel``, PTX text or a parsed module.
        *args, kernel, grid, block, cluster, smem, check, max_steps, **template: as :func:`jaxptx.sim.launch`.
        arch: the target for ptxas's resources and the occupancy (default:
            the kernel's own ``.target``).
        resources: run ptxas for registers, shared memory and spills (and
            the occupancy they give); skipped quietly where ptxas is missing.
        allow_unwritten: outputs of a traced kernel it may leave partly
            unwritten, as :func:`jaxptx.sim.launch` takes them.

    Returns:
        The :class:`Profile`.

    Raises:
        SimError: as :func:`jaxptx.sim.launch`: a fault (``SimFault``) names
            the kernel, access, buffer, CTA and thread, PTX and Python line;
            an output a traced kernel leaves partly unwritten is an
            ``UnwrittenOutputError``.

    Example:
        >>> import numpy as np, jaxptx
        >>> ptx = '''.version 8.5
        ... .target sm_80
        ... .address_size 64
        ... .visible .entry copy(.param .u64 x)
        ... {
        ...     .reg .b32 %r<2>; .reg .b64 %rd<4>; .reg .f32 %f<2>;
        ...     ld.param.u64 %rd1, [x];
        ...     mov.u32 %r1, %tid.x;
        ...     mul.wide.u32 %rd2, %r1, 4;
        ...     add.u64 %rd3, %rd1, %rd2;
        ...     ld.global.f32 %f1, [%rd3];
        ...     st.global.f32 [%rd3], %f1;
        ...     ret;
        ... }'''
        >>> p = jaxptx.profile.profile(ptx, np.zeros(64, np.float32), block=64, resources=False)
        >>> p.kernel["global_requests"], p.kernel["sectors_per_request"]
        (4, 4.0)
    """
    from ..dsl import Kernel
    from ..sim import launch
    result = launch(source, *args, kernel=kernel, grid=grid, block=block, cluster=cluster, smem=smem,
                    check=check, max_steps=max_steps, profile=True, allow_unwritten=allow_unwritten, **template)
    if resources:
        text = _ptx_text(source, args, template)
        attach_resources(result, text, arch or result.arch, entry=kernel if not isinstance(source, Kernel) else None)
    return result


def _ptx_text(source: Any, args: tuple, template: dict) -> str:
    from ..dsl import Kernel
    from ..emit import emit
    if isinstance(source, Kernel):
        module = from_kernel(source, args, None, None, None, 0, template)[0]
        return emit(module)
    if isinstance(source, ir.Module):
        return emit(source)
    return source


def attach_resources(p: Profile, ptx: str, arch: str, entry: str | None = None) -> None:
    """Fill ``p.resources`` from ``ptxas -v`` for ``arch`` and ``p.occupancy``
    for that target (when :data:`.occupancy.LIMITS` has it). On a ptxas
    failure ``p.resources`` is ``{"error": message}``."""
    try:
        table = resources_all(ptx, arch)
        res = table.get(entry or p.name) or next(iter(table.values()))
    except Exception as e:          # no ptxas here, or it rejects this target
        p.resources = {"error": f"{type(e).__name__}: {e}".strip()[:300]}
        return
    p.resources = dataclasses.asdict(res)
    p.resources["arch"] = arch
    threads = p.launch["block"][0] * p.launch["block"][1] * p.launch["block"][2]
    shared = res.shared_bytes + p.launch["dynamic_smem"]
    try:
        limits_for(arch)
    except KeyError:
        p.occupancy = {}
        return
    p.occupancy = {arch: occupancy(arch, threads, res.registers, shared)}


def occupancy_table(threads: int, registers: int, shared: int) -> dict[str, dict[str, Any]]:
    """:func:`.occupancy.occupancy` for every architecture of :data:`LIMITS`."""
    return {arch: occupancy(arch, threads, registers, shared) for arch in LIMITS}

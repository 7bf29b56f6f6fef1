"""Occupancy: how many CTAs of a kernel fit on one SM, from the registers
and shared memory ptxas reports and the architecture's limits.

Limits (:data:`LIMITS`), per SM unless said otherwise. Sources: the CUDA C++
Programming Guide, "Technical Specifications per Compute Capability" (warps,
CTAs, registers, shared memory per SM and per CTA, 1 KB of shared memory
the system reserves per CTA from compute capability 8.0), and the rules of
NVIDIA's CUDA Occupancy Calculator (``cuda_occupancy.h``): registers are
allocated per warp in units of 256, a CTA's warps are spread over the SM's 4
sub-partitions and each sub-partition holds ``65536 / 4`` registers;
shared memory is allocated per CTA in units of 128 bytes. The shared-memory
carve-out is taken at its largest (what a kernel that asks for the most
shared memory gets).

Cluster launches (sm_90+) can be limited further by how many SMs a GPC
offers a cluster; that limit depends on the part and is not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ArchLimits", "LIMITS", "occupancy", "limits_for"]


@dataclasses.dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one architecture (see the module docstring)."""

    arch: str
    gpu: str
    max_warps: int = 64
    max_ctas: int = 32
    registers: int = 65536
    register_unit: int = 256          # registers allocated per warp in multiples of this
    sub_partitions: int = 4
    max_registers_per_thread: int = 255
    max_threads_per_cta: int = 1024
    shared_per_sm: int = 0            # bytes, largest carve-out
    shared_per_cta: int = 0           # bytes a CTA may opt in to
    shared_reserved: int = 1024       # bytes the system reserves per CTA
    shared_unit: int = 128
    source: str = "CUDA C++ Programming Guide, Technical Specifications per Compute Capability"


LIMITS = {
    "sm_80": ArchLimits("sm_80", "A100", shared_per_sm=164 * 1024, shared_per_cta=163 * 1024),
    "sm_90a": ArchLimits("sm_90a", "H100", shared_per_sm=228 * 1024, shared_per_cta=227 * 1024),
    "sm_100a": ArchLimits("sm_100a", "B200", shared_per_sm=228 * 1024, shared_per_cta=227 * 1024),
}
"""Limits of the three architectures the kernel library targets
(compute capability 8.0, 9.0, 10.0)."""


def limits_for(arch: str) -> ArchLimits:
    """The limits of ``arch`` (``sm_90`` means ``sm_90a``; ``sm_100``/``sm_100f`` ``sm_100a``).

    Raises:
        KeyError: an architecture without a table here.
    """
    key = arch if arch in LIMITS else {"sm_90": "sm_90a", "sm_100": "sm_100a",
                                       "sm_100f": "sm_100a"}.get(arch)
    if key is None:
        raise KeyError(f"no occupancy limits for {arch}; known: {', '.join(LIMITS)}")
    return LIMITS[key]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(arch: str, threads_per_cta: int, registers: int, shared_bytes: int) -> dict[str, Any]:
    """CTAs per SM and the occupancy they give.

    Args:
        arch: ``sm_80``, ``sm_90a`` or ``sm_100a``.
        threads_per_cta: the launch's block size.
        registers: registers per thread (ptxas).
        shared_bytes: shared memory per CTA, static plus dynamic.

    Returns:
        ``ctas_per_sm``, ``warps_per_sm``, ``occupancy`` (resident warps /
        the SM's maximum), ``limited_by`` (``warps``, ``ctas``,
        ``registers`` or ``shared``) and each limit's own CTA count.
    """
    lim = limits_for(arch)
    warps = -(-threads_per_cta // 32)
    by_warps = lim.max_warps // warps if warps else 0
    regs_per_warp = _round_up(max(registers, 1) * 32, lim.register_unit)
    per_partition = lim.registers // lim.sub_partitions
    warps_allocated = _round_up(warps, lim.sub_partitions)
    if registers > lim.max_registers_per_thread or regs_per_warp * warps_allocated > lim.registers:
        by_regs = 0
    else:
        by_regs = (per_partition // regs_per_warp) * lim.sub_partitions // warps
    shared = _round_up(shared_bytes + lim.shared_reserved, lim.shared_unit)
    by_shared = 0 if shared_bytes > lim.shared_per_cta else lim.shared_per_sm // shared
    limits = {"warps": by_warps, "ctas": lim.max_ctas, "registers": by_regs, "shared": by_shared}
    if threads_per_cta > lim.max_threads_per_cta:
        limits["warps"] = 0
    ctas = min(limits.values())
    limited = min(limits, key=lambda k: (limits[k], ["warps", "ctas", "registers", "shared"].index(k)))
    return {"arch": lim.arch, "gpu": lim.gpu, "ctas_per_sm": ctas, "warps_per_sm": ctas * warps,
            "occupancy": ctas * warps / lim.max_warps, "limited_by": limited,
            "limits": limits, "registers_per_warp": regs_per_warp, "shared_per_cta_allocated": shared,
            "source": lim.source + "; CUDA Occupancy Calculator allocation rules"}

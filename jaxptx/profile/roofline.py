"""A roofline *estimate* from counts: the lower bound on a launch's time
that its bytes and FLOPs imply at a GPU's peak rates.

This is arithmetic on counts the emulator made exactly, never a
measurement: it ignores latency, occupancy, caches beyond the two traffic
bounds below, clocks and overlap. Bytes are counted at two levels:

* ``compulsory_bytes``: the distinct 32-byte global sectors the launch
  touched at all, plus bulk-copy (TMA) bytes — what DRAM must move at least
  once with a perfect cache (the bound's memory term);
* ``l1_sector_bytes``: every sector every request moved (32 x sectors),
  and ``ideal_bytes`` the same at the ideal sectors per request — what the
  traffic would be if every request went to DRAM (an upper figure that shows
  what uncoalesced access costs).

Peak rates (:data:`GPUS`, dense, no sparsity) are NVIDIA's datasheet
figures for the SXM parts: A100 80GB SXM, H100 SXM5, B200 (HGX B200, per
GPU).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Gpu", "GPUS", "estimate", "gpu_for_arch"]


@dataclasses.dataclass(frozen=True)
class Gpu:
    """Peak rates of one GPU (datasheet figures).

    Attributes:
        name: ``A100``, ``H100``, ``B200``.
        arch: the target its kernels are built for.
        dram_bytes_per_s: HBM bandwidth.
        fp32_flops: CUDA-core FP32 FLOP/s (non-tensor).
        fp64_flops: CUDA-core FP64 FLOP/s.
        tensor_flops: dense tensor-core FLOP/s by A's element type.
        sms: streaming multiprocessors.
        source: where the figures come from.
    """

    name: str
    arch: str
    dram_bytes_per_s: float
    fp32_flops: float
    fp64_flops: float
    tensor_flops: dict[str, float]
    sms: int
    source: str


_T = 1e12
GPUS = {
    "A100": Gpu("A100", "sm_80", 2.039e12, 19.5 * _T, 9.7 * _T,
                {"f16": 312 * _T, "bf16": 312 * _T, "tf32": 156 * _T, "s8": 624 * _T, "u8": 624 * _T,
                 "f64": 19.5 * _T, "s4": 1248 * _T, "u4": 1248 * _T, "b1": 4992 * _T}, 108,
                "NVIDIA A100 datasheet (A100 80GB SXM), dense"),
    "H100": Gpu("H100", "sm_90a", 3.35e12, 66.9 * _T, 33.5 * _T,
                {"f16": 989.4 * _T, "bf16": 989.4 * _T, "tf32": 494.7 * _T, "e4m3": 1978.9 * _T,
                 "e5m2": 1978.9 * _T, "s8": 1978.9 * _T, "u8": 1978.9 * _T, "f64": 66.9 * _T}, 132,
                "NVIDIA H100 datasheet (H100 SXM5), dense"),
    "B200": Gpu("B200", "sm_100a", 8.0e12, 80 * _T, 40 * _T,
                {"f16": 2250 * _T, "bf16": 2250 * _T, "tf32": 1100 * _T, "e4m3": 4500 * _T, "e5m2": 4500 * _T,
                 "e2m3": 4500 * _T, "e3m2": 4500 * _T, "e2m1": 9000 * _T, "s8": 4500 * _T, "u8": 4500 * _T,
                 "f64": 40 * _T}, 148,
                "NVIDIA HGX B200 datasheet (per GPU), dense"),
}
"""The GPUs a roofline estimate can be made for."""


def gpu_for_arch(arch: str) -> str:
    """The GPU name for a target (``sm_90a`` -> ``H100``); ``H100`` for unknown ones."""
    for g in GPUS.values():
        if arch == g.arch or arch.rstrip("af") == g.arch.rstrip("af"):
            return g.name
    return "H100"


def estimate(kernel: dict[str, Any], tensor_flops: dict[str, int], gpu: str = "H100") -> dict[str, Any]:
    """The roofline estimate of a profiled launch on ``gpu``.

    Args:
        kernel: a profile's kernel totals (``compulsory_bytes``,
            ``global_sectors``, ``global_ideal_sectors``, ``tma_bytes``,
            ``fp32_flops``, ``fp64_flops``).
        tensor_flops: tensor-core FLOPs by A's element type.
        gpu: a key of :data:`GPUS`.

    Returns:
        The times each term implies (seconds), the bound (their maximum) and
        which term sets it; ``"estimate": True`` and a note saying so.
    """
    g = GPUS[gpu]
    compulsory = kernel.get("compulsory_bytes", 0) + kernel.get("tma_bytes", 0)
    sector_bytes = 32 * kernel.get("global_sectors", 0) + kernel.get("tma_bytes", 0)
    ideal_bytes = 32 * kernel.get("global_ideal_sectors", 0) + kernel.get("tma_bytes", 0)
    unknown = sorted(k for k in tensor_flops if k not in g.tensor_flops)
    tensor_time = sum(f / g.tensor_flops.get(k, g.tensor_flops["bf16"]) for k, f in tensor_flops.items())
    # A CTA runs on one SM: a grid of fewer CTAs than SMs gets that share of the compute peaks.
    used = min(1.0, kernel.get("ctas", g.sms) / g.sms)
    terms = {
        "dram (compulsory bytes)": compulsory / g.dram_bytes_per_s,
        "tensor cores": tensor_time / used,
        "fp32 cuda cores": kernel.get("fp32_flops", 0) / g.fp32_flops / used,
        "fp64 cuda cores": kernel.get("fp64_flops", 0) / g.fp64_flops / used,
    }
    bound = max(terms, key=terms.get)
    flops = sum(tensor_flops.values()) + kernel.get("fp32_flops", 0) + kernel.get("fp64_flops", 0)
    out = {
        "estimate": True,
        "gpu": g.name,
        "compulsory_bytes": compulsory,
        "l1_sector_bytes": sector_bytes,
        "ideal_bytes": ideal_bytes,
        "tensor_flops": sum(tensor_flops.values()),
        "cuda_core_flops": kernel.get("fp32_flops", 0) + kernel.get("fp64_flops", 0),
        "arithmetic_intensity": flops / compulsory if compulsory else None,
        "sm_share": used,
        "times_s": terms,
        "time_lower_bound_s": terms[bound],
        "bound_by": bound,
        "time_if_every_sector_from_dram_s": sector_bytes / g.dram_bytes_per_s,
        "note": (f"ESTIMATE from emulator counts at {g.name} peak rates ({g.source}); not a measurement: "
                 "no latency, occupancy, cache or clock effects; compute peaks scaled by the share of the "
                 f"{g.sms} SMs the grid's CTAs can occupy."),
    }
    if unknown:
        out["note"] += f" No {g.name} tensor peak for {', '.join(unknown)}: counted at the bf16 rate."
    return out

"""``print(profile)``: the kernel summary, then the worst lines."""

from __future__ import annotations

from typing import Any

__all__ = ["render", "worst_lines"]


def _n(x: float) -> str:
    """A count with a metric suffix (1.2k, 3.4M)."""
    x = float(x)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}" if x == int(x) else f"{x:.2f}"


def worst_lines(p: Any, count: int = 8) -> list[dict[str, Any]]:
    """The lines that waste most: excess global sectors plus bank-conflict
    wavefronts (then the most executed memory lines)."""
    def waste(e: dict[str, Any]) -> tuple:
        excess = max(0, e["global_sectors"] - e["global_ideal_sectors"]) + e["shared_bank_conflicts"] + \
            e["tensor_smem_conflicts"]
        return (excess, e["global_sectors"] + e["shared_wavefronts"])
    memory = [e for e in p.lines if e["global_requests"] or e["shared_requests"] or e["tensor_smem_bytes"]]
    return sorted(memory, key=waste, reverse=True)[:count]


def render(p: Any, count: int = 8) -> str:
    """The compact table ``print(profile)`` shows."""
    k = p.kernel
    launch = p.launch
    out = [f"jaxptx.profile: {p.name} ({p.arch}), grid {tuple(launch['grid'])} block {tuple(launch['block'])}"
           + (f" cluster {tuple(launch['cluster'])}" if launch["cluster"] != [1, 1, 1] else ""),
           f"  instructions  {_n(k['instructions'])} warp-level, {_n(k['thread_instructions'])} thread-level; "
           f"average active lanes {k['average_active_lanes']:.1f}/32",
           f"  global        {_n(k['global_requests'])} requests, {_n(k['global_sectors'])} sectors: "
           f"{k['sectors_per_request']:.2f} sectors/request (ideal {k['ideal_sectors_per_request']:.2f}); "
           f"{_n(k['global_bytes'])} B requested, {_n(32 * k['global_sectors'])} B in sectors",
           f"  shared        {_n(k['shared_requests'])} requests, {_n(k['shared_wavefronts'])} wavefronts "
           f"({k['wavefronts_per_request']:.2f}/request, ideal {k['ideal_wavefronts_per_request']:.2f}); "
           f"bank conflicts {_n(k['shared_bank_conflicts'])}"]
    if k["tensor_smem_bytes"]:
        out.append(f"  tensor operands from shared: {_n(k['tensor_smem_bytes'])} B, "
                   f"{_n(k['tensor_smem_wavefronts'])} wavefronts (model), {_n(k['tensor_smem_conflicts'])} extra")
    if k["tma_bytes"]:
        out.append(f"  bulk copies (TMA): {_n(k['tma_bytes'])} B")
    if k["local_requests"]:
        out.append(f"  local         {_n(k['local_requests'])} requests, {_n(k['local_bytes'])} B")
    flops = [f"tensor {_n(v)} {e}" for e, v in sorted(p.tensor_flops.items())]
    for key in ("fp32_flops", "fp16_flops", "fp64_flops"):
        if k[key]:
            flops.append(f"{key[:-6]} {_n(k[key])}")
    if flops:
        out.append("  FLOPs         " + ", ".join(flops))
    mix = ", ".join(f"{c} {_n(v)}" for c, v in sorted(p.mix.items(), key=lambda kv: -kv[1]))
    out.append(f"  mix           {mix}")
    out.append(f"  sync          {_n(k['barrier_waits'])} barrier waits, {_n(k['mbarrier_waits'])} mbarrier "
               f"waits, {_n(k['fences'])} fences (warp-level, the emulator's schedule)")
    r = p.resources
    if r is not None:
        out.append(f"  ptxas         {r['registers']} registers, {r['shared_bytes']} B static shared, "
                   f"spills {r['spill_stores']} B stores / {r['spill_loads']} B loads")
    if p.occupancy:
        for o in p.occupancy.values():
            out.append(f"  occupancy     {o['gpu']} ({o['arch']}): {o['ctas_per_sm']} CTAs/SM, "
                       f"{o['warps_per_sm']} warps, {100 * o['occupancy']:.0f}% (limited by {o['limited_by']})")
    est = p.roofline()
    out.append(f"  roofline      ESTIMATE for {est['gpu']}: >= {est['time_lower_bound_s'] * 1e6:.2f} us "
               f"(bound by {est['bound_by']}; {_n(est['compulsory_bytes'])} B compulsory)")
    worst = worst_lines(p, count)
    if worst:
        out.append("")
        out.append(f"  {'line':>5} {'execs':>6} {'lanes':>5} {'sect/req':>8} {'ideal':>5} {'wave/req':>8} "
                   f"{'confl':>6}  instruction")
        for e in worst:
            where = f"  ({e['source']})" if e["source"] else ""
            text = e["instruction"]
            text = text if len(text) <= 60 else text[:57] + "..."
            out.append(f"  {e['line']:>5} {_n(e['executions']):>6} {e['active_lanes']:>5.1f} "
                       f"{e['sectors_per_request']:>8.2f} {e['ideal_sectors_per_request']:>5.2f} "
                       f"{e['wavefronts_per_request']:>8.2f} {_n(e['shared_bank_conflicts']):>6}  {text}{where}")
    return "\n".join(out)

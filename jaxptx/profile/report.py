""":class:`Profile`: what a profiled launch counted, per kernel and per PTX
line, with resources, occupancy and roofline estimates attached."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import ir
from . import roofline as _roofline
from .mix import CLASSES
from .requests import FIELDS

__all__ = ["Profile", "build"]


class Profile:
    """The result of :func:`jaxptx.profile.profile` (or a launch with ``profile=True``).

    Attributes:
        name: the kernel. arch: its target. launch: grid, block, cluster, smem.
        kernel: totals (dict): every memory count of :mod:`.requests`
            (``global_requests``, ``global_sectors``, ``shared_requests``,
            ``shared_wavefronts``, ``shared_bank_conflicts``...), ratios
            (``sectors_per_request``, ``wavefronts_per_request``),
            ``instructions`` (warp-level), ``thread_instructions``,
            ``average_active_lanes`` (divergence), the sync counts
            (``barrier_waits``, ``mbarrier_waits``, ``fences``), FLOPs
            (``tensor_flops``, ``fp32_flops``, ``fp64_flops``) and
            ``compulsory_bytes`` (distinct global sectors x 32) and
            ``tensor_flops_unknown``: how many lines' tensor FLOPs are not
            counted (their entries say why, as ``tensor_flops_unknown``).
        lines: one dict per executed PTX line, in line order: ``line``,
            ``instruction``, ``source`` (``file:line`` of a traced kernel,
            else ``None``), ``class``, ``executions``, ``active_lanes``
            (average per execution), the memory counts and their ratios.
        mix: warp-level executions per instruction class.
        tensor_flops: tensor-core FLOPs by A's element type.
        resources: ptxas's registers / shared memory / spills (``None``
            when not asked for or ptxas is missing). occupancy: per target,
            :func:`.occupancy.occupancy` (``None`` without resources).
        samples: PTX line -> one warp's shared access (for :meth:`bank_map`;
            given as dicts, or as :class:`.requests.Sample` built when first read).
        findings: the sanitizer's findings of a ``check="all"`` launch.
    """

    def __init__(self, name: str, arch: str, launch: dict[str, Any], kernel: dict[str, Any],
                 lines: list[dict[str, Any]], mix: dict[str, int], tensor_flops: dict[str, int],
                 samples: dict[int, Any], findings: list | None = None) -> None:
        self.name = name
        self.arch = arch
        self.launch = launch
        self.kernel = kernel
        self.lines = lines
        self.mix = mix
        self.tensor_flops = tensor_flops
        self._samples = samples
        self.findings = findings
        self.resources: dict[str, Any] | None = None
        self.occupancy: dict[str, Any] | None = None

    @property
    def samples(self) -> dict[int, dict]:
        """PTX line -> one warp's shared access (built on first use)."""
        if any(not isinstance(s, dict) for s in self._samples.values()):
            self._samples = {k: s if isinstance(s, dict) else s.rows() for k, s in self._samples.items()}
        return self._samples

    def line(self, line: int) -> dict[str, Any]:
        """The entry of PTX line ``line``.

        Raises:
            KeyError: that line did not execute.
        """
        for entry in self.lines:
            if entry["line"] == line:
                return entry
        raise KeyError(f"PTX line {line} did not execute")

    def find(self, text: str) -> list[dict[str, Any]]:
        """The executed lines whose instruction contains ``text`` (``"ld.shared"``)."""
        return [e for e in self.lines if text in e["instruction"]]

    def roofline(self, gpu: str | None = None) -> dict[str, Any]:
        """The roofline *estimate* of this launch on ``gpu`` (``A100``,
        ``H100``, ``B200``; default: the GPU of the kernel's target)."""
        return _roofline.estimate(self.kernel, self.tensor_flops, gpu or _roofline.gpu_for_arch(self.arch))

    def to_dict(self) -> dict[str, Any]:
        """Everything, as plain JSON-ready values (roofline estimates for every GPU)."""
        return {"name": self.name, "arch": self.arch, "launch": self.launch, "kernel": self.kernel,
                "mix": self.mix, "tensor_flops": self.tensor_flops, "resources": self.resources,
                "occupancy": self.occupancy,
                "roofline": {g: self.roofline(g) for g in _roofline.GPUS},
                "lines": self.lines}

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text (``kwargs`` go to ``json.dumps``)."""
        return json.dumps(self.to_dict(), default=_plain, **kwargs)

    def __str__(self) -> str:
        from .table import render
        return render(self)

    def __repr__(self) -> str:
        k = self.kernel
        return (f"<Profile {self.name} ({self.arch}): {k['instructions']} warp instructions, "
                f"{k['sectors_per_request']:.2f} sectors/request, {k['shared_bank_conflicts']} bank conflicts>")

    def heatmap(self, metric: str = "auto", *, by: str = "ptx", ax: Any = None) -> Any:
        """A matplotlib heat map over the lines (see :func:`.plots.heatmap`)."""
        from .plots import heatmap
        return heatmap(self, metric, by=by, ax=ax)

    def bank_map(self, line: int | str, *, ax: Any = None) -> Any:
        """A matplotlib picture of one warp's shared access of ``line`` (a
        PTX line number or text in its instruction): lanes x banks, coloured
        by pass (see :func:`.plots.bank_map`)."""
        from .plots import bank_map
        return bank_map(self, line, ax=ax)


def _plain(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if hasattr(x, "__dict__"):
        return vars(x)
    return str(x)


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def _ratios(d: dict[str, Any]) -> None:
    d["sectors_per_request"] = _ratio(d["global_sectors"], d["global_requests"])
    d["ideal_sectors_per_request"] = _ratio(d["global_ideal_sectors"], d["global_requests"])
    d["wavefronts_per_request"] = _ratio(d["shared_wavefronts"], d["shared_requests"])
    d["ideal_wavefronts_per_request"] = _ratio(d["shared_ideal_wavefronts"], d["shared_requests"])


_WHERE: dict[int, tuple[Any, Any, list]] = {}


def _where(program: Any, module: ir.Module) -> list[tuple[int | None, str, str | None]]:
    """Per PC: ``(PTX line, instruction text, Python file:line)``. Parsed PTX
    carries its lines; a traced module's instructions carry their Python
    line, and their PTX lines come from the module's text, each instruction
    taking the next line of the same text (the program keeps the source
    order). Cached per module."""
    hit = _WHERE.get(id(module))
    if hit is not None and hit[0] is module and hit[1] is program:
        return hit[2]
    from ..emit import emit, emit_statement
    code = program.code
    texts = [emit_statement(ins, "canonical").strip() for ins in code]
    traced = any(ins.loc is not None and len(ins.loc) == 2 for ins in code)
    if traced:
        sources = [f"{ins.loc[0]}:{ins.loc[1]}" if ins.loc is not None and len(ins.loc) == 2 else None
                   for ins in code]
        at: dict[str, list[int]] = {}
        for number, text in enumerate(emit(module).splitlines(), 1):
            at.setdefault(text.strip(), []).append(number)
        used: dict[str, int] = {}
        lines: list[int | None] = []
        for text in texts:
            k = used.get(text, 0)
            found = at.get(text, [])
            lines.append(found[k] if k < len(found) else None)
            used[text] = k + 1
    else:
        sources = [None] * len(code)
        lines = [ins.loc[1] if ins.loc is not None and len(ins.loc) >= 2 else None for ins in code]
    out = [(lines[i] if lines[i] is not None else i, texts[i], sources[i]) for i in range(len(code))]
    if len(_WHERE) > 16:
        _WHERE.clear()
    _WHERE[id(module)] = (module, program, out)
    return out


_NO_COUNTS = {**dict.fromkeys(FIELDS, 0), "width": 0}
"""A line's counts when it made no memory or tensor accesses."""


def build(c: Any, findings: list | None) -> Profile:
    """The :class:`Profile` of a finished counter (:class:`.counters.Counter`)."""
    m = c.m
    program = m.program
    where = _where(program, c.module)
    lines = []
    total = {f: 0 for f in FIELDS}
    mix = {k: 0 for k in CLASSES}
    flops = {"fp32_flops": 0, "fp64_flops": 0, "fp16_flops": 0}
    sync = {"barrier_waits": 0, "mbarrier_waits": 0, "fences": 0}
    for pc, ex in enumerate(c.executions):
        if not ex:
            continue
        kind = c.kinds[pc]
        counts = c.counts[pc]
        entry = {"line": where[pc][0], "instruction": where[pc][1], "source": where[pc][2], "class": kind.cls,
                 "executions": ex, "active_lanes": c.active[pc] / ex, "threads": c.lanes[pc],
                 "predicated_on": c.active[pc]}
        if counts is None:                  # (most lines: no memory or tensor counts)
            entry.update(_NO_COUNTS)
        else:
            values = vars(counts)           # the fields and the width
            entry.update(values)
            for f in FIELDS:
                total[f] += values[f]
        if pc in c.unknown:
            entry["tensor_flops_unknown"] = c.unknown[pc]
        _ratios(entry)
        lines.append(entry)
        mix[kind.cls] = mix.get(kind.cls, 0) + ex
        if kind.flops_per_lane:
            key = {"fp64": "fp64_flops", "fp16": "fp16_flops", "fp16x2": "fp16_flops"}.get(kind.cls, "fp32_flops")
            flops[key] += kind.flops_per_lane * c.active[pc]
        if kind.sync == "barrier":
            sync["barrier_waits"] += ex
        elif kind.sync == "mbarrier":
            sync["mbarrier_waits"] += ex
        elif kind.sync == "fence":
            sync["fences"] += ex
    lines.sort(key=lambda e: e["line"])
    executions = sum(c.executions)
    kernel: dict[str, Any] = dict(total)
    _ratios(kernel)
    kernel.update(flops)
    kernel.update(sync)
    kernel.update({
        "instructions": executions,
        "thread_instructions": sum(c.active),
        "average_active_lanes": _ratio(sum(c.active), executions),
        "average_threads_at_pc": _ratio(sum(c.lanes), executions),
        "compulsory_bytes": 32 * sum(int(t.sum()) for t in c.touched.values()),
        "tensor_flops_unknown": len(c.unknown),
        "ctas": m.nctas,
        "emulator_steps": m.steps,
    })
    launch = {"grid": list(m.grid), "block": list(m.block), "cluster": list(m.cluster),
              "dynamic_smem": m.dynamic_smem, "static_smem": program.shared_size}
    samples = {where[pc][0]: s for pc, s in c.samples.items()}
    return Profile(program.name, program.target.name, launch, kernel, lines,
                   {k: v for k, v in mix.items() if v}, dict(c.tensor_flops), samples, findings)

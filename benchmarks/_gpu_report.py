"""The reports of ``benchmarks/gpu_check.py``: ``results.json`` and ``results.md``.

:func:`step_record` is one step's entry in ``results.json`` (its commands,
status, seconds, budget, figures and the tail of its output);
:func:`write_reports` writes the whole document and, from it, ``results.md``:
the machine, a summary table, then one section per step with its figures as
markdown tables ready for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _gpu_machine import Cmd, Context
from _gpu_steps import Outcome, Step

TAIL_CHARS = 3000


def step_record(step: Step, ctx: Context, budget: float, status: str, commands: list[Cmd], why: str = "",
                seconds: float | None = None, timeout: float | None = None, outcome: Outcome | None = None) -> dict:
    """A step's entry in ``results.json``: the commands it ran (then those of
    ``commands``, its plan, that it did not: ``# not run``), or its plan alone
    when it ran nothing (skipped, a dry run), and what came of them."""
    ran = outcome.ran if outcome else []
    tail = "\n".join(f"$ {r.cmd.text()}\n{r.output[-TAIL_CHARS:]}" for r in ran)[-2 * TAIL_CHARS:]
    texts = [r.cmd.text() for r in ran]
    texts += [c.text() + ("  # not run" if ran else "") for c in commands
              if not any(r.cmd.label.startswith(c.label) for r in ran)]
    return {"name": step.name, "key": step.key, "command": "\n".join(texts), "commands": texts, "status": status,
            "why": why, "seconds": None if seconds is None else round(seconds, 1), "budget_s": budget,
            "timeout_s": None if timeout is None else round(timeout, 1),
            "returncodes": [r.rc for r in ran], "figures": outcome.figures if outcome else {}, "tail": tail,
            "log": str(ctx.logs / f"{step.key}.log") if ran else None}


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table (``|`` in cells escaped)."""
    def cell(v: Any) -> str:
        return ("" if v is None else _fmt(v)).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.4g}"
    return str(v)


def step_markdown(rec: dict[str, Any]) -> str:
    """The markdown section of one step's record."""
    head = f"### {rec['name']}: {rec['status']}" + (f" ({rec['seconds']:.1f} s)" if rec.get("seconds") else "")
    parts = [head, "", "\n".join(f"    {c}" for c in rec["commands"]), ""]
    if rec.get("why"):
        parts += [f"Why: {rec['why']}", ""]
    f, key = rec.get("figures") or {}, rec["key"]
    if key == "build" and f:
        parts.append(md_table(["figure", "value"], [[k, v] for k, v in f.items()]))
    elif key == "tests" and "passed" in f:
        parts.append(md_table(["passed", "failed", "skipped", "errors", "pytest s"],
                              [[f.get("passed"), f.get("failed"), f.get("skipped"), f.get("errors"),
                                f.get("seconds")]]))
        parts += _bullets(f.get("failures"))
    elif key == "kernels" and f.get("rows"):
        parts.append(f"GPU: {f.get('device_kind')}; peaks (bf16 TFLOPS, GB/s): {f.get('peak_tflops_gbs')}\n")
        parts.append(md_table(["op", "arch", "shape", "jaxptx ms", "XLA ms", "XLA/jaxptx", "jaxptx rate", "of peak"],
                              [[r["op"], r["arch"], r["shape"], r.get("jaxptx_ms"), r.get("xla_ms"),
                                r.get("xla_over_jaxptx"),
                                f"{r['rate']:.2f} {r['unit']}" if "rate" in r else r.get("error"),
                                f"{r['of_peak']:.0%}" if r.get("of_peak") is not None else "—"]
                               for r in f["rows"]]))
    elif key in ("memcheck", "racecheck") and ("errors" in f or "driver_results" in f):
        parts.append(md_table(["tool", "ERROR SUMMARY", "racecheck hazards (errors, warnings)", "driver"],
                              [[key, f.get("summary") or "—",
                                "—" if f.get("hazards") is None else
                                f"{f['hazards']} ({f['race_errors']}, {f['race_warnings']})",
                                _results_text(f.get("driver_results", []))]]))
        parts += _bullets(f.get("findings"))
    elif key == "ncu" and f.get("comparison"):
        parts.append(f"Variant: {f.get('arch')}. Emulator: `jaxptx.profile` counts (plain `ld`/`st` lines), "
                     "ptxas registers, theoretical occupancy; ncu: the first launch of each kernel.\n")
        parts.append(md_table(["kernel", "figure", "emulator", "ncu", "agree"],
                              [[r["kernel"], r["figure"], _fmt(r["emulator"]), _fmt(r["ncu"]), r["agree"]]
                               for r in f["comparison"]]))
    elif key == "ncu" and f.get("predicted"):
        parts.append("No ncu figures; the emulator's predictions alone:\n")
        parts.append(md_table(["kernel", "global ld / st sectors per request", "shared ld / st bank conflicts",
                               "registers", "theoretical occupancy %"],
                              [[x["kernel"], (f"{_fmt(p.get('global_ld_sectors_per_request'))} / "
                                               f"{_fmt(p.get('global_st_sectors_per_request'))}"),
                                (f"{_fmt(p.get('shared_ld_bank_conflicts'))} / "
                                 f"{_fmt(p.get('shared_st_bank_conflicts'))}"),
                                p.get("registers"), p.get("theoretical_occupancy_pct")]
                               for x in f["predicted"] for p in [x["predicted"]]]))
    elif key == "torch" and f.get("results"):
        parts.append(md_table(["op", "kernel", "device", "max abs err", "ok"],
                              [[r.get("op"), r.get("kernel"), r.get("tensor_device"), r.get("max_abs_err"),
                                r.get("ok") if "error" not in r else r["error"][:120]] for r in f["results"]]))
    elif key == "capture" and ("captures" in f):
        parts.append(f"GPU vs numpy in the capturing run: {_results_text(f.get('driver_results', []))}\n")
        parts.append(md_table(["capture", "kernel", "GPU = emulator", "mismatches", "fidelity"],
                              [[c["file"], c.get("kernel"), c.get("ok"), c.get("mismatches", c.get("error")),
                                fidelity_text(c.get("fidelity"))] for c in f["captures"]]))
    return "\n".join(parts).rstrip() + "\n"


def _bullets(items: list[str] | None) -> list[str]:
    """A markdown list of ``items`` as code, after a blank line; nothing for none."""
    return ["", *[f"* `{x}`" for x in items]] if items else []


def _results_text(results: list[dict[str, Any]]) -> str:
    if not results:
        return "—"
    return ", ".join(f"{r.get('op')} {'ok' if r.get('ok') else 'FAIL'}" for r in results)


def _names(v: Any) -> str:
    items = list(v) if isinstance(v, (dict, list, tuple)) else [v]
    if not items:
        return "—"
    text = ", ".join(str(x) for x in items[:4])
    return text + (f" (+{len(items) - 4})" if len(items) > 4 else "")


def fidelity_text(fid: Any) -> str:
    """A one-line summary of a replay's ``fidelity`` dict: ``exact`` as a count of
    operations, ``approximate`` / ``reading`` / ``reached`` by name, the rest as is."""
    if not isinstance(fid, dict):
        return _fmt(fid)
    parts = []
    for k, v in fid.items():
        if k == "exact" and isinstance(v, (dict, list)):
            parts.append(f"exact: {len(v)} ops")
        elif isinstance(v, (dict, list, tuple)):
            parts.append(f"{k}: {_names(v)}")
        else:
            parts.append(f"{k}: {_fmt(v)}")
    return "; ".join(parts)[:400]


def summary_rows(records: list[dict[str, Any]]) -> list[list[Any]]:
    """(step, status, seconds, budget, why) per step record."""
    return [[r["name"], r["status"], "" if r.get("seconds") is None else f"{r['seconds']:.1f}",
             f"{r['budget_s']:.0f}", (r.get("why") or "")[:160]] for r in records]


def write_reports(out: Path, doc: dict[str, Any]) -> None:
    """``results.json`` and ``results.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
    m = doc["machine"]
    gpus = m.get("gpus")
    gpu = ", ".join(f"{g.get('name')} (driver {g.get('driver')})" for g in gpus) if isinstance(gpus, list) else gpus
    v = m.get("versions", {})
    pre = doc.get("preflight", {})
    lines = [f"## GPU check: {doc['started'][:10]}{' (dry run)' if doc['dry_run'] else ''}", "",
             (f"`python benchmarks/gpu_check.py {' '.join(doc['argv'])}` at {m.get('commit') or 'unknown commit'}"
              f"{' (with uncommitted changes)' if m.get('uncommitted_changes') else ''}: {gpu}; "
              f"Python {m.get('python')}, jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, "
              f"jax-cuda13-plugin {v.get('jax-cuda13-plugin')}, torch {v.get('torch')}, "
              f"{m.get('nvcc') or 'nvcc —'}."),
             "", (f"jaxptx detects {pre.get('detect_arch')}; JAX devices: {pre.get('jax_devices')}; "
                  f"ptxas: {pre.get('ptxas')}."),
             "", md_table(["step", "status", "seconds", "budget s", "why"], summary_rows(doc["steps"])), ""]
    if doc["dry_run"]:
        lines += [md_table(["tool", "path"], [[k, p or "not found"] for k, p in doc["tools"].items()]), "",
                  md_table(["module", "import"], [[k, s] for k, s in doc.get("imports", {}).items()]), ""]
    lines += [step_markdown(r) for r in doc["steps"]]
    (out / "results.md").write_text("\n".join(lines))

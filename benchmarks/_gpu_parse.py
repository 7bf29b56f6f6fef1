"""Readers of the tools' output, for ``benchmarks/gpu_check.py``.

pytest's summary line and short failure list, compute-sanitizer's summaries,
the metric rows of ``ncu --csv``, ncu's measurements beside the emulator's
predictions (:data:`NCU_METRICS` pairs them), the JSON document a command
printed (``python -m jaxptx.replay --json``), and an output's last line.
Functions of text alone: ``tests/test_gpu_check.py`` runs them on samples
in the tools' own formats.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

# Nsight Compute metrics, by the name of the emulator's figure they stand beside.
NCU_METRICS = {
    "global_ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_st_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "global_st_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "shared_ld_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "shared_st_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "shared_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_st_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "registers": "launch__registers_per_thread",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}


# -- pytest ----------------------------------------------------------------------------------

_PYTEST_LINE = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran)\s+in ([\d.]+)s\b")
_PYTEST_COUNT = re.compile(r"(\d+) ([a-z]+)")
_PYTEST_KEYS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors", "errors": "errors",
                "deselected": "deselected", "xfailed": "xfailed", "xpassed": "xpassed", "warning": "warnings",
                "warnings": "warnings"}


def parse_pytest_summary(text: str) -> dict[str, Any] | None:
    """Counts from pytest's final summary line (the last line that is one).

    Takes ``-q`` lines (``3 failed, 20 passed, 2 skipped in 41.20s``) and
    ``=====``-framed ones; ``no tests ran in 0.01s`` gives zeros. Returns
    ``{"passed", "failed", "skipped", "errors", "deselected", "xfailed",
    "xpassed", "warnings", "seconds", "line"}``, or None when no line is one.
    """
    for line in reversed(text.splitlines()):
        m = _PYTEST_LINE.match(line.strip())
        if not m:
            continue
        counts: dict[str, Any] = dict.fromkeys(sorted(set(_PYTEST_KEYS.values())), 0)
        for n, what in _PYTEST_COUNT.findall(m.group(1)):
            if what in _PYTEST_KEYS:
                counts[_PYTEST_KEYS[what]] += int(n)
        counts["seconds"] = float(m.group(2))
        counts["line"] = line.strip().strip("=").strip()
        return counts
    return None


def parse_pytest_failures(text: str, limit: int = 20) -> list[str]:
    """The ``FAILED ...`` and ``ERROR ...`` lines of pytest's short summary (``-ra``)."""
    out = [ln.strip() for ln in text.splitlines() if re.match(r"^(FAILED|ERROR) \S", ln.strip())]
    return out[:limit]



# -- compute-sanitizer -----------------------------------------------------------------------

_SAN_ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+) errors?")
_SAN_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def parse_sanitizer(text: str, limit: int = 8) -> dict[str, Any]:
    """compute-sanitizer's summary lines in ``text``.

    Returns ``errors`` (the last ``ERROR SUMMARY: N errors``, None when
    absent; for racecheck, which in CUDA 13 prints only its own summary, the
    ``RACECHECK SUMMARY``'s errors when there is no ``ERROR SUMMARY``),
    ``summary`` (that line), for racecheck ``hazards``,
    ``race_errors`` and ``race_warnings`` (``RACECHECK SUMMARY``, None when
    absent), and ``findings``: the first ``limit`` report lines (``=========
    Invalid __global__ read ...``, ``Error: Race reported ...``) that are not
    summaries or backtrace frames.
    """
    out: dict[str, Any] = {"errors": None, "summary": None, "hazards": None, "race_errors": None,
                           "race_warnings": None, "findings": []}
    race_summary = ""
    for line in text.splitlines():
        m = _SAN_ERRORS.search(line)
        if m:
            out["errors"] = int(m.group(1))
            out["summary"] = line.strip().lstrip("=").strip()
            continue
        m = _SAN_RACE.search(line)
        if m:
            out["hazards"], out["race_errors"], out["race_warnings"] = (int(g) for g in m.groups())
            race_summary = line.strip().lstrip("=").strip()
            continue
        body = line.strip().lstrip("=").strip()
        if line.startswith("=========") and body and len(out["findings"]) < limit and \
                re.match(r"(Invalid|Error|Warning|Race|Program hit|Out-of-range|Misaligned|Barrier|Uninitialized)",
                         body):
            out["findings"].append(body[:300])
    if out["errors"] is None and out["race_errors"] is not None:
        out["errors"], out["summary"] = out["race_errors"], race_summary
    return out



# -- Nsight Compute --------------------------------------------------------------------------

_GROUPED = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def to_number(text: str) -> float | None:
    """A metric value as ncu prints it (``1,536``, ``62.50``, ``n/a``) as a float, or None."""
    s = text.strip().strip('"').strip()
    if _GROUPED.match(s):
        s = s.replace(",", "")
    try:
        return float(s)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """The metric rows of ``ncu --csv --metrics ...`` output.

    Lines before the CSV header (``==PROF==`` messages, the application's
    own output) are skipped: the header is the first line that starts with
    ``"ID"`` and names ``"Metric Name"``. Each row becomes ``{"id",
    "kernel", "metric", "unit", "value" (float or None), "raw"}``; other
    columns (block and grid size, device...) are kept under their own names.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') and '"Metric Name"' in ln), None)
    if start is None:
        return []
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    rows = []
    for rec in csv.DictReader(io.StringIO("\n".join(body))):
        if rec.get("ID") == "ID" or rec.get("Metric Name") is None:
            continue
        row: dict[str, Any] = {k: v for k, v in rec.items() if k is not None}
        row.update({"id": rec.get("ID"), "kernel": rec.get("Kernel Name", ""), "metric": rec["Metric Name"],
                    "unit": rec.get("Metric Unit", ""), "raw": rec.get("Metric Value", ""),
                    "value": to_number(rec.get("Metric Value", ""))})
        rows.append(row)
    return rows


def ncu_by_kernel(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """``{kernel name: {metric: value}}`` of each kernel's first profiled launch."""
    first: dict[str, str] = {}
    out: dict[str, dict[str, float | None]] = {}
    for r in rows:
        name = r["kernel"]
        first.setdefault(name, r["id"])
        if r["id"] == first[name]:
            out.setdefault(name, {})[r["metric"]] = r["value"]
    return out


def _agree(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "—"
    return "yes" if abs(a - b) <= max(1e-9, 0.01 * max(abs(a), abs(b))) else "no"


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None:
        return None
    return num / den if den else 0.0


def compare_ncu(launches: list[dict[str, Any]], measured: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """Rows of (kernel, figure, emulator prediction, ncu measurement, agree) for
    every predicted launch (``gpu_sanitize_driver.py --mode predict``'s
    ``launches``) against :func:`ncu_by_kernel`'s measurements. ``agree`` is
    ``yes`` within 1%, ``no``, or ``—`` where a side has no figure (the
    emulator does not time, so achieved occupancy is ncu's alone)."""
    out = []
    for launch in launches:
        name, pred = launch["kernel"], launch["predicted"]
        got = measured.get(name)
        if got is None:   # demangled or decorated names: take a kernel whose name contains it
            got = next((v for k, v in measured.items() if name in k), {})

        def m(key: str, got: dict[str, float | None] = got) -> float | None:
            return got.get(NCU_METRICS[key])
        figures = [
            ("global ld sectors/request", pred.get("global_ld_sectors_per_request"),
             _ratio(m("global_ld_sectors"), m("global_ld_requests"))),
            ("global st sectors/request", pred.get("global_st_sectors_per_request"),
             _ratio(m("global_st_sectors"), m("global_st_requests"))),
        ]
        for key in NCU_METRICS:
            figures.append((key.replace("_", " ").replace(" pct", " %"), pred.get(key), m(key)))
        for label, p, n in figures:
            out.append({"kernel": name, "figure": label, "emulator": p, "ncu": n, "agree": _agree(p, n),
                        "measured": bool(got)})
    return out


# -- any command -----------------------------------------------------------------------------

def parse_json_output(text: str) -> Any:
    """The JSON document a command printed: the whole text, else the last
    line that parses, else the first ``{``-started document; None if none."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        if line.strip().startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    start = text.find("{")
    while start != -1:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find("{", start + 1)
    return None


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped and cut to 300 characters; ``(no output)`` if none."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"

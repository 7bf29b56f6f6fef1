"""The whole GPU verification of jaxptx in one command, in at most ~7.5 minutes.

Meant for a borrowed GPU machine with only preinstalled packages and no
network (jax with its CUDA plugin, torch, the CUDA toolkit with
``compute-sanitizer`` and ``ncu``). From the repository root::

    python benchmarks/gpu_check.py [--out gpu_check_out] [--only STEP,...] [--skip STEP,...]
    python benchmarks/gpu_check.py --dry-run        # no GPU: check and print what would run

Steps, in order, each one or more subprocesses with its own time budget; a
failed or timed-out step is recorded and the next one runs:

1. ``build``: ``pip install --no-build-isolation --no-deps -e .``, then
   ``import jaxptx._ffi``;
2. ``tests``: every ``gpu``-marked test (``pytest -m gpu``);
3. ``kernels``: ``benchmarks/kernels.py`` (the kernel library against
   cuBLAS / cuDNN / XLA: times, TFLOPS, GB/s, fraction of peak);
4. ``memcheck`` and 5. ``racecheck``: ``compute-sanitizer`` over
   ``benchmarks/gpu_sanitize_driver.py`` (library kernels through
   ``jax.jit`` on the GPU, checked against numpy);
6. ``ncu``: Nsight Compute's global sectors per request, shared-memory bank
   conflicts and occupancy for the driver's kernels, beside
   ``jaxptx.profile``'s predictions for the same launches on the emulator;
7. ``torch``: library kernels through ``jaxptx.torch.op`` on CUDA tensors;
8. ``capture``: the driver with ``JAXPTX_CAPTURE_DIR`` set, then
   ``python -m jaxptx.replay FILE --json`` for each capture written.

``--out DIR`` gets ``results.json`` (machine, versions, each step's command,
status ``ok``/``failed``/``timeout``/``skipped``, seconds, parsed figures and
the tail of its output), ``results.md`` (tables ready for
``benchmarks/RESULTS.md``) and ``logs/`` (each step's full output). Exit
status 0 when every step that ran passed, else 1. ``--dry-run`` builds and
runs nothing on a GPU: it checks imports, the scripts, which tools are
found, and writes the same files with every step ``would run``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import glob
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DRIVER = Path("benchmarks") / "gpu_sanitize_driver.py"
KERNELS = Path("benchmarks") / "kernels.py"
TAIL_CHARS = 3000

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


# -- parsers of the tools' output ------------------------------------------------------------

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


_SAN_ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+) errors?")
_SAN_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def parse_sanitizer(text: str, limit: int = 8) -> dict[str, Any]:
    """compute-sanitizer's summary lines in ``text``.

    Returns ``errors`` (the last ``ERROR SUMMARY: N errors``, None when
    absent), ``summary`` (that line), for racecheck ``hazards``,
    ``race_errors`` and ``race_warnings`` (``RACECHECK SUMMARY``, None when
    absent), and ``findings``: the first ``limit`` report lines (``=========
    Invalid __global__ read ...``, ``Error: Race reported ...``) that are not
    summaries or backtrace frames.
    """
    out: dict[str, Any] = {"errors": None, "summary": None, "hazards": None, "race_errors": None,
                           "race_warnings": None, "findings": []}
    for line in text.splitlines():
        m = _SAN_ERRORS.search(line)
        if m:
            out["errors"] = int(m.group(1))
            out["summary"] = line.strip().lstrip("=").strip()
            continue
        m = _SAN_RACE.search(line)
        if m:
            out["hazards"], out["race_errors"], out["race_warnings"] = (int(g) for g in m.groups())
            continue
        body = line.strip().lstrip("=").strip()
        if line.startswith("=========") and body and len(out["findings"]) < limit and \
                re.match(r"(Invalid|Error|Warning|Race|Program hit|Out-of-range|Misaligned|Barrier|Uninitialized)",
                         body):
            out["findings"].append(body[:300])
    return out


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
        for key in ("global_ld_requests", "global_ld_sectors", "global_st_requests", "global_st_sectors",
                    "shared_ld_bank_conflicts", "shared_st_bank_conflicts", "shared_ld_wavefronts",
                    "shared_st_wavefronts", "registers", "theoretical_occupancy_pct", "achieved_occupancy_pct"):
            figures.append((key.replace("_", " ").replace(" pct", " %"), pred.get(key), m(key)))
        for label, p, n in figures:
            out.append({"kernel": name, "figure": label, "emulator": p, "ncu": n, "agree": _agree(p, n),
                        "measured": bool(got)})
    return out


# -- running commands ------------------------------------------------------------------------

@dataclass
class Cmd:
    """One subprocess of a step: ``argv``, environment additions, a label."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""

    def text(self) -> str:
        """The command line as a shell would take it, environment additions first."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


@dataclass
class Ran:
    """What one command did: exit code (None: timed out), seconds, its output."""

    cmd: Cmd
    rc: int | None
    seconds: float
    output: str
    timed_out: bool = False


class Context:
    """What every step needs: paths, the interpreter, tools, the child environment, the log."""

    def __init__(self, out: Path, python: str, repeat: int, dry_run: bool) -> None:
        self.out = out
        self.python = python
        self.repeat = repeat
        self.dry_run = dry_run
        self.logs = out / "logs"
        self.tools = {name: find_tool(name) for name in ("nvidia-smi", "compute-sanitizer", "ncu", "nvcc",
                                                         "ptxas", "cmake", "ninja")}
        self.env_added: dict[str, str] = {}
        self.env_removed: list[str] = []
        self.env = self._child_env()
        self.preflight: dict[str, Any] = {}

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        cuda = _cuda_home()
        if cuda and not env.get("CUDA_HOME") and (Path(cuda) / "include" / "cuda.h").exists():
            self.env_added["CUDA_HOME"] = cuda           # the build's cuda.h declaration checks
        if cuda and (Path(cuda) / "bin").is_dir() and str(Path(cuda) / "bin") not in env.get("PATH", ""):
            self.env_added["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{Path(cuda) / 'bin'}"
        self.env_added.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1",
                               "PYTHONUNBUFFERED": "1"})
        env.update(self.env_added)
        if "JAXPTX_ARCH" in env:    # it turns GPU detection off (tests/conftest.py); this run is for the GPU
            del env["JAXPTX_ARCH"]
            self.env_removed.append("JAXPTX_ARCH")
        return env

    def env_summary(self) -> dict[str, str]:
        """The environment changes for the children, ``PATH`` shown as what was appended."""
        out = dict(self.env_added)
        if "PATH" in out:
            out["PATH"] = "(appended) " + out["PATH"].rsplit(os.pathsep, 1)[-1]
        return out

    def run(self, cmd: Cmd, timeout: float, log_name: str) -> Ran:
        """Run ``cmd`` from the repository root with at most ``timeout`` seconds,
        stdout and stderr together, appended to ``logs/<log_name>.log``."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{log_name}.log"
        env = dict(self.env)
        env.update(cmd.env)
        t0 = time.monotonic()
        with open(log, "ab") as f:
            f.write(f"\n$ {cmd.text()}\n".encode())
            f.flush()
            start = f.tell()
            if timeout <= 0:
                f.write(b"(not started: no time left in this step's budget)\n")
                return Ran(cmd, None, 0.0, "(not started: no time left in this step's budget)", True)
            try:
                proc = subprocess.Popen(cmd.argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                f.write(f"could not start: {e}\n".encode())
                return Ran(cmd, 127, time.monotonic() - t0, f"could not start {cmd.argv[0]}: {e}")
            timed_out = False
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
                _stop(proc)
            seconds = time.monotonic() - t0
            if timed_out:
                f.write(f"\n(timed out after {timeout:.0f} s; stopped)\n".encode())
        with open(log, "rb") as f:
            f.seek(start)
            output = f.read().decode(errors="replace")
        return Ran(cmd, rc, seconds, output, timed_out)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the process group this script started for ``proc``: TERM, up to 5 s
    for ``proc`` to exit, then KILL whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _cuda_home() -> str | None:
    for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if c and Path(c).is_dir():
            return c
    return None


def find_tool(name: str) -> str | None:
    """The path of an executable: ``PATH``, then ``$CUDA_HOME/bin``,
    ``/usr/local/cuda/bin``, and Nsight Compute's own install folders; None if absent."""
    found = shutil.which(name)
    if found:
        return found
    cands = [Path(c) / "bin" / name for c in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if c]
    if name == "ncu":
        cands += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*/nsight-compute*/ncu"))
                  + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


# -- the steps -------------------------------------------------------------------------------

@dataclass
class Outcome:
    """A step's verdict: status, why (for anything but ok), figures, the commands run."""

    status: str
    why: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    ran: list[Ran] = field(default_factory=list)


class Clock:
    """A step's deadline."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.end - time.monotonic())


@dataclass
class Step:
    """One step: key (for ``--only``/``--skip``), name, budget in seconds, the
    commands it runs (as known before it runs) and the function that runs it."""

    key: str
    name: str
    budget: float
    plan: Callable[[Context], list[Cmd]]
    execute: Callable[[Context, Clock], Outcome]
    needs: Callable[[Context], list[str]] = lambda ctx: []


def _py(ctx: Context, *args: str) -> list[str]:
    return [ctx.python, *args]


def _last_ran_failed(ran: Ran) -> str:
    if ran.timed_out:
        return f"`{ran.cmd.label or ran.cmd.argv[0]}` timed out after {ran.seconds:.0f} s"
    return f"`{ran.cmd.label or ran.cmd.argv[0]}` exited {ran.rc}: {_last_line(ran.output)}"


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _status(ran: list[Ran]) -> str:
    return "timeout" if any(r.timed_out for r in ran) else "failed"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# 1. build

def plan_build(ctx: Context) -> list[Cmd]:
    """pip's editable build with the preinstalled build tools, then the import of the shim."""
    return [Cmd(_py(ctx, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", "."), label="pip install"),
            Cmd(_py(ctx, "-c", "import jaxptx._ffi as f; print(f.__file__)"), label="import jaxptx._ffi")]


def run_build(ctx: Context, clock: Clock) -> Outcome:
    """Build the nanobind shim in place; ok when pip succeeds and ``jaxptx._ffi`` imports."""
    pip, imp = plan_build(ctx)
    ran = [ctx.run(pip, clock.left(), "build")]
    figures: dict[str, Any] = {}
    if ran[0].rc != 0 and "externally-managed-environment" in ran[0].output and not ran[0].timed_out:
        # a distribution's Python (PEP 668) on a throwaway machine: the same install, allowed
        pip = Cmd(pip.argv + ["--break-system-packages"], label="pip install")
        figures["retried_with"] = "--break-system-packages (PEP 668 externally managed Python)"
        ran.append(ctx.run(pip, clock.left(), "build"))
    if ran[-1].rc != 0:
        return Outcome(_status(ran), _last_ran_failed(ran[-1]), figures, ran)
    figures["pip_seconds"] = round(ran[-1].seconds, 1)
    ran.append(ctx.run(imp, clock.left(), "build"))
    if ran[-1].rc != 0:
        return Outcome(_status(ran), _last_ran_failed(ran[-1]), figures, ran)
    figures["ffi"] = _last_line(ran[-1].output)
    return Outcome("ok", "", figures, ran)


# 2. gpu tests

def gpu_test_files() -> list[str]:
    """Test files that mark tests ``gpu`` (``pytest.mark.gpu``), relative to the repository.

    Naming them saves collecting the whole suite (thousands of tests) to run
    the few dozen ``gpu`` ones; ``-m gpu`` still selects within them.
    """
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in p.read_text(errors="replace"))


def plan_tests(ctx: Context) -> list[Cmd]:
    """``pytest -m gpu`` over the files with ``gpu`` tests."""
    return [Cmd(_py(ctx, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *gpu_test_files()),
                {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, label="pytest -m gpu")]


def run_tests(ctx: Context, clock: Clock) -> Outcome:
    """Every gpu test; ok when some ran, none failed and none errored."""
    if not gpu_test_files():
        return Outcome("failed", "no test file under tests/ marks a test gpu")
    r = ctx.run(plan_tests(ctx)[0], clock.left(), "tests")
    counts = parse_pytest_summary(r.output)
    figures: dict[str, Any] = dict(counts or {})
    figures["failures"] = parse_pytest_failures(r.output)
    if r.timed_out:
        return Outcome("timeout", f"pytest timed out after {r.seconds:.0f} s", figures, [r])
    if counts is None:
        return Outcome("failed", f"no pytest summary line; exit {r.rc}: {_last_line(r.output)}", figures, [r])
    if r.rc != 0 or counts["failed"] or counts["errors"]:
        return Outcome("failed", f"{counts['line']} (exit {r.rc})", figures, [r])
    if not counts["passed"]:
        seen = ctx.preflight.get("detect_arch", "not checked")
        cuda = ctx.preflight.get("imports", {}).get("cuda.bindings", "not checked")
        return Outcome("failed", f"no gpu test passed ({counts['line']}): jaxptx's detect_arch() gave {seen} "
                       f"(it needs cuda.bindings: {cuda}, and a driver)", figures, [r])
    return Outcome("ok", "", figures, [r])


# 3. kernels vs XLA

def plan_kernels(ctx: Context) -> list[Cmd]:
    """``benchmarks/kernels.py`` with JSON rows."""
    return [Cmd(_py(ctx, str(KERNELS), "--repeat", str(ctx.repeat), "--json", str(ctx.out / "kernels.json")),
                label="kernels.py")]


def run_kernels(ctx: Context, clock: Clock) -> Outcome:
    """The library against XLA; ok when it ran on the GPU and every row has a time."""
    (ctx.out / "kernels.json").unlink(missing_ok=True)
    r = ctx.run(plan_kernels(ctx)[0], clock.left(), "kernels")
    report = _read_json(ctx.out / "kernels.json") or {}
    rows = report.get("rows", [])
    figures = {"device_kind": report.get("device_kind"), "peak_tflops_gbs": report.get("peak_tflops_gbs"),
               "rows": rows, "table": [ln for ln in r.output.splitlines() if ln.strip()][-40:]}
    errors = [f"{x['op']} {x['shape']}: {x['error']}" for x in rows if "error" in x]
    if r.timed_out:
        return Outcome("timeout", f"timed out after {r.seconds:.0f} s with {len(rows)} rows", figures, [r])
    if r.rc != 0:
        return Outcome("failed", _last_ran_failed(r), figures, [r])
    if not report.get("gpu"):
        return Outcome("failed", "kernels.py ran without a GPU (JAX saw none): the figures are the emulator's",
                       figures, [r])
    if not rows:
        return Outcome("failed", "kernels.py wrote no rows", figures, [r])
    if errors:
        return Outcome("failed", f"{len(errors)} of {len(rows)} rows failed: " + "; ".join(errors[:3]), figures, [r])
    return Outcome("ok", "", figures, [r])


# 4./5. compute-sanitizer

def _driver(ctx: Context, mode: str, json_name: str, device: str = "gpu") -> list[str]:
    return _py(ctx, str(DRIVER), "--mode", mode, "--device", device, "--json", str(ctx.out / json_name))


def _plan_sanitizer(tool: str) -> Callable[[Context], list[Cmd]]:
    def plan(ctx: Context) -> list[Cmd]:
        exe = ctx.tools["compute-sanitizer"] or "compute-sanitizer"
        return [Cmd([exe, "--tool", tool, "--print-limit", "50",
                     *_driver(ctx, "check", f"{tool}_driver.json")],
                    {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, label=f"compute-sanitizer --tool {tool}")]
    plan.__doc__ = f"compute-sanitizer --tool {tool} over the driver's check mode."
    return plan


def _run_sanitizer(tool: str) -> Callable[[Context, Clock], Outcome]:
    def run(ctx: Context, clock: Clock) -> Outcome:
        if not ctx.tools["compute-sanitizer"]:
            return Outcome("failed", "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
        (ctx.out / f"{tool}_driver.json").unlink(missing_ok=True)
        r = ctx.run(_plan_sanitizer(tool)(ctx)[0], clock.left(), tool)
        san = parse_sanitizer(r.output)
        driver = _read_json(ctx.out / f"{tool}_driver.json") or {}
        figures = {**san, "driver_ok": driver.get("ok"), "driver_results": driver.get("results", []),
                   "arch": driver.get("arch")}
        if r.timed_out:
            return Outcome("timeout", f"timed out after {r.seconds:.0f} s", figures, [r])
        if san["errors"] is None:
            return Outcome("failed", f"no ERROR SUMMARY line; exit {r.rc}: {_last_line(r.output)}", figures, [r])
        if san["errors"]:
            return Outcome("failed", f"{san['summary']}; first: {san['findings'][:1]}", figures, [r])
        if r.rc != 0 or not driver.get("ok"):
            return Outcome("failed", f"the driver failed (exit {r.rc}): {_driver_errors(driver, r)}", figures, [r])
        return Outcome("ok", "", figures, [r])
    run.__doc__ = f"compute-sanitizer {tool}; ok with 0 errors and every driver result matching numpy."
    return run


def _driver_errors(driver: dict, r: Ran) -> str:
    bad = [f"{x.get('op')}: " + (x.get("error") or f"max abs err {x.get('max_abs_err')}")
           for x in driver.get("results", []) if not x.get("ok")]
    return "; ".join(bad)[:400] if bad else _last_line(r.output)


# 6. ncu beside the emulator's profile

def _ncu_cmd(ctx: Context, names: list[str] | None) -> Cmd:
    exe = ctx.tools["ncu"] or "ncu"
    regex = "|".join(re.escape(n) for n in names) if names else "<the kernels the prediction names>"
    return Cmd([exe, "--csv", "--target-processes", "all", "--metrics", ",".join(NCU_METRICS.values()),
                "-k", f"regex:{regex}", *_driver(ctx, "check", "ncu_driver.json")],
               {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, label="ncu")


def plan_ncu(ctx: Context) -> list[Cmd]:
    """The emulator's prediction (CPU), then ncu over the driver on the GPU."""
    return [Cmd(_driver(ctx, "predict", "ncu_predict.json", "cpu"), {"JAX_PLATFORMS": "cpu"},
                label="predict (emulator)"), _ncu_cmd(ctx, None)]


def run_ncu(ctx: Context, clock: Clock) -> Outcome:
    """Predict on the emulator, measure with ncu; ok when both ran and every
    predicted kernel was measured (the figures themselves are compared, not judged)."""
    (ctx.out / "ncu_predict.json").unlink(missing_ok=True)
    pred_cmd = plan_ncu(ctx)[0]
    # the prediction may use at most half the step: ncu needs the rest
    ran = [ctx.run(pred_cmd, clock.left() / 2, "ncu")]
    pred = _read_json(ctx.out / "ncu_predict.json") or {}
    launches = pred.get("launches", [])
    names = [x["kernel"] for x in launches] or ["rms_norm", "softmax", "matmul"]
    figures: dict[str, Any] = {"predicted": launches, "arch": pred.get("arch")}
    problems = []
    if ran[0].rc != 0 or not launches:
        problems.append(f"prediction: {_last_ran_failed(ran[0])}")
    if not ctx.tools["ncu"]:
        return Outcome("failed", "; ".join(problems + ["ncu not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"]),
                       figures, ran)
    r = ctx.run(_ncu_cmd(ctx, names), clock.left(), "ncu")
    ran.append(r)
    rows = parse_ncu_csv(r.output)
    measured = ncu_by_kernel(rows)
    figures["measured"] = measured
    figures["comparison"] = compare_ncu(launches, measured)
    if "ERR_NVGPUCTRPERM" in r.output:
        problems.append("ncu: no permission for GPU performance counters (ERR_NVGPUCTRPERM: needs root or "
                        "NVreg_RestrictProfilingToAdminUsers=0)")
    elif r.timed_out:
        problems.append(f"ncu timed out after {r.seconds:.0f} s")
    elif r.rc != 0:
        problems.append(f"ncu: {_last_ran_failed(r)}")
    elif not rows:
        problems.append("ncu printed no metric rows (no kernel matched the -k filter?)")
    missing = [x["kernel"] for x in launches if not any(x["kernel"] in k for k in measured)]
    if launches and rows and missing:
        problems.append(f"ncu measured no launch of {', '.join(missing)}")
    if problems:
        return Outcome(_status(ran), "; ".join(problems), figures, ran)
    return Outcome("ok", "", figures, ran)


# 7. torch

def plan_torch(ctx: Context) -> list[Cmd]:
    """The driver's torch mode on CUDA tensors."""
    return [Cmd(_driver(ctx, "torch", "torch.json"), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
                label="jaxptx.torch on CUDA")]


def run_torch(ctx: Context, clock: Clock) -> Outcome:
    """jaxptx.torch.op on CUDA tensors; ok when every result matches."""
    (ctx.out / "torch.json").unlink(missing_ok=True)
    r = ctx.run(plan_torch(ctx)[0], clock.left(), "torch")
    res = _read_json(ctx.out / "torch.json") or {}
    figures = {"results": res.get("results", []), "arch": res.get("arch")}
    if r.timed_out:
        return Outcome("timeout", f"timed out after {r.seconds:.0f} s", figures, [r])
    if r.rc != 0 or not res.get("ok"):
        return Outcome("failed", f"exit {r.rc}: {_driver_errors(res, r)}", figures, [r])
    return Outcome("ok", "", figures, [r])


# 8. capture + replay

def plan_capture(ctx: Context) -> list[Cmd]:
    """The driver with ``JAXPTX_CAPTURE_DIR`` set, then one replay per capture (shown for a placeholder)."""
    return [Cmd(_driver(ctx, "check", "capture_driver.json"),
                {"JAXPTX_CAPTURE_DIR": str(ctx.out / "captures"), "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
                label="capture"),
            Cmd(_py(ctx, "-m", "jaxptx.replay", str(ctx.out / "captures" / "<each>.jxcap"), "--json"),
                label="replay")]


def run_capture(ctx: Context, clock: Clock) -> Outcome:
    """Capture the driver's launches on the GPU, replay each on the emulator;
    ok when captures were written and every replay says ``ok``."""
    cap_dir = ctx.out / "captures"
    if cap_dir.is_dir():
        for old in cap_dir.rglob("*.jxcap"):
            old.unlink()
    (ctx.out / "capture_driver.json").unlink(missing_ok=True)
    ran = [ctx.run(plan_capture(ctx)[0], clock.left(), "capture")]
    driver = _read_json(ctx.out / "capture_driver.json") or {}
    files = sorted(cap_dir.rglob("*.jxcap")) if cap_dir.is_dir() else []
    figures: dict[str, Any] = {"driver_ok": driver.get("ok"), "driver_results": driver.get("results", []),
                               "captures": [], "arch": driver.get("arch")}
    problems = []
    if ran[0].timed_out or ran[0].rc != 0:
        problems.append(f"driver: {_last_ran_failed(ran[0])}")
    if not files:
        problems.append(f"no *.jxcap written under {cap_dir} (jaxptx/capture.py present: "
                        f"{(REPO / 'jaxptx' / 'capture.py').exists()})")
    for f in files:
        cmd = Cmd(_py(ctx, "-m", "jaxptx.replay", str(f), "--json"), label=f"replay {f.name}")
        r = ctx.run(cmd, clock.left(), "capture")
        ran.append(r)
        doc = parse_json_output(r.output)
        entry: dict[str, Any] = {"file": f.name, "rc": r.rc, "seconds": round(r.seconds, 1)}
        if isinstance(doc, dict):
            entry.update({"kernel": doc.get("kernel"), "ok": doc.get("ok"),
                          "mismatches": len(doc.get("mismatches") or []),
                          "first_mismatches": (doc.get("mismatches") or [])[:3], "fidelity": doc.get("fidelity")})
        else:
            entry.update({"ok": False, "error": _last_line(r.output) if not r.timed_out else "timed out"})
        figures["captures"].append(entry)
        if entry.get("ok") is not True:
            problems.append(f"replay {f.name}: " + (entry.get("error") or f"{entry.get('mismatches')} mismatches"))
    if problems:
        return Outcome(_status(ran), "; ".join(problems)[:1000], figures, ran)
    return Outcome("ok", "", figures, ran)


def _needs_file(*paths: Path) -> Callable[[Context], list[str]]:
    return lambda ctx: [f"missing {p}" for p in paths if not (REPO / p).exists()]


STEPS: list[Step] = [
    Step("build", "build", 70, plan_build, run_build, _needs_file(Path("pyproject.toml"), Path("CMakeLists.txt"))),
    Step("tests", "gpu tests", 100, plan_tests, run_tests,
         lambda ctx: [] if gpu_test_files() else ["no gpu-marked test file under tests/"]),
    Step("kernels", "kernels vs XLA", 45, plan_kernels, run_kernels, _needs_file(KERNELS)),
    Step("memcheck", "memcheck", 50, _plan_sanitizer("memcheck"), _run_sanitizer("memcheck"), _needs_file(DRIVER)),
    Step("racecheck", "racecheck", 50, _plan_sanitizer("racecheck"), _run_sanitizer("racecheck"), _needs_file(DRIVER)),
    Step("ncu", "ncu", 55, plan_ncu, run_ncu, _needs_file(DRIVER)),
    Step("torch", "torch", 25, plan_torch, run_torch, _needs_file(DRIVER)),
    Step("capture", "capture/replay", 45, plan_capture, run_capture, _needs_file(DRIVER)),
]
"""The steps in order; budgets (seconds) sum to 440, under 7.5 minutes."""


# -- machine facts ---------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info(ctx: Context) -> dict[str, Any]:
    """GPU name and driver (nvidia-smi), Python, package versions, the repository commit."""
    info: dict[str, Any] = {"python": sys.version.split()[0], "executable": ctx.python,
                            "platform": platform.platform(), "cpus": os.cpu_count()}
    smi = ctx.tools["nvidia-smi"]
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 check=False, capture_output=True, text=True, timeout=20)
            gpus = [dict(zip(("name", "driver", "memory"), (s.strip() for s in ln.split(","))))
                    for ln in out.stdout.strip().splitlines() if ln.strip()]
            info["gpus"] = gpus if out.returncode == 0 else \
                f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[:200]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            info["gpus"] = f"nvidia-smi failed: {e}"
    else:
        info["gpus"] = "nvidia-smi not found"
    if ctx.tools["nvcc"]:
        try:
            out = subprocess.run([ctx.tools["nvcc"], "--version"], check=False, capture_output=True, text=True,
                                 timeout=20)
            info["nvcc"] = _last_line(out.stdout)
        except (OSError, subprocess.TimeoutExpired) as e:
            info["nvcc"] = f"failed: {e}"
    info["versions"] = {d: _version(d) for d in ("jaxptx", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                                                 "torch", "triton", "numpy", "nanobind", "scikit-build-core",
                                                 "cuda-bindings", "nvidia-cuda-nvcc")}
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=False, capture_output=True,
                             text=True, timeout=10)
        info["commit"] = out.stdout.strip() or None
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               check=False, capture_output=True, text=True, timeout=20)
        info["uncommitted_changes"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        info["commit"] = None
    return info


_PREFLIGHT = """
import importlib, importlib.util, json, sys
out = {"imports": {}}
for m in sys.argv[1:]:
    optional = m.startswith("?")
    m = m.lstrip("?")
    try:
        if optional:
            out["imports"][m] = "found" if importlib.util.find_spec(m) is not None else "not found"
        else:
            importlib.import_module(m)
            out["imports"][m] = "ok"
    except Exception as e:
        out["imports"][m] = f"{type(e).__name__}: {e}"[:300]
try:
    from jaxptx.runtime import detect_arch, find_tool
    out["detect_arch"] = detect_arch()
    try:
        out["ptxas"] = find_tool("ptxas")
    except Exception as e:
        out["ptxas"] = f"not found: {e}"[:300]
except Exception as e:
    out["detect_arch"] = f"{type(e).__name__}: {e}"[:300]
try:
    import jax
    out["jax_devices"] = [f"{d.platform}: {getattr(d, 'device_kind', '')}" for d in jax.devices()]
except Exception as e:
    out["jax_devices"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""
PREFLIGHT_MODULES = ["numpy", "jax", "jaxptx", "?jaxptx._ffi", "?cuda.bindings", "?cuda.pathfinder", "?ml_dtypes",
                     "?torch", "?jaxptx.capture", "?jaxptx.replay"]
"""What :func:`preflight` imports (a ``?``: only whether it is found)."""


def preflight(ctx: Context) -> dict[str, Any]:
    """In a child process: import numpy, jax and jaxptx (the optional modules:
    whether they are found), the target jaxptx detects (``detect_arch``: None
    means jaxptx sees no GPU, and the ``gpu`` tests skip), the ptxas it uses,
    and JAX's devices."""
    env = dict(ctx.env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    try:
        out = subprocess.run([ctx.python, "-c", _PREFLIGHT, *PREFLIGHT_MODULES], cwd=REPO, env=env,
                             check=False, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"imports": {}, "error": "preflight timed out after 60 s"}
    doc = parse_json_output(out.stdout)
    if isinstance(doc, dict):
        return doc
    return {"imports": {}, "error": f"preflight failed: {_last_line(out.stderr or out.stdout)}"}


# -- reports ---------------------------------------------------------------------------------

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
        if f.get("failures"):
            parts += ["", *[f"* `{x}`" for x in f["failures"]]]
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
        if f.get("findings"):
            parts += ["", *[f"* `{x}`" for x in f["findings"]]]
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


# -- main ------------------------------------------------------------------------------------

def select(only: str | None, skip: str | None) -> set[str]:
    """The keys of the steps to run from ``--only`` / ``--skip`` (keys or names, comma-separated).

    Raises:
        SystemExit: a name that is no step's.
    """
    by = {s.key: s.key for s in STEPS} | {s.name: s.key for s in STEPS}

    def keys(text: str | None) -> set[str]:
        out = set()
        for part in (text or "").split(","):
            part = part.strip().lower()
            if part:
                if part not in by:
                    raise SystemExit(f"gpu_check: no step {part!r}; steps: {', '.join(s.key for s in STEPS)}")
                out.add(by[part])
        return out
    chosen = keys(only) or {s.key for s in STEPS}
    return chosen - keys(skip)


def parse_budgets(items: list[str]) -> dict[str, float]:
    """``{step key: seconds}`` from ``--budget STEP=SECONDS`` items (a key or a name).

    Raises:
        SystemExit: not ``STEP=SECONDS``, no such step, or not a positive number.
    """
    out = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or seconds <= 0:
            raise SystemExit(f"gpu_check: --budget takes STEP=SECONDS (seconds > 0), got {item!r}")
        (key,) = select(name, None)
        out[key] = seconds
    return out


def _record(step: Step, ctx: Context, budget: float, status: str, commands: list[Cmd], why: str = "",
            seconds: float | None = None, timeout: float | None = None, outcome: Outcome | None = None) -> dict:
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


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--dry-run`` describe) the steps; write the reports; 0 when all passed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="steps: " + ", ".join(f"{s.key} ({s.name})" for s in STEPS))
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="where the results go")
    ap.add_argument("--only", help="run only these steps (comma-separated keys or names)")
    ap.add_argument("--skip", help="skip these steps (comma-separated)")
    ap.add_argument("--dry-run", action="store_true", help="check and describe; build and run nothing on a GPU")
    ap.add_argument("--repeat", type=int, default=5, help="kernels.py --repeat (default 5)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiply every step's budget (default 1)")
    ap.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS",
                    help="one step's budget, e.g. --budget kernels=120 (repeatable; after --time-scale)")
    args = ap.parse_args(argv)
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    chosen = select(args.only, args.skip)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(out, sys.executable, args.repeat, args.dry_run)
    budgets = {s.key: s.budget * args.time_scale for s in STEPS}
    budgets.update(parse_budgets(args.budget))
    total = sum(budgets[k] for k in chosen)
    print(f"gpu_check: {'dry run, ' if args.dry_run else ''}results in {out}")
    print("budget (s): " + ", ".join(f"{s.key} {budgets[s.key]:.0f}" for s in STEPS if s.key in chosen)
          + f"; total {total:.0f} ({total / 60:.1f} min; time a step leaves unused carries to the next; "
          f"plus a preflight of seconds)")
    if ctx.env_added or ctx.env_removed:
        print("child environment: " + ", ".join([f"+{k}" for k in ctx.env_added]
                                                + [f"-{k}" for k in ctx.env_removed]))
    doc: dict[str, Any] = {"tool": "benchmarks/gpu_check.py", "argv": raw_argv, "dry_run": args.dry_run,
                           "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                           "machine": machine_info(ctx), "tools": ctx.tools,
                           "env_added": ctx.env_summary(),
                           "env_removed": ctx.env_removed,
                           "budget_s": {"total": total, "steps": {k: budgets[k] for k in budgets if k in chosen}},
                           "steps": []}
    problems: list[str] = []
    print("tools: " + ", ".join(f"{k} {'found' if p else 'not found'}" for k, p in ctx.tools.items()))

    def check_first() -> None:
        """The preflight, once: before the first step, or after the build when it runs first."""
        if "preflight" in doc:
            return
        pre = ctx.preflight = doc["preflight"] = preflight(ctx)
        doc["imports"] = pre.get("imports", {})
        print("imports: " + ", ".join(f"{k} {v}" for k, v in doc["imports"].items())
              + (f"; {pre['error']}" if "error" in pre else ""))
        print(f"jaxptx detects: {pre.get('detect_arch')}; ptxas: {pre.get('ptxas')}; "
              f"JAX devices: {pre.get('jax_devices')}", flush=True)
        if args.dry_run:
            for m in ("numpy", "jax", "jaxptx"):
                if doc["imports"].get(m) != "ok":
                    problems.append(f"import {m}: {doc['imports'].get(m, pre.get('error', 'not checked'))}")

    slack = 0.0
    for i, step in enumerate(STEPS, 1):
        if step.key != "build" or args.dry_run:
            check_first()
        if step.key not in chosen:
            doc["steps"].append(_record(step, ctx, budgets[step.key], "skipped", step.plan(ctx),
                                        "not selected (--only/--skip)"))
            continue
        cmds = step.plan(ctx)
        if args.dry_run:
            needs = step.needs(ctx)
            problems += [f"{step.name}: {n}" for n in needs]
            doc["steps"].append(_record(step, ctx, budgets[step.key], "would run", cmds, "; ".join(needs)))
            print(f"[{i}/{len(STEPS)}] {step.name}: would run (budget {budgets[step.key]:.0f} s)"
                  + "".join(f"\n    {c.text()}" for c in cmds)
                  + (f"\n    PROBLEM: {'; '.join(needs)}" if needs else ""))
            continue
        timeout = budgets[step.key] + slack
        print(f"[{i}/{len(STEPS)}] {step.name} (timeout {timeout:.0f} s) ...", flush=True)
        t0 = time.monotonic()
        try:
            outcome = step.execute(ctx, Clock(timeout))
        except Exception as e:  # noqa: BLE001 - a bug in one step's handling must not stop the rest
            outcome = Outcome("failed", f"gpu_check error in this step: {type(e).__name__}: {e}")
        took = time.monotonic() - t0
        slack = max(0.0, timeout - took)
        doc["steps"].append(_record(step, ctx, budgets[step.key], outcome.status, cmds, outcome.why, took, timeout,
                                    outcome))
        print(f"    -> {outcome.status} in {took:.1f} s" + (f": {outcome.why[:300]}" if outcome.why else ""),
              flush=True)
        write_reports(out, doc)           # after each step: a run cut short keeps what it did
    check_first()
    doc["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    ran = [r for r in doc["steps"] if r["status"] not in ("skipped", "would run")]
    doc["passed"] = (not problems) if args.dry_run else all(r["status"] == "ok" for r in ran)
    doc["problems"] = problems
    write_reports(out, doc)
    print()
    widths = [16, 10, 8, 9]
    print(f"{'step':16} {'status':10} {'seconds':>8} {'budget s':>9}  why")
    for row in summary_rows(doc["steps"]):
        print(f"{row[0]:{widths[0]}} {row[1]:{widths[1]}} {row[2]:>{widths[2]}} {row[3]:>{widths[3]}}  {row[4]}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"\n{'passed' if doc['passed'] else 'FAILED'}; results: {out / 'results.json'}, {out / 'results.md'}")
    return 0 if doc["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

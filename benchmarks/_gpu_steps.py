"""The steps of ``benchmarks/gpu_check.py``: what each runs and how its output is judged.

Each :class:`Step` has a key (for ``--only``/``--skip``), a name, a budget in
seconds, a ``plan`` (the commands it will run, as known before it runs: what
``--dry-run`` shows), an ``execute`` that runs them against a :class:`Clock`
and reads their output into an :class:`Outcome` (``ok``, ``failed`` or
``timeout``, why, the figures), and ``needs`` (the files it cannot run
without). :data:`STEPS` lists them in the order they run.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _gpu_machine import NO_PREALLOCATE, REPO, Cmd, Context, Ran
from _gpu_parse import (
    NCU_METRICS,
    compare_ncu,
    last_line,
    ncu_by_kernel,
    parse_json_output,
    parse_ncu_csv,
    parse_pytest_failures,
    parse_pytest_summary,
    parse_sanitizer,
)

DRIVER = Path("benchmarks") / "gpu_sanitize_driver.py"
KERNELS = Path("benchmarks") / "kernels.py"
_NOT_FOUND = "{} not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"


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
    return f"`{ran.cmd.label or ran.cmd.argv[0]}` exited {ran.rc}: {last_line(ran.output)}"


def _status(ran: list[Ran]) -> str:
    return "timeout" if any(r.timed_out for r in ran) else "failed"


def _run_json(ctx: Context, cmd: Cmd, timeout: float, log_name: str) -> tuple[Ran, dict[str, Any]]:
    """Run ``cmd``, which writes JSON to the path after its ``--json`` (removed
    first, so that an earlier run's is never read); the document ({} if none)."""
    path = Path(cmd.argv[cmd.argv.index("--json") + 1])
    path.unlink(missing_ok=True)
    r = ctx.run(cmd, timeout, log_name)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = None
    return r, doc or {}


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
    figures["ffi"] = last_line(ran[-1].output)
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
                dict(NO_PREALLOCATE), label="pytest -m gpu")]


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
        return Outcome("failed", f"no pytest summary line; exit {r.rc}: {last_line(r.output)}", figures, [r])
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
    """``benchmarks/kernels.py`` with JSON rows (``--smoke`` too in a smoke run)."""
    smoke = ["--smoke"] if ctx.smoke else []
    return [Cmd(_py(ctx, str(KERNELS), "--repeat", str(ctx.repeat), *smoke, "--json", str(ctx.out / "kernels.json")),
                label="kernels.py")]


def run_kernels(ctx: Context, clock: Clock) -> Outcome:
    """The library against XLA; ok when it ran on the GPU and every row has a time."""
    r, report = _run_json(ctx, plan_kernels(ctx)[0], clock.left(), "kernels")
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
                    dict(NO_PREALLOCATE), label=f"compute-sanitizer --tool {tool}")]
    plan.__doc__ = f"compute-sanitizer --tool {tool} over the driver's check mode."
    return plan


def _run_sanitizer(tool: str) -> Callable[[Context, Clock], Outcome]:
    def run(ctx: Context, clock: Clock) -> Outcome:
        if not ctx.tools["compute-sanitizer"]:
            return Outcome("failed", _NOT_FOUND.format("compute-sanitizer"))
        r, driver = _run_json(ctx, _plan_sanitizer(tool)(ctx)[0], clock.left(), tool)
        san = parse_sanitizer(r.output)
        figures = {**san, "driver_ok": driver.get("ok"), "driver_results": driver.get("results", []),
                   "arch": driver.get("arch")}
        if r.timed_out:
            return Outcome("timeout", f"timed out after {r.seconds:.0f} s", figures, [r])
        if san["errors"] is None:
            return Outcome("failed", f"no ERROR SUMMARY line; exit {r.rc}: {last_line(r.output)}", figures, [r])
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
    return "; ".join(bad)[:400] if bad else last_line(r.output)


# 6. ncu beside the emulator's profile

def _ncu_cmd(ctx: Context, names: list[str] | None) -> Cmd:
    exe = ctx.tools["ncu"] or "ncu"
    regex = "|".join(re.escape(n) for n in names) if names else "<the kernels the prediction names>"
    return Cmd([exe, "--csv", "--target-processes", "all", "--metrics", ",".join(NCU_METRICS.values()),
                "-k", f"regex:{regex}", *_driver(ctx, "check", "ncu_driver.json")],
               dict(NO_PREALLOCATE), label="ncu")


def plan_ncu(ctx: Context) -> list[Cmd]:
    """The emulator's prediction (CPU), then ncu over the driver on the GPU."""
    return [Cmd(_driver(ctx, "predict", "ncu_predict.json", "cpu"), {"JAX_PLATFORMS": "cpu"},
                label="predict (emulator)"), _ncu_cmd(ctx, None)]


def run_ncu(ctx: Context, clock: Clock) -> Outcome:
    """Predict on the emulator, measure with ncu; ok when both ran and every
    predicted kernel was measured (the figures themselves are compared, not judged)."""
    # the prediction may use at most half the step: ncu needs the rest
    r, pred = _run_json(ctx, plan_ncu(ctx)[0], clock.left() / 2, "ncu")
    ran = [r]
    launches = pred.get("launches", [])
    names = [x["kernel"] for x in launches] or ["rms_norm", "softmax", "matmul"]
    figures: dict[str, Any] = {"predicted": launches, "arch": pred.get("arch")}
    problems = []
    if ran[0].rc != 0 or not launches:
        problems.append(f"prediction: {_last_ran_failed(ran[0])}")
    if not ctx.tools["ncu"]:
        return Outcome("failed", "; ".join([*problems, _NOT_FOUND.format("ncu")]), figures, ran)
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
    return [Cmd(_driver(ctx, "torch", "torch.json"), dict(NO_PREALLOCATE), label="jaxptx.torch on CUDA")]


def run_torch(ctx: Context, clock: Clock) -> Outcome:
    """jaxptx.torch.op on CUDA tensors; ok when every result matches."""
    r, res = _run_json(ctx, plan_torch(ctx)[0], clock.left(), "torch")
    figures = {"results": res.get("results", []), "arch": res.get("arch")}
    if r.timed_out:
        return Outcome("timeout", f"timed out after {r.seconds:.0f} s", figures, [r])
    if r.rc != 0 or not res.get("ok"):
        return Outcome("failed", f"exit {r.rc}: {_driver_errors(res, r)}", figures, [r])
    return Outcome("ok", "", figures, [r])


# 8. capture + replay

def _replay(ctx: Context, capture: Path, label: str) -> Cmd:
    return Cmd(_py(ctx, "-m", "jaxptx.replay", str(capture), "--json"), label=label)


def plan_capture(ctx: Context) -> list[Cmd]:
    """The driver with ``JAXPTX_CAPTURE_DIR`` set, then one replay per capture (shown for a placeholder)."""
    return [Cmd(_driver(ctx, "check", "capture_driver.json"),
                {"JAXPTX_CAPTURE_DIR": str(ctx.out / "captures"), **NO_PREALLOCATE}, label="capture"),
            _replay(ctx, ctx.out / "captures" / "<each>.jxcap", "replay")]


def run_capture(ctx: Context, clock: Clock) -> Outcome:
    """Capture the driver's launches on the GPU, replay each on the emulator;
    ok when captures were written and every replay says ``ok``."""
    cap_dir = ctx.out / "captures"
    if cap_dir.is_dir():
        for old in cap_dir.rglob("*.jxcap"):
            old.unlink()
    r, driver = _run_json(ctx, plan_capture(ctx)[0], clock.left(), "capture")
    ran = [r]
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
        r = ctx.run(_replay(ctx, f, f"replay {f.name}"), clock.left(), "capture")
        ran.append(r)
        doc = parse_json_output(r.output)
        entry: dict[str, Any] = {"file": f.name, "rc": r.rc, "seconds": round(r.seconds, 1)}
        if isinstance(doc, dict):
            entry.update({"kernel": doc.get("kernel"), "ok": doc.get("ok"),
                          "mismatches": len(doc.get("mismatches") or []),
                          "first_mismatches": (doc.get("mismatches") or [])[:3], "fidelity": doc.get("fidelity")})
        else:
            entry.update({"ok": False, "error": last_line(r.output) if not r.timed_out else "timed out"})
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

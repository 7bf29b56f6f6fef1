"""Every benchmark script in its quick smoke mode (issue 29: "a benchmark
nobody runs rots").

Each script runs in a subprocess with ``--smoke`` (tiny sizes, one repeat,
peers that are not installed skipped with a note, GPU-only parts skipped
without a GPU) and must exit 0 and print each of its ``self-check:`` lines:
the checks of its results against numpy/jnp/XLA that the script makes
itself. ``gpu_check.py`` runs ``--smoke --dry-run`` so that a machine with a
GPU does not build and benchmark inside the test suite (without a GPU
``--smoke`` alone is the same dry run). ``benchmarks/gemm_kernels.py`` is a
module, not a script: ``emulator_speed.py`` and ``profile_kernels.py`` launch
both of its kernels. ``gpu_sanitize_driver.py`` has its own CPU test in
``tests/test_gpu_check.py``.

The whole file takes about two minutes on a 2-core machine (peers.py alone about one).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"

# script, extra arguments, the self-check lines (substrings) its smoke run must print
SMOKE: list[tuple[str, list[str], list[str]]] = [
    ("dispatch.py", [], ["self-check: kernel under jax.jit equals the jnp op, emulator output equals numpy",
                         "self-check: vmap loop and grid-z launches equal x * 2 + 1",
                         "self-check: the TMA copy kernel's output equals its input"]),
    ("trace_speed.py", [], ["self-check: every emitted kernel holds its adds and fmas"]),
    ("emulator_speed.py", [], ["self-check: softmax on the emulator", "self-check: the mma.sync GEMM matches numpy",
                               "self-check: the spin-wait kernel's sum is right",
                               "self-check: both warp-specialised GEMMs match numpy"]),
    ("kernels.py", [], ["rows match XLA"]),
    ("profile_kernels.py", [], ["self-check: part 1:", "self-check: part 2:", "self-check: part 3:"]),
    ("explore_speed.py", [], ["self-check: the inverted kernel deadlocks on some seeds, its ordered twin on none",
                              "self-check: the GEMM matches numpy on every schedule"]),
    ("system_speed.py", [], ["self-check: every device's vector equals the float32 recurrence in numpy",
                             "self-check: the all-gather and the all-reduce match numpy on every device",
                             "self-check: both checked launches report no finding"]),
    ("parse_speed.py", [], ["self-check: jaxptx parsed"]),
    ("collectives.py", [], ["self-check: ", "rows match jax.lax within their tolerances"]),
    ("gpu_check.py", ["--dry-run"], ["\npassed; results:"]),
    ("memory.py", [], ["self-check: every estimate is within ±30% of its measured peak",
                       "self-check: a launch over JAXPTX_SIM_MAX_MEMORY is refused before it runs"]),
    ("peers.py", [], ["self-check: gemm: every variant and Pallas match numpy",
                      "self-check: triton: ", "self-check: warp: softmax, sum and naive matmul match numpy",
                      "self-check: softmax: jaxptx and Pallas match numpy",
                      "self-check: trace: every emitted kernel holds its adds and fmas",
                      "self-check: parse: jaxptx parsed",
                      "self-check: dispatch: the jitted kernel and the bare launch equal x * 2 + 1",
                      "self-check: transformer: the jaxptx block matches the jnp block"]),
    ("transformer_block.py", [], ["self-check: the jaxptx block matches the jnp block"]),
]


def test_every_benchmark_script_has_a_smoke_run() -> None:
    """No script in ``benchmarks/`` is left out of :data:`SMOKE` (helpers
    start with ``_``; the two modules others import are named)."""
    helpers = {"gemm_kernels.py", "gpu_sanitize_driver.py"}
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")} - helpers
    assert scripts == {name for name, _, _ in SMOKE}


@pytest.mark.parametrize("script, extra, checks", SMOKE, ids=[name for name, _, _ in SMOKE])
def test_smoke(script: str, extra: list[str], checks: list[str], tmp_path: pathlib.Path) -> None:
    """``python benchmarks/SCRIPT --smoke`` exits 0 and prints its self-checks."""
    if script == "gpu_check.py":
        extra = [*extra, "--out", str(tmp_path / "gpu_check_out")]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *extra], cwd=BENCH, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{script} --smoke exited {r.returncode} after {took:.0f} s:\n{out[-4000:]}"
    missing = [c for c in checks if c not in r.stdout]
    assert not missing, f"{script} --smoke did not print {missing}:\n{r.stdout[-4000:]}"
    assert "FAILED" not in r.stdout, r.stdout[-4000:]

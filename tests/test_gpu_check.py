"""benchmarks/gpu_check.py: its dry run (what CI can check without a GPU) and
the parsers it reads the tools' output with (benchmarks/_gpu_parse.py), on
samples in the tools' own formats."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _gpu_parse
import _gpu_report
import gpu_check
import gpu_sanitize_driver

STEP_NAMES = ["build", "gpu tests", "kernels vs XLA", "memcheck", "racecheck", "ncu", "torch", "capture/replay"]


def test_dry_run_lists_every_step_with_its_command(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--dry-run", "--out", str(out)],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["dry_run"] is True and doc["passed"] is True
    assert [s["name"] for s in doc["steps"]] == STEP_NAMES
    for s in doc["steps"]:
        assert s["status"] == "would run", s
        assert s["command"].strip(), s
    by = {s["key"]: s for s in doc["steps"]}
    assert "pip install --no-build-isolation --no-deps -e ." in by["build"]["command"]
    assert "pytest -m gpu -q -p no:cacheprovider" in by["tests"]["command"]
    assert "kernels.py --repeat" in by["kernels"]["command"]
    assert "--tool memcheck" in by["memcheck"]["command"] and "--tool racecheck" in by["racecheck"]["command"]
    assert "--csv" in by["ncu"]["command"] and "--mode predict" in by["ncu"]["command"]
    assert "--mode torch" in by["torch"]["command"]
    assert "JAXPTX_CAPTURE_DIR=" in by["capture"]["command"] and "jaxptx.replay" in by["capture"]["command"]
    assert set(doc["tools"]) >= {"compute-sanitizer", "ncu", "nvidia-smi"}
    assert doc["imports"]["jaxptx"] == "ok"
    assert sum(doc["budget_s"]["steps"].values()) <= 7.5 * 60
    md = (out / "results.md").read_text()
    assert "| step | status |" in md and "would run" in md
    assert not (out / "logs").exists(), "a dry run must not run the steps"


def test_only_and_skip_select_steps_by_key_or_name() -> None:
    assert gpu_check.select("build,gpu tests", None) == {"build", "tests"}
    assert gpu_check.select(None, "ncu,capture/replay") == {s.key for s in gpu_check.STEPS} - {"ncu", "capture"}
    with pytest.raises(SystemExit, match="no step 'nope'"):
        gpu_check.select("nope", None)
    assert gpu_check.parse_budgets(["kernels=120", "gpu tests=90.5"]) == {"kernels": 120.0, "tests": 90.5}
    for bad, message in (("kernels", r"--budget takes STEP=SECONDS \(seconds > 0\), got 'kernels'"),
                         ("kernels=0", r"--budget takes STEP=SECONDS \(seconds > 0\), got 'kernels=0'"),
                         ("kernels=soon", r"--budget takes STEP=SECONDS \(seconds > 0\), got 'kernels=soon'"),
                         ("nope=5", r"no step 'nope'; steps: build, ")):
        with pytest.raises(SystemExit, match=r"^gpu_check: " + message):
            gpu_check.parse_budgets([bad])


# -- pytest ----------------------------------------------------------------------------------

PYTEST_OUT = """\
........s..F.....sss
=================================== FAILURES ===================================
____________________________ test_norms_match_jnp[auto] ___________________________
E   AssertionError: Not equal to tolerance rtol=0.03, atol=0.03
=========================== short test summary info ============================
SKIPPED [3] tests/kernels/test_gpu.py:46: needs an NVIDIA GPU and driver (none found)
FAILED tests/kernels/test_gpu.py::test_norms_match_jnp[auto] - AssertionError: Not equal to tolerance
ERROR tests/jax/test_tma_calls.py::test_tma_2d - RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS
1 failed, 15 passed, 4 skipped, 44 deselected, 2 warnings, 1 error in 83.41s (0:01:23)
"""


def test_pytest_summary_quiet_line() -> None:
    c = _gpu_parse.parse_pytest_summary(PYTEST_OUT)
    assert c is not None
    assert (c["passed"], c["failed"], c["skipped"], c["errors"], c["deselected"], c["warnings"]) == (15, 1, 4, 1, 44, 2)
    assert c["seconds"] == 83.41
    assert _gpu_parse.parse_pytest_failures(PYTEST_OUT) == [
        "FAILED tests/kernels/test_gpu.py::test_norms_match_jnp[auto] - AssertionError: Not equal to tolerance",
        "ERROR tests/jax/test_tma_calls.py::test_tma_2d - RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS"]


def test_pytest_summary_framed_and_empty_runs() -> None:
    framed = "collected 30 items / 9 deselected\n\n==== 21 passed, 9 deselected in 4.20s ====\n"
    c = _gpu_parse.parse_pytest_summary(framed)
    assert c is not None and (c["passed"], c["deselected"], c["failed"]) == (21, 9, 0)
    none = _gpu_parse.parse_pytest_summary("\nno tests ran in 0.01s\n")
    assert none is not None and none["passed"] == 0 and none["seconds"] == 0.01
    assert _gpu_parse.parse_pytest_summary("ImportError while loading conftest\n") is None
    # a count inside a test's own output is not the summary; the last summary line wins
    c = _gpu_parse.parse_pytest_summary("3 passed in 1.00s\nprint: 7 passed\n5 passed, 1 xfailed in 2.00s\n")
    assert c is not None and (c["passed"], c["xfailed"]) == (5, 1)


# -- compute-sanitizer -----------------------------------------------------------------------

MEMCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
OK   check rms_norm on gpu (sm_90a): max abs err 9.54e-07
OK   check matmul on gpu (sm_90a): max abs err 6.2e-06
========= ERROR SUMMARY: 0 errors
"""

MEMCHECK_ERROR = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 16 bytes
=========     at rms_norm_f32_sm_90a_t64+0x2d0
=========     by thread (64,0,0) in block (15,0,0)
=========     Address 0x7f3c2e010000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3c2e000000 of size 65536 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f5a1] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call \
to cuStreamSynchronize.
========= ERROR SUMMARY: 2 errors
"""

RACECHECK_HAZARDS = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at matmul_sm90_bf16+0x1a40
=========     and Read access at matmul_sm90_bf16+0x1b80 [2048 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
========= ERROR SUMMARY: 1 error
"""

# compute-sanitizer 13.0's racecheck on an H200 (2026-11-28): its own summary, no ERROR SUMMARY
RACECHECK_CLEAN_CUDA13 = """\
========= COMPUTE-SANITIZER
OK   rms_norm on gpu (sm_90a): max abs err 9.54e-07
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""


def test_sanitizer_summaries() -> None:
    clean = _gpu_parse.parse_sanitizer(MEMCHECK_CLEAN)
    assert clean["errors"] == 0 and clean["findings"] == [] and clean["hazards"] is None
    assert clean["summary"] == "ERROR SUMMARY: 0 errors"
    bad = _gpu_parse.parse_sanitizer(MEMCHECK_ERROR)
    assert bad["errors"] == 2
    assert bad["findings"][0] == "Invalid __global__ write of size 16 bytes"
    assert bad["findings"][1].startswith("Program hit CUDA_ERROR_LAUNCH_FAILED")
    race = _gpu_parse.parse_sanitizer(RACECHECK_HAZARDS)
    assert (race["errors"], race["hazards"], race["race_errors"], race["race_warnings"]) == (1, 1, 1, 0)
    assert race["findings"] == ["Error: Race reported between Write access at matmul_sm90_bf16+0x1a40"]
    assert _gpu_parse.parse_sanitizer("Segmentation fault\n")["errors"] is None
    race13 = _gpu_parse.parse_sanitizer(RACECHECK_CLEAN_CUDA13)
    assert (race13["errors"], race13["hazards"]) == (0, 0)
    assert race13["summary"] == "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    race13_bad = _gpu_parse.parse_sanitizer(RACECHECK_HAZARDS.replace("========= ERROR SUMMARY: 1 error\n", ""))
    assert race13_bad["errors"] == 1


# -- Nsight Compute --------------------------------------------------------------------------

_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
         '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(i: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return (f'"{i}","31337","python3.12","127.0.0.1","{kernel}","1","13","(64, 1, 1)","(16, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


NCU_OUT = "\n".join([
    "==PROF== Connected to process 31337 (/usr/bin/python3.12)",
    "==PROF== Profiling \"rms_norm_f32_sm_90a_t64\" - 0: 0%....50%....100% - 9 passes",
    "OK   check rms_norm on gpu (sm_90a): max abs err 9.54e-07",
    "==PROF== Profiling \"rms_norm_f32_sm_90a_t64\" - 1: 0%....50%....100% - 9 passes",
    "==PROF== Disconnected from process 31337",
    _HEAD,
    _row(0, "rms_norm_f32_sm_90a_t64", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "1,024"),
    _row(0, "rms_norm_f32_sm_90a_t64", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "16,384"),
    _row(0, "rms_norm_f32_sm_90a_t64", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "2"),
    _row(0, "rms_norm_f32_sm_90a_t64", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "11.84"),
    _row(0, "rms_norm_f32_sm_90a_t64", "launch__registers_per_thread", "register/thread", "48"),
    _row(0, "rms_norm_f32_sm_90a_t64", "sm__maximum_warps_per_active_cycle_pct", "%", "62.50"),
    _row(1, "rms_norm_f32_sm_90a_t64", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "999"),
    _row(2, "matmul_sm90_bf16", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "0"),
    _row(2, "matmul_sm90_bf16", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "0"),
    _row(2, "matmul_sm90_bf16", "sm__warps_active.avg.pct_of_peak_sustained_active", "%", "n/a"),
])


def test_ncu_csv_rows_and_first_launch_per_kernel() -> None:
    rows = _gpu_parse.parse_ncu_csv(NCU_OUT)
    assert len(rows) == 10
    assert rows[1]["metric"] == "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
    assert rows[1]["value"] == 16384.0 and rows[1]["raw"] == "16,384" and rows[1]["Block Size"] == "(64, 1, 1)"
    by = _gpu_parse.ncu_by_kernel(rows)
    assert by["rms_norm_f32_sm_90a_t64"]["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 1024.0  # launch 0
    assert by["matmul_sm90_bf16"]["sm__warps_active.avg.pct_of_peak_sustained_active"] is None
    assert _gpu_parse.parse_ncu_csv("==PROF== ERROR: ERR_NVGPUCTRPERM - no permission\n") == []
    assert _gpu_parse.to_number("62.50") == 62.5 and _gpu_parse.to_number("1,234,567") == 1234567.0
    assert _gpu_parse.to_number("n/a") is None


def test_ncu_beside_the_emulator() -> None:
    predicted = {"global_ld_requests": 1024, "global_ld_sectors": 16384, "global_ld_sectors_per_request": 16.0,
                 "shared_st_bank_conflicts": 0, "registers": 48, "theoretical_occupancy_pct": 62.5}
    rows = _gpu_parse.compare_ncu([{"kernel": "rms_norm_f32_sm_90a_t64", "predicted": predicted}],
                                  _gpu_parse.ncu_by_kernel(_gpu_parse.parse_ncu_csv(NCU_OUT)))
    by = {r["figure"]: r for r in rows}
    assert by["global ld sectors/request"]["ncu"] == 16.0 and by["global ld sectors/request"]["agree"] == "yes"
    assert by["shared st bank conflicts"]["agree"] == "no"
    assert by["registers"]["agree"] == "yes" and by["theoretical occupancy %"]["agree"] == "yes"
    assert by["achieved occupancy %"]["emulator"] is None and by["achieved occupancy %"]["agree"] == "—"


# -- replay JSON, the driver's classification ------------------------------------------------

def test_json_output_and_fidelity_text() -> None:
    doc = {"ok": True, "kernel": "softmax_f32_sm_90a_t64", "mismatches": [],
           "fidelity": {"exact": {"add.f32": 3, "mul.f32": 2}, "approximate": {"ex2.approx.f32": {"count": 8}},
                        "reading": {}, "reached": [], "is_exact": False}}
    assert _gpu_parse.parse_json_output(json.dumps(doc)) == doc
    assert _gpu_parse.parse_json_output("warming up\n" + json.dumps(doc) + "\n") == doc
    assert _gpu_parse.parse_json_output("replay: " + json.dumps(doc, indent=1) + "\ndone") == doc
    assert _gpu_parse.parse_json_output("Traceback (most recent call last):\nModuleNotFoundError") is None
    assert _gpu_report.fidelity_text(doc["fidelity"]) == \
        "exact: 2 ops; approximate: ex2.approx.f32; reading: —; reached: —; is_exact: False"


@pytest.mark.parametrize("text, want", [
    ("ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];", ("global", "ld")),
    ("@%p1 ld.global.nc.f32 %f1, [%rd2];", ("global", "ld")),
    ("st.global.v4.f32 [%rd3], {%f1, %f2, %f3, %f4};", ("global", "st")),
    ("st.shared.v2.f32 [%r74+0], {%f1, %f2};", ("shared", "st")),
    ("ld.shared::cta.u32 %r1, [%r2];", ("shared", "ld")),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];", None),
    ("cp.async.cg.shared.global [%r1], [%rd1], 16;", None),
    ("ld.param.u64 %rd1, [x];", None),
])
def test_driver_splits_loads_and_stores(text: str, want: tuple[str, str] | None) -> None:
    assert gpu_sanitize_driver._space_op(text) == want


def test_driver_runs_on_the_emulator_and_predicts(tmp_path: pathlib.Path) -> None:
    """The driver's check and torch modes on the CPU (the GPU run's code, on the
    emulator) and its predict mode: one entry per kernel with the figures ncu is
    compared with."""
    driver = str(BENCH / "gpu_sanitize_driver.py")
    for mode in ("check", "predict", "torch"):
        r = subprocess.run([sys.executable, driver, "--mode", mode, "--device", "cpu", "--arch", "sm_90a",
                            "--json", str(tmp_path / f"{mode}.json")],
                           check=False, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads((tmp_path / f"{mode}.json").read_text())
        ops = ["rms_norm", "softmax"] + (["matmul"] if mode != "torch" else [])
        assert doc["ok"] and [x["op"] for x in doc["results"]] == ops, doc
        if mode == "predict":
            launches = {x["kernel"]: x["predicted"] for x in doc["launches"]}
    assert set(launches) == {"rms_norm_f32_sm_90a_t64", "softmax_f32_sm_90a_t64", "matmul_sm90_bf16"}
    norm = launches["rms_norm_f32_sm_90a_t64"]
    assert norm["global_ld_sectors_per_request"] == 16.0     # 16-byte loads, fully coalesced
    assert norm["global_ld_requests"] > 0 and norm["global_st_requests"] > 0
    gemm = launches["matmul_sm90_bf16"]
    assert gemm["global_ld_requests"] == 0                  # TMA, not LSU loads
    assert set(_gpu_parse.NCU_METRICS) <= set(norm) | {"achieved_occupancy_pct"}   # every ncu figure has its pair

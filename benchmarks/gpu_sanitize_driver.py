"""A small driver of library kernels for the GPU tools that wrap a process.

``benchmarks/gpu_check.py`` runs it under ``compute-sanitizer`` (memcheck,
racecheck), under Nsight Compute (``ncu``), with ``JAXPTX_CAPTURE_DIR`` set
(capture and replay), and for the PyTorch CUDA path. It calls three ops of
:mod:`jaxptx.kernels` — ``rms_norm`` and ``softmax`` (f32, 64 x 1024) and
``matmul`` (bf16, 256 x 256 x 128) — each once through ``jax.jit``, and
checks every result against numpy (float64).

Modes:

* ``check`` (default): run the calls on ``--device`` (``gpu``: the CUDA FFI
  handler; ``cpu``: the emulator) and compare with numpy.
* ``predict``: run the same calls on the CPU emulator with the profiler on
  (``jaxptx.profile``'s counts, ptxas's registers and the occupancy they
  allow) and write, per launched kernel, the figures Nsight Compute
  measures: global load/store requests and sectors, shared-memory bank
  conflicts of loads and stores, theoretical occupancy, registers.
* ``torch``: the ``rms_norm`` and ``softmax`` library kernels through
  :func:`jaxptx.torch.op` on torch tensors (CUDA with ``--device gpu``),
  against torch's own formulas.

Every mode prints one line per call and, with ``--json PATH``, writes
``{"mode", "device", "arch", "ok", "results": [...]}``; ``predict`` adds
``"launches"``. Exit status 0 when every call ran and matched.

    python benchmarks/gpu_sanitize_driver.py [--mode check|predict|torch]
        [--device gpu|cpu] [--arch auto] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Sizes: small, so that sanitizers and the emulator take seconds, not minutes.
ROWS, COLS = 64, 1024
M, N, K = 256, 256, 128
EPS = 1e-6


def _inputs() -> dict[str, np.ndarray]:
    """The host inputs every mode uses (seeded)."""
    import ml_dtypes
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((ROWS, COLS), dtype=np.float32),
        "w": rng.standard_normal(COLS, dtype=np.float32),
        "a": rng.standard_normal((M, K), dtype=np.float32).astype(ml_dtypes.bfloat16),
        "b": rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16),
    }


def reference(op: str, inp: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 numpy result of ``op`` (``rms_norm``, ``softmax``, ``matmul``) on ``inp``."""
    x = inp["x"].astype(np.float64)
    if op == "rms_norm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * inp["w"].astype(np.float64)
    if op == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if op == "matmul":
        return inp["a"].astype(np.float64) @ inp["b"].astype(np.float64)
    raise ValueError(f"unknown op {op!r}")


TOLERANCE = {"rms_norm": (2e-4, 2e-4), "softmax": (2e-4, 1e-6), "matmul": (2e-3, 2e-2)}
"""(rtol, atol) per op against the float64 reference."""


def compare(op: str, got: Any, want: np.ndarray) -> dict[str, Any]:
    """One result row: ``op``, ``shape``, ``max_abs_err`` and ``ok`` (within :data:`TOLERANCE`)."""
    got = np.asarray(got, dtype=np.float64)
    rtol, atol = TOLERANCE[op]
    if got.shape != want.shape:
        return {"op": op, "shape": list(want.shape), "ok": False,
                "error": f"shape {got.shape}, expected {want.shape}"}
    err = float(np.abs(got - want).max())
    ok = bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)) and np.isfinite(got).all())
    return {"op": op, "shape": list(want.shape), "max_abs_err": err, "ok": ok}


def jax_calls(arch: str) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """(op, function of host arrays, input names) for the three library calls."""
    from jaxptx import kernels
    return [
        ("rms_norm", lambda x, w: kernels.rms_norm(x, w, EPS, arch=arch), ("x", "w")),
        ("softmax", lambda x: kernels.softmax(x, arch=arch), ("x",)),
        ("matmul", lambda a, b: kernels.matmul(a, b, arch=arch), ("a", "b")),
    ]


def resolved_arch(arch: str) -> str:
    """The variant ``arch`` picks for the library ops (``"auto"`` resolved)."""
    from jaxptx.kernels._arch import variant
    return variant(arch, "matmul")


def run_check(device: str, arch: str) -> list[dict[str, Any]]:
    """``check`` mode: each call through ``jax.jit`` on ``device``, against numpy."""
    import jax
    try:
        dev = jax.devices(device)[0]
    except RuntimeError as e:
        raise SystemExit(f"no {device} device visible to JAX ({e}); "
                         f"platforms here: {[d.platform for d in jax.devices()]}") from None
    inp = _inputs()
    rows = []
    for op, fn, names in jax_calls(arch):
        try:
            args = [jax.device_put(inp[n], dev) for n in names]
            got = jax.block_until_ready(jax.jit(fn)(*args))
            row = compare(op, np.asarray(got), reference(op, inp))
        except Exception as e:  # noqa: BLE001 - one failed call is a row; the others still run
            row = {"op": op, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
            traceback.print_exc()
        rows.append(row)
    return rows


# -- predict ----------------------------------------------------------------------------------

def _space_op(instruction: str) -> tuple[str, str] | None:
    """``(space, "ld" | "st")`` of a plain ``ld``/``st`` instruction text, else None.

    ``space`` is ``global`` or ``shared``; ``ldmatrix``, ``cp.async``, atomics
    and the rest are None (Nsight Compute counts them under other ``op_*``
    metrics than the ``op_ld`` / ``op_st`` ones compared here).
    """
    text = instruction.strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1] if " " in text else ""
    parts = text.split(None, 1)[0].split(".") if text else []
    if not parts or parts[0] not in ("ld", "ldu", "st"):
        return None
    kind = "st" if parts[0] == "st" else "ld"
    if "global" in parts[1:]:
        return "global", kind
    if "shared" in parts[1:] or any(p.startswith("shared::") for p in parts[1:]):
        return "shared", kind
    return None


def prediction(p: Any) -> dict[str, Any]:
    """The figures of one emulator :class:`jaxptx.profile.Profile` that Nsight
    Compute also measures, split into loads and stores per PTX line."""
    out: dict[str, Any] = {}
    for kind in ("ld", "st"):
        out.update({f"global_{kind}_requests": 0, f"global_{kind}_sectors": 0})
        out.update({f"shared_{kind}_requests": 0, f"shared_{kind}_wavefronts": 0,
                    f"shared_{kind}_bank_conflicts": 0})
    for e in p.lines:
        which = _space_op(e["instruction"])
        if which is None:
            continue
        space, kind = which
        if space == "global":
            out[f"global_{kind}_requests"] += e["global_requests"]
            out[f"global_{kind}_sectors"] += e["global_sectors"]
        else:
            out[f"shared_{kind}_requests"] += e["shared_requests"]
            out[f"shared_{kind}_wavefronts"] += e["shared_wavefronts"]
            out[f"shared_{kind}_bank_conflicts"] += e["shared_bank_conflicts"]
    for kind in ("ld", "st"):
        req = out[f"global_{kind}_requests"]
        out[f"global_{kind}_sectors_per_request"] = out[f"global_{kind}_sectors"] / req if req else 0.0
    k = p.kernel
    out["shared_bank_conflicts_all"] = k["shared_bank_conflicts"]
    out["global_requests_all"] = k["global_requests"]
    r = p.resources or {}
    out["registers"] = r.get("registers")
    occ = next(iter((p.occupancy or {}).values()), None)
    out["theoretical_occupancy_pct"] = 100.0 * occ["occupancy"] if occ else None
    out["occupancy_limited_by"] = occ["limited_by"] if occ else None
    if "error" in r:
        out["ptxas_error"] = r["error"]
    return out


def run_predict(arch: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``predict`` mode: the calls on the CPU emulator with the profiler on.

    Returns the result rows (checked against numpy, as in ``check``) and one
    entry per distinct launched kernel: ``op``, ``kernel`` (the PTX entry
    name), ``arch``, the launch shape and :func:`prediction`'s figures.
    """
    import jax

    from jaxptx import profile

    inp = _inputs()
    rows: list[dict[str, Any]] = []
    launches: list[dict[str, Any]] = []
    seen: set[str] = set()
    cpu = jax.devices("cpu")[0]
    for op, fn, names in jax_calls(arch):
        with profile.profiling() as collected:      # every emulator launch of the call, profiled
            try:
                args = [jax.device_put(inp[n], cpu) for n in names]
                got = jax.block_until_ready(jax.jit(fn)(*args))
                rows.append(compare(op, np.asarray(got), reference(op, inp)))
            except Exception as e:  # noqa: BLE001 - reported as a row
                rows.append({"op": op, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
                traceback.print_exc()
                continue
        collected.attach_resources()                # ptxas: registers, occupancy
        for p in collected.profiles:
            if p.name in seen:                      # one entry per kernel
                continue
            seen.add(p.name)
            launches.append({"op": op, "kernel": p.name, "arch": p.arch, **p.launch,
                             "predicted": prediction(p)})
    return rows, launches


# -- torch ------------------------------------------------------------------------------------

def run_torch(device: str, arch: str) -> list[dict[str, Any]]:
    """``torch`` mode: ``rms_norm`` and ``softmax`` kernels through
    :func:`jaxptx.torch.op` on torch tensors of ``device``, against torch."""
    import torch

    import jaxptx.torch as jt
    from jaxptx.kernels._norms_kernels import row_kernel
    from jaxptx.kernels._norms_rows import plan

    if device == "gpu" and not torch.cuda.is_available():
        raise SystemExit(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
    tdev = "cuda" if device == "gpu" else "cpu"
    variant = resolved_arch(arch)
    p = plan(COLS, "f32")
    inp = _inputs()
    x = torch.from_numpy(inp["x"]).to(tdev)
    w = torch.from_numpy(inp["w"]).to(tdev)
    rows = []
    for op, args, kw in (("rms_norm", (x, w), {"eps": EPS}), ("softmax", (x,), {})):
        try:
            k = row_kernel(op, "f32", variant, p.threads, p.cached)
            y = jt.op(k)(*args, **kw)
            if isinstance(y, tuple):        # rms_norm's row kernel also writes rstd (for the vjp)
                y = y[0]
            if tdev == "cuda":
                torch.cuda.synchronize()
            row = compare(op, y.cpu().numpy(), reference(op, inp))
            row["kernel"] = k.name
            row["tensor_device"] = str(y.device)
        except Exception as e:  # noqa: BLE001 - reported as a row
            row = {"op": op, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
            traceback.print_exc()
        rows.append(row)
    return rows


# -- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the mode, print and write the results; 0 when all matched."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("check", "predict", "torch"), default="check")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                    help="where check/torch run (predict always runs the emulator)")
    ap.add_argument("--arch", default="auto", help="library variant: auto, sm_80, sm_90a, sm_100a")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.mode == "predict" or args.device == "cpu":
        # before jax is imported: the emulator only, never a GPU client
        os.environ["JAX_PLATFORMS"] = "cpu"

    variant = resolved_arch(args.arch)
    launches: list[dict[str, Any]] | None = None
    if args.mode == "check":
        rows = run_check(args.device, args.arch)
    elif args.mode == "predict":
        rows, launches = run_predict(args.arch)
    else:
        rows = run_torch(args.device, args.arch)
    ok = bool(rows) and all(r.get("ok") for r in rows)
    device = "cpu" if args.mode == "predict" else args.device
    for r in rows:
        status = "OK  " if r.get("ok") else "FAIL"
        detail = f"max abs err {r['max_abs_err']:.3g}" if "max_abs_err" in r else r.get("error", "")
        print(f"{status} {args.mode} {r['op']} on {device} ({variant}): {detail}")
    for launch in launches or []:
        pr = launch["predicted"]
        print(f"predicted {launch['kernel']}: global ld {pr['global_ld_sectors_per_request']:.2f} "
              f"sectors/req, st {pr['global_st_sectors_per_request']:.2f}; shared bank conflicts "
              f"ld {pr['shared_ld_bank_conflicts']} st {pr['shared_st_bank_conflicts']}; "
              f"occupancy {pr['theoretical_occupancy_pct']}%")
    result: dict[str, Any] = {"mode": args.mode, "device": device, "arch": variant, "ok": ok, "results": rows}
    if launches is not None:
        result["launches"] = launches
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

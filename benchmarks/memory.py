"""Host memory of emulated launches: the model against the measured peak.

Each launch runs in a fresh process; the peak is ``tracemalloc``'s (numpy
allocations are traced) over the launch call, and the resident-set growth
(``ru_maxrss``) is shown beside it. The estimate is the one the launch
itself compares with ``JAXPTX_SIM_MAX_MEMORY`` before allocating
(:func:`jaxptx.sim.estimate_memory`, :mod:`jaxptx.sim.memory_model`).

Launches: the library softmax (sm_90a, 64 threads a row, one row a CTA) on
1,024 / 4,096 / 16,384 rows of 1,024 f32 through ``jaxptx.sim.launch``,
checked (``check=True``) at 1,024 and 4,096 rows and profiled at 1,024
(the profiler is not in the model); 16,384 rows through ``jax.jit(
kernels.softmax)`` on the CPU (the resident growth then holds XLA's
buffers too); the library GEMM (``kernels.matmul``, bf16 in, f32 out) at
512³ on sm_90a (with and without ``check=True``), sm_80 and sm_100a.

    python benchmarks/memory.py            # the table (about two minutes on 2 cores)
    python benchmarks/memory.py --smoke    # CI: tiny launches, checks only

Columns: threads and CTAs of the launch; the estimate and its bytes per
thread and per CTA; the measured peak and the estimate's error against it;
the resident growth over the launch and the process's peak resident
set (Python, jax and the inputs included). A ``self-check:`` line says whether every estimate is
within the model's stated margin of its peak, and that a launch over a
small ``JAXPTX_SIM_MAX_MEMORY`` is refused before it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import numpy as np

# (name, op, size, check, arch, path): path "sim" launches through jaxptx.sim.launch, "jit" through jax.jit.
FULL = [("softmax 1024x1024", "softmax", 1024, False, "sm_90a", "sim"),
        ("softmax 4096x1024", "softmax", 4096, False, "sm_90a", "sim"),
        ("softmax 16384x1024", "softmax", 16384, False, "sm_90a", "sim"),
        ("softmax 16384x1024 jit", "softmax", 16384, False, "sm_90a", "jit"),
        ("softmax 1024x1024 check", "softmax", 1024, True, "sm_90a", "sim"),
        ("softmax 4096x1024 check", "softmax", 4096, True, "sm_90a", "sim"),
        ("softmax 1024x1024 profile", "softmax", 1024, "profile", "sm_90a", "sim"),
        ("gemm sm_90a 512^3", "gemm", 512, False, "sm_90a", "jit"),
        ("gemm sm_90a 512^3 check", "gemm", 512, True, "sm_90a", "jit"),
        ("gemm sm_80 512^3", "gemm", 512, False, "sm_80", "jit"),
        ("gemm sm_100a 512^3", "gemm", 512, False, "sm_100a", "jit"),
        ("gemm sm_100a 512^3 check", "gemm", 512, True, "sm_100a", "jit")]
SMOKE = [("softmax 256x1024", "softmax", 256, False, "sm_90a", "sim"),
         ("softmax 256x1024 check", "softmax", 256, True, "sm_90a", "sim"),
         ("gemm sm_90a 256^3", "gemm", 256, False, "sm_90a", "jit")]


def worker(op: str, size: int, check: Any, arch: str, path: str) -> dict:
    """Run one launch in this process; its estimate (as the launch computed
    it), the tracemalloc peak and the resident growth."""
    import importlib

    from jaxptx.sim import device, memory_model
    sim_launch = importlib.import_module("jaxptx.sim.launch")      # the module (the package names the function)
    seen: list[Any] = []

    def record(program, launch, *, check=False, global_bytes=0):
        seen.append(memory_model.estimate(program, launch, check=check, global_bytes=global_bytes))
        return memory_model.check_fits(program, launch, check=check, global_bytes=global_bytes)

    # The check every launch makes (sim.launch's own, else Device._machine's), recorded.
    device.check_fits = sim_launch.check_fits = record
    run = _softmax(size, check, arch, path) if op == "softmax" else _gemm(size, check, arch)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    e = seen[-1]
    return dict(threads=e.threads, ctas=e.ctas, estimate=e.total, per_thread=e.per_thread, per_cta=e.per_cta,
                per_launch=e.per_launch, thread_parts=e.thread_parts, cta_parts=e.cta_parts, peak=peak,
                rss=grown, rss_total=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, seconds=seconds)


def _softmax(rows: int, check: Any, arch: str, path: str):
    """The library softmax on ``rows`` x 1,024 f32, ready to run (compiled first under jit)."""
    from jaxptx import sim
    from jaxptx.kernels._norms_kernels import row_kernel
    from jaxptx.kernels._norms_rows import plan
    x = np.random.default_rng(0).standard_normal((rows, 1024), dtype=np.float32)
    if path == "jit":
        import jax
        from jaxptx import kernels
        f = jax.jit(lambda v: kernels.softmax(v, arch=arch))
        xs = jax.device_put(x)
        f.lower(xs).compile()
        return lambda: jax.block_until_ready(f(xs))
    p = plan(1024, "f32")
    k = row_kernel("softmax", "f32", arch, p.threads, p.cached)
    y = np.zeros_like(x)
    if check == "profile":
        import jaxptx.profile  # noqa: F401  (registers the profiler with the emulator)
        return lambda: sim.launch(k, x, y, profile=True)
    return lambda: sim.launch(k, x, y, check=check)


def _gemm(n: int, check: Any, arch: str):
    """``kernels.matmul`` of two n x n bf16 arrays under jit on the CPU, ready to run."""
    import jax
    import jax.numpy as jnp
    from jaxptx import kernels, sim
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32), jnp.bfloat16)
    f = jax.jit(lambda a, b: kernels.matmul(a, b, arch=arch))
    f.lower(a, b).compile()

    def run():
        with sim.checking(check):
            return jax.block_until_ready(f(a, b))
    return run


def measure(case: tuple) -> dict:
    """One case in a fresh process (``--worker``)."""
    name, op, size, check, arch, path = case
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps([op, size, check, arch, path])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"{name}: the worker exited {r.returncode}:\n{r.stderr[-3000:]}")
    return json.loads(lines[-1])


def mib(n: float) -> str:
    """Bytes as MiB for the table."""
    return f"{n / 2**20:,.1f}"


def refusal_check() -> None:
    """A launch over a small JAXPTX_SIM_MAX_MEMORY is refused before any step runs."""
    from jaxptx import sim
    from jaxptx.kernels._norms_kernels import row_kernel
    from jaxptx.kernels._norms_rows import plan
    p = plan(1024, "f32")
    k = row_kernel("softmax", "f32", "sm_90a", p.threads, p.cached)
    x = np.ones((64, 1024), np.float32)
    y = np.full_like(x, -1.0)
    need = sim.estimate_memory(k, x, y).total
    old = os.environ.get("JAXPTX_SIM_MAX_MEMORY")
    os.environ["JAXPTX_SIM_MAX_MEMORY"] = str(need // 2)
    try:
        sim.launch(k, x, y)
    except sim.SimMemoryError as e:
        refused = str(e)
    else:
        refused = ""
    finally:
        if old is None:
            del os.environ["JAXPTX_SIM_MAX_MEMORY"]
        else:
            os.environ["JAXPTX_SIM_MAX_MEMORY"] = old
    assert "of emulator state (over the limit of" in refused and (y == -1.0).all(), refused or "the launch ran"
    print(f"refused at JAXPTX_SIM_MAX_MEMORY={need // 2:,} (estimate {need:,} bytes): {refused[:160]}...")
    print("self-check: a launch over JAXPTX_SIM_MAX_MEMORY is refused before it runs (its output untouched)")


def main(argv: list[str] | None = None) -> None:
    """Print the table (``--smoke``: tiny launches)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CI smoke run: three small launches, checks only")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this text")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    from jaxptx.sim.memory_model import MARGIN, host_memory, memory_limit
    cases = [c for c in (SMOKE if args.smoke else FULL) if args.only is None or args.only in c[0]]
    print(f"host memory {mib(host_memory())} MiB; default limit {mib(memory_limit() or 0)} MiB "
          f"(JAXPTX_SIM_MAX_MEMORY={os.environ.get('JAXPTX_SIM_MAX_MEMORY', 'unset')})")
    print(f"{'launch':28} {'threads':>10} {'CTAs':>7} {'estimate MiB':>13} {'peak MiB':>10} {'error':>7} "
          f"{'RSS+ MiB':>9} {'RSS MiB':>8} {'B/thread':>9} {'B/CTA':>9} {'s':>6}")
    worst = 0.0
    for case in cases:
        r = measure(case)
        err = r["estimate"] / r["peak"] - 1
        modelled = case[3] != "profile"        # the profiler's counters are not in the model
        if modelled:
            worst = max(worst, abs(err))
        print(f"{case[0]:28} {r['threads']:>10,} {r['ctas']:>7,} {mib(r['estimate']):>13} {mib(r['peak']):>10} "
              f"{err:>+7.0%} {mib(r['rss']):>9} {mib(r['rss_total']):>8} {r['per_thread']:>9,} {r['per_cta']:>9,} {r['seconds']:>6.1f}"
              + ("" if modelled else "  (profiled: not in the model)"))
        parts = "; ".join(", ".join(f"{w} {n:,}" for w, n in r[key] if n) for key in ("thread_parts", "cta_parts"))
        print(f"    a thread; a CTA: {parts}")
    ok = worst <= MARGIN
    print(f"self-check: every estimate is within ±{MARGIN:.0%} of its measured peak "
          f"(worst {worst:.0%}){'' if ok else ' FAILED'}")
    refusal_check()
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""``jaxptx.profile`` on the kernel library, and what profiling and the sanitizer cost.

1. Every op of :mod:`jaxptx.kernels`, every variant (sm_80, sm_90a,
   sm_100a), called through ``jax.jit`` on the CPU at a small shape: each
   launch the op makes runs the emulator with the profiler on
   (``jaxptx.profile.profiling()``), and ptxas gives the launched PTX's
   resources. One row per launch: global sectors per request
   (and the ideal), LSU shared-memory bank conflicts, the tensor-core
   operand-read model's extra wavefronts, registers, spills, occupancy on
   the variant's own GPU, and the roofline *estimate* (a lower bound from
   counts at peak rates, never a measurement) for H100 and B200.
2. The cost of profiling and of the sanitizer: ``sim.launch`` plain, with
   ``profile=True`` and with ``check=True`` on the two GEMMs of
   ``benchmarks/gemm_kernels.py`` and on ``examples/softmax.py`` (float32,
   1024 columns, ``--softmax-rows`` rows), interleaved, best of N, every
   result checked against numpy.
3. The sanitizer's cost on the kernel library: every op and variant
   through ``jax.jit`` with and without ``sim.checking()``, best of N.
4. Both checkers' cost against issue 29's bounds (checked / plain at most
   3, profiled / plain at most 1.5) on every case the issue names: every
   library op and variant at the small shapes of part 1, ``examples/softmax.py``
   at ``--softmax-rows`` rows and Triton's tutorial softmax compiled for
   sm_80, sm_90a and sm_100a at ``--triton-rows`` rows (skipped, saying so,
   without triton). CPU time (``time.process_time``: every thread of the
   process, less sensitive to other jobs on the machine than wall time),
   plain, profiled and checked interleaved, best of N, every result checked.

    python benchmarks/profile_kernels.py [--repeat 3] [--shapes 256x256x512 512x512x512]
        [--softmax-rows 64 4096] [--triton-rows 64 1024] [--rows 64] [--only OP] [--skip-library]
        [--skip-overhead] [--skip-library-check] [--skip-ratios] [--ratios-only]

    python benchmarks/profile_kernels.py --smoke   # CI: softmax only, one 128x128x64 GEMM, one repeat

``--only rms_norm`` keeps the library ops whose name contains the text
(parts 1 and 3).

Every result is checked (``self-check:`` lines): the GEMMs of part 2
against numpy, each library call of parts 1, 3 and 4 against its jnp formula
(within ``benchmarks/kernels.py``'s tolerance), parts 3 and 4's checked
results against their unchecked ones, bit for bit, and part 4's softmaxes
against numpy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def library_cases(only: str | None = None, rows: int = 64) -> list[tuple[str, str, Any, tuple, Any]]:
    """(op, arch, jitted call, inputs, jitted jnp reference) for every op and
    variant (``only``: the ops whose name contains it; ``rows``: of the
    norms, softmax and SwiGLU, 1024 columns each)."""
    import jax
    import jax.numpy as jnp
    from kernels import _vjp, jnp_layer_norm, jnp_paged_attention, jnp_rms_norm, jnp_scaled_matmul

    from jaxptx import kernels
    rng = np.random.default_rng(0)

    def rand(shape: tuple, dtype: Any = jnp.bfloat16) -> Any:
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), dtype)

    def mm_ref(a: Any, b: Any) -> Any:
        return jnp.dot(a, b, preferred_element_type=jnp.float32)

    def grouped_ref(lhs: Any, rhs: Any, sizes: Any) -> Any:
        return jnp.concatenate([mm_ref(lhs[:128], rhs[0]), mm_ref(lhs[128:], rhs[1])])

    def softmax_ref(x: Any) -> Any:
        return jax.nn.softmax(x.astype(jnp.float32), -1).astype(x.dtype)

    def swiglu_ref(g: Any, u: Any) -> Any:
        return (jax.nn.silu(g.astype(jnp.float32)) * u).astype(g.dtype)

    calls = []
    for arch in ("sm_80", "sm_90a", "sm_100a"):
        a, b = rand((256, 256)), rand((256, 256))
        calls.append(("matmul 256^3", arch, lambda a, b, arch=arch: kernels.matmul(a, b, arch=arch), (a, b), mm_ref))
    q, k, v, do = rand((1, 128, 2, 64)), rand((1, 128, 2, 64)), rand((1, 128, 2, 64)), rand((1, 128, 2, 64))
    for arch in ("sm_80", "sm_90a", "sm_100a"):
        calls.append(("flash_attention 1x128x2x64", arch,
                     lambda q, k, v, arch=arch: kernels.flash_attention(q, k, v, arch=arch), (q, k, v),
                     jax.nn.dot_product_attention))
        calls.append(("flash_attention vjp 1x128x2x64", arch,
                      _vjp(lambda q, k, v, arch=arch: kernels.flash_attention(q, k, v, arch=arch)), (q, k, v, do),
                      _vjp(jax.nn.dot_product_attention)))
    pq, kp, vp = rand((2, 8, 64)), rand((26, 16, 2, 64)), rand((26, 16, 2, 64))
    tables = jnp.asarray(rng.permutation(26).reshape(2, 13), jnp.int32)
    lengths = jnp.asarray([200, 131], jnp.int32)
    for arch in ("sm_80", "sm_90a"):
        calls.append(("paged_attention 2x8/2x64 p16 200", arch,
                      lambda *a, arch=arch: kernels.paged_attention(*a, arch=arch), (pq, kp, vp, tables, lengths),
                      jnp_paged_attention))
    for arch, formats in (("sm_90a", ("mxfp8_e4m3",)), ("sm_100a", ("mxfp8_e4m3", "nvfp4"))):
        for fmt in formats:
            lv, ls = kernels.block_quantize(rand((1, 256, 256), jnp.float32), fmt)
            rv, rs = kernels.block_quantize(rand((1, 256, 256), jnp.float32), fmt)
            calls.append((f"scaled_matmul {fmt} 1x256x256x256", arch,
                          lambda *x, arch=arch: kernels.scaled_matmul(*x, arch=arch), (lv, rv, ls, rs),
                          jnp_scaled_matmul))
    lhs, rhs = rand((256, 128)), rand((2, 128, 128))
    sizes = jnp.asarray([128, 128], jnp.int32)
    calls.append(("grouped_matmul 2x128x128x128", "sm_80",
                 lambda l, r, s: kernels.grouped_matmul(l, r, s, arch="sm_80"), (lhs, rhs, sizes), grouped_ref))
    x, w, bias = rand((rows, 1024)), rand((1024,)), rand((1024,))
    g, u = rand((rows, 1024)), rand((rows, 1024))
    shape = f"{rows}x1024"
    for arch in ("sm_80", "sm_90a", "sm_100a"):
        calls.append((f"rms_norm {shape}", arch, lambda x, w, arch=arch: kernels.rms_norm(x, w, arch=arch), (x, w),
                     jnp_rms_norm))
        calls.append((f"layer_norm {shape}", arch,
                      lambda x, w, b, arch=arch: kernels.layer_norm(x, w, b, arch=arch), (x, w, bias),
                     jnp_layer_norm))
        calls.append((f"softmax {shape}", arch, lambda x, arch=arch: kernels.softmax(x, arch=arch), (x,),
                     softmax_ref))
        calls.append((f"swiglu {shape}", arch, lambda g, u, arch=arch: kernels.swiglu(g, u, arch=arch), (g, u),
                     swiglu_ref))
        dy = rand((rows, 1024))
        calls.append((f"rms_norm vjp {shape}", arch,
                      _vjp(lambda x, w, arch=arch: kernels.rms_norm(x, w, arch=arch)), (x, w, dy), _vjp(jnp_rms_norm)))
        calls.append((f"layer_norm vjp {shape}", arch,
                      _vjp(lambda x, w, b, arch=arch: kernels.layer_norm(x, w, b, arch=arch)), (x, w, bias, dy),
                      _vjp(jnp_layer_norm)))
    return [(op, arch, jax.jit(fn), inputs, jax.jit(ref)) for op, arch, fn, inputs, ref in calls
            if only is None or only in op]


def check_result(op: str, arch: str, got: Any, ref: Any, inputs: tuple) -> None:
    """Raise AssertionError unless ``got`` matches ``ref(*inputs)`` within
    ``benchmarks/kernels.py``'s tolerance."""
    from kernels import TOLERANCE, mismatch
    err = mismatch(got, ref(*inputs))
    assert err <= TOLERANCE, f"{op} {arch}: |ours - jnp| / max |jnp| = {err:.3g} > {TOLERANCE:g}"


def _us(seconds: float) -> str:
    """Seconds as microseconds, two decimals."""
    return f"{seconds * 1e6:.2f}"


def profile_library(only: str | None = None, rows: int = 64) -> None:
    """Part 1: one row per launch of every op and variant."""
    import jax

    from jaxptx import profile
    print("| op | variant | kernel | sectors/req (ideal) | LSU bank conflicts (wavefronts/req) | "
          "tensor-operand extra wavefronts | regs | spills (B) | occupancy | H100 est. (us, bound) | "
          "B200 est. (us, bound) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    failed = []
    cases = library_cases(only, rows)
    for op, arch, fn, inputs, ref in cases:
        with profile.profiling() as collected:      # every emulator launch of the call, profiled
            try:
                check_result(op, arch, jax.block_until_ready(fn(*inputs)), ref, inputs)
            except Exception as e:                  # report and go on with the others
                print(f"| {op} | {arch} | failed: {type(e).__name__}: {str(e)[:80]} | | | | | | | | |")
                failed.append(f"{op} {arch}")
                continue
        collected.attach_resources()                # ptxas: registers, spills, occupancy
        for p in collected.profiles:
            k = p.kernel
            r = p.resources or {}
            occ = next(iter((p.occupancy or {}).values()), None)
            occ_text = (f"{100 * occ['occupancy']:.0f}% ({occ['ctas_per_sm']} CTA, {occ['limited_by']})"
                        if occ else "n/a")
            spills = f"{r.get('spill_stores', '?')}/{r.get('spill_loads', '?')}" if "error" not in r else "ptxas error"
            h, b = p.roofline("H100"), p.roofline("B200")
            print(f"| {op} | {arch} | {p.name} | {k['sectors_per_request']:.2f} ({k['ideal_sectors_per_request']:.2f}) "
                  f"| {k['shared_bank_conflicts']} ({k['wavefronts_per_request']:.2f}) "
                  f"| {k['tensor_smem_conflicts']} | {r.get('registers', '?')} | {spills} | {occ_text} "
                  f"| {_us(h['time_lower_bound_s'])}, {h['bound_by']} | {_us(b['time_lower_bound_s'])}, "
                  f"{b['bound_by']} |")
            worst = [e for e in p.lines if e["shared_bank_conflicts"] or
                     e["global_sectors"] > e["global_ideal_sectors"]]
            for e in sorted(worst, key=lambda e: -(e["shared_bank_conflicts"] + e["global_sectors"]
                                                    - e["global_ideal_sectors"]))[:2]:
                print(f"|  | | line {e['line']}: `{e['instruction'][:60]}` | "
                      f"{e['sectors_per_request']:.2f} ({e['ideal_sectors_per_request']:.2f}) | "
                      f"{e['shared_bank_conflicts']} ({e['wavefronts_per_request']:.2f}) | | | | | | |")
    if failed:
        raise SystemExit(f"FAILED: part 1: {', '.join(failed)}")
    print(f"self-check: part 1: {len(cases)} profiled library calls match their jnp formulas")


def overhead(shapes: list[tuple[int, int, int]], repeat: int) -> None:
    """Part 2: profiled / plain and checked (sanitizer) / plain launch time
    of the benchmark GEMMs, each result checked against numpy."""
    import ml_dtypes
    from gemm_kernels import maps, tc_gemm, ws_gemm

    import jaxptx.profile  # noqa: F401 - sim.launch(profile=True) needs the profiler loaded
    from jaxptx import sim
    print("\n| GEMM | M×N×K | plain s | profiled s | ratio | checked s | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for m, n, kk in shapes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, kk)).astype(ml_dtypes.bfloat16)
        bt = rng.standard_normal((n, kk)).astype(ml_dtypes.bfloat16)
        want = a.astype(np.float64) @ bt.astype(np.float64).T
        for k in (ws_gemm, tc_gemm):
            spec = k.specialize(M=m, N=n, K=kk)

            def run(spec: Any = spec, a: Any = a, bt: Any = bt, want: Any = want, **how: Any) -> float:
                c = np.zeros(want.shape, np.float32)
                t = time.perf_counter()
                sim.launch(spec.module, a, bt, c, *maps(a.shape, bt.shape), grid=spec.grid, block=spec.block,
                           smem=spec.smem, **how)
                took = time.perf_counter() - t
                np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
                return took
            run(profile=True)
            plain, profiled, checked = [], [], []
            for _ in range(repeat):         # interleaved, so that load on the machine hits all alike
                plain.append(run())
                profiled.append(run(profile=True))
                checked.append(run(check=True))
            p, q, c = min(plain), min(profiled), min(checked)
            print(f"| {k.name} | {m}×{n}×{kk} | {p:.3f} | {q:.3f} | {q / p:.2f} | {c:.3f} | {c / p:.2f} |")
    print("self-check: part 2: every plain, profiled and checked GEMM matches numpy")


def overhead_softmax(rows_list: list[int], repeat: int) -> None:
    """Part 2, continued: profiled / plain and checked / plain launch time of
    ``examples/softmax.py`` (float32, ``rows`` x 1024, one CTA a row), each
    result checked against numpy."""
    import jaxptx.profile  # noqa: F401 - sim.launch(profile=True) needs the profiler loaded
    from jaxptx import sim
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from softmax import reference, softmax
    print("\n| examples/softmax.py | rows × 1024 | plain s | profiled s | ratio | checked s | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for rows in rows_list:
        x = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
        want = reference(x)

        def run(x: np.ndarray = x, want: np.ndarray = want, **how: Any) -> float:
            y = np.zeros_like(x)
            t = time.perf_counter()
            sim.launch(softmax, x, y, **how)
            took = time.perf_counter() - t
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
            return took
        run()
        plain, profiled, checked = [], [], []
        for _ in range(repeat):
            plain.append(run())
            profiled.append(run(profile=True))
            checked.append(run(check=True))
        p, q, c = min(plain), min(profiled), min(checked)
        print(f"| softmax | {rows}×1024 | {p:.3f} | {q:.3f} | {q / p:.2f} | {c:.3f} | {c / p:.2f} |")
    print("self-check: part 2: every plain, profiled and checked softmax matches numpy")


def check_cost_library(repeat: int, only: str | None = None, rows: int = 64) -> None:
    """Part 3: every op and variant through ``jax.jit`` with and without
    ``sim.checking()`` (the sanitizer), interleaved, best of ``repeat``."""
    import jax

    from jaxptx import sim
    print("\n| op | variant | plain s | checked s | ratio |")
    print("|---|---|---:|---:|---:|")
    cases = library_cases(only, rows)
    for op, arch, fn, inputs, ref in cases:
        def run(check: bool, fn: Any = fn, inputs: tuple = inputs) -> float:
            t = time.perf_counter()
            if check:
                with sim.checking():
                    jax.block_until_ready(fn(*inputs))
            else:
                jax.block_until_ready(fn(*inputs))
            return time.perf_counter() - t
        plain_out = jax.block_until_ready(fn(*inputs))
        with sim.checking():
            checked_out = jax.block_until_ready(fn(*inputs))
        check_result(op, arch, plain_out, ref, inputs)
        for x, y in zip(jax.tree_util.tree_leaves(plain_out), jax.tree_util.tree_leaves(checked_out)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{op} {arch}: checked != plain")
        plain, checked = [], []
        for _ in range(repeat):
            plain.append(run(False))
            checked.append(run(True))
        p, c = min(plain), min(checked)
        print(f"| {op} | {arch} | {p:.3f} | {c:.3f} | {c / p:.2f} |")
    print(f"self-check: part 3: {len(cases)} library calls match their jnp formulas, checked equal to plain")


CHECK_BOUND, PROFILE_BOUND = 3.0, 1.5
"""Issue 29's bounds: checked / plain and profiled / plain launch time."""


def triton_softmax(capability: int) -> tuple[str, int]:
    """Triton's tutorial fused softmax (one program a row, ``BLOCK`` 1024,
    4 warps) compiled to PTX for ``sm_<capability>`` on this CPU-only
    machine, as ``tests/sim/triton_compile.py`` does: ``(ptx, shared bytes)``."""
    import os

    import triton  # optional (pip install -e '.[triton]'): imported only for part 4
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from jaxptx.runtime._toolchain import find_tool

    @triton.jit
    def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ.setdefault("TRITON_PTXAS_BLACKWELL_PATH", find_tool("ptxas"))   # else .version 9.4
    source = ASTSource(fn=softmax_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32",
                                                     "BLOCK": "constexpr"}, constexprs={"BLOCK": 1024})
    k = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": 4})
    return k.asm["ptx"], k.metadata.shared


def _best_ratios(runs: dict[str, Any], repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` CPU seconds of each of ``runs`` (name -> call),
    interleaved so that load on the machine hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            t = time.process_time()
            run()
            times[name].append(time.process_time() - t)
    return {name: min(v) for name, v in times.items()}


def _ratio_row(case: str, shape: str, best: dict[str, float], missed: list[str]) -> None:
    """One row of part 4's table; ``missed`` collects the bounds missed."""
    p, q, c = best["plain"], best["profiled"], best["checked"]
    pr, cr = q / p, c / p
    marks = []
    for name, ratio, bound in (("profiled", pr, PROFILE_BOUND), ("checked", cr, CHECK_BOUND)):
        ok = ratio <= bound
        marks.append("yes" if ok else "**no**")
        if not ok:
            missed.append(f"{case} {shape} {name} {ratio:.2f}")
    print(f"| {case} | {shape} | {p:.4f} | {pr:.2f} | {marks[0]} | {cr:.2f} | {marks[1]} |")


def checker_ratios(repeat: int, only: str | None, rows: int, softmax_rows: list[int], triton_rows: list[int],
                   capabilities: list[int], library: bool = True) -> None:
    """Part 4: profiled / plain and checked / plain CPU time of every
    library op and variant (unless not ``library``), ``examples/softmax.py``
    at ``softmax_rows`` and Triton's softmax at ``triton_rows`` for
    ``capabilities``, against issue 29's bounds."""
    import jax

    from jaxptx import profile, sim
    print(f"\n| case | shape | plain CPU s | profiled / plain | <= {PROFILE_BOUND} | checked / plain "
          f"| <= {CHECK_BOUND:g} |")
    print("|---|---|---:|---:|---|---:|---|")
    missed: list[str] = []
    cases = library_cases(only, rows) if library else []
    for op, arch, fn, inputs, ref in cases:
        plain_out = jax.block_until_ready(fn(*inputs))
        check_result(op, arch, plain_out, ref, inputs)
        with sim.checking():
            checked_out = jax.block_until_ready(fn(*inputs))
        with profile.profiling():
            profiled_out = jax.block_until_ready(fn(*inputs))
        for other in (checked_out, profiled_out):
            for x, y in zip(jax.tree_util.tree_leaves(plain_out), jax.tree_util.tree_leaves(other)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{op} {arch}: != plain")

        def plain(fn: Any = fn, inputs: tuple = inputs) -> None:
            jax.block_until_ready(fn(*inputs))

        def checked(fn: Any = fn, inputs: tuple = inputs) -> None:
            with sim.checking():
                jax.block_until_ready(fn(*inputs))

        def profiled(fn: Any = fn, inputs: tuple = inputs) -> None:
            with profile.profiling():
                jax.block_until_ready(fn(*inputs))
        name, _, shape = op.partition(" ")
        if shape.startswith("vjp"):
            name, shape = f"{name} vjp", shape[4:]
        _ratio_row(f"{name} ({arch})", shape,
                   _best_ratios({"plain": plain, "profiled": profiled, "checked": checked}, repeat), missed)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from softmax import reference, softmax

    def launcher(kernel: Any, x: np.ndarray, want: np.ndarray, *extra: Any, **shape: Any) -> dict[str, Any]:
        """plain / profiled / checked launches of ``kernel`` on ``x``, each result checked."""
        def run(**how: Any) -> None:
            y = np.zeros_like(x)
            sim.launch(kernel, x, y, *extra, **shape, **how)
            np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
        return {"plain": run, "profiled": lambda: run(profile=True), "checked": lambda: run(check=True)}

    for r in softmax_rows:
        x = np.random.default_rng(0).standard_normal((r, 1024)).astype(np.float32)
        runs = launcher(softmax, x, reference(x))
        for run in runs.values():
            run()
        _ratio_row("examples/softmax.py", f"{r}x1024", _best_ratios(runs, repeat), missed)
    if capabilities:
        try:
            import triton  # noqa: F401 - optional
        except ImportError:
            print("| Triton softmax | | not run: triton is not installed (pip install -e '.[triton]') | | | | |")
            capabilities = []
    from jaxptx import parse
    for cap in capabilities:
        ptx, shared = triton_softmax(cap)
        scratch = [np.zeros(16, np.uint8) for _ in range(len(parse(ptx).functions[0].params) - 3)]
        for r in triton_rows:
            x = np.random.default_rng(1).standard_normal((r, 1000)).astype(np.float32)
            want = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
            want = (want / want.sum(1, keepdims=True)).astype(np.float32)
            runs = launcher(ptx, x, want, np.int32(1000), *scratch, grid=(r, 1, 1), block=(128, 1, 1), smem=shared)
            for run in runs.values():
                run()
            _ratio_row(f"Triton softmax (sm_{cap}{'a' if cap >= 90 else ''})", f"{r}x1000",
                       _best_ratios(runs, repeat), missed)
    print(f"bounds missed: {', '.join(missed) if missed else 'none'}")
    print(f"self-check: part 4: {len(cases)} library calls match their jnp formulas, profiled and checked equal "
          "to plain; every softmax matches numpy")


def _shape(text: str) -> tuple[int, int, int]:
    """``"MxNxK"`` as ``(M, N, K)``."""
    m, n, k = (int(v) for v in text.lower().split("x"))
    return m, n, k


def main(argv: list[str] | None = None) -> None:
    """Run the four parts (``--smoke``: softmax only, one small GEMM, one repeat)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="launches per figure, the best counts (default 3)")
    ap.add_argument("--shapes", type=_shape, nargs="*", default=None,
                    help="GEMM shapes MxNxK for part 2 (default 256x256x512 512x512x512; --smoke: 128x128x64)")
    ap.add_argument("--rows", type=int, default=64,
                    help="rows (of 1024) of the library's norms, softmax and SwiGLU in parts 1 and 3 (default 64)")
    ap.add_argument("--softmax-rows", type=int, nargs="*", default=None,
                    help="rows of examples/softmax.py for part 2 (default 64 4096; --smoke: 8)")
    ap.add_argument("--triton-rows", type=int, nargs="*", default=None,
                    help="rows of Triton's softmax for part 4 (default 64 1024; --smoke: 8, sm_80 only)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI smoke run: --only softmax, --shapes 128x128x64, --softmax-rows 8, --triton-rows 8, "
                         "--repeat 1")
    ap.add_argument("--only", default=None, metavar="OP",
                    help="library ops whose name contains OP (parts 1 and 3), e.g. rms_norm")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-library", action="store_true")
    ap.add_argument("--skip-library-check", action="store_true")
    ap.add_argument("--skip-ratios", action="store_true",
                    help="skip part 4 (its library rows also go with --skip-library-check, its softmax launches "
                         "with --skip-overhead)")
    ap.add_argument("--ratios-only", action="store_true",
                    help="part 4 alone: every library row, examples/softmax.py and Triton's softmax")
    args = ap.parse_args(argv)
    if args.smoke:
        args.only = args.only or "softmax"
    args.repeat = args.repeat or (1 if args.smoke else 3)
    if args.shapes is None:
        args.shapes = [(128, 128, 64)] if args.smoke else [(256, 256, 512), (512, 512, 512)]
    if args.softmax_rows is None:
        args.softmax_rows = [8] if args.smoke else [64, 4096]
    if args.triton_rows is None:
        args.triton_rows = [8] if args.smoke else [64, 1024]
    if args.ratios_only:
        checker_ratios(args.repeat, args.only, args.rows, args.softmax_rows, args.triton_rows,
                       [80] if args.smoke else [80, 90, 100])
        return
    if not args.skip_library:
        profile_library(args.only, args.rows)
    if not args.skip_overhead:
        overhead(args.shapes, args.repeat)
        overhead_softmax(args.softmax_rows, args.repeat)
    if not args.skip_library_check:
        check_cost_library(args.repeat, args.only, args.rows)
    if not args.skip_ratios and not (args.skip_library_check and args.skip_overhead):
        # the library rows go with part 3, the softmax launches with part 2
        checker_ratios(args.repeat, args.only, args.rows, [] if args.skip_overhead else args.softmax_rows,
                       [] if args.skip_overhead else args.triton_rows,
                       [] if args.skip_overhead else [80] if args.smoke else [80, 90, 100],
                       library=not args.skip_library_check)


if __name__ == "__main__":
    main()

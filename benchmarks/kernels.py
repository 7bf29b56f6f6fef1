"""The kernel library against XLA, side by side in one run.

Each op of :mod:`jaxptx.kernels` is timed next to its XLA equivalent on the
same inputs: ``matmul`` against ``jnp.dot`` (cuBLAS on a GPU),
``flash_attention`` against ``jax.nn.dot_product_attention`` (cuDNN where
JAX offers it), ``paged_attention`` against a ``jnp`` gather of the pages
and a masked softmax, the norms, softmax and SwiGLU against their ``jnp``
formulas, and the norms' gradients (``vjp`` rows: forward and backward
kernels) against XLA's. Each row prints both times, the ratio, and the throughput —
TFLOPS for the products, GB/s of compulsory traffic (inputs read once,
outputs written once) for the rest — with the fraction of the GPU's peak.

With a GPU: every variant the GPU runs, at sizes that fill it.
Without one: says so, and times the same calls at small sizes on the CPU,
where a kernel call runs the emulator; those figures measure the emulator,
not the kernel, and the ratio is to XLA on the CPU.

    python benchmarks/kernels.py [--repeat 20] [--arch auto] [--json PATH]
    python benchmarks/kernels.py --smoke     # CI: tiny sizes, one call each, every result checked

``--json PATH`` also writes the rows as JSON (rewritten after each row, so
a run cut short keeps what it measured); the printed table is the same.

Every row's result is checked against XLA's (each output, as float32, within
:data:`TOLERANCE` of XLA's largest magnitude); a row that raises or differs
is reported as an error, and the script exits 1 when any row did.
``--smoke`` uses the small no-GPU sizes (smaller still) and one timed call
on a GPU too, so no cuBLAS-sized row runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _timing import wall_times

# Dense bf16 tensor-core TFLOPS and HBM GB/s by device name, from the vendor
# data sheets (SXM parts; dense, not the 2:4-sparse figure).
PEAKS = {"A100": (312.0, 2039.0), "H100": (989.0, 3350.0), "H200": (989.0, 4800.0),
         "B200": (2250.0, 8000.0)}
# Largest |ours - XLA| allowed, as a fraction of XLA's largest |output| (at
# least 1): bf16 outputs round at 2**-8 relative, and the two sum in orders of their own.
TOLERANCE = 3e-2


def peak_for(device_kind: str) -> tuple[float, float] | None:
    """(TFLOPS, GB/s) peaks of the GPU whose ``device_kind`` names one of
    :data:`PEAKS`, or None."""
    for name, peak in PEAKS.items():
        if name in device_kind:
            return peak
    return None


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median of ``repeat`` blocked calls of ``fn``, in milliseconds."""
    return statistics.median(wall_times(lambda: _block(fn()), repeat, warmup=2)) * 1e3


def _block(out: Any) -> None:
    """Wait for every array in ``out``."""
    import jax
    jax.block_until_ready(out)


def cases(gpu: bool, arch: str, smoke: bool = False) -> list[tuple[str, str, Callable, Callable, tuple, float, float]]:
    """(op, shape, jaxptx fn, XLA fn, args, flops, bytes) for each benchmarked call
    (GPU-sized shapes on a GPU unless ``smoke``; ``smoke``: the smallest shapes)."""
    import jax
    import jax.numpy as jnp

    from jaxptx import kernels

    rng = np.random.default_rng(0)

    def rand(shape: tuple[int, ...], dtype: Any = jnp.bfloat16) -> Any:
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32), dtype)

    rows: list = []
    big = gpu and not smoke
    mm = [(8192, 8192, 8192), (4096, 4096, 4096)] if big else [(128, 128, 64)] if smoke else [(256, 256, 512)]
    for m, n, k in mm:
        a, b = rand((m, k)), rand((k, n))
        rows.append(("matmul", f"{m}x{n}x{k}", lambda a, b: kernels.matmul(a, b, arch=arch),
                     lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32),
                     (a, b), 2.0 * m * n * k, 2.0 * (m * k + k * n) + 4.0 * m * n))
    # Block-scaled matmul (B, M, N, K) against jax.nn.scaled_matmul on a GPU (cuDNN on
    # Blackwell; jax has no CPU lowering for it, so a jnp dequantise-and-einsum on the CPU):
    # mxfp8 on sm_90a and sm_100a, nvfp4 on sm_100a only.
    from jaxptx.kernels._arch import variant
    smm = [(1, 8192, 8192, 8192), (4, 4096, 4096, 4096)] if big else [(1, 128, 128, 128)] if smoke \
        else [(1, 256, 256, 512)]
    formats = {"sm_90a": ["mxfp8_e4m3"], "sm_100a": ["mxfp8_e4m3", "nvfp4"]}.get(variant(arch, "matmul"), [])
    for fmt in formats:
        for b_, m, n, k in smm:
            a, sa = kernels.block_quantize(rand((b_, m, k), jnp.float32), fmt)
            w, sw = kernels.block_quantize(rand((b_, n, k), jnp.float32), fmt)
            vbytes = 1.0 if fmt.startswith("mxfp8") else 0.5
            block = 32 if fmt.startswith("mx") else 16
            rows.append((f"scaled_matmul {fmt}", f"{b_}x{m}x{n}x{k}",
                         lambda *x: kernels.scaled_matmul(*x, arch=arch),
                         jax.nn.scaled_matmul if gpu else jnp_scaled_matmul,
                         (a, w, sa, sw), 2.0 * b_ * m * n * k,
                         b_ * (vbytes + 1.0 / block) * (m + n) * k + 4.0 * b_ * m * n))
    bshd = [(4, 4096, 16, 128), (16, 1024, 16, 64)] if big else [(1, 64, 1, 64)] if smoke else [(1, 128, 2, 64)]
    for b_, s, h, d in bshd:
        q, k_, v = rand((b_, s, h, d)), rand((b_, s, h, d)), rand((b_, s, h, d))
        impl = "cudnn" if gpu else None
        rows.append(("flash_attention", f"{b_}x{s}x{h}x{d}",
                     lambda q, k, v: kernels.flash_attention(q, k, v, arch=arch),
                     lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation=impl),
                     (q, k_, v), 4.0 * b_ * h * s * s * d, 8.0 * b_ * s * h * d))
        # Gradient: jax.vjp at a random cotangent. Ours runs the forward kernel, the row
        # preprocess and the dQ and dK/dV kernels; XLA's is cuDNN's backward on a GPU.
        # Flops: forward 4·bhs²d + the backward's five products 10·bhs²d.
        do = rand((b_, s, h, d))
        rows.append(("flash_attention vjp", f"{b_}x{s}x{h}x{d}",
                     _vjp(lambda q, k, v: kernels.flash_attention(q, k, v, arch=arch)),
                     _vjp(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation=impl)),
                     (q, k_, v, do), 14.0 * b_ * h * s * s * d, 16.0 * b_ * s * h * d))
    # Paged decode (B, Nq, Nkv, D, page_size, context): GQA 4 and MHA, split-K past 512 tokens.
    paged = [(64, 32, 8, 128, 16, 4096), (32, 32, 32, 64, 32, 1024), (8, 64, 8, 128, 16, 16384)] if big \
        else [(1, 4, 1, 64, 16, 40)] if smoke else [(2, 8, 2, 64, 16, 200)]
    for b_, nq, nkv, d, ps, ctx in paged:
        per_seq = -(-ctx // ps)
        pages = b_ * per_seq
        q, k_, v = rand((b_, nq, d)), rand((pages, ps, nkv, d)), rand((pages, ps, nkv, d))
        tables = jnp.asarray(rng.permutation(pages).reshape(b_, per_seq), jnp.int32)
        lengths = jnp.asarray(rng.integers(ctx // 2, ctx + 1, b_), jnp.int32)
        rows.append(("paged_attention", f"{b_}x{nq}/{nkv}x{d} p{ps} {ctx}",
                     lambda *a: kernels.paged_attention(*a, arch=arch), jnp_paged_attention,
                     (q, k_, v, tables, lengths), 0.0,
                     4.0 * nkv * d * float(lengths.sum()) + 4.0 * b_ * nq * d))
    rn = [(16384, 8192), (65536, 1024)] if big else [(8, 256)] if smoke else [(64, 1024)]
    for r, n in rn:
        x, w, bias = rand((r, n)), rand((n,)), rand((n,))
        nbytes = 4.0 * r * n + 2.0 * n
        rows.append(("rms_norm", f"{r}x{n}", lambda x, w: kernels.rms_norm(x, w, arch=arch),
                     lambda x, w: (x * jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1,
                                                                 keepdims=True) + 1e-6) * w).astype(x.dtype),
                     (x, w), 0.0, nbytes))
        rows.append(("layer_norm", f"{r}x{n}", lambda x, w, b: kernels.layer_norm(x, w, b, arch=arch),
                     jnp_layer_norm, (x, w, bias), 0.0, nbytes + 2.0 * n))
        rows.append(("softmax", f"{r}x{n}", lambda x: kernels.softmax(x, arch=arch),
                     lambda x: jax.nn.softmax(x.astype(jnp.float32), -1).astype(x.dtype),
                     (x,), 0.0, 4.0 * r * n))
        # Gradients: jax.vjp of each op at a random cotangent. Ours runs the forward kernel
        # (y and the row statistics) and the two backward kernels; XLA fuses what it likes.
        # Compulsory traffic: x and dy read, dx written, w (and b) read, dw (and db) written.
        dy = rand((r, n))
        rows.append(("rms_norm vjp", f"{r}x{n}", _vjp(lambda x, w: kernels.rms_norm(x, w, arch=arch)),
                     _vjp(jnp_rms_norm), (x, w, dy), 0.0, 6.0 * r * n + 4.0 * n))
        rows.append(("layer_norm vjp", f"{r}x{n}",
                     _vjp(lambda x, w, b: kernels.layer_norm(x, w, b, arch=arch)),
                     _vjp(jnp_layer_norm), (x, w, bias, dy), 0.0, 6.0 * r * n + 8.0 * n))
        g, u = rand((r, n)), rand((r, n))
        rows.append(("swiglu", f"{r}x{n}", lambda g, u: kernels.swiglu(g, u, arch=arch),
                     lambda g, u: (jax.nn.silu(g.astype(jnp.float32)) * u).astype(g.dtype),
                     (g, u), 0.0, 6.0 * r * n))
    return rows


def _vjp(f: Callable) -> Callable:
    """``(*primals, cotangent) -> the primals' cotangents`` of ``f``."""
    import jax

    def grads(*args: Any) -> Any:
        return jax.vjp(f, *args[:-1])[1](args[-1])
    return grads


def jnp_paged_attention(q: Any, k_pages: Any, v_pages: Any, block_tables: Any, lengths: Any) -> Any:
    """The gather-based reference: each sequence's pages by its table, a
    masked f32 softmax, grouped query heads."""
    import jax
    import jax.numpy as jnp
    B, nq, d = q.shape
    nkv = k_pages.shape[2]
    k = k_pages[block_tables].reshape(B, -1, nkv, d)          # (B, T, Nkv, D)
    v = v_pages[block_tables].reshape(B, -1, nkv, d)
    qg = q.reshape(B, nkv, nq // nkv, d).astype(jnp.float32)
    s = jnp.einsum("bgrd,btgd->bgrt", qg, k.astype(jnp.float32)) / jnp.sqrt(jnp.float32(d))
    live = jnp.arange(k.shape[1])[None, :] < lengths[:, None]
    s = jnp.where(live[:, None, None, :], s, -jnp.inf)
    p = jnp.where(lengths[:, None, None, None] > 0, jax.nn.softmax(s, -1), 0.0)
    o = jnp.einsum("bgrt,btgd->bgrd", p, v.astype(jnp.float32))
    return o.reshape(B, nq, d).astype(q.dtype)


def jnp_scaled_matmul(lhs: Any, rhs: Any, lhs_scales: Any, rhs_scales: Any) -> Any:
    """``jax.nn.scaled_matmul``'s definition in jnp: dequantise, then an f32 einsum."""
    import jax.numpy as jnp

    from jaxptx.kernels import block_dequantize
    return jnp.einsum("bmk,bnk->bmn", block_dequantize(lhs, lhs_scales), block_dequantize(rhs, rhs_scales))


def jnp_rms_norm(x: Any, w: Any) -> Any:
    """RMS norm in jnp (f32 statistics, eps 1e-6)."""
    import jax
    import jax.numpy as jnp
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), -1, keepdims=True) + 1e-6) * w).astype(x.dtype)


def jnp_layer_norm(x: Any, w: Any, b: Any) -> Any:
    """Layer norm in jnp (f32 statistics, eps 1e-5)."""
    import jax.numpy as jnp
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) / jnp.sqrt(var + 1e-5) * w + b).astype(x.dtype)


def mismatch(ours: Any, theirs: Any) -> float:
    """Largest ``|ours - theirs|`` over the outputs (float32), as a fraction of
    ``theirs``'s largest magnitude (at least 1)."""
    import jax
    a, b = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        if x.shape != y.shape or not np.isfinite(x).all():
            return float("inf")
        worst = max(worst, float(np.abs(x - y).max(initial=0.0)) / max(1.0, float(np.abs(y).max(initial=0.0))))
    return worst


def main(argv: list[str] | None = None) -> int:
    """Print one table: each op, jaxptx and XLA times, ratio, throughput;
    0 when every row ran and matched XLA, else 1."""
    import jax

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--arch", default=None,
                        help="a variant (auto, sm_80, sm_90a, sm_100a); default: auto on a GPU, every "
                             "variant on the emulator")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the rows to this file as JSON")
    parser.add_argument("--smoke", action="store_true",
                        help="CI smoke run: the smallest shapes, one timed call, every result checked")
    args = parser.parse_args(argv)
    dev = jax.devices()[0]
    gpu = dev.platform == "gpu"
    peak = peak_for(getattr(dev, "device_kind", "")) if gpu else None
    if gpu:
        print(f"GPU: {dev.device_kind}; peaks {peak or 'unknown'} (bf16 TFLOPS, GB/s)")
    else:
        print("No GPU: the jaxptx column is the CPU emulator running each kernel at a small size, "
              "the XLA column XLA on the CPU. These figures measure the emulator, not the kernels.")
    repeat = 1 if args.smoke else args.repeat if gpu else min(args.repeat, 3)
    arches = [args.arch] if args.arch else (["auto"] if gpu else ["sm_80", "sm_90a", "sm_100a"])
    print(f"{'op':16} {'arch':8} {'shape':18} {'jaxptx ms':>10} {'XLA ms':>9} {'XLA/jaxptx':>10} "
          f"{'jaxptx rate':>16} {'of peak':>8}")
    report = {"gpu": gpu, "device_kind": getattr(dev, "device_kind", ""), "platform": dev.platform,
              "peak_tflops_gbs": list(peak) if peak else None, "repeat": repeat, "rows": []}
    for arch in arches:
        _rows(cases(gpu, arch, args.smoke), arch, repeat, gpu, peak, report, args.json)
    _write_json(report, args.json)
    bad = [r for r in report["rows"] if "error" in r]
    checked = [r["max_rel_err"] for r in report["rows"] if "error" not in r]
    if checked:
        print(f"self-check: {len(checked)} rows match XLA (worst |ours - XLA| / max |XLA|: {max(checked):.2e}, "
              f"allowed {TOLERANCE:g})")
    if bad:
        print(f"FAILED: {len(bad)} of {len(report['rows'])} rows raised or differ from XLA: "
              + "; ".join(f"{r['op']} {r['arch']} {r['shape']}: {r['error']}" for r in bad)[:500])
        return 1
    return 0


def _write_json(report: dict, path: Path | None) -> None:
    """Write ``report`` to ``path`` as JSON (nothing when ``path`` is None)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1))


def _rows(rows: list, arch: str, repeat: int, gpu: bool, peak: tuple[float, float] | None,
          report: dict | None = None, json_path: Path | None = None) -> None:
    """Time, check and print each row; append it to ``report["rows"]``."""
    import jax
    out = report["rows"] if report is not None else []
    for op, shape, ours, theirs, inputs, flops, nbytes in rows:
        try:
            f_ours, f_xla = jax.jit(ours), jax.jit(theirs)
            t_ours = median_ms(lambda: f_ours(*inputs), repeat)
            t_xla = median_ms(lambda: f_xla(*inputs), repeat)
            err = mismatch(f_ours(*inputs), f_xla(*inputs))
            if not err <= TOLERANCE:
                raise AssertionError(f"differs from XLA: |ours - XLA| / max |XLA| = {err:.3g} > {TOLERANCE:g}")
        except Exception as e:  # noqa: BLE001 - a missing op or variant is a row, not a crash
            print(f"{op:16} {arch:8} {shape:18} {type(e).__name__}: {str(e).splitlines()[0][:60]}")
            out.append({"op": op, "arch": arch, "shape": shape,
                        "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]})
            if report is not None:
                _write_json(report, json_path)
            continue
        if flops:   # TFLOPS on a GPU; the emulator's rates are a million times lower
            rate, unit, of = flops / t_ours / (1e9 if gpu else 1e3), "TFLOPS" if gpu else "MFLOPS", \
                (peak[0] if peak else None)
        else:
            rate, unit, of = nbytes / t_ours / (1e6 if gpu else 1e3), "GB/s" if gpu else "MB/s", \
                (peak[1] if peak else None)
        frac = f"{rate / of:7.0%}" if of else "    n/a"
        print(f"{op:16} {arch:8} {shape:18} {t_ours:10.3f} {t_xla:9.3f} {t_xla / t_ours:10.4f} "
              f"{rate:9.2f} {unit:6}{frac:>8}")
        out.append({"op": op, "arch": arch, "shape": shape, "jaxptx_ms": t_ours, "xla_ms": t_xla,
                    "xla_over_jaxptx": t_xla / t_ours, "max_rel_err": err, "rate": rate, "unit": unit,
                    "of_peak": rate / of if of else None})
        if report is not None:
            _write_json(report, json_path)


if __name__ == "__main__":
    raise SystemExit(main())

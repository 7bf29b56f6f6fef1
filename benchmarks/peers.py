"""jaxptx side by side with its CPU peers, one comparison a table, in one run (issue 29).

Each comparison times jaxptx and a peer on the same inputs in the same
process, interleaved (one call of each in turn, ``--repeat`` rounds after a
warm-up round; the best wall time of each counts, and the best process CPU
time is shown beside it), checks the outputs against each other and numpy,
and prints the ratio with the issue's target and whether it is met:

``gemm``
    :func:`jaxptx.kernels.matmul` (bf16 in, f32 out) with ``arch`` sm_80,
    sm_90a and sm_100a on the emulator, under ``jax.jit``, against a tiled
    Pallas matmul (128×128 output blocks, K in steps of 128) under
    ``interpret=True``, at 256³, 512³, 1024³. Target: at most 10× Pallas at
    256³ and 3× at 1024³, every variant.
``triton``
    Triton's tutorial matmul (03-matrix-multiplication: grouped program
    order, masked K, f16 in, f32 accumulate, f16 out), compiled by Triton for
    sm_90a ahead of time and run on the emulator through
    :func:`jaxptx.triton.triton_call`, against Triton's interpreter
    (``TRITON_INTERPRET=1``, in a worker process this script starts, because
    Triton reads that variable when ``triton.language`` is imported), with
    two of the tutorial's autotuning configs, at 256³ and 512³. Target: jaxptx
    at least 10× faster.
``warp``
    NVIDIA Warp's compiled CPU backend (kernels below, compile time excluded
    by a warm-up; the launch and ``wp.synchronize_device`` timed): softmax of
    (256, 1024) f32 (jaxptx: :func:`jaxptx.kernels.softmax`), the sum of 4M
    f32 (jaxptx: :func:`sum_kernel` here, launched with
    :func:`jaxptx.sim.launch`), a naive f32 matmul 1024³ (jaxptx:
    :func:`naive_matmul_kernel` here, one thread an output, timed once: it
    takes minutes). Target: no slower than Warp for the softmax and the sum.
``softmax``
    :func:`jaxptx.kernels.softmax` of (64, 1024) f32 against a row-per-program
    Pallas softmax under ``interpret=True``. Target: no slower.
``trace``
    Trace + emit of 1k, 10k, 50k-instruction kernels, jaxptx against pyptx
    (``benchmarks/trace_speed.py``'s builders). Target: jaxptx at least 2× faster.
``parse``
    Parsing the shared PTX corpus, jaxptx against pyptx, over the files pyptx
    parses (``benchmarks/parse_speed.py``'s loader). Target: at least 5× pyptx.
``dispatch``
    ``y = x * 2 + 1`` over 256 floats (``benchmarks/dispatch.py``'s kernel)
    under ``jax.jit`` against the bare :func:`jaxptx.sim.launch`; medians.
    Targets: jit within 50 µs of bare; bare under 50 µs.
``transformer``
    ``benchmarks/transformer_block.py``'s block (B=4, S=512, D=512) under
    ``jax.jit`` from :mod:`jaxptx.kernels` ops, against the same block in
    ``jnp``. Target: the forward under 5 s.

A peer that is not installed is skipped with a note (its jaxptx side still
runs and is checked). ``pip install 'jaxptx[bench]'`` installs them all.

    python benchmarks/peers.py [--only NAME ...] [--repeat 3]
    python benchmarks/peers.py --smoke     # CI: tiny sizes, one round

Every comparison prints a ``self-check: NAME: ...`` line once its outputs
agree; the exit status is 1 when any disagree.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import triton  # the peer of ``triton`` (jaxptx[triton]); kernels must be module-level
    import triton.language as tl
except ImportError:
    triton = tl = None
try:
    import warp as wp  # the peer of ``warp`` (warp-lang); kernels must be module-level
except ImportError:
    wp = None

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _peer_table import Mismatch, Row, Timing, check_close, interleaved, print_table, rng_array, timed


# -- 1. library GEMMs against Pallas interpret -----------------------------------------------


def pallas_matmul(a: Any, b: Any, block: int = 128) -> Any:
    """``a @ b`` (bf16 in, f32 out) as a tiled Pallas kernel under ``interpret=True``:
    ``block``×``block`` output tiles, K in steps of ``block`` accumulated in the output."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def tile(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        @pl.when(pl.program_id(2) == 0)
        def _zero() -> None:
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk = min(block, m), min(block, n), min(block, k)
    return pl.pallas_call(
        tile, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)), interpret=True)(a, b)


def compare_gemm(args: argparse.Namespace) -> list[Row]:
    """Comparison 1: the library GEMM's three variants against Pallas interpret."""
    import jax
    import jax.numpy as jnp

    from jaxptx import kernels

    targets = {256: 10.0, 1024: 3.0}
    sizes = [128] if args.smoke else [256, 512, 1024]
    archs = ("sm_80", "sm_90a", "sm_100a")
    rows: list[Row] = []
    for n in sizes:
        a = jnp.asarray(rng_array((n, n), seed=1), jnp.bfloat16)
        b = jnp.asarray(rng_array((n, n), seed=2), jnp.bfloat16)
        want = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
        fns = {arch: jax.jit(lambda a, b, arch=arch: kernels.matmul(a, b, arch=arch)) for arch in archs}
        fns["pallas"] = jax.jit(pallas_matmul)
        for name, f in fns.items():   # f32 accumulation in both: agree to float32 rounding
            check_close(f"gemm {n}³ {name}", f(a, b), want, 1e-4)
        t = interleaved({name: (lambda f=f, a=a, b=b: f(a, b).block_until_ready()) for name, f in fns.items()},
                        args.repeat)
        rows += [Row(f"{n}³ bf16→f32, {arch}", t[arch], t["pallas"], targets.get(n)) for arch in archs]
    print_table("Library GEMMs (jaxptx.kernels.matmul, emulator) vs Pallas interpret (128×128 tiles)",
                "Pallas", rows)
    print(f"self-check: gemm: every variant and Pallas match numpy at {', '.join(f'{n}³' for n in sizes)}")
    return rows


# -- 2. Triton's tutorial matmul: jaxptx runs Triton's PTX, against Triton's interpreter ----------

if triton is not None:
    @triton.jit
    def tutorial_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                        BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
        """C = A @ B as Triton's matmul tutorial writes it (without its optional activation)."""
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        c = accumulator.to(tl.float16)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, c, mask=c_mask)

# Two configs of the tutorial's CUDA autotuning list: its first (the largest tiles) and its third.
# (block M, N, K, group M, warps, stages)
TRITON_CONFIGS = {"128x256x64": (128, 256, 64, 8, 8, 3), "128x128x32": (128, 128, 32, 8, 4, 4)}


def triton_grid(n: int, config: tuple[int, ...]) -> tuple[int]:
    """The tutorial's 1-d grid for an n³ problem."""
    return (math.ceil(n / config[0]) * math.ceil(n / config[1]),)


def triton_meta(n: int, config: tuple[int, ...]) -> dict[str, int]:
    """The tutorial kernel's scalar and constexpr arguments for row-major n × n matrices."""
    bm, bn, bk, group = config[:4]
    return {"M": n, "N": n, "K": n, "stride_am": n, "stride_ak": 1, "stride_bk": n, "stride_bn": 1,
            "stride_cm": n, "stride_cn": 1, "BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
            "GROUP_SIZE_M": group}


def triton_worker(folder: str, n: int, config_name: str) -> None:
    """The interpreter's side (run with ``TRITON_INTERPRET=1``): load A and B from
    ``folder``, then per ``run`` line on stdin call the tutorial kernel once and
    answer ``wall cpu``; on ``save`` write C to ``folder``/c.npy."""
    import torch  # Triton's interpreter takes torch tensors (CPU build)

    config = TRITON_CONFIGS[config_name]
    a = torch.from_numpy(np.load(f"{folder}/a.npy"))
    b = torch.from_numpy(np.load(f"{folder}/b.npy"))
    c = torch.zeros((n, n), dtype=torch.float16)
    meta = triton_meta(n, config)
    launch = tutorial_matmul[triton_grid(n, config)]
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            wall, cpu = timed(lambda: launch(a, b, c, **meta))
            print(f"{wall} {cpu}", flush=True)
        elif line.strip() == "save":
            np.save(f"{folder}/c.npy", c.numpy())
            print("saved", flush=True)


class TritonInterpreter:
    """The worker process running Triton's interpreter, one problem and config."""

    def __init__(self, a: np.ndarray, b: np.ndarray, config_name: str) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="peers_triton_")
        np.save(f"{self.folder.name}/a.npy", a)
        np.save(f"{self.folder.name}/b.npy", b)
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--triton-worker", self.folder.name, str(a.shape[0]), config_name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._expect("ready")

    def _expect(self, word: str) -> str:
        line = self.proc.stdout.readline()
        if not line.startswith(word):
            self.close()
            raise RuntimeError(f"Triton interpreter worker: expected {word!r}, got {line!r}")
        return line

    def _send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def run(self) -> tuple[float, float]:
        """One call of the kernel; its (wall, CPU) seconds, timed in the worker."""
        self._send("run")
        wall, cpu = self.proc.stdout.readline().split()
        return float(wall), float(cpu)

    def result(self) -> np.ndarray:
        """C after the last call."""
        self._send("save")
        self._expect("saved")
        return np.load(f"{self.folder.name}/c.npy")

    def close(self) -> None:
        """Stop the worker and remove its files."""
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.folder.cleanup()


def compare_triton(args: argparse.Namespace) -> list[Row]:
    """Comparison 2: Triton's PTX on the emulator against Triton's interpreter."""
    import jax
    import jax.numpy as jnp

    if triton is None:
        print("\n### Triton's tutorial matmul: skipped, triton is not installed (pip install 'jaxptx[triton]')")
        print("self-check: triton: skipped (triton not installed)")
        return []
    import jaxptx.triton as jt

    # Triton's interpreter takes torch tensors: without torch, the jaxptx side runs alone
    interpret = importlib.util.find_spec("torch") is not None
    if not interpret:
        print("\n(torch is not installed, and Triton's interpreter needs it: the jaxptx side runs alone)")
    sizes = [128] if args.smoke else [256, 512]
    configs = ["128x128x32"] if args.smoke else list(TRITON_CONFIGS)
    rows: list[Row] = []
    for n in sizes:
        a, b = rng_array((n, n), np.float16, 3), rng_array((n, n), np.float16, 4)
        want = a.astype(np.float32) @ b.astype(np.float32)
        for name in configs:
            config = TRITON_CONFIGS[name]

            def call(a: Any, b: Any, n: int = n, config: tuple = config) -> Any:
                return jt.triton_call(a, b, kernel=tutorial_matmul, out_type=jax.ShapeDtypeStruct((n, n), jnp.float16),
                                      grid=triton_grid(n, config), num_warps=config[4], num_stages=config[5],
                                      compute_capability=90, **triton_meta(n, config))

            ours = jax.jit(call)
            fns: dict[str, Callable[[], Any]] = {
                "jaxptx": lambda ours=ours, a=a, b=b: ours(a, b).block_until_ready()}
            interp = TritonInterpreter(a, b, name) if interpret else None
            try:
                if interp is not None:
                    fns["interp"] = interp.run
                t = interleaved(fns, args.repeat)
                got_interp = None if interp is None else interp.result()
            finally:
                if interp is not None:
                    interp.close()
            got = np.asarray(ours(a, b))
            # f16 output: one f16 ulp at the largest magnitude is ~2**-11 relative
            check_close(f"triton {n}³ {name} jaxptx", got, want, 2e-3)
            if got_interp is not None:
                check_close(f"triton {n}³ {name} interpreter", got_interp, want, 2e-3)
                check_close(f"triton {n}³ {name} jaxptx vs interpreter", got, got_interp, 2e-3)
            rows.append(Row(f"{n}³ f16, tiles {name}, {config[4]} warps", t["jaxptx"], t.get("interp"), 10.0,
                            higher_is_better=True))
    print_table("Triton's tutorial matmul: its sm_90a PTX on the emulator vs TRITON_INTERPRET=1",
                "Triton interpreter", rows)
    print("self-check: triton: " + ("the emulator's and the interpreter's C match numpy and each other" if interpret
                                    else "the emulator's C matches numpy (no torch: interpreter skipped)"))
    return rows


# -- 3. NVIDIA Warp's compiled CPU backend --------------------------------------------------------

SUM_THREADS, SUM_PER_THREAD = 256, 64   # the sum kernel: 256 threads a CTA, 64 floats a thread


def sum_kernel() -> Any:
    """A jaxptx kernel summing N f32 (N a multiple of 16,384) into ``out[0]`` (zeroed
    by the caller): each thread adds 64 values (16 coalesced ``ld.global.v4.f32``
    into four accumulators), a butterfly shuffle and shared memory reduce the
    CTA, and one ``red.global.add.f32`` a CTA adds its total."""
    from jaxptx import Tile, kernel, ptx, reg, smem
    from jaxptx.types import f32

    per_cta = SUM_THREADS * SUM_PER_THREAD
    warps = SUM_THREADS // 32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("ONE", f32),),
            grid=lambda N: (N // per_cta, 1, 1), block=(SUM_THREADS, 1, 1), arch="sm_80")
    def vector_sum(x, out):
        tid = ptx.special.tid.x()
        base = x.ptr + ptx.mul.wide.u32(ptx.special.ctaid.x() * per_cta + tid * 4, 4)
        acc = [reg.scalar(f32, 0.0) for _ in range(4)]
        for j in range(SUM_PER_THREAD // 4):
            for a, v in zip(acc, ptx.ld.global_.v4.f32(base + j * SUM_THREADS * 16)):
                ptx.add.f32(a, a, v)
        total = (acc[0] + acc[1]) + (acc[2] + acc[3])
        for offset in (16, 8, 4, 2, 1):
            total = total + ptx.shfl.sync.bfly.b32(total, offset, 0x1F, 0xFFFFFFFF)
        part = smem.alloc(f32, warps)
        with ptx.if_((tid & 31) == 0):
            ptx.st.shared.f32(part[tid >> 5], total)
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            s = ptx.ld.shared.f32(part[0])
            for k in range(1, warps):
                s = s + ptx.ld.shared.f32(part[k])
            ptx.red.global_.add.f32(ptx.addr(out.ptr), s)

    return vector_sum


NAIVE_BLOCK = 16


def naive_matmul_kernel() -> Any:
    """A naive f32 jaxptx GEMM, C = A @ B for M, N multiples of 16 and K of 4: one
    thread an element of C (16×16 CTAs), its K loop reading A and B from global
    memory (four products an iteration)."""
    from jaxptx import Tile, kernel, ptx, reg
    from jaxptx.types import f32, u32

    bs, unroll = NAIVE_BLOCK, 4

    @kernel(in_specs=(Tile("M", "K", f32), Tile("K", "N", f32)), out_specs=(Tile("M", "N", f32),),
            grid=lambda M, N: (N // bs, M // bs, 1), block=(bs, bs, 1), arch="sm_80")
    def naive_matmul(a, b, c):
        k_dim, n_dim = a.shape[1], b.shape[1]
        col = ptx.special.ctaid.x() * bs + ptx.special.tid.x()
        row = ptx.special.ctaid.y() * bs + ptx.special.tid.y()
        pa = a.ptr + ptx.mul.wide.u32(row, k_dim * 4)
        pb = b.ptr + ptx.mul.wide.u32(col, 4)
        acc = reg.scalar(f32, 0.0)
        for _ in ptx.range_(0, k_dim, unroll, dtype=u32):
            for u in range(unroll):
                ptx.fma.rn.f32(acc, ptx.ld.global_.f32(pa + u * 4), ptx.ld.global_.f32(pb + u * n_dim * 4), acc)
            ptx.add.u64(pa, pa, unroll * 4)
            ptx.add.u64(pb, pb, unroll * n_dim * 4)
        ptx.st.global_.f32(c.ptr + ptx.mul.wide.u32(row * n_dim + col, 4), acc)

    return naive_matmul


if wp is not None:
    @wp.kernel
    def warp_softmax_rows(x: wp.array2d(dtype=wp.float32), y: wp.array2d(dtype=wp.float32)):
        """One thread a row: its maximum, the sum of exponentials, the probabilities."""
        r = wp.tid()
        n = x.shape[1]
        peak = x[r, 0]
        for j in range(1, n):
            peak = wp.max(peak, x[r, j])
        total = wp.float32(0.0)  # a dynamic variable: Warp cannot mutate a constant in a loop
        for j in range(n):
            total += wp.exp(x[r, j] - peak)
        inv = 1.0 / total
        for j in range(n):
            y[r, j] = wp.exp(x[r, j] - peak) * inv

    @wp.kernel
    def warp_sum(x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32), per_thread: int):
        """Each thread sums ``per_thread`` contiguous values and adds its total atomically."""
        t = wp.tid()
        total = wp.float32(0.0)
        for j in range(per_thread):
            total += x[t * per_thread + j]
        wp.atomic_add(out, 0, total)

    @wp.kernel
    def warp_naive_matmul(a: wp.array2d(dtype=wp.float32), b: wp.array2d(dtype=wp.float32),
                          c: wp.array2d(dtype=wp.float32)):
        """One thread an element of C, its K loop over global memory."""
        i, j = wp.tid()
        total = wp.float32(0.0)
        for k in range(a.shape[1]):
            total += a[i, k] * b[k, j]
        c[i, j] = total


def warp_launch(kernel: Any, dim: Any, inputs: list[Any]) -> None:
    """Launch ``kernel`` on Warp's CPU device and wait for it."""
    wp.launch(kernel, dim=dim, inputs=inputs, device="cpu")
    wp.synchronize_device("cpu")


def compare_warp(args: argparse.Namespace) -> list[Row]:
    """Comparison 3: softmax, a 4M sum and a naive f32 GEMM against Warp's CPU backend."""
    import jax

    from jaxptx import kernels, sim

    rows_n, sum_n, mm_n = (8, 1 << 18, 64) if args.smoke else (256, 1 << 22, 1024)
    have_warp = wp is not None
    if have_warp:
        wp.config.enable_backward = False
        wp.init()
    else:
        print("\n(Warp is not installed: pip install warp-lang; the jaxptx side runs alone)")

    def pair(ours: Callable[[], Any], peer: Callable[[], Any] | None, repeat: int,
             warmup: int = 1) -> tuple[Timing, Timing | None]:
        fns = {"ours": ours} if peer is None else {"ours": ours, "peer": peer}
        t = interleaved(fns, repeat, warmup)
        return t["ours"], t.get("peer")

    rows: list[Row] = []
    # softmax: the library op under jax.jit; Warp: one thread a row
    x = rng_array((rows_n, 1024), seed=5)
    z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = z / z.sum(1, keepdims=True)
    soft = jax.jit(kernels.softmax)
    check_close("warp softmax jaxptx", soft(x), want, 1e-5)
    peer = None
    if have_warp:
        wx, wy = wp.array(x, dtype=wp.float32, device="cpu"), wp.zeros(x.shape, dtype=wp.float32, device="cpu")
        peer = lambda: warp_launch(warp_softmax_rows, rows_n, [wx, wy])
        peer()
        check_close("warp softmax Warp", wy.numpy(), want, 1e-5)
    ours_t, peer_t = pair(lambda: soft(x).block_until_ready(), peer, args.repeat)
    rows.append(Row(f"softmax ({rows_n}, 1024) f32", ours_t, peer_t, 1.0))

    # the sum: jaxptx's kernel on the bare emulator; Warp: as many threads, contiguous chunks
    v = rng_array((sum_n,), seed=6)
    want_sum = np.array([v.astype(np.float64).sum()])
    vsum, out = sum_kernel(), np.zeros(1, np.float32)

    def ours_sum() -> None:
        out[0] = 0.0
        sim.launch(vsum, v, out)

    ours_sum()
    check_close("warp sum jaxptx", out, want_sum, 1e-5)
    peer = None
    if have_warp:
        wv, wout = wp.array(v, dtype=wp.float32, device="cpu"), wp.zeros(1, dtype=wp.float32, device="cpu")
        threads = sum_n // SUM_PER_THREAD

        def peer() -> None:
            wout.zero_()
            warp_launch(warp_sum, threads, [wv, wout, SUM_PER_THREAD])

        peer()
        check_close("warp sum Warp", wout.numpy(), want_sum, 1e-5)
    ours_t, peer_t = pair(ours_sum, peer, args.repeat)
    rows.append(Row(f"sum of {sum_n / (1 << 20):g}M f32", ours_t, peer_t, 1.0))

    # the naive GEMM: minutes on the emulator at 1024³, so one timed call (traced first)
    a, b = rng_array((mm_n, mm_n), seed=7), rng_array((mm_n, mm_n), seed=8)
    want_mm = a.astype(np.float64) @ b.astype(np.float64)
    naive, c = naive_matmul_kernel(), np.zeros((mm_n, mm_n), np.float32)
    naive.specialize(M=mm_n, N=mm_n, K=mm_n)
    peer = None
    if have_warp:
        wa, wb = wp.array(a, dtype=wp.float32, device="cpu"), wp.array(b, dtype=wp.float32, device="cpu")
        wc = wp.zeros((mm_n, mm_n), dtype=wp.float32, device="cpu")
        peer = lambda: warp_launch(warp_naive_matmul, (mm_n, mm_n), [wa, wb, wc])
        peer()
    ours_t, peer_t = pair(lambda: sim.launch(naive, a, b, c), peer, 1, warmup=0)
    check_close("warp naive matmul jaxptx", c, want_mm, 1e-4)
    if have_warp:
        check_close("warp naive matmul Warp", wc.numpy(), want_mm, 1e-4)
    rows.append(Row(f"naive matmul {mm_n}³ f32 (one call)", ours_t, peer_t, None, unit="s"))
    print_table("NVIDIA Warp's CPU backend (compiled) vs jaxptx on the emulator", "Warp", rows)
    print("self-check: warp: softmax, sum and naive matmul match numpy"
          + ("" if have_warp else " (jaxptx only; Warp not installed)"))
    return rows


# -- 4. softmax against Pallas interpret ------------------------------------------------------------


def compare_softmax(args: argparse.Namespace) -> list[Row]:
    """Comparison 4: the library softmax against a Pallas softmax, both interpreted on the CPU."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxptx import kernels

    rows_n = 8 if args.smoke else 64
    x = rng_array((rows_n, 1024), seed=9)
    z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = z / z.sum(1, keepdims=True)

    def row(x_ref: Any, o_ref: Any) -> None:
        v = x_ref[...]
        e = jnp.exp(v - jnp.max(v, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    pallas = jax.jit(pl.pallas_call(row, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(rows_n,),
                                    in_specs=[pl.BlockSpec((1, 1024), lambda i: (i, 0))],
                                    out_specs=pl.BlockSpec((1, 1024), lambda i: (i, 0)), interpret=True))
    ours = jax.jit(kernels.softmax)
    check_close("softmax jaxptx", ours(x), want, 1e-5)
    check_close("softmax Pallas", pallas(x), want, 1e-5)
    t = interleaved({"ours": lambda: ours(x).block_until_ready(),
                     "pallas": lambda: pallas(x).block_until_ready()}, args.repeat * 5)
    rows = [Row(f"softmax ({rows_n}, 1024) f32", t["ours"], t["pallas"], 1.0)]
    print_table("Softmax: jaxptx.kernels.softmax (emulator) vs a Pallas softmax under interpret=True",
                "Pallas", rows)
    print("self-check: softmax: jaxptx and Pallas match numpy")
    return rows


# -- 5. and 6. trace + emit, and parse, against pyptx -----------------------------------------------


def compare_trace(args: argparse.Namespace) -> list[Row]:
    """Comparison 5: trace + emit per instruction, with ``trace_speed``'s kernels."""
    import trace_speed

    sizes = [200] if args.smoke else [1000, 10000, 50000]
    rows: list[Row] = []
    for n in sizes:
        ours, theirs = trace_speed.jaxptx_builder(n), trace_speed.pyptx_builder(n)
        trace_speed.check_text(ours(), n, "jaxptx")
        fns = {"ours": ours}
        if theirs is not None:
            trace_speed.check_text(theirs(), n, "pyptx")
            fns["pyptx"] = theirs
        t = interleaved(fns, args.repeat)
        ours_t = Timing(t["ours"].wall / n, t["ours"].cpu / n)
        peer_t = None if theirs is None else Timing(t["pyptx"].wall / n, t["pyptx"].cpu / n)
        rows.append(Row(f"{n:,} instructions, per instruction", ours_t, peer_t, 2.0,
                        higher_is_better=True, unit="µs"))
    print_table("Trace + emit (benchmarks/trace_speed.py's kernel) vs pyptx", "pyptx", rows)
    print("self-check: trace: every emitted kernel holds its adds and fmas"
          + ("" if rows[0].peer else " (pyptx not installed: jaxptx only)"))
    return rows


def compare_parse(args: argparse.Namespace) -> list[Row]:
    """Comparison 6: parsing the corpus, with ``parse_speed``'s loader."""
    import parse_speed

    import jaxptx

    corpus = parse_speed.DEFAULT_CORPUS
    if corpus.is_dir():
        files = parse_speed.load(corpus)[::10 if args.smoke else 1]
    else:
        print(f"(corpus not found at {corpus}: the example kernels' PTX instead)")
        files = parse_speed.example_texts()
    texts = [t for _, t in files]
    try:
        from pyptx.parser import parse as pyptx_parse
    except ImportError:
        pyptx_parse = None
    if pyptx_parse is not None:   # time both over the files both parse
        texts = [t for t, m in zip(texts, parse_speed.parse_all(pyptx_parse, texts)) if not isinstance(m, Exception)]
    modules = parse_speed.parse_all(jaxptx.parse, texts)
    bad = [i for i, m in enumerate(modules) if isinstance(m, Exception) or jaxptx.emit(m) != texts[i]]
    if bad:
        raise Mismatch(f"parse: jaxptx failed to parse or re-emit {len(bad)} of {len(texts)} files")
    fns = {"ours": lambda: parse_speed.parse_all(jaxptx.parse, texts)}
    if pyptx_parse is not None:
        fns["pyptx"] = lambda: parse_speed.parse_all(pyptx_parse, texts)
    t = interleaved(fns, args.repeat)
    mb = parse_speed.nbytes(texts) / 1e6
    rows = [Row(f"{len(texts)} files, {mb:.3f} MB (jaxptx {mb / t['ours'].wall:.2f} MB/s)", t["ours"],
                t.get("pyptx"), 5.0, higher_is_better=True)]
    print_table("Parsing the PTX corpus (benchmarks/parse_speed.py's loader) vs pyptx", "pyptx", rows)
    print(f"self-check: parse: jaxptx parsed {len(texts)}/{len(texts)} files and emitted each back byte for byte"
          + ("" if pyptx_parse else " (pyptx not installed: jaxptx only)"))
    return rows


# -- 7. dispatch under jax.jit against the bare launch ----------------------------------------------


def compare_dispatch(args: argparse.Namespace) -> list[Row]:
    """Comparison 7: a tiny kernel under ``jax.jit`` against the bare emulator launch (medians)."""
    import statistics

    import dispatch
    import jax
    import jax.numpy as jnp

    from jaxptx import sim

    n, calls = 256, (5 if args.smoke else 100 * args.repeat)
    affine = dispatch.make_kernel()
    jitted = jax.jit(affine)
    spec = affine.specialize(N=n)
    x = jnp.arange(n, dtype=jnp.float32)
    xn, yn = np.asarray(x).copy(), np.zeros(n, np.float32)
    check_close("dispatch jit", jitted(x), xn * 2 + 1, 0.0)

    def bare() -> None:
        sim.launch(spec.module, xn, yn, grid=spec.grid, block=spec.block)

    bare()
    check_close("dispatch bare", yn, xn * 2 + 1, 0.0)
    samples: dict[str, list[float]] = {"jit": [], "bare": []}
    for _ in range(3):
        jitted(x).block_until_ready()
        bare()
    for _ in range(calls):
        samples["jit"].append(timed(lambda: jitted(x).block_until_ready())[0])
        samples["bare"].append(timed(bare)[0])
    med = {k: statistics.median(v) for k, v in samples.items()}
    over = med["jit"] - med["bare"]
    jit_t, bare_t = Timing(med["jit"], math.nan), Timing(med["bare"], math.nan)   # medians of wall time only
    rows = [Row(f"N={n}: jax.jit call (peer: the bare launch); jit − bare = {over * 1e6:.1f} µs", jit_t, bare_t,
                unit="µs", limit=("jit − bare", over, 50e-6)),
            Row(f"N={n}: bare sim.launch", bare_t, None, unit="µs", limit=("bare", med["bare"], 50e-6))]
    print_table(f"Dispatch (benchmarks/dispatch.py's kernel), medians of {calls} interleaved calls",
                "bare launch", rows)
    print("self-check: dispatch: the jitted kernel and the bare launch equal x * 2 + 1")
    return rows


# -- 8. the transformer block -----------------------------------------------------------------------


def compare_transformer(args: argparse.Namespace) -> list[Row]:
    """Comparison 8: ``transformer_block``'s forward from library ops, against it in ``jnp``."""
    import transformer_block as tb

    b, s, d = (1, 128, 128) if args.smoke else (4, 512, 512)
    r = tb.measure(b, s, d, tb.default_hidden(d), args.repeat)
    if r["error"] > tb.TOLERANCE:
        raise Mismatch(f"transformer: relative error {r['error']:.3g} > {tb.TOLERANCE}")
    ours, ref = Timing(r["jaxptx_s"], math.nan), Timing(r["jnp_s"], math.nan)
    rows = [Row(f"B={b} S={s} D={d} F={tb.default_hidden(d)}, arch=auto (first call {r['first_s']:.1f} s)",
                ours, ref, unit="s", limit=None if args.smoke else ("forward", r["jaxptx_s"], 5.0))]
    print_table("Transformer block forward (benchmarks/transformer_block.py) vs the block in jnp (XLA)",
                "jnp", rows)
    print(f"self-check: transformer: the jaxptx block matches the jnp block (relative error {r['error']:.1e})")
    return rows


COMPARISONS: dict[str, Callable[[argparse.Namespace], list[Row]]] = {
    "gemm": compare_gemm, "triton": compare_triton, "warp": compare_warp, "softmax": compare_softmax,
    "trace": compare_trace, "parse": compare_parse, "dispatch": compare_dispatch,
    "transformer": compare_transformer}


def main(argv: list[str] | None = None) -> int:
    """Run the comparisons; 0 when every output agreed, 1 otherwise."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(COMPARISONS), default=None,
                    help="run only these comparisons (default: all)")
    ap.add_argument("--repeat", type=int, default=None, help="timed rounds, the best counts (default 3)")
    ap.add_argument("--smoke", action="store_true", help="CI smoke run: tiny sizes, one round")
    ap.add_argument("--triton-worker", nargs=3, metavar=("FOLDER", "N", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.triton_worker:
        folder, n, config = args.triton_worker
        triton_worker(folder, int(n), config)
        return 0
    args.repeat = args.repeat or (1 if args.smoke else 3)
    import jax

    print(f"python {sys.version.split()[0]}, jax {jax.__version__}, triton "
          f"{getattr(triton, '__version__', 'not installed')}, warp {getattr(wp, '__version__', 'not installed')}; "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"best of {args.repeat} interleaved rounds (wall; CPU ratio beside it)")
    failed = []
    for name in args.only or COMPARISONS:
        t0 = time.perf_counter()
        try:
            COMPARISONS[name](args)
        except Mismatch as e:
            print(f"FAILED: {e}")
            failed.append(name)
        print(f"({name}: {time.perf_counter() - t0:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

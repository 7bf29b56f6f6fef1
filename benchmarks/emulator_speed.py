"""Emulator speed against Pallas ``interpret=True`` in the same process.

1. Row-wise softmax of a (256, 1024) float32 array: the jaxptx kernel of
   ``examples/softmax.py`` on the emulator (256 CTAs × 128 threads), and the
   same computation as a Pallas kernel (one program per row) in interpret
   mode; both checked against numpy.
2. A 256×256×256 GEMM built from ``mma.sync.m16n8k16`` (bf16 in, f32 out),
   ``examples/mma_gemm.py``, on the emulator, checked against numpy.
3. The machine's fixed cost per step (one thread in a loop: uniform, two
   warps in two loops: divergent, a consumer warp waiting on an mbarrier
   while the producer works: spin-wait), and ns per thread-instruction of
   the softmax (every thread busy).
4. Warp-specialised GEMMs of ``benchmarks/gemm_kernels.py`` (TMA ring with
   full/empty mbarriers): ``wgmma`` (sm_90a) and ``tcgen05.mma`` (sm_100a),
   bf16 in, f32 out, checked against numpy; ``--gemm 1024`` for 1024³.

    python benchmarks/emulator_speed.py [--repeat 3] [--gemm 512]
    python benchmarks/emulator_speed.py --smoke   # CI: tiny sizes, one repeat, checks only

Every result is checked against numpy (``self-check:`` lines); a peer that
is not installed (Pallas, part of jax) is skipped with a note.

The emulator raises glibc malloc's mmap/trim thresholds on its first launch
(``jaxptx/sim/core/host.py``: per-instruction arrays would otherwise fault in
fresh pages); ``JAXPTX_SIM_MALLOPT=0`` measures it without.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _timing import wall_times

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (after one warm-up)."""
    return min(wall_times(fn, repeat))


def softmax_rows(repeat: int, rows: int = 256, cols: int = 1024) -> None:
    """The softmax comparison table: ``rows`` x ``cols`` float32, both
    backends checked against numpy (Pallas skipped with a note when it
    cannot be imported)."""
    import jax
    import jax.numpy as jnp

    from jaxptx import sim
    from softmax import reference, softmax

    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    want = reference(x)
    y = np.zeros_like(x)

    def emulate() -> None:
        sim.launch(softmax, x, y)

    t_emu = best(emulate, repeat)
    err_emu = float(np.abs(y - want).max())
    assert err_emu < 1e-5, f"softmax on the emulator: max abs error {err_emu}"
    print(f"softmax ({rows}, {cols}) float32, best of", repeat)
    print(f"| {'backend':<34} | {'ms':>8} | {'max abs err':>11} |")
    print(f"| {f'jaxptx emulator ({rows * 128:,} threads)':<34} | {t_emu * 1e3:8.1f} | {err_emu:11.2e} |")
    try:
        from jax.experimental import pallas as pl
    except ImportError as e:
        print(f"| {'pallas_call(interpret=True)':<34} | skipped: {e} |")
        print("self-check: softmax on the emulator matches numpy (Pallas not available, its row skipped)")
        return

    def row_kernel(x_ref, o_ref):
        v = x_ref[...]
        e = jnp.exp(v - jnp.max(v, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    pallas = jax.jit(pl.pallas_call(
        row_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(x.shape[0],),
        in_specs=[pl.BlockSpec((1, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1, x.shape[1]), lambda i: (i, 0)), interpret=True))

    def interpret() -> None:
        pallas(x).block_until_ready()

    t_pal = best(interpret, repeat)
    err_pal = float(np.abs(np.asarray(pallas(x)) - want).max())
    assert err_pal < 1e-5, f"softmax under Pallas interpret: max abs error {err_pal}"
    print(f"| {'pallas_call(interpret=True)':<34} | {t_pal * 1e3:8.1f} | {err_pal:11.2e} |")
    print(f"emulator / pallas time: {t_emu / t_pal:.2f}x")
    print("self-check: softmax on the emulator and under Pallas interpret matches numpy")


def mma_gemm_256(repeat: int, n: int = 256) -> None:
    """The ``n`` x ``n`` x ``n`` mma.sync GEMM on the emulator (256 by
    default), checked against numpy."""
    import ml_dtypes

    from jaxptx import sim
    from mma_gemm import mma_gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    bt = np.ascontiguousarray(rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16).T)
    c = np.zeros((n, n), np.float32)
    t = best(lambda: sim.launch(mma_gemm, a, bt, c), repeat)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    err = float(np.abs(c - want).max())
    assert err < 1e-3 * np.abs(want).max(), f"mma.sync GEMM: max abs error {err}"
    steps = mma_gemm.ptx(M=n, N=n, K=n).count("mma.sync")
    print(f"\nmma.sync GEMM {n}x{n}x{n} bf16->f32 ({(n // 16) * (n // 8)} CTAs x 32 threads, {steps} mma.sync "
          f"per warp): {t * 1e3:.1f} ms, max abs err {err:.2e}")
    print("self-check: the mma.sync GEMM matches numpy")


class LaunchStats:
    """Steps and thread-instructions of the last launch (read from the
    machine as the device closes it)."""

    def __init__(self) -> None:
        from jaxptx.sim.core.machine import Machine
        self.steps = self.thread_steps = 0
        close = Machine.close
        stats = self

        def keep(machine: Machine) -> None:
            stats.steps, stats.thread_steps = machine.steps, machine.thread_steps
            close(machine)
        Machine.close = keep


_HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"
_LOOPS = _HEAD + """.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .b32 %r<8>; .reg .pred %p<3>; .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [n];
    mov.u32 %r1, 0;
    mov.u32 %r3, 0;
    mov.u32 %r5, %tid.x;
    setp.ge.u32 %p2, %r5, 32;
    @%p2 bra B;
A:
    add.u32 %r3, %r3, %r1;
    add.u32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, %r2;
    @%p1 bra A;
    bra.uni E;
B:
    add.u32 %r3, %r3, 2;
    add.u32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, %r2;
    @%p1 bra B;
E:
    st.global.u32 [%rd1], %r3;
    ret;
}"""


def _fence_loop(fences: int) -> str:
    """One thread: a loop of ``fences`` no-op fences and add/setp/bra (a
    fence costs the machine only: no operands, no semantics)."""
    return _HEAD + """.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .b32 %r<4>; .reg .pred %p<2>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [n];
    mov.u32 %r1, 0;
L:
""" + "    fence.acq_rel.gpu;\n" * fences + """    add.u32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, %r2;
    @%p1 bra L;
    st.global.u32 [%rd1], %r1;
    ret;
}"""


# Warp 1 (lane 0) makes 64 items, 16 dependent adds each, into a 2-slot ring
# (full/empty mbarriers); warp 0 waits for each and sums it.
_SPIN = _HEAD + """.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .b32 %r<24>; .reg .pred %p<8>; .reg .b64 %rd<4>;
    .shared .align 8 .b64 full[2]; .shared .align 8 .b64 empty[2]; .shared .align 4 .b32 buf[2];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [full], 1;
    @%p1 mbarrier.init.shared::cta.b64 [full+8], 1;
    @%p1 mbarrier.init.shared::cta.b64 [empty], 32;
    @%p1 mbarrier.init.shared::cta.b64 [empty+8], 32;
    bar.sync 0;
    mov.u32 %r10, 0;
    mov.u32 %r9, 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
CONSUME:
    and.b32 %r11, %r10, 1;
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
CWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r13], %r12;
    @!%p3 bra CWAIT;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 4, %r14;
    ld.shared.u32 %r15, [%r14];
    add.u32 %r9, %r9, %r15;
    mov.u32 %r16, empty;
    mad.lo.u32 %r16, %r11, 8, %r16;
    mbarrier.arrive.shared::cta.b64 %rd2, [%r16];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 64;
    @%p4 bra CONSUME;
    @%p1 st.global.u32 [%rd1], %r9;
    bra.uni END;
PRODUCER:
    setp.ne.u32 %p5, %r1, 32;
    @%p5 bra END;
PRODUCE:
    and.b32 %r11, %r10, 1;
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;
    xor.b32 %r12, %r12, 1;
    mov.u32 %r16, empty;
    mad.lo.u32 %r16, %r11, 8, %r16;
PWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r16], %r12;
    @!%p3 bra PWAIT;
    mov.u32 %r17, 0;
    mov.u32 %r18, %r10;
WORK:
    add.u32 %r18, %r18, 1;
    add.u32 %r17, %r17, 1;
    setp.lt.u32 %p6, %r17, 16;
    @%p6 bra WORK;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 4, %r14;
    st.shared.u32 [%r14], %r18;
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
    mbarrier.arrive.release.cta.shared::cta.b64 %rd2, [%r13];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 64;
    @%p4 bra PRODUCE;
END:
    ret;
}"""


def step_costs(repeat: int, scale: float = 1.0, rows: int = 256) -> None:
    """Fixed cost per step, and ns per thread-instruction of a busy grid
    (``scale`` multiplies the loops' trip counts; ``rows`` of the softmax)."""
    from jaxptx import sim
    from softmax import softmax

    stats = LaunchStats()
    out = np.zeros(1, np.uint32)

    def per_step(text: str, block: int, n: int = 0, grid: int = 1) -> float:
        n = max(4, int(n * scale))

        def launch(k: int) -> None:
            sim.launch(text, out, k, block=(block, 1, 1), grid=(grid, 1, 1))
        times = [min(wall_times(lambda: launch(k), repeat)) for k in (n, 4 * n)]
        steps = []
        for k in (n, 4 * n):
            launch(k)
            steps.append(stats.steps)
        return (times[1] - times[0]) / (steps[1] - steps[0])

    print("\nfixed cost per step (the difference of two launches over their steps), best of", repeat)
    iteration = [per_step(_fence_loop(k), 1, 2000) * (k + 3) for k in (0, 8)]
    print(f"| machine only: a step of a no-op fence (1 thread)  | {(iteration[1] - iteration[0]) / 8 * 1e6:6.1f} us |")
    print(f"| uniform: 1 thread in a loop of add/setp/bra       | {per_step(_LOOPS, 1, 2000) * 1e6:6.1f} us |")
    print(f"| divergent: 2 warps in 2 loops                     | {per_step(_LOOPS, 64, 1000) * 1e6:6.1f} us |")
    print(f"| divergent, 64 CTAs x 384 threads in 2 loops       | {per_step(_LOOPS, 384, 250, 64) * 1e6:6.1f} us |")
    t = min(wall_times(lambda: sim.launch(_SPIN, out, 0, block=(64, 1, 1)), repeat))
    assert out[0] == sum(range(16, 16 + 64)), out[0]
    print(f"| spin-wait: consumer warp waits on mbarriers while  | {t / stats.steps * 1e6:6.1f} us | "
          f"({stats.steps} steps, {t * 1e3:.1f} ms a launch)")
    print("|   one producer thread works (64 items)            |           |")
    x = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
    y = np.zeros_like(x)
    t = min(wall_times(lambda: sim.launch(softmax, x, y), repeat))
    print(f"softmax ({rows}, 1024): {stats.thread_steps:,} thread-instructions in {stats.steps} steps: "
          f"{t / stats.thread_steps * 1e9:.2f} ns per thread-instruction, {t / stats.steps * 1e6:.0f} us a step")
    print("self-check: the spin-wait kernel's sum is right")


def warp_specialised_gemms(n: int, repeat: int) -> None:
    """The TMA + wgmma and TMA + tcgen05 GEMMs at n x n x n, against numpy."""
    import ml_dtypes

    from jaxptx import sim
    from gemm_kernels import maps, tc_gemm, ws_gemm

    stats = LaunchStats()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    print(f"\nwarp-specialised GEMM {n}x{n}x{n} bf16 -> f32 (128x128 tiles, 4-stage TMA ring), best of {repeat}")
    for k, what in ((ws_gemm, "TMA + wgmma (sm_90a), 3 warpgroups"), (tc_gemm, "TMA + tcgen05.mma (sm_100a), 4 warps")):
        spec = k.specialize(M=n, N=n, K=n)
        c = np.zeros((n, n), np.float32)

        def run(spec: Any = spec, c: np.ndarray = c) -> None:
            sim.launch(spec.module, a, bt, c, *maps(a.shape, bt.shape), grid=spec.grid, block=spec.block,
                       smem=spec.smem)
        t = min(wall_times(run, repeat, warmup=0 if n >= 1024 else 1))
        err = float(np.abs(c - want).max())
        assert err < 1e-3 * np.abs(want).max(), f"{k.name}: max abs error {err}"
        print(f"| {what:<38} | {t:7.2f} s | {stats.steps:5d} steps | {stats.thread_steps:>12,} thread-inst | "
              f"max abs err {err:.1e} |")
    print(f"self-check: both warp-specialised GEMMs match numpy at {n}^3")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks (``--smoke``: tiny sizes, one repeat)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="launches per figure, the best counts (default 3)")
    ap.add_argument("--gemm", type=int, default=None,
                    help="n of the n x n x n warp-specialised GEMMs (default 512; --smoke: 128)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI smoke run: 8-row softmax, 32^3 mma.sync and 128^3 warp-specialised GEMMs, "
                         "short loops, one repeat")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.smoke else 3)
    gemm = args.gemm or (128 if args.smoke else 512)
    rows = 8 if args.smoke else 256
    softmax_rows(repeat, rows)
    mma_gemm_256(repeat, 32 if args.smoke else 256)
    step_costs(repeat, 0.05 if args.smoke else 1.0, rows)
    warp_specialised_gemms(gemm, 1 if gemm >= 1024 else repeat)


if __name__ == "__main__":
    main()

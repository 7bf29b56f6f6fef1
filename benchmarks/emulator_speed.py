"""Emulator speed against Pallas ``interpret=True`` in the same process.

1. Row-wise softmax of a (256, 1024) float32 array: the jaxptx kernel of
   ``examples/softmax.py`` on the emulator (256 CTAs × 128 threads), and the
   same computation as a Pallas kernel (one program per row) in interpret
   mode; both checked against numpy.
2. A 256×256×256 GEMM built from ``mma.sync.m16n8k16`` (bf16 in, f32 out),
   ``examples/mma_gemm.py``, on the emulator, checked against numpy.

    python benchmarks/emulator_speed.py [--repeat 3]

The emulator raises glibc malloc's mmap/trim thresholds on its first launch
(``jaxptx/sim/_host.py``: per-instruction arrays would otherwise fault in
fresh pages); ``JAXPTX_SIM_MALLOPT=0`` measures it without.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from _timing import wall_times

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))


def best(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (after one warm-up)."""
    return min(wall_times(fn, repeat))


def softmax_rows(repeat: int) -> None:
    """The softmax comparison table."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from jaxptx import sim
    from softmax import reference, softmax

    x = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    want = reference(x)
    y = np.zeros_like(x)

    def emulate():
        sim.launch(softmax, x, y)

    def row_kernel(x_ref, o_ref):
        v = x_ref[...]
        e = jnp.exp(v - jnp.max(v, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    pallas = jax.jit(pl.pallas_call(
        row_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(x.shape[0],),
        in_specs=[pl.BlockSpec((1, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1, x.shape[1]), lambda i: (i, 0)), interpret=True))

    def interpret():
        pallas(x).block_until_ready()

    t_emu = best(emulate, repeat)
    err_emu = float(np.abs(y - want).max())
    t_pal = best(interpret, repeat)
    err_pal = float(np.abs(np.asarray(pallas(x)) - want).max())
    print("softmax (256, 1024) float32, best of", repeat)
    print(f"| {'backend':<34} | {'ms':>8} | {'max abs err':>11} |")
    print(f"| {'jaxptx emulator (32,768 threads)':<34} | {t_emu * 1e3:8.1f} | {err_emu:11.2e} |")
    print(f"| {'pallas_call(interpret=True)':<34} | {t_pal * 1e3:8.1f} | {err_pal:11.2e} |")
    print(f"emulator / pallas time: {t_emu / t_pal:.2f}x")


def mma_gemm_256(repeat: int) -> None:
    """The 256×256×256 mma.sync GEMM on the emulator."""
    import ml_dtypes

    from jaxptx import sim
    from mma_gemm import mma_gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    bt = np.ascontiguousarray(rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16).T)
    c = np.zeros((256, 256), np.float32)
    t = best(lambda: sim.launch(mma_gemm, a, bt, c), repeat)
    err = float(np.abs(c - a.astype(np.float64) @ bt.astype(np.float64).T).max())
    steps = mma_gemm.ptx(M=256, N=256, K=256).count("mma.sync")
    print(f"\nmma.sync GEMM 256x256x256 bf16->f32 (512 CTAs x 32 threads, {steps} mma.sync per warp): "
          f"{t * 1e3:.1f} ms, max abs err {err:.2e}")


def main() -> None:
    """Run the benchmarks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    softmax_rows(args.repeat)
    mma_gemm_256(args.repeat)


if __name__ == "__main__":
    main()

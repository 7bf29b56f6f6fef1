"""What exploring schedules costs: ``sim.explore`` over 100 seeds, and one
random-schedule launch against the default schedule.

1. The lock-order inversion of ``tests/sim/test_schedules.py`` (two warps,
   lane 0 of each takes two locks): 100 seeds in one process and in two,
   with how many seeds found the deadlock.
2. The library's Hopper GEMM (a TMA producer warp, two ``wgmma`` consumer
   warpgroups, cluster barriers) at 64x64x64 under ``jax.jit``: the default
   schedule against ``JAXPTX_SIM_SCHEDULE=random:N``, best of ``--repeat``.

    python benchmarks/explore_speed.py [--repeat 3]
    python benchmarks/explore_speed.py --smoke    # CI: one process, one repeat, one random schedule

Checked (``self-check:`` lines): the inverted kernel deadlocks on some
seed and its ordered twin on none; the GEMM matches numpy on every schedule.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np
from _timing import wall_times

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "sim"))


def locks(repeat: int, workers_list: tuple[int, ...] = (1, 2)) -> None:
    """100 seeds of the lock-order inversion, in one process and in two
    (``workers_list``); the inverted kernel must fail on some seed, its twin on none."""
    from jaxptx import sim
    from test_schedules import INVERTED, ORDERED

    def arrays() -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(2, np.uint32), np.zeros(1, np.uint32)
    print("sim.explore, 100 seeds, 2 warps taking 2 locks (lane 0 of each), best of", repeat)
    print("| kernel                       | workers | seconds | seeds failing |")
    for name, text in (("inverted (deadlocks)", INVERTED), ("ordered (its twin)", ORDERED)):
        for workers in workers_list:
            found = []
            best = min(wall_times(lambda: found.append(sim.explore(text, *arrays(), block=64, seeds=100,
                                                                   workers=workers)), repeat, warmup=0))
            failing = len(found[-1].failures)
            print(f"| {name:28} | {workers:7} | {best:7.2f} | {failing:13} |")
            if text is INVERTED:
                assert failing > 0, f"{name}, {workers} workers: no seed of 100 found the deadlock"
            else:
                assert failing == 0, f"{name}, {workers} workers: {failing} seeds failed"
    print("self-check: the inverted kernel deadlocks on some seeds, its ordered twin on none")


def hopper_gemm(repeat: int, schedules: tuple[str, ...] = ("", "random:3", "random:11")) -> None:
    """The sm_90a library GEMM under the default and random schedules
    (``""``: the default), each result checked against numpy."""
    import jax
    import ml_dtypes

    from jaxptx.kernels._matmul_sm90 import matmul_sm90
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    f = jax.jit(lambda x, y: matmul_sm90(x, y, sms=132))
    want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    print("\nHopper GEMM 64x64x64 (3 warpgroups, 2-CTA cluster) under jax.jit, best of", repeat)
    print("| schedule      | ms a call |")
    for env in schedules:
        os.environ["JAXPTX_SIM_SCHEDULE"] = env
        got: list[np.ndarray] = []
        t = min(wall_times(lambda got=got: got.append(np.asarray(f(a, b), np.float64)), repeat))
        err = float(np.abs(got[-1].reshape(want.shape) - want).max())
        assert err < 2e-2 * np.abs(want).max(), f"schedule {env or 'default'}: max abs error {err}"
        print(f"| {env or 'default':13} | {t * 1e3:9.1f} |")
    os.environ.pop("JAXPTX_SIM_SCHEDULE", None)
    print(f"self-check: the GEMM matches numpy on every schedule ({', '.join(e or 'default' for e in schedules)})")


def main(argv: list[str] | None = None) -> None:
    """Run both parts (``--smoke``: one process, one repeat, one random schedule)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="runs per figure, the best counts (default 3)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI smoke run: 100 seeds in one process only, one repeat, default and random:3")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.smoke else 3)
    t = time.perf_counter()
    locks(repeat, (1,) if args.smoke else (1, 2))
    hopper_gemm(repeat, ("", "random:3") if args.smoke else ("", "random:3", "random:11"))
    print(f"\n({time.perf_counter() - t:.0f} s in all)")


if __name__ == "__main__":
    main()

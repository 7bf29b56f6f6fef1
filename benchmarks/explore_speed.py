"""What exploring schedules costs: ``sim.explore`` over 100 seeds, and one
random-schedule launch against the default schedule.

1. The lock-order inversion of ``tests/sim/test_schedules.py`` (two warps,
   lane 0 of each takes two locks): 100 seeds in one process and in two,
   with how many seeds found the deadlock.
2. The library's Hopper GEMM (a TMA producer warp, two ``wgmma`` consumer
   warpgroups, cluster barriers) at 64x64x64 under ``jax.jit``: the default
   schedule against ``JAXPTX_SIM_SCHEDULE=random:N``, best of ``--repeat``.

    python benchmarks/explore_speed.py [--repeat 3]
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


def locks(repeat: int) -> None:
    """100 seeds of the lock-order inversion, in one and two processes."""
    from jaxptx import sim
    from test_schedules import INVERTED, ORDERED

    def arrays():
        return np.zeros(2, np.uint32), np.zeros(1, np.uint32)
    print("sim.explore, 100 seeds, 2 warps taking 2 locks (lane 0 of each), best of", repeat)
    print("| kernel                       | workers | seconds | seeds failing |")
    for name, text in (("inverted (deadlocks)", INVERTED), ("ordered (its twin)", ORDERED)):
        for workers in (1, 2):
            found = []
            best = min(wall_times(lambda: found.append(sim.explore(text, *arrays(), block=64, seeds=100,
                                                                   workers=workers)), repeat, warmup=0))
            print(f"| {name:28} | {workers:7} | {best:7.2f} | {len(found[-1].failures):13} |")


def hopper_gemm(repeat: int) -> None:
    """The sm_90a library GEMM under the default and random schedules."""
    import jax
    import ml_dtypes

    from jaxptx.kernels._matmul_sm90 import matmul_sm90
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    f = jax.jit(lambda x, y: matmul_sm90(x, y, sms=132))
    print("\nHopper GEMM 64x64x64 (3 warpgroups, 2-CTA cluster) under jax.jit, best of", repeat)
    print("| schedule      | ms a call |")
    for env in ("", "random:3", "random:11"):
        os.environ["JAXPTX_SIM_SCHEDULE"] = env
        t = min(wall_times(lambda: np.asarray(f(a, b)), repeat))
        print(f"| {env or 'default':13} | {t * 1e3:9.1f} |")
    os.environ.pop("JAXPTX_SIM_SCHEDULE", None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    t = time.perf_counter()
    locks(args.repeat)
    hopper_gemm(args.repeat)
    print(f"\n({time.perf_counter() - t:.0f} s in all)")


if __name__ == "__main__":
    main()

"""What a node costs: one ``System.launch`` of 8 grids against 8 lone
launches of the same grids.

1. Independent grids (each device scales its own vector in a runtime loop,
   no communication): one launch on a node of 8 (the grids run in turns of
   ``TURN_STEPS`` steps) against the 8 grids launched one after another on 8
   devices of the node, and on 8 lone ``sim.Device`` s. The ratio is what
   running a node costs over running its devices' grids alone.
2. The worked example's collectives (``examples/node_allgather.py``) on 8
   devices: a ring all-gather whose devices wait on each other's flags, and
   a one-shot multimem all-reduce.

    python benchmarks/system_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from _timing import wall_times

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

DEVICES = 8
SCALE = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry scale(.param .u64 x, .param .u32 n)
{
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>; .reg .f32 %f<2>;
    ld.param.u64 %rd1, [x];
    ld.param.u32 %r5, [n];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mad.lo.u32 %r3, %r2, 128, %r1;
    mul.wide.u32 %rd2, %r3, 4;
    add.u64 %rd3, %rd1, %rd2;
    mov.u32 %r4, 0;
LOOP:
    ld.global.f32 %f1, [%rd3];
    fma.rn.f32 %f1, %f1, 0f3F000000, 0f3F800000;
    st.global.f32 [%rd3], %f1;
    add.u32 %r4, %r4, 1;
    setp.lt.u32 %p1, %r4, %r5;
    @%p1 bra LOOP;
    ret;
}
"""


def independent(repeat: int, iterations: int = 300, ctas: int = 4) -> None:
    """Table 1: a node launch of 8 independent grids against 8 lone launches."""
    from jaxptx import sim

    node = sim.System(DEVICES)
    lone = [sim.Device() for _ in range(DEVICES)]
    size = ctas * 128 * 4
    on_node = [d.alloc(size) for d in node.devices]
    on_lone = [d.alloc(size) for d in lone]
    grids = [dict(device=i, source=SCALE, params=[on_node[i], iterations], grid=ctas, block=128)
             for i in range(DEVICES)]
    together = min(wall_times(lambda: node.launch(grids), repeat))
    apart = min(wall_times(lambda: [d.launch(SCALE, [a, iterations], grid=ctas, block=128)
                                    for d, a in zip(node.devices, on_node)], repeat))
    alone = min(wall_times(lambda: [d.launch(SCALE, [a, iterations], grid=ctas, block=128)
                                    for d, a in zip(lone, on_lone)], repeat))
    steps = 6 * iterations + 8
    print(f"8 independent grids ({ctas} CTAs x 128 threads, ~{steps} steps each), best of {repeat}")
    print("| run                                   | seconds | per grid-step |")
    print("|---------------------------------------|---------|---------------|")
    for what, t in (("System(8).launch, all 8 together", together),
                    ("8 launches on the node's devices", apart), ("8 launches on 8 lone sim.Device", alone)):
        print(f"| {what:<37} | {t:7.3f} | {t / (DEVICES * steps) * 1e6:9.1f} us  |")
    print(f"ratio node launch / 8 lone launches: {together / alone:.2f}")


def collectives(repeat: int) -> None:
    """Table 2: the worked example's collectives on 8 devices."""
    from node_allgather import THREADS, run_allgather, run_allreduce

    from jaxptx.sim import System

    rng = np.random.default_rng(0)
    chunks = rng.integers(0, 1 << 32, (DEVICES, THREADS), dtype=np.uint32)
    x = rng.standard_normal((DEVICES, DEVICES * THREADS)).astype(np.float32)

    def fresh() -> System:
        node = System(DEVICES)
        node.enable_peer_access()
        return node
    gather = min(wall_times(lambda: run_allgather(fresh(), chunks), repeat))
    reduce = min(wall_times(lambda: run_allreduce(fresh(), x), repeat))
    print(f"\nexamples/node_allgather.py on {DEVICES} devices ({THREADS} threads each), best of {repeat}")
    print(f"| ring all-gather (7 flag hand-offs)   | {gather:7.3f} s |")
    print(f"| one-shot multimem all-reduce         | {reduce:7.3f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    independent(args.repeat)
    collectives(args.repeat)


if __name__ == "__main__":
    main()

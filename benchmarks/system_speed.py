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
3. What the sanitizer costs on a node of 8 (``check="all"``: each grid's
   checks and the node's between grids) against the unchecked launch: the
   independent grids of table 1, and the ring all-gather with flags of the
   tests (``tests/sim/system_kernels.py``), whose every chunk crosses devices.

    python benchmarks/system_speed.py [--repeat 5]
    python benchmarks/system_speed.py --smoke     # CI: 1 CTA a grid, 20 iterations, one repeat

Checked (``self-check:`` lines): every scaled vector against the same
float32 recurrence in numpy, both collectives against numpy, and the checked
launches report no finding.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
from _timing import wall_times

_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT / "examples"))

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


def expected(launches: int, iterations: int, n: int) -> np.ndarray:
    """``n`` zeros after ``launches`` launches of ``iterations`` steps of
    ``x = x * 0.5 + 1`` in float32 (the halving is exact, so the fma rounds
    once, like numpy's add)."""
    x = np.float32(0.0)
    for _ in range(launches * iterations):
        x = np.float32(x * np.float32(0.5) + np.float32(1.0))
    return np.full(n, x, np.float32)


def independent(repeat: int, iterations: int = 300, ctas: int = 4) -> None:
    """Table 1: a node launch of 8 independent grids against 8 lone launches,
    every vector checked afterwards."""
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
    n = ctas * 128
    like = np.zeros(n, np.float32)
    node_want, lone_want = expected(2 * (repeat + 1), iterations, n), expected(repeat + 1, iterations, n)
    for d, a in zip(node.devices, on_node):
        np.testing.assert_array_equal(d.from_device(a, like=like), node_want, err_msg=f"node device {d.index}")
    for i, (d, a) in enumerate(zip(lone, on_lone)):
        np.testing.assert_array_equal(d.from_device(a, like=like), lone_want, err_msg=f"lone device {i}")
    print("self-check: every device's vector equals the float32 recurrence in numpy")


def collectives(repeat: int) -> None:
    """Table 2: the worked example's collectives on 8 devices."""
    from node_allgather import THREADS, run_allgather, run_allreduce

    from jaxptx.sim import System

    rng = np.random.default_rng(0)
    chunks = rng.integers(0, 1 << 32, (DEVICES, THREADS), dtype=np.uint32)
    x = rng.standard_normal((DEVICES, DEVICES * THREADS)).astype(np.float32)

    def fresh() -> System:
        """A node of 8 with peer access on."""
        node = System(DEVICES)
        node.enable_peer_access()
        return node
    gathered: list = []
    reduced: list = []
    gather = min(wall_times(lambda: gathered.append(run_allgather(fresh(), chunks)), repeat))
    reduce = min(wall_times(lambda: reduced.append(run_allreduce(fresh(), x)), repeat))
    want = x[0].copy()
    for part in x[1:]:                  # the device order multimem.ld_reduce sums in
        want += part
    assert all(np.array_equal(g, chunks) for g in gathered[-1]), "ring all-gather: does not match numpy"
    assert all(np.array_equal(r, want) for r in reduced[-1]), "one-shot all-reduce: does not match numpy"
    print(f"\nexamples/node_allgather.py on {DEVICES} devices ({THREADS} threads each), best of {repeat}")
    print(f"| ring all-gather (7 flag hand-offs)   | {gather:7.3f} s |")
    print(f"| one-shot multimem all-reduce         | {reduce:7.3f} s |")
    print("self-check: the all-gather and the all-reduce match numpy on every device")


def checked(repeat: int, iterations: int = 100, ctas: int = 4, ring_threads: int = 256) -> None:
    """Table 3: ``check="all"`` against no check on a node of 8."""
    sys.path.insert(0, str(_ROOT / "tests" / "sim"))
    from system_kernels import ring_allgather

    from jaxptx import sim

    node = sim.System(DEVICES)
    node.enable_peer_access()
    vectors = [d.alloc(ctas * 128 * 4) for d in node.devices]
    grids = [dict(device=i, source=SCALE, params=[vectors[i], iterations], grid=ctas, block=128)
             for i in range(DEVICES)]
    n, t = DEVICES, ring_threads
    chunks = np.arange(n * t, dtype=np.uint32).reshape(n, t)
    outs, flags, totals = [], [], []
    for d in node.devices:
        out = np.zeros((n, t), np.uint32)
        out[d.index] = chunks[d.index]
        outs.append(d.to_device(out))
        flags.append(d.alloc(4))
        totals.append(d.alloc(4 * t))
    text = ring_allgather()
    ring = [dict(device=r, source=text, block=t,
                 params=[outs[r], outs[(r + 1) % n], flags[r], flags[(r + 1) % n], totals[r], r, n]) for r in range(n)]

    def reset() -> None:
        for d, f in zip(node.devices, flags):
            d.write(f, np.zeros(1, np.uint32))
    rows = []
    for what, grids_ in ((f"8 independent grids ({ctas} CTAs x 128, {iterations} iterations)", grids),
                         (f"ring all-gather with flags ({t} threads a device)", ring)):
        plain = min(wall_times(lambda g=grids_: (reset(), node.launch(g)), repeat))
        found: list = []
        check = min(wall_times(lambda g=grids_, out=found: (reset(), out.append(node.launch(g, check="all"))), repeat))
        assert found[-1] == [[]] * DEVICES, f"{what}: findings {found[-1]}"
        rows.append((what, plain, check))
    print(f"\ncheck=\"all\" on a node of {DEVICES} against no check, best of {repeat}")
    print("| launch                                          | unchecked | checked | ratio |")
    print("|-------------------------------------------------|-----------|---------|-------|")
    for what, plain, check in rows:
        print(f"| {what:<47} | {plain:7.3f} s | {check:5.3f} s | {check / plain:5.1f} |")
    print("self-check: both checked launches report no finding")


def main(argv: list[str] | None = None) -> None:
    """Run the three tables (``--smoke``: 1 CTA a grid, 20 iterations, one repeat)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None, help="runs per figure, the best counts (default 5)")
    parser.add_argument("--smoke", action="store_true", help="CI smoke run: 1 CTA a grid, 20 iterations, one repeat")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.smoke else 5)
    if args.smoke:
        independent(repeat, iterations=20, ctas=1)
    else:
        independent(repeat)
    collectives(repeat)
    if args.smoke:
        checked(repeat, iterations=20, ctas=1, ring_threads=32)
    else:
        checked(repeat)


if __name__ == "__main__":
    main()

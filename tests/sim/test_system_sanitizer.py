"""The sanitizer across a node (``System.launch(check=...)``): races between
devices, what orders them (``.sys`` release/acquire, fences, ``multimem``),
what does not (``.gpu`` scope), and schedules seeded per device.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from system_kernels import HEAD, oneshot_allreduce, ring_allgather

from jaxptx import sim
from jaxptx.sim.system import grid_seed

THREADS = 32
BETWEEN = "global-memory race between devices"


def _ring(n: int, publish: str = "release", wait: str = "acquire", check: object = "all", block: int = THREADS,
          **launch: object) -> tuple[list, list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The ring all-gather on a node of ``n``: (findings, each device's
    output, each device's column sums, the chunks)."""
    node = sim.System(n)
    node.enable_peer_access()
    chunks = np.random.default_rng(n).integers(0, 1 << 20, (n, block), dtype=np.uint32)
    outs, flags, totals = [], [], []
    for d in node.devices:
        out = np.zeros((n, block), np.uint32)
        out[d.index] = chunks[d.index]
        outs.append(d.to_device(out))
        flags.append(d.alloc(4))
        totals.append(d.alloc(4 * block))
    source = ring_allgather(publish, wait)
    found = node.launch([dict(device=r, source=source, block=block,
                              params=[outs[r], outs[(r + 1) % n], flags[r], flags[(r + 1) % n], totals[r], r, n])
                         for r in range(n)], check=check, **launch)
    got = [d.from_device(o, like=np.zeros((n, block), np.uint32)) for d, o in zip(node.devices, outs)]
    sums = [d.from_device(t, like=np.zeros(block, np.uint32)) for d, t in zip(node.devices, totals)]
    return found, got, sums, chunks


def _allreduce(n: int, wait: bool, check: object = "all") -> tuple[list, list[np.ndarray], np.ndarray]:
    """The one-shot multimem all-reduce on a node of ``n``: (findings, what
    each device copied of the next device's slice, the inputs)."""
    node = sim.System(n)
    x = np.random.default_rng(n).standard_normal((n, n * THREADS)).astype(np.float32)
    data, flags = node.multicast(x[0].nbytes), node.multicast(4)
    bufs, own, got = [], [], []
    for d in node.devices:
        bufs.append(d.to_device(x[d.index]))
        own.append(d.alloc(4))
        got.append(d.alloc(4 * THREADS))
        data.bind(d, bufs[-1])
        flags.bind(d, own[-1])
    source = oneshot_allreduce(wait)
    found = node.launch([dict(device=r, source=source, block=THREADS,
                              params=[data.address, flags.address, own[r], bufs[r], got[r], r, n])
                         for r in range(n)], check=check)
    return found, [d.from_device(g, like=np.zeros(THREADS, np.float32)) for d, g in zip(node.devices, got)], x


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("publish, wait", [("release", "acquire"), ("fence.sys", "fence")])
def test_ring_allgather_with_flags_is_clean(n: int, publish: str, wait: str) -> None:
    found, got, sums, chunks = _ring(n, publish, wait)
    assert found == [[]] * n
    for out, total in zip(got, sums):
        np.testing.assert_array_equal(out, chunks)
        np.testing.assert_array_equal(total, chunks.sum(axis=0, dtype=np.uint32))


def _names_both_devices(finding: sim.Finding, n: int) -> None:
    """A race between devices names both accesses: device, CTA, thread, PTX line."""
    assert finding.kind == "race" and BETWEEN in finding.message
    assert finding.device is not None and finding.other_device is not None
    assert finding.device != finding.other_device and {finding.device, finding.other_device} <= set(range(n))
    who = r"device {} CTA \(0, 0, 0\) thread \(\d+, 0, 0\)"
    assert re.search(r"at PTX line \d+ \([\w.]+\), " + who.format(finding.device) +
                     r" conflicts with the [\w ]+ at PTX line \d+ \([\w.]+\) by " + who.format(finding.other_device),
                     finding.message), finding.message
    assert finding.line.startswith("PTX line ") and finding.other.startswith("PTX line ")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_without_the_flag_wait_a_race_between_devices_is_reported(n: int) -> None:
    found, *_ = _ring(n, "release", "none")
    flat = [f for per in found for f in per]
    assert flat, "the race was not reported"
    for k, per in enumerate(found):
        assert all(f.device == k for f in per)
    for f in flat:
        _names_both_devices(f, n)
    # each device's sum reads what its left neighbour stored, with nothing ordering the two
    assert any(f.device == (f.other_device + 1) % n and "(st.global.u32)" in f.other for f in flat)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_publishing_with_a_gpu_scope_fence_is_a_race_for_the_peer(n: int) -> None:
    """``fence.acq_rel.gpu`` + a relaxed ``.sys`` flag store orders the
    writer's stores for its own GPU only: every reader's loads race."""
    found, got, _, chunks = _ring(n, "fence.gpu", "acquire")
    for out in got:                      # the emulator ran it in order: the data are right, the ordering is not
        np.testing.assert_array_equal(out, chunks)
    for k, per in enumerate(found):
        assert per, f"device {k}: no race reported"
        for f in per:
            _names_both_devices(f, n)
            assert (f.device, f.other_device) == (k, (k - 1) % n)
            assert ".gpu scope orders a device's own accesses only" in f.message


def test_check_true_raises_at_the_first_race_naming_the_device() -> None:
    with pytest.raises(sim.SanitizerError, match=r"^device 1: sanitizer: global-memory race between devices: "
                       r"read of offset 0x0 of device 1's allocation at 0x1001000000000 at PTX line \d+ "
                       r"\(ld\.global\.u32\), device 1 CTA \(0, 0, 0\) thread \(0, 0, 0\) conflicts with the plain "
                       r"write at PTX line \d+ \(st\.global\.u32\) by device 0 CTA \(0, 0, 0\) thread \(0, 0, 0\)") as e:
        _ring(2, "fence.gpu", "acquire", check=True)
    assert [(f.device, f.other_device) for f in e.value.findings] == [(1, 0)]


def test_a_missing_barrier_after_the_acquire_is_a_race_for_the_other_threads() -> None:
    """Thread 0 acquires; the others read without a ``bar.sync`` after it:
    they know nothing of what it acquired."""
    source = ring_allgather().replace("RING_NEXT:\n    bar.sync 0;", "RING_NEXT:")
    node = sim.System(4)
    node.enable_peer_access()
    outs = [d.alloc(4 * 4 * THREADS) for d in node.devices]
    flags = [d.alloc(4) for d in node.devices]
    totals = [d.alloc(4 * THREADS) for d in node.devices]
    found = node.launch([dict(device=r, source=source, block=THREADS,
                              params=[outs[r], outs[(r + 1) % 4], flags[r], flags[(r + 1) % 4], totals[r], r, 4])
                         for r in range(4)], check="all")
    flat = [f for per in found for f in per]
    assert flat and all(BETWEEN in f.message for f in flat)
    assert not any(re.search(r"device \d CTA \(0, 0, 0\) thread \(0, 0, 0\) conflicts", f.message) for f in flat)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_multimem_one_shot_allreduce_is_clean(n: int) -> None:
    found, got, x = _allreduce(n, wait=True)
    assert found == [[]] * n
    want = x[0].copy()
    for part in x[1:]:
        want += part
    for r, g in enumerate(got):
        nxt = (r + 1) % n
        np.testing.assert_array_equal(g, want[nxt * THREADS:(nxt + 1) * THREADS])


@pytest.mark.parametrize("n", [2, 8])
def test_multimem_allreduce_without_its_barrier_races(n: int) -> None:
    found, *_ = _allreduce(n, wait=False)
    flat = [f for per in found for f in per]
    assert flat
    for f in flat:
        _names_both_devices(f, n)
        assert "multimem.st" in f.message


def _bump(scope: str) -> str:
    """Each thread adds 1 to a counter with ``red`` at ``scope`` ("": none, which is ``.gpu``)."""
    return HEAD + f"""
.visible .entry bump(.param .u64 counter)
{{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [counter];
    red{scope}.global.add.u32 [%rd1], 1;
    ret;
}}
"""


@pytest.mark.parametrize("scope, races", [("", True), (".relaxed.gpu", True), (".relaxed.sys", False)])
def test_atomics_of_two_devices_are_morally_strong_at_sys_scope_only(scope: str, races: bool) -> None:
    """Strong accesses of two devices race unless both are ``.sys``
    (``red`` without a scope is ``.gpu``)."""
    node = sim.System(2)
    node.enable_peer_access()
    counter = node.devices[0].alloc(4)
    found = node.launch([dict(device=d, source=_bump(scope), params=[counter]) for d in (0, 1)], check="all")
    assert node.devices[0].from_device(counter, like=np.zeros(1, np.uint32))[0] == 2
    assert found[0] == []
    if not races:
        assert found[1] == []
        return
    line = f"PTX line 9 (red{scope}.global.add.u32)"
    assert [(f.line, f.other, f.other_device) for f in found[1]] == [(line, line, 0)]
    assert (f"{BETWEEN}: strong write of offset 0x0 of device 0's allocation at 0x1000000000 at {line}, device 1 "
            f"CTA (0, 0, 0) thread (0, 0, 0) conflicts with the strong write at {line} by device 0") \
        in found[1][0].message


RACE = HEAD + """
.visible .entry race(.param .u64 p)
{
    .reg .b32 %r<2>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, %tid.x;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def test_findings_within_a_device_name_it_on_a_node_only() -> None:
    lone = sim.Device()
    p = lone.alloc(4)
    alone = lone.launch(RACE, [p], block=2, check="all")
    assert [(f.device, f.other_device) for f in alone] == [(None, None)]
    assert "at PTX line 10 (st.global.u32), CTA (0, 0, 0) thread (1, 0, 0) conflicts" in alone[0].message
    node = sim.System(2)
    q = [d.alloc(4) for d in node.devices]
    found = node.launch([dict(device=d, source=RACE, params=[q[d]], block=2) for d in (0, 1)], check="all")
    assert [[(f.device, f.other_device) for f in per] for per in found] == [[(0, None)], [(1, None)]]
    assert found[1][0].message == alone[0].message.replace("CTA (0, 0, 0)", "device 1 CTA (0, 0, 0)") \
        .replace("0x1000000000", "0x1001000000000")


def test_the_same_seed_gives_the_same_findings_and_results() -> None:
    runs = [_ring(4, "release", "none", schedule="random", seed=seed) for seed in (11, 11, 12)]
    (a, out_a, sum_a, _), (b, out_b, sum_b, _), (c, *_) = runs
    assert a == b
    assert all(np.array_equal(x, y) for x, y in zip(out_a + sum_a, out_b + sum_b))
    assert any(a) and any(c)             # another seed finds the race too
    for seed in (11, 12):                # and the correct ring stays clean under either
        found, got, _, chunks = _ring(4, "fence.sys", "fence", schedule="random", seed=seed)
        assert found == [[]] * 4 and all(np.array_equal(g, chunks) for g in got)


def test_the_schedule_reaches_every_grid_with_a_seed_of_its_own() -> None:
    class Steps(sim.Observer):
        def __init__(self, view: object) -> None:
            self.n = 0
            counted.append(self)

        def before_step(self, pc: int, threads: object) -> None:
            self.n += 1

    steps = {}
    for schedule, seed in ((None, None), ("random", 5)):
        counted: list[Steps] = []
        _ring(2, check=None, block=64, schedule=schedule, seed=seed, observers=[Steps])
        steps[schedule] = [s.n for s in counted]
    assert len(steps[None]) == 2
    # a random schedule runs one warp a step: each grid's two warps take about twice the steps
    assert all(r > 1.5 * d for r, d in zip(steps["random"], steps[None]))
    assert len({grid_seed(5, d, k) for d in range(8) for k in range(2)}) == 16
    assert grid_seed(5, 3, 0) == grid_seed(5, 3, 0) != grid_seed(6, 3, 0)
    with pytest.raises(sim.SimError, match=r"launch seed=5: a seed chooses a random schedule; pass "
                       r"schedule='random'"):
        _ring(2, check=None, seed=5)

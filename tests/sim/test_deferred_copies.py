"""Asynchronous copies complete late under ``schedule="random"``
(:mod:`jaxptx.sim.core.deferred`): a kernel that reads a copy's destination
without waiting for it gets an output that depends on the seed (what
``sim.explore`` reports as ``outputs_differ``), its twin that waits is right
under every seed, and a seed reproduces its run."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# Each thread copies its word into shared memory with cp.async, then reads its
# neighbour's word after bar.sync; WAIT is cp.async.wait_group 0 (or nothing).
CP_ASYNC = HEAD + """
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<4>; .reg .b64 %rd<8>;
    .shared .align 16 .b32 buf[32];
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    mov.u64 %rd5, buf;
    add.u64 %rd6, %rd5, %rd3;
    cp.async.ca.shared.global [%rd6], [%rd4], 4;
    cp.async.commit_group;
    WAIT
    bar.sync 0;
    add.u32 %r2, %r1, 1;
    and.b32 %r2, %r2, 31;
    mul.wide.u32 %rd7, %r2, 4;
    add.u64 %rd7, %rd5, %rd7;
    ld.shared.u32 %r3, [%rd7];
    add.u64 %rd7, %rd2, %rd3;
    st.global.u32 [%rd7], %r3;
    ret;
}
"""

# Thread 0 loads 128 bytes with cp.async.bulk, completing on an mbarrier; every
# thread reads after WAIT (the mbarrier's phase wait, or nothing).
BULK = HEAD + """
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<4>; .reg .b64 %rd<10>; .reg .pred %p<3>;
    .shared .align 16 .b32 buf[32];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mov.u64 %rd5, buf;
    mov.u64 %rd8, bar;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared.b64 [%rd8], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared.b64 %rd9, [%rd8], 128;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rd5], [%rd1], 128, [%rd8];
    WAIT
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd6, %rd5, %rd3;
    ld.shared.u32 %r3, [%rd6];
    add.u64 %rd7, %rd2, %rd3;
    st.global.u32 [%rd7], %r3;
    ret;
}
"""
PHASE_WAIT = """
WAITING:
    mbarrier.try_wait.parity.shared.b64 %p2, [%rd8], 0;
    @!%p2 bra WAITING;"""


def _run(text: str, seed: int | None) -> np.ndarray:
    src = np.arange(1, 33, dtype=np.uint32) * 7
    out = np.zeros(32, np.uint32)
    sim.launch(text, src, out, block=32, **({} if seed is None else dict(schedule="random", seed=seed)))
    return out


@pytest.mark.parametrize("text, wait, want", [
    (CP_ASYNC, "cp.async.wait_group 0;", np.roll(np.arange(1, 33, dtype=np.uint32) * 7, -1)),
    (BULK, PHASE_WAIT, np.arange(1, 33, dtype=np.uint32) * 7),
])
def test_a_copy_read_without_its_wait_depends_on_the_seed_and_its_twin_does_not(text, wait, want) -> None:
    racy, waits = text.replace("WAIT", ""), text.replace("WAIT", wait)
    np.testing.assert_array_equal(_run(racy, None), want)          # the default schedule hides the bug
    outs = {seed: _run(racy, seed) for seed in range(12)}
    wrong = [seed for seed, o in outs.items() if not np.array_equal(o, want)]
    assert wrong, "no seed completed the copy after its read"
    np.testing.assert_array_equal(_run(racy, wrong[0]), outs[wrong[0]])      # a seed reproduces its run
    for seed in range(12):
        np.testing.assert_array_equal(_run(waits, seed), want)


def test_explore_reports_the_missing_wait_as_outputs_that_differ() -> None:
    src = np.arange(1, 33, dtype=np.uint32) * 7
    racy = sim.explore(CP_ASYNC.replace("WAIT", ""), src, np.zeros(32, np.uint32), seeds=12, block=32)
    assert racy.outputs_differ
    waits = sim.explore(CP_ASYNC.replace("WAIT", "cp.async.wait_group 0;"), src, np.zeros(32, np.uint32),
                        seeds=12, block=32)
    assert not waits.outputs_differ and not waits.failures


def test_the_sanitizer_reports_the_missing_wait_on_every_schedule() -> None:
    """A checked launch completes copies at issue; the sanitizer itself knows
    the copy was in flight at the read."""
    racy = CP_ASYNC.replace("WAIT", "")
    src, out = np.arange(1, 33, dtype=np.uint32), np.zeros(32, np.uint32)
    for kw in ({}, dict(schedule="random", seed=3)):
        with pytest.raises(sim.SanitizerError, match=r"cp\.async"):
            sim.launch(racy, src, out, block=32, check=True, **kw)

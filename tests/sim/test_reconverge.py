"""A warp reconverges at an ``.aligned`` barrier (``jaxptx.sim.core.barriers.reconverge``).

Lanes that reach ``bar.sync`` while other live lanes of their warp are still
behind it (spinning in a branch, parked, held back by a random schedule)
wait for them, as hardware does at the barrier that post-dominates a
divergent branch; lanes that went past the barrier still make it divergent
(``tests/sim/test_faults.py`` holds those faults)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"

# Lane 0 of warp 0 spins on a flag that thread 32 (warp 1) sets after the
# branch; lanes 1-31 of warp 0 reach bar.sync first and must wait for lane 0.
LANE_BEHIND = HEAD + """.visible .entry lane_behind(.param .u64 out, .param .u64 flag, .param .u32 setter)
{
    .reg .pred %p<4>; .reg .b32 %r<8>; .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [flag];
    ld.param.u32 %r5, [setter];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SKIP;
SPIN:
    ld.volatile.global.u32 %r2, [%rd2];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra SPIN;
    st.volatile.global.u32 [%rd2+4], 7;
SKIP:
    setp.eq.u32 %p3, %r1, %r5;
    @%p3 st.volatile.global.u32 [%rd2], 1;
    bar.sync 0;
    ld.volatile.global.u32 %r3, [%rd2+4];
    add.u32 %r4, %r1, %r3;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    st.global.u32 [%rd4], %r4;
    ret;
}"""


def _run(setter: int, **launch) -> tuple[np.ndarray, np.ndarray]:
    out, flag = np.zeros(64, np.uint32), np.zeros(2, np.uint32)
    sim.launch(LANE_BEHIND, out, flag, np.uint32(setter), block=(64, 1, 1), **launch)
    return out, flag


def test_lanes_wait_at_the_barrier_for_a_lane_still_in_the_branch() -> None:
    """The spinning lane's store before the barrier is seen by every thread
    after it: the barrier completed only once lane 0 had arrived."""
    out, flag = _run(32)
    np.testing.assert_array_equal(out, np.arange(64) + 7)
    assert flag.tolist() == [1, 7]


@pytest.mark.parametrize("seed", range(12))
def test_every_random_schedule_reconverges(seed: int) -> None:
    out, _ = _run(32, schedule="random", seed=seed)
    np.testing.assert_array_equal(out, np.arange(64) + 7)


def test_checked_launch_reports_no_divergence() -> None:
    out, flag = np.zeros(64, np.uint32), np.zeros(2, np.uint32)
    findings = sim.launch(LANE_BEHIND, out, flag, np.uint32(32), block=(64, 1, 1), check="all")
    assert findings == [], [f.message for f in findings]
    np.testing.assert_array_equal(out, np.arange(64) + 7)


def test_a_lane_that_never_arrives_is_a_hang_that_names_the_waiting_lanes() -> None:
    """No thread sets the flag (setter 999): lane 0 spins for ever, and the
    deadlock's record of warp 0 says its other lanes wait to reconverge."""
    with pytest.raises(sim.SimDeadlock, match=r"\.aligned barrier at bar\.sync \(PTX line 21\) reached by 31 threads "
                                              r"\(CTA 0 threads 1-31\), which wait for the other live lanes of "
                                              r"their warps") as info:
        _run(999)
    states = {(w.warp, w.state) for w in info.value.warps}
    assert (0, "reconverge") in states and (0, "spinning") in states, states
    reconverging = next(w for w in info.value.warps if w.state == "reconverge")
    assert list(reconverging.lanes) == list(range(1, 32))
    assert reconverging.instruction == "bar.sync" and reconverging.ptx_line == 21


# Lane 0 of each warp skips the barrier and goes on past it: still a fault.
LANE_AHEAD = HEAD + """.visible .entry lane_ahead(.param .u64 out)
{
    .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra AFTER;
    bar.sync 0;
AFTER:
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}"""


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_a_lane_past_the_barrier_still_faults(seed: int | None) -> None:
    launch = {} if seed is None else {"schedule": "random", "seed": seed}
    with pytest.raises(sim.SimFault, match=r"bar\.sync: CTA 0, thread \d+ reaches this \.aligned barrier without "
                                           r"thread (0|32) of its warp, which has not exited"):
        sim.launch(LANE_AHEAD, np.zeros(64, np.uint32), block=(64, 1, 1), **launch)

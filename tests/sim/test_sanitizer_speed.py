"""The sanitizer's sort-free paths keep exactly the records of the sorting
ones: reads by lanes in order (interleaved or broadcast) and writes by runs
of lanes to one cell."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx.sim.core.sanitizer.shadow import CellRecords, _last_of_runs


def _reads(pattern: str, nctas: int = 3, ntid: int = 128) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cells, CTA-local threads, global threads) of one read instruction by
    every thread of ``nctas`` CTAs, in the emulator's ascending order."""
    th = np.arange(nctas * ntid, dtype=np.int64)
    cta, tid = th // ntid, th % ntid
    if pattern == "interleaved":        # Triton's reduction: lane reads partial sum lane % 4
        local = tid % 4
    elif pattern == "broadcast":        # every lane reads one word
        local = np.zeros_like(tid)
    else:                               # a few lanes of each warp on each word, out of order
        local = (tid * 7) % 5
    return cta * 8 + local, tid, th


def _knows_nothing(rows: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """No reader comes after any other: every displaced read moves."""
    return np.zeros(np.broadcast(rows, lanes).shape, dtype=np.int64)


@pytest.mark.parametrize("pattern", ["interleaved", "broadcast", "scrambled"])
@pytest.mark.parametrize("knows", [None, _knows_nothing])
def test_reads_in_lane_order_keep_the_sorted_records(pattern: str, knows) -> None:
    idx, tid, _ = _reads(pattern)
    fast, sorted_ = CellRecords(24, 128, 4), CellRecords(24, 128, 4)
    for pc, stamp in ((3, 5), (7, 9)):          # the second read displaces the first's records
        clock = np.full(len(idx), stamp, dtype=np.int32) + (tid % 3).astype(np.int32)
        fast.record_read(idx, tid, clock, pc, knows, ascending=True)
        sorted_.record_read(idx, tid, clock, pc, knows, ascending=False)
    for s in range(2 * fast.warps):
        got = fast.reads.store[fast.reads.row_of[s]] if fast.reads.row_of[s] >= 0 else None
        want = sorted_.reads.store[sorted_.reads.row_of[s]] if sorted_.reads.row_of[s] >= 0 else None
        assert (got is None) == (want is None), f"slot {s}"
        if got is not None:
            np.testing.assert_array_equal(got, want, err_msg=f"slot {s}")
    np.testing.assert_array_equal(fast.has2, sorted_.has2)
    assert fast.has2.any()          # lanes of a warp on one word: the last two keep both slots


def test_interleaved_reads_keep_the_last_two_lanes_of_each_warp() -> None:
    idx, tid, _ = _reads("interleaved", nctas=1)
    rec = CellRecords(8, 128, 4)
    rec.record_read(idx, tid, np.ones(len(idx), dtype=np.int32), 5, ascending=True)
    lane, pc = rec.reader(1, 0)                 # warp 0's slot of word 1: lanes 1, 5, ..., 29
    assert (lane, pc) == (29, 5)
    assert rec.reader(1, rec.warps) == (25, 5)  # ... and the lane before it, unordered with it


def test_writes_by_runs_of_lanes_keep_the_last_lane_of_each_run() -> None:
    idx = np.repeat(np.array([4, 9, 9, 2], dtype=np.int64), [32, 32, 1, 32])
    tid = np.arange(len(idx), dtype=np.int64)
    clock = tid.astype(np.int32) * 2
    cells, t, c = _last_of_runs(idx, tid, clock)
    np.testing.assert_array_equal(cells, [4, 9, 2])
    np.testing.assert_array_equal(t, [31, 64, 96])
    np.testing.assert_array_equal(c, [62, 128, 192])
    runs, whole = CellRecords(16, 128, 4), CellRecords(16, 128, 4)
    runs.record_write(idx, tid, clock, 11)
    for k in range(len(idx)):                   # lane by lane: the later lane wins
        whole.w_tid[idx[k]], whole.w_clock[idx[k]], whole.w_pc[idx[k]] = tid[k], clock[k], 11
    np.testing.assert_array_equal(runs.w_tid, whole.w_tid)
    np.testing.assert_array_equal(runs.w_clock, whole.w_clock)
    np.testing.assert_array_equal(runs.w_pc, whole.w_pc)


def test_writes_without_runs_are_left_alone() -> None:
    idx = np.array([3, 1, 2], dtype=np.int64)
    tid = np.array([0, 1, 2])
    out = _last_of_runs(idx, tid, 7)
    assert out[0] is idx and out[1] is tid and out[2] == 7


_RUNS_KERNEL = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry runs(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    .shared .align 4 .b8 words[16];
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    mov.u32 %r3, words;
    st.shared.u32 [%r3], %r2;
    bar.sync 0;
    setp.eq.u32 %p1, %r2, 0;
    @%p1 ld.shared.u32 %r4, [%r3];
    @!%p1 st.shared.u32 [%r3+4], %r2;
    @!%p1 ld.shared.u32 %r4, [%r3+4];
    @%p1 st.shared.u32 [%r3], %r1;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}
"""


def _run_findings(monkeypatch: pytest.MonkeyPatch, by_runs: bool) -> list[str]:
    from jaxptx import sim
    from jaxptx.sim.core.sanitizer.shared import SharedChecks
    if not by_runs:
        monkeypatch.setattr(SharedChecks, "_representatives", lambda self, idx, th, values: None)
    out = np.zeros(64, dtype=np.uint32)
    findings = sim.launch(_RUNS_KERNEL, out, grid=(1, 1, 1), block=(64, 1, 1), check="all")
    return [str(f) for f in findings]


def test_accesses_in_runs_report_what_every_accessor_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    # every lane stores its warp's index to word 0 (warps race); warp 1's lanes store it to word 1 (one run,
    # one value) and read it back unordered; warp 0's lanes read word 0, then store their own ids over it
    with monkeypatch.context() as m:
        slow = _run_findings(m, by_runs=False)
    fast = _run_findings(monkeypatch, by_runs=True)
    assert fast == slow
    assert any("shared-memory race" in f for f in fast), fast

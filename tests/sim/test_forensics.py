"""A deadlock's picture: ``SimDeadlock.warps``, one record per stuck warp,
with what each waits on as fields and as a printed table."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

from test_hangs import kernel, line_of


def _deadlock(text: str, *arrays, **launch) -> sim.SimDeadlock:
    with pytest.raises(sim.SimDeadlock, match=r": deadlock: ") as e:
        sim.launch(text, *arrays, **launch)
    return e.value


def test_warps_parked_on_an_mbarrier():
    """init(2), one arrival, two warps wait on phase 0."""
    text = kernel("""
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 2;
    bar.sync 0;
    @%p1 mbarrier.arrive.shared::cta.b64 %rd2, [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;""", "    .shared .align 8 .b64 bar;\n")
    e = _deadlock(text, np.zeros(1, np.uint32), block=64)
    assert [(w.cta, w.warp, w.lanes, w.state) for w in e.warps] == [
        ((0, 0, 0), 0, tuple(range(32)), "mbarrier"), ((0, 0, 0), 1, tuple(range(32)), "mbarrier")]
    w = e.warps[0]
    assert w.ptx_line == line_of(text, "try_wait") and w.instruction.startswith("mbarrier.try_wait.parity")
    assert w.detail == {"cta": 0, "offset": 0, "initialised": True, "phase": 0, "pending": 1, "expected": 2,
                        "tx": 0}
    assert "stuck warps:" in str(e) and "1 of 2 arrivals pending" in str(e)
    assert w.device is None and e.capture is None


def test_warps_at_a_barrier_whose_count_is_never_reached():
    text = kernel("""
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    bar.sync 1, 64;
DONE:""")
    e = _deadlock(text, np.zeros(1, np.uint32), block=96)
    assert [(w.warp, w.state, w.detail) for w in e.warps] == [(0, "barrier", {"barrier": 1, "arrived": 32,
                                                                               "expected": 64})]
    assert "barrier 1: 32 of 64 arrivals" in str(e)


def test_a_warp_spinning_on_a_flag_names_its_address_and_value():
    """Lane 0 of warp 1 waits for a flag in global memory that nobody sets."""
    text = kernel("""
    setp.ne.u32 %p1, %r1, 32;
    @%p1 bra DONE;
SPIN:
    ld.volatile.global.u32 %r4, [%rd1];
    setp.ne.u32 %p2, %r4, 7;
    @%p2 bra SPIN;
DONE:""")
    flag = np.full(1, 5, np.uint32)
    e = _deadlock(text, flag, block=64)
    (w,) = e.warps
    assert (w.warp, w.lanes, w.state) == (1, (0,), "spinning")
    ((space, address, value),) = w.detail["reads"]
    assert space == "global" and value == 5
    assert f"global {address:#x} = 0x5" in str(e)


def test_the_table_lines_up_one_row_per_warp():
    from jaxptx.sim.core.forensics import table
    text = kernel("""
    bar.sync 1, 64;""")
    e = _deadlock(text, np.zeros(1, np.uint32), block=32, grid=2)
    rows = table(e.warps).splitlines()
    assert rows[0].split()[:4] == ["device", "CTA", "warp", "lanes"]
    assert len(rows) == 3 and "(1, 0, 0)" in rows[2] and "0-31" in rows[2]


def test_with_captures_on_a_deadlocked_launch_is_saved_and_replays_into_the_same_deadlock(tmp_path, monkeypatch):
    from jaxptx import capture
    monkeypatch.setenv("JAXPTX_CAPTURE_DIR", str(tmp_path))
    text = kernel("""
    bar.sync 1, 64;""")
    dev = sim.Device()
    out = dev.to_device(np.zeros(1, np.uint32))
    with pytest.raises(sim.SimDeadlock, match=r": deadlock: ") as e:
        dev.launch(text, [out], block=32)
    assert e.value.capture is not None and e.value.capture.exists()
    assert f"saved for replay: {e.value.capture}" in str(e.value)
    monkeypatch.delenv("JAXPTX_CAPTURE_DIR")
    saved = capture.load(e.value.capture)
    again = sim.Device()
    address = again.to_device(np.frombuffer(saved.buffers[0].before, np.uint8))
    with pytest.raises(sim.SimDeadlock, match=r": deadlock: ") as replayed:
        again.launch(saved.ptx, [address], grid=saved.grid, block=saved.block)
    assert [w.detail for w in replayed.value.warps] == [w.detail for w in e.value.warps]

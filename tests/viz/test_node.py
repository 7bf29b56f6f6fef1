"""jaxptx.viz.node: the recorder hears each device's peer stores, flag
releases and acquires of a System run in the order they ran, and the
figure draws what was recorded."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import viz
from jaxptx.sim import System

# Each device stores its 32 words into the next device's `next_out`, then
# thread 0 releases the next device's flag and spins until its own is set.
RING = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry ring(.param .u64 src, .param .u64 next_out, .param .u64 flag, .param .u64 next_flag)
{
    .reg .pred %p<3>; .reg .b32 %r<4>; .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [next_out];
    ld.param.u64 %rd3, [flag];
    ld.param.u64 %rd4, [next_flag];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd6, %rd1, %rd5;
    add.u64 %rd7, %rd2, %rd5;
    ld.global.u32 %r2, [%rd6];
    st.global.u32 [%rd7], %r2;
    bar.sync 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    st.release.sys.global.u32 [%rd4], 1;
WAIT:
    ld.acquire.sys.global.u32 %r3, [%rd3];
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra WAIT;
DONE:
    ret;
}"""

# Every thread stores to its own device's buffer: nothing crosses devices.
LOCAL = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry local(.param .u64 out)
{
    .reg .b32 %r<2>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}"""


def _ring(n: int, recorder: viz.NodeRecorder | None = None) -> tuple[System, viz.NodeRecorder, list[np.ndarray]]:
    node = System(n)
    node.enable_peer_access()
    recorder = recorder or viz.NodeRecorder(node)
    src, out, flag = [], [], []
    for d in node.devices:
        src.append(d.to_device(np.arange(32, dtype=np.uint32) + 100 * d.index))
        out.append(d.alloc(128))
        flag.append(d.alloc(4))
    node.launch([dict(device=r, source=RING, block=32,
                      params=[src[r], out[(r + 1) % n], flag[r], flag[(r + 1) % n]]) for r in range(n)],
                observers=[recorder])
    got = [d.from_device(o, like=np.zeros(32, np.uint32)) for d, o in zip(node.devices, out)]
    return node, recorder, got


def test_ring_records_who_stores_where_and_the_flags() -> None:
    n = 4
    _, rec, got = _ring(n)
    for r in range(n):                      # the run itself is right
        np.testing.assert_array_equal(got[r], np.arange(32) + 100 * ((r - 1) % n))
    trace = rec.trace
    assert trace.devices == n
    stores = trace.of_kind("peer store")
    # Each device stores into its right neighbour only: 32 data words in one
    # step and the flag, one thread.
    pairs = {(int(e[1]), int(e[4])) for e in stores}
    assert pairs == {(r, (r + 1) % n) for r in range(n)}
    for r in range(n):
        mine = stores[stores[:, 1] == r]
        assert sorted(mine[:, 5].tolist()) == [1, 32]
    releases = trace.of_kind("release")
    assert sorted((int(e[1]), int(e[4])) for e in releases) == [(r, (r + 1) % n) for r in range(n)]
    scopes = [s for e, s in zip(trace.events, trace.scopes) if e[3] != 0]
    assert set(scopes) == {"sys"}
    acquires = trace.of_kind("acquire")
    assert set(acquires[:, 1].tolist()) == set(range(n)) and (acquires[:, 1] == acquires[:, 4]).all()
    for r in range(n):
        data = stores[(stores[:, 1] == r) & (stores[:, 5] == 32)][0]
        release = releases[releases[:, 1] == r][0]
        assert data[0] < release[0]                     # the data before the flag (program order)
        # the last acquire by the next device (the one that saw the flag) follows the release
        last = acquires[acquires[:, 1] == (r + 1) % n][:, 0].max()
        assert last > release[0]
    ticks = trace.array()[:, 0]
    assert (np.diff(ticks) >= 0).all() and trace.steps >= ticks.max()


def test_node_steps_order_devices_in_turns() -> None:
    """A device's own step count restarts per device; the node step orders
    every device's events on one axis."""
    _, rec, _ = _ring(2)
    a = rec.trace.array()
    first_of = {d: int(a[a[:, 1] == d][0, 0]) for d in (0, 1)}
    own_first = {d: int(a[a[:, 1] == d][0, 2]) for d in (0, 1)}
    assert own_first[0] == own_first[1]                 # the same program: the same own step
    assert first_of[1] > first_of[0]                    # device 1 runs after device 0's turn


def test_local_stores_are_not_peer_stores() -> None:
    node = System(2)
    node.enable_peer_access()
    rec = viz.NodeRecorder(node)
    outs = [d.alloc(4 * 32) for d in node.devices]
    node.launch([dict(device=r, source=LOCAL, block=32, params=[outs[r]]) for r in range(2)], observers=[rec])
    assert rec.trace.events == []
    assert rec.trace.steps > 0


def test_a_second_launch_follows_the_first() -> None:
    node = System(2)
    node.enable_peer_access()
    rec = viz.NodeRecorder(node)
    out = [d.alloc(4 * 32) for d in node.devices]
    flags = [d.alloc(4) for d in node.devices]
    src = [d.to_device(np.arange(32, dtype=np.uint32)) for d in node.devices]
    items = [dict(device=r, source=RING, block=32, params=[src[r], out[1 - r], flags[r], flags[1 - r]])
             for r in range(2)]
    node.launch(items, observers=[rec])
    end = rec.trace.steps
    first = len(rec.trace.events)
    for d, f in zip(node.devices, flags):
        d.write(f, np.zeros(1, np.uint32).tobytes())
    node.launch(items, observers=[rec])
    later = rec.trace.array()[first:]
    assert len(later) == first and later[:, 0].min() > end


def test_of_kind_names_the_kinds() -> None:
    with pytest.raises(ValueError, match=r"expected one of peer store, release, acquire, got 'store'"):
        viz.NodeTrace(2).of_kind("store")


def test_timeline_draws_the_recorded_events() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    _, rec, _ = _ring(3)
    fig = viz.node_timeline(rec.trace, title="ring of 3")
    np.testing.assert_array_equal(fig.data, rec.trace.array())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["device 0", "device 1", "device 2"]
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["store into device 0", "store into device 1", "store into device 2",
                      "release (flag set)", "acquire (flag read)"]
    release = rec.trace.of_kind("release")[:, 0].min()
    early = viz.node_timeline(rec.trace, until=int(release) - 1)
    assert (early.data[:, 3] != 1).all() and len(early.data) < len(fig.data)
    plt.close("all")

"""Cluster launch control and CTA residency on the emulator.

``max_resident_ctas`` keeps the CTAs beyond it waiting (they start in grid
order as residents exit); ``clusterlaunchcontrol.try_cancel`` takes a
waiting cluster so it never starts. A work-stealing persistent kernel
computes every tile exactly once whatever the residency, and starts only as
many CTAs as may be resident; ptxas and ``jaxptx.check`` accept the PTX;
the DSL spelling round-trips.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import Tile, check, kernel, ptx, reg, sim, smem
from jaxptx.emit import emit
from jaxptx.parse import parse
from jaxptx.runtime import ptxas as run_ptxas
from jaxptx.types import f32, u32

HEAD = ".version 8.6\n.target sm_100a\n.address_size 64\n"

# Each CTA computes tile %ctaid.x (y = 2x + 1 over 32 floats, count[tile] += 1),
# then steals: try_cancel -> wait on the mbarrier -> decode -> next tile,
# until a request reports no cluster left. started counts CTAs that ran.
STEAL = HEAD + r"""
.visible .entry steal(.param .u64 x, .param .u64 y, .param .u64 count, .param .u64 started)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<11>;
    .reg .b128 %q<2>;
    .shared .align 16 .b8 resp[16];
    .shared .align 8 .b64 bar;

    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [count];
    ld.param.u64 %rd4, [started];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, 0;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 atom.global.add.u32 %r4, [%rd4], 1;
    bar.sync 0;
$LOOP:
    mad.lo.u32 %r5, %r2, 32, %r1;
    mul.wide.u32 %rd5, %r5, 4;
    add.u64 %rd6, %rd1, %rd5;
    ld.global.f32 %f1, [%rd6];
    fma.rn.f32 %f2, %f1, 0f40000000, 0f3F800000;
    add.u64 %rd7, %rd2, %rd5;
    st.global.f32 [%rd7], %f2;
    mul.wide.u32 %rd8, %r2, 4;
    add.u64 %rd9, %rd3, %rd8;
    @%p1 atom.global.add.u32 %r6, [%rd9], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [bar], 16;
    @%p1 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [resp], [bar];
$WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], %r3;
    @!%p2 bra $WAIT;
    xor.b32 %r3, %r3, 1;
    ld.shared.b128 %q1, [resp];
    bar.sync 0;
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, %q1;
    @!%p3 bra $DONE;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r2, %q1;
    bra $LOOP;
$DONE:
    ret;
}
"""

# The same over a 2-D grid of 2-CTA clusters: rank 0 steals for its cluster
# with .multicast::cluster::all (every CTA gets the response and its own
# mbarrier completes); each CTA takes first_ctaid + %cluster_ctaid.x.
STEAL_CLUSTER = HEAD + r"""
.visible .entry steal_cluster(.param .u64 y, .param .u64 count, .param .u64 started)
{
    .reg .pred %p<5>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<11>;
    .reg .b128 %q<2>;
    .shared .align 16 .b8 resp[16];
    .shared .align 8 .b64 bar;

    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [count];
    ld.param.u64 %rd4, [started];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r9, %ctaid.y;
    mov.u32 %r7, %cluster_ctarank;
    mov.u32 %r8, %cluster_ctaid.x;
    mov.u32 %r3, 0;
    setp.eq.u32 %p1, %r1, 0;
    setp.eq.u32 %p4, %r7, 0;
    and.pred %p4, %p4, %p1;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 atom.global.add.u32 %r4, [%rd4], 1;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
$LOOP:
    mad.lo.u32 %r10, %r9, 8, %r2;
    mad.lo.u32 %r5, %r10, 32, %r1;
    mul.wide.u32 %rd5, %r5, 4;
    add.u64 %rd7, %rd2, %rd5;
    st.global.u32 [%rd7], %r10;
    mul.wide.u32 %rd8, %r10, 4;
    add.u64 %rd9, %rd3, %rd8;
    @%p1 atom.global.add.u32 %r6, [%rd9], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [bar], 16;
    @%p4 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 [resp], [bar];
$WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], %r3;
    @!%p2 bra $WAIT;
    xor.b32 %r3, %r3, 1;
    ld.shared.b128 %q1, [resp];
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, %q1;
    @!%p3 bra $DONE;
    clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%r2, %r9, %r11, _}, %q1;
    add.u32 %r2, %r2, %r8;
    bra $LOOP;
$DONE:
    ret;
}
"""

# Thread 0 of CTA (0, 0) makes one request through generic addresses; the
# response decoded goes to out.
DECODE = HEAD + r"""
.visible .entry decode(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;
    .reg .b128 %q<2>;
    .shared .align 16 .b8 resp[16];
    .shared .align 8 .b64 bar;

    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ctaid.y;
    or.b32 %r1, %r1, %r2;
    or.b32 %r1, %r1, %r3;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $END;
    cvta.shared.u64 %rd2, resp;
    cvta.shared.u64 %rd3, bar;
    mbarrier.init.b64 [%rd3], 1;
    mbarrier.arrive.expect_tx.b64 %rd4, [%rd3], 16;
    clusterlaunchcontrol.try_cancel.async.mbarrier::complete_tx::bytes.b128 [%rd2], [%rd3];
$WAIT:
    mbarrier.try_wait.parity.b64 %p2, [%rd3], 0;
    @!%p2 bra $WAIT;
    ld.b128 %q1, [%rd2];
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p2, %q1;
    selp.u32 %r2, 1, 0, %p2;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r3, %q1;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::y.b32.b128 %r4, %q1;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::z.b32.b128 %r5, %q1;
    clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%r6, %r7, %r8, _}, %q1;
    st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
    st.global.v4.u32 [%rd1+16], {%r6, %r7, %r8, %r2};
$END:
    ret;
}
"""

# CTAs 0..n-2 spin until the last CTA sets a flag: needs every CTA resident.
WAIT_FOR_LAST = r""".version 8.6
.target sm_90a
.address_size 64
.visible .entry wait_for_last(.param .u64 flag)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %nctaid.x;
    sub.u32 %r2, %r2, 1;
    setp.eq.u32 %p1, %r1, %r2;
    @%p1 st.relaxed.gpu.global.u32 [%rd1], 1;
    @%p1 ret;
$SPIN:
    ld.relaxed.gpu.global.u32 %r3, [%rd1];
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra $SPIN;
    ret;
}
"""

# Each CTA's thread 0 takes a ticket: order[linear ctaid] = when it started.
TICKETS = r""".version 8.6
.target sm_90a
.address_size 64
.visible .entry tickets(.param .u64 order, .param .u64 next)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [order];
    ld.param.u64 %rd2, [next];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 ret;
    atom.global.add.u32 %r2, [%rd2], 1;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ctaid.y;
    mov.u32 %r7, %ctaid.z;
    mov.u32 %r5, %nctaid.x;
    mov.u32 %r8, %nctaid.y;
    mad.lo.u32 %r9, %r7, %r8, %r4;
    mad.lo.u32 %r6, %r9, %r5, %r3;
    mul.wide.u32 %rd3, %r6, 4;
    add.u64 %rd4, %rd1, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}
"""


def _steal(**launch) -> tuple[np.ndarray, np.ndarray, int]:
    x = np.arange(16 * 32, dtype=np.float32) - 100.5
    y = np.zeros_like(x)
    count = np.zeros(16, np.uint32)
    started = np.zeros(1, np.uint32)
    sim.launch(STEAL, x, y, count, started, grid=16, block=32, check=True, **launch)
    np.testing.assert_array_equal(y, 2 * x + 1)
    return count, started, int(started[0])


@pytest.mark.parametrize("resident", [1, 2, 4, None])
def test_work_stealing_computes_every_tile_once(resident: int | None) -> None:
    """Few resident CTAs steal the rest: each tile once, and only the
    resident CTAs ever start; with all resident, every request fails."""
    count, _, started = _steal(max_resident_ctas=resident)
    assert count.tolist() == [1] * 16
    assert started == (16 if resident is None else resident)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_work_stealing_under_random_schedules(seed: int) -> None:
    """Other interleavings of the two resident CTAs' requests still take
    each waiting CTA once."""
    count, _, started = _steal(max_resident_ctas=2, schedule="random", seed=seed)
    assert count.tolist() == [1] * 16 and started == 2


@pytest.mark.parametrize("resident", [2, 4, 6, None])
def test_multicast_work_stealing_over_clusters(resident: int | None) -> None:
    """2-CTA clusters over an (8, 2) grid: residency counts whole clusters,
    a cancel takes a whole cluster, the multicast response reaches both CTAs
    and get_first_ctaid.v4 gives (x, y) of its first CTA."""
    y = np.zeros((2, 8, 32), np.uint32)
    count = np.zeros(16, np.uint32)
    started = np.zeros(1, np.uint32)
    sim.launch(STEAL_CLUSTER, y, count, started, grid=(8, 2), block=32, cluster=(2, 1, 1), check=True,
               max_resident_ctas=resident)
    assert count.tolist() == [1] * 16
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(16, dtype=np.uint32).reshape(2, 8, 1), y.shape))
    assert int(started[0]) == (16 if resident is None else resident)


@pytest.mark.parametrize("resident, want", [(None, [0, -1, -1, -1]), (1, [1, 1, 0, 0])])
def test_response_decodes_the_first_ctaid_or_failure(resident: int | None, want: list[int]) -> None:
    """Generic addresses; a 2x2 grid: CTA (0, 0) cancels CTA (1, 0) when it
    waits to start; with all resident the request fails (and the emulator's
    first ctaid of a failure reads 0xFFFFFFFF)."""
    out = np.zeros(8, np.uint32)
    sim.launch(DECODE, out, grid=(2, 2), block=32, max_resident_ctas=resident)
    assert [-1 if v == 0xFFFFFFFF else v for v in out[:4].tolist()] == want
    assert out[4:7].tolist() == out[1:4].tolist() and out[7] == out[0]


def test_ctas_beyond_residency_do_not_start_until_a_resident_exits() -> None:
    """A kernel whose first CTAs wait for the last one runs with every CTA
    resident and deadlocks with four, naming the CTAs that never started."""
    flag = np.zeros(1, np.uint32)
    sim.launch(WAIT_FOR_LAST, flag, grid=8, block=32)
    assert flag[0] == 1
    with pytest.raises(sim.SimDeadlock, match=r"4 CTAs have not started \(max_resident_ctas=4 .*"
                                              r"\(4, 0, 0\), \(5, 0, 0\), \(6, 0, 0\), \(7, 0, 0\)"):
        sim.launch(WAIT_FOR_LAST, np.zeros(1, np.uint32), grid=8, block=32, max_resident_ctas=4)


def test_waiting_clusters_start_in_grid_order() -> None:
    """(4, 2) grid of 2-CTA clusters, one cluster resident: clusters start
    x fastest, then y, each cluster's CTAs together."""
    order = np.zeros(8, np.uint32)
    sim.launch(TICKETS, order, np.zeros(1, np.uint32), grid=(4, 2), block=32, cluster=(2, 1, 1),
               max_resident_ctas=3)
    assert (order // 2).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    order = np.zeros(8, np.uint32)
    sim.launch(TICKETS, order, np.zeros(1, np.uint32), grid=(2, 2, 2), block=32, max_resident_ctas=1)
    assert order.tolist() == list(range(8))


@pytest.mark.parametrize("value, message", [
    (0, r"max_resident_ctas: expected an int >= 1, got 0"),
    (-3, r"max_resident_ctas: expected an int >= 1, got -3"),
    (2.0, r"max_resident_ctas: expected an int >= 1, got 2\.0"),
    ("4", r"max_resident_ctas: expected an int >= 1, got '4'"),
    (True, r"max_resident_ctas: expected an int >= 1, got True"),
])
def test_max_resident_ctas_must_be_a_positive_int(value, message) -> None:
    with pytest.raises(sim.SimError, match=message):
        sim.launch(TICKETS, np.zeros(8, np.uint32), np.zeros(1, np.uint32), grid=8, block=32,
                   max_resident_ctas=value)
    dev = sim.Device()
    with pytest.raises(sim.SimError, match=message):
        dev.launch(WAIT_FOR_LAST, [dev.alloc(4)], grid=2, block=32, max_resident_ctas=value)


def test_max_resident_ctas_holds_at_least_one_cluster() -> None:
    with pytest.raises(sim.SimError, match=r"max_resident_ctas: expected at least the 4 CTAs of one cluster "
                                           r"\(cluster \(4, 1, 1\)\), got 3"):
        sim.launch(TICKETS, np.zeros(8, np.uint32), np.zeros(1, np.uint32), grid=8, block=32,
                   cluster=(4, 1, 1), max_resident_ctas=3)


@pytest.mark.parametrize("source", [STEAL, STEAL_CLUSTER, DECODE], ids=["steal", "cluster", "decode"])
def test_ptxas_and_check_accept_the_kernels(source: str) -> None:
    run_ptxas(source, "sm_100a")
    assert check(source, "sm_100a") == []
    assert emit(parse(source)) == source


def test_check_refuses_what_ptxas_refuses() -> None:
    """Multicast needs an arch- or family-specific target; the family needs sm_100."""
    (multicast,) = check(STEAL_CLUSTER, "sm_100")
    assert multicast.line == 40 and "(.multicast::cluster::all) needs sm_100a or sm_103a" in multicast.message
    assert "kernel targets sm_100; pass arch='sm_100a'" in multicast.message
    old = check(STEAL, "sm_90a")
    assert [d.line for d in old] == [38, 45, 47]
    assert all("needs sm_100 or newer, kernel targets sm_90a" in d.message for d in old)


def _dsl_steal():
    @kernel(arch="sm_100a", block=(32, 1, 1), grid=(8, 1, 1), in_specs=(Tile(8, 32, f32),),
            out_specs=(Tile(8, 32, f32), Tile(8, u32)), name="steal_dsl")
    def k(x, y, count):
        tid = ptx.special.tid.x()
        tile = reg.scalar(u32, ptx.special.ctaid.x())
        resp = smem.alloc(u32, (4,), align=16)
        bar = smem.mbarrier(1)
        leader = tid == 0
        with ptx.if_(leader):
            ptx.mbarrier.init.shared.b64(bar[0], 1)
        ptx.bar.sync(0)
        phase = reg.scalar(u32, 0)
        more = reg.pred(init=1)
        for _ in ptx.while_(lambda: more):
            off = ptx.mul.wide.u32(tile * 32 + tid, 4)
            v = ptx.ld.global_.f32(ptx.addr(x.ptr + off))
            ptx.st.global_.f32(ptx.addr(y.ptr + off), v * 2.0 + 1.0)
            with ptx.if_(leader):
                ptx.red.global_.add.u32(ptx.addr(count.ptr + ptx.mul.wide.u32(tile, 4)), 1)
                ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], 16)
                ptx.clusterlaunchcontrol.try_cancel.async_.shared__cta.mbarrier__complete_tx__bytes.b128(
                    resp, bar[0])
            done = reg.pred(init=0)
            for _ in ptx.while_(lambda: ~done):
                ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], phase)
            phase ^= 1
            r = ptx.ld.shared.b128(resp)
            ptx.bar.sync(0)
            ptx.clusterlaunchcontrol.query_cancel.is_canceled.pred.b128(more, r)
            with ptx.if_(more):
                ptx.clusterlaunchcontrol.query_cancel.get_first_ctaid__x.b32.b128(tile, r)
    return k


def test_dsl_spelling_emits_parses_and_runs() -> None:
    k = _dsl_steal()
    text = k.specialize().ptx
    assert ("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 "
            "[smem_0], [mbar_0];") in text
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r" in text
    assert emit(parse(text)) == text
    run_ptxas(text, "sm_100a")
    x = np.arange(256, dtype=np.float32).reshape(8, 32)
    y = np.zeros_like(x)
    count = np.zeros(8, np.uint32)
    sim.launch(k, x, y, count, max_resident_ctas=2)
    assert count.tolist() == [1] * 8
    np.testing.assert_array_equal(y, 2 * x + 1)

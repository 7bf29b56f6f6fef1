"""Hangs are found in seconds and named: spins on mbarriers nothing can
complete, loops that change nothing, barriers some threads never reach;
correct producer/consumer pipelines are not reported; ``max_steps`` (or
``JAXPTX_SIM_MAX_STEPS``) bounds the rest. Every kernel is assembled by
ptxas first; every test runs under a SIGALRM deadline."""

from __future__ import annotations

import re
import signal

import numpy as np
import pytest

from jaxptx import kernel as jaxptx_kernel
from jaxptx import ptx, reg, smem
from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"
REGS = "    .reg .b32 %r<20>; .reg .b64 %rd<20>; .reg .pred %p<8>;\n"
DEADLINE_S = 30


@pytest.fixture(autouse=True)
def deadline():
    """Fail (rather than hang the suite) if a test runs past DEADLINE_S."""
    def expired(signum, frame):
        raise TimeoutError(f"test ran past {DEADLINE_S} s: the hang was not found")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def kernel(body: str, decls: str = "", params: str = ".param .u64 out", top: str = "") -> str:
    text = (HEAD + top + f".visible .entry k({params})\n{{\n" + REGS + decls +
            "    ld.param.u64 %rd1, [out];\n    mov.u32 %r1, %tid.x;\n    mov.u32 %r2, %ctaid.x;\n" +
            body + "\n    ret;\n}\n")
    ptxas(text, "sm_90a")
    return text


def line_of(text: str, needle: str) -> int:
    """1-based PTX line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_spin_on_an_mbarrier_phase_that_never_completes() -> None:
    """init(2), one arrival, everyone spins on phase 0: the second arrival never comes."""
    text = kernel("""
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 2;
    bar.sync 0;
    @%p1 mbarrier.arrive.shared::cta.b64 %rd2, [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;""", "    .shared .align 8 .b64 bar;\n")
    wait = line_of(text, "try_wait")
    with pytest.raises(SimError, match=rf"^k: deadlock: 64 threads \(CTA 0 threads 0-63\) wait at "
                                       rf"mbarrier\.try_wait\.parity\.shared::cta\.b64 \(PTX line {wait}\)") as e:
        sim.launch(text, np.zeros(1, np.uint32), grid=(2, 1, 1), block=(64, 1, 1))
    msg = str(e.value)
    for cta in (0, 1):
        assert (f"64 threads (CTA {cta} threads 0-63) wait at mbarrier.try_wait.parity.shared::cta.b64 "
                f"(PTX line {wait}) for the mbarrier at shared offset 0x0 of CTA {cta} to complete its phase 0 "
                "(parity 0): 1 of 2 arrivals pending, tx-count 0, and no thread that can still run arrives on it"
                in msg), msg
    assert msg.startswith("k: deadlock: ") and "no thread can make progress" in msg


def test_spin_on_a_transaction_count_no_copy_completes() -> None:
    """expect_tx(1024) but no copy: the phase waits for 1024 bytes forever."""
    text = kernel("""
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 1024;
    mov.u32 %r3, 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], %r3;
    @!%p2 bra WAIT;""", "    .shared .align 8 .b64 bar;\n")
    with pytest.raises(SimError, match=r"0 of 1 arrivals pending, tx-count 1024"):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


def test_branch_to_itself_with_no_other_thread_running() -> None:
    text = kernel("""
    setp.ne.u32 %p1, %r1, 7;
    @%p1 bra DONE;
LOOP:
    bra.uni LOOP;
DONE:""")
    loop = line_of(text, "bra.uni LOOP")
    with pytest.raises(SimError, match=re.escape(f"k: deadlock: 1 thread (CTA 0 thread 7) spin in the loop at "
                                                 f"PTX line {loop} without changing anything")):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


def test_loop_whose_state_alternates_is_found() -> None:
    """A register toggles each turn: the state repeats every other turn."""
    text = kernel("""
    mov.u32 %r3, 0;
LOOP:
    xor.b32 %r3, %r3, 1;
    bra.uni LOOP;""")
    with pytest.raises(SimError, match=r"k: deadlock: 32 threads \(CTA 0 threads 0-31\) spin in the loop at "
                                       r"PTX lines \d+-\d+ without changing anything"):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


def test_mbarriers_of_every_cta_work_with_an_odd_dynamic_smem_size() -> None:
    """12 bytes of dynamic shared memory a CTA: an mbarrier, then a u32.
    Each CTA's shared memory starts 16-aligned, so CTA 0's u32 is not half
    of CTA 1's mbarrier word (which left CTA 1 waiting forever)."""
    text = kernel("""
    mov.u32 %r3, dyn;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r3], 32;
    bar.sync 0;
    @%p1 st.shared.u32 [%r3+8], -1;
    bar.sync 0;
    mbarrier.arrive.shared::cta.b64 %rd2, [%r3];
WAIT:
    mbarrier.try_wait.shared::cta.b64 %p2, [%r3], %rd2;
    @!%p2 bra WAIT;
    mul.wide.u32 %rd3, %r2, 4;
    add.u64 %rd3, %rd1, %rd3;
    @%p1 st.global.u32 [%rd3], 1;""", top=".extern .shared .align 16 .b8 dyn[];\n")
    out = np.zeros(3, np.uint32)
    sim.launch(text, out, grid=(3, 1, 1), block=(32, 1, 1), smem=12)
    np.testing.assert_array_equal(out, [1, 1, 1])


def test_volatile_load_spin_on_a_flag_no_thread_writes() -> None:
    """Warp 1 spins on a global flag; warp 0 finishes without writing it."""
    text = kernel("""
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra DONE;
SPIN:
    ld.volatile.global.u32 %r4, [%rd1];
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra SPIN;
DONE:""")
    first, last = line_of(text, "ld.volatile"), line_of(text, "@%p2 bra SPIN")
    flag = np.zeros(1, np.uint32)
    with pytest.raises(SimError, match=rf"^k: deadlock: 32 threads \(CTA 0 threads 32-63\) spin in the loop "
                                       rf"at PTX lines {first}-{last} ") as e:
        sim.launch(text, flag, block=(64, 1, 1))
    msg = str(e.value)
    assert msg.startswith(f"k: deadlock: 32 threads (CTA 0 threads 32-63) spin in the loop at PTX lines "
                          f"{first}-{last} without changing anything; "), msg
    assert re.search(rf"ld\.volatile\.global\.u32 \[PTX line {first}\] reads global address 0x[0-9a-f]+, which "
                     r"no thread that can still run writes", msg), msg


def test_bar_sync_half_the_cta_never_reaches() -> None:
    """bar.sync 0, 128 in a 128-thread CTA whose upper half has exited."""
    text = kernel("""
    setp.ge.u32 %p1, %r1, 64;
    @%p1 bra DONE;
    bar.sync 0, 128;
DONE:""")
    at = line_of(text, "bar.sync 0, 128")
    with pytest.raises(SimError, match=re.escape(
            f"k: deadlock: barrier 0 at bar.sync (PTX line {at}) reached by 64 threads (CTA 0 threads 0-63), "
            "but it waits for the 128 threads it counts; 64 threads of CTA 0 have exited")):
        sim.launch(text, np.zeros(1, np.uint32), block=(128, 1, 1))


def test_bar_sync_with_exited_threads_completes_with_the_live_ones() -> None:
    """Without a count, exited threads do not hold a barrier up, whether they
    exit before or after the others arrive."""
    text = kernel("""
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    bar.sync 0;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd2, %rd1, %rd2;
    st.global.u32 [%rd2], %r1;
DONE:""")
    out = np.zeros(64, np.uint32)
    sim.launch(text, out, block=(64, 1, 1))
    np.testing.assert_array_equal(out[32:], np.arange(32, 64))


def test_cluster_barrier_a_cta_never_arrives_at() -> None:
    """CTA rank 1 waits on the cluster barrier without arriving."""
    text = kernel("""
    mov.u32 %r3, %cluster_ctarank;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra WAITONLY;
    barrier.cluster.arrive.aligned;
WAITONLY:
    barrier.cluster.wait.aligned;""")
    at = line_of(text, "barrier.cluster.wait")
    with pytest.raises(SimError, match=re.escape(
            f"k: deadlock: barrier.cluster.wait at barrier.cluster.wait.aligned (PTX line {at}) reached by "
            "64 threads (CTAs 0-1 threads 0-31); the cluster of CTAs 0-1 has 32 arrivals of the 64 its live "
            "threads must make")):
        sim.launch(text, np.zeros(1, np.uint32), grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1))


def test_wait_loop_with_a_retry_limit_gets_out() -> None:
    """A parked thread whose loop has another way out (a retry counter) is
    run again when nothing else can run, and leaves the loop."""
    text = kernel("""
    @%p1 bra SKIP;
SKIP:
    mbarrier.init.shared::cta.b64 [bar], 1;
    mov.u32 %r3, 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @%p2 bra DONE2;
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p3, %r3, 50;
    @%p3 bra WAIT;
DONE2:
    st.global.u32 [%rd1], %r3;""", "    .shared .align 8 .b64 bar;\n")
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, block=(1, 1, 1))
    assert out[0] == 50


def test_a_loop_waiting_for_the_clock_ends() -> None:
    """%clock64 counts the machine's steps, so a delay loop on it ends."""
    text = kernel("""
    mov.u64 %rd5, %clock64;
DELAY:
    mov.u64 %rd6, %clock64;
    sub.u64 %rd7, %rd6, %rd5;
    setp.lt.u64 %p2, %rd7, 6000;
    @%p2 bra DELAY;
    cvt.u32.u64 %r3, %rd7;
    st.global.u32 [%rd1], %r3;""")
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, block=(1, 1, 1))
    assert 6000 <= out[0] < 6010


def test_flag_handshake_through_volatile_spins_is_not_a_hang() -> None:
    """Warp 0 spins (at the lower PCs) on a flag warp 1 sets, then warp 1
    spins on warp 0's acknowledgement: the spinning warp is put aside so the
    other runs, and the launch completes."""
    text = kernel("""
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra PRODUCER;
CWAIT:
    ld.volatile.global.u32 %r4, [%rd1];
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra CWAIT;
    setp.eq.u32 %p3, %r1, 0;
    @%p3 st.volatile.global.u32 [%rd1+4], 7;
    bra.uni DONE;
PRODUCER:
    setp.eq.u32 %p3, %r1, 32;
    @%p3 st.volatile.global.u32 [%rd1], 1;
PWAIT:
    ld.volatile.global.u32 %r5, [%rd1+4];
    setp.eq.u32 %p2, %r5, 0;
    @%p2 bra PWAIT;
    @%p3 st.volatile.global.u32 [%rd1+8], %r5;
DONE:""")
    out = np.zeros(3, np.uint32)
    sim.launch(text, out, block=(64, 1, 1))
    np.testing.assert_array_equal(out, [1, 7, 7])


def test_warp_specialised_mbarrier_pipeline_across_ctas_is_not_a_hang() -> None:
    """Per CTA: warp 1 produces into a 2-stage ring (full/empty mbarriers,
    arrive-on by the producer), warp 0 consumes 40 items; 4 CTAs."""
    text = kernel("""
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [full], 1;
    @%p1 mbarrier.init.shared::cta.b64 [full+8], 1;
    @%p1 mbarrier.init.shared::cta.b64 [empty], 32;
    @%p1 mbarrier.init.shared::cta.b64 [empty+8], 32;
    bar.sync 0;
    mov.u32 %r10, 0;
    mov.u32 %r9, 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
CONSUME:
    and.b32 %r11, %r10, 1;
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
CWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r13], %r12;
    @!%p3 bra CWAIT;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 4, %r14;
    ld.shared.u32 %r15, [%r14];
    add.u32 %r9, %r9, %r15;
    mov.u32 %r16, empty;
    mad.lo.u32 %r16, %r11, 8, %r16;
    mbarrier.arrive.shared::cta.b64 %rd2, [%r16];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 40;
    @%p4 bra CONSUME;
    setp.eq.u32 %p5, %r1, 0;
    mul.wide.u32 %rd3, %r2, 4;
    add.u64 %rd3, %rd1, %rd3;
    @%p5 st.global.u32 [%rd3], %r9;
    bra.uni END;
PRODUCER:
    setp.ne.u32 %p5, %r1, 32;
    @%p5 bra END;
PRODUCE:
    and.b32 %r11, %r10, 1;
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;
    xor.b32 %r12, %r12, 1;
    mov.u32 %r16, empty;
    mad.lo.u32 %r16, %r11, 8, %r16;
PWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r16], %r12;
    @!%p3 bra PWAIT;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 4, %r14;
    add.u32 %r17, %r10, %r2;
    st.shared.u32 [%r14], %r17;
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
    mbarrier.arrive.release.cta.shared::cta.b64 %rd2, [%r13];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 40;
    @%p4 bra PRODUCE;
END:""", "    .shared .align 8 .b64 full[2];\n    .shared .align 8 .b64 empty[2];\n"
         "    .shared .align 4 .b32 buf[2];\n")
    out = np.zeros(4, np.uint32)
    sim.launch(text, out, grid=(4, 1, 1), block=(64, 1, 1))
    np.testing.assert_array_equal(out, [sum(range(40)) + 40 * c for c in range(4)])


_COUNT = """
    mov.u32 %r3, 0;
LOOP:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p2, %r3, 1000000000;
    @%p2 bra LOOP;
    st.global.u32 [%rd1], %r3;"""


def test_max_steps_bounds_a_loop_that_keeps_changing_state() -> None:
    text = kernel(_COUNT)
    at = line_of(text, "add.u32 %r3, %r3, 1")
    with pytest.raises(SimError, match=rf"^k: more than 3001 steps \(max_steps\); still running: 32 threads "
                                       rf"\(CTA 0 threads 0-31\) at add\.u32 \(PTX line {at}\)") as e:
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1), max_steps=3001)
    msg = str(e.value)
    assert msg.startswith(f"k: more than 3001 steps (max_steps); still running: 32 threads (CTA 0 threads 0-31) "
                          f"at add.u32 (PTX line {at})"), msg
    assert "JAXPTX_SIM_MAX_STEPS" in msg


def test_max_steps_from_the_environment(monkeypatch) -> None:
    text = kernel(_COUNT)
    monkeypatch.setenv("JAXPTX_SIM_MAX_STEPS", "2_000")
    with pytest.raises(SimError, match=r"k: more than 2000 steps \(max_steps\)"):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))
    monkeypatch.setenv("JAXPTX_SIM_MAX_STEPS", "many")
    with pytest.raises(SimError, match=r"JAXPTX_SIM_MAX_STEPS: expected an int >= 1, got 'many'"):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


def test_a_failed_wait_outside_a_loop_does_not_stop_the_thread() -> None:
    """A single test_wait that fails parks its thread; nothing completes the
    phase, so the thread is run again, goes on with its false result, and
    the launch completes."""
    text = kernel("""
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.test_wait.parity.shared::cta.b64 %p2, [bar], 0;
    selp.u32 %r3, 1, 2, %p2;
    st.global.u32 [%rd1], %r3;""", "    .shared .align 8 .b64 bar;\n")
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, block=(1, 1, 1))
    assert out[0] == 2


@jaxptx_kernel(block=(32, 1, 1), arch="sm_90a")
def _spins_forever():
    bar = smem.mbarrier(1)
    with ptx.if_(ptx.special.tid.x() == 0):
        ptx.mbarrier.init.shared.b64(bar[0], 1)
    ptx.bar.sync(0)
    done = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~done):
        ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], 0)   # SPIN-LINE


def test_traced_kernel_spin_names_the_python_line() -> None:
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# SPIN-LINE" in text)
    with pytest.raises(SimError, match=rf"_spins_forever|test_hangs\.py:{line}") as e:
        sim.launch(_spins_forever)
    assert f"test_hangs.py:{line}" in str(e.value), str(e.value)


def test_a_bar_warp_sync_waiting_on_lanes_held_at_a_barrier_is_a_deadlock_naming_both() -> None:
    """bar.warp.sync waits for its mask's lanes (they need not be converged);
    here they wait at a barrier.sync the first half never reaches (not
    .aligned: half a warp at bar.sync would be a fault of its own)."""
    text = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>; .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra LOW;
    barrier.sync 0;
    ret;
LOW:
    bar.warp.sync -1;
    ret;
}"""
    with pytest.raises(SimError, match=r"deadlock: bar.warp.sync at bar.warp.sync \(PTX line 13\) reached by 16 "
                                       r"threads \(CTA 0 threads 0-15\).*\n  barrier 0 at barrier.sync"):
        sim.launch(text, np.zeros(4, np.uint32), block=(32, 1, 1))

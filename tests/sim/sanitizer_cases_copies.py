"""Planted bugs: mbarrier producer/consumer exchanges, ``cp.async``, bulk
copies into shared memory (the non-tensor TMA form) and out of it (bulk
stores, the async proxy); see :mod:`sanitizer_cases` for the notation."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case

__all__ = ["CASES"]

BAR = "    .shared .align 8 .b64 bar;\n"


def _inp(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
    return inp.copy()


def _lanes(fn):
    """``out`` of warps 0 and 1 (64 threads): 0 for warp 0, ``fn(lane, inp)`` for warp 1."""
    def expect(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
        lane = np.arange(32, dtype=np.uint32)
        return np.concatenate([0 * lane, fn(lane, inp)]).astype(np.uint32)
    return expect


# warp 0 produces buf[lane] = gid; warp 1 waits on the mbarrier (32
# arrivals) and reads it.
_MBAR_INIT = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 32;
    bar.sync 0;
    setp.ge.u32 %p2, %r1, 32;
"""

MBARRIERS = [
    Case("mbarrier: producer arrives before its write", _MBAR_INIT + """
    @%p2 bra CONSUMER;
    [[||st.shared.u32 [%r11], %r4;]]
    mbarrier.arrive.shared::cta.b64 %rd6, [bar];
    [[st.shared.u32 [%r11], %r4;                //@O||]]
    bra DONE;
CONSUMER:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra CONSUMER;
    sub.u32 %r12, %r11, 128;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", _lanes(lambda lane, inp: lane), decls=BAR),

    Case("mbarrier: consumer reads without waiting", _MBAR_INIT + """
    @%p2 bra CONSUMER;
    st.shared.u32 [%r11], %r4;                  //@O
    mbarrier.arrive.shared::cta.b64 %rd6, [bar];
    bra DONE;
CONSUMER:
    [[||mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra CONSUMER;]]
    sub.u32 %r12, %r11, 128;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", _lanes(lambda lane, inp: lane), decls=BAR),

    Case("mbarrier: a try_wait that failed is not looped", _MBAR_INIT + """
    @!%p2 bra PRODUCER;
CONSUMER:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    [[||@!%p3 bra CONSUMER;]]
    sub.u32 %r12, %r11, 128;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    st.shared.u32 [%r11], %r4;                  //@O
    mbarrier.arrive.shared::cta.b64 %rd6, [bar];
DONE:
""", "race", _lanes(lambda lane, inp: lane), decls=BAR),
]

MBARRIERS.append(Case("mbarrier that never completes (a hang)", """
    @%p1 mbarrier.init.shared::cta.b64 [bar], [[2||1]];
    bar.sync 0;
    @%p1 st.shared.u32 [buf], 5;
    @%p1 mbarrier.arrive.shared::cta.b64 %rd6, [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;     //@L
    @!%p3 bra WAIT;
    ld.shared.u32 %r13, [buf];
    st.global.u32 [%rd4], %r13;
""", "sim", lambda inp, g, b: np.full(64, 5, np.uint32), decls=BAR))

MBARRIERS.append(Case("mbarrier: data written after phase 0's arrival read by a phase-0 waiter", """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra CONSUMER;
    @%p1 st.shared.u32 [buf], 11;
    @%p1 mbarrier.arrive.shared::cta.b64 %rd6, [bar];
    @%p1 st.shared.u32 [buf+4], 22;             //@O
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 16;
    bra DONE;
CONSUMER:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra CONSUMER;
    ld.shared.u32 %r13, [buf+[[4||0]]];         //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", _lanes(lambda lane, inp: 11 + 0 * lane), decls=BAR))

CP_ASYNC = [
    Case("cp.async destination read before cp.async.wait_group", """
    cp.async.ca.shared.global [%r11], [%rd5], 4;
    cp.async.commit_group;
    [[||cp.async.wait_group 0;]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", _inp, block=32),

    Case("cp.async.wait_group 1 while the newest group is needed (twin: the older one is)", """
    add.u32 %r12, %r11, 512;
    mov.u32 %r15, [[%r11||%r12]];
    mov.u32 %r16, [[%r12||%r11]];
    cp.async.ca.shared.global [%r15], [%rd5], 4;
    cp.async.commit_group;
    cp.async.ca.shared.global [%r16], [%rd5], 4;
    cp.async.commit_group;
    cp.async.wait_group 1;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", _inp, block=32),

    Case("cp.async destination read before cp.async.wait_all", """
    cp.async.ca.shared.global [%r11], [%rd5], 4;
    [[||cp.async.wait_all;]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", _inp, block=32),

    Case("cp.async data read by another thread after the issuer's wait, without a barrier", """
    cp.async.ca.shared.global [%r11], [%rd5], 4;        //@O
    cp.async.commit_group;
    cp.async.wait_group 0;
    [[||bar.sync 0;]]
    xor.b32 %r12, %r5, 4;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: inp[np.arange(len(inp)) ^ 1], block=32),

    Case("cp.async completion signalled by mbarrier.arrive instead of cp.async.mbarrier.arrive", """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 32;
    bar.sync 0;
    cp.async.ca.shared.global [%r11], [%rd5], 4;
    [[mbarrier.arrive.shared::cta.b64 %rd6, [bar];||cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar];]]
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
    xor.b32 %r12, %r5, 4;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", lambda inp, g, b: inp[np.arange(len(inp)) ^ 1], block=32, decls=BAR),
]

# thread 0 arms the mbarrier and copies inp[0:64] (256 bytes) into buf.
_TMA = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd2], 256, [bar];
"""
_WAIT = """WAIT{n}:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], {parity};
    @!%p3 bra WAIT{n};"""

TMA = [
    Case("bulk copy destination read before its mbarrier phase is observed", _TMA + """
    [[||""" + _WAIT.format(n=0, parity=0) + """]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", _inp, decls=BAR),

    Case("bulk copy: one thread waits, the others read without a barrier", _TMA + """
    setp.eq.u32 %p3, %r1, %r1;
WAIT:
    @%p1 mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
    [[||bar.sync 0;]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", _inp, decls=BAR),

    Case("generic store into a bulk copy's destination before the copy completes", _TMA + """
    add.u32 %r15, %r11, [[0||512]];
    st.shared.u32 [%r15], %r1;                  //@L
""" + _WAIT.format(n=0, parity=0) + """
    ld.shared.u32 %r13, [%r11];
    st.global.u32 [%rd4], %r13;
""", "async", _inp, decls=BAR),

    Case("bulk copy overwrites a stage the consumers are still reading", _TMA + _WAIT.format(n=0, parity=0) + """
    ld.shared.u32 %r13, [%r11];                 //@O
    [[||bar.sync 0;]]
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 256;
    add.u64 %rd7, %rd2, 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd7], 256, [bar];   //@L
""" + _WAIT.format(n=1, parity=1) + """
    ld.shared.u32 %r14, [%r11];
    st.global.u32 [%rd4], %r13;
    st.global.u32 [%rd4+256], %r14;
""", "race", _inp, decls=BAR, words=128),
]

TMA.append(Case("consumers arrive on the empty barrier before reading the stage", """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.init.shared::cta.b64 [empty], 64;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd2], 256, [bar];
""" + _WAIT.format(n=0, parity=0) + """
    [[mbarrier.arrive.shared::cta.b64 %rd9, [empty];||]]
    ld.shared.u32 %r13, [%r11];                 //@O
    [[||mbarrier.arrive.shared::cta.b64 %rd9, [empty];]]
    setp.eq.u32 %p4, %r1, %r1;
EMPTY:
    @%p1 mbarrier.try_wait.parity.shared::cta.b64 %p4, [empty], 0;
    @!%p4 bra EMPTY;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 256;
    add.u64 %rd7, %rd2, 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd7], 256, [bar];   //@L
""" + _WAIT.format(n=1, parity=1) + """
    ld.shared.u32 %r14, [%r11];
    st.global.u32 [%rd4], %r13;
    st.global.u32 [%rd4+256], %r14;
""", "race", _inp, decls=BAR + "    .shared .align 8 .b64 empty;\n", words=128))

# every thread writes buf[tid] = 2 * gid; thread 0 stores buf to out with a
# bulk copy (the async proxy reads buf).
_STORE = """
    shl.b32 %r12, %r4, 1;
    st.shared.u32 [%r11], %r12;                 {mark}
    {fence}
    bar.sync 0;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [buf], 256;    {store}
    @%p1 cp.async.bulk.commit_group;
"""

PROXY = [
    Case("bulk store of shared data written without fence.proxy.async", _STORE.format(
        mark="//@O", store="//@L", fence="[[||fence.proxy.async.shared::cta;]]") + """
    @%p1 cp.async.bulk.wait_group 0;
""", "proxy", lambda inp, g, b: 2 * np.arange(64, dtype=np.uint32)),

    Case("bulk store source overwritten by other threads before cp.async.bulk.wait_group.read", _STORE.format(
        mark="", store="//@O", fence="fence.proxy.async.shared::cta;") + """
    [[||@%p1 cp.async.bulk.wait_group.read 0;]]
    bar.sync 0;
    st.shared.u32 [%r11], %r1;                  //@L
""", "async", lambda inp, g, b: 2 * np.arange(64, dtype=np.uint32)),

    Case("bulk store source overwritten by its issuing thread before cp.async.bulk.wait_group.read", _STORE.format(
        mark="", store="//@O", fence="fence.proxy.async.shared::cta;") + """
    [[||@%p1 cp.async.bulk.wait_group.read 0;]]
    @%p1 st.shared.u32 [buf], 7;                //@L
""", "async", lambda inp, g, b: 2 * np.arange(64, dtype=np.uint32)),
]


PROXY.append(Case("bulk store issued without a barrier after the other threads' writes", """
    shl.b32 %r12, %r4, 1;
    st.shared.u32 [%r11], %r12;                 //@O
    fence.proxy.async.shared::cta;
    [[||bar.sync 0;]]
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [buf], 256;    //@L
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
""", "race", lambda inp, g, b: 2 * np.arange(64, dtype=np.uint32)))

PROXY.append(Case("cp.async.bulk.wait_group.read 1 while the newest group's source is overwritten", """
    shl.b32 %r12, %r4, 1;
    st.shared.u32 [%r11], %r12;
    mul.lo.u32 %r12, %r4, 3;
    st.shared.u32 [%r11+256], %r12;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [buf], 256;
    @%p1 cp.async.bulk.commit_group;
    add.u64 %rd7, %rd1, 256;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd7], [buf+256], 256;     //@O
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group.read 1;
    bar.sync 0;
    add.u32 %r15, %r11, [[256||0]];
    st.shared.u32 [%r15], %r1;                  //@L
""", "async", lambda inp, g, b: np.concatenate([2 * np.arange(64), 3 * np.arange(64)]).astype(np.uint32),
    words=128))

CASES = MBARRIERS + CP_ASYNC + TMA + PROXY

"""Planted bugs: global-memory races between threads of one CTA (RAW, WAR,
WAW, within a warp, same-value stores, atomics against plain accesses),
ordered in the twins by ``bar.sync``, an mbarrier phase, ``bar.warp.sync``
or release/acquire through a flag; threads of a warp storing disjoint
bytes of one word. Races between CTAs are in :mod:`sanitizer_cases_checks`;
see :mod:`sanitizer_cases` for the notation."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case, gid, halves

__all__ = ["CASES"]

BAR = "    .shared .align 8 .b64 bar;\n"


def _lane(lane: np.ndarray) -> np.ndarray:
    return lane


def _words(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts).astype(np.uint32)


CASES = [
    Case("global memory: two warps of one CTA store different values to one word", """
    setp.eq.u32 %p2, %r1, 32;
    @%p1 st.global.u32 [%rd1], 1;               //@O
    [[||bar.sync 0;]]
    @%p2 st.global.u32 [%rd1], 2;               //@L
""", "race", lambda inp, g, b: _words([2], np.zeros(63))),

    Case("global memory: two warps of one CTA store the same value to one word (strict mode)", """
    setp.eq.u32 %p2, %r1, 32;
    @%p1 st.global.u32 [%rd1], 5;               //@O
    [[||bar.sync 0;]]
    @%p2 st.global.u32 [%rd1], 5;               //@L
""", "race", lambda inp, g, b: _words([5], np.zeros(63)), mode="strict"),

    Case("global memory: a warp reads another warp's store without a barrier (one CTA)", """
    st.global.u32 [%rd4], %r4;                  //@O
    [[||bar.sync 0;]]
    xor.b32 %r12, %r4, 32;
    mul.wide.u32 %rd6, %r12, 4;
    add.u64 %rd6, %rd1, %rd6;
    ld.global.u32 %r13, [%rd6];                 //@L
    add.u64 %rd7, %rd4, 256;
    st.global.u32 [%rd7], %r13;
""", "race", lambda inp, g, b: _words(gid(inp, g, b), gid(inp, g, b) ^ 32), words=128),

    Case("global memory: a warp overwrites a word another warp read, without a barrier (one CTA)", """
    xor.b32 %r12, %r4, 32;
    mul.wide.u32 %rd6, %r12, 4;
    add.u64 %rd6, %rd1, %rd6;
    ld.global.u32 %r13, [%rd6];                 //@O
    [[||bar.sync 0;]]
    add.u32 %r14, %r4, 1000;
    st.global.u32 [%rd4], %r14;                 //@L
    add.u64 %rd7, %rd4, 256;
    st.global.u32 [%rd7], %r13;
""", "race", lambda inp, g, b: _words(gid(inp, g, b) + 1000, np.zeros(64)), words=128),

    Case("global memory: a consumer warp reads the producer's store before the mbarrier phase", """
    setp.lt.u32 %p2, %r1, 32;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 32;
    bar.sync 0;
    @%p2 bra PRODUCER;
    [[||WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;]]
    sub.u64 %rd6, %rd4, 128;
    ld.global.u32 %r13, [%rd6];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    st.global.u32 [%rd4], %r4;                  //@O
    mbarrier.arrive.shared::cta.b64 %rd7, [bar];
DONE:
""", "race", halves(_lane, _lane), decls=BAR),

    Case("global memory: a flag within one CTA stored relaxed instead of st.release (consumer ld.acquire)", """
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
SPIN:
    ld.acquire.gpu.global.u32 %r12, [%rd1+256];
    setp.eq.u32 %p3, %r12, 0;
    @%p3 bra SPIN;
    sub.u64 %rd6, %rd4, 128;
    ld.global.u32 %r13, [%rd6];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    st.global.u32 [%rd4], %r4;                  //@O
    bar.warp.sync -1;
    @%p1 st.[[relaxed||release]].gpu.global.u32 [%rd1+256], 1;
DONE:
""", "race", lambda inp, g, b: _words(np.arange(32), np.arange(32), [1]), words=65),

    Case("global memory: lanes of a warp read each other's stores without bar.warp.sync", """
    st.global.u32 [%rd4], %r4;                  //@O
    xor.b32 %r12, %r4, [[1||0]];
    mul.wide.u32 %rd6, %r12, 4;
    add.u64 %rd6, %rd1, %rd6;
    ld.global.u32 %r13, [%rd6];                 //@L
    add.u64 %rd7, %rd4, 128;
    st.global.u32 [%rd7], %r13;
""", "race", lambda inp, g, b: _words(np.arange(32), np.arange(32)), block=32, words=64),

    Case("global memory: lanes of a warp store overlapping instead of disjoint bytes of one word", """
    cvt.u16.u32 %rs1, %r1;
    and.b32 %r12, %r1, [[1||3]];
    shr.u32 %r13, %r1, 2;
    shl.b32 %r13, %r13, 2;
    add.u32 %r12, %r12, %r13;
    cvt.u64.u32 %rd6, %r12;
    add.u64 %rd6, %rd1, %rd6;
    st.global.u8 [%rd6], %rs1;                  //@L
""", "race", lambda inp, g, b: np.arange(64, dtype=np.uint8).view(np.uint32), words=16),

    Case("global memory: plain read of a counter the CTA's threads update atomically", """
    atom.global.add.u32 %r12, [%rd1+256], 1;    //@O
    [[||bar.sync 0;]]
    ld.global.u32 %r13, [%rd1+256];             //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: np.full(65, 64, np.uint32), words=65),
]

"""Planted bugs: uninitialised registers, shared and local memory; barrier
divergence and warp-collective member masks; global memory shared by the
CTAs of a launch (see :mod:`sanitizer_cases` for the notation)."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case, const, gid

__all__ = ["CASES"]

UNINITIALISED = [
    Case("uninitialised register", """
    [[||mov.u32 %r40, 2;]]
    add.u32 %r13, %r40, 1;                      //@L
    st.global.u32 [%rd4], %r13;
""", "uninitialised", const(3)),

    Case("uninitialised register read under a guard wider than its definition", """
    setp.lt.u32 %p2, %r1, 16;
    setp.lt.u32 %p3, %r1, 24;
    @%p2 mov.u32 %r40, 7;
    @[[%p3||%p2]] add.u32 %r13, %r40, 1;         //@L
    @%p2 st.global.u32 [%rd4], %r13;
""", "uninitialised", const(8, 16)),

    Case("use of a register packed from an uninitialised half", """
    cvt.u16.u32 %rs1, %r4;
    [[||mov.b16 %rs2, 0;]]
    mov.b32 %r15, {%rs1, %rs2};
    add.u32 %r13, %r15, 1;                      //@L
    st.global.u32 [%rd4], %r13;
""", "uninitialised", lambda inp, g, b: gid(inp, g, b) + 1),

    Case("guard predicate never set", """
    [[||setp.lt.u32 %p5, %r1, 8;]]
    mov.u32 %r13, 1;
    @%p5 mov.u32 %r13, 2;                       //@L
    st.global.u32 [%rd4], %r13;
""", "uninitialised", lambda inp, g, b: np.where(gid(inp, g, b) < 8, 2, 1)),

    Case("selp choosing an uninitialised operand (twin: choosing the defined one)", """
    setp.lt.u32 %p2, %r1, 16;
    @%p2 mov.u32 %r40, 7;
    selp.u32 %r13, [[0, %r40||%r40, 0]], %p2;
    st.global.u32 [%rd4], %r13;                 //@L (selp moves the undefined value; its use is the finding)
""", "uninitialised", lambda inp, g, b: np.where(gid(inp, g, b) < 16, 7, 0), block=32),

    Case("uninitialised shared memory", """
    setp.lt.u32 %p2, %r1, 48;
    [[@%p2 ||]]st.shared.u32 [%r11], %r4;
    bar.sync 0;
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "uninitialised", gid),

    Case("uninitialised bytes of a vector load", """
    shl.b32 %r12, %r1, 4;
    add.u32 %r12, %r10, %r12;
    st.shared.v[[2||4]].u32 [%r12], {%r4, %r4[[||, %r4, %r4]]};
    ld.shared.v4.u32 {%r20, %r21, %r22, %r23}, [%r12];     //@L
    add.u32 %r13, %r20, %r21;
    add.u32 %r13, %r13, %r22;
    add.u32 %r13, %r13, %r23;
    st.global.u32 [%rd4], %r13;
""", "uninitialised", lambda inp, g, b: 4 * gid(inp, g, b)),

    Case("uninitialised local memory", """
    [[||st.local.u32 [loc+4], %r4;]]
    ld.local.u32 %r13, [loc+4];                 //@L
    st.global.u32 [%rd4], %r13;
""", "uninitialised", gid, decls="    .local .align 4 .b8 loc[16];\n"),
]

OTHERS = [
    Case(".aligned bar.sync reached by part of a warp", """
    st.shared.u32 [%r11], %r4;
    setp.lt.u32 %p2, %r6, 16;
    @%p2 bra LOW;
    [[bar.sync||barrier.sync]] 0;               //@L
    bra JOIN;
LOW:
    [[bar.sync||barrier.sync]] 0;
JOIN:
    xor.b32 %r12, %r5, 64;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];
    st.global.u32 [%rd4], %r13;
""", "divergence", lambda inp, g, b: gid(inp, g, b) ^ 16, block=32),

    Case("shfl.sync whose member mask names exited lanes", """
    setp.ge.u32 %p2, %r1, 16;
    @%p2 bra DONE;
    shfl.sync.bfly.b32 %r13, %r4, 1, 0x1f, [[0xffffffff||0x0000ffff]];   //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", lambda inp, g, b: np.where(gid(inp, g, b) < 16, gid(inp, g, b) ^ 1, 0), block=32),

    Case("vote.sync whose member mask names exited lanes", """
    setp.ge.u32 %p2, %r1, 16;
    @%p2 bra DONE;
    and.b32 %r12, %r1, 1;
    setp.eq.u32 %p3, %r12, 1;
    vote.sync.ballot.b32 %r13, %p3, [[0xffffffff||0x0000ffff]];    //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", const(0xAAAA, 16), block=32),

    Case("elect.sync whose member mask names exited lanes", """
    setp.ge.u32 %p2, %r1, 16;
    @%p2 bra DONE;
    elect.sync %r13|%p3, [[0xffffffff||0x0000ffff]];    //@L
    selp.u32 %r14, 1, 0, %p3;
    add.u32 %r13, %r13, %r14;
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", lambda inp, g, b: np.r_[1, np.zeros(15), np.zeros(16)].astype(np.uint32), block=32,
        arch="sm_90a"),

    Case("split .aligned barrier within a warp: half arrives, half syncs", """
    setp.lt.u32 %p2, %r1, 16;
    @!%p2 bra CONSUMER;
    st.shared.u32 [%r11], %r4;
    [[bar.arrive||barrier.arrive]] 1, 32;       //@L
    bra DONE;
CONSUMER:
    [[bar.sync||barrier.sync]] 1, 32;
    sub.u32 %r12, %r11, 64;
    ld.shared.u32 %r13, [%r12];
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", lambda inp, g, b: np.where(gid(inp, g, b) < 16, 0, gid(inp, g, b) - 16), block=32),

    Case("bar.warp.sync whose member mask names exited lanes", """
    setp.ge.u32 %p2, %r1, 16;
    @%p2 bra DONE;
    st.shared.u32 [%r11], %r4;
    bar.warp.sync [[-1||0x0000ffff]];            //@L
    xor.b32 %r12, %r5, 4;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", lambda inp, g, b: np.where(gid(inp, g, b) < 16, gid(inp, g, b) ^ 1, 0), block=32),

    Case("shfl.sync reading a source lane outside its member mask", """
    setp.ge.u32 %p2, %r1, 16;
    @%p2 bra DONE;
    xor.b32 %r12, %r1, [[16||1]];
    shfl.sync.idx.b32 %r13, %r4, %r12, 0x1f, 0x0000ffff;    //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "divergence", lambda inp, g, b: np.where(gid(inp, g, b) < 16, gid(inp, g, b) ^ 1, 0), block=32),

    Case("global memory: two CTAs store different values to one word", """
    [[mov.u64 %rd6, %rd1;||mul.wide.u32 %rd6, %r2, 4;
    add.u64 %rd6, %rd1, %rd6;]]
    add.u32 %r13, %r2, 1;
    @%p1 st.global.u32 [%rd6], %r13;            //@L
""", "race", lambda inp, g, b: np.array([1, 2], np.uint32), block=32, grid=2, words=2),

    Case("global memory: a CTA reads what another CTA stores", """
    st.global.u32 [%rd4], %r4;                  //@O
    xor.b32 %r12, %r4, [[32||0]];
    mul.wide.u32 %rd6, %r12, 4;
    add.u64 %rd6, %rd1, %rd6;
    ld.global.u32 %r13, [%rd6];                 //@L
    add.u64 %rd7, %rd4, 256;
    st.global.u32 [%rd7], %r13;
""", "race", lambda inp, g, b: np.tile(gid(inp, g, b), 2), block=32, grid=2, words=128),
]

OTHERS += [
    Case("global memory: two CTAs store to one word; an unrelated gpu-scope fence elsewhere", """
    [[mov.u64 %rd6, %rd1;||mul.wide.u32 %rd6, %r2, 4;
    add.u64 %rd6, %rd1, %rd6;]]
    add.u32 %r13, %r2, 1;
    @%p1 st.global.u32 [%rd6], %r13;            //@L
    membar.gl;
""", "race", lambda inp, g, b: np.array([1, 2, 0, 0], np.uint32), block=32, grid=2, words=4),

    Case("global memory: CTAs exchange data through a flag with .cta instead of .gpu scope", """
    setp.ne.u32 %p2, %r2, 0;
    @%p2 bra CONSUMER;
    st.global.u32 [%rd4], %r4;                  //@O
    fence.acq_rel.[[cta||gpu]];
    @%p1 st.relaxed.[[cta||gpu]].global.u32 [%rd1+256], 1;   //@O2 (the flag store)
    bra DONE;
CONSUMER:
    ld.relaxed.[[cta||gpu]].global.u32 %r12, [%rd1+256];       //@L2 (the flag itself races)
    setp.eq.u32 %p3, %r12, 0;
    @%p3 bra CONSUMER;
    fence.acq_rel.[[cta||gpu]];
    sub.u64 %rd6, %rd4, 128;
    ld.global.u32 %r13, [%rd6];                 //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", lambda inp, g, b: np.concatenate([np.arange(32), np.arange(32), [1]]).astype(np.uint32),
         block=32, grid=2, words=65),

    Case("global memory: two CTAs store to one word with .cta-scope relaxed stores", """
    add.u32 %r13, %r2, 1;
    @%p1 st.relaxed.[[cta||gpu]].global.u32 [%rd1], %r13;     //@L
""", "race", lambda inp, g, b: np.array([2, 0], np.uint32), block=32, grid=2, words=2),

    Case("global memory: a CTA overwrites an input word another CTA read before", """
    setp.ne.u32 %p2, %r2, 0;
    mov.u32 %r13, 0;
    @%p2 ld.global.u32 %r13, [%rd2+8];          //@O
    @%p2 st.global.u32 [%rd4], %r13;
    setp.eq.u32 %p3, %r4, 0;
    @%p3 st.global.u32 [%rd2+[[8||4]]], %r2;    //@L
""", "race", lambda inp, g, b: np.r_[np.zeros(32), np.full(32, 7)].astype(np.uint32),
         block=32, grid=2, words=64),

    Case("global memory: plain read of a counter other CTAs update atomically", """
    @%p1 atom.global.add.u32 %r12, [%rd1], 1;   //@O
    [[@%p1 ld.global.u32 %r13, [%rd1];          //@L||mov.u32 %r13, 1;]]
    mul.wide.u32 %rd6, %r2, 4;
    add.u64 %rd6, %rd1, %rd6;
    @%p1 st.global.u32 [%rd6+4], %r13;
""", "race", lambda inp, g, b: np.array([2, 1, 1, 0], np.uint32), block=32, grid=2, words=4),
]

CASES = UNINITIALISED + OTHERS

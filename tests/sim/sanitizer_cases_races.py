"""Planted bugs: races between threads of a CTA (RAW, WAR, WAW, named
barriers, ``bar.arrive``, ``bar.red``, within a warp, same-value stores),
atomics against plain accesses, and clusters (``barrier.cluster``,
distributed shared memory); see :mod:`sanitizer_cases` for the notation."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case, const, gid, halves

__all__ = ["CASES"]

ZERO = lambda lane: 0 * lane                    # noqa: E731

RACES = [
    Case("raw: read of another warp's store without a barrier", """
    st.shared.u32 [%r11], %r4;                  //@O
    [[||bar.sync 0;]]
    xor.b32 %r12, %r5, 128;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32),

    Case("war: store over a word another warp read, without a barrier", """
    st.shared.u32 [%r11], %r4;
    bar.sync 0;
    xor.b32 %r12, %r5, 128;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@O
    [[||bar.sync 0;]]
    add.u32 %r14, %r4, 1000;
    st.shared.u32 [%r11], %r14;                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32),

    Case("waw: two warps store different values from different instructions", """
    setp.eq.u32 %p2, %r1, 32;
    @%p1 st.shared.u32 [buf], 1;                //@O
    [[||bar.sync 0;]]
    @%p2 st.shared.u32 [buf], 2;                //@L
    bar.sync 0;
    ld.shared.u32 %r13, [buf];
    st.global.u32 [%rd4], %r13;
""", "race", const(2)),

    Case("waw: one store instruction, a different value per thread", """
    [[||@%p1 ]]st.shared.u32 [buf+4], %r1;      //@L
    bar.sync 0;
    ld.shared.u32 %r13, [buf+4];
    st.global.u32 [%rd4], %r13;
""", "race", const(0)),

    Case("war: the writer is the last of the warp's readers", """
    @%p1 st.shared.u32 [buf], 7;
    bar.sync 0;
    ld.shared.u32 %r13, [buf];                  //@O
    setp.eq.u32 %p2, %r1, 31;
    [[||bar.sync 0;]]
    @%p2 st.shared.u32 [buf], 9;                //@L
    st.global.u32 [%rd4], %r13;
""", "race", const(7), block=32),

    Case("war: an unordered read hidden by a later, ordered read of the same warp", """
    mov.u32 %r13, 0;
    @%p1 st.shared.u32 [buf], 7;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    setp.ge.u32 %p4, %r1, 32;
    @%p4 bra WRITER;
    setp.eq.u32 %p2, %r1, 3;
    setp.eq.u32 %p3, %r1, 7;
    @%p2 ld.shared.u32 %r13, [buf];             //@O
    [[||bar.warp.sync -1;]]
    @%p3 ld.shared.u32 %r13, [buf];
    @%p3 mbarrier.arrive.shared::cta.b64 %rd6, [bar];
    st.global.u32 [%rd4], %r13;
    bra DONE;
WRITER:
    setp.ne.u32 %p5, %r1, 40;
    @%p5 bra DONE;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [bar], 0;
    @!%p5 bra WAIT;
    st.shared.u32 [buf], 9;                     //@L
DONE:
""", "race", lambda inp, g, b: np.isin(np.arange(64), [3, 7]).astype(np.uint32) * 7,
         decls="    .shared .align 8 .b64 bar;\n"),

    Case("raw through generic addresses", """
    mov.u64 %rd10, buf;
    cvta.shared.u64 %rd10, %rd10;
    cvt.u64.u32 %rd11, %r5;
    add.u64 %rd11, %rd10, %rd11;
    st.u32 [%rd11], %r4;                        //@O
    [[||bar.sync 0;]]
    xor.b32 %r12, %r5, 128;
    cvt.u64.u32 %rd12, %r12;
    add.u64 %rd12, %rd10, %rd12;
    ld.u32 %r13, [%rd12];                       //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32),

    Case("raw: bar.red orders like bar.sync", """
    st.shared.u32 [%r11], %r4;                  //@O
    [[||bar.red.popc.u32 %r30, 0, %p1;]]
    xor.b32 %r12, %r5, 128;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32),

    Case("race across an unrelated named barrier with thread counts", """
    st.shared.u32 [%r11], %r4;                  //@O
    setp.lt.u32 %p2, %r1, 64;
    @%p2 bra PAIR_A;
    bar.sync 2, 64;
    bra JOIN;
PAIR_A:
    bar.sync 1, 64;
JOIN:
    xor.b32 %r12, %r5, [[256||128]];
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32, block=128),

    Case("write after bar.arrive", """
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra CONSUMER;
    [[||st.shared.u32 [%r11], %r4;]]
    bar.arrive 1, 64;
    [[st.shared.u32 [%r11], %r4;                //@O||]]
    bra DONE;
CONSUMER:
    bar.sync 1, 64;
    sub.u32 %r12, %r11, 128;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", halves(ZERO, lambda lane: lane)),

    Case("bar.arrive does not acquire", """
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra READER;
    st.shared.u32 [%r11], %r4;                  //@O
    bar.sync 1, 64;
    bra DONE;
READER:
    [[bar.arrive||bar.sync]] 1, 64;
    add.u32 %r12, %r11, 128;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
DONE:
""", "race", halves(lambda lane: lane + 32, ZERO)),

    Case("race within a warp: bar.warp.sync missing on one of two divergent paths", """
    setp.lt.u32 %p2, %r6, 16;
    @%p2 bra LOW;
    st.shared.u32 [%r11], %r4;
    bar.warp.sync -1;                           //@L2 (its lanes 0-15 never sync)
    bra JOIN;
LOW:
    st.shared.u32 [%r11], %r4;
    [[||bar.warp.sync -1;]]
JOIN:
    xor.b32 %r12, %r5, 64;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L (lane 16 reads lane 0's unsynchronised word)
    st.global.u32 [%rd4], %r13;
""", "race|divergence", lambda inp, g, b: gid(inp, g, b) ^ 16, block=32),

    Case("race within a warp without bar.warp.sync", """
    st.shared.u32 [%r11], %r4;                  //@O
    [[||bar.warp.sync -1;]]
    xor.b32 %r12, %r5, 4;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 1, block=32),

    Case("same value stored by every thread (strict mode)", """
    [[||@%p1 ]]st.shared.u32 [buf+8], 5;        //@L
    bar.sync 0;
    ld.shared.u32 %r13, [buf+8];
    st.global.u32 [%rd4], %r13;
""", "race", const(5), mode="strict"),
]

# thread 0 zeroes a counter; every thread adds 1; everyone reads the total.
_COUNT = """
    @%p1 st.shared.u32 [buf], 0;                {store}
    {first}
    atom.shared.add.u32 %r12, [buf], 1;         {atom}
    {second}
    bar.sync 0;
    ld.shared.u32 %r13, [buf];
    st.global.u32 [%rd4], %r13;
"""

ATOMICS = [
    Case("plain load among atomics", _COUNT.format(
        store="", atom="//@O", first="bar.sync 0;",
        second="[[ld.shared.u32 %r14, [buf];          //@L||bar.sync 0;]]"), "race", const(64)),
    Case("atomic after a plain store without a barrier", _COUNT.format(
        store="//@O", atom="//@L", first="[[||bar.sync 0;]]", second=""), "race", const(64)),
    Case("plain store by another warp among atomics", _COUNT.format(
        store="", atom="//@O", first="bar.sync 0;",
        second="setp.eq.u32 %p2, %r1, 33;\n    [[||bar.sync 0;]]\n    @%p2 st.shared.u32 [buf], 100;   //@L"),
         "race", const(100)),
    Case("plain load among red.shared reductions", """
    @%p1 st.shared.u32 [buf], 0;
    bar.sync 0;
    red.shared.add.u32 [buf], 2;                //@O
    [[ld.shared.u32 %r14, [buf];                //@L||]]
    bar.sync 0;
    ld.shared.u32 %r13, [buf];
    st.global.u32 [%rd4], %r13;
""", "race", const(128)),

    Case("message passing: flag set by an atomic, data published without a fence", """
    @%p1 st.shared.u32 [buf+4], 0;
    bar.sync 0;
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
SPIN:
    atom.shared.or.b32 %r12, [buf+4], 0;
    setp.eq.u32 %p3, %r12, 0;
    @%p3 bra SPIN;
    fence.acq_rel.cta;
    sub.u32 %r14, %r11, 128;
    add.u32 %r14, %r14, 16;
    ld.shared.u32 %r13, [%r14];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    add.u32 %r14, %r11, 16;
    st.shared.u32 [%r14], %r4;                  //@O
    bar.warp.sync -1;
    [[||fence.acq_rel.cta;]]
    @%p1 atom.shared.exch.b32 %r12, [buf+4], 1;
DONE:
""", "race", halves(ZERO, lambda lane: lane),
         decls=""),

    Case("message passing: the consumer's fence comes before its flag load", """
    @%p1 st.shared.u32 [buf+4], 0;
    bar.sync 0;
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
    [[fence.acq_rel.cta;||]]
SPIN:
    atom.shared.or.b32 %r12, [buf+4], 0;
    setp.eq.u32 %p3, %r12, 0;
    @%p3 bra SPIN;
    [[||fence.acq_rel.cta;]]
    sub.u32 %r14, %r11, 128;
    add.u32 %r14, %r14, 16;
    ld.shared.u32 %r13, [%r14];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    add.u32 %r14, %r11, 16;
    st.shared.u32 [%r14], %r4;                  //@O
    bar.warp.sync -1;
    fence.acq_rel.cta;
    @%p1 atom.shared.exch.b32 %r12, [buf+4], 1;
DONE:
""", "race", halves(ZERO, lambda lane: lane)),

    Case("message passing: flag stored relaxed instead of st.release (consumer ld.acquire)", """
    @%p1 st.shared.u32 [buf+4], 0;
    bar.sync 0;
    setp.lt.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
SPIN:
    ld.acquire.cta.shared.u32 %r12, [buf+4];
    setp.eq.u32 %p3, %r12, 0;
    @%p3 bra SPIN;
    sub.u32 %r14, %r11, 128;
    add.u32 %r14, %r14, 16;
    ld.shared.u32 %r13, [%r14];                 //@L
    st.global.u32 [%rd4], %r13;
    bra DONE;
PRODUCER:
    add.u32 %r14, %r11, 16;
    st.shared.u32 [%r14], %r4;                  //@O
    bar.warp.sync -1;
    @%p1 st.[[relaxed||release]].cta.shared.u32 [buf+4], 1;
DONE:
""", "race", halves(ZERO, lambda lane: lane)),
]

CLUSTER = [
    Case("raw within a CTA: barrier.cluster orders like bar.sync", """
    st.shared.u32 [%r11], %r4;                  //@O
    [[||barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;]]
    xor.b32 %r12, %r5, 64;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@L
    st.global.u32 [%rd4], %r13;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 16, block=32, grid=2, cluster=2),

    Case("distributed shared memory: a CTA reads what its peer stored, without barrier.cluster", """
    mov.u32 %r20, %cluster_ctarank;
    xor.b32 %r21, %r20, 1;
    mapa.shared::cluster.u32 %r22, %r11, %r21;
    st.shared::cluster.u32 [%r22], %r4;         //@O
    [[||barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
""", "race", lambda inp, g, b: gid(inp, g, b) ^ 32, block=32, grid=2, cluster=2),
]

CASES = RACES + ATOMICS + CLUSTER

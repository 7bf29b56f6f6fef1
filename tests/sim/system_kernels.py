"""Hand-written PTX for the node tests (``test_system*.py``): collectives over
peers and flags, multimem reductions, and kernels that wait forever."""

from __future__ import annotations

HEAD = """.version 8.5
.target sm_90a
.address_size 64
"""

# Every device pushes its chunk (one u32 per thread) into every device's
# output, then thread 0 bumps every device's flag (.sys release) and waits
# until its own flag counts every device (.sys acquire).
ALLGATHER = HEAD + """
.visible .entry allgather(.param .u64 outs, .param .u64 flags, .param .u64 src, .param .u32 rank,
                          .param .u32 n)
{
    .reg .b32 %r<10>; .reg .b64 %rd<12>; .reg .pred %p<4>;
    ld.param.u64 %rd1, [outs];
    ld.param.u64 %rd2, [flags];
    ld.param.u64 %rd3, [src];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    mul.wide.u32 %rd4, %r3, 4;
    add.u64 %rd5, %rd3, %rd4;
    ld.global.u32 %r5, [%rd5];
    mad.lo.u32 %r6, %r1, %r4, %r3;
    mul.wide.u32 %rd6, %r6, 4;
    mov.u32 %r7, 0;
SEND:
    mul.wide.u32 %rd7, %r7, 8;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.u64 %rd9, [%rd8];
    add.u64 %rd10, %rd9, %rd6;
    st.global.u32 [%rd10], %r5;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p1, %r7, %r2;
    @%p1 bra SEND;
    bar.sync 0;
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra DONE;
    fence.acq_rel.sys;
    mov.u32 %r7, 0;
SIGNAL:
    mul.wide.u32 %rd7, %r7, 8;
    add.u64 %rd8, %rd2, %rd7;
    ld.global.u64 %rd9, [%rd8];
    red.release.sys.global.add.u32 [%rd9], 1;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p1, %r7, %r2;
    @%p1 bra SIGNAL;
    mul.wide.u32 %rd7, %r1, 8;
    add.u64 %rd8, %rd2, %rd7;
    ld.global.u64 %rd11, [%rd8];
WAIT:
    ld.acquire.sys.global.u32 %r8, [%rd11];
    setp.lt.u32 %p3, %r8, %r2;
    @%p3 bra WAIT;
    fence.sc.sys;
DONE:
    bar.sync 0;
    ret;
}
"""

# Spin until the u32 at `flag` equals `want`.
WAIT = HEAD + """
.visible .entry wait(.param .u64 flag, .param .u32 want)
{
    .reg .b32 %r<3>; .reg .b64 %rd<2>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [flag];
    ld.param.u32 %r1, [want];
SPIN:
    ld.acquire.sys.global.u32 %r2, [%rd1];
    setp.ne.u32 %p1, %r2, %r1;
    @%p1 bra SPIN;
    ret;
}
"""

# Count to `work` first (steps another device spends spinning), then store `value` to `flag`.
SIGNAL = HEAD + """
.visible .entry signal(.param .u64 flag, .param .u32 value, .param .u32 work)
{
    .reg .b32 %r<4>; .reg .b64 %rd<2>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [flag];
    ld.param.u32 %r1, [value];
    ld.param.u32 %r2, [work];
    mov.u32 %r3, 0;
LOOP:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, %r2;
    @%p1 bra LOOP;
    st.release.sys.global.u32 [%rd1], %r1;
    ret;
}
"""

# One load (or store, with `st`) of a u32 at `addr`.
LOAD = HEAD + """
.visible .entry load(.param .u64 addr, .param .u64 out)
{
    .reg .b32 %r<2>; .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [addr];
    ld.param.u64 %rd2, [out];
    ld.global.u32 %r1, [%rd1];
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def allreduce(ld: str, st: str, value: str, bytes_per_thread: int, decl: str = "") -> str:
    """A one-shot all-reduce: device ``rank`` reduces its slice of the
    multicast range (``multimem.ld_reduce.<ld>``) and stores the result to
    every copy (``multimem.st.<st>``); ``value``: the register or vector."""
    return HEAD + f"""
.visible .entry allreduce(.param .u64 mc, .param .u32 rank)
{{
    .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .f32 %f<6>; .reg .f64 %fd<2>; {decl}
    ld.param.u64 %rd1, [mc];
    ld.param.u32 %r1, [rank];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r1, %r3, %r2;
    mul.wide.u32 %rd2, %r4, {bytes_per_thread};
    add.u64 %rd3, %rd1, %rd2;
    multimem.ld_reduce.relaxed.sys.global.{ld} {value}, [%rd3];
    multimem.st.relaxed.sys.global.{st} [%rd3], {value};
    ret;
}}
"""


def red(form: str, value: str, bytes_per_thread: int, decl: str = "") -> str:
    """Every thread ``multimem.red.<form>`` of ``value`` at its own offset."""
    return HEAD + f"""
.visible .entry red(.param .u64 mc, .param .u32 rank)
{{
    .reg .b32 %r<12>; .reg .b64 %rd<4>; .reg .f32 %f<6>; {decl}
    ld.param.u64 %rd1, [mc];
    ld.param.u32 %r1, [rank];
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd2, %r2, {bytes_per_thread};
    add.u64 %rd3, %rd1, %rd2;
    add.u32 %r5, %r1, 1;
    cvt.rn.f32.u32 %f1, %r5;
    mov.f32 %f2, %f1;
    multimem.red.release.sys.global.{form} [%rd3], {value};
    ret;
}}
"""


# How a ring step is published (thread 0, after the CTA's stores and a
# bar.sync; %r5 holds the step count s + 1): a release store, or a fence
# followed by a relaxed store (the fence's scope decides who it publishes to).
PUBLISH = {
    "release": "st.release.sys.global.u32 [%rd4], %r5;",
    "fence.sys": "fence.acq_rel.sys;\n    st.relaxed.sys.global.u32 [%rd4], %r5;",
    "fence.gpu": "fence.acq_rel.gpu;\n    st.relaxed.sys.global.u32 [%rd4], %r5;",
}
# How thread 0 waits for its own flag to reach %r5: an acquire load, a
# relaxed load followed by a fence, or not at all (the bug).
WAIT_FOR = {
    "acquire": """RING_WAIT:
    ld.acquire.sys.global.u32 %r9, [%rd3];
    setp.lt.u32 %p2, %r9, %r5;
    @%p2 bra RING_WAIT;""",
    "fence": """RING_WAIT:
    ld.relaxed.sys.global.u32 %r9, [%rd3];
    setp.lt.u32 %p2, %r9, %r5;
    @%p2 bra RING_WAIT;
    fence.acq_rel.sys;""",
    "none": "",
}


def ring_allgather(publish: str = "release", wait: str = "acquire") -> str:
    """A ring all-gather over peers with flags: ``out`` holds ``n`` chunks of
    ``ntid`` u32, device ``rank``'s own in slot ``rank``. In step ``s``
    every thread stores slot ``(rank - s) mod n`` of its ``out`` into
    ``next_out`` (the next device's, a peer store); thread 0 publishes
    ``s + 1`` on the next device's flag (:data:`PUBLISH`) and waits until
    its own flag says the previous device delivered (:data:`WAIT_FOR`),
    and a ``bar.sync`` hands that on to the CTA. At the end every thread
    sums its column of the ``n`` slots into ``total`` (reading what the
    peers stored: a race unless the waits order it)."""
    return HEAD + f"""
.visible .entry ring(.param .u64 out, .param .u64 next_out, .param .u64 flag, .param .u64 next_flag,
                     .param .u64 total, .param .u32 rank, .param .u32 n)
{{
    .reg .b32 %r<14>; .reg .b64 %rd<10>; .reg .pred %p<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [next_out];
    ld.param.u64 %rd3, [flag];
    ld.param.u64 %rd4, [next_flag];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, 0;
    sub.u32 %r10, %r2, 1;
RING_STEP:
    add.u32 %r6, %r1, %r2;
    sub.u32 %r6, %r6, %r5;
    rem.u32 %r6, %r6, %r2;
    mad.lo.u32 %r7, %r6, %r4, %r3;
    mul.wide.u32 %rd5, %r7, 4;
    add.u64 %rd6, %rd1, %rd5;
    ld.global.u32 %r8, [%rd6];
    add.u64 %rd7, %rd2, %rd5;
    st.global.u32 [%rd7], %r8;
    add.u32 %r5, %r5, 1;
    bar.sync 0;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra RING_NEXT;
    {PUBLISH[publish]}
    {WAIT_FOR[wait]}
RING_NEXT:
    bar.sync 0;
    setp.lt.u32 %p3, %r5, %r10;
    @%p3 bra RING_STEP;
    mov.u32 %r11, 0;
    mov.u32 %r12, 0;
RING_SUM:
    mad.lo.u32 %r7, %r12, %r4, %r3;
    mul.wide.u32 %rd5, %r7, 4;
    add.u64 %rd6, %rd1, %rd5;
    ld.global.u32 %r8, [%rd6];
    add.u32 %r11, %r11, %r8;
    add.u32 %r12, %r12, 1;
    setp.lt.u32 %p3, %r12, %r2;
    @%p3 bra RING_SUM;
    ld.param.u64 %rd8, [total];
    mul.wide.u32 %rd5, %r3, 4;
    add.u64 %rd9, %rd8, %rd5;
    st.global.u32 [%rd9], %r11;
    ret;
}}
"""


def oneshot_allreduce(wait: bool = True) -> str:
    """A one-shot all-reduce over a multicast object ``mc`` (``n * ntid``
    f32 a device): device ``rank`` reduces its slice over every copy
    (``multimem.ld_reduce``) and stores the sum to every copy
    (``multimem.st``); then thread 0 adds 1 to the multicast flag on every
    device (``multimem.red.release.sys``) and, with ``wait``, spins until
    its own copy counts ``n`` (``ld.acquire.sys``). Last, every thread
    copies slice ``rank + 1 (mod n)`` of its own buffer ``mine`` (which the
    next device wrote) to ``got``: a race unless the wait orders it."""
    spin = """RED_WAIT:
    ld.acquire.sys.global.u32 %r9, [%rd3];
    setp.lt.u32 %p2, %r9, %r2;
    @%p2 bra RED_WAIT;""" if wait else ""
    return HEAD + f"""
.visible .entry allreduce(.param .u64 mc, .param .u64 flags, .param .u64 own_flag, .param .u64 mine,
                          .param .u64 got, .param .u32 rank, .param .u32 n)
{{
    .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .f32 %f<2>; .reg .pred %p<3>;
    ld.param.u64 %rd1, [mc];
    ld.param.u64 %rd2, [flags];
    ld.param.u64 %rd3, [own_flag];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r1, %r4, %r3;
    mul.wide.u32 %rd4, %r5, 4;
    add.u64 %rd5, %rd1, %rd4;
    multimem.ld_reduce.relaxed.sys.global.add.f32 %f1, [%rd5];
    multimem.st.relaxed.sys.global.f32 [%rd5], %f1;
    bar.sync 0;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra RED_NEXT;
    multimem.red.release.sys.global.add.u32 [%rd2], 1;
    {spin}
RED_NEXT:
    bar.sync 0;
    add.u32 %r6, %r1, 1;
    rem.u32 %r6, %r6, %r2;
    mad.lo.u32 %r7, %r6, %r4, %r3;
    mul.wide.u32 %rd6, %r7, 4;
    ld.param.u64 %rd7, [mine];
    add.u64 %rd8, %rd7, %rd6;
    ld.global.f32 %f1, [%rd8];
    ld.param.u64 %rd9, [got];
    mul.wide.u32 %rd10, %r3, 4;
    add.u64 %rd11, %rd9, %rd10;
    st.global.f32 [%rd11], %f1;
    ret;
}}
"""

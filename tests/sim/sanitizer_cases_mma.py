"""Planted bugs: ``wgmma`` (accumulators, groups, scale-d, its shared
operands and the proxy fence) and ``tcgen05`` (``tcgen05.ld``, tensor
memory allocation, ``tcgen05.mma`` and ``tcgen05.commit``); see
:mod:`sanitizer_cases` for the notation."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case

__all__ = ["CASES"]

# a warpgroup: every thread writes 2 bytes of B (8 x 16 f16 ones, K-major,
# no swizzle: LBO 128, SBO 256 bytes); A is ones in registers; D = A B is 16
# everywhere; each thread stores the sum of its 4 accumulators.
_B = "    .shared .align 256 .b8 bmat[256];\n"
_WGMMA_SETUP = """
    mov.u32 %r30, bmat;
    shl.b32 %r31, %r1, 1;
    add.u32 %r31, %r30, %r31;
    mov.b16 %rs1, 0x3C00;
    st.shared.u16 [%r31], %rs1;                 {mark}
    {fence}
    bar.sync 0;
    cvt.u64.u32 %rd8, %r30;
    shr.u64 %rd8, %rd8, 4;
    or.b64 %rd8, %rd8, 0x0000001000080000;
    mov.b32 %r20, 0x3C003C00;
    mov.b32 %r21, 0x3C003C00;
    mov.b32 %r22, 0x3C003C00;
    mov.b32 %r23, 0x3C003C00;
    wgmma.fence.sync.aligned;
"""
_MMA = ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{{d}}}, {{%r20, %r21, %r22, %r23}}, %rd8, "
        "{scale}, 1, 1, 0;")
_D1 = "%f1, %f2, %f3, %f4"
_SUM = """
    add.f32 %f5, %f1, %f2;                      {mark}
    add.f32 %f5, %f5, %f3;
    add.f32 %f5, %f5, %f4;
    cvt.rzi.u32.f32 %r13, %f5;
    st.global.u32 [%rd4], %r13;
"""
_FENCED = _WGMMA_SETUP.format(mark="", fence="fence.proxy.async.shared::cta;")
_SIXTY_FOUR = lambda inp, g, b: np.full(128, 64, np.uint32)     # noqa: E731

WGMMA = [
    Case("wgmma reads shared memory written without fence.proxy.async",
         _WGMMA_SETUP.format(mark="//@O", fence="[[||fence.proxy.async.shared::cta;]]") + "    "
         + _MMA.format(d=_D1, scale=0) + "        //@L\n    wgmma.commit_group.sync.aligned;\n"
         "    wgmma.wait_group.sync.aligned 0;\n" + _SUM.format(mark=""),
         "proxy", _SIXTY_FOUR, decls=_B, block=128),

    Case("wgmma accumulators read before wgmma.wait_group", _FENCED + "    "
         + _MMA.format(d=_D1, scale=0) + "        //@O\n    wgmma.commit_group.sync.aligned;\n"
         "    [[||wgmma.wait_group.sync.aligned 0;]]" + _SUM.format(mark="//@L")
         + "    [[wgmma.wait_group.sync.aligned 0;||]]\n",
         "async", _SIXTY_FOUR, decls=_B, block=128),

    Case("wgmma.wait_group 1 while the newest group's accumulators are needed (twin: the older one's)",
         _FENCED + "    " + _MMA.format(d="[[%f11, %f12, %f13, %f14||%f1, %f2, %f3, %f4]]", scale=0)
         + "\n    wgmma.commit_group.sync.aligned;\n    "
         + _MMA.format(d="[[%f1, %f2, %f3, %f4||%f11, %f12, %f13, %f14]]", scale=0)
         + "        //@O\n    wgmma.commit_group.sync.aligned;\n"
         "    wgmma.wait_group.sync.aligned 1;" + _SUM.format(mark="//@L")
         + "    wgmma.wait_group.sync.aligned 0;\n",
         "async", _SIXTY_FOUR, decls=_B, block=128),

    Case("wgmma with scale-d = 1 reads uninitialised accumulators (twin: scale-d = 0)", _FENCED + "    "
         + _MMA.format(d=_D1, scale="[[1||0]]") + "        //@L\n    wgmma.commit_group.sync.aligned;\n"
         "    wgmma.wait_group.sync.aligned 0;\n" + _SUM.format(mark=""),
         "uninitialised", _SIXTY_FOUR, decls=_B, block=128),

    Case("wgmma's shared operand overwritten before wgmma.wait_group", _FENCED + "    "
         + _MMA.format(d=_D1, scale=0) + "        //@O\n    wgmma.commit_group.sync.aligned;\n"
         "    [[||wgmma.wait_group.sync.aligned 0;\n    bar.sync 0;]]\n    mov.b16 %rs2, 0;\n"
         "    st.shared.u16 [%r31], %rs2;                 //@L\n"
         "    [[wgmma.wait_group.sync.aligned 0;||]]" + _SUM.format(mark=""),
         "async", _SIXTY_FOUR, decls=_B, block=128),
]

WGMMA += [
    Case("wgmma accumulator overwritten before wgmma.wait_group", _FENCED + "    "
         + _MMA.format(d=_D1, scale=0) + "        //@O\n    wgmma.commit_group.sync.aligned;\n"
         "    [[||wgmma.wait_group.sync.aligned 0;]]\n    mov.f32 %f1, 0f00000000;                    //@L\n"
         "    [[wgmma.wait_group.sync.aligned 0;||]]" + _SUM.format(mark=""),
         "async", lambda inp, g, b: np.full(128, 48, np.uint32), decls=_B, block=128),

    Case("wgmma A registers overwritten before wgmma.wait_group", _FENCED + "    "
         + _MMA.format(d=_D1, scale=0) + "        //@O\n    wgmma.commit_group.sync.aligned;\n"
         "    [[||wgmma.wait_group.sync.aligned 0;]]\n    mov.b32 %r20, 0;                            //@L\n"
         "    [[wgmma.wait_group.sync.aligned 0;||]]" + _SUM.format(mark=""),
         "async", _SIXTY_FOUR, decls=_B, block=128),
]

# one warp: allocate 32 columns of tensor memory, store gid in lane tid,
# load it back, add 1.
_SLOT = "    .shared .align 4 .b32 slot;\n"
_ALLOC = ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;\n"
          "    bar.sync 0;\n    ld.shared.b32 %r12, [slot];")
_DEALLOC = "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r12, 32;"
_TMEM_ST = "tcgen05.st.sync.aligned.32x32b.x1.b32 [%r12], {%r4};"
_TMEM_LD = "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r13}, [%r12];"
_PLUS_ONE = lambda inp, g, b: np.arange(1, 33, dtype=np.uint32)     # noqa: E731

TCGEN05 = [
    Case("tcgen05.ld result read before tcgen05.wait::ld", f"""
    {_ALLOC}
    {_TMEM_ST}
    tcgen05.wait::st.sync.aligned;
    {_TMEM_LD}                                  //@O
    [[||tcgen05.wait::ld.sync.aligned;]]
    add.u32 %r14, %r13, 1;                      //@L
    [[tcgen05.wait::ld.sync.aligned;||]]
    st.global.u32 [%rd4], %r14;
    {_DEALLOC}
""", "async", _PLUS_ONE, decls=_SLOT, block=32, arch="sm_100a"),

    Case("tensor memory used before tcgen05.alloc", f"""
    mov.u32 %r12, 0;
    [[||{_ALLOC}]]
    {_TMEM_ST}                                  //@L
    tcgen05.wait::st.sync.aligned;
    {_TMEM_LD}
    tcgen05.wait::ld.sync.aligned;
    add.u32 %r14, %r13, 1;
    st.global.u32 [%rd4], %r14;
    [[||{_DEALLOC}]]
""", "sim", _PLUS_ONE, decls=_SLOT, block=32, arch="sm_100a"),

    Case("tensor memory used after tcgen05.dealloc", f"""
    {_ALLOC}
    {_TMEM_ST}
    tcgen05.wait::st.sync.aligned;
    [[{_DEALLOC}||]]
    {_TMEM_LD}                                  //@L
    tcgen05.wait::ld.sync.aligned;
    add.u32 %r14, %r13, 1;
    st.global.u32 [%rd4], %r14;
    [[||{_DEALLOC}]]
""", "sim", _PLUS_ONE, decls=_SLOT, block=32, arch="sm_100a"),
]

# tcgen05.mma over 4 warps: every thread writes 32 bytes of A (128 x 16 f16
# ones, K-major, no swizzle: LBO 2048, SBO 128; fenced for the async proxy)
# and 2 bytes of B (8 x 16; {fence} after it);
# thread 0 issues D = A B (M 128, N 8, f32: 16 everywhere) and commits to
# the mbarrier; everyone waits, loads its row of D and stores its sum, 128.
_AB = ("    .shared .align 1024 .b8 amat[4096];\n    .shared .align 256 .b8 bmat[256];\n"
       "    .shared .align 8 .b64 bar;\n    .shared .align 4 .b32 slot;\n")
_MMA_SETUP = """
    mov.b32 %r32, 0x3C003C00;
    mov.u32 %r30, amat;
    shl.b32 %r31, %r1, 5;
    add.u32 %r31, %r30, %r31;
    st.shared.v4.u32 [%r31], {{%r32, %r32, %r32, %r32}};
    st.shared.v4.u32 [%r31+16], {{%r32, %r32, %r32, %r32}};
    fence.proxy.async.shared::cta;
    mov.u32 %r33, bmat;
    shl.b32 %r34, %r1, 1;
    add.u32 %r34, %r33, %r34;
    mov.b16 %rs1, 0x3C00;
    st.shared.u16 [%r34], %rs1;                 {mark}
    {fence}
    setp.lt.u32 %p4, %r1, 32;
    @%p4 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r12, [slot];
    cvt.u64.u32 %rd8, %r30;
    shr.u64 %rd8, %rd8, 4;
    or.b64 %rd8, %rd8, 0x0000400800800000;
    cvt.u64.u32 %rd9, %r33;
    shr.u64 %rd9, %rd9, 4;
    or.b64 %rd9, %rd9, 0x0000400800080000;
    mov.b32 %r35, 0x08020010;
    setp.ne.u32 %p6, %r1, %r1;
    @%p1 tcgen05.mma.cta_group::1.kind::f16 [%r12], %rd8, %rd9, %r35, %p6;     {mma}
    @%p1 tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [bar];
"""
_MMA_DONE = """
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
    tcgen05.fence::after_thread_sync;
    shl.b32 %r36, %r7, 21;
    add.u32 %r36, %r12, %r36;
    tcgen05.ld.sync.aligned.32x32b.x8.b32 {%r20, %r21, %r22, %r23, %r24, %r25, %r26, %r27}, [%r36];
    tcgen05.wait::ld.sync.aligned;
    add.u32 %r13, %r20, 0;
    mov.b32 %f1, %r20;
    mov.b32 %f2, %r21;
    mov.b32 %f3, %r22;
    mov.b32 %f4, %r23;
    mov.b32 %f5, %r24;
    mov.b32 %f6, %r25;
    mov.b32 %f7, %r26;
    mov.b32 %f8, %r27;
    add.f32 %f1, %f1, %f2;
    add.f32 %f1, %f1, %f3;
    add.f32 %f1, %f1, %f4;
    add.f32 %f1, %f1, %f5;
    add.f32 %f1, %f1, %f6;
    add.f32 %f1, %f1, %f7;
    add.f32 %f1, %f1, %f8;
    cvt.rzi.u32.f32 %r13, %f1;
    st.global.u32 [%rd4], %r13;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @%p4 tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r12, 32;
"""
_ONE_TWENTY_EIGHT = lambda inp, g, b: np.full(128, 128, np.uint32)     # noqa: E731

TCGEN05 += [
    Case("tcgen05.mma reads shared memory written without fence.proxy.async", _MMA_SETUP.format(
        mark="//@O", mma="//@L", fence="[[||fence.proxy.async.shared::cta;]]") + _MMA_DONE,
         "proxy", _ONE_TWENTY_EIGHT, decls=_AB, block=128, arch="sm_100a"),

    Case("tcgen05.mma's shared operand overwritten before its commit's mbarrier phase is observed",
         _MMA_SETUP.format(mark="", mma="//@O", fence="fence.proxy.async.shared::cta;")
         + "    [[st.shared.v4.u32 [%r31], {%r1, %r1, %r1, %r1};      //@L||]]" + _MMA_DONE
         + "    [[||st.shared.v4.u32 [%r31], {%r1, %r1, %r1, %r1};]]\n",
         "race|async", _ONE_TWENTY_EIGHT, decls=_AB, block=128, arch="sm_100a"),

    Case("tcgen05.mma's issuer overwrites its shared operand after tcgen05.commit, before the mbarrier",
         _MMA_SETUP.format(mark="", mma="//@O", fence="fence.proxy.async.shared::cta;")
         + "    [[@%p1 st.shared.v4.u32 [%r31], {%r1, %r1, %r1, %r1};      //@L||]]" + _MMA_DONE
         + "    [[||@%p1 st.shared.v4.u32 [%r31], {%r1, %r1, %r1, %r1};]]\n",
         "async", _ONE_TWENTY_EIGHT, decls=_AB, block=128, arch="sm_100a"),
]

CASES = WGMMA + TCGEN05

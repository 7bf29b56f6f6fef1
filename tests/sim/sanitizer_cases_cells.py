"""Planted bugs whose kernels split the sanitizer's shadow cells while an
async operation is in flight: the shadows keep one record per cell of up
to 16 bytes while every access covers whole cells, and a byte store
(``st.shared.u8``) splits them into bytes; a ``cp.async`` group, a bulk
copy's pending bytes or a bulk store's in-flight read must come through the
split intact. See :mod:`sanitizer_cases` for the notation."""

from __future__ import annotations

import numpy as np

from sanitizer_cases import Case

__all__ = ["CASES"]

BAR = "    .shared .align 8 .b64 bar;\n"

# thread 0 stores a byte far from the data: the shadow's cells become bytes
_SPLIT = """
    cvt.u16.u32 %rs1, %r1;
    @%p1 st.shared.u8 [buf+1023], %rs1;
"""


def _second_words(inp: np.ndarray, grid: int, block: int) -> np.ndarray:
    """``out[t]`` = ``inp[4t + 1]`` for the 32 threads, the rest 0."""
    out = np.zeros(len(inp), np.uint32)
    out[:32] = inp[4 * np.arange(32) + 1]
    return out


CASES = [
    Case("cp.async of 16 bytes in flight across a cell split, read before its wait_group", """
    shl.b32 %r12, %r1, 4;
    add.u32 %r12, %r10, %r12;
    mul.wide.u32 %rd7, %r1, 16;
    add.u64 %rd7, %rd2, %rd7;
    cp.async.cg.shared.global [%r12], [%rd7], 16;
    cp.async.commit_group;
""" + _SPLIT + """
    [[||cp.async.wait_group 0;]]
    ld.shared.u32 %r13, [%r12+4];               //@L
    st.global.u32 [%rd4], %r13;
""", "async", _second_words, block=32, words=128),

    Case("bulk copy pending across a cell split, read before its mbarrier phase is observed", """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd6, [bar], 256;
    @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd2], 256, [bar];
""" + _SPLIT + """
    [[||WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;]]
    ld.shared.u32 %r13, [%r11];                 //@L
    st.global.u32 [%rd4], %r13;
""", "async", lambda inp, g, b: inp.copy(), decls=BAR),

    Case("bulk store reading across a cell split, its source overwritten before wait_group.read", """
    shl.b32 %r12, %r4, 1;
    st.shared.u32 [%r11], %r12;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [buf], 256;    //@O
    @%p1 cp.async.bulk.commit_group;
""" + _SPLIT + """
    [[||@%p1 cp.async.bulk.wait_group.read 0;]]
    bar.sync 0;
    setp.ge.u32 %p4, %r1, 32;
    @%p4 st.shared.u32 [%r11], %r1;             //@L (the second warp: the copy's last 128 bytes)
""", "async", lambda inp, g, b: 2 * np.arange(64, dtype=np.uint32)),
]

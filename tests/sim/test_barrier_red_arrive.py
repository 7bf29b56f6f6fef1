"""bar.red and bar.arrive (need the machine patch in machine_bar_red.diff)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"


def test_bar_red_popc_and_or() -> None:
    text = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    rem.u32 %r2, %r1, 3;
    setp.eq.u32 %p1, %r2, 0;
    bar.red.popc.u32 %r3, 0, %p1;
    bar.red.and.pred %p2, 1, %p1;
    bar.red.or.pred %p3, 2, !%p1;
    barrier.red.popc.u32 %r4, 3, 96, !%p1;
    selp.u32 %r5, 1, 0, %p2;
    selp.u32 %r6, 1, 0, %p3;
    mov.u32 %r7, %ctaid.x;
    mad.lo.u32 %r7, %r7, 96, %r1;
    mul.wide.u32 %rd2, %r7, 16;
    add.s64 %rd2, %rd1, %rd2;
    st.global.v4.u32 [%rd2], {%r3, %r4, %r5, %r6};
    ret;
}"""
    out = np.zeros((2, 96, 4), np.uint32)
    sim.launch(text, out, grid=(2, 1, 1), block=(96, 1, 1))
    np.testing.assert_array_equal(out[..., 0], 32)
    np.testing.assert_array_equal(out[..., 1], 64)
    np.testing.assert_array_equal(out[..., 2], 0)
    np.testing.assert_array_equal(out[..., 3], 1)


@pytest.mark.parametrize("producer_first", [True, False])
def test_bar_arrive_releases_waiting_consumers(producer_first: bool) -> None:
    produce = """
PRODUCE:
    shl.b32 %r3, %r1, 2;
    mov.u32 %r6, buf;
    add.u32 %r3, %r3, %r6;
    add.u32 %r4, %r1, 1000;
    st.shared.u32 [%r3], %r4;
    bar.arrive 1, 64;
    bra.uni DONE;
"""
    consume = """
CONSUME:
    bar.sync 1, 64;
    sub.u32 %r5, %r1, 32;
    shl.b32 %r3, %r5, 2;
    mov.u32 %r6, buf;
    add.u32 %r3, %r3, %r6;
    ld.shared.u32 %r4, [%r3];
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd2, %rd1, %rd2;
    st.global.u32 [%rd2], %r4;
    bra.uni DONE;
"""
    text = HEAD + """.visible .entry k(.param .u64 out)
{
    .shared .align 4 .u32 buf[32];
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra PRODUCE;
    bra.uni CONSUME;
""" + (produce + consume if producer_first else consume + produce) + """
DONE:
    ret;
}"""
    out = np.zeros(32, np.uint32)
    sim.launch(text, out, block=(64, 1, 1))
    np.testing.assert_array_equal(out, np.arange(32) + 1000)

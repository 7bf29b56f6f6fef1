"""Multicast TMA loads (``cp.async.bulk.tensor ... .multicast::cluster``)
issued by several CTAs of a cluster in the same step: each copy lands in
the CTAs its ``ctaMask`` names, at the issuing thread's offsets (a CuTe DSL
2-CTA GEMM with A multicast across a (2, 2) cluster crashed here)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

# Each CTA's thread 0 loads rows 8*rank .. 8*rank+7 of a 16x8 f32 tensor;
# MASK_EXPR picks the CTAs that receive it.
PTX = r""".version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 out)
{
    .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<4>; .reg .b16 %rs<2>;
    .shared .align 1024 .b8 buf[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %cluster_ctarank;
    mov.u32 %r3, bar;
    mov.u32 %r4, buf;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SYNC;
    mbarrier.init.shared::cta.b64 [%r3], 1;
    fence.mbarrier_init.release.cluster;
SYNC:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    @%p1 bra WAIT;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 256;
MASK_EXPR    cvt.u16.u32 %rs1, %r6;
    mov.u64 %rd1, tmap;
    cvta.param.u64 %rd1, %rd1;
    mov.u32 %r7, 0;
    mul.lo.u32 %r8, %r2, 8;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%r4], [%rd1, {%r7, %r8}], [%r3], %rs1;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
    @!%p2 bra WAIT;
    shl.b32 %r9, %r1, 2;
    add.u32 %r10, %r4, %r9;
    ld.shared.f32 %r11, [%r10];
    ld.param.u64 %rd2, [out];
    mad.lo.u32 %r9, %r2, 64, %r1;
    mul.wide.u32 %rd3, %r9, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.b32 [%rd4], %r11;
    ret;
}
"""

OWN_RANK = "    mov.u32 %r5, 1;\n    shl.b32 %r6, %r5, %r2;\n"


def _run(mask_expr: str, **launch) -> np.ndarray:
    with sim.Device(arch="sm_90a") as dev:
        src = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
        out = np.zeros((2, 64), np.float32)
        ps, po = dev.to_device(src), dev.to_device(out)
        tm = sim.tensor_map(ps, (16, 8), np.float32, box=(8, 8))
        dev.launch(PTX.replace("MASK_EXPR", mask_expr), [tm, po], grid=(2, 1, 1), block=(64, 1, 1),
                   cluster=(2, 1, 1), **launch)
        return dev.from_device(po, like=out)


@pytest.mark.parametrize("launch", [{}, {"check": True}, {"schedule": "random", "seed": 3}],
                         ids=["default", "checked", "random"])
def test_two_ctas_multicast_to_their_own_rank_in_one_step(launch: dict) -> None:
    got = _run(OWN_RANK, **launch)
    np.testing.assert_array_equal(got, np.arange(128, dtype=np.float32).reshape(2, 64))

"""DSL-built kernels for sm_80, sm_90a and sm_100a that exercise each family
of the table, each assembled by ptxas for its target."""

from __future__ import annotations

import re

import pytest

from jaxptx import Tile, kernel, ptx, reg, smem
from jaxptx.errors import PtxTargetError
from jaxptx.runtime import ptxas
from jaxptx.types import b32, b64, bf16, f32, s32, u64


def assembled(k, **kw) -> str:
    s = k.specialize(**kw)
    ptxas(s.ptx, s.target.name)
    return s.ptx


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=lambda N: (N // 512, 1, 1),
        block=(128, 1, 1), arch="sm_80")
def scalar_and_memory(x, y):
    tid = ptx.special.tid.x()
    base = ptx.mul.wide.u32(tid, 16)
    a, b, c, d = ptx.ld.global_.v4.f32(x.ptr + base)
    s = ptx.fma.rn.f32(a, b, c)
    s = ptx.max.f32(s, d)
    h = ptx.cvt.rn.f16x2.f32(s, a)
    bits = ptx.mov.b32(h)
    q = ptx.cvt.rzi.s32.f32(s)
    q = ptx.lop3.b32(q, bits, 0xF0, 0x96)
    q = ptx.bfe.u32(ptx.cvt.u32.s32(q), 3, 5)
    r = ptx.ex2.approx.f32(s) + ptx.rsqrt.approx.f32(b)
    ptx.st.global_.v4.f32(y.ptr + base, (r, s, a, ptx.cvt.rn.f32.u32(q)))
    ptx.atom.global_.add.f32(y.ptr, r)
    ptx.red.global_.add.u32(y.ptr, q)
    p = ptx.setp.lt.and_.f32(a, b, ~(s > 0.0))
    ptx.st.global_.f32(y.ptr, ptx.selp.f32(a, b, p))
    ptx.membar.gl()
    ptx.bar.sync(0)


def test_scalar_memory_sm80() -> None:
    text = assembled(scalar_and_memory, N=4096)
    for frag in ("ld.global.v4.f32 {%f1, %f2, %f3, %f4}", "cvt.rn.f16x2.f32", "lop3.b32",
                 "atom.global.add.f32", "setp.lt.and.f32", "selp.f32", "bar.sync 0;"):
        assert frag in text, frag


@kernel(arch="sm_80", block=(32, 1, 1))
def warp_ops(out):
    lane = ptx.special.laneid()
    v = ptx.shfl.sync.bfly.b32(lane, 16, 0x1F, 0xFFFFFFFF)
    ballot = ptx.vote.sync.ballot.b32(lane == 3, 0xFFFFFFFF)
    total = ptx.redux.sync.add.u32(lane, 0xFFFFFFFF)
    mask = ptx.activemask.b32()
    same = ptx.match.any.sync.b32(v, mask)
    everyone = ptx.vote.sync.all.pred(lane < 32, 0xFFFFFFFF)
    ptx.st.global_.u32(out.ptr, total + ballot + same, pred=everyone)


def test_warp_sm80() -> None:
    text = assembled(warp_ops)
    assert "shfl.sync.bfly.b32" in text and "redux.sync.add.u32" in text and "match.any.sync.b32" in text


@kernel(arch="sm_80", block=(32, 1, 1))
def ampere_mma(a_ptr, b_ptr, c_ptr):
    lane = ptx.special.laneid()
    tile = smem.alloc(bf16, (16, 16), align=128)
    src = a_ptr.ptr + ptx.mul.wide.u32(lane, 16)
    ptx.cp.async_.cg.shared.global_(tile[lane >> 1, 0], src, 16)
    ptx.cp.async_.commit_group()
    ptx.cp.async_.wait_group(0)
    ptx.bar.sync(0)
    a = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(tile[lane & 15, 0])
    b = ptx.ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16(tile[lane & 15, 0])
    acc = reg.array(f32, 4)
    for r in acc:
        r.set(0.0)
    ptx.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(acc, a, b, acc)
    ptx.st.global_.v4.f32(c_ptr.ptr + ptx.mul.wide.u32(lane, 16), acc)


def test_ampere_cp_async_ldmatrix_mma_sm80() -> None:
    text = assembled(ampere_mma)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r" in text
    assert re.search(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 \{(%f\d+, ){3}%f\d+\}, "
                     r"\{(%r\d+, ){3}%r\d+\}, \{%r\d+, %r\d+\}, \{", text)


@kernel(in_specs=(Tile.wgmma_a(64, 16, bf16), Tile.wgmma_b(16, 64, bf16)),
        out_specs=(Tile(64, 64, f32),), block=(128, 1, 1), cluster=(2, 1, 1), arch="sm_90a")
def hopper_wgmma_tma(A, B, C):
    sA = smem.wgmma_tile(bf16, (64, 16), major="K")
    sB = smem.wgmma_tile(bf16, (16, 64), major="MN", swizzle=128)
    bar = smem.mbarrier(1)
    tid = ptx.special.tid.x()
    ptx.setmaxnreg.inc.sync.aligned.u32(240)
    with ptx.if_(tid == 0):
        ptx.mbarrier.init.shared.b64(bar[0], 1)
        ptx.fence.mbarrier_init.release.cluster()
    ptx.bar.sync(0)
    x, y = reg.scalar(s32, 0), reg.scalar(s32, 0)
    with ptx.if_(tid == 0):
        ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], 4096)
        ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes(
            sA, ptx.addr(A.tma_desc(), coords=(x, y)), bar[0])
        ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes \
            .multicast__cluster(sB, ptx.addr(B.tma_desc(), coords=(x, y)), bar[0], 0b11)
    done = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~done):
        ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], 0)
    acc = reg.array(f32, 32)
    ptx.wgmma.fence.sync.aligned()
    ptx.wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16(
        acc, sA.desc(), sB.desc(lbo=1024, sbo=2048), 0, 1, 1, 0, 1)
    ptx.wgmma.commit_group.sync.aligned()
    ptx.wgmma.wait_group.sync.aligned(0)
    ptx.fence.proxy.async_.shared__cta()
    rank = ptx.special.cluster_ctarank()
    peer = ptx.mapa.shared__cluster.u32(bar.base, rank ^ 1)
    ptx.barrier.cluster.arrive.release.aligned()
    ptx.barrier.cluster.wait.acquire.aligned()
    leader = reg.pred()
    ptx.elect.sync((reg.scalar(b32), leader), 0xFFFFFFFF)
    ptx.st.global_.f32(C.ptr, acc[0], pred=leader)
    ptx.st.global_.u32(C.ptr, peer)


def test_hopper_wgmma_tma_mbarrier_cluster_sm90a() -> None:
    text = assembled(hopper_wgmma_tma)
    assert ".param .align 64 .b8 A_tma[128]" in text and ".param .align 64 .b8 B_tma[128]" in text
    assert re.search(r"mov\.u64 (%rd\d+), A_tma;\n\tcvta\.param\.u64 %rd\d+, \1;", text)
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes "
                     r"\[wgmma_tile_0\], \[%rd\d+, \{%r\d+, %r\d+\}\], \[mbar_0\];", text)
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1," in text
    assert ".reqnctapercluster 2, 1, 1" in text


def test_hopper_kernel_refuses_sm80() -> None:
    k = kernel(arch="sm_80", block=(128, 1, 1))(hopper_wgmma_tma.fn)
    with pytest.raises(PtxTargetError, match=r"setmaxnreg.inc.sync.aligned.u32 needs .*sm_90a.*kernel targets sm_80"):
        k.ptx()


def test_wgmma_on_sm100a_is_refused() -> None:
    @kernel(arch="sm_100a")
    def k():
        ptx.wgmma.fence.sync.aligned()
    with pytest.raises(PtxTargetError, match=r"wgmma.fence.sync.aligned needs sm_90a, kernel targets sm_100a; pass arch='sm_90a'"):
        k.ptx()


def test_tcgen05_on_sm90a_is_refused() -> None:
    @kernel(arch="sm_90a")
    def k():
        ptx.tcgen05.fence__after_thread_sync()
    with pytest.raises(PtxTargetError, match=r"tcgen05.fence::after_thread_sync needs sm_100a .*kernel targets sm_90a"):
        k.ptx()


def test_wrong_fragment_size_is_refused() -> None:
    @kernel(arch="sm_90a")
    def k():
        acc = reg.array(f32, 16)
        d = reg.scalar(u64)
        ptx.wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16(acc, d, d, 0, 1, 1, 0, 0)
    with pytest.raises(Exception, match=r"operand d: expected a vector of 32 elements, got 16"):
        k.ptx()


@kernel(arch="sm_100a", block=(128, 1, 1))
def blackwell_tcgen05():
    slot = smem.alloc(b32, 1)
    bar = smem.mbarrier()
    ptx.tcgen05.alloc.cta_group__1.sync.aligned.shared__cta.b32(slot, 64)
    ptx.tcgen05.fence__after_thread_sync()
    taddr = ptx.ld.shared.b32(slot)
    idesc = reg.scalar(b32, 0)
    adesc, bdesc = reg.scalar(b64, 0), reg.scalar(b64, 0)
    vals = ptx.tcgen05.ld.sync.aligned._16x256b.x2.b32(ptx.addr(taddr))
    ptx.tcgen05.wait__ld.sync.aligned()
    ptx.tcgen05.st.sync.aligned._32x32b.x8.b32(ptx.addr(taddr), vals)
    ptx.tcgen05.mma.cta_group__1.kind__f16(ptx.addr(taddr), adesc, bdesc, idesc, ptx.special.tid.x() > 0)
    ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(bar[0])
    ptx.tcgen05.fence__before_thread_sync()
    ptx.tcgen05.dealloc.cta_group__1.sync.aligned.b32(taddr, 64)
    ptx.tcgen05.relinquish_alloc_permit.cta_group__1.sync.aligned()


def test_blackwell_tcgen05_sm100a() -> None:
    text = assembled(blackwell_tcgen05)
    (ld,) = [ln for ln in text.splitlines() if "tcgen05.ld" in ln]
    assert ld.count("%r") == 9   # 16x256b.x2: 8 registers, and the address
    assert "tcgen05.mma.cta_group::1.kind::f16 [%r" in text

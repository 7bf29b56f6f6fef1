"""Shared addresses carry the CTA's cluster rank, as on hardware.

A CTA's ``shared::cta`` addresses are its ``shared::cluster`` addresses (PTX
ISA, "Shared State Space": the shared::cta window lies inside the
shared::cluster window): the rank of the CTA sits in bits 24 and up, so in
CTA rank 1 of a cluster ``mov.u32 %r, var`` has bit 24 set, ``mapa`` to the
CTA's own rank gives the address back, and clearing bit 24 names the same
byte of rank 0 — what CUTLASS's and pyptx's 2-SM kernels do to signal the
even CTA's mbarrier from a ``.cta_group::2`` TMA load. Outside clusters
every rank is 0 and shared addresses are the plain offsets they always were.
An access with a ``.shared::cta`` operand (or ``.shared``, which means it)
through another CTA's address is undefined in the ISA; the emulator raises.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx.profile  # noqa: F401  (registers the profiler: profile=True below)
from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError, SimFault
from jaxptx.sim.memory.spaces import GLOBAL_SHIFT

HEAD_90 = ".version 8.6\n.target sm_90a\n.address_size 64\n"
HEAD_100 = ".version 8.8\n.target sm_100a\n.address_size 64\n"
REGS = "    .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .pred %p<8>;\n"
BIT24 = 1 << 24


def _assembled(text: str, arch: str) -> str:
    ptxas(text, arch)
    return text


# --- the addresses a CTA sees ---------------------------------------------------------------------

# Per CTA, 12 words at out + 48 * ctaid: the addresses of a static and a
# dynamic shared variable (mov, cvta there and back, mov.u64), what
# ld.shared reads through the address register, mapa to the CTA's own rank
# and to rank 0, getctarank, the generic mapa to the own rank and the
# generic address itself (low 32 bits of both, the window's bits above).
_ADDRESSES = HEAD_90 + """.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 out)
{
""" + REGS + """    .shared .align 16 .b32 pad[4];
    .shared .align 4 .b32 var;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ctaid.x;
    mul.wide.u32 %rd2, %r1, 48;
    add.u64 %rd1, %rd1, %rd2;
    mov.u32 %r2, %cluster_ctarank;
    mov.u32 %r3, var;
    add.u32 %r30, %r1, 100;
    st.shared.u32 [var], %r30;                  // through the variable's name
    bar.sync 0;
    ld.shared.u32 %r4, [%r3];                   // and back through its address
    cvta.shared.u64 %rd3, var;
    cvta.to.shared.u64 %rd4, %rd3;
    cvt.u32.u64 %r5, %rd4;
    mov.u64 %rd5, var;
    cvt.u32.u64 %r6, %rd5;
    mov.u32 %r7, dyn;
    mapa.shared::cluster.u32 %r8, %r3, %r2;
    mapa.shared::cluster.u32 %r9, %r3, 0;
    getctarank.shared::cluster.u32 %r10, %r3;
    mapa.u64 %rd6, %rd3, %r2;
    cvt.u32.u64 %r11, %rd6;
    cvt.u32.u64 %r12, %rd3;
    st.global.v4.u32 [%rd1], {%r3, %r4, %r5, %r6};
    st.global.v4.u32 [%rd1+16], {%r7, %r8, %r9, %r10};
    st.global.v4.u32 [%rd1+32], {%r11, %r12, %r12, %r12};
    ret;
}
"""


def _addresses(cluster: int, check: bool = False) -> np.ndarray:
    out = np.zeros((4, 12), np.uint32)
    sim.launch(_assembled(_ADDRESSES, "sm_90a"), out, grid=(4, 1, 1), block=(32, 1, 1), cluster=(cluster, 1, 1),
               smem=64, check=check)
    return out


def test_a_shared_variable_in_cta_rank_1_has_bit_24_set() -> None:
    """In a cluster of 2, CTA rank 1's address of every shared variable is
    rank 0's plus 1 << 24 (mov, cvta.to(cvta), mov.u64, the dynamic array),
    and rank 0's is the address a launch without clusters gives."""
    plain, pairs = _addresses(1), _addresses(2)
    assert plain[0, 0] == 16 and plain[0, 4] == 32          # var after pad[4]; dyn at the next 16 bytes
    rank = np.arange(4) % 2
    for word in (0, 2, 3, 4):
        np.testing.assert_array_equal(plain[:, word], plain[0, word])
        np.testing.assert_array_equal(pairs[:, word], plain[:, word] + rank * BIT24)
    assert pairs[1, 0] & BIT24 and not pairs[0, 0] & BIT24


def test_ld_shared_through_the_ranked_address_reads_the_variable() -> None:
    """``st.shared [var]`` then ``ld.shared [%r]`` with ``%r = var``: the same
    bytes, in every CTA, with and without clusters."""
    for cluster in (1, 2):
        np.testing.assert_array_equal(_addresses(cluster)[:, 1], np.arange(4) + 100)


def test_mapa_to_the_own_rank_is_the_address_itself() -> None:
    """``mapa`` of a local address to the CTA's own rank equals the address
    (shared::cluster and generic forms); to rank 0 it clears the rank bits;
    ``getctarank`` reads them."""
    out = _addresses(2)
    np.testing.assert_array_equal(out[:, 5], out[:, 0])            # mapa.shared::cluster, own rank
    np.testing.assert_array_equal(out[:, 6], out[:, 0] & ~np.uint32(BIT24))
    np.testing.assert_array_equal(out[:, 7], np.arange(4) % 2)
    np.testing.assert_array_equal(out[:, 8], out[:, 9])            # generic mapa, own rank
    np.testing.assert_array_equal(out[:, 9] & 0xFFFFFF, out[:, 0] & 0xFFFFFF)


def test_the_sanitizer_reads_ranked_addresses() -> None:
    """A checked launch of the same kernel finds nothing and computes the same."""
    np.testing.assert_array_equal(_addresses(2, check=True), _addresses(2))


# --- the rank bits name a CTA ------------------------------------------------------------------------

_PEER = HEAD_90 + """.visible .entry k(.param .u64 out)
{{
""" + REGS + """    .shared .align 4 .b32 slot;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p1, %r2, 1;
    mov.u32 %r3, slot;
    st.shared.u32 [slot], 0;
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    and.b32 %r4, %r3, 0xFEFFFFFF;               // rank 1 clears bit 24: rank 0's slot
    add.u32 %r5, %r1, 7;
    @%p1 {store} [%r4], %r5;
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    ld.shared.u32 %r6, [slot];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r6;
    ret;
}}
"""


def test_clearing_bit_24_names_the_even_ctas_byte() -> None:
    """CTA rank 1 stores through its own address of ``slot`` with bit 24
    cleared (``st.shared::cluster``): the value lands in rank 0's ``slot``."""
    out = np.zeros(4, np.uint32)
    sim.launch(_assembled(_PEER.format(store="st.shared::cluster.u32"), "sm_90a"), out, grid=(4, 1, 1),
               block=(32, 1, 1), cluster=(2, 1, 1))
    np.testing.assert_array_equal(out, [1 + 7, 0, 3 + 7, 0])


@pytest.mark.parametrize("store, what", [("st.shared.u32", "address"), ("st.shared::cta.u32", "address"),
                                         ("mbarrier.arrive.shared::cta.b64 %rd9,", "mbarrier address")])
def test_a_shared_cta_access_through_another_ctas_address_raises(store: str, what: str) -> None:
    """``.shared`` / ``.shared::cta`` must name the executing CTA's memory;
    another CTA's address there is undefined (PTX ISA), so the emulator raises."""
    with pytest.raises(SimError, match=rf"the {what} 0x0 names the shared memory of cluster rank 0, not the "
                                       r"executing CTA's \(rank 1\); .*needs \.shared::cluster"):
        sim.launch(_assembled(_PEER.format(store=store), "sm_90a"), np.zeros(4, np.uint32), grid=(4, 1, 1),
                   block=(32, 1, 1), cluster=(2, 1, 1))


def test_rank_bits_outside_the_cluster_fault() -> None:
    """Bits 24 and up naming rank 3 of a 2-CTA cluster: a fault naming the rank."""
    text = _PEER.format(store="st.shared::cluster.u32").replace("and.b32 %r4, %r3, 0xFEFFFFFF;",
                                                                "or.b32 %r4, %r3, 0x03000000;")
    with pytest.raises(SimFault, match=r"shared address 0x3000000 names the CTA of cluster rank 3, but the "
                                       r"cluster has 2 CTAs"):
        sim.launch(_assembled(text, "sm_90a"), np.zeros(4, np.uint32), grid=(2, 1, 1), block=(32, 1, 1),
                   cluster=(2, 1, 1))


# --- a .cta_group::2 TMA load into .shared::cta signalling the even CTA ---------------------------------

_TMA = HEAD_100 + """.visible .entry k(.param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128])
{{
""" + REGS + """    .shared .align 8 .b64 bar;
    .shared .align 1024 .b8 buf[512];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p2, %r2, 0;
    mov.u64 %rd9, t;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    mov.u32 %r4, bar;
    and.b32 %r5, %r4, 0xFEFFFFFF;               // the even CTA's mbarrier (CUTLASS's peer-bit mask)
    mov.u32 %r6, buf;
    {dst_fix}
    shl.b32 %r7, %r2, 3;                        // rows 8 * rank
    @%p1 cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes{group}
        [%r6], [%rd9, {{4, %r7}}], [%r5];
    @!%p2 bra ARRIVED;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd7, [bar], 1024;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
ARRIVED:
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd4, %r3, 512;
    add.u64 %rd3, %rd1, %rd4;
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd3, %rd3, %rd5;
    mov.u32 %r12, buf;
    shl.b32 %r13, %r1, 2;
    add.u32 %r12, %r12, %r13;
    ld.shared.b32 %r10, [%r12];
    st.global.b32 [%rd3], %r10;
    ld.shared.b32 %r10, [%r12+128];
    st.global.b32 [%rd3+128], %r10;
    ld.shared.b32 %r10, [%r12+256];
    st.global.b32 [%rd3+256], %r10;
    ld.shared.b32 %r10, [%r12+384];
    st.global.b32 [%rd3+384], %r10;
    ret;
}}
"""


def _tma(group: str, dst_fix: str = "") -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32)
    out = np.zeros(256, np.uint32)
    t = np.frombuffer(sim.tensor_map(2 << GLOBAL_SHIFT, a.shape, a.dtype, (8, 16)), np.uint8).copy()
    text = _assembled(_TMA.format(group=group, dst_fix=dst_fix), "sm_100a")
    sim.launch(text, out, a, t, grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1), max_steps=20_000)
    return out.reshape(2, 8, 16), a


def test_cta_group_2_tma_load_into_shared_cta_signals_the_even_ctas_mbarrier() -> None:
    """Each CTA of the pair loads its own box into its own ``buf`` (a
    ``.shared::cta`` destination) and signals the mbarrier at its own
    ``bar`` address with bit 24 cleared — rank 0's; rank 0's wait for both
    boxes' 1024 bytes completes (pyptx's ``build_gemm_2sm`` names the same
    address with ``mapa`` to rank 0)."""
    boxes, a = _tma(".cta_group::2")
    for rank in range(2):
        np.testing.assert_array_equal(boxes[rank], a[8 * rank:8 * rank + 8, 4:20])


def test_cta_group_1_tma_load_refuses_the_even_ctas_mbarrier() -> None:
    with pytest.raises(SimError, match=r"mbarrier is in the CTA of cluster rank 0 and the destination in rank 1; "
                                       r"it must be in that CTA \(\.cta_group::1\)"):
        _tma(".cta_group::1")


def test_a_shared_cta_tma_destination_in_the_peer_raises() -> None:
    """Rank 1 naming rank 0's ``buf`` as a ``.shared::cta`` destination."""
    with pytest.raises(SimError, match=r"the destination 0x400 names the shared memory of cluster rank 0, not the "
                                       r"executing CTA's \(rank 1\)"):
        _tma(".cta_group::2", dst_fix="and.b32 %r6, %r6, 0xFEFFFFFF;")


# --- the profiler's bank model ------------------------------------------------------------------------

_STRIDED = HEAD_90 + """.visible .entry k(.param .u64 out)
{
""" + REGS + """    .shared .align 16 .b32 arr[1024];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, arr;
    mul.lo.u32 %r3, %r1, 128;                   // 32 words apart: every lane in bank 0
    add.u32 %r4, %r2, %r3;
    st.shared.u32 [%r4], %r1;
    bar.sync 0;
    ld.shared.u32 %r5, [%r4];
    mov.u32 %r6, %ctaid.x;
    mad.lo.u32 %r7, %r6, 32, %r1;
    mul.wide.u32 %rd2, %r7, 4;
    add.u64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r5;
    ret;
}
"""


def test_bank_conflicts_do_not_see_the_rank_bits() -> None:
    """A 32-way conflicting ``ld.shared``: the same requests, wavefronts and
    conflicts in 2-CTA clusters (rank 1's addresses have bit 24 set) as
    without clusters."""
    counts = []
    for cluster in (1, 2):
        out = np.zeros(64, np.uint32)
        p = sim.launch(_assembled(_STRIDED, "sm_90a"), out, grid=(2, 1, 1), block=(32, 1, 1),
                       cluster=(cluster, 1, 1), profile=True)
        np.testing.assert_array_equal(out, np.tile(np.arange(32), 2))
        (ld,) = p.find("ld.shared")
        counts.append((ld["shared_requests"], ld["shared_wavefronts"], ld["shared_bank_conflicts"]))
    assert counts[0] == counts[1] == (2, 64, 62)

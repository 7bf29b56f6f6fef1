"""The sm_100 forms of the instruction table (other than ``tcgen05`` and the
``ldmatrix``/``stmatrix`` shapes of ``test_ldmatrix_sm100.py``) on the
emulator, each kernel assembled by ptxas for sm_100a:

- ``cp.async.bulk.tensor`` with ``.cta_group::1`` / ``.cta_group::2``: with
  ``::2`` the mbarrier signalled may be in the peer CTA of the CTA pair
  (ranks differing in bit 0), and a multicast signals, for each destination
  CTA, the CTA of its pair with the parity of the CTA holding ``[mbar]``
  (PTX ISA, cp.async.bulk.tensor);
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError
from jaxptx.sim.memory.spaces import GLOBAL_SHIFT

RNG = np.random.default_rng(100)
HEAD = ".version 8.8\n.target sm_100a\n.address_size 64\n"
REGS = "    .reg .b16 %h<8>; .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .pred %p<8>;\n"


def _assembled(text: str) -> str:
    ptxas(text, "sm_100a")
    return text


def _buffer(k: int) -> int:
    """Global address of a launch's k-th array argument (no global variables)."""
    return (k + 1) << GLOBAL_SHIFT


# --- cp.async.bulk.tensor .cta_group -----------------------------------------------------------

_TMA_PARAMS = ".param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128]"
_TMA_DECLS = "    .shared .align 8 .b64 bar;\n    .shared .align 1024 .b8 buf[512];\n"


def _tma_kernel(body: str) -> str:
    """A 32-thread CTA: %p1 thread 0, %r2 its %cluster_ctarank, %p2 rank 0;
    the body's copies land in ``buf``, then every CTA dumps ``buf`` (512
    bytes) to out + 512 * ctaid and its flag word ``%r20`` to out + 1024 + 4 * ctaid."""
    dump = "\n".join(f"""    ld.shared.b32 %r10, [%r12+{128 * i}];
    st.global.b32 [%rd3+{128 * i}], %r10;""" for i in range(4))
    return _assembled(HEAD + f""".visible .entry k({_TMA_PARAMS})
{{
{REGS}{_TMA_DECLS}
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p2, %r2, 0;
    mov.u32 %r20, 0;
    mov.u64 %rd9, t;                                 // the tensor map's .param address
{body}
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd4, %r3, 512;
    add.u64 %rd3, %rd1, %rd4;
    mul.wide.u32 %rd5, %r1, 4;
    add.u64 %rd3, %rd3, %rd5;
    mov.u32 %r12, buf;
    shl.b32 %r13, %r1, 2;
    add.u32 %r12, %r12, %r13;
{dump}
    mul.wide.u32 %rd6, %r3, 4;
    add.u64 %rd6, %rd6, %rd1;
    @%p1 st.global.b32 [%rd6+1024], %r20;
    ret;
}}
""")


def _launch_tma(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32)
    out = np.zeros(258, np.uint32)
    t = np.frombuffer(sim.tensor_map(_buffer(1), a.shape, a.dtype, (8, 16)), np.uint8).copy()
    sim.launch(text, out, a, t, grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1), max_steps=20_000)
    return out[:256].reshape(2, 8, 16), out[256:], a


_PAIR_LOAD = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    mov.u32 %r4, bar;
    mapa.shared::cluster.u32 %r5, %r4, 0;          // rank 0's mbarrier, seen from either CTA
    mov.u32 %r6, buf;
    shl.b32 %r7, %r2, 3;                            // rows 8 * rank
    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{group}
        [%r6], [%rd9, {{4, %r7}}], [%r5];
    @!%p2 bra ARRIVED;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd7, [bar], 1024;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [bar], 0;
    @!%p3 bra WAIT;
ARRIVED:
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
"""


def test_cta_group_2_copy_completes_the_peer_ctas_mbarrier() -> None:
    """Each CTA of a pair loads its own box into its own shared memory; both
    signal CTA rank 0's mbarrier (rank 1 through its peer's address), and rank
    0's wait for the 1024 bytes of both boxes completes."""
    boxes, _, a = _launch_tma(_tma_kernel(_PAIR_LOAD.format(group=".cta_group::2")))
    for rank in range(2):
        np.testing.assert_array_equal(boxes[rank], a[8 * rank:8 * rank + 8, 4:20])


@pytest.mark.parametrize("group", ["", ".cta_group::1"])
def test_cta_group_1_refuses_an_mbarrier_in_another_cta(group: str) -> None:
    with pytest.raises(SimError, match=r"mbarrier is in the CTA of cluster rank 0 and the destination in "
                                       r"rank 1; it must be in that CTA \(\.cta_group::1\)"):
        _launch_tma(_tma_kernel(_PAIR_LOAD.format(group=group)))


def test_cta_group_2_refuses_an_mbarrier_outside_the_pair() -> None:
    """In a 4-CTA cluster, rank 2 signalling rank 0's mbarrier is outside its pair (2, 3)."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r4, bar;
    mapa.shared::cluster.u32 %r5, %r4, 0;
    mov.u32 %r6, buf;
    setp.eq.u32 %p4, %r2, 2;
    and.pred %p4, %p4, %p1;
    @%p4 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2
        [%r6], [%rd9, {0, 0}], [%r5];
"""
    a = np.zeros((32, 32), np.uint32)
    t = np.frombuffer(sim.tensor_map(_buffer(1), a.shape, a.dtype, (8, 16)), np.uint8).copy()
    with pytest.raises(SimError, match=r"rank 0 and the destination in rank 2; it must be in that CTA or its "
                                       r"peer \(\.cta_group::2\)"):
        sim.launch(_tma_kernel(body), np.zeros(1024, np.uint32), a, t, grid=(4, 1, 1), block=(32, 1, 1),
                   cluster=(4, 1, 1))


_MULTICAST = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u16 %h1, 3;
    and.pred %p4, %p1, %p2;
    @%p4 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster{group}
        [buf], [%rd9, {{4, 2}}], [bar], %h1;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    @%p2 mov.u32 %r11, {expect};                     // the bytes this CTA's mbarrier should have seen
    @!%p2 mov.u32 %r11, {expect_other};
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd7, [bar], %r11;
    mbarrier.test_wait.parity.shared::cta.b64 %p5, [bar], 0;
    selp.u32 %r20, 1, 0, %p5;                       // 1: phase 0 completed (tx-count back at 0)
"""


@pytest.mark.parametrize("group, expect, expect_other", [
    ("", 512, 512), (".cta_group::1", 512, 512),
    # ::2 with [bar] in rank 0 (even): the signal for destination rank 1 goes to rank 0 too
    (".cta_group::2", 1024, 0)])
def test_multicast_mbarrier_signals_per_cta_group(group: str, expect: int, expect_other: int) -> None:
    """Rank 0 multicasts one box to both CTAs: with ``.cta_group::1`` each
    destination's own mbarrier gets the box's 512 bytes; with ``::2`` both
    signals go to the even CTA of the pair (the parity of ``[mbar]``'s CTA):
    rank 0's mbarrier sees 1024 bytes, rank 1's none. Each CTA arrives
    after the copy expecting exactly those bytes; its phase completes only
    if the complete-tx it received matches."""
    boxes, flags, a = _launch_tma(_tma_kernel(_MULTICAST.format(group=group, expect=expect,
                                                                expect_other=expect_other)))
    for rank in range(2):
        np.testing.assert_array_equal(boxes[rank], a[2:10, 4:20])
    np.testing.assert_array_equal(flags, [1, 1])


# --- 256-bit loads and stores: ld/st .v8 (32-bit elements) and .v4 (64-bit elements) ------------

_LD_FORMS = ["ld.global", "ld.global.L2::256B", "ld.global.L1::evict_last.L2::256B", "ld.global.cg.L2::evict_last.L2::256B", "ld.weak.global.cg",
             "ld.global.cs.L2::evict_first", "ld.global.nc.cs.L2::evict_normal", "ld.volatile.global", "ld.volatile.global.L2::128B",
             "ld.relaxed.gpu.global", "ld.acquire.cta.global.L2::256B", "ld.global.nc",
             "ld.global.nc.L1::no_allocate.L2::256B"]
_ST_FORMS = ["st.global", "st.weak.global.wt", "st.global.L1::no_allocate", "st.global.wb.L2::evict_first", "st.volatile.global",
             "st.relaxed.cluster.global", "st.release.sys.global.L2::evict_last"]


def _copy_256(ld: str, st: str, vec: str, etype: str) -> str:
    width = 32 if vec == "v8" else 64
    n = 8 if vec == "v8" else 4
    regs = ", ".join(f"%v{i}" for i in range(n))
    return _assembled(HEAD + f""".visible .entry k(.param .u64 inp, .param .u64 out)
{{
    .reg .{etype} %v<{n}>;
    .reg .b64 %rd<6>;
    .reg .b32 %r1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 32;
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    add.u64 %rd1, %rd1, %rd3;
    add.u64 %rd2, %rd2, %rd3;
    {ld}.{vec}.{etype} {{{regs}}}, [%rd1];
    {st}.{vec}.{etype} [%rd2+0], {{{regs}}};
    ret;
}}
""")


@pytest.mark.parametrize("ld", _LD_FORMS)
def test_ld_256_bit_forms_move_32_bytes(ld: str) -> None:
    inp = RNG.integers(0, 2**32, size=64 * 8, dtype=np.uint64).astype(np.uint32)
    for vec, etype in (("v8", "b32"), ("v8", "f32"), ("v4", "u64"), ("v4", "f64")):
        out = np.zeros_like(inp)
        sim.launch(_copy_256(ld, "st.global", vec, etype), inp, out, block=(64, 1, 1))
        np.testing.assert_array_equal(out, inp)


@pytest.mark.parametrize("st", _ST_FORMS)
def test_st_256_bit_forms_move_32_bytes(st: str) -> None:
    inp = RNG.integers(0, 2**32, size=64 * 8, dtype=np.uint64).astype(np.uint32)
    for vec, etype in (("v8", "u32"), ("v8", "s32"), ("v4", "b64"), ("v4", "s64")):
        out = np.zeros_like(inp)
        sim.launch(_copy_256("ld.global", st, vec, etype), inp, out, block=(64, 1, 1))
        np.testing.assert_array_equal(out, inp)


def test_256_bit_access_must_be_32_byte_aligned() -> None:
    text = _copy_256("ld.global", "st.global", "v8", "b32").replace("[%rd1]", "[%rd1+16]")
    with pytest.raises(SimError, match="align"):
        sim.launch(_assembled(text), np.zeros(64 * 8 + 8, np.uint32), np.zeros(64 * 8, np.uint32),
                   block=(64, 1, 1))

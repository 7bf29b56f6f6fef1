"""Resolution of the Blackwell tensor-memory family (tcgen05) against the
table: forms, vector lengths, operand types and refused combinations."""

from __future__ import annotations


import pytest

from jaxptx import isa

from isa_helpers import check_target
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError

LD = ("sync", "aligned")


def _operand(r: isa.Resolved, name: str) -> isa.Operand:
    return next(o for o in isa.active_operands(r) if o.name == name)


@pytest.mark.parametrize("shape, num, regs", [
    ("32x32b", "x1", 1), ("32x32b", "x128", 128), ("16x64b", "x16", 16),
    ("16x128b", "x4", 8), ("16x128b", "x64", 128), ("16x256b", "x8", 32),
    ("16x256b", "x32", 128),
])
def test_ld_destination_length_follows_shape_and_num(shape: str, num: str, regs: int) -> None:
    r = isa.resolve("tcgen05.ld", (*LD, shape, num, "b32"), 2)
    dest = isa.active_operands(r)[0]
    assert dest.out and isa.vector_count(dest, r.values) == regs
    assert isa.expected_type(dest, r.values).name == "b32"
    assert isa.expected_type(_operand(r, "taddr"), r.values).name == "u32"


def test_ld_pack_keeps_the_register_count() -> None:
    r = isa.resolve("tcgen05.ld", (*LD, "16x256b", "x2", "pack::16b", "b32"), 2)
    assert isa.vector_count(isa.active_operands(r)[0], r.values) == 8


def test_half_split_shape_takes_an_offset_operand() -> None:
    r = isa.resolve("tcgen05.ld", (*LD, "16x32bx2", "x8", "b32"), 3)
    assert [o.name for o in isa.active_operands(r)] == ["r", "taddr", "immHalfSplitoff"]
    assert isa.vector_count(isa.active_operands(r)[0], r.values) == 8
    st = isa.resolve("tcgen05.st", (*LD, "16x32bx2", "x2", "unpack::16b", "b32"), 3)
    assert [o.name for o in isa.active_operands(st)] == ["taddr", "immHalfSplitoff", "r"]
    assert isa.vector_count(_operand(st, "r"), st.values) == 2


@pytest.mark.parametrize("shape, num",
                         [("16x256b", "x64"), ("16x256b", "x128"), ("16x128b", "x128")])
def test_ld_st_num_beyond_the_shape_is_refused(shape: str, num: str) -> None:
    with pytest.raises(PtxModifierError, match=rf"\.{shape} needs \.x1 or .*, got \.{num}"):
        isa.resolve("tcgen05.ld", (*LD, shape, num, "b32"))
    with pytest.raises(PtxModifierError, match=rf"\.{shape} needs"):
        isa.resolve("tcgen05.st", (*LD, shape, num, "unpack::16b", "b32"))


def test_st_unpack_is_not_an_ld_modifier() -> None:
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.unpack::16b"):
        isa.resolve("tcgen05.ld", (*LD, "32x32b", "x1", "unpack::16b", "b32"))


@pytest.mark.parametrize("cta, lanes", [("cta_group::1", 4), ("cta_group::2", 8)])
def test_mma_disable_output_lane_length_follows_cta_group(cta: str, lanes: int) -> None:
    r = isa.resolve("tcgen05.mma", (cta, "kind::f16"), 6)
    names = [o.name for o in isa.active_operands(r)]
    # f16/tf32: the sixth operand is enable-input-d or scale-input-d.
    assert names == ["d_tmem", "a", "b_desc", "idesc", "lanes_or_enable_d", "enable_d_or_scale"]
    assert isa.vector_count(_operand(r, "lanes_or_enable_d"), r.values) == lanes
    assert isa.expected_type(_operand(r, "d_tmem"), r.values).name == "b32"
    f8 = isa.resolve("tcgen05.mma", (cta, "kind::f8f6f4"), 6)
    names = [o.name for o in isa.active_operands(f8)]
    assert names[4:] == ["disable_output_lane", "enable_input_d"]
    assert isa.vector_count(_operand(f8, "disable_output_lane"), f8.values) == lanes
    assert _operand(f8, "enable_input_d").kinds == ("pred",)


def test_mma_a_is_a_descriptor_or_a_tensor_memory_address() -> None:
    r = isa.resolve("tcgen05.mma", ("cta_group::1", "kind::f16", "collector::a::fill"), 5)
    a = _operand(r, "a")
    assert set(a.kinds) == {"reg", "imm", "mem"}
    assert isa.expected_type(a, r.values).name == "b64"


def test_mma_scale_input_d_is_limited_to_sm100_and_sm103() -> None:
    r = isa.resolve("tcgen05.mma", ("cta_group::1", "kind::tf32"), 7)
    assert [o.name for o in isa.active_operands(r)][-1] == "scale_input_d"
    check_target(r, "sm_103f", (8, 8))
    with pytest.raises(PtxTargetError, match=r"kernel targets sm_110a"):
        check_target(r, "sm_110a", (9, 0))
    # Only f16 and tf32 take scale-input-d: an i8 MMA never reaches 7 operands.
    lo, hi = isa.arity(isa.resolve("tcgen05.mma", ("cta_group::1", "kind::i8"), 7))
    assert hi < 7


def test_mma_kind_i8_needs_an_arch_specific_target() -> None:
    r = isa.resolve("tcgen05.mma", ("cta_group::2", "kind::i8"), 5)
    check_target(r, "sm_100a", (8, 6))
    with pytest.raises(PtxTargetError, match=r"\.kind::i8\) needs sm_100a or .*targets sm_100f"):
        check_target(r, "sm_100f", (8, 8))


def test_mma_ashift_takes_a_from_tensor_memory_only() -> None:
    r = isa.resolve("tcgen05.mma", ("cta_group::1", "kind::f8f6f4", "ashift",
                                    "collector::a::lastuse"), 5)
    assert r.values["ashift"] == "ashift"
    assert _operand(r, "a_tmem").kinds == ("mem",)
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.collector::a::fill.*"
                       r"expected one of \.collector::a::lastuse \.collector::a::discard"):
        isa.resolve("tcgen05.mma", ("cta_group::1", "kind::f16", "ashift", "collector::a::fill"))


def test_mma_block_scale_vector_sizes_per_kind() -> None:
    r = isa.resolve("tcgen05.mma",
                    ("cta_group::1", "kind::mxf4nvf4", "block_scale", "scale_vec::4X"), 7)
    names = [o.name for o in isa.active_operands(r)]
    assert names[4:] == ["scale_a_tmem", "scale_b_tmem", "enable_input_d"]
    with pytest.raises(PtxVersionError, match=r"needs PTX ISA 8\.7"):
        check_target(r, "sm_100a", (8, 6))
    with pytest.raises(PtxTargetError, match=r"\.scale_vec::4X\) needs sm_100a"):
        check_target(r, "sm_100f", (8, 8))
    with pytest.raises(PtxModifierError,
                       match=r"\.kind::mxf4 needs \.scale_vec::2X or \.block32, "
                             r"got \.scale_vec::1X"):
        isa.resolve("tcgen05.mma", ("cta_group::1", "kind::mxf4", "block_scale", "scale_vec::1X"))


def test_mma_block_scale_default_vector_size_needs_ptx_88() -> None:
    r = isa.resolve("tcgen05.mma", ("cta_group::2", "kind::mxf8f6f4", "block_scale"), 7)
    assert "scale" not in r.values
    with pytest.raises(PtxVersionError, match=r"needs PTX ISA 8\.8"):
        check_target(r, "sm_100a", (8, 7))
    with pytest.raises(PtxModifierError, match=r"missing its scale modifier"):
        isa.resolve("tcgen05.mma", ("cta_group::2", "kind::mxf4nvf4", "block_scale"))


def test_sparse_mma_takes_a_metadata_address() -> None:
    r = isa.resolve("tcgen05.mma.sp", ("cta_group::1", "kind::f16"), 6)
    assert [o.name for o in isa.active_operands(r)] == [
        "d_tmem", "a", "b_desc", "sp_meta_tmem", "idesc", "enable_input_d"]
    sp4 = isa.resolve("tcgen05.mma.sp", ("cta_group::1", "kind::mxf4", "block_scale", "block32"), 8)
    with pytest.raises(PtxTargetError, match=r"kernel targets sm_103f"):
        check_target(sp4, "sm_103f", (8, 8))


def test_warp_specialised_mma_is_single_cta_with_b_collectors() -> None:
    r = isa.resolve("tcgen05.mma.ws", ("cta_group::1", "kind::tf32", "collector::b2::lastuse"), 6)
    assert isa.arity(r) == (5, 6)
    assert _operand(r, "zero_column_mask_desc").optional
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.cta_group::2"):
        isa.resolve("tcgen05.mma.ws", ("cta_group::2", "kind::f16"))
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.collector::a::fill"):
        isa.resolve("tcgen05.mma.ws.sp", ("cta_group::1", "kind::f16", "collector::a::fill"))


def test_alloc_dealloc_relinquish() -> None:
    r = isa.resolve("tcgen05.alloc", ("cta_group::2", "sync", "aligned", "shared::cta", "b32"), 2)
    assert [o.kinds for o in isa.active_operands(r)] == [("mem",), ("reg", "imm")]
    d = isa.resolve("tcgen05.dealloc", ("cta_group::1", "sync", "aligned", "b32"), 2)
    assert isa.expected_type(_operand(d, "taddr"), d.values).name == "b32"
    assert isa.arity(isa.resolve("tcgen05.relinquish_alloc_permit",
                                 ("cta_group::1", "sync", "aligned"))) == (0, 0)
    with pytest.raises(PtxModifierError, match=r"missing its cta_group modifier"):
        isa.resolve("tcgen05.alloc", ("sync", "aligned", "b32"))


def test_commit_multicast_adds_a_cta_mask() -> None:
    mods = ("cta_group::1", "mbarrier::arrive::one", "shared::cluster")
    assert isa.arity(isa.resolve("tcgen05.commit", (*mods, "b64"))) == (1, 1)
    r = isa.resolve("tcgen05.commit", (*mods, "multicast::cluster", "b64"))
    assert isa.arity(r) == (2, 2)
    assert isa.expected_type(_operand(r, "ctaMask"), r.values).name == "b16"


def test_fence_and_wait_are_single_modifiers() -> None:
    assert isa.resolve("tcgen05", ("fence::before_thread_sync",), 0).inst.sim == "tcgen05_fence"
    assert isa.resolve("tcgen05", ("wait::st", "sync", "aligned"), 0).inst.sim == "tcgen05_wait"
    assert isa.split_name(("tcgen05", "fence::after_thread_sync")) == (
        "tcgen05", ("fence::after_thread_sync",))
    assert isa.split_name(("tcgen05", "mma", "ws", "sp", "cta_group::1")) == (
        "tcgen05.mma.ws.sp", ("cta_group::1",))
    with pytest.raises(PtxModifierError, match=r"did you mean \.fence::after_thread_sync"):
        isa.resolve("tcgen05", ("fence::after_thread_synk",))


def test_cp_shape_decides_the_warp_multicast() -> None:
    r = isa.resolve("tcgen05.cp",
                    ("cta_group::1", "64x128b", "warpx2::01_23", "b8x16", "b4x16_p64"), 2)
    assert isa.expected_type(_operand(r, "s_desc"), r.values).name == "b64"
    with pytest.raises(PtxModifierError,
                       match=r"\.64x128b needs \.warpx2::02_13 or \.warpx2::01_23"):
        isa.resolve("tcgen05.cp", ("cta_group::1", "64x128b"))
    with pytest.raises(PtxModifierError, match=r"\.128x256b cannot be combined with \.warpx4"):
        isa.resolve("tcgen05.cp", ("cta_group::2", "128x256b", "warpx4"))
    with pytest.raises(PtxModifierError, match=r"\.b8x16 needs its src_fmt modifier"):
        isa.resolve("tcgen05.cp", ("cta_group::2", "4x256b", "b8x16"))


def test_shift_is_arch_specific_only() -> None:
    r = isa.resolve("tcgen05.shift", ("cta_group::2", "down"), 1)
    check_target(r, "sm_103a", (8, 8))
    with pytest.raises(PtxTargetError, match=r"kernel targets sm_100f"):
        check_target(r, "sm_100f", (8, 8))

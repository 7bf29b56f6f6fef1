"""Resolution of the logic, comparison, conversion and transcendental forms
(``_logic``, ``_convert`` and ``_approx`` families) against the table."""

from __future__ import annotations

import pytest

from jaxptx import isa

from isa_helpers import check_target, operand_types
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError
from jaxptx.types import TYPES


# --- logic and bits ---------------------------------------------------------

def test_and_pred_takes_negatable_predicates() -> None:
    r = isa.resolve("and", ("pred",), 3)
    d, a, b = isa.active_operands(r)
    assert d.kinds == ("pred",) and d.out
    assert a.neg and b.neg


def test_bit_counts_write_u32() -> None:
    for opcode in ("popc", "clz"):
        assert operand_types(isa.resolve(opcode, ("b64",), 2)) == ["u32", "b64"]
    r = isa.resolve("bfind", ("shiftamt", "s64"), 2)
    assert r.values == {"shiftamt": "shiftamt", "type": "s64"}
    assert operand_types(r) == ["u32", "s64"]


def test_shift_amount_is_u32() -> None:
    assert operand_types(isa.resolve("shr", ("s64",), 3)) == ["s64", "s64", "u32"]
    with pytest.raises(PtxModifierError, match=r"shl\.u32: unknown modifier \.u32"):
        isa.resolve("shl", ("u32",), 3)


def test_lop3_predicate_form_has_six_operands() -> None:
    plain = isa.resolve("lop3", ("b32",), 5)
    assert isa.arity(plain) == (5, 5)
    r = isa.resolve("lop3", ("or", "b32"), 6)
    assert isa.arity(r) == (6, 6)
    assert isa.active_operands(r)[0].kinds == ("pair",)
    assert r.inst.requires.ptx == (8, 2)
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.xor"):
        isa.resolve("lop3", ("xor", "b32"), 6)


def test_prmt_mode_follows_type() -> None:
    assert isa.resolve("prmt", ("b32", "rc16"), 4).values["mode"] == "rc16"
    # ptxas 13 accepts prmt.rc16.b32: modifiers may come in any order.
    assert isa.resolve("prmt", ("rc16", "b32"), 4).values == {"mode": "rc16", "type": "b32"}
    with pytest.raises(PtxModifierError, match=r"\.b32 is repeated or out of order"):
        isa.resolve("prmt", ("b32", "b32"), 4)


def test_cnot_has_no_predicate_form() -> None:
    with pytest.raises(PtxModifierError, match=r"cnot takes \.b16 \.b32 \.b64"):
        isa.resolve("cnot", ("pred",), 2)


# --- comparison and selection -----------------------------------------------

def test_setp_boolop_adds_predicate_operand() -> None:
    r = isa.resolve("setp", ("lt", "s32"), 3)
    assert isa.arity(r) == (3, 3)
    r = isa.resolve("setp", ("lt", "and", "s32"), 4)
    assert isa.arity(r) == (4, 4)
    p, a, b, c = isa.active_operands(r)
    assert set(p.kinds) == {"pred", "pair"} and c.neg
    assert operand_types(r)[1:3] == ["s32", "s32"]


def test_setp_unsigned_and_bit_comparisons() -> None:
    assert isa.resolve("setp", ("hs", "u64"), 3).values["cmp"] == "hs"
    with pytest.raises(PtxModifierError, match=r"\.lo needs \.u16 or \.u32 or \.u64, got \.s32"):
        isa.resolve("setp", ("lo", "s32"), 3)
    with pytest.raises(PtxModifierError, match=r"\.b32 needs \.eq or \.ne, got \.lt"):
        isa.resolve("setp", ("lt", "b32"), 3)


def test_setp_float_forms() -> None:
    r = isa.resolve("setp", ("nan", "ftz", "f32"), 3)
    assert r.values["ftz"] == "ftz"
    with pytest.raises(PtxModifierError, match=r"setp\.lt\.ftz\.f64"):
        isa.resolve("setp", ("lt", "ftz", "f64"), 3)
    x2 = isa.resolve("setp", ("ltu", "f16x2"), 3)
    assert isa.active_operands(x2)[0].kinds == ("pair",)
    bf = isa.resolve("setp", ("lt", "bf16"), 3)
    with pytest.raises(PtxTargetError, match=r"needs sm_90 or newer, kernel targets sm_80"):
        check_target(bf, "sm_80", (8, 5))


def test_set_destination_types() -> None:
    r = isa.resolve("set", ("lt", "u32", "f16"), 3)
    assert operand_types(r) == ["u32", "f16", "f16"]
    with pytest.raises(PtxModifierError, match=r"\.ftz needs .*got \.bf16"):
        isa.resolve("set", ("lt", "ftz", "bf16", "f32"), 3)


def test_selp_and_slct() -> None:
    r = isa.resolve("selp", ("f64",), 4)
    assert operand_types(r) == ["f64", "f64", "f64", None]
    assert isa.active_operands(r)[3].neg
    r = isa.resolve("slct", ("ftz", "u16", "f32"), 4)
    assert operand_types(r) == ["u16", "u16", "u16", "f32"]


# --- mov / cvt / cvta -------------------------------------------------------

def test_mov_symbol_address_only_for_integer_words() -> None:
    for t in ("u64", "u32"):  # u32: a .shared variable's address in the shared window
        assert "sym" in isa.active_operands(isa.resolve("mov", (t,), 2))[1].kinds
    for t in ("f32", "u16"):
        assert "sym" not in isa.active_operands(isa.resolve("mov", (t,), 2))[1].kinds


def test_mov_pack_forms_have_two_halves() -> None:
    packs = {(i.slots[0].values[0], i.operands[1].kinds[0] == "vec"): i
             for i in isa.BY_OPCODE["mov"] if "vec" in i.operands[0].kinds + i.operands[1].kinds}
    pack64 = packs[("b64", True)]
    vec = pack64.operands[1]
    assert isa.vector_count(vec, {"type": "b64"}) == 2
    assert isa.expected_type(vec, {"type": "b64"}) == TYPES["b32"]
    unpack128 = packs[("b128", False)]
    assert unpack128.operands[0].out and unpack128.requires.ptx == (8, 3)


def test_cvt_integer_widen_and_saturation() -> None:
    r = isa.resolve("cvt", ("u8", "u32"), 2)
    d = isa.active_operands(r)[0]
    assert d.widen and isa.compatible(TYPES["u8"], TYPES["u16"], d.widen)
    assert isa.resolve("cvt", ("sat", "s8", "s32"), 2).values["sat"] == "sat"
    with pytest.raises(PtxModifierError,
                       match=r"\.u16 needs \.u32 or \.u64 or \.s8 or \.s16 or \.s32 "
                             r"or \.s64, got \.u8"):
        isa.resolve("cvt", ("sat", "u16", "u8"), 2)


def test_cvt_rounding_by_type_pair() -> None:
    r = isa.resolve("cvt", ("rzi", "ftz", "s32", "f32"), 2)
    assert operand_types(r) == ["s32", "f32"]
    with pytest.raises(PtxModifierError, match=r"\.ftz needs \.f32, got \.f64"):
        isa.resolve("cvt", ("rni", "ftz", "s32", "f64"), 2)
    assert isa.resolve("cvt", ("rn", "f32", "s32"), 2).values["frnd"] == "rn"
    assert isa.resolve("cvt", ("f32", "f16"), 2).inst.summary == "convert f16 to f32"


def test_cvt_packed_half_and_fp8() -> None:
    r = isa.resolve("cvt", ("rn", "relu", "f16x2", "f32"), 3)
    assert operand_types(r) == ["f16x2", "f32", "f32"]
    r = isa.resolve("cvt", ("rn", "satfinite", "relu", "e4m3x2", "f32"), 3)
    assert operand_types(r) == ["e4m3x2", "f32", "f32"]
    check_target(r, "sm_89", (8, 1))
    check_target(r, "sm_90", (7, 8))   # ptxas takes 7.8 on sm_90 (8.1 only on sm_89)
    with pytest.raises(PtxVersionError, match=r"needs PTX ISA 7\.8"):
        check_target(r, "sm_89", (7, 7))
    with pytest.raises(PtxModifierError, match=r"missing its satfinite modifier"):
        isa.resolve("cvt", ("rn", "relu", "e4m3x2", "f32"), 3)


def test_cvt_tf32_satfinite_needs_sm100_except_rna() -> None:
    check_target(isa.resolve("cvt", ("rna", "satfinite", "tf32", "f32"), 2), "sm_80", (8, 1))
    r = isa.resolve("cvt", ("rn", "satfinite", "tf32", "f32"), 2)
    with pytest.raises(PtxTargetError, match=r"needs sm_100 or newer"):
        check_target(r, "sm_90", (8, 6))


def test_cvt_stochastic_rounding_vector_source() -> None:
    r = isa.resolve("cvt", ("rs", "relu", "satfinite", "e4m3x4", "f32"), 3)
    d, a, rbits = isa.active_operands(r)
    assert isa.vector_count(a, r.values) == 4
    assert isa.expected_type(d, r.values) == TYPES["b32"]
    with pytest.raises(PtxTargetError, match=r"sm_100a or sm_103a"):
        check_target(r, "sm_120a", (8, 7))


def test_cvta_spaces() -> None:
    r = isa.resolve("cvta", ("to", "shared::cluster", "u64"), 2)
    with pytest.raises(PtxTargetError, match=r"needs sm_90 or newer"):
        check_target(r, "sm_80", (8, 5))
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.u32"):
        isa.resolve("cvta", ("global", "u32"), 2)


# --- transcendentals (_approx) ----------------------------------------------

def test_approx_and_ieee_forms() -> None:
    assert isa.resolve("sqrt", ("rn", "f64"), 2).values == {"rnd": "rn", "type": "f64"}
    assert isa.resolve("rsqrt", ("approx", "ftz", "f64"), 2).values["ftz"] == "ftz"
    with pytest.raises(PtxModifierError, match=r"rcp\.approx\.f64: missing its ftz modifier"):
        isa.resolve("rcp", ("approx", "f64"), 2)
    with pytest.raises(PtxModifierError, match=r"missing its approx modifier"):
        isa.resolve("ex2", ("f32",), 2)


def test_half_transcendentals() -> None:
    r = isa.resolve("tanh", ("approx", "f16x2"), 2)
    assert r.inst.requires == isa.Requires(sm=75, ptx=(7, 0))
    with pytest.raises(PtxModifierError, match=r"tanh\.approx\.ftz\.f32: unknown modifier \.ftz"):
        isa.resolve("tanh", ("approx", "ftz", "f32"), 2)
    with pytest.raises(PtxModifierError, match=r"ex2\.approx\.bf16: missing its ftz modifier"):
        isa.resolve("ex2", ("approx", "bf16"), 2)

"""Resolution of the Ampere-era forms: cp.async, ldmatrix/stmatrix, mma."""

from __future__ import annotations

import pytest

from jaxptx import isa

from isa_helpers import operands, resolve_name
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError
from jaxptx.runtime import ptxas


def _shape(r: isa.Resolved) -> dict[str, tuple[str | None, int | None]]:
    """operand name → (expected type name, vector length)."""
    out = {}
    for name, o in operands(r).items():
        t = isa.expected_type(o, r.values)
        out[name] = (t.name if t else None, isa.vector_count(o, r.values))
    return out


# --- cp.async ----------------------------------------------------------------

def test_cp_async_opcodes_split_longest_first() -> None:
    assert isa.split_name(("cp", "async", "cg", "shared", "global")) == (
        "cp.async", ("cg", "shared", "global"))
    assert isa.split_name(("cp", "async", "wait_group")) == ("cp.async.wait_group", ())
    assert isa.split_name(("cp", "async", "mbarrier", "arrive", "noinc", "b64"))[0] == \
        "cp.async.mbarrier.arrive"


def test_cp_async_cache_policy_follows_the_hint() -> None:
    plain = resolve_name("cp.async.cg.shared.global", 3)
    assert [o.name for o in isa.active_operands(plain)] == ["dst", "src", "cp_size"]
    hinted = resolve_name("cp.async.cg.shared.global.L2::cache_hint.L2::128B", 4)
    assert [o.name for o in isa.active_operands(hinted)] == ["dst", "src", "cp_size",
                                                             "cache_policy"]
    sized = resolve_name("cp.async.cg.shared.global.L2::cache_hint", 5)
    assert [o.name for o in isa.active_operands(sized)] == ["dst", "src", "cp_size", "src_size",
                                                            "cache_policy"]
    # src-size or, as a predicate, ignore-src.
    assert set(operands(sized)["src_size"].kinds) == {"reg", "imm", "pred"}


def test_cp_async_requirements() -> None:
    r = resolve_name("cp.async.ca.shared.global", 3)
    with pytest.raises(PtxTargetError, match="sm_80"):
        r.inst.requires.check("cp.async", isa.parse_target("sm_75"), (8, 0))
    hint = r.inst.slot("hint").requirement("L2::cache_hint")
    with pytest.raises(PtxVersionError, match=r"7\.4"):
        hint.check("cp.async.L2::cache_hint", isa.parse_target("sm_80"), (7, 0))


def test_cp_async_bad_prefetch_size() -> None:
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.L2::512B.*did you mean"):
        resolve_name("cp.async.ca.shared.global.L2::512B")


# --- ldmatrix / stmatrix -------------------------------------------------------

@pytest.mark.parametrize("num, n", [("x1", 1), ("x2", 2), ("x4", 4)])
def test_ldmatrix_fragment_length(num: str, n: int) -> None:
    r = resolve_name(f"ldmatrix.sync.aligned.m8n8.{num}.trans.shared.b16")
    assert _shape(r)["d"] == ("b32", n)
    s = resolve_name(f"stmatrix.sync.aligned.m8n8.{num}.shared::cta.b16")
    assert _shape(s)["r"] == ("b32", n)


def test_ldmatrix_m16n16_takes_two_registers_per_matrix() -> None:
    r = resolve_name("ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8")
    assert _shape(r)["d"] == ("b32", 4)
    with pytest.raises(PtxTargetError, match="sm_100a"):
        r.inst.requires.check("ldmatrix.m16n16", isa.parse_target("sm_90a"), (8, 6))


def test_ldmatrix_bad_modifiers() -> None:
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.x3"):
        resolve_name("ldmatrix.sync.aligned.m8n8.x3.b16")
    with pytest.raises(PtxModifierError, match="missing its trans modifier"):
        resolve_name("ldmatrix.sync.aligned.m16n16.x1.b8")


# --- mma -----------------------------------------------------------------------

@pytest.mark.parametrize("name, want", [
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
     {"d": ("f32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("f32", 4)}),
    ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
     {"d": ("f16x2", 2), "a": ("b32", 4), "b": ("b32", 2), "c": ("f16x2", 2)}),
    ("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32",
     {"d": ("f32", 4), "a": ("b32", 2), "b": ("b32", 1), "c": ("f32", 4)}),
    ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
     {"d": ("f32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("f32", 4)}),
    ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32",
     {"d": ("f32", 4), "a": ("b32", 2), "b": ("b32", 1), "c": ("f32", 4)}),
    ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32",
     {"d": ("s32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("s32", 4)}),
    ("mma.sync.aligned.m8n8k16.row.col.s32.u8.u8.s32",
     {"d": ("s32", 2), "a": ("b32", 1), "b": ("b32", 1), "c": ("s32", 2)}),
    ("mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32",
     {"d": ("s32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("s32", 4)}),
    ("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc",
     {"d": ("s32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("s32", 4)}),
    ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32",
     {"d": ("f32", 4), "a": ("b32", 4), "b": ("b32", 2), "c": ("f32", 4)}),
    ("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64",
     {"d": ("f64", 4), "a": ("f64", 8), "b": ("f64", 4), "c": ("f64", 4)}),
    ("mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f16",
     {"d": ("f32", 8), "a": ("b32", 2), "b": ("b32", 2), "c": ("f16x2", 4)}),
])
def test_mma_fragments(name: str, want: dict) -> None:
    assert _shape(resolve_name(name, 4)) == want


def test_mma_shape_requirements() -> None:
    r = resolve_name("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32")
    req = r.inst.slot("shape").requirement("m16n8k16")
    with pytest.raises(PtxVersionError, match=r"8\.7"):
        req.check("mma.m16n8k16.e4m3", isa.parse_target("sm_89"), (8, 4))
    f16 = resolve_name("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    with pytest.raises(PtxTargetError, match="sm_80"):
        f16.inst.slot("shape").requirement("m16n8k16").check(
            "mma.m16n8k16", isa.parse_target("sm_75"), (7, 0))


def test_mma_bad_modifiers() -> None:
    # D and C must agree for the m16n8 shapes.
    with pytest.raises(PtxModifierError, match=r"^mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f16: "
                                          r"modifier \.f16 is repeated or out of order"):
        resolve_name("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f16")
    with pytest.raises(PtxModifierError, match=r"\.row"):
        resolve_name("mma.sync.aligned.m16n8k16.row.row.f32.f16.f16.f32")
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.m16n8k12"):
        resolve_name("mma.sync.aligned.m16n8k12.row.col.f32.f16.f16.f32")


def test_ignore_src_form_assembles() -> None:
    """The predicate (ignore-src) reading of cp.async's fourth operand, which
    the generated sweep does not produce, assembles."""
    ptxas("\n".join([
        ".version 8.5", ".target sm_80", ".address_size 64",
        ".visible .entry k()", "{", ".reg .b64 %a<3>;", ".reg .pred %p;",
        "setp.eq.u64 %p, %a1, 0;",
        "cp.async.cg.shared.global [%a1], [%a2], 16, !%p;",
        "cp.async.commit_group;", "cp.async.wait_group 0;", "ret;", "}", ""]), "sm_80")

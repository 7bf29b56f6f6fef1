"""Resolution of the Hopper forms: wgmma, mbarrier, clusters, bulk/tensor copies."""

from __future__ import annotations

import pytest

from jaxptx import isa

from isa_helpers import operand_count, operand_type, operands, resolve_name
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError
from jaxptx.runtime import ptxas

WGMMA = "wgmma.mma_async.sync.aligned"


# --- wgmma ---------------------------------------------------------------------

@pytest.mark.parametrize("mods, n_ops, d_type, d_len", [
    ("m64n128k16.f32.bf16.bf16", 8, "f32", 64),
    ("m64n256k16.f16.f16.f16", 8, "f16x2", 64),
    ("m64n8k8.f32.tf32.tf32", 6, "f32", 4),
    ("m64n64k32.f16.e4m3.e5m2", 6, "f16x2", 16),
    ("m64n256k32.satfinite.s32.s8.s8", 4, "s32", 128),
    ("m64n24k256.s32.b1.b1.and.popc", 4, "s32", 12),
])
def test_wgmma_accumulator_length(mods: str, n_ops: int, d_type: str, d_len: int) -> None:
    r = resolve_name(f"{WGMMA}.{mods}", n_ops)
    assert (operand_type(r, "d"), operand_count(r, "d")) == (d_type, d_len)
    assert operand_type(r, "b_desc") == "u64"


def test_wgmma_a_from_descriptor_or_registers() -> None:
    desc = resolve_name(f"{WGMMA}.m64n64k16.f32.f16.f16", 8)
    assert [o.name for o in isa.active_operands(desc)] == [
        "d", "a_desc", "b_desc", "scale_d", "imm_scale_a", "imm_scale_b", "imm_trans_a",
        "imm_trans_b"]
    regs = resolve_name(f"{WGMMA}.m64n64k16.f32.f16.f16", 7)
    assert operands(regs)["a"].kinds == ("vec",)
    assert (operand_type(regs, "a"), operand_count(regs, "a")) == ("b32", 4)
    # Same operand count either way: one operand takes both.
    tf32 = resolve_name(f"{WGMMA}.m64n64k8.f32.tf32.tf32", 6)
    assert set(operands(tf32)["a"].kinds) == {"reg", "vec"}


def test_wgmma_targets() -> None:
    r = resolve_name(f"{WGMMA}.m64n64k16.f32.f16.f16", 8)
    with pytest.raises(PtxTargetError, match="sm_90a"):
        r.inst.requires.check("wgmma.mma_async", isa.parse_target("sm_90"), (8, 0))
    with pytest.raises(PtxTargetError, match="sm_90a"):
        r.inst.requires.check("wgmma.mma_async", isa.parse_target("sm_100a"), (8, 6))
    # Mixed-signedness integer inputs need PTX 8.4.
    mixed = resolve_name(f"{WGMMA}.m64n64k32.s32.s8.u8", 4)
    with pytest.raises(PtxVersionError, match=r"8\.4"):
        mixed.inst.requires.check("wgmma.mma_async", isa.parse_target("sm_90a"), (8, 0))
    same = resolve_name(f"{WGMMA}.m64n64k32.s32.u8.u8", 4)
    same.inst.requires.check("wgmma.mma_async", isa.parse_target("sm_90a"), (8, 0))


def test_wgmma_bad_modifiers() -> None:
    # integer N jumps from 32 to 48: n40 is an fp8 shape only, whose D is f32
    with pytest.raises(PtxModifierError,
                       match=r"m64n40k32\.s32\.s8\.s8: unknown modifier \.s32 \(did you mean \.f32\?\)"):
        resolve_name(f"{WGMMA}.m64n40k32.s32.s8.s8")
    # bf16 accumulates in f32 only
    with pytest.raises(PtxModifierError,
                       match=r"m64n8k16\.f16\.bf16\.bf16: modifier \.bf16 is repeated or out of order"):
        resolve_name(f"{WGMMA}.m64n8k16.f16.bf16.bf16")
    with pytest.raises(PtxModifierError, match=r"\.f16 needs \.f16, got \.bf16"):
        resolve_name(f"{WGMMA}.m64n8k16.f32.f16.bf16")
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.m64n264k16"):
        resolve_name(f"{WGMMA}.m64n264k16.f32.f16.f16")


def test_wgmma_descriptor_forms_assemble() -> None:
    """The descriptor reading of the shared A operand, which the generated
    sweep does not produce for tf32 / fp8 / integer inputs, assembles."""
    acc = "{" + ", ".join(f"%f{i}" for i in range(4)) + "}"
    iacc = "{" + ", ".join(f"%r{i}" for i in range(4)) + "}"
    ptxas("\n".join([
        ".version 8.5", ".target sm_90a", ".address_size 64", ".visible .entry k()", "{",
        ".reg .f32 %f<4>;", ".reg .b32 %r<4>;", ".reg .b64 %a, %b;", ".reg .pred %p;",
        "mov.b64 %a, 0;", "mov.b64 %b, 0;", "setp.eq.u64 %p, %a, 0;",
        "wgmma.fence.sync.aligned;",
        f"wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {acc}, %a, %b, %p, 1, 1;",
        f"wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {acc}, %a, %b, %p, 1, 1;",
        f"wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {iacc}, %a, %b, %p;",
        f"wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc {iacc}, %a, %b, %p;",
        "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;",
        "ret;", "}", ""]), "sm_90a")


# --- mbarrier --------------------------------------------------------------------

def test_mbarrier_arrive_forms() -> None:
    local = resolve_name("mbarrier.arrive.shared.b64", 2)
    assert operand_type(local, "state") == "b64" and operands(local)["state"].out
    assert local.inst.requires.sm == 80
    counted = resolve_name("mbarrier.arrive.release.cta.shared::cta.b64", 3)
    assert counted.inst.requires.sm == 90  # a count without .noComplete needs sm_90
    remote = resolve_name("mbarrier.arrive.release.cluster.shared::cluster.b64", 2)
    assert operands(remote)["state"].kinds == ("sink",)
    tx = resolve_name("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64", 3)
    assert [o.name for o in isa.active_operands(tx)] == ["state", "addr", "tx_count"]


def test_mbarrier_waits() -> None:
    r = resolve_name("mbarrier.try_wait.parity.acquire.cta.shared::cta.b64", 4)
    assert operand_type(r, "wait_complete") == "pred"
    assert operand_type(r, "phase_parity") == "u32"
    assert isa.arity(r) == (3, 4)  # suspendTimeHint is optional
    t = resolve_name("mbarrier.test_wait.shared.b64")
    assert operand_type(t, "state") == "b64"
    relaxed = t.inst.slot("sem").requirement("relaxed")
    with pytest.raises(PtxVersionError, match=r"8\.6"):
        relaxed.check("mbarrier.test_wait.relaxed", isa.parse_target("sm_90"), (8, 5))


def test_mbarrier_bad_modifiers() -> None:
    with pytest.raises(PtxModifierError, match=r"\.release needs its scope"):
        resolve_name("mbarrier.arrive.release.shared.b64")
    with pytest.raises(PtxModifierError, match=r"\.cta needs its sem"):
        resolve_name("mbarrier.test_wait.cta.shared.b64")
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.cluster"):
        resolve_name("mbarrier.arrive.noComplete.release.cluster.shared.b64")


# --- clusters, registers -----------------------------------------------------------

def test_mapa_and_getctarank_types() -> None:
    r = resolve_name("mapa.shared::cluster.u32")
    assert (operand_type(r, "d"), operand_type(r, "a"), operand_type(r, "b")) == ("u32", "u32", "u32")
    g = resolve_name("getctarank.u64")
    assert (operand_type(g, "d"), operand_type(g, "a")) == ("u32", "u64")


def test_setmaxnreg_is_arch_specific() -> None:
    r = resolve_name("setmaxnreg.inc.sync.aligned.u32")
    with pytest.raises(PtxTargetError, match="sm_90a"):
        r.inst.requires.check("setmaxnreg", isa.parse_target("sm_90"), (8, 0))
    r.inst.requires.check("setmaxnreg", isa.parse_target("sm_100a"), (8, 6))


def test_barrier_cluster() -> None:
    r = resolve_name("barrier.cluster.arrive.release.aligned")
    assert r.values == {"sem": "release", "aligned": "aligned"}
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.acquire"):
        resolve_name("barrier.cluster.arrive.acquire")


# --- bulk and tensor copies ---------------------------------------------------------

def test_bulk_tensor_operands_follow_modifiers() -> None:
    name = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            ".multicast::cluster.L2::cache_hint")
    assert isa.split_name(tuple(name.split(".")))[0] == "cp.async.bulk.tensor"
    r = resolve_name(name)
    assert [o.name for o in isa.active_operands(r)] == [
        "dst", "tensor", "mbar", "cta_mask", "cache_policy"]
    assert operand_type(r, "cta_mask") == "u16"
    im2col = resolve_name("cp.async.bulk.tensor.5d.shared::cluster.global.im2col"
                      ".mbarrier::complete_tx::bytes")
    assert operand_count(im2col, "im2col_offsets") == 3
    store = resolve_name("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group")
    assert [o.name for o in isa.active_operands(store)] == ["tensor", "src"]


def test_bulk_bad_modifiers() -> None:
    with pytest.raises(PtxModifierError, match=r"\.shared::cta cannot be combined"):
        resolve_name("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster")
    with pytest.raises(PtxModifierError, match="im2col_no_offs"):
        resolve_name("cp.async.bulk.tensor.2d.global.shared::cta.im2col_no_offs.bulk_group")
    r = resolve_name("cp.async.bulk.wait_group.read")
    with pytest.raises(PtxTargetError, match="sm_90"):
        r.inst.requires.check("cp.async.bulk.wait_group", isa.parse_target("sm_80"), (8, 0))

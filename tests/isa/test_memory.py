"""Resolution of the memory forms: ld, ld.global.nc, ldu, st, prefetch, atom, red."""

from __future__ import annotations

import pytest

from jaxptx import isa, types

from isa_helpers import operand_count, operand_type, operands, resolve_name
from jaxptx.errors import PtxModifierError, PtxTargetError


def _needs(r: isa.Resolved) -> int:
    """The newest sm the form or any chosen modifier value needs."""
    reqs = [r.inst.requires] + [s.requirement(r.values[s.name]) for s in r.inst.slots
                                if s.name in r.values]
    return max(q.sm for q in reqs if q is not None)


# --- ld / st shapes ----------------------------------------------------------

@pytest.mark.parametrize("name, kind, d_type, d_len, sm", [
    ("ld.global.f32", "reg", "f32", None, 0),
    ("ld.global.v2.f64", "vec", "f64", 2, 0),
    ("ld.shared::cta.v4.b32", "vec", "b32", 4, 0),
    ("ld.global.v4.u64", "vec", "u64", 4, 100),
    ("ld.global.L2::evict_last.v8.f32", "vec", "f32", 8, 100),
    ("ld.global.nc.v4.s16", "vec", "s16", 4, 32),
    ("ld.relaxed.cluster.shared::cluster.b128", "reg", "b128", None, 90),
    ("ldu.global.v2.u8", "vec", "u8", 2, 0),
])
def test_ld_destination_shape(name: str, kind: str, d_type: str, d_len: int | None,
                              sm: int) -> None:
    r = resolve_name(name)
    d = operands(r)["d"]
    assert d.kinds == (kind,) and d.out
    assert (operand_type(r, "d"), operand_count(r, "d")) == (d_type, d_len)
    assert _needs(r) == sm


def test_narrow_loads_and_stores_take_wider_registers() -> None:
    ld = resolve_name("ld.global.u8")
    st = resolve_name("st.shared.s16")
    d = operands(ld)["d"]
    assert d.widen and operands(st)["b"].widen
    assert isa.compatible(isa.expected_type(d, ld.values), types.u32, widen=d.widen)
    assert not isa.compatible(isa.expected_type(d, ld.values), types.u32)


def test_cache_hint_adds_the_policy_operand() -> None:
    plain = resolve_name("ld.global.f32")
    hinted = resolve_name("ld.global.L2::cache_hint.f32")
    assert isa.arity(plain) == (2, 2)
    assert isa.arity(hinted) == (3, 3)
    assert operand_type(hinted, "cache_policy") == "u64"
    st = resolve_name("st.global.L1::no_allocate.L2::cache_hint.v4.b32")
    assert [o.name for o in isa.active_operands(st)] == ["a", "b", "cache_policy"]
    assert operand_count(st, "b") == 4


def test_store_forms() -> None:
    assert resolve_name("st.release.gpu.global.u32").values["sem"] == "release"
    assert resolve_name("st.volatile.shared.f64").values["sem"] == "volatile"
    param = resolve_name("st.param::func.b64")
    assert param.inst.example is not None and param.values["space"] == "param::func"
    assert resolve_name("st.mmio.relaxed.sys.global.u32").inst.requires.ptx == (8, 2)


def test_prefetch_forms() -> None:
    assert resolve_name("prefetch.global.L2").values == {"space": "global", "level": "L2"}
    assert resolve_name("prefetch.global.L2::evict_last").inst.requires.sm == 80
    assert resolve_name("prefetchu.L1").values == {"level": "L1"}


# --- atom / red --------------------------------------------------------------

@pytest.mark.parametrize("name, n_ops, names", [
    ("atom.global.add.u32", None, ["d", "a", "b"]),
    ("atom.acq_rel.gpu.shared::cta.cas.b64", None, ["d", "a", "b", "c"]),
    ("atom.global.exch.L2::cache_hint.b128", None, ["d", "a", "b", "cache_policy"]),
    ("red.release.sys.global.min.s64", None, ["a", "b"]),
    ("red.global.add.noftz.f16x2", None, ["a", "b"]),
])
def test_atomic_operands(name: str, n_ops: int | None, names: list[str]) -> None:
    assert [o.name for o in isa.active_operands(resolve_name(name, n_ops))] == names


def test_vector_atomics() -> None:
    r = resolve_name("atom.global.max.noftz.v8.bf16")
    assert (operand_count(r, "d"), operand_count(r, "b"), operand_type(r, "b")) == (8, 8, "bf16")
    assert r.inst.requires.sm == 90 and r.inst.requires.ptx == (8, 1)
    red = resolve_name("red.global.add.v4.f32")
    assert (operand_count(red, "b"), operand_type(red, "b")) == (4, "f32")


def test_atomic_type_requirements() -> None:
    r = resolve_name("atom.global.add.noftz.bf16x2")
    with pytest.raises(PtxTargetError, match="pass arch='sm_90'"):
        r.inst.slot("type").requirement("bf16x2").check("atom", isa.parse_target("sm_80"), (8, 5))
    cas = resolve_name("atom.global.cas.b128")
    assert cas.inst.slot("type").requirement("b128").sm == 90


# --- rejected spellings ------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("ld.shared.L2::cache_hint.f32", r"\.shared cannot be combined with \.L2::cache_hint"),
    ("ld.global.cg.L1::evict_last.f32", r"\.cg cannot be combined with \.L1::evict_last"),
    ("ld.relaxed.global.f32", r"missing its scope modifier"),
    ("ld.global.v8.u64", r"\.v8 needs \.b32 or \.u32 or \.s32 or \.f32, got \.u64"),
    ("ld.global.lu.nc.f32", r"unknown modifier \.nc; expected one of \.L1::evict_normal"),
    ("ld.volatile.local.f32", r"unknown modifier \.local"),
    ("st.const.f32", r"unknown modifier \.const"),
    ("atom.global.exch.u32", r"\.exch needs \.b32 or \.b64 or \.b128, got \.u32"),
    ("atom.global.inc.u64", r"\.inc needs \.u32, got \.u64"),
    ("red.acquire.global.add.u32", r"unknown modifier \.acquire"),
    ("red.global.cas.b32", r"unknown modifier \.cas"),
])
def test_bad_modifiers(name: str, message: str) -> None:
    with pytest.raises(PtxModifierError, match=message):
        resolve_name(name)

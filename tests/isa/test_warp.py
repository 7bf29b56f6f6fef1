"""Resolution of the warp-level forms (``_warp`` family) against the table."""

from __future__ import annotations

import pytest

from jaxptx import isa

from isa_helpers import operand_types
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError


def test_shfl_sync_operands() -> None:
    r = isa.resolve("shfl.sync", ("bfly", "b32"), 5)
    assert isa.arity(r) == (5, 5)
    d = isa.active_operands(r)[0]
    assert set(d.kinds) == {"reg", "pair"}
    assert operand_types(r) == ["b32", "b32", "u32", "u32", "b32"]
    with pytest.raises(PtxModifierError, match=r"unknown modifier \.b64"):
        isa.resolve("shfl.sync", ("idx", "b64"), 5)


def test_shfl_sync_is_split_from_its_opcode() -> None:
    assert isa.split_name(("shfl", "sync", "down", "b32")) == ("shfl.sync", ("down", "b32"))


def test_vote_sync_predicate_and_ballot() -> None:
    r = isa.resolve("vote.sync", ("any", "pred"), 3)
    d, a, mask = isa.active_operands(r)
    assert d.kinds == ("pred",) and a.neg
    ballot = isa.resolve("vote.sync", ("ballot", "b32"), 3)
    assert operand_types(ballot) == ["b32", None, "b32"]
    with pytest.raises(PtxModifierError,
                       match=r"vote\.sync\.ballot\.pred: unknown modifier \.pred"):
        isa.resolve("vote.sync", ("ballot", "pred"), 3)


def test_redux_sync_integer_ops_and_types() -> None:
    assert operand_types(isa.resolve("redux.sync", ("min", "s32"), 3)) == ["s32", "s32", "b32"]
    assert isa.resolve("redux.sync", ("xor", "b32"), 3).inst.requires.sm == 80
    with pytest.raises(PtxModifierError, match=r"redux\.sync\.and\.u32: unknown modifier \.u32"):
        isa.resolve("redux.sync", ("and", "u32"), 3)
    with pytest.raises(PtxModifierError, match=r"redux\.sync\.add\.f32"):
        isa.resolve("redux.sync", ("add", "f32"), 3)


def test_redux_sync_f32_is_sm100_family_only() -> None:
    r = isa.resolve("redux.sync", ("max", "abs", "NaN", "f32"), 3)
    assert r.values == {"op": "max", "abs": "abs", "nan": "NaN", "type": "f32"}
    r.inst.requires.check("redux.sync", isa.parse_target("sm_100a"), (8, 6))
    with pytest.raises(PtxTargetError, match=r"pass arch='sm_100a'"):
        r.inst.requires.check("redux.sync", isa.parse_target("sm_90a"), (8, 6))
    # ptxas takes modifiers in any order, and so does the table.
    assert isa.resolve("redux.sync", ("min", "NaN", "abs", "f32"), 3).values["abs"] == "abs"
    with pytest.raises(PtxModifierError, match=r"\.abs is repeated or out of order"):
        isa.resolve("redux.sync", ("min", "abs", "abs", "f32"), 3)


def test_match_sync_forms() -> None:
    r = isa.resolve("match.any.sync", ("b64",), 3)
    assert operand_types(r) == ["b32", "b64", "b32"]
    r = isa.resolve("match.all.sync", ("b32",), 3)
    assert "pair" in isa.active_operands(r)[0].kinds
    assert r.inst.requires.sm == 70


def test_activemask_and_elect() -> None:
    assert isa.arity(isa.resolve("activemask", ("b32",), 1)) == (1, 1)
    r = isa.resolve("elect.sync", (), 2)
    assert isa.active_operands(r)[0].kinds == ("pair",)
    with pytest.raises(PtxVersionError, match=r"needs PTX ISA 8\.0, kernel declares 7\.8"):
        r.inst.requires.check("elect.sync", isa.parse_target("sm_90"), (7, 8))
    with pytest.raises(PtxModifierError, match=r"elect\.sync\.b32: unknown modifier \.b32"):
        isa.resolve("elect.sync", ("b32",), 2)

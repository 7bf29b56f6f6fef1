"""Resolution of the control forms: branches, barriers, fences, misc."""

from __future__ import annotations

import pytest

from jaxptx import isa

from isa_helpers import resolve_name
from jaxptx.errors import PtxModifierError, PtxTargetError, PtxVersionError


def _names(r: isa.Resolved) -> list[str]:
    return [o.name for o in isa.active_operands(r)]


def test_branches() -> None:
    bra = resolve_name("bra.uni")
    assert bra.values == {"uni": "uni"} and bra.inst.operands[0].kinds == ("sym",)
    assert resolve_name("brx.idx", 2).inst.opcode == "brx.idx"
    assert isa.arity(resolve_name("ret")) == (0, 0)
    assert resolve_name("exit").inst.predicable


@pytest.mark.parametrize("name, n_ops, names", [
    ("bar.sync", 1, ["a", "b"]),
    ("bar.cta.arrive", 2, ["a", "b"]),
    ("bar.red.popc.u32", 3, ["d", "a", "c"]),
    ("bar.red.popc.u32", 4, ["d", "a", "b", "c"]),
    ("barrier.cta.red.or.aligned.pred", 3, ["p", "a", "c"]),
    ("barrier.sync.aligned", 2, ["a", "b"]),
])
def test_barrier_operands(name: str, n_ops: int, names: list[str]) -> None:
    r = resolve_name(name, n_ops)
    assert _names(r) == names
    lo, hi = isa.arity(r)
    assert lo <= n_ops <= hi


def test_barrier_operand_kinds() -> None:
    r = resolve_name("bar.red.and.pred", 4)
    ops = {o.name: o for o in isa.active_operands(r)}
    assert ops["p"].kinds == ("pred",) and ops["p"].out
    assert ops["c"].neg and ops["a"].kinds == ("reg", "imm")
    assert isa.expected_type(ops["b"], r.values).name == "u32"
    with pytest.raises(PtxVersionError, match=r"pass version=\(7, 8\)"):
        resolve_name("bar.cta.sync").inst.slot("cta").requirement("cta").check(
            "bar.cta", isa.parse_target("sm_80"), (7, 0))


def test_longest_opcode_wins() -> None:
    assert isa.split_name(("bar", "warp", "sync")) == ("bar.warp.sync", ())
    assert isa.split_name(("fence", "proxy", "async", "shared::cta")) == (
        "fence.proxy", ("async", "shared::cta"))
    assert isa.split_name(("membar", "proxy", "alias")) == ("membar.proxy", ("alias",))
    assert isa.split_name(("fence", "sc", "gpu")) == ("fence", ("sc", "gpu"))


def test_fence_forms_and_requirements() -> None:
    assert resolve_name("fence.sc.cluster").inst.slot("scope").requirement("cluster").sm == 90
    assert resolve_name("fence.acq_rel.gpu").inst.requires.sm == 70
    init = resolve_name("fence.mbarrier_init.release.cluster")
    assert init.values["op_restrict"] == "mbarrier_init" and init.inst.requires.ptx == (8, 0)
    acq = resolve_name("fence.proxy.tensormap::generic.acquire.gpu", 2)
    assert _names(acq) == ["addr", "size"] and acq.inst.operands[1].example == "128"
    restricted = resolve_name("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster")
    assert restricted.inst.requires.ptx == (8, 6)
    r = resolve_name("fence.proxy.async.global")
    with pytest.raises(PtxTargetError, match="pass arch='sm_90'"):
        r.inst.slot("kind").requirement("async").check("fence.proxy.async",
                                                       isa.parse_target("sm_80"), (8, 5))


def test_misc() -> None:
    assert resolve_name("griddepcontrol.launch_dependents").inst.requires.sm == 90
    sleep = resolve_name("nanosleep.u32")
    assert sleep.inst.operands[0].kinds == ("reg", "imm") and sleep.inst.requires.sm == 70
    assert resolve_name("pmevent.mask").values == {"mask": "mask"}
    assert isa.arity(resolve_name("trap")) == (0, 0)


@pytest.mark.parametrize("name, message", [
    ("bar.sync.aligned", r"unknown modifier \.aligned"),
    ("barrier.red.popc.u64", r"unknown modifier \.u64"),
    ("membar.gpu", r"unknown modifier \.gpu"),
    ("fence.release.sync_restrict::shared::cluster.cluster",
     r"\.release needs \.sync_restrict::shared::cta, got \.sync_restrict::shared::cluster"),
    ("fence.proxy.alias.global", r"\.global needs \.async, got \.alias"),
    ("fence.acquire.sync_restrict::shared::cluster.gpu", r"unknown modifier \.gpu"),
    ("griddepcontrol", r"missing its action modifier"),
    ("exit.uni", r"unknown modifier \.uni"),
])
def test_bad_modifiers(name: str, message: str) -> None:
    with pytest.raises(PtxModifierError, match=message):
        resolve_name(name)

"""Generated docs, target parsing and default PTX versions."""

from __future__ import annotations

import pytest

from jaxptx import isa
from jaxptx.errors import PtxTargetError, PtxVersionError


@pytest.mark.parametrize("opcode", sorted(isa.BY_OPCODE))
def test_every_opcode_is_documented(opcode: str) -> None:
    text = isa.describe(opcode)
    for inst in isa.BY_OPCODE[opcode]:
        assert inst.form in text
        assert inst.section, f"{inst.form} has no ISA section"
        assert inst.summary, f"{inst.form} has no summary"


def test_every_entry_names_its_emulator_function() -> None:
    missing = [i.form for i in isa.INSTRUCTIONS if not i.sim]
    assert not missing, missing


def test_unknown_opcode_doc() -> None:
    with pytest.raises(KeyError, match=r"no instruction 'frob' in the table"):
        isa.describe("frob")


@pytest.mark.parametrize("name, sm, suffix, min_ptx, default", [
    ("sm_80", 80, "", (7, 0), (8, 5)),
    ("sm_90a", 90, "a", (8, 0), (8, 5)),
    ("sm_100a", 100, "a", (8, 6), (8, 6)),
    ("sm_100f", 100, "f", (8, 8), (8, 8)),
    ("sm_120a", 120, "a", (8, 7), (8, 7)),
    ("sm_110a", 110, "a", (9, 0), (9, 0)),
])
def test_targets(name, sm, suffix, min_ptx, default) -> None:
    t = isa.parse_target(name)
    assert (t.sm, t.suffix, t.name, t.min_ptx) == (sm, suffix, name, min_ptx)
    assert isa.default_version(t) == default <= isa.NEWEST_PTX


@pytest.mark.parametrize("bad, message", [
    ("sm90", r"arch: expected a target like 'sm_80'"),
    ("sm_90b", r"arch: expected a target like"),
    ("sm_99", r"arch: unknown target 'sm_99'; known targets: sm_10, sm_11"),
    (90, r"arch: expected a target like 'sm_80', 'sm_90a' or 'sm_100a', got 90"),
])
def test_bad_targets(bad, message) -> None:
    with pytest.raises(PtxTargetError, match=message):
        isa.parse_target(bad)


@pytest.mark.parametrize("given, parsed", [("8.5", (8, 5)), ((9, 0), (9, 0)), (None, None)])
def test_versions(given, parsed) -> None:
    assert isa.parse_version(given) == parsed


@pytest.mark.parametrize("bad", ["8", "8.x", (8,), (8, "5"), 8.5])
def test_bad_versions(bad) -> None:
    with pytest.raises(PtxVersionError, match=r"version: expected a PTX ISA version like \(8, 5\) or '8.5'"):
        isa.parse_version(bad)


def test_name_mapping_round_trips() -> None:
    for part in ("global", "async", "shared::cta", "2d", "32x32b", "mbarrier::complete_tx::bytes",
                 "and", "not", "L2::cache_hint", "expect_tx", "x4"):
        assert isa.to_ptx(isa.to_python(part)) == part
    assert isa.to_python("shared::cluster") == "shared__cluster"
    assert isa.to_python("16x256b") == "_16x256b"
    assert isa.to_python("global") == "global_"

"""The clusterlaunchcontrol family: the table against ptxas.

The table sweep assembles one example per modifier value; here every target
the multicast form names is assembled, the targets it leaves out are refused
by both ptxas and the validator, and malformed lines get the validator's
message and ptxas's refusal alike.
"""

from __future__ import annotations

import pytest

from jaxptx import check, isa
from jaxptx.errors import PtxasError
from jaxptx.isa._clc import MULTICAST_TARGETS
from jaxptx.runtime import ptxas as run_ptxas

_TRY = "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes"


def _module(target: str, line: str) -> str:
    version = max(isa.parse_target(target).min_ptx, (8, 6))
    return (f".version {version[0]}.{version[1]}\n.target {target}\n.address_size 64\n"
            ".visible .entry k()\n{\n"
            "    .reg .b32 %r<4>;\n    .reg .b64 %rd<2>;\n    .reg .pred %p<2>;\n    .reg .b128 %q<2>;\n"
            "    .shared .align 16 .b8 resp[16];\n    .shared .align 8 .b64 bar;\n"
            f"    {line}\n    ret;\n}}\n")


@pytest.mark.parametrize("target", MULTICAST_TARGETS)
def test_multicast_assembles_on_the_targets_the_table_names(target: str) -> None:
    text = _module(target, f"{_TRY}.multicast::cluster::all.b128 [resp], [bar];")
    run_ptxas(text, target)
    assert check(text, target) == []


@pytest.mark.parametrize("target", ["sm_100", "sm_103", "sm_110", "sm_120"])
def test_multicast_is_refused_elsewhere_by_both(target: str) -> None:
    text = _module(target, f"{_TRY}.multicast::cluster::all.b128 [resp], [bar];")
    with pytest.raises(PtxasError, match=r"multicast::cluster::all' not supported on \.target"):
        run_ptxas(text, target)
    (d,) = check(text, target)
    assert "(.multicast::cluster::all) needs sm_100a or" in d.message and f"targets {target};" in d.message
    plain = _module(target, f"{_TRY}.b128 [resp], [bar];")
    run_ptxas(plain, target)
    assert check(plain, target) == []


@pytest.mark.parametrize("line, message", [
    ("clusterlaunchcontrol.query_cancel.get_first_ctaid.b32.b128 %r1, %q1;",
     "missing its vec modifier (one of .v4)"),
    ("clusterlaunchcontrol.query_cancel.get_first_ctaid::x.pred.b128 %p1, %q1;",
     "unknown modifier .pred; expected one of .b32 .b128"),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %r1, %q1;",
     "operand pred: expected predicate, got %r1 (.b32)"),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p1, %rd1;",
     "operand try_cancel_response: expected .b128 register, got %rd1 (.b64)"),
    ("clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%r1, %r2, %r3}, %q1;",
     "operand d: expected a vector of 4 elements, got 3"),
    ("clusterlaunchcontrol.try_cancel.async.shared::cluster.mbarrier::complete_tx::bytes.b128 [resp], [bar];",
     "unknown modifier .shared::cluster (did you mean .shared::cta?)"),
    (f"{_TRY} [resp], [bar];", "missing its type modifier (one of .b128)"),
    ("clusterlaunchcontrol.try_cancel.shared::cta.mbarrier::complete_tx::bytes.b128 [resp], [bar];",
     "missing its async modifier (one of .async)"),
    (f"{_TRY}.b128 %rd1, [bar];", "operand addr: expected [address], got %rd1 (.b64)"),
])
def test_malformed_lines_are_refused_by_both(line: str, message: str) -> None:
    text = _module("sm_100a", line)
    with pytest.raises(PtxasError, match=r"^ptxas: line 12: "):
        run_ptxas(text, "sm_100a")
    (d,) = check(text, "sm_100a")
    assert message in d.message and d.line == 12


def test_the_sink_fills_the_fourth_element_of_the_v4_form() -> None:
    text = _module("sm_100a", "clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 "
                              "{%r1, %r2, %r3, _}, %q1;")
    run_ptxas(text, "sm_100a")
    assert check(text, "sm_100a") == []

"""Issue 30, the emulator's cases: ``JAXPTX_SIM_CHECK`` with a value it does
not know is an error naming the variable, the value and the accepted
values (it used to turn checking on); the precheck refuses what ptxas
refuses (its checks are jaxptx.check's), with the PTX line."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx.sim as sim
from jaxptx.sim import PrecheckError, SimError

ACCEPTED = r"'0', 'false', '1', 'true', 'strict', 'all'"


@pytest.mark.parametrize("value", ["garbage", "yes", "2", "on"])
def test_an_unknown_sim_check_value_is_an_error(monkeypatch, value) -> None:
    monkeypatch.setenv("JAXPTX_SIM_CHECK", value)
    with pytest.raises(SimError, match=rf"^JAXPTX_SIM_CHECK='{value}': expected one of {ACCEPTED} "
                                       r"\(or unset/empty for no checking\); unset it or set "
                                       r"JAXPTX_SIM_CHECK=1$"):
        sim.check_mode()


@pytest.mark.parametrize("value, mode", [("", False), (" 0 ", False), ("False", False), ("1", True),
                                         ("TRUE", True), ("strict", "strict"), ("All", "all")])
def test_known_sim_check_values(monkeypatch, value, mode) -> None:
    monkeypatch.setenv("JAXPTX_SIM_CHECK", value)
    assert sim.check_mode() == mode


def test_an_open_checking_block_wins_over_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "garbage")
    with sim.checking("strict"):
        assert sim.check_mode() == "strict"


KERNEL = """.version 8.5
.target sm_80
.address_size 64

.visible .entry k(.param .u64 p)
{
\t.reg .b32 %r<3>;
\tmov.u32 %r1, 7;
\tLINE
\tret;
}
"""


@pytest.mark.parametrize("line, message", [
    ("st.global.u32 [8], %r1;", r"st\.global\.u32 operand a: an absolute address \[8\] is only "
                                r"allowed in the \.local state space"),
    ("bar.sync 1, 48;", r"bar\.sync operand b: expected a multiple of 32 \(a thread count of whole "
                        r"warps\), got 48"),
])
def test_the_precheck_refuses_what_ptxas_refuses_with_the_line(line, message) -> None:
    with pytest.raises(PrecheckError, match=r"k: refused before running: 1 that ptxas would reject"
                                            r"\n  PTX line 9: " + message):
        sim.launch(KERNEL.replace("LINE", line), np.zeros(4, np.uint32), grid=1, block=64)

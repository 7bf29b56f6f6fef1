"""The ZLUDA golden vectors (checked on GPUs) through the emulator.

Cases the emulator cannot run yet are listed in ``NOT_YET`` with the reason;
they are strict xfails, so one that starts passing must leave the list."""

from __future__ import annotations

import numpy as np
import pytest

from golden_harness import cases, run

CASES = cases()

# name -> why it does not pass yet (kept honest: strict xfail).
NOT_YET: dict[str, str] = {}


@pytest.mark.skipif(not CASES, reason="golden vectors not found at ../shared/golden/zluda")
@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"], marks=pytest.mark.xfail(
    reason=NOT_YET[c["name"]], strict=True) if c["name"] in NOT_YET else ()) for c in CASES])
def test_golden_case(case) -> None:
    got, want = run(case)
    np.testing.assert_array_equal(got, want)

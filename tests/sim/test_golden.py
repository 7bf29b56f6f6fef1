"""The ZLUDA golden vectors (checked on GPUs) through the emulator.

Cases the emulator cannot run yet are listed in ``NOT_YET`` with the reason;
they are strict xfails, so one that starts passing must leave the list."""

from __future__ import annotations

import numpy as np
import pytest

from golden_harness import cases, run

CASES = cases()

# name -> why it does not pass (kept honest: strict xfail, so a case that
# starts passing must leave the list).
NOT_YET: dict[str, str] = {
    "vector8_extract": "ld.global.v8.u8 is not in the table: ptxas 13 rejects it ('Illegal vector size: 8')",
    "vote_ballot_nosync": "vote without .sync is not in the table: ptxas 13 rejects it on sm_70+",
    "ldmatrix": "its second warp reads past the end of the kernel's .global arrays; a GPU returns "
                "whatever lies there, the emulator faults (out of bounds)",
    "mma_m16n8k16_f32_bf16_bf16_f32_2x": "its second warp writes past the end of the output buffer; "
                                         "the emulator faults (out of bounds)",
}


@pytest.mark.skipif(not CASES, reason="golden vectors not found at ../shared/golden/zluda")
@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"], marks=pytest.mark.xfail(
    reason=NOT_YET[c["name"]], strict=True) if c["name"] in NOT_YET else ()) for c in CASES])
def test_golden_case(case) -> None:
    got, want = run(case)
    np.testing.assert_array_equal(got, want)

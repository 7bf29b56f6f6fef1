"""PTX constant expressions (PTX ISA "Constant Expressions") in operands and
initialisers: parsed, folded to one immediate, re-emitted byte for byte,
accepted by check and ptxas, and computed by the emulator as ptxas would."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx
from jaxptx import sim
from jaxptx.errors import ParseError
from jaxptx.runtime import ptxas

_CASES = [
    ("((128 >> 4) << 16)", 524288), ("(1+2)*3", 9), ("-(4)", -4), ("~0x0F", -16), ("10 / -3", -3),
    ("-10 % 3", -1), ("1 ? 5 : 6", 5), ("0 ? 5 : 6", 6), ("0xFFFFFFFFFFFFFFFFU >> 60", 15),
    ("-16 >> 2", -4), ("3 < 4 && 4 <= 4 || 0", 1), ("(7 & 3) | (8 ^ 12)", 7), ("!0 + !5", 1),
    ("1 == 1 != 0", 1), ("2 + 3 * 4 - 5", 9), ("(1 << 63) >> 63", -1), ("(1U << 63) >> 63", 1),
]


def _kernel(exprs: list[str]) -> str:
    body = "\n".join(f"  mov.u64 %rd2, {e};\n  st.global.u64 [%rd1+{8 * i}], %rd2;" for i, e in enumerate(exprs))
    return f""".version 8.5
.target sm_90a
.address_size 64
.global .u32 table[2] = {{(1 << 4) + 2, 7 * 3}};
.visible .entry k(.param .u64 out)
{{
  .reg .b64 %rd<4>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [out];
{body}
  ld.global.u32 %r1, [table+4];
  cvt.u64.u32 %rd3, %r1;
  st.global.u64 [%rd1+{8 * len(exprs)}], %rd3;
  ret;
}}
"""


def test_expressions_fold_round_trip_and_compute_as_ptxas_does():
    text = _kernel([e for e, _ in _CASES])
    module = jaxptx.parse(text)
    assert jaxptx.emit(module) == text
    assert jaxptx.check(module) == []
    ptxas(text, "sm_90a")
    ptxas(jaxptx.emit(module, style="canonical"), "sm_90a")
    out = np.zeros(len(_CASES) + 1, np.int64)
    sim.launch(text, out, grid=(1, 1, 1), block=(1, 1, 1))
    assert list(out[:-1]) == [v for _, v in _CASES]
    assert out[-1] == 21                 # the initialiser 7 * 3


def test_the_issue_example_is_an_immediate():
    m = jaxptx.parse(_kernel([]).replace("  ld.global.u32", "  or.b64 %rd1, %rd1, ((128 >> 4) << 16);\n"
                                          "  ld.global.u32", 1))
    ins = next(s for s in m.functions[0].body if isinstance(s, jaxptx.ir.Instruction) and s.opcode == "or")
    assert ins.operands[2] == jaxptx.ir.Immediate(524288)


@pytest.mark.parametrize("expr, message", [
    ("(1 + )", "expected a constant"), ("(1 + 2", "expected '\\)'"), ("4 / (2 - 2)", "division by zero"),
    ("1 ? 2", "expected ':'"), ("(1.5 * 2)", "floating-point constant"),
])
def test_malformed_expressions_point_at_the_token(expr, message):
    with pytest.raises(ParseError, match=message) as info:
        jaxptx.parse(_kernel([expr]))
    assert ":10:" in str(info.value)        # the line of the mov

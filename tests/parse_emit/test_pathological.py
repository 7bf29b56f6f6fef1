"""Inputs of pathological size parse, emit and check in bounded time and
memory: a register range declares its names without listing them."""

from __future__ import annotations

import time

import pytest

import jaxptx
from jaxptx import ir

_KERNEL = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<{n}>;
  .reg .b64 %rd<{n}>;
  .reg .v4 .f32 %v<{n}>;
  ld.param.u64 %rd{last}, [out];
  mov.u32 %r{last}, 7;
  mov.f32 %v{last}.x, 0f3F800000;
  st.global.u32 [%rd{last}], %r{last};
  ret;
}}
"""


@pytest.mark.parametrize("n", [4, 10**6, 999_999_999, 2**62])
def test_huge_register_ranges_are_instant(n):
    text = _KERNEL.format(n=n, last=n - 1)
    start = time.perf_counter()
    module = jaxptx.parse(text)
    assert jaxptx.emit(module) == text
    assert jaxptx.check(module) == []
    assert time.perf_counter() - start < 0.5


def test_a_register_past_its_range_is_undeclared():
    text = _KERNEL.format(n=999_999_999, last=5).replace("mov.u32 %r5, 7;", "mov.u32 %r999999999, 7;")
    problems = jaxptx.check(text)
    assert len(problems) == 1 and "undeclared register %r999999999" in problems[0].message


def test_leading_zeros_name_no_register_of_a_range():
    text = _KERNEL.format(n=100, last=5).replace("mov.u32 %r5, 7;", "mov.u32 %r05, 7;")
    assert "undeclared register %r05" in jaxptx.check(text)[0].message


def test_registers_table_answers_ranges():
    regs: ir.Registers[str] = ir.Registers()
    regs.declare("%r", "b32", count=10**12)
    regs.declare("%r", "b16", count=4)          # a later, narrower declaration
    regs.declare("%p", "pred")
    assert regs["%r3"] == "b16" and regs["%r4"] == "b32" and regs["%p"] == "pred"
    assert "%r" not in regs and "%rd1" not in regs and regs.get("%r" + "9" * 13) is None

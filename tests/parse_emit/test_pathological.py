"""Inputs of pathological size parse, emit and check in bounded time and
memory: a register range declares its names without listing them."""

from __future__ import annotations

import re
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


_ONE = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k()
{{
  .reg .b32 %r<3>;
  .reg .b16 %h<3>;
  {}
  ret;
}}
"""


@pytest.mark.parametrize("line, severity, message", [
    ("mov.u32 %r1, 4294967296;", "warning", r"literal 4294967296 does not fit \.u32; ptxas keeps its low 32 bits"),
    ("mov.u16 %h1, 65536;", "warning", r"does not fit \.u16"),
    ("mov.s32 %r1, -2147483649;", "warning", r"does not fit \.s32"),
    ("add.u32 %r1, %r1, 99999999999999999999999999;", "error", r"does not fit in 64 bits \(ptxas: Constant overflow\)"),
    (".foo 1;", "error", r"unknown directive \.foo"),
])
def test_check_reports_literals_past_their_type_and_unknown_directives(line, severity, message):
    found = jaxptx.check(_ONE.format(line))
    assert len(found) == 1 and found[0].severity == severity
    assert re.search(message, found[0].message)


@pytest.mark.parametrize("line", ["mov.u32 %r1, 4294967295;", "mov.u32 %r1, -1;", "mov.b16 %h1, 0xFFFF;",
                                  '.pragma "nounroll";'])
def test_literals_that_fit_and_known_directives_pass(line):
    assert jaxptx.check(_ONE.format(line)) == []


# A generator of pathological sizes: huge register ranges, deep block and
# parenthesis nesting, long constant expressions, huge literals. Parse, emit
# and check must finish quickly and raise nothing but jaxptx's own errors.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from jaxptx.errors import PtxError  # noqa: E402

_sizes = st.one_of(st.integers(0, 64), st.integers(10**5, 10**12), st.just(2**64 + 5))
_pathological = st.tuples(_sizes, st.integers(0, 300), st.integers(0, 400), st.integers(0, 2000),
                          st.sampled_from(["1", "99999999999999999999999999", "0x" + "F" * 40, "-1"]))


def _pathological_text(count: int, blocks: int, parens: int, terms: int, literal: str) -> str:
    expr = "(" * parens + "1" + ")" * parens + " + 2" * terms
    body = "{\n" * blocks + f"  mov.u32 %r{max(count - 1, 0)}, {expr};\n  mov.u32 %r0, {literal};\n" + \
        "}\n" * blocks
    return (".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n"
            f"  .reg .b32 %r<{count}>;\n{body}  ret;\n}}\n")


@settings(max_examples=60, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_pathological)
def test_pathological_sizes_are_fast_and_never_crash(case):
    text = _pathological_text(*case)
    start = time.perf_counter()
    try:
        module = jaxptx.parse(text)
        assert jaxptx.emit(module) == text
        jaxptx.check(module)
    except PtxError:
        pass                                  # a clear refusal (ParseError is one)
    assert time.perf_counter() - start < 2.0, case


@pytest.mark.parametrize("line, bad", [
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16 %r1, [%r2];", True),
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r2];", False),
    ("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd0,%fd1}, %fd2, {%fd3}, {%fd0,%fd1};", True),
    ("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd0,%fd1}, {%fd2}, {%fd3}, {%fd0,%fd1};", False),
])
def test_one_element_vectors_need_their_braces_as_ptxas_says(line, bad):
    from jaxptx.errors import PtxasError
    from jaxptx.runtime import ptxas
    text = _ONE.format(line).replace(".reg .b16 %h<3>;", ".reg .f64 %fd<4>;")
    found = jaxptx.check(text)
    if bad:
        assert len(found) == 1 and "write a vector, {%" in found[0].message
        with pytest.raises(PtxasError, match="[Vv]ector"):
            ptxas(text, "sm_90a")
    else:
        assert found == []
        ptxas(text, "sm_90a")

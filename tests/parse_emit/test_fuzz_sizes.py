"""Pathological sizes: PTX that is tiny as text but names huge things
(register ranges of billions, arrays of gigabytes, deep nesting, long
operand lists, literals past 64 bits). Parsing and checking each must take
bounded time and memory: a module that re-emits the text, or a
``ParseError``; ``check`` returns diagnostics, never hangs."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxptx
from jaxptx import ParseError

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
BUDGET_S = 2.0       # generous: each case parses in milliseconds

huge = st.one_of(st.integers(0, 10), st.integers(2**20, 2**31 - 1), st.integers(2**31, 2**70))
types = st.sampled_from(["b8", "b16", "b32", "b64", "f32", "pred", "b128"])


@st.composite
def pathological(draw) -> str:
    """One kernel with a few oversized declarations and instructions."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["regs", "array", "nest", "operands", "literal", "vector"]))
        n = draw(huge)
        if kind == "regs":
            lines.append(f".reg .{draw(types)} %x<{n}>;")
        elif kind == "array":
            lines.append(f".shared .align 16 .b8 arr{len(lines)}[{n}];")
        elif kind == "nest":
            depth = draw(st.integers(1, 300))
            lines.append("{" * depth + "\n" + "}" * depth)
        elif kind == "operands":
            count = draw(st.integers(1, 5000))
            lines.append("mov.b32 %r1, {" + ", ".join(["%r1"] * count) + "};")
        elif kind == "literal":
            lines.append(f"add.u32 %r1, %r1, {n};")
        else:
            lines.append(f"ld.global.v{draw(st.sampled_from([2, 4, 8, 64, n % 1000 + 1]))}.u32 "
                         "{%r1, %r1}, [%rd1];")
    body = "\n".join(lines)
    return HEAD + f".visible .entry k()\n{{\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n{body}\nret;\n}}\n"


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pathological())
def test_pathological_sizes_parse_and_check_in_bounded_time(text: str) -> None:
    start = time.perf_counter()
    try:
        module = jaxptx.parse(text)
    except ParseError:
        module = None
    if module is not None:
        assert jaxptx.emit(module) == text
        jaxptx.check(module, arch="sm_90a")         # diagnostics, never a hang or a crash
    assert time.perf_counter() - start < BUDGET_S, f"{time.perf_counter() - start:.2f} s for {text[:200]!r}"

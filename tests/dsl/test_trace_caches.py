"""The per-process caches that keep tracing fast, and what they must not
change: verdicts are kept per target *and* PTX version, the user's line is
recorded per instruction even though locations are shared, and the
end-of-trace check still finds an undeclared register or guard among
instructions whose operands are all registers."""

from __future__ import annotations

import inspect

import pytest

import jaxptx
from jaxptx import kernel, ptx, reg
from jaxptx.errors import PtxVersionError
from jaxptx.types import f32


def _three_input_min(spelling: str):
    def body() -> None:
        a, b, c = reg.scalar(f32, 1.0), reg.scalar(f32, 2.0), reg.scalar(f32, 3.0)
        if spelling == "registers":
            ptx.min.f32(a, a, b, c)                       # the DSL's all-register fast path
        else:
            ptx.min.f32(a.name, a.name, b.name, c.name)   # named registers: the trace's verdict cache
    return body


@pytest.mark.parametrize("spelling", ["registers", "names"])
def test_a_verdict_for_one_ptx_version_is_not_reused_for_another(spelling: str) -> None:
    body = _three_input_min(spelling)
    # Three-input min needs PTX ISA 8.8 on sm_100a, whose own minimum is 8.6.
    text = kernel(arch="sm_100a", name="k", version=(8, 8))(body).ptx()
    assert "min.f32 %f1, %f1, %f2, %f3;" in text
    again = kernel(arch="sm_100a", name="k", version=(8, 8))(body).ptx()   # cached
    assert again == text
    with pytest.raises(PtxVersionError, match=r"min\.f32 needs PTX ISA 8\.8, kernel declares 8\.6"):
        kernel(arch="sm_100a", name="k", version=(8, 6))(body).ptx()


def test_each_instruction_keeps_the_line_that_traced_it() -> None:
    lines = []

    def body() -> None:
        a = reg.scalar(f32, 1.0)
        for _ in range(2):
            lines.append(inspect.currentframe().f_lineno + 1)
            ptx.add.f32(a, a, a)
            lines.append(inspect.currentframe().f_lineno + 1)
            ptx.mul.f32(a, a, a)

    for _ in range(2):                  # the second trace finds every location cached
        lines.clear()
        module = kernel(arch="sm_80", name="k")(body).module()
        traced = [s for s in jaxptx.ir.walk(module.function("k").body)
                  if isinstance(s, jaxptx.ir.Instruction) and s.opcode in ("add", "mul")]
        assert [(s.opcode, s.loc.file, s.loc.line) for s in traced] == \
            [(op, __file__, line) for op, line in zip(["add", "mul"] * 2, lines)]


def test_a_refusal_after_cached_locations_names_its_own_line() -> None:
    lines = []

    def body() -> None:
        a = reg.scalar(f32, 1.0)
        for _ in range(3):
            ptx.add.f32(a, a, a)
        lines.append(inspect.currentframe().f_lineno + 1)
        ptx.min.f32(a, a, a, a)         # sm_80 has no three-input min
    with pytest.raises(jaxptx.errors.PtxError, match=r"min\.f32.*sm_100") as e:
        kernel(arch="sm_80", name="k")(body).ptx()
    assert str(e.value).endswith(f"test_trace_caches.py:{lines[-1]}")


@pytest.mark.parametrize("line, found", [
    ("add.f32 %f1, %f2, %f9;", "add.f32: undeclared register %f9"),
    ("@%p9 add.f32 %f1, %f2, %f2;", "add.f32: undeclared register %p9"),
])
def test_the_module_check_finds_an_undeclared_register_among_plain_registers(line: str, found: str) -> None:
    text = (".version 8.5\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n"
            "\t.reg .pred %p<3>;\n\t.reg .f32 %f<3>;\n"
            "\tadd.f32 %f1, %f2, %f2;\n"        # declared: skipped quickly, nothing to find
            f"\t{line}\n\tret;\n}}\n")
    assert [d.message for d in jaxptx.check(text, instructions=False)] == [found]

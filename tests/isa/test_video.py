"""The video instructions (``_video`` family): forms, slot rules, and the
operand selectors (``%r2.b3``, ``%r1.h10``) that the generated sweep
examples do not write, assembled with ptxas."""

from __future__ import annotations

import re

import pytest

from jaxptx import isa
from jaxptx.errors import PtxasError, PtxModifierError
from jaxptx.runtime import ptxas

from isa_helpers import operand_types, resolve_name

# Lines with operand selectors, each accepted by ptxas 13.0 (sm_80 .. sm_120a).
SELECTOR_LINES = [
    "vadd.s32.u32.s32.sat %r1, %r2.b0, %r3.h1;",
    "vabsdiff.s32.s32.s32.sat %r1.h0, %r2.b0, %r3.b2, %r4;",
    "vmin.s32.s32.s32.min.sat %r1, %r2, %r3.h1, %r4;",
    "vadd.s32.u32.s32 %r1, 5, %r3.h1;",
    "vshl.s32.s32.u32.wrap %r1.h1, %r2, %r3.b2, %r4;",
    "vshr.u32.u32.u32.clamp.add %r1, %r2, 32, %r4;",
    "vmad.u32.u32.u32.po.sat.shr7 %r1, %r2.h0, %r3.h1, %r4;",
    "vmad.s32.s32.u32 %r1, %r2, %r3, 5;",
    "vset.u32.u32.ne %r1.b2, %r2, %r3.h1, %r4;",
    "vset.u32.u32.ne.max %r1, %r2, %r3.h1, %r4;",
    "vsub2.s32.s32.s32.sat %r1.h0, %r2.h10, %r3.h32, %r4;",
    "vmin2.s32.u32.u32.add %r1.h10, %r2.h00, %r3.h22, %r4;",
    "vadd4.s32.s32.u32.sat %r1.b20, %r2.b7654, %r3.b0123, %r4;",
    "vmax4.u32.s32.s32 %r1.b31, %r2.b7777, %r3, %r4;",
    "vset4.u32.u32.ne.add %r1.b321, %r2, %r3, %r4;",
]


def _module(lines: list[str], arch: str) -> str:
    body = "\n".join(f"\t{line}" for line in lines)
    return (f".version 8.7\n.target {arch}\n.address_size 64\n.visible .entry k()\n{{\n"
            f"\t.reg .u32 %r<5>;\n{body}\n\tret;\n}}\n")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_120a"])
def test_selector_lines_assemble(arch: str) -> None:
    ptxas(_module(SELECTOR_LINES, arch), arch)


def test_selector_lines_resolve() -> None:
    for line in SELECTOR_LINES:
        name, ops = line.rstrip(";").split(None, 1)
        r = resolve_name(name, ops.count(",") + 1)
        assert r.inst.sim is not None and r.inst.sim.startswith("video"), line


@pytest.mark.parametrize("line, message", [
    ("vadd2.s32.s32.u32 %r1, %r2, 3, %r1;", "Incorrect video selector for operand 2"),
    ("vadd2.s32.s32.u32 %r1.h1, %r2.h1, %r3, %r1;", "Incorrect video selector for operand 1"),
    ("vadd.s32.u32.s32.sat.min %r1.b1, %r2, %r3, %r4;",
     "cannot have destination selector and secondary operation"),
])
def test_ptxas_rejects_what_the_table_cannot_see(line: str, message: str) -> None:
    # Selectors are written on operands, so the table does not check them;
    # these pin what ptxas says instead.
    with pytest.raises(PtxasError, match=r"ptxas: line \d+: .*" + re.escape(message)) as e:
        ptxas(_module([line], "sm_80"), "sm_80")
    assert message in e.value.log


def test_forms_and_operand_types() -> None:
    r = isa.resolve("vset", ("s32", "u32", "lt"), 3)
    assert operand_types(r) == ["u32", "s32", "u32", "u32"]   # d, a, b and the optional c
    assert isa.arity(r) == (3, 4)
    assert isa.arity(isa.resolve("vadd", ("u32", "s32", "u32", "sat", "max"), 4)) == (4, 4)
    assert operand_types(isa.resolve("vshr", ("s32", "u32", "u32", "wrap"), 3))[:3] == ["s32", "u32", "u32"]
    simd = isa.resolve("vabsdiff4", ("u32", "u32", "u32", "add"), 4)
    assert [o.kinds for o in isa.active_operands(simd)][1:] == [("reg",)] * 3
    assert simd.inst.requires.sm == 30 and simd.inst.requires.ptx == (3, 0)


@pytest.mark.parametrize("name, n, message", [
    ("vset.u32.u32.ne.sat", 3, r"unknown modifier \.sat; vset takes"),
    ("vavrg2.s32.u32.u32.sat.add", 4, r"\.sat cannot be combined with \.add"),
    ("vset4.u32.u32.ne.max", 4, r"unknown modifier \.max; vset4 takes"),
    ("vshl.u32.u32.u32", 3, r"missing its mode modifier \(one of \.clamp \.wrap\)"),
    ("vmad.u32.u32.u32.po.rn", 4, r"unknown modifier \.rn"),
])
def test_bad_modifiers(name: str, n: int, message: str) -> None:
    with pytest.raises(PtxModifierError, match=message):
        resolve_name(name, n)

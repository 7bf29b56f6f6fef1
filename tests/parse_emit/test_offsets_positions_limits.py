"""Issue 30, the parser's and checker's cases: address offsets that are
constant expressions parse and re-emit byte for byte; duplicate labels and
unknown directives are reported at their line:column; jaxptx.check refuses
what ptxas refuses (a kernel's .param space past its limit, an absolute
address outside .local, a barrier thread count that is not whole warps) and
names what it accepts when given something else."""

from __future__ import annotations

import re

import pytest

import jaxptx
from jaxptx import check, emit, parse
from jaxptx.errors import PtxasError
from jaxptx.runtime import ptxas

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n\n"


def _kernel(body: str, params: str = ".param .u64 p") -> str:
    return (HEAD + f".visible .entry k({params})\n{{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<3>;\n"
            "\t.local .b32 loc[4];\n\tld.param.u64 %rd1, [p];\n" + body + "\tret;\n}\n")


def _errors(text: str) -> list[str]:
    return [str(d) for d in check(text) if d.severity == "error"]


# --- constant expressions in address offsets (ptxas accepts each) -----------------------------
OFFSETS = [
    ("\tld.global.u32 %r1, [%rd1+(2*2)];\n", 4),
    ("\tld.global.u32 %r1, [%rd1 + ( 2 * 2 )];\n", 4),
    ("\tld.global.u32 %r1, [%rd1+2*2];\n", 4),
    ("\tld.global.u32 %r1, [%rd1+4-2];\n", 2),
    ("\tld.global.u32 %r1, [%rd1+(1<<2)];\n", 4),
    ("\tld.global.u32 %r1, [%rd1+~3];\n", -4),
    ("\tld.local.u32 %r1, [loc+(2*2)];\n", 4),
    ("\tld.local.u32 %r1, [(8+4)];\n", 12),
    ("\tld.local.u32 %r1, [8+4];\n", 12),
]


@pytest.mark.parametrize("line, value", OFFSETS, ids=[o[0].strip() for o in OFFSETS])
def test_a_constant_expression_offset_parses_and_round_trips(line, value) -> None:
    text = _kernel(line)
    module = parse(text)
    assert emit(module) == text
    ins = [s for s in module.functions[0].body if getattr(s, "opcode", None) == "ld"][1]
    address = ins.operands[1]
    offset = address.offset if address.base is None or address.offset is not None else address.base.offset
    assert offset.value == value
    assert _errors(text) == []
    canonical = emit(module, style="canonical")
    assert emit(parse(canonical), style="canonical") == canonical
    ptxas(text, "sm_90a")
    ptxas(canonical, "sm_90a")


def test_a_symbol_operand_offset_may_be_an_expression() -> None:
    text = _kernel("\tmov.u64 %rd2, loc+(2*2);\n")
    assert emit(parse(text)) == text
    assert "mov.u64 %rd2, loc+4;" in emit(parse(text), style="canonical")
    ptxas(text, "sm_90a")


def test_a_malformed_offset_expression_is_still_an_error() -> None:
    with pytest.raises(jaxptx.ParseError, match=r"expected '\)' in a constant expression"):
        parse(_kernel("\tld.global.u32 %r1, [%rd1+(2*2];\n"))


# --- positions ------------------------------------------------------------------------------
def test_a_duplicate_label_is_reported_at_its_line_and_column() -> None:
    text = _kernel("L1:\n\tadd.u32 %r1, %r1, 1;\n  L1:\n")
    assert _errors(text) == ["13:3: error: duplicate definition of label L1 in one block "
                             "(first defined on line 11)"]


def test_a_duplicate_register_is_reported_at_its_declaration() -> None:
    text = _kernel("\t.reg .b32 %x;\n\t.reg .f32 %x;\n")
    assert _errors(text) == ["12:2: error: duplicate definition of register %x in one block "
                             "(first defined on line 11)"]


def test_an_unknown_directive_is_reported_at_its_line_and_column() -> None:
    text = _kernel("\t.foo 1;\n")
    assert _errors(text) == ["11:2: error: unknown directive .foo (not a PTX directive)"]
    assert [str(d) for d in check(HEAD + ".bogus 3\n")] == \
        ["5:1: error: unknown directive .bogus (not a PTX directive)"]


# --- what ptxas refuses ---------------------------------------------------------------------
def _refused_by_ptxas(text: str, arch: str, said: str) -> None:
    with pytest.raises(PtxasError, match=r"ptxas: line \d+: .*" + re.escape(said)) as info:
        ptxas(text, arch)
    assert said in info.value.log, info.value.log


def test_a_4_gb_parameter_is_refused_at_its_declaration() -> None:
    text = _kernel("", ".param .b8 p[4000000000]").replace("\tld.param.u64 %rd1, [p];\n", "")
    assert _errors(text) == [
        "5:19: error: k: entry parameters take 4000000000 bytes up to p, over the 32764 bytes of "
        ".param space a kernel may have; pass large data through a global-memory pointer"]
    _refused_by_ptxas(text, "sm_90a", "uses too much parameter space (0xee6b2800 bytes, 0x7ffc max)")


@pytest.mark.parametrize("version, params, over", [
    ("8.5", ".param .b8 p[32764]", None),
    ("8.5", ".param .b8 p[32765]", 32765),
    ("8.5", ".param .u64 a, .param .b8 p[32752], .param .u32 b", None),   # 8 + 32752 + 4
    ("8.5", ".param .u64 a, .param .b8 p[32753], .param .u32 b", 32768),  # b aligned to 32764
    ("8.0", ".param .b8 p[4352]", None),
    ("8.0", ".param .b8 p[4353]", 4353),
])
def test_the_param_space_limit_is_ptxas_s(version, params, over) -> None:
    text = (HEAD.replace("8.5", version).replace("sm_90a", "sm_80")
            + f".visible .entry k({params})\n{{\n\tret;\n}}\n")
    found = _errors(text)
    if over is None:
        assert found == []
        ptxas(text, "sm_80")
        return
    limit = 32764 if version == "8.5" else 4352
    assert len(found) == 1 and f"entry parameters take {over} bytes" in found[0]
    assert f"over the {limit} bytes of .param space" in found[0]
    if version == "8.0":
        assert ".version 8.1 or newer allows 32764 bytes" in found[0]
    _refused_by_ptxas(text, "sm_80", "uses too much parameter space")


@pytest.mark.parametrize("line", [
    "\tld.global.u32 %r1, [8];\n",
    "\tst.shared.u32 [8], %r1;\n",
    "\tld.u32 %r1, [8+4];\n",
    "\tprefetch.global.L2 [8];\n",
])
def test_an_absolute_address_outside_local_is_refused(line) -> None:
    text = _kernel(line)
    (found,) = _errors(text)
    assert found.startswith("11:2: error: ")
    assert "operand a: an absolute address [" in found and "is only allowed in the .local state " \
        "space (ptxas: \"Immediate addresses allowed only for .local state space\"); address " \
        "through a register or a variable's name" in found
    _refused_by_ptxas(text, "sm_90a", "Immediate addresses allowed only for .local state space")


def test_an_absolute_local_address_is_accepted() -> None:
    text = _kernel("\tld.local.u32 %r1, [8];\n")
    assert _errors(text) == []
    ptxas(text, "sm_90a")


@pytest.mark.parametrize("line, name, count", [
    ("\tbar.sync 1, 48;\n", "bar.sync", 48),
    ("\tbarrier.sync 1, 33;\n", "barrier.sync", 33),
    ("\tbar.arrive 1, 48;\n", "bar.arrive", 48),
    ("\tbar.red.popc.u32 %r1, 1, 48, %p1;\n", "bar.red.popc.u32", 48),
])
def test_a_barrier_thread_count_that_is_not_whole_warps_is_refused(line, name, count) -> None:
    text = _kernel(line).replace("\t.reg .b32 %r<3>;", "\t.reg .b32 %r<3>;\n\t.reg .pred %p<2>;")
    (found,) = _errors(text)
    assert found == (f"12:2: error: {name} operand b: expected a multiple of 32 (a thread count of "
                     f"whole warps), got {count}")
    _refused_by_ptxas(text, "sm_90a", "Number of threads participating in barrier must be in "
                                      "multiple of warp size")


def test_whole_warp_barrier_counts_pass() -> None:
    text = _kernel("\tbar.sync 1, 64;\n\tbar.sync 0, %r1;\n")
    assert _errors(text) == []
    ptxas(text, "sm_90a")


@pytest.mark.parametrize("source", [42, None, b".version 8.5", ["ret;"]])
def test_check_names_what_it_accepts(source) -> None:
    with pytest.raises(TypeError, match=r"^jaxptx\.check: expected PTX text \(str\) or a "
                                        r"jaxptx\.ir\.Module \(from jaxptx\.parse or "
                                        r"Kernel\.module\(\)\), got .* \(" + type(source).__name__):
        check(source)

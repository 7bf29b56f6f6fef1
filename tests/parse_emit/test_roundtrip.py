"""Parser/emitter round trips over the real PTX corpus and hand-written odd syntax.

For every corpus file: ``emit(parse(text)) == text`` byte for byte; the
canonical emission re-parses to an equal module and is a fixed point; and
where CUDA 13 ``ptxas`` accepts the original (``INDEX.tsv`` ``ptxas_ok``),
it accepts the canonical text too. The corpus lives beside the repository
(``../shared/corpus``); without it those tests skip.
"""

from __future__ import annotations

import csv
import pathlib
import re

import pytest

import jaxptx
from jaxptx import ir
from jaxptx.errors import PtxasError, ToolchainError

try:
    from conftest import SHARED
except ImportError:  # another import mode: compute it the same way
    SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared"

CORPUS = SHARED / "corpus"
NO_CORPUS = f"PTX corpus not found at {CORPUS} (expected ../shared/corpus beside the repository)"


def _index() -> list[dict[str, str]]:
    path = CORPUS / "INDEX.tsv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


INDEX = _index()


def _params(rows: list[dict[str, str]]) -> list:
    if not rows:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))]
    return [pytest.param(r, id=r["path"]) for r in rows]


def read(row: dict[str, str]) -> str:
    """A corpus file's text, exactly (CRLF kept)."""
    return (CORPUS / row["path"]).read_bytes().decode("utf-8")


def arch_of(row: dict[str, str]) -> str:
    """The ptxas target the corpus README prescribes: the first ``sm_XX`` of
    the ``.target``, with targets below sm_75 checked as sm_75."""
    m = re.search(r"\bsm_(\d+)([a-z]?)", row["target"])
    assert m, f"no sm_XX in the target of {row['path']}: {row['target']!r}"
    return m.group(0) if int(m.group(1)) >= 75 else "sm_75"


# --- the corpus ---------------------------------------------------------------

def test_corpus_index_matches_files() -> None:
    if not INDEX:
        pytest.skip(NO_CORPUS)
    on_disk = sorted(p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.ptx"))
    assert sorted(r["path"] for r in INDEX) == on_disk


@pytest.mark.parametrize("row", _params(INDEX))
def test_source_roundtrip_is_byte_exact(row) -> None:
    text = read(row)
    assert jaxptx.emit(jaxptx.parse(text, source=row["path"])) == text


@pytest.mark.parametrize("row", _params(INDEX))
def test_canonical_reparses_equal(row) -> None:
    m = jaxptx.parse(read(row), source=row["path"])
    canonical = jaxptx.emit(m, style="canonical")
    again = jaxptx.parse(canonical, source=row["path"] + " (canonical)")
    assert again == m
    assert jaxptx.emit(again, style="canonical") == canonical, "canonical emission is not a fixed point"


PTXAS_ROWS = [r for r in INDEX if r["ptxas_ok"] == "yes"]


@pytest.fixture(scope="module")
def have_ptxas() -> None:
    from jaxptx.runtime import find_tool
    try:
        find_tool("ptxas")
    except ToolchainError as e:
        pytest.skip(f"ptxas not available: {e}")


# All ~254 runs take about 3 s on a 2-core machine (small files), so the
# whole sweep is in the default run.
@pytest.mark.parametrize("row", _params(PTXAS_ROWS))
def test_ptxas_accepts_canonical(row, have_ptxas) -> None:
    from jaxptx.runtime import ptxas
    canonical = jaxptx.emit(jaxptx.parse(read(row), source=row["path"]), style="canonical")
    try:
        ptxas(canonical, arch_of(row))
    except PtxasError as e:
        pytest.fail(f"ptxas -arch={arch_of(row)} rejects the canonical text of {row['path']} "
                    f"(it accepts the original):\n{e}")


# --- hand-written odd syntax ----------------------------------------------------

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"


def roundtrip(text: str) -> ir.Module:
    """Parse ``text``, check every round-trip property, return the module."""
    m = jaxptx.parse(text)
    assert jaxptx.emit(m) == text
    canonical = jaxptx.emit(m, style="canonical")
    again = jaxptx.parse(canonical)
    assert again == m
    assert jaxptx.emit(again, style="canonical") == canonical
    return m


def body(m: ir.Module, name: str = "k") -> list:
    return m.function(name).body


def instructions(statements) -> list[ir.Instruction]:
    out = []
    for s in statements:
        if isinstance(s, ir.Block):
            out.extend(instructions(s.body))
        elif isinstance(s, ir.Instruction):
            out.append(s)
    return out


def test_comments_in_every_position() -> None:
    text = (HEAD
            + "/* lead */ .visible /* a */ .entry /* b */ k /* c */ ( /* d */ .param /* e */ .u64 "
              "/* f */ p /* g */ ) // header\n"
            + "/* before brace */ { // after brace\n"
            + "\t.reg /*x*/ .b32 /*y*/ %r /*z*/ < /*w*/ 3 /*v*/ > /*u*/ ; /* after */\n"
            + "\tadd.s32 /*a*/ %r1 /*b*/, %r2, 1; // c\n"
            + "\t/* a comment\n\t   on two lines */\n"
            + "\t@ /*g*/ %p1 /*h*/ bra /*i*/ L; // guard\n"
            + "L /*j*/ : // label\n"
            + "\tret /*k*/ ; //\n"
            + "} /* close */ // trailing\n"
            + "// last line without newline")
    m = roundtrip(text)
    f = m.function("k")
    assert f.linkage == ("visible",)
    assert [(p.space, p.type, p.name) for p in f.params] == [("param", "u64", "p")]
    decl, add, bra, label, ret = f.body
    assert decl == ir.RegDecl("b32", (ir.RegName("%r", 3),))
    assert add == ir.Instruction("add", ("s32",), (ir.Register("%r1"), ir.Register("%r2"),
                                                   ir.Immediate(1)))
    assert add.trivia[:3] == ("\t", " /*a*/ ", " /*b*/") and add.trivia[-1] == " // c\n"
    assert bra.guard == ir.Guard(ir.Register("%p1")) and bra.operands == (ir.Symbol("L"),)
    assert label == ir.Label("L")
    assert ret == ir.Instruction("ret")
    assert m.trailing == "// last line without newline"
    canonical = jaxptx.emit(m, style="canonical")
    assert "/*" not in canonical and "//" not in canonical


def test_dotted_qualifiers_without_spaces() -> None:
    text = (HEAD
            + ".visible .entry k(.param.u64 p, .param .align 8 .b8 q[16], "
              ".param.u64.ptr.global.align 16 r)\n"
            + "{\n\t.reg.b64 %rd<3>;\n\tld.param.u64 %rd1, [p];\n\tret;\n}\n")
    m = roundtrip(text)
    p, q, r = m.function("k").params
    assert (p.space, p.type, p.name) == ("param", "u64", "p")
    assert (q.space, q.align, q.type, q.name, q.dims) == ("param", 8, "b8", "q", (16,))
    assert (r.space, r.type, r.name) == ("param", "u64", "r")
    assert r.attributes == (".ptr", ".global", ".align", "16")
    decl, ld, _ = body(m)
    assert decl == ir.RegDecl("b64", (ir.RegName("%rd", 3),))
    assert ld.opcode == "ld" and ld.modifiers == ("param", "u64")
    assert ld.operands[1] == ir.Address(ir.Symbol("p"))


def test_negative_and_symbolic_offsets() -> None:
    text = (HEAD + ".global .b32 foo[4];\n.entry k()\n{\n"
            + "\tld.global.u32 %r1, [%rd1+-4];\n"
            + "\tld.global.u32 %r2, [foo-4];\n"
            + "\tld.global.u32 %r3, [foo+8];\n"
            + "\tld.global.u32 %r4, [%rd1-0x10];\n"
            + "\tld.global.u32 %r5, [-8];\n"
            + "\tmov.u64 %rd2, foo-4;\n"
            + "\tadd.s32 %r1, %r1, -1;\n"
            + "\tsub.s32 %r1, %r1,-1;\n"
            + "\tret;\n}\n")
    m = roundtrip(text)
    ops = [i.operands[1] if i.opcode != "add" and i.opcode != "sub" else i.operands[2]
           for i in instructions(body(m))[:-1]]
    assert ops[0] == ir.Address(ir.Register("%rd1"), -4)
    assert ops[1] == ir.Address(ir.Symbol("foo"), 4, minus=True)
    assert ops[2] == ir.Address(ir.Symbol("foo"), 8)
    assert ops[3].base == ir.Register("%rd1") and ops[3].minus
    assert ops[3].offset == ir.Immediate(16, "hex", pad=2)
    assert ops[4] == ir.Address(None, -8)
    assert ops[5] == ir.Symbol("foo", 4, minus=True)
    assert ops[6] == ir.Immediate(-1)
    assert ops[7] == ir.Immediate(-1)
    assert "[%rd1+-4]" in jaxptx.emit(m, style="canonical")


@pytest.mark.parametrize("literal, value, form", [
    ("0X1f", 31, "hex"),
    ("0x1F", 31, "hex"),
    ("0x0000001f", 31, "hex"),
    ("0xFFFFFFFFU", 0xFFFFFFFF, "hex"),
    ("0f3f800000", 1.0, "f32"),
    ("0F3F800000", 1.0, "f32"),
    ("0fBF800000", -1.0, "f32"),
    ("0d3ff0000000000000", 1.0, "f64"),
    ("0D3FF0000000000000", 1.0, "f64"),
    ("017", 15, "oct"),
    ("0b101", 5, "bin"),
    ("0B11", 3, "bin"),
    ("42U", 42, "dec"),
    ("-7", -7, "dec"),
    ("1.50e-3", 1.5e-3, "float"),
    ("2.", 2.0, "float"),
    ("1E3", 1000.0, "float"),
])
def test_numeric_literal_spellings(literal, value, form) -> None:
    text = HEAD + f".entry k()\n{{\n\tmov.b32 %r1, {literal};\n\tret;\n}}\n"
    m = roundtrip(text)
    imm = body(m)[0].operands[1]
    assert isinstance(imm, ir.Immediate)
    assert (imm.value, imm.form) == (value, form)
    assert imm.spelling() == literal


def test_register_ranges_and_multi_name_lines() -> None:
    text = (HEAD + ".entry k()\n{\n"
            + "\t.reg .pred %p<4>;\n"
            + "\t.reg .b32 %r<10>, %x, %y<2>;\n"
            + "\t.reg .v4 .f32 %v;\n"
            + "\t.reg .b64\t%rd<100> ;\n"
            + "\tret;\n}\n")
    m = roundtrip(text)
    p, r, v, rd, _ = body(m)
    assert p == ir.RegDecl("pred", (ir.RegName("%p", 4),))
    assert r.names == (ir.RegName("%r", 10), ir.RegName("%x"), ir.RegName("%y", 2))
    assert (v.vector, v.type, v.names) == (4, "f32", (ir.RegName("%v"),))
    assert rd.names == (ir.RegName("%rd", 100),)


def test_predicates_and_labels() -> None:
    text = (HEAD + ".entry k()\n{\n"
            + "\t@!%p1 bra $L__BB0_2;\n"
            + "\t@%p2 bra.uni LBL;\n"
            + "\tsetp.eq.s32 %p1|%p2, %r1, 1;\n"
            + "\tselp.b32 %r1, 1, 0, !%p1;\n"
            + "$L__BB0_2:\n"
            + "LBL:  @%p1 ret;\n"
            + "\tret;\n}\n")
    m = roundtrip(text)
    b1, b2, setp, selp, l1, l2, ret1, _ = body(m)
    assert b1.guard == ir.Guard(ir.Register("%p1"), negated=True)
    assert b1.opcode == "bra" and b1.operands == (ir.Symbol("$L__BB0_2"),)
    assert b2.guard == ir.Guard(ir.Register("%p2")) and b2.modifiers == ("uni",)
    assert setp.operands[0] == ir.Pair(ir.Register("%p1"), ir.Register("%p2"))
    assert selp.operands[3] == ir.Negated(ir.Register("%p1"))
    assert (l1, l2) == (ir.Label("$L__BB0_2"), ir.Label("LBL"))
    assert ret1.guard == ir.Guard(ir.Register("%p1"))


def test_nested_blocks() -> None:
    text = (HEAD + ".entry k()\n{\n"
            + "\t{\n\t\t.reg .b32 %t;\n\t\t{ mov.b32 %t, 1; }\n\t}\n"
            + "\t{}\n"
            + "\tret;\n}\n")
    m = roundtrip(text)
    outer, empty, ret = body(m)
    assert isinstance(outer, ir.Block) and isinstance(empty, ir.Block) and empty.body == []
    decl, inner = outer.body
    assert decl == ir.RegDecl("b32", (ir.RegName("%t"),))
    assert isinstance(inner, ir.Block)
    assert inner.body == [ir.Instruction("mov", ("b32",), (ir.Register("%t"), ir.Immediate(1)))]
    assert ret == ir.Instruction("ret")


def test_call_with_parenthesised_lists() -> None:
    text = (HEAD
            + ".func (.reg .b32 rv) f(.reg .b32 a, .reg .b32 b)\n{\n\tadd.s32 rv, a, b;\n\tret;\n}\n"
            + ".entry k()\n{\n"
            + "\t.param .b32 r0;\n"
            + "\tcall.uni (r0), f, (1, %r2);\n"
            + "\tcall f, ();\n"
            + "\tcall (r0),f,(%r1,%r2),proto;\n"
            + "\tret;\n}\n")
    m = roundtrip(text)
    f = m.function("f")
    assert [(p.space, p.type, p.name) for p in f.returns] == [("reg", "b32", "rv")]
    assert [p.name for p in f.params] == ["a", "b"]
    _, c1, c2, c3, _ = body(m)
    assert c1.opcode == "call" and c1.modifiers == ("uni",)
    assert c1.operands == (ir.Parens((ir.Symbol("r0"),)), ir.Symbol("f"),
                           ir.Parens((ir.Immediate(1), ir.Register("%r2"))))
    assert c2.operands == (ir.Symbol("f"), ir.Parens(()))
    assert c3.operands[-1] == ir.Symbol("proto")


def test_debug_sections() -> None:
    text = (HEAD
            + ".section .debug_info { .b8 1, 2 }\n"
            + ".section\t.debug_abbrev\n{\n.b8 1,\n2, 3\n$L__info:\n.b32 $L__info\n.b64 0x10\n}\n")
    m = roundtrip(text)
    info, abbrev = m.items[3:]
    assert isinstance(info, ir.Section) and info.name == ".debug_info"
    assert info.body == [ir.Directive("b8", ("1", ",", "2"))]
    assert abbrev.name == ".debug_abbrev"
    b8, label, b32, b64 = abbrev.body
    assert b8.values == ("1", "2", "3")
    assert label == ir.Label("$L__info")
    assert b32.values == ("$L__info",) and b64.values == ("0x10",)


def test_loc_file_pragma() -> None:
    text = (HEAD
            + '.file 1 "/tmp/a.cu"\n'
            + '.file\t2 "b.h", 1700000000, 42\n'
            + ".entry k()\n.maxntid 128, 1, 1\n.minnctapersm 2\n{\n"
            + "\t.loc 1 12 3\n"
            + '\t.pragma "nounroll";\n'
            + "\tret;\n}\n")
    m = roundtrip(text)
    f1, f2 = m.items[3:5]
    assert f1 == ir.Directive("file", ("1", '"/tmp/a.cu"'))
    assert f2.values == ("2", '"b.h"', "1700000000", "42")
    f = m.function("k")
    assert [d.name for d in f.directives] == ["maxntid", "minnctapersm"]
    assert f.directives[0].values == ("128", "1", "1")
    loc, pragma, _ = f.body
    assert loc == ir.Directive("loc", ("1", "12", "3"))
    assert pragma == ir.Directive("pragma", ('"nounroll"',), semicolon=True)


def test_declaration_only_functions() -> None:
    text = (HEAD
            + ".extern .func (.param .b32 r) vprintf(.param .b64 fmt, .param .b64 args);\n"
            + ".visible .func g()\n;\n"
            + ".weak .func h ;\n")
    m = roundtrip(text)
    vprintf, g, h = m.functions
    assert vprintf.body is None and vprintf.linkage == ("extern",)
    assert [p.name for p in vprintf.params] == ["fmt", "args"]
    assert vprintf.returns[0].name == "r"
    assert g.body is None and g.params == [] and g.params_parens
    assert h.body is None and not h.params_parens and h.linkage == ("weak",)


def test_initialisers() -> None:
    text = (HEAD
            + ".global .u32 a[3] = {1, 2, 3};\n"
            + ".const .b32 b[2][2] = {{1,2},{3,4}};\n"
            + ".global .f32 c = 0f3F800000;\n"
            + ".global .u32 d[1] = {7};\n"
            + ".global .u64 e[2] = {a, a+4};\n"
            + ".visible .global .align 4 .b8 f[] = {0x1, 0x2};\n")
    m = roundtrip(text)
    a, b, c, d, e, f = m.items[3:]
    assert a.init == (ir.Immediate(1), ir.Immediate(2), ir.Immediate(3)) and a.init_braced
    assert b.dims == (2, 2)
    assert b.init == (ir.Vector((ir.Immediate(1), ir.Immediate(2))),
                      ir.Vector((ir.Immediate(3), ir.Immediate(4))))
    assert c.init == (ir.Immediate(1.0, "f32"),) and not c.init_braced
    assert d.init == (ir.Immediate(7),) and d.init_braced
    assert e.init == (ir.Symbol("a"), ir.Symbol("a", 4))
    assert (f.linkage, f.align, f.dims) == (("visible",), 4, (-1,))


def test_crlf_line_endings() -> None:
    text = (HEAD + ".entry k()\n{\n\t.reg .b32 %r<2>; // regs\n\tmov.u32 %r1, 1;\n"
            + "\t/* block\n\t comment */\n\tret;\n}\n").replace("\n", "\r\n")
    m = roundtrip(text)
    decl, mov, ret = body(m)
    assert decl.trivia[-1] == " // regs\r\n"
    assert mov == ir.Instruction("mov", ("u32",), (ir.Register("%r1"), ir.Immediate(1)))
    assert ret == ir.Instruction("ret")
    assert "\r" not in jaxptx.emit(m, style="canonical")


def test_mixed_line_endings_and_no_final_newline() -> None:
    text = HEAD.replace("\n", "\r\n", 1) + ".entry k()\r{\n\tret;\r\n}"
    m = roundtrip(text)
    assert body(m) == [ir.Instruction("ret")]


def test_empty_and_comment_only_modules() -> None:
    for text in ("", "\n", "// nothing\n", "/* a */ /* b */\r\n\t"):
        m = roundtrip(text)
        assert m.items == []

"""IR → text: canonical spacing, every operand form, and trivia (whitespace
and comments between tokens) reproduced exactly from the IR."""

from __future__ import annotations

import pytest

from jaxptx import ir
from jaxptx.emit import emit, emit_statement, operand_text, statement_tokens

R = ir.Register


@pytest.mark.parametrize("op, text", [
    (R("%r1"), "%r1"),
    (R("%tid.x"), "%tid.x"),
    (ir.Immediate(-5), "-5"),
    (ir.Immediate(255, "hex"), "0xFF"),
    (ir.Immediate(255, "hex", upper=False, pad=8), "0x000000ff"),
    (ir.Immediate(7, unsigned=True), "7U"),
    (ir.Immediate(8, "oct"), "010"),
    (ir.Immediate(5, "bin"), "0b101"),
    (ir.Immediate(1.0, "f32"), "0f3F800000"),
    (ir.Immediate(-2.5, "f64"), "0dC004000000000000"),
    (ir.Immediate(0.5, "float"), "0.5"),
    (ir.Symbol("buf", 16), "buf+16"),
    (ir.Sink(), "_"),
    (ir.Negated(R("%p1")), "!%p1"),
    (ir.Vector((R("%f1"), R("%f2"), ir.Sink())), "{%f1, %f2, _}"),
    (ir.Pair(R("%r1"), R("%p1")), "%r1|%p1"),
    (ir.Address(R("%rd1")), "[%rd1]"),
    (ir.Address(R("%rd1"), 8), "[%rd1+8]"),
    (ir.Address(R("%rd1"), -4), "[%rd1+-4]"),
    (ir.Address(None, 64), "[64]"),
    (ir.Address(ir.Symbol("tmap"), None, ir.Vector((R("%r1"), R("%r2")))), "[tmap, {%r1, %r2}]"),
])
def test_operand_spelling(op, text) -> None:
    assert operand_text(op) == text


def test_canonical_instruction_forms() -> None:
    ins = ir.Instruction("ld", ("global", "v2", "f32"), (ir.Vector((R("%f1"), R("%f2"))), ir.Address(R("%rd1"), 8)),
                         ir.Guard(R("%p1"), negated=True))
    assert emit_statement(ins) == "\t@!%p1 ld.global.v2.f32 {%f1, %f2}, [%rd1+8];\n"
    assert emit_statement(ir.Instruction("ret")) == "\tret;\n"
    assert emit_statement(ir.Label("$L1")) == "$L1:\n"
    assert emit_statement(ir.Comment(" note")) == "\t// note\n"
    assert emit_statement(ir.Comment(" b ", block=True)) == "\t/* b */\n"
    decl = ir.RegDecl("b32", (ir.RegName("%r", 5), ir.RegName("%x")))
    assert emit_statement(decl) == "\t.reg .b32 %r<5>, %x;\n"
    var = ir.VarDecl("global", "u32", "tab", align=4, dims=(3,), init=tuple(ir.Immediate(i) for i in (1, 2, 3)))
    assert emit_statement(var, depth=0) == ".global .align 4 .u32 tab[3] = {1, 2, 3};\n"
    ext = ir.VarDecl("shared", "b8", "dyn", linkage=("extern",), align=16, dims=(-1,))
    assert emit_statement(ext, depth=0) == ".extern .shared .align 16 .b8 dyn[];\n"
    assert emit_statement(ir.Directive("pragma", ('"nounroll"',), semicolon=True)) == '\t.pragma "nounroll";\n'


def _module() -> ir.Module:
    fn = ir.Function("entry", "k", [ir.VarDecl("param", "u64", "p"), ir.VarDecl("param", "u32", "n")],
                     linkage=("visible",), directives=[ir.Directive.listing("maxntid", 128, 1, 1)],
                     body=[ir.RegDecl("b64", (ir.RegName("%rd", 2),)),
                           ir.Instruction("ld", ("param", "u64"), (R("%rd1"), ir.Address(ir.Symbol("p")))),
                           ir.Block([ir.Instruction("ret")])])
    return ir.Module([ir.Directive("version", ("8.5",)), ir.Directive("target", ("sm_90a",)),
                      ir.Directive("address_size", ("64",)), fn])


def test_canonical_module() -> None:
    assert emit(_module()) == (
        ".version 8.5\n.target sm_90a\n.address_size 64\n\n"
        ".visible .entry k(\n\t.param .u64 p,\n\t.param .u32 n\n)\n.maxntid 128, 1, 1\n"
        "{\n\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [p];\n\t{\n\t\tret;\n\t}\n}\n")


def test_trivia_reproduces_layout_exactly() -> None:
    ins = ir.Instruction("add", ("s32",), (R("%r1"), R("%r2"), ir.Immediate(1)))
    tokens = statement_tokens(ins)
    assert tokens == ["add.s32", "%r1", ",", "%r2", ",", "1", ";"]
    ins.trivia = ("    ", " \t", "", "  /* c */ ", " ", "", "", "\t// tail\n")
    assert emit_statement(ins) == "    add.s32 \t%r1,  /* c */ %r2 ,1;\t// tail\n"
    assert emit_statement(ins, style="canonical") == "\tadd.s32 %r1, %r2, 1;\n"


def test_trivia_must_fit_the_tokens() -> None:
    ins = ir.Instruction("ret", trivia=("\t",))
    with pytest.raises(ValueError, match=r"trivia must have 3 entries for 2 tokens, got 1"):
        emit_statement(ins)


def test_canonical_style_ignores_trivia() -> None:
    m = _module()
    m.items[0].trivia = ("", " \t", "\n\n")
    m.trailing = "// end\n"
    assert emit(m).startswith(".version \t8.5\n\n.target")
    assert emit(m).endswith("// end\n")
    assert emit(m, style="canonical") == emit(_module())
    with pytest.raises(ValueError, match=r"style must be 'source' or 'canonical'"):
        emit(m, style="pretty")

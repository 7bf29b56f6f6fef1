"""Malformed PTX: every case raises ParseError at an exact line and column,
with a message that names the problem and an excerpt whose caret sits under
the offending character."""

from __future__ import annotations

import pytest

import jaxptx
from jaxptx import ParseError

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"   # lines 1-3
ENTRY = HEAD + ".entry k()\n{\n"                              # body starts on line 6


def check(text: str, line: int, column: int, match: str, at: str | None) -> ParseError:
    """Parse ``text``; check the error's position, message and excerpt.

    ``at`` is the text expected at (line, column) in the source, or ``None``
    for the end of input.
    """
    with pytest.raises(ParseError, match=match) as info:
        jaxptx.parse(text, source="bad.ptx")
    err = info.value
    assert (err.line, err.column) == (line, column), err.message
    assert err.source == "bad.ptx"
    assert str(err).startswith(f"bad.ptx:{line}:{column}: {err.message}")
    src_line = text.split("\n")[line - 1]
    if at is None:
        assert column == len(src_line) + 1, "expected the end of input"
    else:
        assert src_line[column - 1:].startswith(at), (src_line, column)
    shown, caret = err.excerpt.split("\n")
    assert shown.rstrip("\r") == "  " + src_line.rstrip("\r").expandtabs(1)[:160]
    assert caret == "  " + " " * (column - 1) + "^"
    return err


CASES = [
    # (id, text, line, column, message pattern, text at the position)
    ("unterminated string", HEAD + '.file 1 "abc\n.file 2 "d"\n', 4, 9,
     r"unterminated string", '"abc'),
    ("string across lines", ENTRY + '\t.pragma "a\nb";\n}\n', 6, 10, r"unterminated string", '"a'),
    ("stray hash", ENTRY + "\tadd.s32 %r1, %r2, #3;\n}\n", 6, 20, r"unexpected character '#'", "#"),
    ("stray backtick", ENTRY + "\tret`;\n}\n", 6, 5, r"unexpected character '`'", "`"),
    ("NUL byte", ENTRY + "\tret;\x00\n}\n", 6, 6, r"unexpected character '\\x00'", "\x00"),
    ("non-ASCII letter", ENTRY + "\tmov.u32 %r1, \u00e9;\n}\n", 6, 15,
     r"unexpected character '\u00e9'", "\u00e9"),
    ("backslash", ENTRY + "\tmov.u32 %r1, \\1;\n}\n", 6, 15, r"unexpected character", "\\"),
    ("column counts a tab as one", ENTRY + "\t\tmov.u32 %r1, 1 #;\n}\n", 6, 18,
     r"unexpected character '#'", "#"),
    ("missing semicolon", ENTRY + "\tadd.s32 %r1, %r2, 1\n\tret;\n}\n", 7, 2, r"got 'ret'", "ret"),
    ("missing } at EOF", ENTRY + "\tret;\n", 7, 1, r"expected '}' before end of input", None),
    ("missing } in a block", ENTRY + "\t{\n\tret;\n}\n", 9, 1,
     r"expected '}' before end of input", None),
    ("[ without ]", ENTRY + "\tld.global.u32 %r1, [%rd1;\n}\n", 6, 26, r"expected '\]', got ';'", ";"),
    ("] without [", ENTRY + "\tld.global.u32 %r1, %rd1];\n}\n", 6, 25, r"got '\]'", "]"),
    ("empty address", ENTRY + "\tld.global.u32 %r1, [];\n}\n", 6, 22,
     r"expected a register, name or offset", "]"),
    ("address starting with *", ENTRY + "\tld.u32 %r1, [*4];\n}\n", 6, 15,
     r"expected a register, name or offset in \[...\], got '\*'", "*4"),
    ("offset missing", ENTRY + "\tld.u32 %r1, [%rd1+];\n}\n", 6, 20, r"\]", "]"),
    (".reg without type", ENTRY + "\t.reg %r<4>;\n}\n", 6, 7, r"expected a register type like \.b32",
     "%r"),
    (".reg count not a number", ENTRY + "\t.reg .b32 %r<x>;\n}\n", 6, 15,
     r"expected a register count \(a decimal integer\), got 'x'", "x"),
    (".reg count negative", ENTRY + "\t.reg .b32 %r<-1>;\n}\n", 6, 15, r"register count", "-1"),
    (".reg range unclosed", ENTRY + "\t.reg .b32 %r<4;\n}\n", 6, 16, r"expected '>'", ";"),
    ("empty operand", ENTRY + "\tadd.s32 %r1, , 1;\n}\n", 6, 15, r"expected an operand, got ','", ","),
    ("trailing comma", ENTRY + "\tadd.s32 %r1, %r2,;\n}\n", 6, 19, r"expected an operand, got ';'", ";"),
    # (--1 is a constant expression, -(-1), which ptxas accepts)
    ("dangling minus", ENTRY + "\tadd.s32 %r1, %r2, -;\n}\n", 6, 20, r"expected an operand, got '-'",
     "-;"),
    ("string operand", ENTRY + '\tmov.u32 %r1, "x";\n}\n', 6, 15, r"expected an operand", '"x"'),
    ("unbalanced )", ENTRY + "\tadd.s32 %r1, %r2), 1;\n}\n", 6, 18, r"got '\)'", ")"),
    ("unclosed vector", ENTRY + "\tmov.v2.u32 {%r1, %r2, %r3;\n}\n", 6, 27, r"got ';'", ";"),
    ("instruction is a number", ENTRY + "\t42;\n}\n", 6, 2, r"expected an instruction, got '42'", "42"),
    ("extra } at top level", ENTRY + "\tret;\n}\n}\n", 8, 1,
     r"expected a directive, declaration or function, got '\}'", "}"),
    ("number at top level", HEAD + "42;\n", 4, 1, r"expected a directive, declaration or function", "42"),
    ("variable without type", HEAD + ".global foo;\n", 4, 9, r"state space and a type", "foo"),
    ("variable without name", HEAD + ".global .u32 ;\n", 4, 14, r"expected a variable name, got ';'", ";"),
    ("two types", HEAD + ".global .u32 .f32 x;\n", 4, 14, r"unexpected '\.f32' in a declaration", ".f32"),
    ("empty initialiser", HEAD + ".global .u32 x = ;\n", 4, 18, r"expected an operand, got ';'", ";"),
    ("negative array size", HEAD + ".global .u32 x[-1];\n", 4, 16, r"array size", "-1"),
    ("align not a number", HEAD + ".global .align x .u32 y;\n", 4, 16, r"alignment", "x"),
    ("body missing", HEAD + ".entry k() ret;\n", 4, 12,
     r"expected '\{', ';' or a directive after the header of k, got 'ret'", "ret"),
    ("unclosed parameter list", HEAD + ".entry k(.param .u64 p\n{\n}\n", 5, 1, r"got '\{'", "{"),
    ("parameter without space", HEAD + ".entry k(.u64 p)\n{\n}\n", 4, 15, r"state space", "p"),
    ("section without name", HEAD + ".section { }\n", 4, 12, r"expected '\{', got '\}'", "}"),
    ("section unclosed", HEAD + ".section .debug_info {\n.b8 1\n", 6, 1,
     r"expected '}' before end of input", None),
    ("guard without instruction", ENTRY + "\t@%p1;\n}\n", 6, 6, r"expected an instruction, got ';'", ";"),
    ("colon alone", ENTRY + "\t:\n}\n", 6, 2, r"expected an instruction", ":"),
    ("CRLF file", (ENTRY + "\tret #;\n}\n").replace("\n", "\r\n"), 6, 6, r"unexpected character '#'",
     "#"),
    # comments and numbers the lexer must not take apart
    ("unterminated comment", ENTRY + "\tret; /* never closed\n}\n", 6, 7, r"unterminated comment", "/*"),
    ("unterminated comment in directive", HEAD + ".entry k()\n.maxntid 128 /* oops\n{\n\tret;\n}\n",
     5, 14, r"unterminated comment", "/*"),
    ("unterminated comment at EOF", ".version 8.5 /* oops\n", 1, 14, r"unterminated comment", "/*"),
    ("bad hex number 0xZZ", ENTRY + "\tmov.u32 %r1, 0xZZ;\n}\n", 6, 15, r"malformed number '0xZZ'", "0xZZ"),
    ("short f32 literal", ENTRY + "\tmov.f32 %f1, 0f3F80;\n}\n", 6, 15, r"malformed number '0f3F80'",
     "0f3F80"),
    ("digits then letters", ENTRY + "\tadd.s32 %r1, %r2, 12ab;\n}\n", 6, 20, r"malformed number '12ab'",
     "12ab"),
    ("bad number in directive", HEAD + ".entry k()\n.maxntid 0xZZ\n{\n\tret;\n}\n", 5, 10,
     r"malformed number '0xZZ'", "0xZZ"),
    # a name is required, not any token
    ("guard register is ';'", ENTRY + "\t@; ret;\n}\n", 6, 3, r"expected a predicate register, got ';'",
     ";"),
    ("guard register is '{'", ENTRY + "\t@!{ ret;\n}\n", 6, 4, r"expected a predicate register, got '\{'",
     "{"),
    (".reg name is ','", ENTRY + "\t.reg .b32 ,;\n}\n", 6, 12, r"expected a register name, got ','", ","),
    (".reg name is a number", ENTRY + "\t.reg .b32 42;\n}\n", 6, 12, r"expected a register name, got '42'",
     "42"),
    ("label named ';'", ENTRY + "\t;:\n}\n", 6, 2, r"expected a label, got ';'", ";"),
    ("label is a number", ENTRY + "42:\n\tret;\n}\n", 6, 1, r"expected a label, got '42'", "42"),
    ("function named ';'", HEAD + ".func ;;\n", 4, 7, r"expected a function name, got ';'", ";"),
    ("function without name", HEAD + ".entry (.param .u64 p)\n{\n}\n", 5, 1,
     r"expected a function name, got '\{'", "{"),
    ("variable named ','", HEAD + ".global .u32 ,;\n", 4, 14, r"expected a variable name, got ','", ","),
    ("parameter named ';'", HEAD + ".entry k(.param .u64 ;)\n{\n}\n", 4, 22,
     r"expected a variable name, got ';'", ";"),
]


@pytest.mark.parametrize("text, line, column, match, at",
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_malformed_input(text, line, column, match, at) -> None:
    check(text, line, column, match, at)


def test_parse_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^<string>:6:6: unexpected character '#'"):
        jaxptx.parse(ENTRY + "\tret #;\n}\n")
    assert issubclass(ParseError, jaxptx.PtxError)


def test_long_line_excerpt_is_clipped() -> None:
    text = ENTRY + "\tmov.u32 %r1, " + "1" * 300 + " #;\n}\n"
    with pytest.raises(ParseError, match=r"^<string>:6:316: unexpected character '#'") as info:
        jaxptx.parse(text)
    err = info.value
    assert (err.line, err.column) == (6, 2 + len("mov.u32 %r1, ") + 300 + 1)
    shown, caret = err.excerpt.split("\n")
    assert len(shown) <= 2 + 160 and caret.endswith("^") and len(caret) <= 2 + 161


@pytest.mark.parametrize("value", [b".version 8.5\n", bytearray(b".version 8.5\n"), None, 42,
                                   memoryview(b"x")])
def test_non_text_input_is_a_type_error(value) -> None:
    with pytest.raises(TypeError, match=r"expected PTX text \(str\), got " + type(value).__name__):
        jaxptx.parse(value)


@pytest.mark.parametrize("text", [
    ENTRY + "{" * 5000 + "}" * 5000 + "\n}\n",
    HEAD + ".global .u32 a[1] = " + "{" * 5000 + "1" + "}" * 5000 + ";\n",
    ENTRY + "\tmov.u32 %r1, " + "!" * 5000 + "%p;\n}\n",
], ids=["blocks", "initialiser", "negations"])
def test_deep_nesting_is_a_parse_error(text) -> None:
    with pytest.raises(ParseError, match="nesting too deep"):
        jaxptx.parse(text)


def test_deep_nesting_has_a_position() -> None:
    with pytest.raises(ParseError, match="nesting too deep") as info:
        jaxptx.parse(ENTRY + "{" * 5000 + "}" * 5000 + "\n}\n")
    err = info.value
    assert err.line == 6 and err.column >= 1
    assert err.excerpt.split("\n")[1].endswith("^")


def test_crlf_excerpt_has_no_carriage_return() -> None:
    with pytest.raises(ParseError, match=r"^<string>:6:6: unexpected character '#'") as info:
        jaxptx.parse((ENTRY + "\tret #;\n}\n").replace("\n", "\r\n"))
    assert info.value.excerpt == "   ret #;\n       ^"

"""``jaxptx.check``: what it reports on hand-written cases, and how it agrees
with ptxas over the corpus (files ptxas accepts give no error; files it
rejects are flagged)."""

from __future__ import annotations

import csv
import pathlib

import pytest

from jaxptx import Diagnostic, check, parse

CORPUS = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
HEADER = ".version 8.5\n.target sm_90a\n.address_size 64\n"

# Known disagreements with ptxas 13.0, each with its reason.
KNOWN_FALSE_ERRORS: set[str] = set()
KNOWN_MISSES = {
    # ptxas itself crashes (signal 11) on this file; nothing to agree with.
    "zluda/spirv_run/implicit_param.ptx",
}


def _kernel(body: str, params: str = "") -> str:
    return HEADER + f".visible .entry k({params})\n{{\n{body}\n}}\n"


@pytest.mark.parametrize("body, message", [
    ("\t.reg .f32 %f<3>;\n\tadd.f33 %f1, %f2, %f2;", r"add.f33: unknown modifier .f33 \(did you mean .f32\?\)"),
    ("\t.reg .f32 %f<3>;\n\tfrob.f32 %f1, %f2;", r"unknown instruction 'frob'"),
    ("\t.reg .f32 %f<3>;\n\t.reg .b64 %rd<2>;\n\tadd.f32 %f1, %f2, %rd1;",
     r"add.f32 operand b: expected .f32 register or immediate, got %rd1 \(.b64\)"),
    ("\t.reg .f32 %f<3>;\n\tadd.f32 %f1, %f2, %f9;", r"add.f32: undeclared register %f9"),
    ("\tbra MISSING;", r"bra: undefined name MISSING"),
    ("\t.reg .b32 %r<2>;\n\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 32;",
     r"tcgen05.alloc.* needs sm_100a .*kernel targets sm_90a"),
    ("\t.reg .b32 %r<3>;\n\tld.global.u32 %r1, [%r2];", r"%r2 is a 32-bit register; a generic or global address needs a 64-bit one"),
])
def test_reports(body: str, message: str) -> None:
    diags = check(_kernel(body))
    assert len(diags) == 1, diags
    assert diags[0].severity == "error"
    assert diags[0].line == HEADER.count("\n") + 3 + body.count("\n")
    assert diags[0].column == 2
    import re
    assert re.search(message, diags[0].message), diags[0].message


def test_clean_kernel_and_module_rules() -> None:
    text = _kernel("\t.reg .b32 %r<3>;\n\tmov.u32 %r1, %tid.x;\n\tadd.s32 %r2, %r1, WARP_SZ;\n$L:\n\tbra $L;")
    assert check(text) == []
    assert [d.message for d in check(text.replace(".address_size 64", ".address_size 32"))] == [
        ".address_size 32: only 64-bit addressing is supported by CUDA 13 (ptxas)"]
    assert "needs 8.6 or newer" in check(text, arch="sm_100a")[0].message
    assert str(Diagnostic(3, 4, "x")) == "3:4: error: x"


def test_video_operand_selectors_are_registers() -> None:
    # `%r2.b0` selects a byte of %r2 (PTX ISA, video instructions): a use of
    # %r2, not an undeclared register.
    body = ("\t.reg .u32 %r<5>;\n\tvadd.s32.u32.s32.sat %r1.h1, %r2.b0, %r3.h1, %r4;\n"
            "\tvmin2.s32.u32.u32.add %r1.h10, %r2.h00, %r3.h22, %r4;\n"
            "\tvset4.u32.u32.ne.max %r1, %r2, %r3, %r4;")
    assert [d.message for d in check(_kernel(body))] == [
        "vset4.u32.u32.ne.max: unknown modifier .max; vset4 takes .add .eq .ge .gt .le .lt .ne .s32 .u32"]


def test_a_single_im2col_offset_may_be_written_as_a_one_element_vector() -> None:
    body = ("\t.reg .b64 %rd<2>;\n\t.reg .b32 %r<2>;\n\t.reg .b16 %h<2>;\n"
            "\t.shared .align 128 .b8 buf[1024];\n\t.shared .align 8 .b64 bar;\n"
            "\tcp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
            "[buf], [%rd1, {%r1, %r1, %r1}], [bar], {%h1};")
    assert check(_kernel(body)) == []


def test_check_accepts_a_module() -> None:
    m = parse(_kernel("\t.reg .f32 %f<2>;\n\tsqrt.f32 %f1, %f1;"))
    assert "sqrt.f32: missing its" in check(m)[0].message


def _corpus() -> list[dict[str, str]]:
    if not (CORPUS / "INDEX.tsv").exists():
        pytest.skip(f"PTX corpus not found at {CORPUS} (../shared/corpus)")
    return list(csv.DictReader(open(CORPUS / "INDEX.tsv"), delimiter="\t"))


def _arch(target: str) -> str:
    sm = target.split(",")[0].strip()
    digits = int("".join(c for c in sm[3:] if c.isdigit()))
    return sm if digits >= 75 else "sm_75"   # ptxas 13 starts at sm_75 (corpus README)


def test_agreement_with_ptxas_over_the_corpus() -> None:
    false_errors, misses = set(), set()
    for row in _corpus():
        errors = [d for d in check((CORPUS / row["path"]).read_text(), arch=_arch(row["target"]))
                  if d.severity == "error"]
        if row["ptxas_ok"] == "yes" and errors:
            false_errors.add(row["path"])
        if row["ptxas_ok"] == "no" and not errors:
            misses.add(row["path"])
    assert false_errors == KNOWN_FALSE_ERRORS
    assert misses == KNOWN_MISSES

"""The multimem family: multimem.ld_reduce / st / red and the bulk copies.

Every modifier combination of every multimem form is assembled by ptxas at
the form's minimum target and PTX version (the table sweep assembles one
example per modifier value, at a convenient target); every combination the
table refuses inside a form is refused by ptxas too. Then the validator's
messages, the parse/emit round trip, the DSL spelling and the emulator's
refusal.
"""

from __future__ import annotations

import itertools
import re

import pytest
from isa_helpers import resolve_name

from jaxptx import check, isa, kernel, ptx
from jaxptx.emit import emit
from jaxptx.errors import PtxasError
from jaxptx.isa._multimem import ENTRIES
from jaxptx.isa._resolve import _match
from jaxptx.parse import parse
from jaxptx.runtime import parse_ptxas_errors
from jaxptx.runtime import ptxas as run_ptxas
from jaxptx.types import TYPES


def _combos(inst: isa.Inst):
    """Every assignment of the form's slots (an optional slot may be absent)."""
    choices = [[None, *s.values] if s.optional else list(s.values) for s in inst.slots]
    for combo in itertools.product(*choices):
        values = {s.name: v for s, v in zip(inst.slots, combo) if v is not None}
        yield values, _match(inst, tuple(values[s.name] for s in inst.slots if s.name in values))[2]


def _minimum(inst: isa.Inst, values: dict[str, str]) -> tuple[isa.Target, tuple[int, int]]:
    """The oldest target and PTX version the table says the combination needs."""
    reqs = [inst.requires] + [r for s in inst.slots if s.name in values
                              if (r := s.requirement(values[s.name])) is not None]
    only = [r.only for r in reqs if r.only]
    target = isa.parse_target(only[0][0] if only else f"sm_{max(r.sm for r in reqs)}")
    return target, max([target.min_ptx] + [r.ptx for r in reqs])


def _line(inst: isa.Inst, values: dict[str, str], k: int) -> tuple[str, list[str]]:
    """The instruction and the registers it declares (names unique per ``k``)."""
    decls: list[str] = []

    def reg(type_name: str | None) -> str:
        t = TYPES.get(type_name or "b32")
        declared = "b32" if t is None else ("b8" if t.bits == 8 else
                                            type_name if type_name in ("f16", "f16x2", "f32", "f64")
                                            else f"b{t.bits}")
        name = f"%m{k}_{len(decls)}"
        decls.append(f".reg .{declared} {name};")
        return name

    ops = []
    r = isa.Resolved(inst, values)
    for o, want, n in zip(r.operands, r.types, r.counts):
        name = want.name if want is not None else o.type
        if "mem" in o.kinds:
            ops.append(f"[{reg('b64')}]")
        elif "vec" in o.kinds:
            ops.append("{" + ", ".join(reg(name) for _ in range(n)) + "}")
        else:
            ops.append(reg(name))
    mods = ".".join(values[s.name] for s in inst.slots if s.name in values)
    return f"{inst.opcode}.{mods} {', '.join(ops)};", decls


def _assemble(lines: dict[tuple[isa.Target, tuple[int, int]], list[tuple[str, list[str]]]]
              ) -> list[tuple[str, str | None]]:
    """Assemble each group in one module; ``(line, first error or None)`` per line."""
    out = []
    for (target, version), group in lines.items():
        text = [f".version {version[0]}.{version[1]}", f".target {target.name}", ".address_size 64",
                ".visible .entry multimem()", "{"]
        where = {}
        for line, decls in group:
            text += decls
            where[len(text) + 1] = line
            text.append(line)
        text += ["ret;", "}", ""]
        errors: dict[str, str] = {}
        try:
            run_ptxas("\n".join(text), target.name)
        except PtxasError as e:
            for d in parse_ptxas_errors(e.log):
                if d.line in where:
                    errors.setdefault(where[d.line], d.message)
        out += [(line, errors.get(line)) for line, _ in group]
    return out


def _grouped(accepted: bool) -> dict:
    groups: dict = {}
    for inst in ENTRIES:
        if inst.example is not None:         # fp8 bytes: their own example, below
            continue
        for k, (values, err) in enumerate(_combos(inst)):
            if (err is None) == accepted:
                key = _minimum(inst, values)
                groups.setdefault(key, []).append(_line(inst, values, len(groups.get(key, ()))))
    return groups


def test_every_combination_assembles_at_its_minimum_target() -> None:
    results = _assemble(_grouped(accepted=True))
    assert len(results) > 3000
    bad = [f"{line} -> {err}" for line, err in results if err is not None]
    assert not bad, "ptxas refused table forms:\n" + "\n".join(bad[:30])


def test_every_combination_the_table_refuses_ptxas_refuses() -> None:
    results = _assemble(_grouped(accepted=False))
    assert len(results) > 1000
    bad = [line for line, err in results if err is None]
    assert not bad, "the table refuses, ptxas accepts:\n" + "\n".join(bad[:30])


@pytest.mark.parametrize("line, target, version", [
    ("multimem.ld_reduce.add.acc::f16.v8.e5m2 {%b0, %b1, %b2, %b3, %b4, %b5, %b6, %b7}, [%rd0];",
     "sm_100a", (8, 6)),
    ("multimem.st.weak.global.v4.e4m3 [%rd0], {%b0, %b1, %b2, %b3};", "sm_103f", (8, 8)),
    ("multimem.ld_reduce.acquire.sys.min.v8.e4m3 {%b0, %b1, %b2, %b3, %b4, %b5, %b6, %b7}, [%rd0];",
     "sm_120a", (8, 7)),
])
def test_fp8_byte_vectors_assemble(line: str, target: str, version: tuple[int, int]) -> None:
    assert check(_module(line, target, version, ".reg .b8 %b<8>;")) == []
    run_ptxas(_module(line, target, version, ".reg .b8 %b<8>;"), target)


@pytest.mark.parametrize("body, target, version, says", [
    ("multimem.st.u32 [%rd0], %r0;", "sm_90", (8, 0), "requires PTX ISA .version 8.1"),
    ("multimem.ld_reduce.add.u32 %r0, [%rd0];", "sm_89", (8, 1), "requires .target sm_90"),
    ("multimem.ld_reduce.add.acc::f32.f16x2 %r0, [%rd0];", "sm_90", (8, 1), "requires PTX ISA .version 8.2"),
    ("multimem.st.e4m3x4 [%rd0], %r0;", "sm_120f", (8, 8), "not supported on .target 'sm_120f'"),
    ("multimem.cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r0], 16;", "sm_90", (9, 0),
     "requires PTX ISA .version 9.1"),
    ("multimem.cp.reduce.async.bulk.relaxed.gpu.global.shared::cta.bulk_group.add.u32 [%rd0], [%r0], 16;",
     "sm_90", (9, 2), "requires PTX ISA .version 9.3"),
    ("multimem.cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd0], [%r0], 16, %h0;", "sm_90a",
     (9, 1), "requires .target sm_100"),
])
def test_ptxas_and_the_table_agree_on_the_minimum(body: str, target: str, version: tuple[int, int],
                                                   says: str) -> None:
    """One step below each minimum the table states, ptxas refuses too."""
    text = _module(body, target, version)
    assert [d for d in check(text) if d.severity == "error"]
    with pytest.raises(PtxasError, match=re.escape(says)):
        run_ptxas(text, target)


def _module(body: str, target: str = "sm_90a", version: tuple[int, int] = (8, 1),
            decls: str = "") -> str:
    return (f".version {version[0]}.{version[1]}\n.target {target}\n.address_size 64\n\n"
            ".visible .entry k()\n{\n\t.reg .b16 %h<4>;\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<4>;\n"
            f"\t.reg .f32 %f<4>;\n\t.reg .f64 %fd<4>;\n\t{decls}\n\t{body}\n\tret;\n}}\n")


# --- the validator's messages --------------------------------------------------

@pytest.mark.parametrize("body, target, version, message", [
    ("multimem.st.acquire.gpu.u32 [%rd0], %r0;", "sm_90a", (8, 1),
     r"multimem\.st\.acquire\.gpu\.u32: unknown modifier \.acquire; multimem\.st takes .* \.release"),
    ("multimem.ld_reduce.add.b32 %r0, [%rd0];", "sm_90a", (8, 1),
     r"\.add needs \.u32 or \.s32 or \.u64, got \.b32"),
    ("multimem.red.and.u64 [%rd0], %rd1;", "sm_90a", (8, 1), r"\.and needs \.b32 or \.b64, got \.u64"),
    ("multimem.ld_reduce.min.f32 %f0, [%rd0];", "sm_90a", (8, 1),
     r"\.min needs \.f16 or \.bf16 or \.f16x2 or \.bf16x2, got \.f32"),
    ("multimem.st.v8.f32 [%rd0], {%f0, %f1, %f2, %f3, %f0, %f1, %f2, %f3};", "sm_90a", (8, 1),
     r"\.v8 needs \.f16 or \.bf16, got \.f32"),
    ("multimem.red.add.v2.f64 [%rd0], {%fd0, %fd1};", "sm_90a", (8, 1),
     (r"multimem\.red\.add\.v2\.f64: unknown modifier \.f64 \(did you mean \.f16\?\); "
      r"expected one of \.f16 \.bf16 \.f16x2 \.bf16x2 \.f32$")),
    ("multimem.st.v2.u32 [%rd0], {%r0, %r1};", "sm_90a", (8, 1),
     r"multimem\.st\.v2\.u32: unknown modifier \.u32 \(did you mean \.f32\?\); expected one of \.f16"),
    ("multimem.ld_reduce.relaxed.add.u32 %r0, [%rd0];", "sm_90a", (8, 1),
     r"\.relaxed needs its scope modifier"),
    ("multimem.ld_reduce.weak.gpu.add.u32 %r0, [%rd0];", "sm_90a", (8, 1),
     r"\.gpu needs \.relaxed or \.acquire, got \.weak"),
    ("multimem.red.sys.add.u32 [%rd0], %r0;", "sm_90a", (8, 1), r"\.sys needs \.relaxed or \.release$"),
    ("multimem.ld_reduce.min.acc::f32.f16x2 %r0, [%rd0];", "sm_90a", (8, 2),
     r"\.acc::f32 needs \.add, got \.min"),
    ("multimem.ld_reduce.add.acc::f32.f16x2 %r0, [%rd0];", "sm_90a", (8, 1),
     r"\(\.acc::f32\) needs PTX ISA 8\.2, kernel declares 8\.1"),
    ("multimem.ld_reduce.add.u32 %r0, [%rd0];", "sm_80", (8, 1),
     r"multimem\.ld_reduce\.add\.u32 needs sm_90 or newer, kernel targets sm_80; pass arch='sm_90'"),
    ("multimem.st.u32 [%rd0], %r0;", "sm_90a", (8, 0),
     r"multimem\.st\.u32 needs PTX ISA 8\.1, kernel declares 8\.0; pass version=\(8, 1\)"),
    ("multimem.ld_reduce.add.e5m2x4 %r0, [%rd0];", "sm_90a", (8, 6),
     (r"multimem\.ld_reduce\.add\.e5m2x4 needs sm_100a or sm_101a or .* or sm_110f, "
      r"kernel targets sm_90a; pass arch='sm_100a'")),
    ("multimem.st.e4m3x4 [%rd0], %r0;", "sm_120f", (8, 8), r"kernel targets sm_120f"),
    ("multimem.ld_reduce.add.acc::f16.v2.e4m3 {%h0, %h1}, [%rd0];", "sm_100a", (8, 6),
     r"unknown modifier \.e4m3 \(did you mean \.e4m3x4\?\); expected one of \.e5m2x4 \.e4m3x4"),
    ("multimem.cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r0], 16;", "sm_90a", (9, 0),
     r"multimem\.cp\.async\.bulk\.global\.shared::cta\.bulk_group needs PTX ISA 9\.1, kernel declares 9\.0"),
    ("multimem.cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd0], [%r0], 16, %h0;",
     "sm_90a", (9, 1), r"\(\.cp_mask\) needs sm_100 or newer, kernel targets sm_90a"),
    ("multimem.cp.async.bulk.relaxed.gpu.global.shared::cta.bulk_group [%rd0], [%r0], 16;",
     "sm_90a", (9, 3), r"\.relaxed needs \.b128"),
    ("multimem.cp.async.bulk.weak.global.shared::cta.bulk_group [%rd0], [%r0], 16;", "sm_90a",
     (9, 1), r"\(\.weak\) needs PTX ISA 9\.3, kernel declares 9\.1"),
    ("multimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f16 [%rd0], [%r0], 16;",
     "sm_90a", (9, 1), r"missing its noftz modifier \(one of \.noftz\)"),
    ("multimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.inc.u64 [%rd0], [%r0], 16;",
     "sm_90a", (9, 1), r"\.inc needs \.u32, got \.u64"),
    ("multimem.ld_reduce.add.u32 %rd0, [%rd0];", "sm_90a", (8, 1), r"operand d.*u32"),
    # ptxas 13.5 takes these two; the ISA's float multimem.red has only .add
    # and no .acc_prec, and the table follows the ISA.
    ("multimem.red.min.v2.bf16 [%rd0], {%h0, %h1};", "sm_90a", (8, 1),
     r"multimem\.red\.min\.v2\.bf16: unknown modifier \.v2; expected one of \.b32"),
    ("multimem.red.add.acc::f32.f16x2 [%rd0], %r0;", "sm_90a", (8, 2),
     r"unknown modifier \.acc::f32; multimem\.red takes \.add"),
])
def test_check_refuses(body: str, target: str, version: tuple[int, int], message: str) -> None:
    errors = [d.message for d in check(_module(body, target, version)) if d.severity == "error"]
    assert errors, body
    assert any(re.search(message, e) for e in errors), errors


def test_check_knows_multimem() -> None:
    text = _module("multimem.ld_reduce.relaxed.gpu.global.add.u32 %r0, [%rd0];")
    assert check(text) == []
    assert check(text.replace("ld_reduce", "ld_reduc"))[0].message.startswith(
        "multimem.ld_reduc.relaxed.gpu.global.add.u32: unknown instruction")


def test_resolution_shapes() -> None:
    r = resolve_name("multimem.ld_reduce.add.acc::f32.v4.bf16x2")
    assert [o.name for o in r.operands] == ["d", "a"] and r.counts[0] == 4
    assert r.types[0].name == "bf16x2"
    r = resolve_name("multimem.st.v2.e4m3x4")
    assert r.types[1].name == "b32" and r.counts[1] == 2
    r = resolve_name("multimem.cp.async.bulk.global.shared::cta.bulk_group.cp_mask")
    assert [o.name for o in r.operands] == ["dst", "src", "size", "byte_mask"]
    assert resolve_name("multimem.red.release.sys.global.add.f64").inst.sim == "multimem_red"


# --- round trip and the DSL ---------------------------------------------------------

ROUND_TRIP = """.version 9.3
.target sm_100a
.address_size 64

.visible .entry multimem_ops()
{
\t.reg .b16 %h<4>;
\t.reg .b32 %r<5>;
\t.reg .b64 %rd<3>;
\t.reg .f32 %f<5>;
\t.reg .f64 %fd<2>;

\tmultimem.ld_reduce.add.u32 %r1, [%rd1];
\tmultimem.ld_reduce.acquire.gpu.global.add.acc::f32.v4.bf16x2 {%r1, %r2, %r3, %r4}, [%rd1+16];
\tmultimem.ld_reduce.weak.add.acc::f16.e4m3x4 %r1, [%rd1];
\tmultimem.st.relaxed.sys.global.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};
\tmultimem.st.weak.v2.e5m2x2 [%rd1], {%h1, %h2};
\tmultimem.red.release.cluster.global.add.f64 [%rd1], %fd1;
\tmultimem.red.xor.b64 [%rd1], %rd2;
\tmultimem.cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 256;
\tmultimem.cp.async.bulk.relaxed.gpu.global.shared::cta.bulk_group.cp_mask.b128 [%rd1], [%r1], %r2, %h1;
\tmultimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%rd1], [%r1], 256;
\tmultimem.cp.reduce.async.bulk.relaxed.cta.global.shared::cta.bulk_group.max.s64 [%rd1], [%rd2], 64;
\tret;
}
"""


def test_parse_emit_round_trip_and_ptxas() -> None:
    module = parse(ROUND_TRIP)
    assert emit(module) == ROUND_TRIP
    assert check(module) == []
    run_ptxas(ROUND_TRIP, "sm_100a")


@kernel(arch="sm_90a", block=(32, 1, 1))
def multimem_kernel(out):
    a = out.ptr
    x = ptx.multimem.ld_reduce.relaxed.gpu.global_.add.u32(a)
    h0, h1 = ptx.multimem.ld_reduce.add.acc__f32.v2.bf16x2(a)
    ptx.multimem.st.release.sys.u32(a, x)
    ptx.multimem.red.relaxed.cta.global_.add.v2.bf16x2(a, (h0, h1))
    ptx.multimem.red.and_.b32(a, x)


def test_dsl_spells_the_same_text() -> None:
    text = multimem_kernel.ptx()
    for line in ("multimem.ld_reduce.relaxed.gpu.global.add.u32 %r1, [%rd2];",
                 "multimem.ld_reduce.add.acc::f32.v2.bf16x2 {%r2, %r3}, [%rd2];",
                 "multimem.st.release.sys.u32 [%rd2], %r1;",
                 "multimem.red.relaxed.cta.global.add.v2.bf16x2 [%rd2], {%r2, %r3};",
                 "multimem.red.and.b32 [%rd2], %r1;"):
        assert line in text, text
    assert check(text) == []
    run_ptxas(text, "sm_90a")
    assert "multimem" in ptx.multimem.ld_reduce.doc

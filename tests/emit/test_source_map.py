"""``emit.source_map``: where the text ``emit`` writes puts each instruction,
the one derivation of PTX lines that faults, the precheck and the JAX CPU
path's messages read; and the typed locations nodes carry."""

from __future__ import annotations

import pathlib

import pytest

from jaxptx import ir, kernel, parse, ptx, reg
from jaxptx.emit import emit, source_map
from jaxptx.sim.faults import python_line
from jaxptx.types import u32

CORPUS = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def _instructions(module: ir.Module) -> list[ir.Instruction]:
    return [s for f in module.functions for s in ir.walk(f.body or []) if isinstance(s, ir.Instruction)]


HAND = """.version 8.5
.target sm_90a
.address_size 64
// a comment line
.visible .entry k(.param .u64 p)
{
    .reg .pred %p<2>; .reg .b32 %r<3>;
    mov.u32   %r1, %tid.x;
  @%p1  add.u32 %r2, %r1, 1;   /* guarded: located at the opcode */
    { mov.u32 %r2, 0; }
    ret;
}
"""


@pytest.mark.parametrize("style", ["source", "canonical"])
def test_every_instruction_is_where_the_parser_finds_it(style):
    module = parse(HAND)
    mapped = source_map(module, style)
    assert mapped.text == emit(module, style)
    again = parse(mapped.text)
    for original, reparsed in zip(_instructions(module), _instructions(again)):
        loc = mapped.ptx(original)
        assert (loc.line, loc.column) == (reparsed.loc.line, reparsed.loc.column)
    if style == "source":
        guarded = _instructions(module)[1]
        assert mapped.ptx(guarded) == ir.PtxLocation("<emit>", 9, 9)       # `add`, after `@%p1  `
        assert mapped.at_line(9) is guarded and mapped.line_text(9).startswith("  @%p1  add.u32")


def test_the_whole_corpus_maps_as_it_parses():
    """Byte-exact text keeps every parsed location; the canonical text is
    where a parse of it finds each instruction (421 files)."""
    files = sorted(CORPUS.rglob("*.ptx"))
    if not files:
        pytest.skip(f"PTX corpus not found at {CORPUS} (../shared/corpus)")
    checked = 0
    for path in files:
        text = path.read_text()
        try:
            module = parse(text)
        except Exception:       # noqa: BLE001 - files the parser refuses are the parser tests' business
            continue
        mapped = source_map(module)
        assert mapped.text == text
        for ins in _instructions(module):
            assert (mapped.ptx(ins).line, mapped.ptx(ins).column) == (ins.loc.line, ins.loc.column), path
        canonical = source_map(module, "canonical")
        for ins, again in zip(_instructions(module), _instructions(parse(canonical.text))):
            assert canonical.ptx(ins).line == again.loc.line, path
            checked += 1
    assert checked > 10_000


@kernel(arch="sm_90a", block=(32, 1, 1))
def _traced():
    a = reg.scalar(u32)
    ptx.mov.u32(a, 1)                        # the line python_line names
    ptx.add.u32(a, a, 2)


def test_a_traced_kernel_maps_its_ptx_lines_to_python_lines():
    module = _traced.specialize().module
    mapped = source_map(module)
    mov = _instructions(module)[0]
    assert isinstance(mov.loc, ir.PythonLocation) and mov.loc.file == __file__
    line = mapped.ptx(mov).line
    assert mapped.line_text(line).strip().startswith("mov.u32")
    assert mapped.python(line) == mov.loc
    assert python_line(module, line) == (__file__, mov.loc.line)
    assert python_line(module, line, short=True) == ("test_source_map.py", mov.loc.line)
    assert python_line(module, 1) is None


def test_locations_are_typed_and_read_the_same_everywhere():
    ptx_loc, py_loc = ir.PtxLocation("k.ptx", 12, 5), ir.PythonLocation("/x/y/kern.py", 40)
    assert (str(ptx_loc), str(py_loc)) == ("PTX line 12", "kern.py:40")
    assert ir.ptx_line(ptx_loc) == 12 and ir.ptx_line(py_loc) is None and ir.ptx_line(None) is None
    assert ir.python_location(py_loc) is py_loc and ir.python_location(ptx_loc) is None
    assert ir.python_location(("/a.py", 3)) == ir.PythonLocation("/a.py", 3)     # a plain pair reads as one
    assert all(isinstance(i.loc, ir.PtxLocation) for i in _instructions(parse(HAND)))

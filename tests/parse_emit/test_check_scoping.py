"""Labels and registers belong to the ``{ }`` block that declares them (PTX
ISA "Scope"): check agrees with ptxas on reuse, shadowing, sibling-block
branches and duplicates; the transpiler keeps scoped labels apart."""

from __future__ import annotations

import pytest

import jaxptx
from jaxptx.codegen import to_python
from jaxptx.errors import PtxasError
from jaxptx.runtime import ptxas

_HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n  .reg .b32 %r<3>;\n"
_WAIT = """  {
    .reg .pred P1;
  LAB_WAIT:
    add.u32 %r1, %r1, 1;
    setp.ge.u32 P1, %r1, 10;
    @P1 bra.uni DONE;
    bra.uni LAB_WAIT;
  DONE:
  }
"""


def _kernel(body: str) -> str:
    return _HEAD + body + "  ret;\n}\n"


@pytest.mark.parametrize("body, message, ptxas_says", [
    ("  L: add.u32 %r1, %r1, 1;\n  L: add.u32 %r1, %r1, 1;\n", "duplicate definition of label L",
     "Duplicate definition of label 'L'"),
    ("  { bra.uni IN; }\n  { IN: add.u32 %r1, %r1, 1; }\n", "undefined name IN", "Unknown symbol 'IN'"),
    ("  { L: add.u32 %r1, %r1, 1; }\n  bra.uni L;\n", "undefined name L", "Unknown symbol 'L'"),
    ("  { .reg .b32 t; .reg .b32 t; }\n", "duplicate definition of register t",
     "Duplicate definition of variable 't'"),
])
def test_what_ptxas_refuses_check_reports(body, message, ptxas_says):
    text = _kernel(body)
    with pytest.raises(PtxasError, match=r"ptxas: line \d+: " + ptxas_says):
        ptxas(text, "sm_90a")
    assert any(message in d.message for d in jaxptx.check(text))


@pytest.mark.parametrize("body", [
    _WAIT * 30,
    "  { L: add.u32 %r1, %r1, 1; }\n  { L: add.u32 %r1, %r1, 1; }\n",
    "  L: { bra.uni L; }\n",
    "  { .reg .b32 t; }\n  { .reg .b32 t; }\n",
])
def test_what_ptxas_accepts_check_accepts(body):
    text = _kernel(body)
    ptxas(text, "sm_90a")
    assert jaxptx.check(text) == []


def test_the_transpiler_keeps_repeated_scoped_labels_apart():
    text = _kernel(_WAIT * 5)
    module = jaxptx.parse(text)
    namespace: dict = {}
    exec(compile(to_python(module, "k"), "<transpiled>", "exec"), namespace)
    kernel = namespace["k"]
    assert kernel.module() == module
    ptxas(kernel.ptx(), "sm_90a")


def test_a_branch_target_list_may_start_on_the_next_line():
    text = _kernel("""  mov.u32 %r1, 1;
JT:
\t.branchtargets
\t\tA,
\t\tB;
  brx.idx %r1, JT;
A:
  add.u32 %r1, %r1, 1;
B:
""")
    module = jaxptx.parse(text)
    assert jaxptx.emit(module) == text and jaxptx.check(module) == []
    directive = next(s for s in module.functions[0].body if isinstance(s, jaxptx.ir.Directive))
    assert [a for a in directive.args if a != ","] == ["A", "B"]
    ptxas(text, "sm_90a")

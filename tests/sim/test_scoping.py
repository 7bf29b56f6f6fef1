"""PTX scoping in the emulator: labels and registers belong to the ``{ }``
block that declares them (PTX ISA "Scope")."""

import numpy as np

from jaxptx import sim
from jaxptx.runtime import ptxas

_HEAD = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, 0;
"""

# CUTLASS's inline-assembly wait loop, as it appears once per inlined call.
_WAIT_LOOP = """  {{
    .reg .pred P1;
  LAB_WAIT:
    add.u32 %r1, %r1, {step};
    setp.ge.u32 P1, %r1, {bound};
    @P1 bra.uni DONE;
    bra.uni LAB_WAIT;
  DONE:
  }}
"""


def _kernel(body: str) -> str:
    return _HEAD + body + "  st.global.u32 [%rd1], %r1;\n  ret;\n}\n"


def _run(text: str) -> int:
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, grid=(1, 1, 1), block=(32, 1, 1))
    return int(out[0])


def test_a_scoped_wait_loop_repeated_many_times_runs_each_copy():
    steps = [(k % 7 + 1, 0) for k in range(40)]
    body, expected = "", 0
    for step, _ in steps:
        bound = expected + 3 * step
        body += _WAIT_LOOP.format(step=step, bound=bound)
        while expected < bound:          # the loop in Python
            expected += step
    text = _kernel(body)
    ptxas(text, "sm_90a")
    assert _run(text) == expected


def test_a_nested_label_shadows_the_enclosing_one():
    body = """  bra.uni L;
  {
    bra.uni L;          // the inner L: adds 1
    add.u32 %r1, %r1, 100;
  L:
    add.u32 %r1, %r1, 1;
    bra.uni OUT;
  }
  L:
    add.u32 %r1, %r1, 1000;   // reached first, then the block runs
    bra.uni INNER_DONE;
  INNER_DONE:
  OUT:
"""
    # Flow: bra L (outer) -> +1000 -> falls to OUT -> store 1000.
    text = _kernel(body)
    ptxas(text, "sm_90a")
    assert _run(text) == 1000


def test_a_branch_from_an_inner_block_reaches_an_outer_label():
    body = """  {
    add.u32 %r1, %r1, 1;
    bra.uni SKIP;
    add.u32 %r1, %r1, 100;
  }
  add.u32 %r1, %r1, 100;
SKIP:
  add.u32 %r1, %r1, 10;
"""
    text = _kernel(body)
    ptxas(text, "sm_90a")
    assert _run(text) == 11


def test_sibling_blocks_may_reuse_register_names():
    body = """  {
    .reg .b32 t;
    mov.u32 t, 5;
    add.u32 %r1, %r1, t;
  }
  {
    .reg .b32 t;
    mov.u32 t, 7;
    add.u32 %r1, %r1, t;
  }
"""
    text = _kernel(body)
    ptxas(text, "sm_90a")
    assert _run(text) == 12


def test_a_huge_register_range_costs_only_the_registers_used():
    import time

    from jaxptx import ir
    from jaxptx.parse import parse
    from jaxptx.sim.core.prepare import prepare
    module = parse(_kernel(""))
    decl = next(s for s in module.functions[0].body if isinstance(s, ir.RegDecl) and s.type == "b32")
    decl.names = (ir.RegName("%r", 999_999_999),)     # .reg .b32 %r<999999999>;
    start = time.perf_counter()
    program = prepare(module, None, None)
    assert time.perf_counter() - start < 1.0
    assert [n for n in program.registers if n.startswith("%r") and not n.startswith("%rd")] == ["%r1"]

"""PTX → Python for the legacy initialisers: sampler, texture and surface
fields (``ir.Field``) and ``generic(g)`` addresses (``ir.Generic``) are
written as IR nodes, and the generated kernel traces back to the input (IR
equal to the parse, text equal to the canonical emission), plain and with
--sugar; ptxas accepts the retraced text."""

from __future__ import annotations

import pytest

from jaxptx import emit, parse
from jaxptx.codegen import to_python
from jaxptx.runtime import ptxas

TEXT = """.version 7.0
.target sm_75, texmode_independent
.address_size 64

.global .samplerref s = { addr_mode_0 = clamp_to_border, filter_mode = nearest };
.global .samplerref s_pair[2] = { { filter_mode = nearest }, { force_unnormalized_coords = 1 } };
.global .texref t = { width = 0x40, height = 8*2 };
.global .surfref su = {};
.global .align 4 .u32 g[4] = {1, 2, 3, 4};
.global .align 8 .u64 p[3] = {generic(g), generic(g)+4, generic(g)+(2*2)};
.const .u64 c_p = generic(g);

.visible .entry k()
{
	ret;
}
"""


@pytest.mark.parametrize("sugar", [False, True], ids=["plain", "sugar"])
def test_the_transpiled_kernel_traces_back(sugar):
    module = parse(TEXT)
    source = to_python(module, "k", sugar=sugar)
    assert "ir.Field('addr_mode_0', 'clamp_to_border')" in source
    assert "ir.Field('height', ptx.imm('16'))" in source
    assert "init=(ir.Generic('g'), ir.Generic('g', 4), ir.Generic('g', ptx.imm('4')),)" in source
    assert "ptx.declare('global', 'surfref', 'su', init=())" in source
    namespace: dict = {}
    exec(compile(source, "<transpiled>", "exec"), namespace)
    kernel = namespace["k"]
    assert kernel.module() == module
    assert kernel.ptx() == emit(module, style="canonical")
    ptxas(kernel.ptx(), "sm_75")

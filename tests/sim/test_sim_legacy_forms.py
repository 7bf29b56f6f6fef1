"""Legacy module forms on the emulator: texture, sampler and surface
variables no instruction uses are skipped (one that an instruction uses is
refused naming the line); ``generic(g)`` initialisers hold the generic
address of ``g``; calls of bodiless functions other than the builtins
(``__assertfail``, ``malloc``, ``free``, any ``.extern .func``) are refused
before anything runs, each naming the function and its PTX line."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx
from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import Device, PrecheckError
from jaxptx.sim.memory.spaces import CONST_WINDOW

HEAD = ".version 8.0\n.target sm_80{mode}\n.address_size 64\n"


def kernel(decls: str, body: str, mode: str = "") -> str:
    """Module ``decls`` and an entry whose ``body`` leaves out[0..2] in
    %rd2, %rd3, %rd4 (the body starts on PTX line 14 plus decls' lines)."""
    return HEAD.format(mode=mode) + decls + """.visible .entry k(.param .u64 out)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [out];
	mov.u64 %rd2, 0;
	mov.u64 %rd3, 0;
	mov.u64 %rd4, 0;
""" + body + """	st.global.u64 [%rd1], %rd2;
	st.global.u64 [%rd1+8], %rd3;
	st.global.u64 [%rd1+16], %rd4;
	ret;
}
"""


OPAQUE = """.global .texref tex_a;
.global .samplerref smp = { addr_mode_0 = clamp_to_border, filter_mode = nearest };
.global .samplerref smp_pair[2] = { { filter_mode = nearest }, { filter_mode = linear } };
.global .surfref surf_a = { width = 16 };
"""


def test_unused_texture_sampler_and_surface_variables_are_skipped():
    # It used to refuse the module: "tex_a: variables of type .texref are not supported".
    text = kernel(OPAQUE, "\tmov.u64 %rd2, 7;\n", mode=", texmode_independent")
    ptxas(text, "sm_80")
    out = np.zeros(3, np.uint64)
    sim.launch(text, out)
    assert out.tolist() == [7, 0, 0]


# Unified texture mode (the default): a .texref carries its sampler state.
USED = """.global .texref tex_a;
.global .surfref surf_a;
"""


@pytest.mark.parametrize("use, message", [
    ("\ttex.2d.v4.f32.s32 {%f1, %f2, %f3, %f4}, [tex_a, {%r1, %r1}];\n",
     r"PTX line 18: tex.2d.v4.f32.s32: uses .texref tex_a; the emulator has no texture, sampler or surface "
     r"units\n      tex.2d.v4.f32.s32 \{%f1, %f2, %f3, %f4\}, \[tex_a, \{%r1, %r1\}\];"),
    ("\tsust.b.1d.b32.trap [surf_a, {%r1}], {%r2};\n",
     r"PTX line 18: sust.b.1d.b32.trap: uses .surfref surf_a; the emulator has no texture, sampler or "
     r"surface units"),
])
def test_an_instruction_that_uses_one_is_refused_naming_the_line(use, message):
    text = kernel(USED, "\tmov.u32 %r1, 0;\n\tmov.u32 %r2, 0;\n" + use)
    ptxas(text, "sm_80")
    out = np.full(3, 99, np.uint64)
    with pytest.raises(PrecheckError, match=message) as e:
        sim.launch(text, out)
    assert [p.line for p in e.value.problems if p.emulator] == [18]
    assert out.tolist() == [99, 99, 99]


GENERIC = """.global .align 4 .u32 g[4] = {10, 20, 30, 40};
.const .align 4 .u32 c[4] = {5, 6, 7, 8};
.global .align 8 .u64 p[3] = {generic(g), generic(g)+0, g};
.global .align 8 .u64 pc[2] = {generic(c), generic(c)+(2*4)};
.const .align 8 .u64 c_pc = c+4;
"""


def test_generic_initialisers_hold_the_generic_address():
    body = """	ld.global.u64 %rd2, [p];
	ld.global.u64 %rd3, [p+8];
	ld.global.u64 %rd4, [p+16];
"""
    text = kernel(GENERIC, body)
    ptxas(text, "sm_80")
    device = Device()
    out = device.alloc(24)
    device.launch(text, [out])
    g = device.global_address(text, "g")
    assert np.frombuffer(device.read(out, 24), np.uint64).tolist() == [g, g, g]


def test_loads_through_generic_initialisers_read_the_variables():
    # pc[0] is c's generic address (in the const window), pc[1] that plus 8;
    # c_pc is c's offset in the const space plus 4.
    body = """	ld.global.u64 %rd5, [p];
	ld.u32 %r1, [%rd5+4];
	cvt.u64.u32 %rd2, %r1;
	ld.global.u64 %rd5, [pc+8];
	ld.u32 %r1, [%rd5];
	cvt.u64.u32 %rd3, %r1;
	ld.const.u64 %rd5, [c_pc];
	ld.const.u32 %r1, [%rd5];
	cvt.u64.u32 %rd4, %r1;
"""
    text = kernel(GENERIC, body)
    ptxas(text, "sm_80")
    out = np.zeros(3, np.uint64)
    sim.launch(text, out)
    assert out.tolist() == [20, 7, 6]
    pc = np.zeros(3, np.uint64)
    sim.launch(kernel(GENERIC, "\tld.global.u64 %rd2, [pc];\n\tld.global.u64 %rd3, [pc+8];\n"), pc)
    assert pc[:2].tolist() == [CONST_WINDOW, CONST_WINDOW + 8]     # c is the first .const variable


def test_a_global_address_plus_an_offset_is_filled_in_at_the_launch():
    text = kernel(".global .u32 g[4];\n.global .u64 p[2] = {generic(g)+4, g};\n",
                  "\tld.global.u64 %rd2, [p];\n\tld.global.u64 %rd3, [p+8];\n\tmov.u64 %rd4, g;\n")
    ptxas(text, "sm_80")
    out = np.zeros(3, np.uint64)
    sim.launch(text, out)
    assert out[0] == out[2] + 4 and out[1] == out[2] and out[2] != 0


SYSTEM = """.extern .func __assertfail
(
	.param .b64 __assertfail_param_0,
	.param .b64 __assertfail_param_1,
	.param .b32 __assertfail_param_2,
	.param .b64 __assertfail_param_3,
	.param .b64 __assertfail_param_4
)
;
.extern .func  (.param .b64 func_retval0) malloc
(
	.param .b64 malloc_param_0
)
;
.extern .func free
(
	.param .b64 free_param_0
)
;
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
"""

# Never taken: the calls used to pass until one ran ("call of malloc: the emulator runs ...").
CALLS = """	setp.eq.u64 %p1, %rd1, 0;
	@!%p1 bra DONE;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	.param .b64 retval0;
	call.uni (retval0), malloc, (param0);
	ld.param.b64 %rd2, [retval0+0];
	call.uni free, (param0);
	.param .b32 param2;
	st.param.b32 [param2+0], %r1;
	call.uni __assertfail, (param0, param0, param2, param0, param0);
	}
DONE:
"""


def test_calls_of_system_functions_the_emulator_does_not_run_are_refused_up_front():
    text = kernel(SYSTEM, CALLS)
    ptxas(text, "sm_80")
    assert [d for d in jaxptx.check(text) if d.severity == "error"] == []    # legal PTX
    out = np.full(3, 99, np.uint64)
    with pytest.raises(PrecheckError, match=(
            r"k: refused before running: 2 that the emulator cannot run\n"
            r"  PTX line 45: call.uni: calls malloc, which the module declares without a body; the emulator "
            r"runs direct calls of functions defined in the module and the builtins __assertfail, vprintf\n"
            r"      call.uni \(retval0\), malloc, \(param0\);\n"
            r"  PTX line 47: call.uni: calls free, .*\n      call.uni free, \(param0\);$")) as e:
        sim.launch(text, out)     # __assertfail (line 50) is a builtin: a failed device assert
    assert [p.emulator for p in e.value.problems] == [True] * 2
    assert out.tolist() == [99, 99, 99]


def test_a_call_in_a_function_the_entry_never_calls_is_not_refused():
    helper = SYSTEM + """.func never()
{
	.reg .b64 %rd<2>;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	call.uni free, (param0);
	}
	ret;
}
"""
    out = np.zeros(3, np.uint64)
    sim.launch(kernel(helper, "\tmov.u64 %rd2, 5;\n"), out)
    assert out.tolist() == [5, 0, 0]


def test_a_call_through_a_register_is_refused_up_front():
    body = """	setp.eq.u64 %p1, %rd1, 0;
	@!%p1 bra DONE;
	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	prototype_0 : .callprototype ()_ (.param .b64 _);
	call.uni %rd1, (param0), prototype_0;
	}
DONE:
"""
    text = kernel(SYSTEM, body)
    ptxas(text, "sm_80")
    with pytest.raises(PrecheckError, match=r"PTX line 45: call.uni: calls through %rd1; the emulator runs direct "
                                            r"calls of functions defined in the module and the builtins __assertfail, vprintf"):
        sim.launch(text, np.zeros(3, np.uint64))

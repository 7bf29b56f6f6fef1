"""Device printf on the emulator: ``vprintf`` calls as nvcc and Triton write
them print their formatted text to the host's stdout (from Python: capsys),
one line per calling thread in ascending global thread order, each call in
execution order, and return the number of arguments parsed (CUDA C++
Programming Guide, "Formatted Output")."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas

_VPRINTF = """.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
"""


def _string(name: str, text: bytes) -> str:
    """A NUL-terminated string as nvcc writes it: a global byte array."""
    data = text + b"\0"
    return f".global .align 1 .b8 {name}[{len(data)}] = {{{', '.join(str(b) for b in data)}}};\n"


# nvcc 12's shape for
#   __global__ void k(long long *x, float f, int *ret) {
#     ret[blockIdx.x * blockDim.x + threadIdx.x] =
#         printf("cta %d tid %d f %f ll %lld s %s x %x\n", blockIdx.x, threadIdx.x, f, x[threadIdx.x], "hi", threadIdx.x);
#   }
# the arguments stored to a local depot at 4/8-byte aligned offsets.
_NVCC = (""".version 8.4
.target sm_80
.address_size 64

	// .globl	k
""" + _VPRINTF + _string("$str", b"cta %d tid %d f %f ll %lld s %s x %x\n") + _string("$str$1", b"hi") + """
.visible .entry k(
	.param .u64 k_param_0,
	.param .f32 k_param_1,
	.param .u64 k_param_2
)
{
	.local .align 8 .b8 	__local_depot0[48];
	.reg .b64 	%SP;
	.reg .b64 	%SPL;
	.reg .b32 	%r<7>;
	.reg .f32 	%f<2>;
	.reg .b64 	%rd<16>;
	.reg .f64 	%fd<2>;


	mov.u64 	%SPL, __local_depot0;
	cvta.local.u64 	%SP, %SPL;
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.f32 	%f1, [k_param_1];
	ld.param.u64 	%rd12, [k_param_2];
	add.u64 	%rd2, %SP, 0;
	add.u64 	%rd3, %SPL, 0;
	cvta.to.global.u64 	%rd4, %rd1;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r3, %ctaid.x;
	cvt.f64.f32 	%fd1, %f1;
	mul.wide.u32 	%rd5, %r1, 8;
	add.s64 	%rd6, %rd4, %rd5;
	ld.global.u64 	%rd7, [%rd6];
	mov.u64 	%rd8, $str$1;
	cvta.global.u64 	%rd9, %rd8;
	st.local.u32 	[%rd3], %r3;
	st.local.u32 	[%rd3+4], %r1;
	st.local.f64 	[%rd3+8], %fd1;
	st.local.u64 	[%rd3+16], %rd7;
	st.local.u64 	[%rd3+24], %rd9;
	st.local.u32 	[%rd3+32], %r1;
	mov.u64 	%rd10, $str;
	cvta.global.u64 	%rd11, %rd10;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd11;
	.param .b64 param1;
	st.param.b64 	[param1+0], %rd2;
	.param .b32 retval0;
	call.uni (retval0), 
	vprintf, 
	(
	param0, 
	param1
	);
	ld.param.b32 	%r2, [retval0+0];
	} // callseq 0
	mov.u32 	%r4, %ntid.x;
	mad.lo.s32 	%r5, %r3, %r4, %r1;
	cvta.to.global.u64 	%rd13, %rd12;
	mul.wide.u32 	%rd14, %r5, 4;
	add.s64 	%rd15, %rd13, %rd14;
	st.global.u32 	[%rd15], %r2;
	ret;

}
""")


def test_ptxas_accepts_the_nvcc_shaped_printf_kernel():
    ptxas(_NVCC, "sm_80")


def test_nvcc_printf_prints_each_thread_in_cta_then_thread_order_and_returns_the_argument_count(capsys):
    x = np.array([0, -1, 10**12], np.int64)
    ret = np.zeros(6, np.int32)
    sim.launch(_NVCC, x, np.float32(1.5), ret, grid=(2, 1, 1), block=(3, 1, 1))
    assert capsys.readouterr().out == (
        "cta 0 tid 0 f 1.500000 ll 0 s hi x 0\n"
        "cta 0 tid 1 f 1.500000 ll -1 s hi x 1\n"
        "cta 0 tid 2 f 1.500000 ll 1000000000000 s hi x 2\n"
        "cta 1 tid 0 f 1.500000 ll 0 s hi x 0\n"
        "cta 1 tid 1 f 1.500000 ll -1 s hi x 1\n"
        "cta 1 tid 2 f 1.500000 ll 1000000000000 s hi x 2\n")
    assert ret.tolist() == [6] * 6           # six conversions, six arguments parsed


# A kernel printing with format `fmt` from an argument buffer the host
# fills (a global array: its address is generic too), storing vprintf's
# result to `ret`.
def _buffer_kernel(fmt: bytes | None, calls: int = 1) -> str:
    load_fmt = "\tmov.u64 %rd4, 0;\n" if fmt is None else "\tmov.u64 %rd3, $str;\n\tcvta.global.u64 %rd4, %rd3;\n"
    call = """	{
	.param .b64 param0;
	st.param.b64 [param0+0], %rd4;
	.param .b64 param1;
	st.param.b64 [param1+0], %rd1;
	.param .b32 retval0;
	call.uni (retval0), vprintf, (param0, param1);
	ld.param.b32 %r1, [retval0+0];
	}
"""
    return (".version 8.0\n.target sm_80\n.address_size 64\n\n" + _VPRINTF
            + ("" if fmt is None else _string("$str", fmt)) + """
.visible .entry k(
	.param .u64 k_param_0,
	.param .u64 k_param_1
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<6>;

	ld.param.u64 %rd1, [k_param_0];
	ld.param.u64 %rd2, [k_param_1];
""" + load_fmt + call * calls + """	cvta.to.global.u64 %rd5, %rd2;
	st.global.u32 [%rd5], %r1;
	ret;
}
""")


def _print(fmt: bytes | None, layout: str, *values, capsys) -> tuple[str, int]:
    """Run the buffer kernel on one thread with ``values`` packed as
    ``struct`` ``layout`` in native alignment (as CUDA lays out the buffer)."""
    buf = np.frombuffer(struct.pack("@" + layout, *values) + bytes(8), np.uint8).copy()
    ret = np.full(1, 99, np.int32)
    sim.launch(_buffer_kernel(fmt), buf, ret, grid=(1, 1, 1), block=(1, 1, 1))
    return capsys.readouterr().out, int(ret[0])


@pytest.mark.parametrize("fmt, layout, values, expected, count", [
    (b"%d %i %u\n", "iii", (-5, -5, -5), "-5 -5 4294967291\n", 3),
    (b"%x %X %o %#x %#o %#x\n", "iiiiii", (255, 255, 255, 255, 255, 0), "ff FF 377 0xff 0377 0\n", 6),
    (b"[%5d|%-5d|%05d|%+d|% d|%.3d]\n", "iiiiii", (42, 42, 42, 42, 42, 7),
     "[   42|42   |00042|+42| 42|007]\n", 6),
    (b"%d %lld %ld %lu %llx\n", "iqqQQ", (1, -2, -3, 2**64 - 1, 2**40),
     "1 -2 -3 18446744073709551615 10000000000\n", 5),
    (b"%hd %hhu\n", "ii", (65537, 257), "1 1\n", 2),
    (b"%c%c%c\n", "iii", (72, 105, 33), "Hi!\n", 3),
    (b"%f %e %g %.3f %10.2e %G %a\n", "ddddddd", (1.5, 1234.5, 0.0001, 2.0 / 3, -1e-10, 1e20, 1.0),
     "1.500000 1.234500e+03 0.0001 0.667  -1.00e-10 1E+20 0x1p+0\n", 7),
    (b"%f %F %e\n", "ddd", (float("inf"), float("-inf"), float("nan")), "inf -INF nan\n", 3),
    (b"%lf\n", "d", (0.25,), "0.250000\n", 1),
    (b"%p %p\n", "QQ", (0x1234, 0), "0x1234 (nil)\n", 2),
    (b"100%% done\n", "", (), "100% done\n", 0),
    (b"[%*d] [%-*d]\n", "iiii", (6, 7, 4, 8), "[     7] [8   ]\n", 4),
    (b"%s|\n", "Q", (0,), "(null)|\n", 1),
])
def test_conversions_format_as_the_host_c_library_does(fmt, layout, values, expected, count, capsys):
    assert _print(fmt, layout, *values, capsys=capsys) == (expected, count)


def test_each_argument_is_aligned_to_its_size(capsys):
    # int at 0, long long at 8 (not 4), int at 16, double at 24.
    assert _print(b"%d %lld %d %f\n", "iqid", 1, 2, 3, 4.0, capsys=capsys) == ("1 2 3 4.000000\n", 4)


def test_at_most_32_arguments_are_read_and_later_conversions_print_as_written(capsys):
    fmt = b"%d," * 34 + b"\n"
    text, count = _print(fmt, "i" * 32, *range(32), capsys=capsys)
    assert text == "".join(f"{k}," for k in range(32)) + "%d,%d,\n"
    assert count == 32


def test_a_null_format_prints_nothing_and_returns_minus_one(capsys):
    buf = np.zeros(8, np.uint8)
    ret = np.zeros(1, np.int32)
    sim.launch(_buffer_kernel(None), buf, ret, grid=(1, 1, 1), block=(1, 1, 1))
    assert capsys.readouterr().out == ""
    assert ret[0] == -1


@pytest.mark.parametrize("fmt, message", [
    (b"%d then %n\n", r"vprintf with format \"%d then %n\\n\": conversion '%n' is not supported"),
    (b"%Lf\n", r"conversion '%Lf': the size 'L' is not supported with %f"),
    (b"%.*d\n", r"conversion '%.\*d': a '\*' precision is not supported"),
    (b"%5", r"the format ends inside the conversion '%5'"),
    (b"%lc\n", r"conversion '%lc': the size 'l' is not supported with %c"),
])
def test_an_unsupported_conversion_is_an_error_naming_the_call_and_the_conversion(fmt, message, capsys):
    with pytest.raises(sim.SimError, match=message + r".*\[PTX line 31\]"):
        _print(fmt, "q", 0, capsys=capsys)
    assert capsys.readouterr().out == ""        # nothing half-printed


def test_two_calls_print_in_execution_order_every_thread_then_the_next_call(capsys):
    buf = np.frombuffer(struct.pack("@i", 7) + bytes(12), np.uint8).copy()
    ret = np.zeros(1, np.int32)
    text = _buffer_kernel(b"v=%d\n", calls=2)
    sim.launch(text, buf, ret, grid=(1, 1, 1), block=(2, 1, 1))
    assert capsys.readouterr().out == "v=7\n" * 4
    assert ret[0] == 1


def test_a_call_of_another_system_call_is_refused_by_name():
    # ptxas resolves malloc as it does vprintf (PTX ISA "System Calls"); the emulator runs only vprintf.
    # Refused before running (jaxptx.sim.precheck), naming the call's line.
    text = _buffer_kernel(b"x\n").replace("vprintf", "malloc")
    with pytest.raises(sim.PrecheckError, match=r"PTX line 31: call.uni: calls malloc, which the module declares "
                                                r"without a body; the emulator runs direct calls of functions "
                                                r"defined in the module and the builtins __assertfail, vprintf"):
        sim.launch(text, np.zeros(8, np.uint8), np.zeros(1, np.int32), grid=(1, 1, 1), block=(1, 1, 1))


# Triton's tl.device_print lowers to the same call: its format string is a
# global named printfFormat_N, its arguments an LLVM struct on the stack
# (i32 pids and index, the value promoted to double).
_TRITON = (""".version 8.0
.target sm_90a
.address_size 64

""" + _VPRINTF + _string("printfFormat_0", b"pid (%u, %u, %u) idx (%u) x: %f\n") + """
.visible .entry print_kernel(
	.param .u64 print_kernel_param_0
)
.reqntid 4, 1, 1
{
	.local .align 8 .b8 	__local_depot0[24];
	.reg .b64 	%SP;
	.reg .b64 	%SPL;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<2>;
	.reg .b64 	%rd<7>;
	.reg .f64 	%fd<2>;

	mov.u64 	%SPL, __local_depot0;
	cvta.local.u64 	%SP, %SPL;
	ld.param.u64 	%rd1, [print_kernel_param_0];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %tid.x;
	mul.wide.u32 	%rd2, %r2, 4;
	add.s64 	%rd3, %rd1, %rd2;
	ld.global.f32 	%f1, [%rd3];
	cvt.f64.f32 	%fd1, %f1;
	mov.b32 	%r3, 0;
	add.u64 	%rd4, %SP, 0;
	add.u64 	%rd5, %SPL, 0;
	st.local.v2.u32 	[%rd5], {%r1, %r3};
	st.local.v2.u32 	[%rd5+8], {%r3, %r2};
	st.local.f64 	[%rd5+16], %fd1;
	mov.u64 	%rd6, printfFormat_0;
	cvta.global.u64 	%rd6, %rd6;
	{ // callseq 0, 0
	.param .b64 param0;
	st.param.b64 	[param0], %rd6;
	.param .b64 param1;
	st.param.b64 	[param1], %rd4;
	.param .b32 retval0;
	call.uni (retval0), vprintf, (param0, param1);
	ld.param.b32 	%r4, [retval0];
	} // callseq 0
	ret;

}
""")


def test_a_triton_device_print_runs(capsys):
    ptxas(_TRITON, "sm_90a")
    x = np.array([0.5, -1.0, 2.25, 3.0], np.float32)
    sim.launch(_TRITON, x, grid=(2, 1, 1), block=(4, 1, 1))
    expected = "".join(f"pid ({c}, 0, 0) idx ({t}) x: {v}\n" for c in range(2)
                       for t, v in enumerate(["0.500000", "-1.000000", "2.250000", "3.000000"]))
    assert capsys.readouterr().out == expected

"""``ptx.printf``: a traced kernel prints as CUDA's printf does; the traced
PTX is nvcc's sequence (prototype, global format, local argument buffer,
``call.uni vprintf``), ptxas accepts it, and the emulator runs it."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, sim
from jaxptx.errors import TraceError
from jaxptx.runtime import ptxas
from jaxptx.types import f32, s32, u64


def _printing_kernel():
    @kernel(in_specs=(Tile(8, f32),), out_specs=(Tile(8, s32),), grid=(2, 1, 1), block=(4, 1, 1), arch="sm_80")
    def show(x, n):
        tid = ptx.special.tid.x()
        cta = ptx.special.ctaid.x()
        i = cta * 4 + tid
        v = ptx.ld.global_.f32(ptx.addr(x.ptr + ptx.mul.wide.u32(i, 4)))
        small = ptx.cvt.u16.u32(tid)
        wide = ptx.cvt.u64.u32(i)
        count = ptx.printf("cta %u tid %hu x=%.2f %s %lld|%*d|\n", cta, small, v, "ok", wide, 3, -1)
        ptx.printf("no args\n")
        ptx.st.global_.s32(ptx.addr(n.ptr + ptx.mul.wide.u32(i, 4)), count)
    return show


def test_the_traced_ptx_is_nvccs_sequence_and_ptxas_accepts_it():
    text = _printing_kernel().ptx()
    assert text.count(".extern .func (.param .b32 func_retval0) vprintf(") == 1
    assert '.global .align 1 .b8 $str[' in text and "$str$2[9] = {110, 111, 32, 97, 114, 103, 115, 10, 0};" in text
    assert ".local .align 8 .b8 __printf_depot[40];" in text      # 4+4, 8, 8, 8, 4+4 bytes
    assert "st.local.f64 [__printf_depot+8]" in text              # the f32 promoted to double
    assert text.count("call.uni (retval0), vprintf, (param0, param1);") == 2
    ptxas(text, "sm_80")


def test_tracing_twice_gives_the_same_text():
    assert _printing_kernel().ptx() == _printing_kernel().ptx()


def test_a_traced_printf_prints_on_the_emulator_and_returns_the_argument_count(capsys):
    x = np.arange(8, dtype=np.float32) / 4
    n = np.zeros(8, np.int32)
    sim.launch(_printing_kernel(), x, n)
    lines = [f"cta {c} tid {t} x={(c * 4 + t) / 4:.2f} ok {c * 4 + t}| -1|\n" for c in range(2) for t in range(4)]
    assert capsys.readouterr().out == "".join(lines) + "no args\n" * 8
    assert n.tolist() == [7] * 8        # six conversions, one with a '*' width


def _trace(body, arch="sm_80"):
    @kernel(in_specs=(Tile(1, f32),), out_specs=(), block=(1, 1, 1), arch=arch)
    def k(x):
        body(x)
    return k.ptx()


@pytest.mark.parametrize("body, message", [
    (lambda x: ptx.printf("%n\n", 1), r"ptx.printf\('%n\\n'\): conversion '%n' is not supported"),
    (lambda x: ptx.printf("%d %d\n", 1), r"the format reads 2 arguments, got 1"),
    (lambda x: ptx.printf("%f\n", ptx.special.tid.x()),
     r"the argument of '%f' must be an f64, f32 or f16 register or a Python float"),
    (lambda x: ptx.printf("%d\n", x.ptr), r"the argument of '%d' takes 32 bits; %rd\d+ is .u64 \(use 'l'"),
    (lambda x: ptx.printf("%d\n", ptx.special.tid.x() == 0), r"the argument of '%d' must be an integer register"),
    (lambda x: ptx.printf("%s\n", 5), r"the argument of '%s' must be a Python str or a 64-bit register"),
    (lambda x: ptx.printf("%d\n", 1 << 40), r"the argument of '%d': 1099511627776 does not fit in 32 bits"),
])
def test_a_format_or_argument_printf_cannot_take_is_a_trace_error_at_the_users_line(body, message):
    with pytest.raises(TraceError, match=message + r".*test_ptx_printf.py"):
        _trace(body)


def test_registers_narrower_than_the_conversion_are_promoted_as_c_does(capsys):
    @kernel(in_specs=(), out_specs=(Tile(1, u64),), block=(1, 1, 1), arch="sm_80")
    def k(out):
        neg = ptx.mov.s32(-2)
        h = ptx.mov.u16(65535)
        ptx.printf("%lld %llu %d\n", neg, ptx.mov.u32(4000000000), ptx.cvt.s32.u16(h))
        ptx.st.global_.u64(ptx.addr(out.ptr), ptx.mov.u64(0))
    text = k.ptx()
    assert "cvt.s64.s32" in text and "cvt.u64.u32" in text
    sim.launch(k, np.zeros(1, np.uint64))
    assert capsys.readouterr().out == "-2 4000000000 65535\n"


def test_a_module_kernel_gets_the_prototype_and_string_before_its_function(capsys):
    @kernel(module=True, arch="sm_80")
    def m():
        ptx.directive("version", "8.0")
        ptx.directive("target", "sm_80")
        ptx.directive("address_size", "64")
        with ptx.function("entry", "k", linkage=("visible",)):
            ptx.printf("hello %d\n", 7)
            ptx.ret()
    text = m.ptx()
    assert text.index("vprintf(") < text.index("$str[10]") < text.index(".visible .entry k()")
    ptxas(text, "sm_80")
    sim.launch(text, grid=(1, 1, 1), block=(2, 1, 1))
    assert capsys.readouterr().out == "hello 7\nhello 7\n"

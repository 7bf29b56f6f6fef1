"""Invalid kernels are refused while tracing, each with a message that names
the problem and ends with the user's file:line.

Covered: control flow left unfinished (entered and never closed, never
used, a Python loop left early), branches to labels never placed, registers
of another trace or function, features the target lacks, constant indices
outside a shared array, immediates that do not fit their type, constant
integer division by zero, and whatever ``jaxptx.check`` finds at the end of
the trace.
"""

from __future__ import annotations

import inspect

import pytest

from jaxptx import Tile, kernel, ptx, reg, smem
from jaxptx.errors import PtxOperandError, PtxTargetError, TraceError
from jaxptx.types import b64, f32, s32, u32


def here(delta: int = 1) -> int:
    """The caller's line number plus ``delta`` (the line the error points at)."""
    return inspect.currentframe().f_back.f_lineno + delta


def refused(k, error: type, match: str, lines: list[int], **kw) -> str:
    """Trace ``k``; it must raise ``error`` matching ``match`` at the line
    the body recorded in ``lines`` while tracing."""
    with pytest.raises(error, match=match) as e:
        k.ptx(**kw)
    assert str(e.value).endswith(f"test_refusals.py:{lines[-1]}"), str(e.value)
    return str(e.value)


# --- control flow left unfinished ------------------------------------------------

def test_if_entered_and_never_closed() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        p = reg.pred(init=1)
        lines.append(here())
        ptx.if_(p).__enter__()
        ptx.mov.u32(reg.scalar(u32), 1)
    refused(k, TraceError, r"kernel k: ptx.if_\(...\) was entered but its block never closed", lines)


def test_if_never_put_in_a_with() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        p = reg.pred(init=1)
        lines.append(here())
        ptx.if_(p)
    refused(k, TraceError, r"ptx.if_\(...\) was never used: write it in a `with` statement", lines)


def test_else_never_put_in_a_with() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        with ptx.if_(reg.pred(init=1)):
            pass
        lines.append(here())
        ptx.else_()
    refused(k, TraceError, r"ptx.else_\(\) was never used", lines)


def test_range_never_iterated() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        lines.append(here())
        ptx.range_(0, 10)
    refused(k, TraceError, r"ptx.range_\(...\) was never used: write it in a `for ... in` statement",
            lines)


def test_python_break_out_of_a_runtime_loop() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        acc = reg.scalar(s32, 0)
        lines.append(here())
        for i in ptx.range_(0, 10):
            acc += i
            break
    message = refused(k, TraceError, r"the Python loop over ptx.range_\(...\) ended early", lines)
    assert "use ptx.break_() to leave a runtime loop" in message


def test_python_return_inside_a_while_loop() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        n = reg.scalar(u32, 0)
        lines.append(here())
        for _ in ptx.while_(lambda: n < 4):
            n += 1
            return
    refused(k, TraceError, r"the Python loop over ptx.while_\(...\) ended early", lines)


def test_function_never_closed_in_a_module_kernel() -> None:
    lines = []

    @kernel(arch="sm_80", module=True)
    def k():
        lines.append(here())
        ptx.function("entry", "f").__enter__()
        ptx.ret()
    refused(k, TraceError, r"ptx.function\(...\) was entered but its block never closed", lines)


def test_closed_constructs_and_runtime_break_are_accepted() -> None:
    @kernel(arch="sm_80")
    def k():
        acc = reg.scalar(s32, 0)
        for i in ptx.range_(0, 10):
            with ptx.if_(i == 3):
                ptx.break_()
            acc += i
        with ptx.loop() as top:
            acc -= 1
            top.again(acc > 0)
    assert "bra $L_endloop_" in k.ptx()


# --- labels ------------------------------------------------------------------

def test_branch_to_an_undefined_label() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        lines.append(here())
        ptx.bra("nowhere")
    refused(k, TraceError, r"kernel k: bra: undefined name nowhere \(found by jaxptx.check", lines)


def test_branch_to_a_label_never_placed() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        later = ptx.new_label("later")
        p = reg.pred(init=0)
        lines.append(here())
        ptx.bra(later, pred=p)
    refused(k, TraceError, r"bra: undefined name later", lines)


# --- registers of another trace -------------------------------------------------

def test_register_of_another_kernel() -> None:
    kept, lines = [], []

    @kernel(arch="sm_80")
    def first():
        kept.append(reg.scalar(u32, 1))
    first.ptx()

    @kernel(arch="sm_80")
    def second():
        lines.append(here())
        ptx.add.u32(reg.scalar(u32), kept[0], 1)
    refused(second, TraceError, r"register %r1 belongs to kernel first, not to kernel second; "
                                r"registers cannot cross traces", lines)


def test_register_of_another_specialisation() -> None:
    kept, lines = [], []

    @kernel(arch="sm_80")
    def k(*, n=1):
        r = reg.scalar(u32, n)
        if kept:
            lines.append(here())
            r += kept[0]
        kept.append(r)
    k.ptx(n=1)
    refused(k, TraceError, r"belongs to another trace of kernel k, not to kernel k", lines, n=2)


def test_register_of_another_function_as_guard() -> None:
    lines = []

    @kernel(arch="sm_80", module=True)
    def k():
        with ptx.function("entry", "a"):
            p = reg.pred(init=1)
            ptx.ret()
        with ptx.function("entry", "b"):
            lines.append(here())
            ptx.ret(pred=p)
    refused(k, TraceError, r"register %p1 belongs to function a, not to function b; a register "
                           r"belongs to the function that made it", lines)


def test_assigning_over_a_register_array_element() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        frag = reg.array(u32, 2)
        frag[0] += 1                      # in place: fine
        lines.append(here())
        frag[1] = frag[0] + 1
    refused(k, TraceError, r"register array element 1: assigning Reg\(%r3: .u32\) would replace the "
                           r"register, not write it; use arr\[1\].set\(value\)", lines)


# --- features the target lacks -----------------------------------------------

def test_instruction_the_target_lacks() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        lines.append(here())
        ptx.wgmma.fence.sync.aligned()
    refused(k, PtxTargetError, r"wgmma.fence.sync.aligned needs sm_90a, kernel targets sm_80", lines)


def test_special_register_the_target_lacks() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        lines.append(here())
        ptx.special.clusterid.x()
    refused(k, PtxTargetError, r"%clusterid.x needs sm_90 or newer, kernel targets sm_80", lines)


def test_tma_descriptor_on_a_target_without_tma() -> None:
    lines = []

    @kernel(arch="sm_80", in_specs=(Tile(8, 8, f32),))
    def k(x):
        lines.append(here())
        x.tma_desc()
    refused(k, PtxTargetError, r"x.tma_desc\(\) \(a TMA descriptor\) needs sm_90 or newer, "
                               r"kernel targets sm_80", lines)


# --- shared-memory indices -------------------------------------------------------

@pytest.mark.parametrize("index, message", [
    (4, r"shared array smem_0: expected 2 indices, got 1"),
    ((4, 0), r"index 4 of dim 0 is out of range 0..3"),
    ((0, 8), r"index 8 of dim 1 is out of range 0..7"),
    ((-1, 0), r"index -1 of dim 0 is out of range 0..3"),
])
def test_constant_shared_index_out_of_range(index, message: str) -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        a = smem.alloc(u32, (4, 8))
        lines.append(here())
        ptx.st.shared.u32(a[index], 1)
    refused(k, TraceError, message, lines)


def test_constant_offset_past_a_shared_array() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        bars = smem.mbarrier(2)
        ptx.mbarrier.init.shared.b64(ptx.addr(bars, 8), 1)    # the second barrier: fine
        lines.append(here())
        ptx.mbarrier.init.shared.b64(ptx.addr(bars, 16), 1)
    refused(k, TraceError, r"ptx.addr: offset 16 is outside shared array mbar_0 \(16 bytes\)", lines)


def test_last_element_and_register_index_are_accepted() -> None:
    @kernel(arch="sm_80")
    def k():
        a = smem.alloc(u32, (4, 8))
        ptx.st.shared.u32(a[3, 7], 1)
        ptx.st.shared.u32(a[ptx.special.tid.x(), 7], 2)
    assert "st.shared.u32 [smem_0+124], 1;" in k.ptx()


# --- immediates ----------------------------------------------------------------

@pytest.mark.parametrize("dtype, value, message", [
    (f32, 1e40, r"mov.f32 operand a: immediate 1e\+40 does not fit .f32 \(largest finite .f32: "
                r"3.4028235e\+38\)"),
    (f32, -1e39, r"immediate -1e\+39 does not fit .f32"),
    (f32, 10**400, r"immediate 1.00000e\+400 does not fit .f32"),
    (u32, 2**32, r"mov.u32 operand a: immediate 4294967296 does not fit .u32"),
    (s32, -2**31 - 1, r"immediate -2147483649 does not fit .s32"),
    (b64, 2**64, r"immediate 18446744073709551616 does not fit .b64"),
], ids=["f32-1e40", "f32-neg", "f32-huge-int", "u32", "s32", "b64"])
def test_immediate_that_does_not_fit(dtype, value, message: str) -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        lines.append(here())
        reg.scalar(dtype, value)
    refused(k, PtxOperandError, message, lines)


def test_immediates_at_the_limits_are_accepted() -> None:
    @kernel(arch="sm_80")
    def k():
        reg.scalar(f32, 3.4028234663852886e38)
        reg.scalar(f32, float("inf"))
        reg.scalar(u32, 2**32 - 1)
        reg.scalar(s32, -2**31)
    text = k.ptx()
    assert "0f7F7FFFFF" in text and "0f7F800000" in text


# --- division by a constant zero ----------------------------------------------------

def _floordiv(r, s): r //= 0            # noqa: E704 (one line: the line the error names)
def _mod(r, s): r %= 0                  # noqa: E704
def _div_op(r, s): return r // 0        # noqa: E704
def _rem_op(r, s): return r % 0         # noqa: E704
def _div_call(r, s): ptx.div.u32(r, r, 0)   # noqa: E704
def _rem_call(r, s): ptx.rem.s32(s, s, 0)   # noqa: E704


@pytest.mark.parametrize("divide, opcode", [(_floordiv, "div.u32"), (_mod, "rem.u32"), (_div_op, "div.u32"),
                                            (_rem_op, "rem.u32"), (_div_call, "div.u32"),
                                            (_rem_call, "rem.s32")])
def test_integer_division_by_constant_zero(divide, opcode: str) -> None:
    @kernel(arch="sm_80")
    def k():
        divide(reg.scalar(u32, 7), reg.scalar(s32, -7))
    refused(k, PtxOperandError, rf"{opcode} operand b: division by the constant 0 \(the result is "
                                r"unspecified\)", [divide.__code__.co_firstlineno])


def test_float_division_by_zero_is_ieee() -> None:
    @kernel(arch="sm_80")
    def k():
        x = reg.scalar(f32, 1.0)
        x / 0.0
    assert "div.rn.f32 %f2, %f1, 0f00000000;" in k.ptx()


# --- what jaxptx.check finds at the end of the trace ----------------------------------

def test_check_finding_is_an_error_at_the_users_line() -> None:
    lines = []

    @kernel(arch="sm_80")
    def k():
        r = reg.scalar(u32, 0)
        lines.append(here())
        ptx.mov.u32(r, "%r99")
    refused(k, TraceError, r"kernel k: mov.u32: undeclared register %r99 \(found by jaxptx.check", lines)


def test_unvalidated_kernels_are_not_checked() -> None:
    @kernel(arch="sm_80", validate=False)
    def k():
        ptx.bra("nowhere")
    assert "bra nowhere;" in k.ptx()


# --- any jaxptx error raised in the body --------------------------------------------

def test_every_error_in_the_body_names_the_users_line() -> None:
    lines = []

    def helper():
        lines.append(here())
        reg.array(u32, 0)

    @kernel(arch="sm_80")
    def k():
        helper()
    refused(k, TraceError, r"reg.array count: expected a positive int, got 0", lines)

    @kernel(arch="sm_80")
    def twice():
        ptx.label("x")
        lines.append(here())
        ptx.label("x")
    refused(twice, TraceError, r"name 'x' is already used in kernel twice", lines)

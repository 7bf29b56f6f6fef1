"""One fault report everywhere: a fault names the kernel, the access, the
buffer (the parameter pointing into it), the CTA and thread, the PTX line
with its text and, for a traced kernel, the Python line; barriers that part
of a warp reaches, or that count threads not in whole warps, fault without
the sanitizer; a store to constant memory through a generic address faults.

The expected lines are found in the kernel's text and source by the test."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, sim
from jaxptx.types import f32

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32 + 1, 1, 1), block=(32, 1, 1), arch="sm_90a")
def one_too_many(x, y):
    """The last CTA stores past the end of y (it reads x only in bounds)."""
    i = ptx.special.ctaid.x() * 32 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + ptx.mul.wide.u32(ptx.rem.u32(i, 64), 4))
    ptx.st.global_.f32(y.ptr + off, v)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
def skewed_v4(x, y):
    """Thread 1 loads a v4 at byte 4 of x: misaligned for 16 bytes."""
    tid = ptx.special.tid.x()
    a, b, c, d = ptx.ld.global_.v4.f32(x.ptr + ptx.mul.wide.u32(tid, 4))
    ptx.st.global_.f32(y.ptr + ptx.mul.wide.u32(tid, 4), a + b + c + d)


def ptx_line(text: str, needle: str) -> tuple[int, str]:
    """1-based line of the first line of ``text`` containing ``needle``, and that line."""
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n, line.strip()
    raise AssertionError(f"{needle!r} not in the PTX")


def python_line(k, needle: str) -> int:
    lines, first = inspect.getsourcelines(k.fn)
    return first + next(i for i, line in enumerate(lines) if needle in line)


def test_an_out_of_bounds_store_through_sim_launch_names_everything() -> None:
    x = np.arange(64, dtype=np.float32)
    n, text = ptx_line(one_too_many.ptx(N=64), "st.global.f32")
    py = python_line(one_too_many, "ptx.st.global_.f32(")
    want = (rf"^kernel one_too_many: st\.global\.f32: global access of 4 bytes at offset 0x100 of parameter 'y' "
            rf"is out of bounds \(its buffer has 256 bytes; CTA 2, thread 0\) \[PTX line {n}: {re.escape(text)}\], "
            rf"at {re.escape(__file__)}:{py} in the kernel$")
    with pytest.raises(sim.SimFault, match=want) as info:
        sim.launch(one_too_many, x, np.zeros_like(x))
    fault = info.value.fault
    assert (fault.kernel, fault.ptx_line, fault.python) == ("one_too_many", n, (__file__, py))


def test_the_same_fault_through_device_launch_of_the_text() -> None:
    """No Python line from text, the rest the same."""
    text = one_too_many.ptx(N=64)
    n, line = ptx_line(text, "st.global.f32")
    dev = sim.Device()
    x = dev.to_device(np.arange(64, dtype=np.float32))
    y = dev.alloc(256)
    with pytest.raises(sim.SimFault, match=rf"^kernel one_too_many: st\.global\.f32: global access of 4 bytes at "
                                           rf"offset 0x100 of parameter 'y' is out of bounds \(its buffer has 256 "
                                           rf"bytes; CTA 2, thread 0\) \[PTX line {n}: {re.escape(line)}\]$"):
        dev.launch(text, [x, y], grid=3, block=32)


def test_a_misaligned_v4_load_names_the_line_and_the_buffer() -> None:
    x = np.arange(40, dtype=np.float32)
    n, text = ptx_line(skewed_v4.ptx(N=40), "ld.global.v4.f32")
    py = python_line(skewed_v4, "ptx.ld.global_.v4.f32(")
    with pytest.raises(sim.SimFault, match=rf"^kernel skewed_v4: ld\.global\.v4\.f32: misaligned 16-byte vector load "
                                           rf"at 0x[0-9a-f]+4 \(offset 0x4 of parameter 'x'\) by CTA \(0, 0, 0\) "
                                           rf"thread \(1, 0, 0\) \[PTX line {n}: {re.escape(text)}\], "
                                           rf"at {re.escape(__file__)}:{py} in the kernel$"):
        sim.launch(skewed_v4, x, np.zeros_like(x))


HALF_WARP = HEAD + """.visible .entry half({count_param})
{{
    .reg .b32 %r<3>; .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra DONE;
    {barrier};
DONE:
    ret;
}}"""


@pytest.mark.parametrize("barrier", ["bar.sync 0", "barrier.sync.aligned 0", "bar.arrive 1, 64",
                                     "bar.red.popc.u32 %r2, 0, %p1"])
def test_half_a_warp_at_an_aligned_barrier_faults_without_check(barrier: str) -> None:
    text = HALF_WARP.format(count_param="", barrier=barrier)
    opcode = barrier.split()[0]
    with pytest.raises(sim.SimFault, match=rf"^kernel half: {re.escape(opcode)}: CTA 0, thread 16 reaches this "
                                           r"\.aligned barrier without thread 0 of its warp, which has not exited "
                                           r".* \[PTX line 10: "):
        sim.launch(text, block=(64, 1, 1))


def test_half_a_warp_at_a_barrier_not_aligned_is_allowed() -> None:
    """barrier.sync without .aligned may be reached by divergent threads
    (here threads 0-15 exit; the rest are every live thread)."""
    sim.launch(HALF_WARP.format(count_param="", barrier="barrier.sync 0"), block=(64, 1, 1))


@pytest.mark.parametrize("count, why", [(48, "is not a multiple of the warp size \\(32\\)"),
                                        (0, "must not be 0 for an arrive")])
def test_a_thread_count_not_in_whole_warps_faults_without_check(count: int, why: str) -> None:
    text = HEAD + """.visible .entry counted(.param .u32 n)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [n];
    bar.arrive 1, %r1;
    ret;
}"""
    with pytest.raises(sim.SimFault, match=rf"^kernel counted: bar\.arrive: thread count {count} {why}: barriers "
                                           r"count whole warps \(CTA 0, thread 0\) \[PTX line 8: bar\.arrive 1, "
                                           r"%r1;\]$"):
        sim.launch(text, count, block=(64, 1, 1))


def test_a_barrier_id_past_15_faults() -> None:
    """(A barrier every thread of the grid reaches at once completes
    without reading its id; a thread count makes it wait.)"""
    text = HEAD + """.visible .entry ids(.param .u32 n)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [n];
    bar.sync %r1, 32;
    ret;
}"""
    with pytest.raises(sim.SimFault, match=r"bar\.sync: barrier 16 does not exist \(a CTA has barriers 0\.\.15; "):
        sim.launch(text, 16, block=(32, 1, 1))
    sim.launch(text, 15, block=(32, 1, 1))


CONST = HEAD + """.const .align 4 .u32 table[4] = {{1, 2, 3, 4}};
.visible .entry k(.param .u64 out)
{{
    .reg .b32 %r<3>; .reg .b64 %rd<4>;
    mov.u64 %rd1, table;
    cvta.const.u64 %rd2, %rd1;
    {access};
    ld.param.u64 %rd3, [out];
    st.global.u32 [%rd3], %r1;
    ret;
}}"""


def test_a_generic_store_to_const_faults() -> None:
    with pytest.raises(sim.SimFault, match=r"^kernel k: st\.u32: store to constant memory at generic address "
                                           r"0x7c0000000008 \(offset 0x8 of the const space, which is read-only; "
                                           r"CTA 0, thread 0\) \[PTX line 10: st\.u32 \[%rd2\+8\], 7;\]$"):
        sim.launch(CONST.format(access="st.u32 [%rd2+8], 7"), np.zeros(1, np.uint32))
    with pytest.raises(sim.SimFault, match=r"atom\.add\.u32: store to constant memory at generic address"):
        sim.launch(CONST.format(access="atom.add.u32 %r1, [%rd2], 1"), np.zeros(1, np.uint32))
    out = np.zeros(1, np.uint32)
    sim.launch(CONST.format(access="ld.u32 %r1, [%rd2+8]"), out)         # loads still work
    assert out[0] == 3


def test_trap_reads_the_same() -> None:
    @kernel(arch="sm_90a", block=(32, 1, 1))
    def trapping():
        with ptx.if_(ptx.special.tid.x() == 3):
            ptx.trap()

    n, text = ptx_line(trapping.ptx(), "trap;")
    py = python_line(trapping, "ptx.trap()")
    with pytest.raises(sim.SimFault, match=rf"^kernel trapping: trap executed by thread \(3, 0, 0\) of CTA "
                                           rf"\(0, 0, 0\) \[PTX line {n}: {re.escape(text)}\], "
                                           rf"at {re.escape(__file__)}:{py} in the kernel$"):
        sim.launch(trapping)


def test_a_clean_kernel_of_whole_warps_runs() -> None:
    """The checks cost nothing a correct kernel notices: a barrier in
    divergent code that whole warps take."""
    text = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<3>; .reg .b64 %rd<4>; .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    bar.sync 1, 32;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r1;
DONE:
    ret;
}"""
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, block=(64, 1, 1))
    assert out[0] == 63

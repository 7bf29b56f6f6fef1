"""The SIMT machine: divergence and reconvergence, loops, barriers, calls,
launch errors — through real PTX and the DSL."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import kernel, ptx, reg, sim
from jaxptx.sim import SimError
from jaxptx.types import u32

HEAD = ".version 8.5\n.target sm_80\n.address_size 64\n"


EXCHANGE = HEAD + """.visible .entry k(.param .u64 out)
{
    .shared .align 4 .b8 buf[256];
    .reg .b32 %r<6>; .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r4, %r3, %r2;
    st.shared.u32 [%r4], %r1;
    bar.sync 0;
    xor.b32 %r5, %r2, {partner};
    add.u32 %r5, %r3, %r5;
    ld.shared.u32 %r5, [%r5];
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}"""


def exchange(partner: int) -> str:
    """Each thread stores its tid in shared memory, meets the others at a
    barrier, then reads the word ``partner`` bytes away (XOR) and writes it out."""
    return EXCHANGE.replace("{partner}", str(partner))


def test_divergent_if_else_reconverges() -> None:
    @kernel(arch="sm_80", block=(64, 1, 1))
    def k(out):
        tid = ptx.special.tid.x()
        v = reg.scalar(u32, 0)
        with ptx.if_(tid < 20):
            v += 100
        with ptx.else_():
            v += 7
        v += tid                      # after reconvergence every thread runs this
        ptx.st.global_.u32(out.ptr + ptx.mul.wide.u32(tid, 4), v)
    out = np.zeros(64, np.uint32)
    sim.launch(k, out, grid=(1, 1, 1), block=(64, 1, 1))
    tid = np.arange(64)
    np.testing.assert_array_equal(out, np.where(tid < 20, 100, 7) + tid)


def test_data_dependent_loop_counts() -> None:
    @kernel(arch="sm_80", block=(32, 1, 1))
    def k(out):
        tid = ptx.special.tid.x()
        total = reg.scalar(u32, 0)
        for i in ptx.range_(0, tid, dtype=u32):   # thread t loops t times
            total += i
        ptx.st.global_.u32(out.ptr + ptx.mul.wide.u32(tid, 4), total)
    out = np.zeros(32, np.uint32)
    sim.launch(k, out, block=(32, 1, 1))
    t = np.arange(32)
    np.testing.assert_array_equal(out, t * (t - 1) // 2)


def test_barrier_orders_shared_memory_between_warps() -> None:
    text = exchange(252)
    out = np.zeros(64, np.uint32)
    sim.launch(text, out, block=(64, 1, 1))
    np.testing.assert_array_equal(out, 63 - np.arange(64))


def test_barrier_deadlock_is_reported() -> None:
    text = HEAD + """.visible .entry k()
{
    .reg .b32 %r<2>; .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    @%p1 bra DONE;
    bar.sync 1, 64;
DONE:
    ret;
}"""
    # Warp 0 leaves; warp 1 waits for 64 threads (half a warp leaving would be a fault: bar.sync is .aligned).
    with pytest.raises(SimError, match=r"deadlock: barrier 1 at bar.sync \(PTX line 10\) reached by 32 threads"):
        sim.launch(text, block=(64, 1, 1))


def test_device_function_call_returns_values() -> None:
    text = HEAD + """.func (.param .b32 ret) twice(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [x];
    add.u32 %r2, %r1, %r1;
    st.param.b32 [ret], %r2;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>; .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    {
        .param .b32 a;
        .param .b32 b;
        st.param.b32 [a], %r1;
        call.uni (b), twice, (a);
        ld.param.b32 %r2, [b];
    }
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}"""
    out = np.zeros(8, np.uint32)
    sim.launch(text, out, block=(8, 1, 1))
    np.testing.assert_array_equal(out, 2 * np.arange(8))


@pytest.mark.parametrize("args, kw, message", [
    ((), {}, r"k takes 1 parameters \(.u64 out\), got 0 arguments"),
    (("x",), {}, r"parameter out \(.u64\): expected a numpy array or a number, got str"),
    ((np.zeros(4, np.uint32),), {"block": (1025, 1, 1)}, r"block\.x = 1025 exceeds CUDA.s limit of 1024"),
    ((np.zeros(4, np.uint32),), {"kernel": "other"}, r"no kernel 'other' in the module; kernels: k"),
])
def test_bad_launches(args, kw, message) -> None:
    text = HEAD + ".visible .entry k(.param .u64 out)\n{\n\tret;\n}\n"
    with pytest.raises(SimError, match=message):
        sim.launch(text, *args, **kw)


def test_out_of_bounds_global_access_faults() -> None:
    text = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1+16], 1;
    ret;
}"""
    with pytest.raises(SimError, match=r"^kernel k: st.global.u32: global access of 4 bytes at offset 0x10 of "
                                       r"parameter 'out' is out of bounds \(its buffer has 16 bytes; CTA 0, thread 0\) "
                                       r"\[PTX line 8: st.global.u32 \[%rd1\+16\], 1;\]$"):
        sim.launch(text, np.zeros(4, np.uint32))


def test_reqntid_mismatch() -> None:
    text = HEAD + ".visible .entry k()\n.reqntid 32, 1, 1\n{\n\tret;\n}\n"
    with pytest.raises(SimError, match=r"launch block \(64, 1, 1\) does not match k's .reqntid \(32, 1, 1\)"):
        sim.launch(text, block=(64, 1, 1))


# Every thread adds 1 to a shared counter that thread 0 zeroed; {after}
# runs before the barrier that orders the atomics.
ATOMIC_COUNT = """.visible .entry k(.param .u64 out)
{{
    .shared .align 4 .b32 cnt[1];
    .reg .b32 %r<4>; .reg .b64 %rd<2>; .reg .pred %p<2>;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 st.shared.u32 [cnt], 0;
    bar.sync 0;
    atom.shared.add.u32 %r2, [cnt], 1;
    {after}
    bar.sync 0;
    ld.shared.u32 %r3, [cnt];
    ld.param.u64 %rd1, [out];
    @%p1 st.global.u32 [%rd1], %r3;
    ret;
}}"""

SANITIZER_CASES = [
    ("uninitialised register", """.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<3>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    add.u32 %r2, %r1, 1;
    st.global.u32 [%rd1], %r2;
    ret;
}""", r"read of uninitialised register %r1 at PTX line 8 \(add.u32\), CTA \(0, 0, 0\) thread \(0, 0, 0\)"),
    ("uninitialised shared memory", """.visible .entry k(.param .u64 out)
{
    .shared .align 4 .b8 buf[64];
    .reg .b32 %r<3>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.shared.u32 %r2, [buf+8];
    st.global.u32 [%rd1], %r2;
    ret;
}""", r"read of uninitialised shared memory at offset 0x8 at PTX line 9 \(ld.shared.u32\)"),
    ("shared race without a barrier", """.visible .entry k(.param .u64 out)
{
    .shared .align 4 .b8 buf[256];
    .reg .b32 %r<6>; .reg .b64 %rd<2>;
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r4, %r3, %r2;
    st.shared.u32 [%r4], %r1;
    xor.b32 %r5, %r2, 4;
    add.u32 %r5, %r3, %r5;
    ld.shared.u32 %r5, [%r5];
    ret;
}""", r"shared-memory race: read of offset 0x4 at PTX line 15 \(ld.shared.u32\), CTA \(0, 0, 0\) thread "
      r"\(0, 0, 0\) conflicts with the write at PTX line 12 \(st.shared.u32\) by thread \(1, 0, 0\): "
      r"no barrier or mbarrier orders them"),
    ("same address written by two threads", """.visible .entry k(.param .u64 out)
{
    .shared .align 4 .b8 buf[16];
    .reg .b32 %r<2>;
    mov.u32 %r1, %tid.x;
    st.shared.u32 [buf], %r1;
    ret;
}""", r"shared-memory race: write of offset 0x0 at PTX line 9 \(st.shared.u32\)"),
    ("plain read among atomics", ATOMIC_COUNT.format(after="ld.shared.u32 %r3, [cnt];"),
     r"shared-memory race: read of offset 0x0 at PTX line 13 \(ld.shared.u32\)"),
    ("plain store among atomics", ATOMIC_COUNT.format(after="@%p1 st.shared.u32 [cnt], 5;"),
     r"shared-memory race: write of offset 0x0 at PTX line 13 \(st.shared.u32\)"),
    ("atomic after a plain store", ATOMIC_COUNT.replace("bar.sync 0;\n    atom", "atom", 1)
     .format(after=""), r"shared-memory race: atomic on offset 0x0 at PTX line 11 \(atom"),
    ("atomic on uninitialised shared memory", ATOMIC_COUNT.replace("@%p1 st.shared.u32 [cnt], 0;", "")
     .format(after=""), r"atomic on uninitialised shared memory at offset 0x0 at PTX line \d+ \(atom"),
]


@pytest.mark.parametrize("name, body, message", SANITIZER_CASES, ids=[c[0] for c in SANITIZER_CASES])
def test_sanitizer_catches_planted_bugs(name, body, message) -> None:
    with pytest.raises(sim.SanitizerError, match=message):
        sim.launch(HEAD + body, np.zeros(4, np.uint32), block=(32, 1, 1), check=True)


def test_sanitizer_is_quiet_on_correct_code() -> None:
    text = exchange(4)
    out = np.zeros(32, np.uint32)
    sim.launch(text, out, block=(32, 1, 1), check=True)
    np.testing.assert_array_equal(out, np.arange(32) ^ 1)
    out = np.zeros(4, np.uint32)   # atomics from every thread do not race with each other
    sim.launch(HEAD + ATOMIC_COUNT.format(after=""), out, block=(64, 1, 1), check=True)
    assert out[0] == 64


@pytest.mark.parametrize("offset, smem, faults", [(24, 0, True), (16, 0, False), (40, 16, False), (56, 16, True)])
def test_shared_accesses_past_static_and_dynamic_shared_memory_fault(offset, smem, faults) -> None:
    """A CTA's window is padded to 16 bytes (mbarriers stay aligned), but
    only its static bytes, and dynamic ones from the next 16-byte boundary,
    may be touched: the padding past them faults."""
    text = HEAD + f""".visible .entry k(.param .u64 out)
{{
    .shared .align 4 .b8 buf[20];
    .reg .b32 %r<4>;
    mov.u32 %r1, buf;
    ld.shared.u32 %r2, [%r1+{offset}];
    ret;
}}"""
    if faults:
        with pytest.raises(SimError, match=rf"shared access of 4 bytes at offset {offset:#x} is out of bounds"):
            sim.launch(text, np.zeros(4, np.uint32), smem=smem)
    else:
        sim.launch(text, np.zeros(4, np.uint32), smem=smem)

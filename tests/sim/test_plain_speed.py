"""Cheaper plain instructions (issue 29) compute what the general paths
compute: per-instruction operand plans (register views, immediates),
guards every thread passes, exact int→float conversions, and float
atomic adds chained per address, each against the reference paths
(``fastpaths.reference()``) or against numpy, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core import fastpaths
from jaxptx.parse import parse
from jaxptx.sim.core.prepare import prepare
from jaxptx.sim.core.step import Plan, plans

HEAD = ".version 8.5\n.target sm_80\n.address_size 64\n"

MIXED = HEAD + """.visible .entry k(.param .u64 out, .param .u64 inp)
{
    .reg .pred %p<3>; .reg .b16 %h<3>; .reg .b32 %r<8>; .reg .f32 %f<6>; .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd4, [inp];
    mul.wide.u32 %rd2, %r1, 24;
    add.s64 %rd3, %rd1, %rd2;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd4, %rd5;
    ld.global.f32 %f1, [%rd6];
    cvt.rn.f32.u32 %f2, %r1;
    add.f32 %f3, %f1, %f2;
    mul.rz.f32 %f4, %f3, 0f3EAAAAAB;
    setp.lt.u32 %p1, %r1, 1000;
    @%p1 add.u32 %r2, %r1, 7;
    @!%p1 add.u32 %r2, %r1, 9;
    setp.lt.u32 %p2, %r1, 5;
    @%p2 sub.u32 %r2, %r2, 1;
    cvt.u16.u32 %h1, %r1;
    add.u16 %h2, %h1, 3;
    cvt.u32.u16 %r3, %h2;
    add.s32 %r4, %r1, -3;
    st.global.f32 [%rd3], %f3;
    st.global.f32 [%rd3+4], %f4;
    st.global.u32 [%rd3+8], %r2;
    st.global.u32 [%rd3+12], %r3;
    st.global.u32 [%rd3+16], %r4;
    st.global.f32 [%rd3+20], %f2;
    ret;
}"""


def _mixed(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    inp = rng.standard_normal(n).astype(np.float32)
    inp[::7] = np.nan
    out = np.zeros((n, 6), np.uint32)
    sim.launch(MIXED, out, inp, block=(n, 1, 1))
    return out


@pytest.mark.parametrize("n", [32, 256])
def test_plain_instructions_match_the_reference_paths(n: int) -> None:
    """Plans, adopted register views and all-true guards give the reference
    paths' bytes, and the values numpy computes."""
    fast = _mixed(n)
    with fastpaths.reference():
        slow = _mixed(n)
    np.testing.assert_array_equal(fast, slow)
    tid = np.arange(n, dtype=np.uint32)
    np.testing.assert_array_equal(fast[:, 2], np.where(tid < 5, tid + 6, tid + 7))
    np.testing.assert_array_equal(fast[:, 3], (tid & 0xFFFF) + 3)
    np.testing.assert_array_equal(fast[:, 4], tid - np.uint32(3))
    np.testing.assert_array_equal(fast[:, 5].view(np.float32), tid.astype(np.float32))


def test_plans_view_registers_and_keep_immediates() -> None:
    """A plan reads a same-width register as a view of its type, leaves
    narrower reads and predicates to the general path, and keeps one
    broadcast per thread count for an immediate."""
    program = prepare(parse(MIXED), "k", None)
    by_text = {ins.name + str(i): p for i, (ins, p) in enumerate(zip(program.code, plans(program)))}
    assert plans(program) is plans(program)         # kept on the program
    add_f32 = next(p for k, p in by_text.items() if k.startswith("add.f32"))
    assert isinstance(add_f32, Plan)
    assert add_f32.reads[1] == ("%f1", np.dtype(np.float32))
    assert add_f32.writes[0] == ("%f3", np.dtype(np.float32), np.dtype(np.uint32))
    add_s32 = next(p for k, p in by_text.items() if k.startswith("add.s32"))
    assert add_s32.reads[1] == ("%r1", np.dtype(np.int32))
    assert add_s32.reads[2] == {}                   # an immediate: broadcasts by thread count
    add_u16 = next(p for k, p in by_text.items() if k.startswith("add.u16"))
    assert add_u16.reads[1] == ("%h1", np.dtype(np.uint16))
    cvt = next(p for k, p in by_text.items() if k.startswith("cvt.u32.u16"))
    assert cvt.reads[1] == ("%h2", np.dtype(np.uint16)) and cvt.writes[0] == ("%r3", np.dtype(np.uint32),
                                                                               np.dtype(np.uint32))
    guarded = [p for k, p in by_text.items() if k.startswith("setp")]
    assert all(p.writes[0] is None for p in guarded)  # predicates: the general path


RED = HEAD + """.visible .entry k(.param .u64 out, .param .u64 inp, .param .u64 olds)
{
    .reg .b32 %r<4>; .reg .f32 %f<3>; .reg .b64 %rd<10>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r1, %r2, %r3, %r1;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    ld.param.u64 %rd7, [olds];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    and.b32 %r2, %r1, 1;
    mul.wide.u32 %rd5, %r2, 4;
    add.s64 %rd6, %rd1, %rd5;
    atom.global.add.f32 %f2, [%rd6], %f1;
    add.s64 %rd8, %rd7, %rd3;
    st.global.f32 [%rd8], %f2;
    ret;
}"""


def _red(values: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out, olds = start.copy(), np.zeros(len(values), np.float32)
    sim.launch(RED, out, values, olds, block=(64, 1, 1), grid=(len(values) // 64, 1, 1))
    return out, olds


@pytest.mark.parametrize("case", ["normal", "subnormal partial sums", "nan", "subnormal start"])
def test_float_atomic_chains_match_the_serial_path(case: str) -> None:
    """Many threads adding f32 into two words: the chained path gives the
    serial path's final values and old values bit for bit, and a thread-
    order sum with every partial sum rounded to f32."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(512).astype(np.float32)
    start = np.array([1.5, -2.0], np.float32)
    if case == "subnormal partial sums":
        values[:] = 0
        start = np.zeros(2, np.float32)
        values[0::2][:4] = np.array([2.0**-125, -1.5 * 2.0**-126, 2.0**-126, -2.0**-127], np.float32)
    elif case == "nan":
        values[100] = np.nan
    elif case == "subnormal start":
        start = np.array([2.0**-130, -(2.0**-140)], np.float32)
    fast = _red(values, start)
    with fastpaths.reference():
        slow = _red(values, start)
    np.testing.assert_array_equal(fast[0].view(np.uint32), slow[0].view(np.uint32))
    np.testing.assert_array_equal(fast[1].view(np.uint32), slow[1].view(np.uint32))
    if case == "normal":
        for word in (0, 1):
            total = start[word]
            for v in values[word::2]:
                total = np.float32(total + v)
            assert fast[0][word].view(np.uint32) == total.view(np.uint32)
        assert fast[1][0] == start[0] and fast[1][1] == start[1]       # the first adds saw memory as it was
    if case == "nan":
        assert fast[0].view(np.uint32)[0] == 0x7FFF_FFFF               # canonical, as the serial path writes


@pytest.mark.parametrize("atype, values", [
    ("u32", np.array([0, 1, 2**24 + 1, 2**32 - 1, 12345678], np.uint32)),
    ("s32", np.array([0, -1, -(2**31), 2**31 - 1, -(2**24) - 1], np.int32)),
    ("s16", np.array([0, -1, -32768, 32767, 77], np.int16)),
])
@pytest.mark.parametrize("rnd", ["rn", "rz", "rm", "rp"])
def test_int_to_float_conversions_round_exactly(atype: str, values: np.ndarray, rnd: str) -> None:
    """cvt from integers of at most 32 bits to f32 (through float64, which
    holds them exactly) rounds in each mode; to f64 it is exact."""
    src = HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp)
{{
    .reg .b32 %r<3>; .reg .b16 %h<2>; .reg .f32 %f<2>; .reg .f64 %d<2>; .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mul.wide.u32 %rd3, %r1, {values.itemsize};
    add.s64 %rd4, %rd2, %rd3;
    ld.global.{atype} {"%h1" if values.itemsize == 2 else "%r2"}, [%rd4];
    cvt.{rnd}.f32.{atype} %f1, {"%h1" if values.itemsize == 2 else "%r2"};
    cvt.rn.f64.{atype} %d1, {"%h1" if values.itemsize == 2 else "%r2"};
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd1, %rd5;
    st.global.f32 [%rd6], %f1;
    st.global.f64 [%rd6+8], %d1;
    ret;
}}"""
    n = len(values)

    out = np.zeros((n, 4), np.uint32)
    sim.launch(src, out, values, block=(n, 1, 1))
    np.testing.assert_array_equal(out[:, 0].view(np.float32), [_rounded(int(v), rnd) for v in values])
    np.testing.assert_array_equal(np.ascontiguousarray(out[:, 2:]).view(np.float64).ravel(),
                                  [float(int(v)) for v in values])


def _rounded(v: int, rnd: str) -> np.float32:
    """The integer ``v`` rounded to f32 in mode ``rnd``, by exact comparison."""
    near = np.float32(v)                        # through float64, exact for 32-bit v: nearest even
    if rnd == "rn" or int(near) == v:
        return near
    below = near if int(near) < v else np.nextafter(near, np.float32(-np.inf))
    above = near if int(near) > v else np.nextafter(near, np.float32(np.inf))
    if rnd == "rm":
        return below
    if rnd == "rp":
        return above
    return below if v > 0 else above            # rz

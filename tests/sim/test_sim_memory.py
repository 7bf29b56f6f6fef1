"""Emulator semantics of the memory family: ld/st in every state space and
shape, atomics under contention, cp.async, cache-hint instructions."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim import SimError

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
REGS = """
    .reg .b16 %h<8>; .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .f32 %f<8>; .reg .f64 %fd<4>;
    .reg .pred %p<4>;
"""
# %rd1 = out, %rd2 = inp, %r1 = tid.x, %rd3 = tid * 4, %rd4 = tid * 8
PROLOGUE = """
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    mul.wide.u32 %rd4, %r1, 8;
"""


def run(body: str, out: np.ndarray, inp: np.ndarray | None = None, *, block: int = 1, grid: int = 1,
        decls: str = "", head: str = HEAD) -> np.ndarray:
    """Run ``body`` in a kernel ``k(out, inp)``; returns ``out``."""
    text = (head + decls + "\n.visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE
            + body + "\n    ret;\n}\n")
    inp = np.zeros(4, np.uint32) if inp is None else inp
    sim.launch(text, out, inp, grid=(grid, 1, 1), block=(block, 1, 1))
    return out


# --- ld / st ------------------------------------------------------------------------------


def test_scalar_loads_and_stores_of_every_width() -> None:
    inp = np.arange(1, 33, dtype=np.uint8)
    out = run("""
    ld.global.u8 %h1, [%rd2+1];        st.global.u8 [%rd1], %h1;
    ld.global.b16 %h2, [%rd2+2];       st.global.b16 [%rd1+2], %h2;
    ld.global.f32 %f1, [%rd2+4];       st.global.f32 [%rd1+4], %f1;
    ld.global.u64 %rd5, [%rd2+8];      st.global.u64 [%rd1+8], %rd5;
    ld.f64 %fd1, [%rd2+16];            st.f64 [%rd1+16], %fd1;
    ld.global.s32 %r2, [%rd2+24];      st.s32 [%rd1+24], %r2;
    st.global.u16 [%rd1+28], 0xBEEF;
    """, np.zeros(32, np.uint8), inp)
    want = inp.copy()
    want[0], want[2:4] = 2, [3, 4]
    want[28:30] = [0xEF, 0xBE]
    want[30:32] = 0
    want[1] = 0
    np.testing.assert_array_equal(out, want)


def test_narrow_loads_extend_by_signedness_into_wider_registers() -> None:
    inp = np.array([0x80, 0x7F, 0xFF, 0x01, 0x00, 0x80, 0xFE, 0xFF], np.uint8)
    out = run("""
    ld.global.s8 %r2, [%rd2];          st.global.u32 [%rd1], %r2;
    ld.global.u8 %r3, [%rd2];          st.global.u32 [%rd1+4], %r3;
    ld.global.b8 %r4, [%rd2+2];        st.global.u32 [%rd1+8], %r4;
    ld.global.s16 %rd5, [%rd2+4];      st.global.u64 [%rd1+16], %rd5;
    ld.global.u16 %rd6, [%rd2+6];      st.global.u64 [%rd1+24], %rd6;
    ld.global.s32 %rd7, [%rd2+4];      st.global.u64 [%rd1+32], %rd7;
    ld.global.s8 %h1, [%rd2+2];        st.global.u16 [%rd1+40], %h1;
    """, np.zeros(6, np.uint64), inp)
    w = out.view(np.uint32)
    assert w[0] == 0xFFFF_FF80 and w[1] == 0x80 and w[2] == 0xFF
    assert out[2] == 0xFFFF_FFFF_FFFF_8000
    assert out[3] == 0xFFFE
    assert out[4] == 0xFFFF_FFFF_FFFE_8000
    assert out.view(np.uint16)[20] == 0xFFFF


def test_stores_truncate_wide_registers() -> None:
    out = run("""
    mov.u32 %r2, 0x12345678;
    st.global.u8 [%rd1], %r2;
    st.global.b16 [%rd1+2], %r2;
    mov.u64 %rd5, 0x1122334455667788;
    st.global.u32 [%rd1+4], %rd5;
    """, np.zeros(8, np.uint8))
    np.testing.assert_array_equal(out, [0x78, 0, 0x78, 0x56, 0x88, 0x77, 0x66, 0x55])


def test_vectors_are_consecutive_elements() -> None:
    inp = np.arange(16, dtype=np.uint32) * 3
    out = run("""
    ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd2];
    st.global.v4.u32 [%rd1+16], {%r2, %r3, %r4, %r5};
    ld.global.v2.u64 {%rd5, %rd6}, [%rd2+32];
    st.global.v2.u64 [%rd1], {%rd6, %rd5};
    ld.global.v4.s8 {%r6, %r7, %r8, %r9}, [%rd2+48];
    st.global.v4.u32 [%rd1+32], {%r6, %r7, %r8, %r9};
    ld.global.v2.f32 {%f1, _}, [%rd2+8];
    st.global.v2.f32 [%rd1+48], {%f1, %f1};
    st.global.v4.b16 [%rd1+56], {1, 2, 3, 4};
    """, np.zeros(16, np.uint32), np.concatenate([inp[:12], np.array([0x80FF017F], np.uint32), inp[13:]]))
    np.testing.assert_array_equal(out[4:8], inp[:4])
    np.testing.assert_array_equal(out[:4].view(np.uint64), np.r_[inp[10:12], inp[8:10]].view(np.uint64))
    np.testing.assert_array_equal(out[8:12], np.array([0x7F, 1, -1, -128], np.int32).view(np.uint32))
    np.testing.assert_array_equal(out[12:14], [inp[2], inp[2]])
    np.testing.assert_array_equal(out[14:16].view(np.uint16), [1, 2, 3, 4])


def test_256_bit_vectors() -> None:
    inp = np.arange(8, dtype=np.float32) + 0.5
    out = run("""
    ld.global.v8.f32 {%f1, %f2, %f3, %f4, %f5, %f6, %f7, %f0}, [%rd2];
    st.global.v8.f32 [%rd1], {%f0, %f7, %f6, %f5, %f4, %f3, %f2, %f1};
    """, np.zeros(8, np.float32), inp, head=".version 8.8\n.target sm_100a\n.address_size 64\n")
    np.testing.assert_array_equal(out, inp[::-1])


def test_misaligned_vector_access_faults() -> None:
    with pytest.raises(SimError, match="misaligned"):
        run("ld.global.v2.u32 {%r2, %r3}, [%rd2+4];", np.zeros(4, np.uint32), np.zeros(8, np.uint32))


def test_cache_and_ordering_qualifiers_load_the_same_values() -> None:
    inp = np.arange(10, 18, dtype=np.uint32)
    out = run("""
    createpolicy.fractional.L2::evict_last.b64 %rd8, 1.0;
    ld.global.nc.u32 %r2, [%rd2];                  st.global.wb.u32 [%rd1], %r2;
    ldu.global.u32 %r2, [%rd2+4];                  st.global.cg.u32 [%rd1+4], %r2;
    ld.global.ca.u32 %r2, [%rd2+8];                st.global.cs.u32 [%rd1+8], %r2;
    ld.global.cv.u32 %r2, [%rd2+12];               st.global.wt.u32 [%rd1+12], %r2;
    ld.volatile.global.u32 %r2, [%rd2+16];         st.volatile.global.u32 [%rd1+16], %r2;
    ld.relaxed.gpu.global.u32 %r2, [%rd2+20];      st.release.gpu.global.u32 [%rd1+20], %r2;
    ld.acquire.sys.u32 %r2, [%rd2+24];             st.relaxed.cta.u32 [%rd1+24], %r2;
    ld.global.L1::evict_last.L2::cache_hint.u32 %r2, [%rd2+28], %rd8;
    st.global.L1::no_allocate.u32 [%rd1+28], %r2;
    prefetch.global.L2 [%rd2];
    prefetchu.L1 [%rd2];
    """, np.zeros(8, np.uint32), inp)
    np.testing.assert_array_equal(out, inp)


def test_shared_local_const_and_generic_spaces() -> None:
    decls = ".const .align 4 .u32 tab[4] = {11, 22, 33, 44};\n"
    body = """
    .shared .align 4 .u32 sbuf[64];
    .local .align 8 .u32 lbuf[2];
    add.u32 %r2, %r1, 100;
    st.local.u32 [lbuf+4], %r2;
    mov.u32 %r3, sbuf;
    shl.b32 %r4, %r1, 2;
    add.u32 %r5, %r3, %r4;
    st.shared.u32 [%r5], %r2;
    bar.sync 0;
    xor.b32 %r6, %r4, 4;
    add.u32 %r6, %r3, %r6;
    ld.shared.u32 %r7, [%r6];
    ld.local.u32 %r8, [lbuf+4];
    ld.const.u32 %r9, [tab+8];
    ld.u32 %r10, [sbuf];
    add.u32 %r7, %r7, %r8;
    add.u32 %r7, %r7, %r9;
    add.u32 %r7, %r7, %r10;
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r7;
    """
    out = run(body, np.zeros(64, np.uint32), block=64, decls=decls)
    tid = np.arange(64)
    np.testing.assert_array_equal(out, (tid ^ 1) + 100 + tid + 100 + 33 + 100)


def test_generic_store_reaches_shared_and_local() -> None:
    body = """
    .shared .align 8 .u64 sv;
    .local .align 4 .u32 lv;
    st.u64 [sv], 0x0102030405060708;
    st.u32 [lv], 77;
    ld.shared.u64 %rd5, [sv];
    ld.local.u32 %r2, [lv];
    st.global.u64 [%rd1], %rd5;
    st.global.u32 [%rd1+8], %r2;
    """
    out = run(body, np.zeros(2, np.uint64))
    assert out[0] == 0x0102030405060708 and out[1] == 77


def test_ld_param_reads_kernel_parameters() -> None:
    text = HEAD + """.visible .entry k(.param .u64 out, .param .s8 a, .param .f64 x, .param .u32 y,
                                   .param .align 8 .b8 blob[16])
{
    .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .f64 %fd<2>;
    ld.param.u64 %rd1, [out];
    ld.param.s8 %r1, [a];
    ld.param.f64 %fd1, [x];
    ld.param.u32 %r2, [y];
    ld.param.v2.u32 {%r3, %r4}, [blob+8];
    st.global.u32 [%rd1], %r1;
    st.global.f64 [%rd1+8], %fd1;
    st.global.u32 [%rd1+16], %r2;
    st.global.v2.u32 [%rd1+24], {%r3, %r4};
    ret;
}
"""
    out = np.zeros(4, np.uint64)
    blob = np.arange(16, dtype=np.uint8)
    sim.launch(text, out, -3, 2.5, 123456789, blob)
    w = out.view(np.uint32)
    assert w[0] == np.uint32(-3 & 0xFFFF_FFFF)
    assert out.view(np.float64)[1] == 2.5
    assert w[4] == 123456789
    np.testing.assert_array_equal(w[6:8], blob[8:].view(np.uint32))


# --- atomics --------------------------------------------------------------------------------

N = 96          # threads (three warps) in two CTAs
K = 5           # distinct addresses they share


def _serial(op, init: np.ndarray, slots: np.ndarray, b: np.ndarray, c: np.ndarray | None = None):
    """Reference: apply the operations in thread order; returns (old, memory)."""
    mem = init.copy()
    old = np.zeros_like(b)
    for i, k in enumerate(slots):
        old[i] = mem[k]
        mem[k] = op(mem[k], b[i]) if c is None else op(mem[k], b[i], c[i])
    return old, mem


def _atomic_kernel(instr: str, t: str, width: int, grid: int = 2) -> str:
    """Thread g (global index) applies ``instr`` to slot g % K of out with
    operand inp[g]; the old value goes to out[K + g]."""
    reg = {4: "%r2", 8: "%rd9"}[width]
    reg_b = {4: "%r3", 8: "%rd10"}[width]
    op = instr.format(d=reg, a="[%rd5]", b=reg_b)
    return f"""
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mad.lo.u32 %r6, %r4, %r5, %r1;
    rem.u32 %r7, %r6, {K};
    mul.wide.u32 %rd5, %r7, {width};
    add.s64 %rd5, %rd1, %rd5;
    mul.wide.u32 %rd6, %r6, {width};
    add.s64 %rd7, %rd2, %rd6;
    ld.global.{t} {reg_b}, [%rd7];
    {op};
    add.s64 %rd8, %rd1, {K * width};
    add.s64 %rd8, %rd8, %rd6;
    st.global.{t} [%rd8], {reg};
    """


INT_CASES = [
    ("atom.global.add.u32", "u32", np.uint32, lambda m, b: m + b),
    ("atom.add.s32", "s32", np.int32, lambda m, b: m + b),
    ("atom.global.add.u64", "u64", np.uint64, lambda m, b: m + b),
    ("atom.global.and.b32", "b32", np.uint32, lambda m, b: m & b),
    ("atom.global.or.b64", "b64", np.uint64, lambda m, b: m | b),
    ("atom.global.xor.b32", "b32", np.uint32, lambda m, b: m ^ b),
    ("atom.global.min.s32", "s32", np.int32, min),
    ("atom.global.max.s32", "s32", np.int32, max),
    ("atom.global.min.u32", "u32", np.uint32, min),
    ("atom.global.max.u64", "u64", np.uint64, max),
    ("atom.global.min.s64", "s64", np.int64, min),
    ("atom.global.exch.b32", "b32", np.uint32, lambda m, b: b),
    ("atom.global.exch.b64", "b64", np.uint64, lambda m, b: b),
    ("atom.global.inc.u32", "u32", np.uint32, lambda m, b: 0 if m >= b else m + 1),
    ("atom.global.dec.u32", "u32", np.uint32, lambda m, b: b if m == 0 or m > b else m - 1),
]


@pytest.mark.parametrize("name, t, dtype, op", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_atomics_under_contention(name: str, t: str, dtype, op) -> None:
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    if "inc" in name or "dec" in name:
        b = rng.integers(0, 4, N).astype(dtype)
        init = np.array([0, 1, 2, 3, 9], dtype)
    else:
        b = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
        init = rng.integers(info.min, info.max, K, dtype=dtype, endpoint=True)
    width = np.dtype(dtype).itemsize
    out = np.zeros(K + N, dtype)
    out[:K] = init
    body = _atomic_kernel(name + " {d}, {a}, {b}", t, width)
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + body + "ret;\n}"
    sim.launch(text, out, b, grid=(2, 1, 1), block=(N // 2, 1, 1))
    with np.errstate(over="ignore"):
        old, mem = _serial(op, init, np.arange(N) % K, b)
    np.testing.assert_array_equal(out[:K], mem)
    np.testing.assert_array_equal(out[K:], old)


def test_red_applies_all_operations() -> None:
    b = np.arange(1, N + 1, dtype=np.uint32)
    out = np.zeros(K + N, np.uint32)
    body = _atomic_kernel("red.global.add.u32 {a}, {b}", "u32", 4).replace("st.global.u32 [%rd8], %r2;", "")
    run_text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + body + "ret;\n}"
    sim.launch(run_text, out, b, grid=(2, 1, 1), block=(N // 2, 1, 1))
    np.testing.assert_array_equal(out[:K], [b[np.arange(N) % K == k].sum() for k in range(K)])


def test_cas_under_contention() -> None:
    # Every thread tries cas(slot, expected = its index - K, new = its index):
    # in thread order, thread g succeeds when slot holds g - K.
    n = 64
    out = np.zeros(K + n, np.uint32)
    out[:K] = np.arange(K) - K + 2**32
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + f"""
    rem.u32 %r7, %r1, {K};
    mul.wide.u32 %rd5, %r7, 4;
    add.s64 %rd5, %rd1, %rd5;
    sub.u32 %r3, %r1, {K};
    atom.global.cas.b32 %r2, [%rd5], %r3, %r1;
    add.s64 %rd8, %rd1, {K * 4};
    add.s64 %rd8, %rd8, %rd3;
    st.global.u32 [%rd8], %r2;
    ret;
}}"""
    sim.launch(text, out, np.zeros(1, np.uint32), block=(n, 1, 1))
    init = (np.arange(K) - K).astype(np.uint32)
    g = np.arange(n, dtype=np.uint32)
    old, mem = _serial(lambda m, b, c: c if m == b else m, init, g % K, g - np.uint32(K), g)
    np.testing.assert_array_equal(out[:K], mem)
    np.testing.assert_array_equal(out[K:], old)
    np.testing.assert_array_equal(old, g - np.uint32(K))     # every exchange succeeds in turn


def _ftz(x: np.float32) -> np.float32:
    return np.float32(np.copysign(0, x)) if 0 < abs(x) < 2.0 ** -126 else np.float32(x)


def test_float_adds_round_in_serial_order() -> None:
    rng = np.random.default_rng(3)
    b32 = (rng.standard_normal(N) * 10.0 ** rng.integers(-8, 8, N)).astype(np.float32)
    b32[5] = np.float32(1e-40)                         # subnormal operand: flushed
    out = np.zeros(K + N, np.float32)
    out[:K] = [1e7, -3.0, 0.1, 2.0 ** -130, 0.0]
    body = _atomic_kernel("atom.global.add.f32 {d}, {a}, {b}", "f32", 4)
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + body + "ret;\n}"
    init = out[:K].copy()
    sim.launch(text, out, b32, grid=(2, 1, 1), block=(N // 2, 1, 1))
    old, mem = _serial(lambda m, b: _ftz(np.float32(_ftz(m) + _ftz(b))), init, np.arange(N) % K, b32)
    np.testing.assert_array_equal(out[:K].view(np.uint32), mem.view(np.uint32))
    np.testing.assert_array_equal(out[K:].view(np.uint32), old.view(np.uint32))

    b64 = rng.standard_normal(N) * 1e-310                # f64 keeps subnormals
    out64 = np.zeros(K + N, np.float64)
    out64[:K] = [1.0, 1e300, -0.0, 5e-324, 3.0]
    init = out64[:K].copy()
    body = _atomic_kernel("atom.global.add.f64 {d}, {a}, {b}", "f64", 8)
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + body + "ret;\n}"
    sim.launch(text, out64, b64, grid=(2, 1, 1), block=(N // 2, 1, 1))
    old, mem = _serial(lambda m, b: m + b, init, np.arange(N) % K, b64)
    np.testing.assert_array_equal(out64[:K], mem)
    np.testing.assert_array_equal(out64[K:], old)


def test_half_adds_keep_subnormals() -> None:
    rng = np.random.default_rng(5)
    b = rng.standard_normal(2 * N).astype(np.float16)
    b[0] = np.float16(2.0 ** -24)                       # smallest f16 subnormal
    out = np.zeros(2 * (K + N), np.float16)
    init = np.array([1.0, 2.0 ** -20, 1000.0, -2.0, 0.5] * 2, np.float16)
    out[:2 * K] = init
    body = _atomic_kernel("atom.global.add.noftz.f16x2 {d}, {a}, {b}", "b32", 4)
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + PROLOGUE + body + "ret;\n}"
    sim.launch(text, out, b, grid=(2, 1, 1), block=(N // 2, 1, 1))
    pairs = init.reshape(K, 2)
    old, mem = _serial(lambda m, x: (m.astype(np.float32) + x.astype(np.float32)).astype(np.float16),
                       pairs, np.arange(N) % K, b.reshape(N, 2))
    np.testing.assert_array_equal(out[:2 * K].view(np.uint16), mem.reshape(-1).view(np.uint16))
    np.testing.assert_array_equal(out[2 * K:].view(np.uint16), old.reshape(-1).view(np.uint16))


def test_scalar_half_and_bf16_adds() -> None:
    out = run("""
    mov.b16 %h1, 0x3C00;
    atom.global.add.noftz.f16 %h2, [%rd1], %h1;
    atom.global.add.noftz.f16 %h2, [%rd1], %h1;
    mov.b32 %r2, 0x3F80BF80;
    atom.global.add.noftz.bf16x2 %r3, [%rd1+4], %r2;
    st.global.b32 [%rd1+8], %r3;
    """, np.array([0x3C00, 0, 0x4000, 0x4000, 0, 0], np.uint16))
    np.testing.assert_array_equal(out, [0x4200, 0, 0x3F80, 0x4040, 0x4000, 0x4000])


def test_atomics_on_shared_memory_are_per_cta() -> None:
    text = HEAD + """.visible .entry k(.param .u64 out, .param .u64 inp)
{
    .shared .align 4 .u32 counter;
    .reg .b32 %r<8>; .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    st.shared.u32 [counter], 0;
    bar.sync 0;
    atom.shared.add.u32 %r3, [counter], 1;
    atom.inc.u32 %r4, [counter], 1000;
    bar.sync 0;
    ld.shared.u32 %r5, [counter];
    mov.u32 %r6, %ntid.x;
    mad.lo.u32 %r6, %r2, %r6, %r1;
    mul.wide.u32 %rd2, %r6, 8;
    add.s64 %rd2, %rd1, %rd2;
    st.global.v2.u32 [%rd2], {%r3, %r5};
    ret;
}"""
    out = np.zeros((3, 40, 2), np.uint32)
    sim.launch(text, out, np.zeros(1, np.uint32), grid=(3, 1, 1), block=(40, 1, 1))
    np.testing.assert_array_equal(out[:, :, 0], np.tile(np.arange(40), (3, 1)))
    np.testing.assert_array_equal(out[:, :, 1], 80)


def test_vector_atomics_are_per_element() -> None:
    out = run("""
    mov.f32 %f1, 1.5;
    mov.f32 %f2, -2.0;
    atom.global.add.v2.f32 {%f3, %f4}, [%rd1], {%f1, %f2};
    st.global.v2.f32 [%rd1+8], {%f3, %f4};
    mov.b32 %r2, 0x7E004400;
    mov.b32 %r3, 0x3C00BC00;
    atom.global.max.noftz.v2.f16x2 {%r4, %r5}, [%rd1+16], {%r2, %r3};
    red.global.min.noftz.v2.f16x2 [%rd1+24], {%r2, %r3};
    """, np.array([10.0, 20.0, 0, 0, 0, 0, 0, 0], np.float32), block=1)
    np.testing.assert_array_equal(out[:4], [11.5, 18.0, 10.0, 20.0])
    h = out[4:].view(np.uint16)
    # max(0, 4.0) = 4.0; max(0, NaN) = 0 (the non-NaN operand); max(0, -1) = 0; max(0, 1) = 1
    np.testing.assert_array_equal(h[:4], [0x4400, 0x0000, 0x0000, 0x3C00])
    # red.min on the next 8 (zero) bytes: min(0, NaN) = 0, min(0, -1) = -1.
    np.testing.assert_array_equal(h[4:], [0x0000, 0x0000, 0xBC00, 0x0000])


def test_atomic_faults_on_misaligned_address() -> None:
    with pytest.raises(SimError, match="misaligned"):
        run("atom.global.add.u32 %r2, [%rd1+2], 1;", np.zeros(4, np.uint32))


# --- cp.async ------------------------------------------------------------------------------


def test_cp_async_copies_and_zero_fills() -> None:
    inp = np.arange(1, 17, dtype=np.uint32)
    body = """
    .shared .align 16 .b32 dst[16];
    cp.async.cg.shared.global [dst], [%rd2], 16;
    cp.async.ca.shared.global [dst+16], [%rd2+16], 16, 6;
    cp.async.ca.shared.global [dst+32], [%rd2+32], 8;
    setp.eq.u32 %p1, %r1, 0;
    cp.async.ca.shared.global [dst+40], [%rd2+40], 8, %p1;
    cp.async.ca.shared.global [dst+48], [%rd2+48], 4, !%p1;
    cp.async.ca.shared.global [dst+52], [%rd2+52], 4, 0;
    cp.async.commit_group;
    cp.async.wait_group 0;
    cp.async.wait_all;
    ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [dst];       st.global.v4.u32 [%rd1], {%r2, %r3, %r4, %r5};
    ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [dst+16];    st.global.v4.u32 [%rd1+16], {%r2, %r3, %r4, %r5};
    ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [dst+32];    st.global.v4.u32 [%rd1+32], {%r2, %r3, %r4, %r5};
    ld.shared.v4.u32 {%r2, %r3, %r4, %r5}, [dst+48];    st.global.v4.u32 [%rd1+48], {%r2, %r3, %r4, %r5};
    """
    out = run(body, np.full(16, 0xAAAAAAAA, np.uint32), inp)
    want = inp.copy()
    want[5] &= 0xFFFF
    want[6:8] = 0
    want[10:12] = 0                      # ignore-src true: zeros
    want[13] = 0                         # src-size 0
    want[14:16] = 0                      # dst[56..63] was never written (shared starts zeroed)
    np.testing.assert_array_equal(out, want)


def test_float_add_nan_results_are_canonical() -> None:
    out = run("""
    mov.b32 %r2, 0x7FA00001;                    // a signalling NaN with a payload
    atom.global.add.f32 %r3, [%rd1], %r2;
    mov.b32 %r2, 0xFF800000;                    // -inf
    red.global.add.f32 [%rd1+4], %r2;
    mov.b32 %r2, 0x7E017E00;                    // two f16 NaNs
    red.global.add.noftz.f16x2 [%rd1+8], %r2;
    """, np.array([0x3F800000, 0x7F800000, 0x3C003C00, 0], np.uint32))
    np.testing.assert_array_equal(out, [0x7FFFFFFF, 0x7FFFFFFF, 0x7FFF7FFF, 0])


def test_narrow_cas_exch_and_64_bit_minmax() -> None:
    out = run("""
    atom.global.cas.b16 %h1, [%rd1], 0x1234, 0xBEEF;        // matches: swapped
    atom.global.cas.b16 %h2, [%rd1+2], 0x1234, 0xBEEF;      // does not match
    st.global.b16 [%rd1+4], %h1;
    st.global.b16 [%rd1+6], %h2;
    mov.u64 %rd5, -5;
    atom.global.max.s64 %rd6, [%rd1+8], %rd5;
    atom.global.min.u64 %rd7, [%rd1+16], %rd5;
    atom.global.exch.b64 %rd8, [%rd1+24], %rd5;
    st.global.v2.u64 [%rd1+32], {%rd6, %rd8};
    """, np.array([0x4321_1234, 2**64 - 9, 7, 1, 0, 0], np.uint64))
    w = out.view(np.uint16)
    np.testing.assert_array_equal(w[:4], [0xBEEF, 0x4321, 0x1234, 0x4321])
    q = out.view(np.uint64)
    assert q[1] == 2**64 - 5 and q[2] == 7 and q[3] == 2**64 - 5
    assert q[4] == 2**64 - 9 and q[5] == 1

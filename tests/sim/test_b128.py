"""128-bit registers in the emulator (jaxptx/sim/_b128.py): ``.reg .b128``,
``mov.b128`` pack/unpack/copy, 16-byte ``ld``/``st`` in every state space,
``atom.exch.b128`` and ``atom.cas.b128`` under contention, faults and the
sanitizer. Every kernel is first assembled by ptxas for sm_90a.

16-byte values are written in numpy as ``(..., 2)`` uint64 pairs, low half
first (the little-endian layout of a .b128 in memory).
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, reg, sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SanitizerError, SimError
from jaxptx.types import b128, u64

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
REGS = """
    .reg .b128 %q<8>; .reg .b64 %rd<24>; .reg .b32 %r<16>; .reg .pred %p<4>;
"""
# %rd1 = out, %rd2 = inp, %r4 = global thread index, %rd3 = its 16-byte
# slot's offset, %rd4 = &inp[slot], %rd5 = &out[slot].
PROLOGUE = """
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd3, %r4, 16;
    add.s64 %rd4, %rd2, %rd3;
    add.s64 %rd5, %rd1, %rd3;
"""
MASK64 = (1 << 64) - 1


def kernel_text(body: str, decls: str = "") -> str:
    """``body`` in a kernel ``k(out, inp)`` after the prologue."""
    return (HEAD + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + REGS + decls + PROLOGUE
            + body + "\n    ret;\n}\n")


def run(body: str, out: np.ndarray, inp: np.ndarray | None = None, *, grid: int = 1, block: int = 1,
        cluster: int = 1, decls: str = "", check: bool = False) -> np.ndarray:
    """Assemble with ptxas, then run on the emulator; returns ``out``."""
    text = kernel_text(body, decls)
    ptxas(text, "sm_90a")
    inp = np.zeros(2, np.uint64) if inp is None else inp
    sim.launch(text, out, inp, grid=(grid, 1, 1), block=(block, 1, 1), cluster=(cluster, 1, 1), check=check)
    return out


def pairs(n: int, seed: int) -> np.ndarray:
    """``n`` random 16-byte values as ``(n, 2)`` uint64 (low, high)."""
    return np.random.default_rng(seed).integers(0, 2**64, size=(n, 2), dtype=np.uint64)


# --- mov ---------------------------------------------------------------------------------------


def test_pack_copy_and_unpack_round_trip() -> None:
    """mov.b128 {lo, hi} packs lo into bits 0-63; the copy and the unpack
    give the halves back; a value packed with its halves swapped stores
    swapped."""
    n = 64
    inp = pairs(n, 0)
    out = run("""
    ld.global.v2.b64 {%rd6, %rd7}, [%rd4];
    mov.b128 %q0, {%rd6, %rd7};
    mov.b128 %q1, %q0;
    mov.b128 {%rd8, %rd9}, %q1;
    mov.b128 %q2, {%rd9, %rd8};
    st.global.b128 [%rd5], %q2;
    mul.wide.u32 %rd10, %r3, 16;
    add.s64 %rd11, %rd5, %rd10;
    st.global.b128 [%rd11], %q1;
    """, np.zeros((2, n, 2), np.uint64), inp, block=n)
    np.testing.assert_array_equal(out[0], inp[:, ::-1])
    np.testing.assert_array_equal(out[1], inp)


def test_pack_takes_immediates_and_unpack_takes_sinks() -> None:
    out = run("""
    cvt.u64.u32 %rd6, %r4;
    mov.b128 %q0, {%rd6, 0x55};
    mov.b128 {_, %rd7}, %q0;
    mov.b128 {%rd8, _}, %q0;
    st.global.v2.b64 [%rd5], {%rd7, %rd8};
    """, np.zeros((8, 2), np.uint64), block=8)
    np.testing.assert_array_equal(out, np.stack([np.full(8, 0x55), np.arange(8)], axis=-1))


def test_b128_registers_never_alias() -> None:
    """A copied register, a packed register and a guarded write each keep
    their own value when the others change (the register file adopts fresh
    arrays without copying them); twice, so nothing leaks between launches."""
    n = 32
    inp = pairs(2 * n, 1)
    for _ in range(2):
        out = run("""
        ld.global.b128 %q0, [%rd4];
        mov.b128 %q1, %q0;                       // copy
        mov.b128 {%rd6, %rd7}, %q0;
        mov.b128 %q2, {%rd6, %rd7};              // pack
        xor.b64 %rd6, %rd6, -1;                  // the packed sources change
        mul.wide.u32 %rd8, %r3, 16;
        add.s64 %rd9, %rd4, %rd8;
        ld.global.b128 %q0, [%rd9];              // the copied source changes
        setp.lt.u32 %p1, %r1, 8;
        @%p1 mov.b128 %q1, %q0;                  // a guarded write of some threads
        add.s64 %rd10, %rd5, %rd8;
        add.s64 %rd11, %rd10, %rd8;
        st.global.b128 [%rd5], %q1;
        st.global.b128 [%rd10], %q2;
        st.global.b128 [%rd11], %q0;
        """, np.zeros((3, n, 2), np.uint64), inp, block=n)
        low = (np.arange(n) < 8)[:, None]
        np.testing.assert_array_equal(out[0], np.where(low, inp[n:], inp[:n]))
        np.testing.assert_array_equal(out[1], inp[:n])
        np.testing.assert_array_equal(out[2], inp[n:])


# --- ld / st -----------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [False, True])
def test_loads_and_stores_in_every_space(check: bool) -> None:
    """global → shared (the next thread's slot) → local → generic shared and
    generic global, all 16 bytes at a time; the sanitizer finds nothing."""
    n = 64
    inp = pairs(2 * n, 2)
    out = run("""
    ld.global.b128 %q0, [%rd4];
    add.u32 %r5, %r1, 1;
    rem.u32 %r5, %r5, 64;
    shl.b32 %r5, %r5, 4;
    mov.u32 %r6, sbuf;
    add.u32 %r7, %r6, %r5;
    st.shared.b128 [%r7], %q0;
    bar.sync 0;
    shl.b32 %r8, %r1, 4;
    add.u32 %r9, %r6, %r8;
    ld.shared.b128 %q1, [%r9];
    st.local.b128 [lbuf+16], %q1;
    ld.local.b128 %q2, [lbuf+16];
    cvt.u64.u32 %rd6, %r9;
    cvta.shared.u64 %rd7, %rd6;
    ld.b128 %q3, [%rd7];                         // generic: shared window
    mul.wide.u32 %rd8, %r3, 16;
    add.s64 %rd9, %rd4, %rd8;
    ld.b128 %q4, [%rd9];                         // generic: global
    st.b128 [%rd5], %q2;
    add.s64 %rd10, %rd5, %rd8;
    st.global.b128 [%rd10], %q3;
    add.s64 %rd11, %rd10, %rd8;
    st.b128 [%rd11], %q4;
    """, np.zeros((3, n, 2), np.uint64), inp, block=n, check=check,
        decls=".shared .align 16 .b8 sbuf[1024];\n.local .align 16 .b8 lbuf[32];")
    rotated = np.roll(inp[:n], 1, axis=0)          # thread t read what thread t - 1 stored
    np.testing.assert_array_equal(out[0], rotated)
    np.testing.assert_array_equal(out[1], rotated)
    np.testing.assert_array_equal(out[2], inp[n:])


def test_every_qualified_form_moves_sixteen_bytes() -> None:
    forms = [
        ("ld.global.nc.b128 %q0, [{a}];", "st.global.cs.b128 [{a}], %q0;"),
        ("ldu.global.b128 %q0, [{a}];", "st.global.wt.b128 [{a}], %q0;"),
        ("ld.volatile.global.b128 %q0, [{a}];", "st.volatile.global.b128 [{a}], %q0;"),
        ("ld.relaxed.gpu.global.b128 %q0, [{a}];", "st.relaxed.sys.global.b128 [{a}], %q0;"),
        ("ld.acquire.cta.global.b128 %q0, [{a}];", "st.release.gpu.global.b128 [{a}], %q0;"),
        ("ld.weak.global.L1::evict_last.b128 %q0, [{a}];", "st.global.L1::no_allocate.b128 [{a}], %q0;"),
    ]
    n = 16
    inp = pairs(len(forms) * n, 3)
    body = ["mul.wide.u32 %rd8, %r3, 16;", "mov.u64 %rd6, %rd4;", "mov.u64 %rd7, %rd5;"]
    for load, store in forms:
        body += [load.format(a="%rd6"), store.format(a="%rd7"),
                 "add.s64 %rd6, %rd6, %rd8;", "add.s64 %rd7, %rd7, %rd8;"]
    out = run("\n".join(body), np.zeros((len(forms) * n, 2), np.uint64), inp, block=n)
    np.testing.assert_array_equal(out, inp)


def test_narrow_accesses_of_a_b128_register_extend_and_truncate() -> None:
    """PTX ISA, ld: a register wider than the type gets the value
    sign-extended (signed types) or zero-extended; st stores the low bits."""
    inp = np.array([0xFFFF_FFFF_8000_0001, 0x1234], np.uint64)
    out = run("""
    ld.global.b64 %q0, [%rd2];      st.global.b128 [%rd1], %q0;
    ld.global.s32 %q1, [%rd2];      st.global.b128 [%rd1+16], %q1;
    ld.global.u32 %q2, [%rd2];      st.global.b128 [%rd1+32], %q2;
    st.global.b32 [%rd1+48], %q1;
    st.global.b64 [%rd1+56], %q2;
    st.global.b128 [%rd1+64], 0x1234;
    """, np.full(10, 0xAAAA_AAAA_AAAA_AAAA, np.uint64), inp)
    want = [0xFFFF_FFFF_8000_0001, 0, 0xFFFF_FFFF_8000_0001, MASK64, 0x8000_0001, 0,
            0xAAAA_AAAA_8000_0001, 0x8000_0001, 0x1234, 0]
    np.testing.assert_array_equal(out, np.array(want, np.uint64))


def test_a_cluster_load_reads_the_neighbour_ctas_shared_memory() -> None:
    """ld.shared::cluster.b128 through a mapa address of the other CTA."""
    n = 16
    inp = pairs(2 * n, 4)
    out = run("""
    ld.global.b128 %q0, [%rd4];
    shl.b32 %r5, %r1, 4;
    mov.u32 %r6, sbuf;
    add.u32 %r6, %r6, %r5;
    st.shared.b128 [%r6], %q0;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r7, %cluster_ctarank;
    xor.b32 %r7, %r7, 1;
    mapa.shared::cluster.u32 %r8, %r6, %r7;
    ld.shared::cluster.b128 %q1, [%r8];
    st.global.b128 [%rd5], %q1;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    """, np.zeros((2 * n, 2), np.uint64), inp, grid=2, block=n, cluster=2,
        decls=".shared .align 16 .b8 sbuf[256];")
    np.testing.assert_array_equal(out, np.concatenate([inp[n:], inp[:n]]))


def test_nested_block_registers_and_function_parameters() -> None:
    """A .b128 register declared in a { } block and a .func taking and
    returning .param .b128 values."""
    text = HEAD + """
.func (.param .b128 r) swap(.param .b128 x)
{
    .reg .b128 %q<2>; .reg .b64 %rd<3>;
    ld.param.b128 %q0, [x];
    mov.b128 {%rd1, %rd2}, %q0;
    mov.b128 %q1, {%rd2, %rd1};
    st.param.b128 [r], %q1;
    ret;
}
.visible .entry k(.param .u64 out)
{
    .reg .b128 %q<2>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.global.b128 %q0, [%rd1];
    {
        .reg .b128 %q1;
        .param .b128 a;
        .param .b128 b;
        st.param.b128 [a], %q0;
        call (b), swap, (a);
        ld.param.b128 %q1, [b];
        st.global.b128 [%rd1+16], %q1;
    }
    ret;
}
"""
    ptxas(text, "sm_90a")
    out = np.array([1, 2, 0, 0], np.uint64)
    sim.launch(text, out)
    np.testing.assert_array_equal(out, [1, 2, 2, 1])


# --- atomics -------------------------------------------------------------------------------------


def _chain(initial: np.ndarray, olds: np.ndarray, news: np.ndarray, final: np.ndarray) -> None:
    """Exchanges are consistent with one serial order: starting from the
    initial value, each value is the old value of exactly one next thread,
    and the last thread's new value is what memory holds."""
    key = [tuple(v) for v in olds]
    assert len(set(key)) == len(key), "two threads saw the same old value"
    by_old = {k: i for i, k in enumerate(key)}
    at, seen = tuple(initial), 0
    while at in by_old:
        i = by_old.pop(at)
        at, seen = tuple(news[i]), seen + 1
    assert seen == len(olds) and at == tuple(final)


@pytest.mark.parametrize("op", ["atom.global.exch.b128", "atom.relaxed.gpu.global.exch.b128",
                                "atom.acq_rel.sys.exch.b128"])
def test_exchange_under_contention(op: str) -> None:
    """128 threads of two CTAs exchange their own value with one 16-byte word."""
    n = 128
    news = pairs(n, 5)
    inp = np.concatenate([pairs(1, 6), news])
    out = run(f"""
    add.s64 %rd6, %rd4, 16;
    ld.global.b128 %q0, [%rd6];
    {op} %q1, [%rd2], %q0;
    st.global.b128 [%rd5], %q1;
    """, np.zeros((n, 2), np.uint64), inp.copy(), grid=2, block=n // 2)
    _chain(inp[0], out, news, _final(inp, out, news))


def _final(inp: np.ndarray, olds: np.ndarray, news: np.ndarray) -> np.ndarray:
    """The value no thread saw as old: the last one written."""
    seen = {tuple(v) for v in olds}
    left = [v for v in news if tuple(v) not in seen]
    assert len(left) == 1
    return left[0]


@pytest.mark.parametrize("op", ["atom.shared.exch.b128", "atom.shared::cta.exch.b128",
                                "atom.release.cta.shared::cta.exch.b128"])
def test_shared_exchange_under_contention_with_the_sanitizer(op: str) -> None:
    """Atomics on one shared word do not race with each other; thread 0's
    plain store happens a barrier before them and its load a barrier after."""
    n = 128
    news = pairs(n, 7)
    inp = np.concatenate([pairs(1, 8), news])
    out = np.zeros((n + 1, 2), np.uint64)
    run(f"""
    setp.eq.u32 %p1, %r1, 0;
    @%p1 ld.global.b128 %q0, [%rd2];
    @%p1 st.shared.b128 [word], %q0;
    bar.sync 0;
    add.s64 %rd6, %rd4, 16;
    ld.global.b128 %q1, [%rd6];
    {op} %q2, [word], %q1;
    add.s64 %rd7, %rd5, 16;
    st.global.b128 [%rd7], %q2;
    bar.sync 0;
    @%p1 ld.shared.b128 %q3, [word];
    @%p1 st.global.b128 [%rd1], %q3;
    """, out, inp, block=n, check=True, decls=".shared .align 16 .b8 word[16];")
    _chain(inp[0], out[1:], news, out[0])


def test_compare_and_swap_with_one_expected_value_has_one_winner() -> None:
    n = 96
    inp = np.array([[0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210]], np.uint64)
    out = run("""
    ld.global.b128 %q0, [%rd2];                  // expected: the initial value
    cvt.u64.u32 %rd6, %r4;
    mul.lo.u64 %rd7, %rd6, 3;
    mov.b128 %q1, {%rd6, %rd7};                  // new: (t, 3t)
    bar.sync 0;
    atom.global.cas.b128 %q2, [%rd2], %q0, %q1;
    st.global.b128 [%rd5], %q2;
    """, np.zeros((n, 2), np.uint64), inp, block=n)
    won = (out == [0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210]).all(axis=1)
    assert won.sum() == 1
    w = int(np.flatnonzero(won)[0])
    np.testing.assert_array_equal(out[~won], np.tile([w, 3 * w], (n - 1, 1)))
    np.testing.assert_array_equal(inp[0], [w, 3 * w])


CAS_LOOP = """
    cvt.u64.u32 %rd6, %r4;
    {start}
LOOP:
    mov.b128 {{%rd7, %rd8}}, %q0;
    add.u64 %rd9, %rd7, 1;                       // low: a counter
    add.u64 %rd10, %rd8, %rd6;                   // high: a sum of thread indices
    mov.b128 %q1, {{%rd9, %rd10}};
    {op} %q2, [{word}], %q0, %q1;
    mov.b128 {{%rd11, %rd12}}, %q2;
    setp.ne.u64 %p2, %rd11, %rd7;
    setp.ne.or.u64 %p2, %rd12, %rd8, %p2;
    mov.b128 %q0, %q2;
    @%p2 bra LOOP;
    st.global.b128 [%rd5+16], %q2;               // the value this thread replaced
"""


def _check_cas_loop(initial: np.ndarray, olds: np.ndarray, final: np.ndarray, tids: np.ndarray) -> None:
    """Each thread's successful CAS saw a distinct count; ordering the
    threads by it, each saw the initial sum plus the indices of all threads
    before it (one serial order), and memory ends with every increment."""
    n = len(olds)
    order = np.argsort(olds[:, 0])
    np.testing.assert_array_equal(olds[order, 0], initial[0] + np.arange(n, dtype=np.uint64))
    before = np.concatenate([[0], np.cumsum(tids[order])[:-1]]).astype(np.uint64)
    np.testing.assert_array_equal(olds[order, 1], initial[1] + before)
    np.testing.assert_array_equal(final, [initial[0] + n, initial[1] + tids.sum()])


@pytest.mark.parametrize("op", ["atom.global.cas.b128", "atom.acq_rel.gpu.global.cas.b128",
                                "atom.cas.b128"])
def test_compare_and_swap_loop_in_global_memory(op: str) -> None:
    """Every thread of two CTAs adds to a 16-byte (count, sum) pair with a
    CAS loop; losers retry with the value they saw."""
    n = 128
    initial = np.array([1000, 7], np.uint64)
    inp = initial[None].copy()
    body = "mov.u64 %rd13, %rd2;" + CAS_LOOP.format(start="ld.global.b128 %q0, [%rd13];", word="%rd13", op=op)
    out = run(body, np.zeros((n + 1, 2), np.uint64), inp, grid=2, block=n // 2)
    _check_cas_loop(initial, out[1:], inp[0], np.arange(n, dtype=np.uint64))


@pytest.mark.parametrize("op", ["atom.shared.cas.b128", "atom.relaxed.cta.shared::cta.cas.b128"])
def test_compare_and_swap_loop_in_shared_memory_with_the_sanitizer(op: str) -> None:
    """The same loop on one shared word per CTA; thread 0 sets it up and
    writes the result out between barriers. The first expected value is a
    guess, (0, 0): a plain load of the word would race with the other
    threads' atomics."""
    n, ctas = 64, 2
    initial = np.array([5, 11], np.uint64)
    inp = np.tile(initial, (ctas, 1))
    body = ("""
    setp.eq.u32 %p1, %r1, 0;
    mul.wide.u32 %rd14, %r2, 16;
    add.s64 %rd15, %rd2, %rd14;
    @%p1 ld.global.b128 %q3, [%rd15];
    @%p1 st.shared.b128 [word], %q3;
    bar.sync 0;
    """ + CAS_LOOP.format(start="mov.b128 %q0, {0, 0};", word="word", op=op) + """
    bar.sync 0;
    @%p1 ld.shared.b128 %q3, [word];
    @%p1 st.global.b128 [%rd15], %q3;
    """)
    out = run(body, np.zeros((ctas * n + 1, 2), np.uint64), inp, grid=ctas, block=n, check=True,
              decls=".shared .align 16 .b8 word[16];")
    for c in range(ctas):
        tids = np.arange(c * n, (c + 1) * n, dtype=np.uint64)
        _check_cas_loop(initial, out[1 + c * n:1 + (c + 1) * n], inp[c], tids)


def test_an_immediate_exchange_value() -> None:
    inp = np.array([[3, 4]], np.uint64)
    out = run("""
    atom.global.exch.b128 %q0, [%rd2], 0x99;
    st.global.b128 [%rd1], %q0;
    """, np.zeros((1, 2), np.uint64), inp)
    np.testing.assert_array_equal(out, [[3, 4]])
    np.testing.assert_array_equal(inp, [[0x99, 0]])


# --- faults and the sanitizer ---------------------------------------------------------------------


LOCAL_DECLS = ".shared .align 16 .b8 sbuf[64];\n.local .align 16 .b8 lbuf[32];"


@pytest.mark.parametrize("body,message", [
    ("ld.global.b128 %q0, [%rd2+8];",
     r"misaligned 16-byte global access at 0x[0-9a-f]+8 \(offset 0x8 of parameter 'inp'; CTA 0, thread 0\)"),
    ("add.s64 %rd6, %rd2, 8; ld.b128 %q0, [%rd6];", "misaligned 16-byte global access"),
    ("mov.b128 %q0, {%rd1, %rd2}; st.shared.b128 [sbuf+8], %q0;", "misaligned 16-byte shared access"),
    ("mov.b128 %q0, {%rd1, %rd2}; st.local.b128 [lbuf+8], %q0;", "misaligned 16-byte local access"),
    ("mov.b128 %q1, {%rd1, %rd2}; atom.global.cas.b128 %q0, [%rd2+24], %q1, %q1;",
     "misaligned 16-byte global access"),
    ("mov.b128 %q1, {%rd1, %rd2}; atom.global.exch.b128 %q0, [%rd2+4], %q1;", "misaligned 16-byte global access"),
])
def test_misaligned_sixteen_byte_accesses_fault(body: str, message: str) -> None:
    with pytest.raises(SimError, match=message):
        run(body, np.zeros(4, np.uint64), np.zeros(4, np.uint64), decls=LOCAL_DECLS)


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("body,message", [
    # inp has 24 bytes: the second 16-byte value runs 8 bytes past its end.
    ("ld.global.b128 %q0, [%rd2+16];",
     r"global access of 16 bytes at offset 0x10 of parameter 'inp' is out of bounds \(its buffer has 24 bytes"),
    ("mov.u32 %r5, 64; ld.shared.b128 %q0, [%r5];", "shared access of 16 bytes at offset 0x40 is out of bounds"),
    ("mov.b128 %q1, {%rd1, %rd2}; atom.global.exch.b128 %q0, [%rd2+16], %q1;",
     "global access of 16 bytes at offset 0x10 of parameter 'inp' is out of bounds"),
])
def test_out_of_bounds_sixteen_byte_accesses_fault(body: str, message: str, check: bool) -> None:
    with pytest.raises(SimError, match=message):
        run(body, np.zeros(4, np.uint64), np.zeros(3, np.uint64), decls=LOCAL_DECLS, check=check)


def test_the_sanitizer_finds_an_uninitialised_b128_register() -> None:
    with pytest.raises(SanitizerError, match=r"read of uninitialised register %q3 at PTX line \d+ "
                                             r"\(st.global.b128\), CTA \(0, 0, 0\) thread \(0, 0, 0\)"):
        run("st.global.b128 [%rd5], %q3;", np.zeros((4, 2), np.uint64), block=4, check=True)
    # Without the sanitizer the register reads as zero.
    out = run("st.global.b128 [%rd5], %q3;", np.ones((4, 2), np.uint64), block=4)
    np.testing.assert_array_equal(out, 0)


def test_the_sanitizer_finds_a_b128_register_only_some_threads_wrote() -> None:
    """The unpack carries the undefined halves along (compilers pack and
    unpack undefined parts on purpose); the use of one is the finding."""
    with pytest.raises(SanitizerError, match=r"read of uninitialised register %rd7 .* thread \(2, 0, 0\)"):
        run("""
        mov.b128 %q0, {%rd1, %rd2};
        setp.lt.u32 %p1, %r1, 2;
        @%p1 mov.b128 %q1, %q0;
        mov.b128 {%rd6, %rd7}, %q1;
        add.u64 %rd8, %rd7, 1;
        """, np.zeros((4, 2), np.uint64), block=4, check=True)


@pytest.mark.parametrize("body,message", [
    # thread 1 reads 16 shared bytes nobody wrote
    ("setp.eq.u32 %p1, %r1, 1; @%p1 ld.shared.b128 %q0, [sbuf+16];",
     r"read of uninitialised shared memory at offset 0x10 .* thread \(1, 0, 0\)"),
    # thread 0 stores 16 bytes, thread 1 reads their high half without a barrier
    ("mov.b128 %q0, {%rd1, %rd2}; setp.eq.u32 %p1, %r1, 0; @%p1 st.shared.b128 [sbuf], %q0;"
     " setp.eq.u32 %p2, %r1, 1; @%p2 ld.shared.b64 %rd6, [sbuf+8];",
     r"shared-memory race: read of offset 0x8 .* thread \(1, 0, 0\)"),
    # every thread stores its own 16 bytes to one place (the same value from
    # every thread would be a race only in check="strict")
    ("mov.b128 %q0, {%rd3, %rd2}; st.shared.b128 [sbuf+32], %q0;", "shared-memory race: write of offset 0x20"),
    # an atomic on bytes nobody wrote
    ("mov.b128 %q0, {%rd1, %rd2}; atom.shared.exch.b128 %q1, [sbuf+16], %q0;",
     "atomic on uninitialised shared memory at offset 0x10"),
    # a plain store and another thread's atomic on the same word, no barrier between
    ("mov.b128 %q0, {%rd1, %rd2}; setp.eq.u32 %p1, %r1, 0; @%p1 st.shared.b128 [sbuf], %q0;"
     " setp.eq.u32 %p2, %r1, 1; @%p2 atom.shared.exch.b128 %q1, [sbuf], %q0;",
     r"atomic on offset 0x0 .* thread \(1, 0, 0\) conflicts with the write at PTX line \d+ "
     r"\(st.shared.b128\) by thread \(0, 0, 0\)"),
])
def test_the_sanitizer_checks_sixteen_byte_shared_accesses(body: str, message: str) -> None:
    with pytest.raises(SanitizerError, match=message):
        run(body, np.zeros((4, 2), np.uint64), block=4, check=True, decls=LOCAL_DECLS)


# --- the DSL ---------------------------------------------------------------------------------------


@kernel(in_specs=(Tile("N", u64),), out_specs=(Tile("N", u64),), grid=(1, 1, 1), block=(32, 1, 1),
        arch="sm_90a")
def swap_halves(x, y):
    """Each thread loads one 16-byte value, swaps its 64-bit halves through
    mov.b128 unpack and pack, and stores it."""
    off = ptx.mul.wide.u32(ptx.special.tid.x(), 16)
    q = ptx.ld.global_.b128(x.ptr + off)
    lo, hi = reg.scalar(u64), reg.scalar(u64)
    ptx.mov.b128([lo, hi], q)
    swapped = reg.scalar(b128)
    ptx.mov.b128(swapped, [hi, lo])
    ptx.st.global_.b128(y.ptr + off, swapped)
    ptx.ret()


def test_a_traced_kernel_with_b128_registers() -> None:
    text = swap_halves.ptx(N=64)
    assert ".reg .b128" in text
    ptxas(text, "sm_90a")
    x = pairs(32, 9).reshape(-1)
    y = np.zeros_like(x)
    sim.launch(swap_halves, x, y)
    np.testing.assert_array_equal(y.reshape(-1, 2), x.reshape(-1, 2)[:, ::-1])

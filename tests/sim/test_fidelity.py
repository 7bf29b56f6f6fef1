"""The fidelity report of ``Device.launch(fidelity=True)``: the class of
every executed instruction (from the ISA table), the bounds and notes of
inexact ones, and taint tracking from approximate/reading instructions to
addresses, branches and barriers (``jaxptx.sim.fidelity``).

Kernels are real PTX run on the emulator; the lines a report must name are
found in the kernel text by the test, not taken from the report.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import jaxptx.profile  # noqa: F401  (registers the profiler: profile=True below)
from jaxptx import isa, sim
from jaxptx.isa import INSTRUCTIONS, fidelity_of

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the only line of ``text`` that contains ``needle``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def kernel(body: str, regs: str = "", head: str = HEAD) -> str:
    """An entry ``k(x, y)`` with the usual registers and ``%rd3 = 4 * %tid.x``."""
    return head + f""".visible .entry k(.param .u64 x, .param .u64 y)
{{
    .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .f32 %f<12>; .reg .pred %p<4>; {regs}
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
{body}
    ret;
}}"""


def run(text: str, x: np.ndarray, n_out: int = 32, block: int = 32, **kw) -> tuple[sim.Fidelity, np.ndarray]:
    dev = sim.Device()
    xa = dev.to_device(np.ascontiguousarray(x))
    ya = dev.alloc(4 * n_out)
    report = dev.launch(text, [xa, ya], block=block, fidelity=True, **kw)
    return report, dev.from_device(ya, like=np.zeros(n_out, np.float32))


X = np.linspace(-2.0, 3.0, 32).astype(np.float32)

EXACT_ONLY = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.rn.f32 %f2, %f1, %f1;
    fma.rn.f32 %f3, %f2, %f1, %f1;
    add.s32 %r2, %r1, 3;
    cvt.rn.f32.s32 %f4, %r2;
    mul.rn.f32 %f5, %f3, %f4;
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f5;""")


def test_exact_operations_give_an_exact_report():
    report, y = run(EXACT_ONLY, X)
    x = X.astype(np.float64)
    np.testing.assert_allclose(y, (2 * x * x + x) * (np.arange(32) + 3), rtol=1e-6)
    assert report.is_exact
    assert report.approximate == {} and report.reading == {} and report.reached == []
    assert report.exact["fma.rn.f32"] == 32 and report.exact["add.u64"] == 64
    assert report.exact["ld.param.u64"] == 64 and report.exact["ret"] == 32
    assert report.to_dict()["is_exact"] is True
    assert "every instruction exact" in report.summary()


APPROX_STORED = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    setp.lt.u32 %p1, %r1, 8;
@%p1 lg2.approx.f32 %f2, %f2;
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f2;""")


def test_approximate_instructions_with_their_stated_bounds_and_counts():
    report, y = run(APPROX_STORED, X)
    want = np.exp2(X.astype(np.float64))
    want[:8] = X[:8]
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert not report.is_exact
    ex2 = report.approximate["ex2.approx.ftz.f32"]
    assert ex2.count == 32
    # PTX ISA 9.1, ex2: "The maximum ulp error is 2 ulp ... across the full range of inputs."
    assert [(b.measure, b.ulps) for b in ex2.bounds] == [("ulp", 2)]
    lg2 = report.approximate["lg2.approx.f32"]
    assert lg2.count == 8                     # guarded: only the threads that ran it
    # PTX ISA 9.1, lg2: absolute 2^-22 in (0.5, 2), relative 2^-22 elsewhere.
    assert [(b.measure, b.log2) for b in lg2.bounds] == [("absolute", -22), ("relative", -22)]
    assert report.exact["setp.lt.u32"] == 32 and "ex2.approx.ftz.f32" not in report.exact
    # the approximate values only reach the output: nothing to report
    assert report.reached == []
    d = json.loads(json.dumps(report.to_dict()))
    assert set(d) == {"exact", "approximate", "reading", "reached", "is_exact"}
    assert d["approximate"]["ex2.approx.ftz.f32"]["count"] == 32
    assert d["approximate"]["lg2.approx.f32"]["bounds"][0]["value"] == 2.0 ** -22
    assert "ex2.approx.ftz.f32 x32: max 2 ulp" in report.summary()


APPROX_ADDRESS = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    cvt.rzi.u32.f32 %r2, %f2;
    and.b32 %r3, %r2, 31;
    mul.wide.u32 %rd6, %r3, 4;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.f32 %f3, [%rd7];
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f3;""")


def test_an_approximate_value_used_in_an_address_is_reported_with_both_lines():
    report, y = run(APPROX_ADDRESS, X)
    index = np.floor(np.exp2(X.astype(np.float64))).astype(np.int64) & 31
    np.testing.assert_array_equal(y, X[index])
    (r,) = report.reached
    assert (r.reached, r.instruction, r.origin_class) == ("address", "ld.global.f32", "approx")
    assert r.line == line_of(APPROX_ADDRESS, "[%rd7]")
    assert r.origin_line == line_of(APPROX_ADDRESS, "ex2.approx")
    assert r.origin_instruction == "ex2.approx.ftz.f32"
    assert r.where == f"PTX line {r.line}"
    assert f"PTX line {r.line}" in report.summary()
    (d,) = report.to_dict()["reached"]
    assert d["reached"] == "address" and d["line"] == r.line and d["origin_line"] == r.origin_line


SHARED_BRANCH = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    mov.u32 %r4, buf;
    mad.lo.u32 %r5, %r1, 4, %r4;
    st.shared.f32 [%r5], %f2;
    bar.sync 0;
    add.u32 %r6, %r1, 1;
    and.b32 %r6, %r6, 31;
    mad.lo.u32 %r7, %r6, 4, %r4;
    CLOBBER
    ld.shared.f32 %f3, [%r7];
    setp.gt.f32 %p1, %f3, 1.0;
    mov.f32 %f4, 0f00000000;
@%p1 bra BIG;
    mov.f32 %f4, 0f3F800000;
BIG:
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f4;""", regs=".shared .align 4 .f32 buf[32];")


def test_a_value_through_shared_memory_reaching_a_branch():
    text = SHARED_BRANCH.replace("CLOBBER", "")
    report, y = run(text, X)
    np.testing.assert_array_equal(y, np.where(np.exp2(np.roll(X, -1).astype(np.float64)) > 1, 0, 1))
    (r,) = report.reached
    assert (r.reached, r.instruction) == ("branch", "bra")
    assert r.line == line_of(text, "@%p1 bra")
    assert (r.origin_class, r.origin_line) == ("approx", line_of(text, "ex2.approx"))


def test_an_exact_store_over_tainted_bytes_clears_them():
    # Each thread overwrites its neighbour's word with its own (exact) input
    # before reading it back: the branch no longer depends on ex2.
    text = SHARED_BRANCH.replace("CLOBBER", "bar.sync 0;\n    st.shared.f32 [%r7], %f1;\n    bar.sync 0;")
    report, y = run(text, X)
    np.testing.assert_array_equal(y, np.where(X > 1, 0, 1))
    assert report.approximate["ex2.approx.ftz.f32"].count == 32
    assert report.reached == []


SHUFFLED = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.f32 %f2, 0f00000000;
    setp.eq.u32 %p1, %r1, 5;
@%p1 ex2.approx.ftz.f32 %f2, %f1;
    shfl.sync.idx.b32 %r2, %f2, 5, 31, -1;
    and.b32 %r3, %r2, 124;
    cvt.u64.u32 %rd6, %r3;
    add.u64 %rd7, %rd1, %rd6;
    mov.f32 %f3, 0f00000000;
@!%p1 ld.global.f32 %f3, [%rd7];
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f3;""")


def test_a_value_one_lane_computed_reaches_the_others_through_a_shuffle():
    # Only lane 5 runs ex2, and only the other lanes load.
    report, y = run(SHUFFLED, X)
    word = int(np.float32(np.exp2(np.float64(X[5]))).view(np.uint32)) & 124
    np.testing.assert_array_equal(y, np.where(np.arange(32) == 5, 0, X[word // 4]))
    assert report.approximate["ex2.approx.ftz.f32"].count == 1
    (r,) = report.reached
    assert (r.reached, r.line) == ("address", line_of(SHUFFLED, "[%rd7]"))


ATOMIC = kernel("""
    mov.f32 %f2, 0f00000000;
    setp.eq.u32 %p1, %r1, 0;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
@%p1 ex2.approx.ftz.f32 %f2, %f1;
    cvt.rzi.u32.f32 %r2, %f2;
    atom.global.add.u32 %r3, [%rd2], %r2;
    and.b32 %r4, %r3, 31;
    mul.wide.u32 %rd6, %r4, 4;
    add.u64 %rd7, %rd1, %rd6;
@!%p1 ld.global.f32 %f3, [%rd7];""")


def test_an_atomic_passes_one_thread_s_taint_to_the_others():
    # Thread 0 adds an approximate value; the later threads' old values
    # include it, so their loads depend on it (thread 0 itself does not load).
    report, _ = run(ATOMIC, X)
    (r,) = report.reached
    assert (r.reached, r.line) == ("address", line_of(ATOMIC, "[%rd7]"))


BARRIER = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    cvt.rzi.u32.f32 %r2, %f2;
    min.u32 %r2, %r2, 0;
    add.u32 %r3, %r2, 32;
    bar.sync 1, %r3;""")


def test_an_approximate_value_in_a_barrier_count():
    report, _ = run(BARRIER, np.zeros(32, np.float32))
    (r,) = report.reached
    assert (r.reached, r.instruction, r.line) == ("barrier", "bar.sync", line_of(BARRIER, "bar.sync 1"))


CVT_HEAD = ".version 8.8\n.target sm_100a\n.address_size 64\n"
CVT_RS = kernel("""
    mul.wide.u32 %rd6, %r1, 16;
    add.u64 %rd4, %rd1, %rd6;
    ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd4];
    mul.lo.u32 %r2, %r1, -1640531535;
    cvt.rs.satfinite.e4m3x4.f32 %r3, {%f0, %f1, %f2, %f3}, %r2;
    cvt.rs.f16x2.f32 %r4, %f0, %f1, %r2;
    xor.b32 %r5, %r3, %r4;
    add.u64 %rd5, %rd2, %rd3;
    st.global.b32 [%rd5], %r5;""", head=CVT_HEAD)


def test_stochastic_rounding_of_four_values_is_a_reading():
    report, _ = run(CVT_RS, np.linspace(-3, 3, 128).astype(np.float32))
    (name,) = report.reading
    assert name == "cvt.rs.satfinite.e4m3x4.f32" and report.reading[name].count == 32
    assert "figure" in report.reading[name].notes[0]
    # the f16x2 split is stated in the ISA's text: exact
    assert report.exact["cvt.rs.f16x2.f32"] == 32
    assert report.approximate == {} and report.reached == []
    assert not report.is_exact and "reading cvt.rs.satfinite.e4m3x4.f32 x32" in report.summary()


def test_with_the_sanitizer_and_the_profiler():
    dev = sim.Device()
    xa, ya = dev.to_device(X), dev.alloc(128)
    report = dev.launch(APPROX_ADDRESS, [xa, ya], block=32, fidelity=True, check="all", profile=True)
    assert report.findings == []
    assert report.profile.find("ex2.approx")[0]["executions"] == 1
    assert [r.reached for r in report.reached] == ["address"]
    # without fidelity= the return values are what they were
    assert dev.launch(APPROX_ADDRESS, [xa, ya], block=32) is None
    assert dev.launch(APPROX_ADDRESS, [xa, ya], block=32, check="all") == []


# --- the classification comes from the table ----------------------------------------------------

def _example(inst: isa.Inst) -> dict[str, str]:
    """Slot values choosing every slot's first value."""
    return {s.name: s.values[0] for s in inst.slots}


APPROX_ENTRIES = [e for e in INSTRUCTIONS if any(v in ("approx", "full") for s in e.slots for v in s.values)]


def test_the_table_has_the_approximate_forms():
    # rcp x2, sqrt, rsqrt x2, sin, cos, lg2, ex2 x3, tanh x3, div.{approx,full}
    assert len(APPROX_ENTRIES) == 15


@pytest.mark.parametrize("inst", APPROX_ENTRIES, ids=lambda e: e.form)
def test_every_approx_form_is_approximate_with_its_isa_statement(inst):
    """Fails if an ``.approx`` entry loses (or is added without) its
    ``fidelity=approx(...)`` clause, or if ``fidelity_of`` stops reading it."""
    for s in inst.slots:
        for value in s.values:
            if value not in ("approx", "full"):
                continue
            values = {**_example(inst), s.name: value}
            cls, _ = fidelity_of(inst, values)
            assert cls == isa.APPROX
            stated = [c for c in inst.fidelity if c.kind == "approx" and c.applies(values)]
            assert stated, f"{inst.form}: no approx clause in the table for .{value}"
            assert all(c.bounds or "no error bound" in c.note or "bound for" in c.note for c in stated)


def test_exact_forms_stay_exact():
    """No entry without an approximate modifier is approximate, and the
    IEEE forms of the same opcodes are exact."""
    approximate = [e.form for e in INSTRUCTIONS if e not in APPROX_ENTRIES
                   and fidelity_of(e, _example(e))[0] == isa.APPROX]
    assert approximate == []
    for name, mods in (("rcp", ("rn", "f32")), ("div", ("rn", "f32")), ("add", ("rn", "f32")),
                       ("cvt", ("rs", "f16x2", "f32"))):
        r = isa.resolve(name, mods)
        assert fidelity_of(r.inst, r.values) == (isa.EXACT, ())


def test_readings_the_table_names():
    def cls(name: str, mods: tuple[str, ...]) -> str:
        r = isa.resolve(name, mods)
        return fidelity_of(r.inst, r.values)[0]
    assert cls("cvt", ("rs", "satfinite", "e2m1x4", "f32")) == isa.READING
    assert cls("mma", ("sync", "aligned", "m16n8k16", "row", "col", "f32", "bf16", "bf16", "f32")) == isa.READING
    assert cls("mma", ("sync", "aligned", "m16n8k32", "row", "col", "s32", "s8", "s8", "s32")) == isa.EXACT
    sparse = isa.resolve("tcgen05.mma.sp", ("cta_group::1", "kind::i8"))
    kinds, clauses = fidelity_of(sparse.inst, sparse.values)
    assert kinds == isa.READING and any("metadata" in c.note for c in clauses)
    ashift = [e for e in INSTRUCTIONS if e.sim == "tcgen05_mma_ashift"]
    assert ashift and all(any(".ashift" in c.note for c in e.fidelity) for e in ashift)


# --- a library kernel ----------------------------------------------------------------------------

def test_the_softmax_kernel_reports_its_ex2():
    from jaxptx.kernels._norms_kernels import row_kernel
    from jaxptx.kernels._norms_rows import plan
    rows, n = 3, 64
    p = plan(n, "f32")
    k = row_kernel("softmax", "f32", "sm_80", p.threads, p.cached)
    launch = k.specialize(R=rows, N=n).launch
    text = k.ptx(R=rows, N=n)
    x = np.random.default_rng(3).standard_normal((rows, n)).astype(np.float32)
    dev = sim.Device()
    xa, ya = dev.to_device(x), dev.alloc(x.nbytes)
    report = dev.launch(text, [xa, ya], grid=launch.grid, block=launch.block, fidelity=True)
    y = dev.from_device(ya, like=x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert set(report.approximate) >= {"ex2.approx.f32"}
    # one ex2 per value a thread holds, every thread of a row (lanes past the row's end compute too)
    assert p.rounds == 1 and report.approximate["ex2.approx.f32"].count == rows * p.threads * p.vec
    assert report.reading == {} and not report.is_exact
    # softmax's exponentials feed its sums and outputs, never an address or a branch
    assert report.reached == []


# --- taint through hidden state, tensor memory, calls and tensor cores ---------------------------

CARRY = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    cvt.rzi.u32.f32 %r2, %f2;
    add.cc.u32 %r3, %r2, -4;
    addc.u32 %r4, 0, 0;
    mul.wide.u32 %rd6, %r4, 4;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.f32 %f3, [%rd7];""")


def test_the_carry_flag_carries_taint():
    # %r4 is only the carry out of an add with an approximate operand.
    report, _ = run(CARRY, X)
    (r,) = report.reached
    assert (r.reached, r.line) == ("address", line_of(CARRY, "[%rd7]"))


CALL = HEAD + """.func (.reg .b32 out) twice(.reg .b32 in)
{
    add.u32 out, in, in;
    ret;
}
.visible .entry k(.param .u64 x, .param .u64 y)
{
    .reg .b32 %r<12>; .reg .b64 %rd<12>; .reg .f32 %f<12>;
    ld.param.u64 %rd1, [x];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    cvt.rzi.u32.f32 %r2, %f2;
    call (%r3), twice, (%r2);
    and.b32 %r4, %r3, 124;
    cvt.u64.u32 %rd6, %r4;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.f32 %f3, [%rd7];
    ret;
}"""


def test_taint_through_a_call_and_its_return():
    report, _ = run(CALL, X)
    assert report.exact["add.u32"] == 32
    (r,) = report.reached
    assert (r.reached, r.line) == ("address", line_of(CALL, "[%rd7]"))


TMEM = kernel("""
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 32;
    bar.sync 0;
    ld.shared.b32 %r8, [slot];
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    ex2.approx.ftz.f32 %f2, %f1;
    mov.b32 %r2, %f2;
    tcgen05.st.sync.aligned.32x32b.x1.b32 [%r8], {%r2};
    tcgen05.wait::st.sync.aligned;
    tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r3}, [%r8];
    tcgen05.wait::ld.sync.aligned;
    and.b32 %r4, %r3, 124;
    cvt.u64.u32 %rd6, %r4;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.f32 %f3, [%rd7];
    add.u64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f3;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r8, 32;
    tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;""",
              regs=".shared .align 4 .b32 slot;", head=CVT_HEAD)


def test_taint_through_tensor_memory():
    report, y = run(TMEM, X)
    words = np.exp2(X.astype(np.float64)).astype(np.float32).view(np.uint32) & 124
    np.testing.assert_array_equal(y, X[words // 4])
    (r,) = report.reached
    assert (r.reached, r.line, r.origin_class) == ("address", line_of(TMEM, "[%rd7]"), "approx")


MMA = kernel("""
    add.u64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.b32 %r2, %f1;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f4, %f5, %f6, %f7}, {%r2, %r2, %r2, %r2},
        {%r2, %r2}, {%f1, %f1, %f1, %f1};
    cvt.rzi.u32.f32 %r4, %f4;
    and.b32 %r4, %r4, 31;
    mul.wide.u32 %rd6, %r4, 4;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.f32 %f3, [%rd7];""")


def test_a_floating_point_mma_is_a_reading_whose_results_are_followed():
    report, _ = run(MMA, np.ones(32, np.float32))
    (name,) = report.reading
    assert name.startswith("mma.sync.aligned.m16n8k16") and report.reading[name].count == 32
    assert "order and intermediate precision" in report.reading[name].notes[0]
    (r,) = report.reached
    assert (r.reached, r.line, r.origin_class) == ("address", line_of(MMA, "[%rd7]"), "reading")
    assert r.origin_line == line_of(MMA, "mma.sync")

"""The planted-bug suite of the sanitizer (issue 12): every bug is found and
names its line (and the other access's), and every correct twin, which
differs from its bug by the fix only, runs clean under ``check=True`` with
the right numbers. ptxas accepts every kernel. The cases are in
:mod:`sanitizer_cases_races`, ``_checks``, ``_global``, ``_copies``, ``_mma``
and ``_cells``; the sanitizer's known misses and false alarms are strict
xfails (they turn red when fixed).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
from sanitizer_cases import Case, kernel_text, marked_line, marked_lines
from sanitizer_cases_cells import CASES as CELLS
from sanitizer_cases_checks import CASES as CHECKS
from sanitizer_cases_copies import CASES as COPIES
from sanitizer_cases_global import CASES as GLOBAL
from sanitizer_cases_mma import CASES as MMA
from sanitizer_cases_races import CASES as RACES

from jaxptx import Tile, kernel, ptx, sim, smem
from jaxptx.runtime import ptxas
from jaxptx.sim import SanitizerError, SimError
from jaxptx.sim.core.sanitizer import values
from jaxptx.types import u32

CASES = RACES + CHECKS + GLOBAL + COPIES + MMA + CELLS
IDS = [re.sub(r"[^a-z0-9]+", "-", c.name.lower()).strip("-") for c in CASES]


def _launch(case: Case, text: str, check) -> tuple[np.ndarray, np.ndarray, object]:
    out, inp = case.arrays()
    result = sim.launch(text, out, inp, block=(case.block, 1, 1), grid=(case.grid, 1, 1),
                        cluster=(case.cluster, 1, 1), check=check)
    return out, inp, result


def _marked(reason_attr: str):
    """The cases, each a strict xfail where ``reason_attr`` names a known gap."""
    return [pytest.param(c, id=i, marks=[pytest.mark.xfail(strict=True, reason=getattr(c, reason_attr))]
                         if getattr(c, reason_attr) else []) for c, i in zip(CASES, IDS)]


def test_the_suite_covers_enough_bugs() -> None:
    assert len(CASES) >= 40
    assert len(set(IDS)) == len(IDS)
    for c in CASES:
        bug, twin = kernel_text(c, True), kernel_text(c, False)
        assert bug != twin, c.name
        assert marked_line(bug, "//@L") is not None, c.name


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ptxas_accepts_the_bug_and_its_twin(case: Case) -> None:
    ptxas(kernel_text(case, True), case.arch)
    ptxas(kernel_text(case, False), case.arch)


@pytest.mark.parametrize("case", _marked("bug_xfail"))
def test_the_bug_is_found(case: Case) -> None:
    text = kernel_text(case, True)
    lines, others = marked_lines(text, "//@L"), marked_lines(text, "//@O")
    expected = (SanitizerError, SimError) if case.kind == "sim" else SanitizerError
    either = "|".join(str(n) for n in lines)
    with pytest.raises(expected, match=rf"PTX line ({either})\b") as info:
        _launch(case, text, case.mode)
    if case.kind == "sim" and not isinstance(info.value, SanitizerError):
        return              # the emulator refused it itself (tensor memory not allocated, a hang)
    finding = info.value.findings[0]
    assert finding.kind in case.kind.split("|"), finding.message
    named = {finding.line.split(" (")[0], finding.other.split(" (")[0]} - {""}
    if others:
        assert any(named == {f"PTX line {n}", f"PTX line {o}"} for n in lines for o in others), finding.message
    else:
        assert any(f"PTX line {n}" in named for n in lines), finding.message


@pytest.mark.parametrize("case", _marked("twin_xfail"))
def test_the_twin_is_clean_and_right(case: Case) -> None:
    text = kernel_text(case, False)
    out, inp, _ = _launch(case, text, True)
    if case.expect is not None:
        np.testing.assert_array_equal(out, case.expect(inp, case.grid, case.block))
    if case.mode == "strict":
        _launch(case, text, "strict")


def _all_findings(case: Case) -> list:
    """What a bug and its twin give under ``check="all"`` (strict cases:
    their mode): each finding's message, or the error raised."""
    out = []
    for bug in (True, False):
        try:
            result = _launch(case, kernel_text(case, bug), "all" if case.mode is True else case.mode)[2]
            out.append([f.message for f in result or ()])
        except (SanitizerError, SimError) as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


def _assert_finds_the_bug(case: Case, findings: list, grain: str) -> None:
    """The bug side reports something naming a ``//@L`` line; the twin side
    is clean."""
    bug, twin = findings
    text = " ".join(bug) if isinstance(bug, list) else bug
    lines = marked_lines(kernel_text(case, True), "//@L")
    assert bug and any(re.search(rf"PTX line {n}\b", text) for n in lines), f"{grain}: {bug}"
    assert twin == [], f"{grain}: {twin}"


@pytest.mark.parametrize("case", _marked("bug_xfail"))
def test_coarse_shadow_cells_find_what_byte_cells_find(case: Case, monkeypatch) -> None:
    """The shadows start with 16-byte cells and split them where an access
    covers part of one: the findings are those of one cell per byte. Each
    side must find the planted bug first, so two equal misses do not pass."""
    coarse = _all_findings(case)
    _assert_finds_the_bug(case, coarse, "16-byte cells")
    monkeypatch.setattr(values, "GRAIN", 1)
    fine = _all_findings(case)
    _assert_finds_the_bug(case, fine, "1-byte cells")
    assert fine == coarse


@pytest.mark.parametrize("name", ["global memory: a CTA overwrites an input",
                                  "global memory: a warp overwrites a word another warp read"])
def test_reads_of_an_unwritten_buffer_are_recorded_whatever_their_volume(monkeypatch, name: str) -> None:
    """Plain reads of a global buffer nothing has written are kept aside and
    recorded when it is first written, or once they pass a size: a race
    with the write (by another CTA, or another warp of the reader's CTA) is
    found either way."""
    from jaxptx.sim.core.sanitizer import memory
    case = next(c for c in CASES if c.name.startswith(name))
    text = kernel_text(case, True)
    for limit in (1, memory.READ_LOG_BYTES):
        monkeypatch.setattr(memory, "READ_LOG_BYTES", limit)
        with pytest.raises(SanitizerError, match=rf"PTX line {marked_line(text, '//@L')}\b"):
            _launch(case, text, True)
        _launch(case, kernel_text(case, False), True)


def test_same_value_stores_are_reported_only_in_strict_mode() -> None:
    """Every thread stores 5 to one shared word: benign, so check=True and
    check="all" say nothing and the result is right; check="strict" reports
    the unordered writes as a race (both at the marked line)."""
    case = next(c for c in CASES if c.mode == "strict")
    text = kernel_text(case, True)
    line = marked_line(text, "//@L")
    out, inp, result = _launch(case, text, True)
    assert result is None
    np.testing.assert_array_equal(out, case.expect(inp, case.grid, case.block))
    assert _launch(case, text, "all")[2] == []
    with pytest.raises(SanitizerError, match=rf"shared-memory race: write of offset 0x8 at PTX line {line}\b.*"
                                             rf"conflicts with the write at PTX line {line}\b"):
        _launch(case, text, "strict")
    assert _launch(case, kernel_text(case, False), "strict")[2] is None    # the fix: one thread stores


@pytest.mark.parametrize("body", [
    "    [[||@%p1 ]]st.global.u32 [%rd1], 5;     //@L\n",           # every thread, one instruction
    next(c for c in GLOBAL if c.mode == "strict").body,               # two warps, two instructions
], ids=["one-instruction", "two-warps"])
def test_same_value_global_stores_within_a_cta_are_reported_only_in_strict_mode(body: str) -> None:
    """Threads of one CTA storing the same value to one global word: clean
    under check=True and "all" with the right result; a race naming the
    word under check="strict"."""
    case = Case("same value", body, "race", lambda inp, g, b: np.r_[5, np.zeros(63)].astype(np.uint32))
    text = kernel_text(case, True)
    line = marked_line(text, "//@L")
    out, inp, result = _launch(case, text, True)
    assert result is None
    np.testing.assert_array_equal(out, case.expect(inp, case.grid, case.block))
    assert _launch(case, text, "all")[2] == []
    with pytest.raises(SanitizerError, match=rf"global-memory race within a CTA: write of offset 0x0 of "
                                             rf"parameter 'out' at PTX line {line}\b.*conflicts with the write"):
        _launch(case, text, "strict")


def test_global_memory_kept_apart_per_cta_still_races_between_ctas() -> None:
    """Two CTAs, each of whose warps store to one word then read it after
    bar.sync: clean within each CTA; the word shared by both CTAs is a race
    between CTAs, not within one."""
    body = """
    setp.eq.u32 %p2, %r1, 32;
    @%p1 st.global.u32 [%rd6], 1;
    bar.sync 0;
    @%p2 st.global.u32 [%rd6], 2;               //@L
    bar.sync 0;
    ld.global.u32 %r13, [%rd6];
    st.global.u32 [%rd4+256], %r13;
"""
    per_cta = "    mul.wide.u32 %rd6, %r2, 4;\n    add.u64 %rd6, %rd1, %rd6;\n"
    case = Case("per CTA", per_cta + body, "race", None, grid=2, words=256)
    out, _, _ = _launch(case, kernel_text(case, True), True)
    np.testing.assert_array_equal(out[:2], [2, 2])
    np.testing.assert_array_equal(out[64:192], 2)
    shared = Case("one word", "    mov.u64 %rd6, %rd1;\n" + body, "race", None, grid=2, words=256)
    text = kernel_text(shared, True)
    with pytest.raises(SanitizerError, match=rf"race between CTAs: write at PTX line {marked_line(text, '//@L')}\b"):
        _launch(shared, text, True)


# --- check="all" ------------------------------------------------------------------------------

SEVERAL = """
    st.shared.u32 [%r11], %r4;                  //@W1
    xor.b32 %r12, %r5, 128;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r13, [%r12];                 //@R1
    add.u32 %r14, %r11, 256;
    ld.shared.u32 %r15, [buf+256];              //@R2
    st.shared.u32 [%r14], %r4;                  //@W2
    setp.eq.u32 %p2, %r1, 32;
    @%p1 st.shared.u32 [buf+512], 1;            //@W3
    @%p2 st.shared.u32 [buf+512], 2;            //@W4
    add.u32 %r13, %r13, %r15;
    st.global.u32 [%rd4], %r13;
"""


def test_check_all_returns_every_finding_each_naming_both_accesses() -> None:
    """A RAW, a WAR and a WAW race in one kernel: three findings, each with
    both accesses' lines, and the kernel still runs to the end."""
    text = kernel_text(Case("several", SEVERAL, "race", None), True).replace(
        "    st.shared.u32 [%r11], %r4;                  //@W1",
        "    st.shared.u32 [buf+256], 9;\n    bar.sync 0;\n    st.shared.u32 [%r11], %r4;       //@W1")
    ptxas(text, "sm_90a")
    at = {m: f"PTX line {marked_line(text, '//@' + m)}" for m in ("W1", "R1", "R2", "W2", "W3", "W4")}
    out, inp = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    findings = sim.launch(text, out, inp, block=(64, 1, 1), check="all")
    assert isinstance(findings, list) and len(findings) >= 3
    pairs = {frozenset((f.line.split(" (")[0], f.other.split(" (")[0])) for f in findings}
    for a, b in (("R1", "W1"), ("W2", "R2"), ("W4", "W3")):
        assert frozenset((at[a], at[b])) in pairs, [f.message for f in findings]
    for f in findings:
        assert f.kind == "race" and f.other, f.message
        assert f.line.split(" (")[0] in f.message and f.other.split(" (")[0] in f.message
        assert re.search(r"thread \(\d+, 0, 0\).*thread \(\d+, 0, 0\)", f.message), f.message
    assert out[0] == (32 ^ 0) + 9       # ran to the end: thread 0 read thread 32's word and buf[64]


@pytest.mark.parametrize("name", ["cp.async destination read before cp.async.wait_group",
                                  "bulk copy destination read before its mbarrier phase is observed"])
def test_async_copy_findings_name_the_copy(name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    text = kernel_text(case, True)
    findings = _launch(case, text, "all")[2]
    assert findings and all(f.other for f in findings), [f.message for f in findings]


# --- traced DSL kernels ---------------------------------------------------------------------


def _dsl_exchange(fixed: bool):
    @kernel(arch="sm_90a", block=(64, 1, 1), in_specs=(Tile(64, u32),), out_specs=(Tile(64, u32),),
            name=f"exchange_{int(fixed)}")
    def exchange(x, y):
        tid = ptx.special.tid.x()
        buf = smem.alloc(u32, (64,))
        ptx.st.shared.u32(buf.base + tid * 4, tid)                       # DSL-WRITE
        if fixed:
            ptx.bar.sync(0)
        partner = ptx.ld.shared.u32(buf.base + (tid ^ 32) * 4)           # DSL-READ
        ptx.st.global_.u32(y.ptr + ptx.mul.wide.u32(tid, 4), partner)
        ptx.ret()
    return exchange


def _source_line(tag: str) -> int:
    lines, start = inspect.getsourcelines(_dsl_exchange)
    return start + next(i for i, text in enumerate(lines) if text.rstrip().endswith("# " + tag))


def test_a_finding_in_a_traced_kernel_names_the_python_lines() -> None:
    here = Path(__file__).name
    x, y = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    read, write = _source_line("DSL-READ"), _source_line("DSL-WRITE")
    with pytest.raises(SanitizerError, match=rf"{re.escape(here)}:{read}\b.*{re.escape(here)}:{write}\b"):
        sim.launch(_dsl_exchange(False), x, y, check=True)
    sim.launch(_dsl_exchange(True), x, y, check=True)
    np.testing.assert_array_equal(y, np.arange(64) ^ 32)


def test_a_misaligned_vector_access_names_its_cta_and_thread() -> None:
    body = """
    shl.b32 %r12, %r1, 3;
    add.u32 %r12, %r10, %r12;
    setp.eq.u32 %p2, %r1, 37;
    @%p2 add.u32 %r12, %r12, 4;
    st.shared.v2.u32 [%r12], {%r4, %r4};        //@L
"""
    case = Case("misaligned", body, "sim", None, grid=2)
    text = kernel_text(case, True)
    ptxas(text, "sm_90a")
    line = marked_line(text, "//@L")
    with pytest.raises(SimError, match=rf"PTX line {line}\b.*CTA \(0, 0, 0\) thread \(37, 0, 0\)|"
                                       rf"CTA \(0, 0, 0\) thread \(37, 0, 0\).*PTX line {line}\b"):
        _launch(case, text, True)


def _jit_finding(fixed: bool) -> str:
    """The error text of the DSL exchange under ``jax.jit`` with
    ``sim.checking()`` on (empty when it runs clean)."""
    import jax

    x = np.arange(64, dtype=np.uint32)
    try:
        with sim.checking():
            y = np.asarray(jax.jit(_dsl_exchange(fixed))(x))
    except Exception as e:        # jax wraps the SanitizerError raised in its CPU callback
        return str(e)
    np.testing.assert_array_equal(y, x ^ 32)
    return ""


def test_under_jax_jit_checking_names_the_kernel_and_the_python_line() -> None:
    here = Path(__file__).name
    message = _jit_finding(False)
    assert "SanitizerError" in message and "exchange_0" in message, message
    assert "shared-memory race" in message and f"{here}:{_source_line('DSL-READ')}" in message, message
    assert _jit_finding(True) == ""


def test_under_jax_jit_a_finding_names_both_python_lines() -> None:
    here = Path(__file__).name
    message = _jit_finding(False)
    assert f"{here}:{_source_line('DSL-WRITE')}" in message, message

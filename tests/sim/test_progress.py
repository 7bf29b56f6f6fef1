"""Long emulations speak: progress reports on the ``jaxptx.sim`` logger, the
``max_seconds`` / ``JAXPTX_SIM_TIMEOUT`` wall-time bound, and loops whose
condition is constant for its type, stopped the first time a thread takes
their backward branch. Correct kernels, including ones that look alike, run
to the end. Every kernel is assembled by ptxas first; every test runs under
a SIGALRM deadline."""

from __future__ import annotations

import logging
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from jaxptx import Tile, ptx, sim
from jaxptx import kernel as jaxptx_kernel
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError
from jaxptx.types import u32

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"
REGS = "    .reg .b32 %r<20>; .reg .b64 %rd<20>; .reg .pred %p<8>;\n"
DEADLINE_S = 30


@pytest.fixture(autouse=True)
def deadline(monkeypatch):
    """Fail (rather than hang the suite) past DEADLINE_S; start from the
    defaults whatever the environment says."""
    for name in ("JAXPTX_SIM_TIMEOUT", "JAXPTX_SIM_PROGRESS_SECONDS", "JAXPTX_SIM_MAX_STEPS"):
        monkeypatch.delenv(name, raising=False)

    def expired(signum, frame):
        raise TimeoutError(f"test ran past {DEADLINE_S} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def kernel(body: str, params: str = ".param .u64 out") -> str:
    text = (HEAD + f".visible .entry k({params})\n{{\n" + REGS +
            "    ld.param.u64 %rd1, [out];\n    mov.u32 %r1, %tid.x;\n" + body + "\n    ret;\n}\n")
    ptxas(text, "sm_90a")
    return text


def line_of(text: str, needle: str) -> int:
    """1-based PTX line of the first line containing ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# A counter loop that writes memory each turn and stops after n turns
# (n = 0: after 2**32 turns, for this test suite never).
COUNT = kernel("""
    ld.param.u32 %r2, [n];
    mov.u32 %r3, 0;
LOOP:
    add.u32 %r3, %r3, 1;
    st.global.u32 [%rd1], %r3;
    setp.ne.u32 %p1, %r3, %r2;
    @%p1 bra LOOP;""", ".param .u64 out, .param .u32 n")
LOOP_FIRST, LOOP_LAST = line_of(COUNT, "add.u32 %r3"), line_of(COUNT, "@%p1 bra LOOP")
LOOP_LINES = rf"PTX line ({'|'.join(str(n) for n in range(LOOP_FIRST, LOOP_LAST + 1))})"


# --- progress ---------------------------------------------------------------------------------------

def test_a_long_launch_reports_steps_ctas_rate_and_lines(monkeypatch, caplog) -> None:
    monkeypatch.setenv("JAXPTX_SIM_PROGRESS_SECONDS", "0")        # report at every look at the clock
    out = np.zeros(1, np.uint32)
    with caplog.at_level(logging.INFO, logger="jaxptx.sim"):
        sim.launch(COUNT, out, 3000, grid=(2, 1, 1), block=(32, 1, 1))
    assert out[0] == 3000
    records = [r for r in caplog.records if r.name == "jaxptx.sim"]
    reports = [r.getMessage() for r in records if "running for" in r.getMessage()]
    assert reports, [r.getMessage() for r in records]
    first = reports[0]
    first_record = next(r for r in records if "running for" in r.getMessage())   # (a first launch logs mallopt too)
    assert first_record.levelno == logging.WARNING and "JAXPTX_SIM_PROGRESS_SECONDS" in first, first
    assert re.match(r"k: running for \d+\.\d s: [\d,]+ steps \([\d.]+ (k |M )?steps/s, [\d.]+ (k |M |G )?"
                    r"thread-instructions/s\), 0 of 2 CTAs finished; 64 threads at " + LOOP_LINES +
                    r" `[^`]+` in the loop at PTX lines " + f"{LOOP_FIRST}-{LOOP_LAST}", first), first
    assert any(r.levelno == logging.INFO and r.getMessage().startswith("k: finished after ") for r in records)


def test_short_launches_and_reports_turned_off_say_nothing(monkeypatch, caplog) -> None:
    out = np.zeros(1, np.uint32)
    with caplog.at_level(logging.DEBUG, logger="jaxptx.sim"):
        sim.launch(COUNT, out, 3000, block=(32, 1, 1))          # well under the 5 s default
        monkeypatch.setenv("JAXPTX_SIM_PROGRESS_SECONDS", "off")
        sim.launch(COUNT, out, 3000, block=(32, 1, 1))
    assert out[0] == 3000
    assert [r.getMessage() for r in caplog.records if r.name == "jaxptx.sim"] == []


def test_a_report_names_the_threads_at_each_pc(monkeypatch, caplog) -> None:
    """Two warps in two loops, and one CTA already finished."""
    text = kernel("""
    mov.u32 %r2, %ctaid.x;
    setp.ne.u32 %p3, %r2, 0;
    @%p3 ret;
    mov.u32 %r3, 0;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra B;
A:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, 2000;
    @%p1 bra A;
    bra.uni DONE;
B:
    add.u32 %r3, %r3, 2;
    setp.lt.u32 %p1, %r3, 4000;
    @%p1 bra B;
DONE:""")
    monkeypatch.setenv("JAXPTX_SIM_PROGRESS_SECONDS", "0")
    with caplog.at_level(logging.INFO, logger="jaxptx.sim"):
        sim.launch(text, np.zeros(1, np.uint32), grid=(2, 1, 1), block=(64, 1, 1))
    reports = [r.getMessage() for r in caplog.records if "running for" in r.getMessage()]
    assert reports
    assert all("1 of 2 CTAs finished" in m for m in reports), reports
    assert any(re.search(r"; 32 threads at PTX line \d+ `[^`]+` in the loop at PTX lines \d+-\d+; 32 threads at ",
                         m) for m in reports), reports


# --- the wall-time bound ----------------------------------------------------------------------------

def test_max_seconds_stops_an_endless_changing_loop() -> None:
    t0 = time.monotonic()
    with pytest.raises(SimError, match=r"^k: still running after 0\.\d s \(max_seconds=0\.5\)") as e:
        sim.launch(COUNT, np.zeros(1, np.uint32), 0, block=(32, 1, 1), max_seconds=0.5)
    took = time.monotonic() - t0
    assert took < 2.5, took
    msg = str(e.value)
    assert re.match(r"k: still running after 0\.\d s \(max_seconds=0\.5\), [\d,]+ steps, 0 of 1 CTAs finished; "
                    r"32 threads \(CTA 0 threads 0-31\) at " + LOOP_LINES +
                    rf" `[^`]+` in the loop at PTX lines {LOOP_FIRST}-{LOOP_LAST}\. Raise max_seconds "
                    r"\(sim\.launch / Device\.launch, or JAXPTX_SIM_TIMEOUT\) if the kernel is just long\.",
                    msg), msg


def test_device_launch_takes_max_seconds_too() -> None:
    dev = sim.Device()
    out = dev.alloc(4)
    with pytest.raises(SimError, match=r"still running after 0\.\d s \(max_seconds=0\.3\)"):
        dev.launch(COUNT, [out, 0], block=(32, 1, 1), max_seconds=0.3)
    dev.launch(COUNT, [out, 500], block=(32, 1, 1), max_seconds=float("inf"))
    assert dev.from_device(out, like=np.zeros(1, np.uint32))[0] == 500


def test_timeout_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("JAXPTX_SIM_TIMEOUT", "0.3")
    with pytest.raises(SimError, match=r"still running after 0\.\d s \(max_seconds=0\.3\)"):
        sim.launch(COUNT, np.zeros(1, np.uint32), 0, block=(32, 1, 1))
    # an explicit bound wins over the environment's
    monkeypatch.setenv("JAXPTX_SIM_TIMEOUT", "0.02")
    out = np.zeros(1, np.uint32)
    with pytest.raises(SimError, match=r"max_seconds=0\.02"):
        sim.launch(COUNT, out, 5_000, block=(1, 1, 1))
    sim.launch(COUNT, out, 5_000, block=(1, 1, 1), max_seconds=60)
    assert out[0] == 5_000


@pytest.mark.parametrize("name, value, expected", [
    ("JAXPTX_SIM_TIMEOUT", "garbage", "a number of seconds > 0 (or 'off')"),
    ("JAXPTX_SIM_TIMEOUT", "0", "a number of seconds > 0 (or 'off')"),
    ("JAXPTX_SIM_TIMEOUT", "-3", "a number of seconds > 0 (or 'off')"),
    ("JAXPTX_SIM_PROGRESS_SECONDS", "soon", "a number of seconds >= 0 (or 'off')"),
])
def test_a_garbage_variable_is_a_clear_error(monkeypatch, name, value, expected) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SimError, match=re.escape(f"{name}: expected {expected}, got {value!r}")):
        sim.launch(COUNT, np.zeros(1, np.uint32), 10, block=(32, 1, 1))


@pytest.mark.parametrize("value", [0, -1.0, "1", True, float("nan")])
def test_a_bad_max_seconds_is_a_clear_error(value) -> None:
    with pytest.raises(SimError, match=re.escape(f"launch max_seconds: expected a number of seconds > 0, "
                                                 f"got {value!r}")):
        sim.launch(COUNT, np.zeros(1, np.uint32), 10, block=(32, 1, 1), max_seconds=value)


def test_timeout_under_jax_jit(monkeypatch) -> None:
    """``jax.jit`` on the CPU goes through Device.launch: the variable bounds it."""
    import jax

    @jaxptx_kernel(in_specs=(Tile("N", u32),), out_specs=(Tile("N", u32),), grid=(1, 1, 1), block=(32, 1, 1),
                   arch="sm_80")
    def forever(x, y):
        i = ptx.mov.u32(0)
        with ptx.loop() as spin:
            ptx.add.u32(i, i, 1)
            ptx.st.global_.u32(y.ptr, i)                    # changes memory every turn
            spin.again(i != 0)                              # 2**32 turns

    monkeypatch.setenv("JAXPTX_SIM_TIMEOUT", "0.5")
    with pytest.raises(Exception, match=r"forever: still running after 0\.\d s \(max_seconds=0\.5\)"):
        jax.jit(forever)(np.zeros(32, np.uint32))


# --- loops that cannot be left ------------------------------------------------------------------------

def test_an_unsigned_compare_with_zero_that_is_always_true() -> None:
    text = kernel("""
    mov.u32 %r3, 5;
LOOP:
    sub.u32 %r3, %r3, 1;
    st.global.u32 [%rd1], %r3;
    setp.ge.u32 %p2, %r3, 0;
    @%p2 bra LOOP;""")
    first, setp, back = line_of(text, "sub.u32"), line_of(text, "setp.ge"), line_of(text, "@%p2 bra")
    t0 = time.monotonic()
    with pytest.raises(SimError, match=rf"^k: endless loop: .*`setp\.ge\.u32 %p2, %r3, 0` \[PTX line {setp}\] "
                                       r"is always true") as e:
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))
    assert time.monotonic() - t0 < 1
    assert str(e.value) == (
        f"k: endless loop: 32 threads (CTA 0 threads 0-31) took `@%p2 bra LOOP` [PTX line {back}], the backward "
        f"branch of the loop at PTX lines {first}-{back}, and can never leave it: `setp.ge.u32 %p2, %r3, 0` "
        f"[PTX line {setp}] is always true (every unsigned 32-bit value of %r3 is >= 0), so the branch is always "
        "taken; nothing else in the loop branches out of it, calls, returns or exits")


def test_an_exit_test_that_is_always_false() -> None:
    """while (!(r < 0)) { r++; } with r unsigned: the way out is never taken."""
    text = kernel("""
    mov.u32 %r3, 5;
LOOP:
    setp.lt.u32 %p3, %r3, 0;
    @%p3 bra DONE;
    add.u32 %r3, %r3, 1;
    bra.uni LOOP;
DONE:""")
    setp, out = line_of(text, "setp.lt.u32 %p3"), line_of(text, "@%p3 bra DONE")
    with pytest.raises(SimError, match=re.escape(
            f"`setp.lt.u32 %p3, %r3, 0` [PTX line {setp}] is always false (no unsigned 32-bit value of %r3 is < 0), "
            f"so `@%p3 bra DONE` [PTX line {out}] is never taken")):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


@pytest.mark.parametrize("setp", [
    "setp.le.u32 %p2, 0, %r3",                    # 0 <= r
    "setp.ls.u64 %p2, %rd3, 0xffffffffffffffff",  # r <= max
    "setp.ge.s32 %p2, %r3, -2147483648",          # r >= min
    "setp.lt.u16 %p4|%p2, %rs3, 0",               # !(r < 0) in the second destination
])
def test_other_constant_comparisons(setp) -> None:
    text = kernel(f"""
    .reg .b16 %rs<4>;
    mov.u32 %r3, 5;
    mov.u64 %rd3, 5;
    mov.u16 %rs3, 5;
LOOP:
    add.u32 %r3, %r3, 1;
    add.u64 %rd3, %rd3, 1;
    add.u16 %rs3, %rs3, 1;
    {setp};
    @%p2 bra LOOP;""")
    with pytest.raises(SimError, match=rf"endless loop: .*PTX line {line_of(text, setp)}\] (is always true|"
                                       r"always sets %p2 to true)"):
        sim.launch(text, np.zeros(1, np.uint32), block=(32, 1, 1))


def test_a_traced_loop_names_the_python_line() -> None:
    @jaxptx_kernel(arch="sm_80", block=(32, 1, 1))
    def countdown():
        i = ptx.mov.u32(5)
        with ptx.loop() as loop:
            ptx.sub.u32(i, i, 1)
            loop.again(i >= 0)                              # u32: always true @AGAIN

    here = Path(__file__)
    line = next(n for n, text in enumerate(here.read_text().splitlines(), 1) if text.endswith("@AGAIN"))
    with pytest.raises(SimError, match=rf"countdown: endless loop: .*setp\.ge\.u32 %p1, %r1, 0` \[.*"
                                       rf"{here.name}:{line}\] is always true"):
        sim.launch(countdown)


@pytest.mark.parametrize("body, result", [
    # another way out (a break): the loop ends
    ("""
    mov.u32 %r3, 0;
LOOP:
    add.u32 %r3, %r3, 1;
    setp.eq.u32 %p3, %r3, 100;
    @%p3 bra DONE;
    setp.ge.u32 %p2, %r3, 0;
    @%p2 bra LOOP;
DONE:""", 100),
    # a constant loop that no thread enters
    ("""
    mov.u32 %r3, 7;
    setp.gt.u32 %p3, %r1, 1000;
    @!%p3 bra DONE;
LOOP:
    setp.ge.u32 %p2, %r3, 0;
    @%p2 bra LOOP;
DONE:""", 7),
    # the branch is reached past the constant setp, through a label, with another predicate
    ("""
    mov.u32 %r3, 3;
    setp.ne.u32 %p2, %r1, 100;
    bra.uni MID;
LOOP:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p2, %r3, 0;
MID:
    @%p2 bra LOOP;
DONE:""", 4),
    # signed: r >= 0 is a real test
    ("""
    mov.u32 %r3, 50;
LOOP:
    sub.s32 %r3, %r3, 1;
    setp.ge.s32 %p2, %r3, 0;
    @%p2 bra LOOP;""", 0xFFFFFFFF),
    # a guarded setp may leave the predicate as it was
    ("""
    mov.u32 %r3, 0;
    setp.ne.u32 %p2, %r1, 100;
LOOP:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p3, %r3, 10;
    @!%p3 setp.ne.u32 %p2, %r1, %r1;
    @%p3 setp.ge.u32 %p2, %r3, 0;
    @%p2 bra LOOP;""", 10),
])
def test_correct_kernels_that_look_alike_run_to_the_end(body, result) -> None:
    text = kernel(body + "\n    st.global.u32 [%rd1], %r3;")
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, block=(32, 1, 1))
    assert out[0] == result


def test_a_long_correct_kernel_is_not_affected(monkeypatch, caplog) -> None:
    """Reports at every look and a generous bound change nothing but the log."""
    monkeypatch.setenv("JAXPTX_SIM_PROGRESS_SECONDS", "0")
    out = np.zeros(4, np.uint32)
    with caplog.at_level(logging.INFO, logger="jaxptx.sim"):
        sim.launch(COUNT, out, 20_000, block=(32, 1, 1), max_seconds=60)
    assert out[0] == 20_000
    assert any("running for" in r.getMessage() for r in caplog.records)

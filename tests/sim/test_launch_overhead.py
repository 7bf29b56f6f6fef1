"""What launches keep for the next launch (issue 29): checked launch shapes and
register dtypes on the prepared program, the scheduler's per-PC table, and
the straight-run fast path of the default schedule. A cache keyed too
loosely would hand a later launch another launch's shape, registers or
steps; each test launches twice, or both ways, and checks what came out."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core import fastpaths
from jaxptx.sim.core.observers import Observer
from jaxptx.sim.device import launch_of

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"

# Each thread writes tid + 10 * ctaid + k to out[global index].
INDEX = HEAD + """.visible .entry index(.param .u64 out, .param .u32 k)
{
    .reg .b32 %r<8>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r6, [k];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mad.lo.u32 %r5, %r2, 10, %r1;
    add.u32 %r5, %r5, %r6;
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}"""

# A register read before any write: each launch must start from zeros.
FRESH = HEAD + """.visible .entry fresh(.param .u64 out)
{
    .reg .b32 %r<4>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    add.u32 %r1, %r1, 1;
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd2, %r2, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}"""

# %clock read after a straight run and after a divergent branch: the step
# numbers it sees must not depend on the fast path.
CLOCKS = HEAD + """.visible .entry clocks(.param .u64 out)
{
    .reg .b32 %r<8>; .reg .b64 %rd<6>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 8;
    add.u64 %rd3, %rd1, %rd2;
    add.u32 %r2, %r1, 3;
    mul.lo.u32 %r3, %r2, %r2;
    setp.lt.u32 %p1, %r1, 5;
    @%p1 bra SKIP;
    add.u32 %r3, %r3, 7;
    xor.b32 %r3, %r3, %r1;
SKIP:
    mov.u32 %r4, %clock;
    add.u32 %r4, %r4, %r3;
    cvt.u64.u32 %rd4, %r4;
    st.global.u64 [%rd3], %rd4;
    ret;
}"""


def _index_want(grid: int, block: int, k: int) -> np.ndarray:
    cta, tid = np.divmod(np.arange(grid * block), block)
    return (tid + 10 * cta + k).astype(np.uint32)


def test_a_second_launch_of_another_shape_gets_its_own_shape_and_params():
    dev = sim.Device()
    module = dev.load(INDEX)
    for grid, block, k in ((1, 32, 0), (3, 64, 5), (1, 32, 9), (2, 32, 0)):
        out = dev.alloc(grid * block * 4)
        dev.launch(module, [out, k], grid=grid, block=block)
        got = dev.from_device(out, like=np.zeros(grid * block, np.uint32))
        np.testing.assert_array_equal(got, _index_want(grid, block, k))
        dev.free(out)


def test_sim_launch_of_text_twice_with_other_shapes():
    for grid, block in ((1, 32), (2, 16), (1, 32)):
        out = np.zeros(grid * block, np.uint32)
        sim.launch(INDEX, out, 1, grid=grid, block=block)
        np.testing.assert_array_equal(out, _index_want(grid, block, 1))


def test_launch_shapes_given_as_int_tuple_or_list_share_one_checked_launch():
    dev = sim.Device()
    _, program, _ = dev._entry(dev.load(INDEX), None)
    first = launch_of(program, 2, 32, 1, 0)
    assert launch_of(program, (2,), [32, 1], (1, 1, 1), 0) == first
    assert launch_of(program, 2, 32, 1, 0) is first
    assert first.grid == (2, 1, 1) and first.block == (32, 1, 1)
    assert launch_of(program, 3, 32, 1, 0).grid == (3, 1, 1)


def test_a_bad_shape_is_refused_every_time_even_next_to_a_cached_one():
    dev = sim.Device()
    module = dev.load(INDEX)
    out = dev.alloc(128)
    dev.launch(module, [out, 0], block=1)
    for _ in range(2):
        with pytest.raises(sim.SimError, match=r"block: expected 1 to 3 positive ints"):
            dev.launch(module, [out, 0], block=True)
        with pytest.raises(sim.SimError, match=r"block: expected 1 to 3 positive ints"):
            dev.launch(module, [out, 0], block=(32, 0))


def test_each_launch_starts_with_zeroed_registers():
    dev = sim.Device()
    module = dev.load(FRESH)
    for block in (32, 32, 8):
        out = dev.alloc(block * 4)
        dev.launch(module, [out], block=block)
        np.testing.assert_array_equal(dev.from_device(out, like=np.zeros(block, np.uint32)), 1)


def _clock_run(block: int, max_steps: int | None = None) -> tuple[np.ndarray, int, int]:
    out = np.zeros(block, np.uint64)
    steps = []

    class Steps(Observer):
        """Hears nothing per step (so the fast path may run): reads the
        machine's counts once every thread has exited."""

        def __init__(self, m):
            self.m = m
            m.exit_checks.append(lambda _: steps.append((m.steps, m.thread_steps)))

    dev = sim.Device()
    address = dev.to_device(out)
    dev.launch(CLOCKS, [address], block=block, max_steps=max_steps, observers=[Steps])
    return dev.from_device(address, like=out), *steps[0]


def test_the_fast_path_gives_the_same_values_clocks_and_step_counts():
    fast = _clock_run(32)
    with fastpaths.reference():
        reference = _clock_run(32)
    np.testing.assert_array_equal(fast[0], reference[0])
    assert fast[1:] == reference[1:]
    tid = np.arange(32)
    sq = (tid + 3) ** 2
    assert (fast[0][:5] - sq[:5] == fast[0][0] - sq[0]).all()      # one %clock for the taken branch
    assert len(set((fast[0][5:] - ((sq[5:] + 7) ^ tid[5:])).tolist())) == 1


@pytest.mark.parametrize("max_steps", [2, 4, 5])
def test_max_steps_stops_a_straight_run_at_the_same_step(max_steps):
    messages = []
    for reference in (False, True):
        with fastpaths.reference() if reference else _nothing():
            with pytest.raises(sim.SimError, match=rf"more than {max_steps:,} steps") as e:
                _clock_run(32, max_steps=max_steps)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_observers_of_per_step_events_hear_every_step():
    class Count(Observer):
        def __init__(self, m):
            self.m, self.before, self.begun = m, 0, 0

        def before_step(self, pc, threads):
            self.before += 1

        def begin(self, pc, sim_name):
            self.begun += 1

    seen = []

    def make(m):
        seen.append(Count(m))
        return seen[-1]

    out = np.zeros(32, np.uint64)
    dev = sim.Device()
    dev.launch(CLOCKS, [dev.to_device(out)], block=32, observers=[make])
    _, steps, _ = _clock_run(32)
    assert seen[0].before == steps
    assert seen[0].begun >= steps - 2       # every instruction but the branch and ret says begin


def test_an_access_observer_hears_every_access_on_the_fast_path():
    def accesses() -> list:
        heard = []

        class Accesses(Observer):
            def __init__(self, m):
                pass

            def access(self, buf, off, threads, width, kind, values=None):
                heard.append((kind, width, np.asarray(off).tolist(), np.asarray(threads).tolist()))

        out = np.zeros(32 * 4, np.uint32)
        dev = sim.Device()
        dev.launch(INDEX, [dev.to_device(out), 2], grid=4, block=32, observers=[Accesses])
        return heard

    fast = accesses()
    with fastpaths.reference():
        reference = accesses()
    assert fast == reference
    assert [k for k, *_ in fast].count("store") == 1


def _per_step_events(reference: bool) -> tuple[list, list, list, np.ndarray]:
    """Every per-step event of a launch of CLOCKS, and its output."""
    before, begun, after = [], [], []

    class Steps(Observer):
        def __init__(self, m):
            self.m = m

        def before_step(self, pc, threads):
            before.append((pc, self.m.steps, len(threads)))

        def begin(self, pc, sim_name):
            begun.append((pc, sim_name))

        def after(self, sim_name, step):
            after.append((sim_name, len(step.threads)))

    out = np.zeros(32, np.uint64)
    dev = sim.Device()
    address = dev.to_device(out)
    with fastpaths.reference() if reference else _nothing():
        dev.launch(CLOCKS, [address], block=32, observers=[Steps])
    return before, begun, after, dev.from_device(address, like=out)


def test_per_step_observers_hear_the_same_events_on_the_straight_run_as_off_it():
    fast, reference = _per_step_events(False), _per_step_events(True)
    assert fast[:3] == reference[:3]
    np.testing.assert_array_equal(fast[3], reference[3])
    assert [pc for pc, *_ in fast[0]][:6] == [0, 1, 2, 3, 4, 5]        # the straight run's steps, one by one
    assert ("mul_int", 32) in fast[2] and len(fast[2]) == len(fast[1])


def test_a_changed_environment_variable_takes_effect_on_the_next_launch(monkeypatch):
    dev = sim.Device()
    module = dev.load(INDEX)
    out = dev.alloc(32 * 4)
    dev.launch(module, [out, 1], block=32)
    monkeypatch.setenv("JAXPTX_SIM_MAX_STEPS", "3")
    with pytest.raises(sim.SimError, match=r"more than 3 steps"):
        dev.launch(module, [out, 1], block=32)
    monkeypatch.setenv("JAXPTX_SIM_MAX_STEPS", "4")
    with pytest.raises(sim.SimError, match=r"more than 4 steps"):
        dev.launch(module, [out, 1], block=32)
    monkeypatch.setenv("JAXPTX_SIM_MAX_STEPS", "lots")
    for _ in range(2):              # a bad value is refused every time, never kept
        with pytest.raises(sim.SimError, match=r"JAXPTX_SIM_MAX_STEPS: expected an int >= 1, got 'lots'"):
            dev.launch(module, [out, 1], block=32)
    monkeypatch.delenv("JAXPTX_SIM_MAX_STEPS")
    dev.launch(module, [out, 2], block=32)
    np.testing.assert_array_equal(dev.from_device(out, like=np.zeros(32, np.uint32)), _index_want(1, 32, 2))
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "sometimes")
    with pytest.raises(sim.SimError, match=r"JAXPTX_SIM_CHECK='sometimes': expected one of"):
        dev.launch(module, [out, 1], block=32)
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "all")
    assert dev.launch(module, [out, 1], block=32) == []          # "all" returns the (no) findings
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "0")
    assert dev.launch(module, [out, 1], block=32) is None
    monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", "random")
    with pytest.raises(sim.SimError, match=r"JAXPTX_SIM_SCHEDULE: expected 'random:<seed>'"):
        dev.launch(module, [out, 1], block=32)
    monkeypatch.setenv("JAXPTX_SIM_TIMEOUT", "-1")
    monkeypatch.delenv("JAXPTX_SIM_SCHEDULE")
    with pytest.raises(sim.SimError, match=r"JAXPTX_SIM_TIMEOUT: expected a number of seconds > 0"):
        dev.launch(module, [out, 1], block=32)


def test_sim_launch_checks_that_a_launch_fits_once(monkeypatch):
    import importlib

    device_module = importlib.import_module("jaxptx.sim.device")
    launch_module = importlib.import_module("jaxptx.sim.launch")
    calls = []
    real = launch_module.check_fits

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(launch_module, "check_fits", counted)
    monkeypatch.setattr(device_module, "check_fits", counted)
    out = np.zeros(64, np.uint32)
    sim.launch(INDEX, out, 5, grid=2, block=32)
    np.testing.assert_array_equal(out, _index_want(2, 32, 5))
    assert len(calls) == 1
    dev = sim.Device()
    dev.launch(INDEX, [dev.to_device(out), 5], grid=2, block=32)
    assert len(calls) == 2          # Device.launch checks for itself

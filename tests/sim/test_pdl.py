"""Programmatic dependent launch on the emulator: ``Device.launch_sequence``.

A producer triggers its dependents at once (``griddepcontrol.launch_dependents``)
and then works for a while; its consumer either waits (``griddepcontrol.wait``)
before reading the producer's output — correct under every schedule, clean
under the sanitizer — or reads first, which the sanitizer reports as a race
between the two grids on the default schedule, and whose output changes with
the seed. Without ``programmatic`` the grids run as serial launches. A
dependent waiting on a primary that waits on it is a deadlock naming both.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import check, sim
from jaxptx.runtime import ptxas as run_ptxas
from jaxptx.sim.launch import launch_sequence

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
N, CTAS, THREADS, LOOPS = 64, 2, 32, 20

# y[i] = LOOPS * x[i], summed in a loop so that the producer is still running
# when its consumer starts; launch_dependents twice (the second is harmless).
PRODUCE = HEAD + r"""
.visible .entry produce(.param .u64 x, .param .u64 y, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    griddepcontrol.launch_dependents;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [n];
    griddepcontrol.launch_dependents;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r2, %r3, %r4, %r2;
    mul.wide.u32 %rd3, %r2, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r5, [%rd4];
    mov.u32 %r6, 0;
$LOOP:
    add.u32 %r6, %r6, %r5;
    sub.u32 %r1, %r1, 1;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $LOOP;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r6;
    ret;
}
"""

_READ = "    add.u64 %rd4, %rd1, %rd3;\n    ld.global.u32 %r5, [%rd4];\n"
_WAIT = "    griddepcontrol.wait;\n"


def consume(early: bool) -> str:
    """z[i] = y[i] + 1, reading y after ``griddepcontrol.wait`` (or, ``early``, before it)."""
    return HEAD + r"""
.visible .entry consume(.param .u64 y, .param .u64 z)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [z];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r2, %r3, %r4, %r2;
    mul.wide.u32 %rd3, %r2, 4;
""" + (_READ + _WAIT if early else _WAIT + _READ) + r"""    add.u32 %r5, %r5, 1;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r5;
    ret;
}
"""


# The primary spins on a flag that its dependent sets after griddepcontrol.wait:
# each waits for the other. TRIGGER: the CTAs that execute launch_dependents.
def spin(trigger: str) -> str:
    """Every CTA spins until *flag != 0; CTAs with %ctaid.x < ``trigger`` trigger first."""
    return HEAD + r"""
.visible .entry spin(.param .u64 flag)
{
    .reg .pred %p<3>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    mov.u32 %r2, %ctaid.x;
    setp.lt.u32 %p2, %r2, """ + trigger + r""";
    @%p2 griddepcontrol.launch_dependents;
    ld.param.u64 %rd1, [flag];
$SPIN:
    ld.volatile.global.u32 %r1, [%rd1];
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra $SPIN;
    ret;
}
"""


SET = HEAD + r"""
.visible .entry set(.param .u64 flag)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
    griddepcontrol.wait;
    mov.u32 %r1, 1;
    st.volatile.global.u32 [%rd1], %r1;
    ret;
}
"""


def _line(source: str, text: str) -> str:
    """``PTX line N`` of the first line of ``source`` holding ``text``."""
    return f"PTX line {next(i for i, s in enumerate(source.split(chr(10)), 1) if text in s)}"


def _pair(early: bool, **options: object) -> tuple[list, np.ndarray]:
    """Producer then consumer on one device: (what launch_sequence returned, z)."""
    dev = sim.Device()
    x = dev.to_device(np.arange(N, dtype=np.uint32))
    y, z = dev.alloc(4 * N), dev.alloc(4 * N)
    found = dev.launch_sequence([dict(source=PRODUCE, params=[x, y, LOOPS], grid=CTAS, block=THREADS),
                                 dict(source=consume(early), params=[y, z], grid=CTAS, block=THREADS)], **options)
    return found, dev.from_device(z, like=np.zeros(N, np.uint32))


WANT = np.arange(N, dtype=np.uint32) * LOOPS + 1


def test_a_consumer_that_waits_is_correct_and_clean() -> None:
    found, z = _pair(early=False, check="all")
    np.testing.assert_array_equal(z, WANT)
    assert found == [[], []]


def test_a_consumer_that_waits_is_correct_and_clean_under_20_seeds() -> None:
    for seed in range(20):
        found, z = _pair(early=False, check="all", schedule="random", seed=seed)
        np.testing.assert_array_equal(z, WANT, err_msg=f"seed {seed}")
        assert found == [[], []], f"seed {seed}"


def test_a_read_before_wait_is_a_race_naming_both_grids() -> None:
    found, z = _pair(early=True, check="all")
    assert (z != WANT).any()        # the consumer started early and read y before the producer wrote it
    races = [f for grid in found for f in grid]
    assert len(races) == 1 and races[0].kind == "race"
    race = races[0]
    assert "global-memory race between grid 0 (produce) and grid 1 (consume) of device 0" in race.message
    assert "only a griddepcontrol.wait before it would" in race.message
    store = _line(PRODUCE, "st.global.u32") + " (st.global.u32)"
    load = _line(consume(True), "ld.global.u32") + " (ld.global.u32)"
    assert {race.line, race.other} == {store, load}
    with pytest.raises(sim.SanitizerError, match=r"grid 0 \(produce\): sanitizer: global-memory race between "
                                                 r"grid 0 \(produce\) and grid 1 \(consume\)"):
        _pair(early=True, check=True)


def test_a_read_before_wait_gives_outputs_that_depend_on_the_seed_and_replay_by_seed() -> None:
    outputs = {_pair(early=True, schedule="random", seed=seed)[1].tobytes() for seed in range(8)}
    assert len(outputs) > 1
    first = _pair(early=True, check="all", schedule="random", seed=5)
    again = _pair(early=True, check="all", schedule="random", seed=5)
    np.testing.assert_array_equal(first[1], again[1])
    assert first[0] == again[0] and any(first[0])


def test_without_programmatic_the_grids_run_as_serial_launches() -> None:
    found, z = _pair(early=True, programmatic=False, check="all")
    assert found == [[], []]
    np.testing.assert_array_equal(z, WANT)
    dev = sim.Device()
    x = dev.to_device(np.arange(N, dtype=np.uint32))
    y, z2 = dev.alloc(4 * N), dev.alloc(4 * N)
    dev.launch(PRODUCE, [x, y, LOOPS], grid=CTAS, block=THREADS)     # on its own: no dependent, no prerequisite
    dev.launch(consume(False), [y, z2], grid=CTAS, block=THREADS)    # wait returns at once
    np.testing.assert_array_equal(dev.from_device(z2, like=np.zeros(N, np.uint32)), WANT)


def test_three_grids_each_waiting_on_the_ones_before() -> None:
    dev = sim.Device()
    x = dev.to_device(np.arange(N, dtype=np.uint32))
    y, z, w = (dev.alloc(4 * N) for _ in range(3))
    found = dev.launch_sequence([dict(source=PRODUCE, params=[x, y, LOOPS], grid=CTAS, block=THREADS),
                                 dict(source=consume(False), params=[y, z], grid=CTAS, block=THREADS),
                                 dict(source=consume(False), params=[z, w], grid=CTAS, block=THREADS)],
                                check="all", schedule="random", seed=1)
    assert found == [[], [], []]
    np.testing.assert_array_equal(dev.from_device(w, like=np.zeros(N, np.uint32)), WANT + 1)


def test_a_dependent_waiting_on_a_primary_that_waits_on_it_is_a_deadlock_naming_both() -> None:
    dev = sim.Device()
    flag = dev.alloc(4)
    with pytest.raises(sim.SimDeadlock, match=r"grid 0 \(spin\)") as e:
        dev.launch_sequence([dict(source=spin("1"), params=[flag], block=THREADS),
                             dict(source=SET, params=[flag], block=THREADS)])
    text = str(e.value)
    assert "grid 0 (spin): spin: deadlock: 32 threads (CTA 0 threads 0-31) spin in the loop" in text
    assert ("grid 1 (set): set: deadlock: 32 threads (CTA 0 threads 0-31) wait at griddepcontrol.wait "
            f"({_line(SET, 'griddepcontrol.wait')}) for the completion of grid 0 (spin)") in text
    assert "stuck warps of grid 0 (spin):" in text and "stuck warps of grid 1 (set):" in text
    assert [w.waits_on for w in e.value.warps] == ["a loop reading global 0x1000000000 = 0x0",
                                                   "the completion of grid 0 (spin)"]


def test_a_dependent_starts_only_once_every_cta_of_the_primary_triggered_or_exited() -> None:
    dev = sim.Device()
    flag = dev.alloc(4)
    with pytest.raises(sim.SimDeadlock, match=r"grid 1 \(set\): set has not started: 1 CTAs of grid 0 \(spin\) "
                                              r"\(\(1, 0, 0\)\) have neither executed "
                                              r"griddepcontrol.launch_dependents nor exited"):
        dev.launch_sequence([dict(source=spin("1"), params=[flag], grid=2, block=THREADS),
                             dict(source=SET, params=[flag], block=THREADS)])
    dev.write(flag, np.zeros(1, np.uint32).tobytes())
    # The same pair with every CTA triggering: the dependent starts, but its
    # wait still blocks on the spinning primary.
    with pytest.raises(sim.SimDeadlock, match=r"wait at griddepcontrol.wait"):
        dev.launch_sequence([dict(source=spin("2"), params=[flag], grid=2, block=THREADS),
                             dict(source=SET, params=[flag], block=THREADS)])


def test_the_module_level_twin_shares_arrays_between_grids() -> None:
    x = np.arange(N, dtype=np.uint32)
    y, z = np.zeros(N, np.uint32), np.zeros(N, np.uint32)
    found = launch_sequence([dict(source=PRODUCE, args=(x, y, LOOPS), grid=CTAS, block=THREADS),
                             dict(source=consume(False), args=(y, z), grid=CTAS, block=THREADS)], check="all")
    assert found == [[], []]
    np.testing.assert_array_equal(y, x * LOOPS)
    np.testing.assert_array_equal(z, WANT)


@pytest.mark.parametrize("launches, message", [
    ([], r"launch_sequence launches: expected a non-empty list of dicts"),
    (dict(source=SET), r"launch_sequence launches: expected a non-empty list of dicts"),
    ([SET], r"launch_sequence item 0: expected a dict, got str"),
    ([dict(source=SET, params=[0]), dict(source=SET, params=[0], blocks=32)],
     (r"launch_sequence item 1: takes source, params and optionally grid, block, cluster, smem, launch, kernel; "
      r"got keys \['blocks', 'params', 'source'\] \(unknown: blocks\)")),
    ([dict(params=[0])], r"launch_sequence item 0: .* \(source is missing\)"),
])
def test_bad_sequences_are_refused_naming_the_item(launches: object, message: str) -> None:
    with pytest.raises(sim.SimError, match=message):
        sim.Device().launch_sequence(launches)


def test_bad_options_are_refused() -> None:
    item = dict(source=SET, params=[0])
    with pytest.raises(sim.SimError, match=r"launch_sequence programmatic: expected True or False, got 'yes'"):
        sim.Device().launch_sequence([item], programmatic="yes")
    with pytest.raises(sim.SimError, match=r"launch check: expected False, True, 'strict' or 'all', got 'most'"):
        sim.Device().launch_sequence([item], check="most")
    with pytest.raises(sim.SimError, match=r"launch_sequence item 0: takes source, args"):
        launch_sequence([dict(source=SET, params=[0])])


@pytest.mark.parametrize("source", [PRODUCE, consume(False), consume(True), spin("1"), SET],
                         ids=["produce", "consume", "consume-early", "spin", "set"])
def test_ptxas_and_check_accept_the_kernels(source: str) -> None:
    run_ptxas(source, "sm_90a")
    assert check(source, "sm_90a") == []

"""Other interleavings: ``schedule="random", seed=N`` and ``sim.explore``.

The planted bug is a lock-order inversion between two warps: the default
schedule runs warp 0's code (smaller PCs) to the end before warp 1 starts,
so it never deadlocks; some interleavings do, and a seed reproduces its own."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core.observers import Observer

from elementwise import HEAD


def _lock_kernel(first_of_warp1: str, second_of_warp1: str) -> str:
    """Lane 0 of warp 0 takes lock A then B; lane 0 of warp 1 takes
    ``first_of_warp1`` then ``second_of_warp1`` (each ``%rd1``: A or ``%rd3``: B)."""
    def take(label: str, lock: str) -> str:
        return (f"{label}: atom.global.cas.b32 %r4, [{lock}], 0, 1;\n    setp.ne.u32 %p3, %r4, 0;\n"
                f"    @%p3 bra {label};\n")
    return HEAD + f""".visible .entry locks(.param .u64 locks, .param .u64 out)
{{
    .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
    ld.param.u64 %rd1, [locks];
    ld.param.u64 %rd2, [out];
    add.u64 %rd3, %rd1, 4;
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra DONE;
    setp.ne.u32 %p2, %r1, 0;
    @%p2 bra W1;
{take("A0", "%rd1")}{take("B0", "%rd3")}    atom.global.add.u32 %r6, [%rd2], 1;
    atom.global.exch.b32 %r7, [%rd3], 0;
    atom.global.exch.b32 %r7, [%rd1], 0;
    bra.uni DONE;
W1:
{take("X1", first_of_warp1)}{take("Y1", second_of_warp1)}    atom.global.add.u32 %r6, [%rd2], 1;
    atom.global.exch.b32 %r7, [{second_of_warp1}], 0;
    atom.global.exch.b32 %r7, [{first_of_warp1}], 0;
DONE:
    ret;
}}"""


INVERTED = _lock_kernel("%rd3", "%rd1")         # warp 1 takes B then A: a deadlock in some schedules
ORDERED = _lock_kernel("%rd1", "%rd3")          # its twin: both take A then B


def _arrays():
    return np.zeros(2, np.uint32), np.zeros(1, np.uint32)


def test_the_default_schedule_hides_the_inversion():
    locks, out = _arrays()
    sim.launch(INVERTED, locks, out, block=64)
    assert out[0] == 2 and (locks == 0).all()


def test_explore_finds_the_deadlock_and_its_twin_is_clean():
    found = sim.explore(INVERTED, *_arrays(), block=64, seeds=100)
    assert found.failures, "no seed of 100 found the lock-order inversion"
    seed, error = found.failures[0]
    assert "deadlock" in str(error) and "atom.global.cas.b32" in str(error)
    assert f"seed={seed}" in found.replay(seed) and f"JAXPTX_SIM_SCHEDULE=random:{seed}" in found.replay(seed)
    assert "seed" in str(found)
    # the seed reproduces its error exactly
    with pytest.raises(sim.SimError, match=r"locks: deadlock: ") as again:
        sim.launch(INVERTED, *_arrays(), block=64, schedule="random", seed=seed)
    assert str(again.value) == str(error)
    twin = sim.explore(ORDERED, *_arrays(), block=64, seeds=100)
    assert twin.ok, str(twin)


class _Trace(Observer):
    def __init__(self, machine):
        self.steps: list[tuple[int, tuple[int, ...]]] = []

    def before_step(self, pc, threads):
        self.steps.append((pc, tuple(threads.tolist())))


def _trace(**schedule) -> list:
    traces: list[_Trace] = []

    def make(machine):
        traces.append(_Trace(machine))
        return traces[-1]
    dev = sim.Device()
    locks, out = dev.to_device(np.zeros(2, np.uint32)), dev.to_device(np.zeros(1, np.uint32))
    dev.launch(ORDERED, [locks, out], block=64, observers=[make], **schedule)
    return traces[0].steps


def test_a_seed_is_one_interleaving_bit_for_bit():
    a, b = _trace(schedule="random", seed=4), _trace(schedule="random", seed=4)
    assert a == b
    assert a != _trace(schedule="random", seed=5) or a != _trace(schedule="random", seed=6)
    default = _trace()
    assert default[0] == (0, tuple(range(64)))          # every thread at once
    assert all(len(ts) <= 32 for _, ts in a)            # one warp a step
    assert {ts[0] // 32 for _, ts in a} == {0, 1}


def test_the_environment_chooses_the_schedule_of_launches_that_do_not(monkeypatch):
    monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", "random:4")
    assert _trace() == _trace(schedule="random", seed=4)
    monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", "sometimes")
    with pytest.raises(sim.SimError, match=r"JAXPTX_SIM_SCHEDULE: expected 'random:<seed>' or 'default', "
                                           r"got 'sometimes'"):
        _trace()


@pytest.mark.parametrize("options, message", [
    (dict(schedule="shuffled", seed=1), "launch schedule: expected 'default' or 'random', got 'shuffled'"),
    (dict(schedule="random"), "launch schedule='random': seed must be an int, got None"),
    (dict(seed=3), "launch seed=3: a seed chooses a random schedule; pass schedule='random'"),
])
def test_bad_schedule_options(options, message):
    with pytest.raises(sim.SimError, match=message):
        sim.launch(ORDERED, *_arrays(), block=64, **options)


def test_explore_refuses_what_it_chooses_itself_and_raises_bad_launches():
    with pytest.raises(sim.SimError, match="explore: it chooses the schedules itself"):
        sim.explore(ORDERED, *_arrays(), block=64, seed=1)
    with pytest.raises(sim.SimLaunchError, match="block"):
        sim.explore(ORDERED, *_arrays(), block=2048, seeds=2)


def test_explore_reports_outputs_that_depend_on_the_schedule():
    """Two warps store their own value to one word with nothing ordering
    them: no fault and no hang, but the last writer depends on the schedule."""
    racy = HEAD + """.visible .entry last(.param .u64 out)
{
    .reg .b32 %r<4>; .reg .b64 %rd<3>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra DONE;
    shr.u32 %r3, %r1, 5;
    st.global.u32 [%rd1], %r3;
DONE:
    ret;
}"""
    found = sim.explore(racy, np.zeros(1, np.uint32), block=64, seeds=20)
    assert not found.failures
    assert found.outputs_differ and not found.ok


def test_explore_in_worker_processes_agrees_with_one_process():
    one = sim.explore(INVERTED, *_arrays(), block=64, seeds=range(20, 50))
    two = sim.explore(INVERTED, *_arrays(), block=64, seeds=range(20, 50), workers=2)
    assert [s for s, _ in one.failures] == [s for s, _ in two.failures]
    assert [str(e) for _, e in one.failures] == [str(e) for _, e in two.failures]


def test_a_warp_specialised_wgmma_gemm_under_random_schedules(monkeypatch):
    """The Hopper GEMM (a TMA producer warp, two wgmma consumer warpgroups,
    cluster barriers) is right under other interleavings, checked: warps of
    a warpgroup meet at wgmma, and a warp that reaches barrier.cluster.wait
    after its cluster's phase completed goes on."""
    from jaxptx.kernels._matmul_sm90 import matmul_sm90
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1, 64, 64)).astype(ml_dtypes.bfloat16)
    ref = np.einsum("gmk,gkn->gmn", a.astype(np.float64), b.astype(np.float64))
    for seed in (3, 8):
        monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", f"random:{seed}")
        with sim.checking():
            c = np.asarray(jax.jit(lambda x, y: matmul_sm90(x, y, sms=132))(a, b))
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_a_captured_launch_is_explored_from_the_command_line(tmp_path, monkeypatch, capsys):
    """``python -m jaxptx.sim.explore FILE.jxcap``: the capture's memory on a
    fresh device per seed; failing seeds printed with their replay command,
    exit 1; a clean kernel exits 0; a file that is not a capture exits 2."""
    from jaxptx.sim.explore import main
    for name, text in (("inverted", INVERTED), ("ordered", ORDERED)):
        monkeypatch.setenv("JAXPTX_CAPTURE_DIR", str(tmp_path / name))
        dev = sim.Device()
        dev.launch(text, [dev.to_device(np.zeros(2, np.uint32)), dev.to_device(np.zeros(1, np.uint32))], block=64)
        (saved,) = (tmp_path / name).glob("*.jxcap")
        saved.rename(tmp_path / f"{name}.jxcap")
    monkeypatch.delenv("JAXPTX_CAPTURE_DIR")
    assert main([str(tmp_path / "inverted.jxcap"), "--seeds", "100"]) == 1
    out = capsys.readouterr().out
    assert "deadlock" in out and f"python -m jaxptx.sim.explore {tmp_path / 'inverted.jxcap'} --seed " in out
    seed = int(out.split("--seed ")[1].split()[0])
    assert main([str(tmp_path / "inverted.jxcap"), "--seed", str(seed)]) == 1       # it replays
    assert main([str(tmp_path / "ordered.jxcap"), "--seeds", "30"]) == 0
    (tmp_path / "not.jxcap").write_bytes(b"nothing")
    assert main([str(tmp_path / "not.jxcap")]) == 2
    assert "CaptureError" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["sm_100a", "sm_80"])
def test_the_library_matmul_under_random_schedules(arch, monkeypatch):
    """tcgen05 (one issuing thread, tensor memory, commits to mbarriers) and
    mma.sync with a cp.async ring: right and sanitizer-clean under other
    interleavings."""
    from jaxptx.kernels import matmul
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for seed in (5, 9):
        monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", f"random:{seed}")
        with sim.checking():
            c = np.asarray(jax.jit(lambda x, y: matmul(x, y, arch=arch))(a, b))
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)

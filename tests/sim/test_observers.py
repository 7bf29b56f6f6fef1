"""The emulator's observer seam: tools hear a launch's events through
``Device.launch(observers=...)`` and never by name from the semantics."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core.observers import ATOMIC, EVENTS, LOAD, STORE, Observer, Observers

from elementwise import SCALE_PTX

SIM = pathlib.Path(sim.__file__).parent

# 64 threads: each loads x[tid], adds one atomically to a counter, waits at a
# CTA barrier, then arrives once on an mbarrier (thread 0 initialises it) and
# stores 2*x[tid].
EVENTS_PTX = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry ev(.param .u64 x, .param .u64 y, .param .u64 count)
{
    .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<3>; .reg .pred %p<2>;
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [count];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 64;
    bar.sync 0;
    mul.wide.u32 %rd4, %r1, 4;
    add.u64 %rd5, %rd1, %rd4;
    ld.global.f32 %f1, [%rd5];
    atom.global.add.u32 %r2, [%rd3], 1;
    add.f32 %f2, %f1, %f1;
    add.u64 %rd6, %rd2, %rd4;
    st.global.f32 [%rd6], %f2;
    mbarrier.arrive.shared::cta.b64 %rd7, [bar];
    ret;
}"""


class Recorder(Observer):
    """Counts what it hears."""

    def __init__(self, machine: sim.MachineView) -> None:
        self.machine_threads = machine.nthreads
        self.steps = 0
        self.thread_steps = 0
        self.kinds: dict[str, int] = {}
        self.stored: list[np.ndarray] = []
        self.barriers: list[int] = []
        self.inits = 0
        self.arrivals = 0
        self.phases: list[int] = []

    def before_step(self, pc, threads):
        self.steps += 1
        self.thread_steps += len(threads)

    def access(self, buf, off, threads, width, kind, values=None):
        if buf.dtype == np.uint8 and len(threads):
            self.kinds[kind] = self.kinds.get(kind, 0) + len(threads)
        if kind == STORE and width == 4:
            self.stored.append(np.asarray(values).view(np.float32).copy())

    def barrier_complete(self, threads, keys):
        self.barriers.append(len(threads))

    def everyone_synchronised(self):
        self.barriers.append(-1)

    def mbarrier_init(self, words):
        self.inits += len(words)

    def mbarrier_arrive(self, threads, words):
        self.arrivals += len(threads)

    def mbarrier_phases(self, words, completed):
        self.phases += np.asarray(completed).astype(int).tolist()


def _launch(**kw):
    dev = sim.Device()
    x = np.arange(64, dtype=np.float32)
    ax, ay, ac = dev.to_device(x), dev.to_device(np.zeros(64, np.float32)), dev.to_device(np.zeros(1, np.uint32))
    heard: list[Recorder] = []

    def make(machine):
        heard.append(Recorder(machine))
        return heard[0]
    result = dev.launch(EVENTS_PTX, [ax, ay, ac], block=64, observers=[make], **kw)
    y = dev.from_device(ay, like=np.zeros(64, np.float32))
    count = dev.from_device(ac, like=np.zeros(1, np.uint32))
    return heard[0], y, count, result


def test_an_observer_hears_steps_accesses_and_synchronisation():
    rec, y, count, _ = _launch()
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32))
    assert count[0] == 64
    assert rec.machine_threads == 64
    assert rec.steps > 10 and rec.thread_steps >= 64 * 15      # every thread ran every instruction
    # global loads and params (64 x), one atomic per thread, 64 stores to y
    assert rec.kinds[ATOMIC] == 64
    assert rec.kinds[STORE] == 64
    assert rec.kinds[LOAD] >= 64
    np.testing.assert_array_equal(np.concatenate(rec.stored), 2 * np.arange(64, dtype=np.float32))
    assert rec.barriers == [-1]         # every thread of the grid at one bar.sync: completes at once
    assert rec.inits == 1
    assert rec.arrivals == 64
    assert sum(rec.phases) == 1                                 # the 64th arrival completes phase 0


def test_observers_beside_the_sanitizer_and_the_fidelity_tracker():
    rec, y, _, report = _launch(check="all", fidelity=True)
    assert isinstance(report, sim.Fidelity)
    assert report.findings == []
    assert rec.kinds[STORE] == 64 and rec.arrivals == 64
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32))


def test_a_launch_without_observers_keeps_its_fast_paths():
    seen = {}

    def make(machine):
        seen["read"], seen["write"] = machine.on_register_read, machine.on_register_write
        seen["access"] = machine.memory.on_access
        return Observer()               # hears nothing
    dev = sim.Device()
    x = dev.to_device(np.ones(4, np.float32))
    dev.launch(SCALE_PTX, [x, 3.0], block=4, observers=[make])
    assert seen == {"read": None, "write": None, "access": None}
    np.testing.assert_array_equal(dev.from_device(x, like=np.zeros(4, np.float32)), 3.0)


def test_the_hub_fans_out_in_order_and_rejects_other_objects():
    order: list[str] = []

    class A(Observer):
        def fence(self, threads):
            order.append("a")

    class B(Observer):
        def fence(self, threads):
            order.append("b")
    hub = Observers()
    assert all(hub.hook(e) is None for e in EVENTS)
    hub.fence([0])                       # nobody listens: a no-op
    hub.add(A())
    hub.add(B())
    hub.fence([0])
    assert order == ["a", "b"]
    assert hub.listens("fence") and not hub.listens("tma_signal")
    with pytest.raises(TypeError, match="must be a jaxptx.sim Observer, got int"):
        hub.add(3)


def test_a_launch_refuses_an_observer_factory_that_returns_something_else():
    dev = sim.Device()
    x = dev.to_device(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="must be a jaxptx.sim Observer, got dict"):
        dev.launch(SCALE_PTX, [x, 3.0], block=4, observers=[lambda m: {}])


def _attribute_uses(path: pathlib.Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(SIM)}:{node.lineno} .{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in names]


def test_semantics_and_the_scheduler_name_no_tool():
    """Semantics, memory and the scheduler emit events; none calls the
    sanitizer, the profiler or the fidelity tracker by name."""
    tools = {"sanitizer", "profiler", "fidelity"}
    files = sorted((SIM / "semantics").glob("*.py")) + sorted((SIM / "memory").glob("*.py"))
    files += [SIM / "core" / f for f in ("machine.py", "step.py", "barriers.py", "calls.py", "registers.py",
                                         "hangs.py", "naming.py", "progress.py", "printf.py")]
    used = [u for f in files for u in _attribute_uses(f, tools)]
    assert used == []


def test_observing_joins_every_launch_in_the_block_from_any_thread():
    import threading
    heard: list[Recorder] = []

    def make(machine):
        heard.append(Recorder(machine))
        return heard[-1]

    def run():
        x = np.arange(4, dtype=np.float32)
        sim.launch(SCALE_PTX, x, np.float32(2.0), block=4)
        return x
    with sim.observing(make):
        run()
        other = threading.Thread(target=run)
        other.start()
        other.join()
    run()                                # after the block: not observed
    assert len(heard) == 2
    for rec in heard:
        np.testing.assert_array_equal(np.concatenate(rec.stored), 2 * np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match="observing: each tool must be a callable"):
        with sim.observing(Observer()):
            pass

"""``jaxptx.sim.System``: nodes of 2, 4 and 8 devices running grids together.

Peer loads, stores and atomics with ``.sys`` flags, ``multimem`` reductions
over multicast objects, the faults of a wrong address, and a device waiting
forever on another reported as a deadlock naming each device.
"""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest
from system_kernels import ALLGATHER, LOAD, SIGNAL, WAIT, allreduce, red

from jaxptx import sim

THREADS = 32


def _allgather(n: int, check: object = None) -> tuple[sim.System, list[int], np.ndarray, list]:
    node = sim.System(n)
    node.enable_peer_access()
    rng = np.random.default_rng(n)
    chunks = rng.integers(0, 2**32, (n, THREADS), dtype=np.uint32)
    outs = [d.alloc(4 * n * THREADS) for d in node.devices]
    flags = [d.alloc(4) for d in node.devices]
    launches = []
    for d in node.devices:
        table = d.to_device(np.array(outs, np.uint64))
        flag_table = d.to_device(np.array(flags, np.uint64))
        src = d.to_device(chunks[d.index])
        launches.append(dict(device=d.index, source=ALLGATHER, params=[table, flag_table, src, d.index, n],
                             block=THREADS))
    found = node.launch(launches, check=check)
    return node, outs, chunks, found


@pytest.mark.parametrize("n", [2, 4, 8])
def test_allgather_through_peer_stores_and_flags(n: int) -> None:
    node, outs, chunks, found = _allgather(n)
    assert found == [None] * n
    for d, out in zip(node.devices, outs):
        got = d.from_device(out, like=np.zeros(n * THREADS, np.uint32))
        np.testing.assert_array_equal(got, chunks.reshape(-1))


def test_each_device_runs_its_own_sanitizer() -> None:
    """check="all": one list of findings per grid (each grid's sanitizer, and
    the node's between grids: test_system_sanitizer.py); the push all-gather
    with .sys flags is clean."""
    node, outs, chunks, found = _allgather(2, check="all")
    assert found == [[], []]
    np.testing.assert_array_equal(node.devices[1].from_device(outs[1], like=chunks.reshape(-1)), chunks.reshape(-1))


def test_addresses_are_unique_across_the_node() -> None:
    node = sim.System(4)
    lone = sim.Device()
    addresses = [[d.alloc(64) for _ in range(3)] for d in node.devices]
    flat = [a for per in addresses for a in per]
    assert len(set(flat)) == len(flat)
    assert addresses[0] == [lone.alloc(64) for _ in range(3)]       # device 0 is addressed as a lone device
    for d, per in zip(node.devices, addresses):
        assert {a >> 48 for a in per} == {d.index}
        assert d.leaks() == [(a, 64) for a in per]
    node.devices[2].write(addresses[2][1], np.arange(16, dtype=np.uint32))
    assert node.devices[2].read(addresses[2][1] + 4, 4) == np.uint32(1).tobytes()
    with pytest.raises(sim.SimError, match=r"read: 0x1001000000000 is device 1's address, not device 2's"):
        node.devices[2].read(addresses[1][0], 4)


def test_a_peer_access_needs_peer_access() -> None:
    node = sim.System(2)
    theirs = node.devices[1].to_device(np.array([7], np.uint32))
    out = node.devices[0].alloc(4)
    with pytest.raises(sim.SimFault, match=r"device 0: kernel load: ld\.global\.u32: device 0 accessed address "
                       r"0x1001000000000, which is on device 1, without peer access; call "
                       r"System\.enable_peer_access\(\) first \(CTA 0, thread 0 of device 0\) \[PTX line 10"):
        node.launch([dict(device=0, source=LOAD, params=[theirs, out])])
    node.enable_peer_access()
    node.launch([dict(device=0, source=LOAD, params=[theirs, out])])
    assert node.devices[0].from_device(out, like=np.zeros(1, np.uint32))[0] == 7
    node.devices[0].launch(LOAD, [theirs, out])         # a plain launch on a node's device reaches peers too
    with pytest.raises(sim.SimFault, match=r"global access of 4 bytes at offset 0x10 of device 1's allocation at "
                       r"0x1001000000000 is out of bounds \(its buffer has 4 bytes; CTA 0, thread 0 of device 0\)"):
        node.launch([dict(device=0, source=LOAD, params=[theirs + 16, out])])


def test_a_spinning_device_is_woken_when_a_peer_writes() -> None:
    node = sim.System(2)
    node.enable_peer_access()
    flag = node.devices[0].alloc(4)
    node.launch([dict(device=0, source=WAIT, params=[flag, 5]),
                 dict(device=1, source=SIGNAL, params=[flag, 5, 5_000])])
    assert node.devices[0].from_device(flag, like=np.zeros(1, np.uint32))[0] == 5


def test_a_device_waiting_forever_is_a_deadlock_naming_devices() -> None:
    node = sim.System(4)
    node.enable_peer_access()
    flags = [d.alloc(4) for d in node.devices]
    start = time.monotonic()
    with pytest.raises(sim.SimDeadlock, match=r"(?s)node deadlock: no thread on any device can make progress\n"
                       r"  device 0: signal has finished\n  device 1: wait: deadlock: 32 threads \(CTA 0 threads 0-31\) spin "
                       r"in the loop at PTX lines 11-13 without changing anything; ld\.acquire\.sys\.global\.u32 "
                       r"\[PTX line 11\] reads global address 0x1001000000000, which no thread that can still run "
                       r"writes.*\n  device 2: wait has finished\n  device 3: wait: deadlock.*stuck warps:\n"
                       r"    device  CTA +warp  lanes  line +state +waits on\n"
                       r"    1 +\(0, 0, 0\)  0 +0-31 +PTX 11  spinning  a loop reading global 0x1001000000000 = 0x1\n") as e:
        node.launch([dict(device=0, source=SIGNAL, params=[flags[1], 1, 10]),
                     dict(device=1, source=WAIT, params=[flags[1], 2], block=THREADS),
                     dict(device=2, source=WAIT, params=[flags[1], 1]),
                     dict(device=3, source=WAIT, params=[flags[2], 1], block=64)])
    assert time.monotonic() - start < 10
    assert {(w.device, w.state) for w in e.value.warps} == {(1, "spinning"), (3, "spinning")}
    assert [w.warp for w in e.value.warps if w.device == 3] == [0, 1]
    assert e.value.warps[0].detail["reads"] == [("global", flags[1], 1)]


def test_devices_waiting_on_each_other_deadlock() -> None:
    node = sim.System(2)
    node.enable_peer_access()
    flags = [d.alloc(4) for d in node.devices]
    with pytest.raises(sim.SimDeadlock, match=r"device 0: wait: deadlock.*\n.*\n  device 1: wait: deadlock") as e:
        node.launch([dict(device=0, source=WAIT, params=[flags[1], 1]),
                     dict(device=1, source=WAIT, params=[flags[0], 1])])
    assert sorted(w.device for w in e.value.warps) == [0, 1]


def _node_with_multicast(n: int, x: np.ndarray) -> tuple[sim.System, sim.Multicast, list[int]]:
    node = sim.System(n)
    mc = node.multicast(x[0].nbytes)
    bufs = []
    for d in node.devices:
        bufs.append(d.to_device(x[d.index]))
        mc.bind(d, bufs[-1])
    return node, mc, bufs


def _sum_in_order(x: np.ndarray, acc: type) -> np.ndarray:
    """Device-order sum, each partial rounded to ``acc``."""
    total = x[0].astype(acc)
    for part in x[1:]:
        total = (total + part.astype(acc)).astype(acc)
    return total.astype(x.dtype)


# (ld_reduce form, st form, value operand, bytes a thread, register declarations, numpy dtype, accumulation)
FORMS = {
    "f32": ("add.f32", "f32", "%f1", 4, "", np.float32, np.float32),
    "u32": ("add.u32", "u32", "%r5", 4, "", np.uint32, np.uint32),
    "f64": ("add.f64", "f64", "%fd1", 8, "", np.float64, np.float64),
    "v4.f32": ("add.v4.f32", "v4.f32", "{%f1, %f2, %f3, %f4}", 16, "", np.float32, np.float32),
    "f16x2 acc::f32": ("add.acc::f32.v4.f16x2", "v4.f16x2", "{%r5, %r6, %r7, %r8}", 16, "", np.float16, np.float32),
    "bf16x2 acc::f32": ("add.acc::f32.v2.bf16x2", "v2.bf16x2", "{%r5, %r6}", 8, "", ml_dtypes.bfloat16, np.float32),
    "v8.f16": ("add.v8.f16", "v8.f16", "{%h0, %h1, %h2, %h3, %h4, %h5, %h6, %h7}", 16, ".reg .b16 %h<8>;",
               np.float16, np.float16),
}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_multimem_one_shot_allreduce(n: int, form: str) -> None:
    ld, st, value, width, decl, dtype, acc = FORMS[form]
    per = width // np.dtype(dtype).itemsize
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((n, n * THREADS * per)) * 100).astype(dtype)
    node, mc, bufs = _node_with_multicast(n, x)
    source = allreduce(ld, st, value, width, decl)
    node.launch([dict(device=d.index, source=source, params=[mc.address, d.index], block=THREADS)
                 for d in node.devices])
    want = _sum_in_order(x, acc)
    for d, buf in zip(node.devices, bufs):
        np.testing.assert_array_equal(d.from_device(buf, like=x[0]).view(np.uint8), want.view(np.uint8))


def test_acc_f32_accumulates_in_f32() -> None:
    x = np.zeros((3, 8 * 3 * THREADS), np.float16)
    x[:, 0] = [2048, 1, 1]          # f16: 2048 + 1 rounds back to 2048; f32 keeps 2050
    results = {}
    for ld in ("add.v4.f16x2", "add.acc::f32.v4.f16x2"):
        node, mc, bufs = _node_with_multicast(3, x)
        node.launch([dict(device=d.index, source=allreduce(ld, "v4.f16x2", "{%r5, %r6, %r7, %r8}", 16),
                          params=[mc.address, d.index], block=THREADS) for d in node.devices])
        results[ld] = node.devices[2].from_device(bufs[2], like=x[0])[0]
    assert results == {"add.v4.f16x2": 2048, "add.acc::f32.v4.f16x2": 2050}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_multimem_red_reduces_into_every_copy(n: int) -> None:
    x = np.arange(n * THREADS, dtype=np.uint32).reshape(n, THREADS)
    node, mc, bufs = _node_with_multicast(n, x)
    node.launch([dict(device=d.index, source=red("add.u32", "%r5", 4), params=[mc.address, d.index],
                      block=THREADS) for d in node.devices])
    for d, buf in zip(node.devices, bufs):
        np.testing.assert_array_equal(d.from_device(buf, like=x[0]), x[d.index] + n * (n + 1) // 2)
    y = np.full((n, 2 * THREADS), 0.5, np.float32)
    node, mc, bufs = _node_with_multicast(n, y)
    node.launch([dict(device=d.index, source=red("add.v2.f32", "{%f1, %f2}", 8), params=[mc.address, d.index],
                      block=THREADS) for d in node.devices])
    for d, buf in zip(node.devices, bufs):
        np.testing.assert_array_equal(d.from_device(buf, like=y[0]), y[d.index] + n * (n + 1) / 2)


def test_fp8_ld_reduce_accumulates_in_f16_with_acc_f16() -> None:
    """``.acc::f16`` on ``.e4m3x4``: four fp8 values a register, summed in f16
    in device order, rounded once to e4m3 (sm_100a)."""
    n = 4
    x = np.zeros((n, 8 * n * THREADS), ml_dtypes.float8_e4m3fn)
    x[:, :4] = np.array([[16, 1, 0.5, -2], [1, 1, 0.5, 3], [1, 1, 0.5, -1], [1, 1, 0.5, 0.25]], np.float32)
    for ld, want in (("add.acc::f16.v2.e4m3x4", [20, 4, 2, 0.25]), ("add.v2.e4m3x4", [16, 4, 2, 0.25])):
        node, mc, bufs = _node_with_multicast(n, x)
        source = allreduce(ld, "v2.e4m3x4", "{%r5, %r6}", 8).replace(".version 8.5\n.target sm_90a",
                                                                     ".version 8.6\n.target sm_100a")
        node.launch([dict(device=d.index, source=source, params=[mc.address, d.index], block=THREADS)
                     for d in node.devices])
        got = node.devices[3].from_device(bufs[3], like=x[0])[:4].astype(np.float32)
        np.testing.assert_array_equal(got, np.array(want, np.float32), err_msg=ld)

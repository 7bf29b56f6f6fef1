"""``multimem.cp.async.bulk`` and ``multimem.cp.reduce.async.bulk`` on nodes
of emulated devices: an all-gather by multicast bulk stores, reductions into
every copy, the byte mask, and the faults of a plain address."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

THREADS = 32   # one u32 a thread: a 128-byte chunk a device


def _kernel(target: str, copy: str, mask: bool = False) -> str:
    """Each device stages its chunk in shared memory, then thread 0 issues
    ``copy`` from it to ``mc + rank * offset_step`` and waits for the group."""
    mask_param = ", .param .u16 byte_mask" if mask else ""
    mask_load = "ld.param.u16 %rs1, [byte_mask];" if mask else ""
    return f""".version 9.1
.target {target}
.address_size 64
.visible .entry k(.param .u64 mc, .param .u64 src, .param .u32 rank, .param .u32 step{mask_param})
{{
    .reg .b16 %rs<2>; .reg .b32 %r<8>; .reg .b64 %rd<10>; .reg .pred %p<2>;
    .shared .align 16 .b8 staged[128];
    ld.param.u64 %rd1, [mc];
    ld.param.u64 %rd2, [src];
    ld.param.u32 %r1, [rank];
    ld.param.u32 %r2, [step];
    {mask_load}
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd2, %rd3;
    ld.global.u32 %r4, [%rd4];
    mov.u64 %rd5, staged;
    add.u64 %rd6, %rd5, %rd3;
    st.shared.u32 [%rd6], %r4;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra DONE;
    mul.lo.u32 %r5, %r1, %r2;
    cvt.u64.u32 %rd7, %r5;
    add.u64 %rd8, %rd1, %rd7;
    {copy}
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}}
"""


def _run(n: int, source: str, chunks: np.ndarray, init: np.ndarray, step: int, extra: tuple = ()) -> list:
    node = sim.System(n)
    mc = node.multicast(init.nbytes)
    bufs = []
    for d in node.devices:
        buf = d.to_device(init)
        mc.bind(d, buf)
        bufs.append(buf)
    launches = [dict(device=d.index, source=source, params=[mc.address, d.to_device(chunks[d.index]), d.index,
                                                            step, *extra], block=THREADS)
                for d in node.devices]
    node.launch(launches)
    return [d.from_device(b, like=init) for d, b in zip(node.devices, bufs)]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_multicast_bulk_store_per_device_is_an_all_gather_on_every_copy(n):
    chunks = np.random.default_rng(n).integers(0, 2**32, (n, THREADS), dtype=np.uint32)
    source = _kernel("sm_90a", "multimem.cp.async.bulk.global.shared::cta.bulk_group [%rd8], [%rd5], 128;")
    for copy in _run(n, source, chunks, np.zeros(n * THREADS, np.uint32), step=128):
        np.testing.assert_array_equal(copy, chunks.reshape(-1))


@pytest.mark.parametrize("op, dtype, want", [
    ("add.u32", np.uint32, lambda init, c: init + c.sum(0, dtype=np.uint32)),
    ("min.s32", np.int32, lambda init, c: np.minimum(init, c.min(0))),
    ("xor.b32", np.uint32, lambda init, c: init ^ np.bitwise_xor.reduce(c, 0)),
])
def test_a_bulk_reduction_from_every_device_lands_in_every_copy(op, dtype, want):
    n = 4
    rng = np.random.default_rng(7)
    chunks = rng.integers(-2**20, 2**20, (n, THREADS)).astype(dtype)
    init = rng.integers(-2**20, 2**20, THREADS).astype(dtype)
    source = _kernel("sm_90a", f"multimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.{op} "
                               "[%rd8], [%rd5], 128;")
    for copy in _run(n, source, chunks, init, step=0):
        np.testing.assert_array_equal(copy, want(init, chunks))


def test_a_half_precision_bulk_add_rounds_each_step_in_device_order():
    n = 2
    rng = np.random.default_rng(3)
    chunks = rng.standard_normal((n, 2 * THREADS)).astype(np.float16).view(np.uint32)
    init = rng.standard_normal(2 * THREADS).astype(np.float16)
    source = _kernel("sm_90a", "multimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 "
                               "[%rd8], [%rd5], 128;")
    got = _run(n, source, chunks, init, step=0)
    halves = chunks.view(np.float16)
    # Each device's grid reduces into every copy; the copies receive the same sums
    # (f16 adds are commutative per step, and both devices' adds reach each copy).
    np.testing.assert_array_equal(got[0].view(np.uint16), got[1].view(np.uint16))
    orders = [(init + halves[0]) + halves[1], (init + halves[1]) + halves[0]]
    assert any(np.array_equal(got[0], o.astype(np.float16)) for o in orders)


def test_the_byte_mask_writes_only_the_selected_bytes_of_each_chunk():
    n = 2
    chunks = np.arange(n * THREADS, dtype=np.uint32).reshape(n, THREADS) + 0x01010101
    source = _kernel("sm_100a", "multimem.cp.async.bulk.global.shared::cta.bulk_group.cp_mask "
                                "[%rd8], [%rd5], 128, %rs1;", mask=True)
    init = np.full(n * THREADS, 0xEEEEEEEE, np.uint32)
    got = _run(n, source, chunks, init, step=128, extra=(0x00FF,))
    keep = np.tile(np.arange(16) < 8, n * THREADS * 4 // 16)
    want = np.where(keep, chunks.reshape(-1).view(np.uint8), init.view(np.uint8))
    for copy in got:
        np.testing.assert_array_equal(copy.view(np.uint8), want)


def test_a_bulk_copy_to_a_plain_address_faults_with_the_address():
    node = sim.System(2)
    d = node.devices[0]
    plain = d.alloc(256)
    source = _kernel("sm_90a", "multimem.cp.async.bulk.global.shared::cta.bulk_group [%rd8], [%rd5], 128;")
    with pytest.raises(sim.SimError, match=rf"{plain:#x} is not a multicast address"):
        node.launch([dict(device=0, source=source, params=[plain, d.to_device(np.zeros(THREADS, np.uint32)), 0,
                                                           0], block=THREADS)])


def test_a_range_mapped_to_a_multicast_object_reaches_it_and_an_alias_shares_bytes():
    """``System.map_multicast`` (cuMemMap of a multicast handle) and
    ``Device.alias`` (cuMemMap of physical memory): the seams the stand-in
    CUDA driver maps workspaces with."""
    n = 2
    node = sim.System(n)
    mc = node.multicast(n * 128)
    init = np.zeros(n * THREADS, np.uint32)
    bufs = [d.to_device(init) for d in node.devices]
    for d, b in zip(node.devices, bufs):
        mc.bind(d, b)
    mapped = [d.alloc(n * 128) for d in node.devices]
    for d, at in zip(node.devices, mapped):
        node.map_multicast(mc, d, at)
    chunks = np.arange(n * THREADS, dtype=np.uint32).reshape(n, THREADS) + 1
    source = _kernel("sm_90a", "multimem.cp.async.bulk.global.shared::cta.bulk_group [%rd8], [%rd5], 128;")
    node.launch([dict(device=d.index, source=source, params=[mapped[d.index], d.to_device(chunks[d.index]), d.index,
                                                           128], block=THREADS) for d in node.devices])
    for d, b in zip(node.devices, bufs):
        np.testing.assert_array_equal(d.from_device(b, like=init), chunks.reshape(-1))
    dev = node.devices[0]
    other = dev.alloc(init.nbytes)
    dev.alias(other, bufs[0])
    np.testing.assert_array_equal(dev.from_device(other, like=init), chunks.reshape(-1))
    with pytest.raises(sim.SimError, match=r"alias: .* must start allocations of one size"):
        dev.alias(dev.alloc(16), bufs[0])
    with pytest.raises(sim.SimError, match=r"System.map_multicast: device 1 is not a member"):
        node.map_multicast(node.multicast(64, devices=[0]), 1, mapped[1])

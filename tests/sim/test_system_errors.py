"""``jaxptx.sim.System``'s refusals: multicast addresses used by plain
instructions, multimem on plain addresses, multicast objects bound wrongly,
and bad launches."""

from __future__ import annotations

import pytest
from system_kernels import LOAD, WAIT, allreduce

from jaxptx import sim

MULTIMEM = allreduce("add.u32", "u32", "%r5", 4)


def _bound(n: int = 2, nbytes: int = 128) -> tuple[sim.System, sim.Multicast, list[int]]:
    node = sim.System(n)
    mc = node.multicast(nbytes)
    bufs = [d.alloc(nbytes) for d in node.devices]
    for d, buf in zip(node.devices, bufs):
        mc.bind(d.index, buf)
    return node, mc, bufs


def test_a_plain_load_of_a_multicast_address_faults() -> None:
    node, mc, bufs = _bound()
    node.enable_peer_access()
    assert mc.address == 0xFF001000000000
    with pytest.raises(sim.SimFault, match=r"device 1: kernel load: ld\.global\.u32: address 0xff001000000000 is a "
                       r"multicast address \(System\.multicast\); only multimem instructions may access it \(CTA 0, "
                       r"thread 0 of device 1\)"):
        node.launch([dict(device=1, source=LOAD, params=[mc.address, bufs[1]])])


def test_multimem_on_a_plain_address_faults() -> None:
    node, _, bufs = _bound()
    with pytest.raises(sim.SimFault, match=r"device 0: kernel allreduce: multimem\.ld_reduce\.relaxed\.sys\.global\."
                       r"add\.u32: address 0x1000000000 is not a multicast address; multimem instructions take the "
                       r"address of a System\.multicast object \(mc\.address\) \(CTA 0, thread 0 of device 0\)"):
        node.launch([dict(device=0, source=MULTIMEM, params=[bufs[0], 0], block=4)])


def test_multimem_on_a_lone_device_faults() -> None:
    dev = sim.Device()
    x = dev.alloc(64)
    with pytest.raises(sim.SimFault, match=r"address 0x1000000000 is not a multicast address: multimem instructions "
                       r"run on the devices of a jaxptx\.sim\.System"):
        dev.launch(MULTIMEM, [x, 0], block=4)


def test_multimem_needs_every_member_bound() -> None:
    node = sim.System(3)
    mc = node.multicast(64)
    mc.bind(node.devices[0], node.devices[0].alloc(64))
    with pytest.raises(sim.SimFault, match=r"devices 1, 2 of the multicast object at 0xff001000000000 have not bound "
                       r"memory to it \(mc\.bind\)"):
        node.launch([dict(device=0, source=MULTIMEM, params=[mc.address, 0], block=4)])
    other = node.multicast(64, devices=[1, 2])
    for d in (1, 2):
        other.bind(d, node.devices[d].alloc(64))
    with pytest.raises(sim.SimFault, match=r"device 0 is not a member of the multicast object at 0xff002000000000 "
                       r"\(members: devices 1, 2\)"):
        node.launch([dict(device=0, source=MULTIMEM, params=[other.address, 0], block=4)])


def test_multimem_past_the_end_of_its_object_faults() -> None:
    node, mc, _ = _bound(nbytes=16)
    with pytest.raises(sim.SimFault, match=r"4 bytes at 0xff001000000010 go past the end of the multicast object at "
                       r"0xff001000000000 \(16 bytes\)"):
        node.launch([dict(device=0, source=MULTIMEM, params=[mc.address, 1], block=4)])


def test_bind_refuses_what_cannot_be_bound() -> None:
    node = sim.System(2)
    mc = node.multicast(64, devices=[1])
    small = node.devices[1].alloc(32)
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: device 0 is not a member of the multicast object at "
                       r"0xff001000000000 \(members: devices 1\)"):
        mc.bind(0, node.devices[0].alloc(64))
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: 64 bytes at 0x1001000000000 go past the end of the "
                       r"allocation at 0x1001000000000 \(32 bytes"):
        mc.bind(1, small)
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: expected a 16-byte aligned device address, got 4"):
        mc.bind(1, 4)
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: 0x2000000000 is device 0's address, not device 1's"):
        mc.bind(node.devices[1], node.devices[0].alloc(64))
    mc.bind(1, node.devices[1].alloc(64))
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: device 1 has bound 0x1002000000000 to the multicast "
                       r"object at 0xff001000000000 already"):
        mc.bind(1, node.devices[1].alloc(64))
    with pytest.raises(sim.SimError, match=r"Multicast\.bind: expected a device of this System \(an index 0\.\.1 or "
                       r"one of system\.devices\), got 5"):
        mc.bind(5, 0)


@pytest.mark.parametrize(("make", "message"), [
    (lambda node: node.launch([]), r"System\.launch: expected a non-empty list of dicts, one per grid"),
    (lambda node: node.launch([dict(device=0, source=LOAD, params=[0, 0], grids=2)]),
     (r"System\.launch item 0: takes device, source, params and optionally grid, block, cluster, smem, launch, "
      r"kernel; got keys \['device', 'grids', 'params', 'source'\]")),
    (lambda node: node.launch([dict(device=2, source=LOAD)]),
     r"System\.launch item 0 device: expected a device of this System \(an index 0\.\.1"),
    (lambda node: node.multicast(0), r"System\.multicast: nbytes must be an int in 1\.\.2\*\*36, got 0"),
    (lambda node: node.multicast(16, devices=[1, 1]),
     r"System\.multicast: devices must name each member once, got \[1, 1\]"),
    (lambda node: sim.System(0), r"System: expected a number of devices from 1 to 255, got 0"),
])
def test_bad_calls(make, message: str) -> None:
    node = sim.System(2)
    with pytest.raises(sim.SimError, match=message):
        make(node)


def test_errors_name_the_device_that_raised_them() -> None:
    node = sim.System(2)
    flag = node.devices[1].alloc(4)
    with pytest.raises(sim.SimError, match=r"device 1: wait: more than 50 steps \(max_steps\)"):
        node.launch([dict(device=1, source=WAIT, params=[flag, 1])], max_steps=50)


def test_a_multimem_bulk_copy_on_a_lone_device_faults_with_a_reason():
    text = (".version 9.1\n.target sm_90a\n.address_size 64\n\n.visible .entry k()\n{\n\t.reg .b64 %rd<4>;\n"
            "\t.shared .align 16 .b8 s[16];\n\tmov.u64 %rd1, s;\n\tmov.u64 %rd0, 4096;\n"
            "\tmultimem.cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%rd1], 16;\n\tret;\n}\n")
    with pytest.raises(sim.SimError, match=r"is not a multicast address: multimem instructions run on the "
                                           r"devices of a jaxptx\.sim\.System"):
        sim.launch(text)

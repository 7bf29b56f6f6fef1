"""sim.Device hygiene: a freed allocation's address is not handed out again
(a stale pointer faults: a use after free), leaks are listed and reported at
close when asked, and a closed device refuses to be used."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim import device_memory

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"

COPY = HEAD + """.visible .entry copy(.param .u64 dst, .param .u64 src)
{
    .reg .b32 %r<2>; .reg .b64 %rd<6>; .reg .f32 %f<2>;
    ld.param.u64 %rd1, [dst];
    ld.param.u64 %rd2, [src];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd5];
    st.global.f32 [%rd4], %f1;
    ret;
}"""


def test_a_pointer_kept_after_free_faults_instead_of_reading_the_next_allocation() -> None:
    dev = sim.Device()
    dst = dev.alloc(16)
    stale = dev.to_device(np.arange(4, dtype=np.float32))
    dev.free(stale)
    fresh = dev.to_device(np.full(4, 7, np.float32))
    assert fresh != stale
    with pytest.raises(sim.SimFault, match=rf"^kernel copy: ld\.global\.f32: address {stale:#x} is in the allocation "
                                           rf"at {stale:#x}, which was freed \(a use after free; CTA 0, thread 0\) "
                                           r"\[PTX line 13: ld\.global\.f32 %f1, \[%rd5\];\]$"):
        dev.launch(COPY, [dst, stale], block=4)
    with pytest.raises(sim.SimError, match=rf"^read: {stale:#x} is in the allocation at {stale:#x}, which was freed "
                                           r"\(a use after free\)$"):
        dev.read(stale, 16)
    dev.launch(COPY, [dst, fresh], block=4)
    np.testing.assert_array_equal(dev.from_device(dst, like=np.zeros(4, np.float32)), 7)


def test_when_the_address_space_is_used_up_the_range_freed_longest_ago_is_reused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_memory, "_MAX_ALLOCATIONS", 3)
    dev = sim.Device()
    a, b, _ = (dev.alloc(8) for _ in range(3))
    with pytest.raises(sim.SimError, match=r"alloc: the device has 3 live allocations, the most it can address"):
        dev.alloc(8)
    dev.free(b)
    dev.free(a)
    assert dev.alloc(8) == b and dev.alloc(8) == a        # oldest freed first, zero-filled
    assert dev.read(a, 8) == bytes(8)


def test_leaks_are_listed_and_reported_at_close_when_asked() -> None:
    dev = sim.Device()
    a = dev.alloc(64)
    b = dev.to_device(np.zeros(3, np.float32))
    c = dev.alloc(8)
    dev.global_address(HEAD + ".global .u32 g;\n.visible .entry k()\n{\n\tret;\n}\n", "g")   # not a leak
    dev.free(c)
    assert dev.leaks() == [(a, 64), (b, 12)]
    with pytest.raises(sim.SimError, match=rf"^Device\.close: 2 allocations never freed: {a:#x} \(64 bytes\), "
                                           rf"{b:#x} \(12 bytes\)$"):
        dev.close(report_leaks=True)
    with pytest.raises(sim.SimError, match=r"^alloc: the device is closed$"):
        dev.alloc(4)
    with pytest.raises(sim.SimError, match=r"^read: the device is closed$"):
        dev.read(a, 4)
    dev.close(report_leaks=True)                 # closing again does nothing
    quiet = sim.Device()
    quiet.alloc(4)
    quiet.close()                                # not asked: no report


def test_the_context_manager_reports_leaks_when_the_device_asks() -> None:
    with pytest.raises(sim.SimError, match=r"Device\.close: 1 allocation never freed: 0x1000000000 \(4 bytes\)"):
        with sim.Device(report_leaks=True) as dev:
            dev.alloc(4)
    with sim.Device(report_leaks=True) as dev:
        dev.free(dev.alloc(4))
    with pytest.raises(KeyError, match="boom"):      # another error propagating is the one to see
        with sim.Device(report_leaks=True) as dev:
            dev.alloc(4)
            raise KeyError("boom")
    with pytest.raises(sim.SimError, match="the device is closed"):
        dev.launch(COPY, [0, 0], block=4)

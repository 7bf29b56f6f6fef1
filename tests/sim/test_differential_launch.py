"""``tests/differential.py`` (``pytest --sim-differential``) catches a fast
path that writes other bytes, returns other findings or raises otherwise,
and passes a launch that agrees."""

from __future__ import annotations

import numpy as np
import pytest
from differential import FastPathMismatch, differential_launch

from jaxptx import sim
from jaxptx.sim.core import fastpaths

COPY = """.version 8.5
.target sm_80
.address_size 64
.visible .entry copy(.param .u64 dst, .param .u64 src)
{
    .reg .b32 %r<3>; .reg .b64 %rd<6>;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [dst];
    ld.param.u64 %rd2, [src];
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r2;
    ret;
}"""


def test_a_launch_that_agrees_runs_once_more_and_keeps_its_result() -> None:
    with sim.Device() as device:
        src = device.to_device(np.arange(32, dtype=np.uint32))
        dst = device.alloc(128)
        differential_launch(sim.Device.launch, device, COPY, [dst, src], block=(32, 1, 1))
        np.testing.assert_array_equal(device.from_device(dst, np.zeros(32, np.uint32)), np.arange(32))


def _writes_by_path(device: sim.Device, address: int) -> None:
    device.write(address, np.uint32(1 if fastpaths.on() else 2).tobytes())


def test_other_bytes_on_the_fast_paths_are_a_mismatch() -> None:
    with sim.Device() as device:
        address = device.alloc(16)
        with pytest.raises(FastPathMismatch, match=r"allocation 0 differs at byte 0: general paths 0x02, "
                                                   r"fast paths 0x01"):
            differential_launch(_writes_by_path, device, address)


def _raises_on_the_fast_paths(device: sim.Device) -> None:
    if fastpaths.on():
        raise sim.SimError("only here")


def test_an_error_on_one_path_only_is_a_mismatch() -> None:
    with sim.Device() as device, pytest.raises(FastPathMismatch, match=r"general paths gave None, the fast paths "
                                                                       r"SimError\('only here'\)"):
        differential_launch(_raises_on_the_fast_paths, device)


def test_the_same_error_on_both_paths_is_raised_as_it_is() -> None:
    with sim.Device() as device, pytest.raises(sim.SimFault, match="out of bounds"):
        differential_launch(sim.Device.launch, device, COPY, [device.alloc(16), device.alloc(16)],
                            block=(32, 1, 1))

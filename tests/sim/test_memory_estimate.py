"""The host memory of an emulated launch: the estimate against tracemalloc's
peak, the refusal over ``JAXPTX_SIM_MAX_MEMORY``, the variable's values."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.kernels._norms_kernels import row_kernel
from jaxptx.kernels._norms_rows import plan
from jaxptx.sim import device as sim_device
from jaxptx.sim import memory_model
from jaxptx.sim.memory_model import MARGIN, host_memory, memory_limit, parse_bytes

SCALE = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry scale(.param .u64 x)
{
    .reg .pred %p<2>; .reg .b16 %h<2>; .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .f32 %f<3>;
    ld.param.u64 %rd1, [x];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mad.lo.u32 %r3, %r1, %r2, %tid.x;
    mul.wide.u32 %rd2, %r3, 4;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.f32 %f1, [%rd3];
    add.f32 %f2, %f1, %f1;
    st.global.f32 [%rd3], %f2;
    ret;
}"""
SHARED = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k()
{
    .shared .align 16 .b8 buf[1000];
    .local .align 8 .b8 depot[20];
    .reg .b32 %r<2>;
    mov.u32 %r1, %tid.x;
    ret;
}"""


def _softmax():
    p = plan(1024, "f32")
    return row_kernel("softmax", "f32", "sm_90a", p.threads, p.cached)


@pytest.mark.parametrize("rows, check", [(512, False), (256, True)])
def test_the_estimate_is_within_its_margin_of_the_measured_peak(rows: int, check: bool) -> None:
    k = _softmax()
    x = np.random.default_rng(0).standard_normal((rows, 1024), dtype=np.float32)
    y = np.zeros_like(x)
    sim.launch(k, x[:8], y[:8])            # the kernel is prepared and cached: the launch alone is measured
    e = sim.estimate_memory(k, x, y, check=check)
    tracemalloc.start()
    try:
        sim.launch(k, x, y, check=check)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.threads == rows * 64 and e.ctas == rows
    assert abs(e.total / peak - 1) <= MARGIN, (e.total, peak)
    e_x = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e_x / e_x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_the_estimate_counts_registers_at_their_width_and_shared_and_local_memory() -> None:
    e = sim.estimate_memory(SCALE, grid=8, block=128)
    parts = dict(e.thread_parts)
    # used registers only: %p, %h unused; %r1-3 (4 bytes), %rd1-3 (8), %f1-2 (4)
    assert parts["registers"] == 3 * 4 + 3 * 8 + 2 * 4
    assert (e.threads, e.ctas) == (1024, 8)
    assert e.total == e.threads * e.per_thread + e.ctas * e.per_cta + e.per_launch
    s = sim.estimate_memory(SHARED, grid=2, block=32, smem=24)
    assert dict(s.cta_parts)["shared memory"] == 1040        # 1000 -> 1008 static, + 24 dynamic = 1032 -> 1040
    assert dict(s.thread_parts)["local memory"] == 32        # 20 bytes, whole 16-byte windows
    assert dict(s.thread_parts)["registers"] == 4
    checked = sim.estimate_memory(SCALE, grid=8, block=128, check=True)
    assert checked.total > e.total and checked.sanitizer == checked.total - e.total
    assert dict(checked.thread_parts)["sanitizer clocks"] == 12            # its own entry, its row's index
    # rows of a clock entry per thread of the CTA: one per warp and two more
    assert dict(checked.cta_parts)["sanitizer clock rows"] == 4 * 128 * (2 + 4)
    x = np.zeros(1024, np.float32)
    assert sim.estimate_memory(SCALE, x, grid=8, block=128).per_launch == e.per_launch + x.nbytes


def test_a_launch_over_the_limit_is_refused_before_any_step_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    machines = []
    monkeypatch.setattr(sim_device, "Machine", lambda *a, **kw: machines.append(a))
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", "8M")
    x = np.ones(256 * 1024, np.float32)
    with pytest.raises(sim.SimMemoryError,
                       match=r"launch of scale: 262,144 threads \(1,024 CTAs of 256\) need about 0\.\d+ GiB "
                             r"\(\d+\.\d MiB\) of emulator state \(over the limit of 8\.0 MiB: "
                             r"JAXPTX_SIM_MAX_MEMORY=8M\): \d+ bytes a thread \(registers 44, .*\) x 262,144 "
                             r"threads = .*; \d+ bytes a CTA \(.*\) x 1,024 CTAs = .*Launch a smaller grid \(at most "
                             r"\d+ CTAs of 256 threads fit; split the work over several launches\), or raise "
                             r"JAXPTX_SIM_MAX_MEMORY") as info:
        sim.launch(SCALE, x, grid=1024, block=256)
    assert (x == 1).all() and not machines
    assert isinstance(info.value, MemoryError) and isinstance(info.value, sim.SimLaunchError)
    assert info.value.limit == 8 << 20 and info.value.estimate.total > 8 << 20
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", "1M")       # below the launch's global memory and fixed costs
    with pytest.raises(sim.SimMemoryError, match=r"Not one CTA fits beside the launch's 3\.0 MiB of global memory "
                                                 r"and fixed costs: hold less device memory, or raise"):
        sim.launch(SCALE, x, grid=1024, block=256)
    dev = sim.Device()
    buf = dev.to_device(x)
    with pytest.raises(sim.SimMemoryError, match=r"the sanitizer \(check\) is .* of it; without check it needs"):
        monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", str(sim.estimate_memory(SCALE, grid=64, block=256,
                                                                            global_bytes=x.nbytes).total))
        dev.launch(SCALE, [buf], grid=64, block=256, check=True)
    assert not machines


def test_a_launch_under_the_limit_runs_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(64 * 256, dtype=np.float32)
    need = sim.estimate_memory(SCALE, x, grid=64, block=256).total
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", str(need))
    sim.launch(SCALE, x, grid=64, block=256)
    np.testing.assert_array_equal(x, 2 * np.arange(64 * 256, dtype=np.float32))
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", "none")
    sim.launch(SCALE, x, grid=64, block=256)
    np.testing.assert_array_equal(x, 4 * np.arange(64 * 256, dtype=np.float32))


@pytest.mark.parametrize("text, value", [("512M", 512 << 20), ("2g", 2 << 30), ("1.5K", 1536), ("1_000", 1000),
                                         ("8GiB", 8 << 30), ("64 MB", 64 << 20)])
def test_the_variable_takes_bytes_with_suffixes(monkeypatch: pytest.MonkeyPatch, text: str, value: int) -> None:
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", text)
    assert memory_limit() == value == parse_bytes(text)


@pytest.mark.parametrize("text", ["lots", "-5G", "0", "12X", "1e9"])
def test_a_bad_variable_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("JAXPTX_SIM_MAX_MEMORY", text)
    expected = (r"JAXPTX_SIM_MAX_MEMORY: expected a byte count >= 1 such as 8G, 512M or 1000000 \(K/M/G/T: powers "
                r"of 1024\), or 'none' for no limit; got '" + text)
    with pytest.raises(sim.SimError, match=expected):
        memory_limit()
    with pytest.raises(sim.SimError, match=expected):
        sim.launch(SCALE, np.zeros(4, np.float32), block=4)


def test_the_default_limit_is_three_quarters_of_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAXPTX_SIM_MAX_MEMORY", raising=False)
    assert host_memory() > 0
    assert memory_limit() == int(host_memory() * memory_model.DEFAULT_FRACTION) > 0


def test_bad_estimate_arguments_are_clear_errors() -> None:
    with pytest.raises(sim.SimError, match=r"estimate_memory check: expected False, True, 'strict' or 'all', "
                                           r"got 'yes'"):
        sim.estimate_memory(SCALE, check="yes")
    with pytest.raises(sim.SimError, match=r"estimate_memory global_bytes: expected an int >= 0, got -1"):
        sim.estimate_memory(SCALE, global_bytes=-1)
    with pytest.raises(sim.SimError, match=r"estimate_memory: unexpected keyword arguments \['R'\]"):
        sim.estimate_memory(SCALE, R=4)

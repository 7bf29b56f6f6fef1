"""One report everywhere: a fault and an unwritten output read the same under
jax.jit (the CPU path) as through sim.launch, the PTX line cited once; the
declarations of jaxptx.jax (allow_unwritten, in_place) hold for sim.launch
too."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxptx.jax
from jaxptx import Tile, kernel, ptx, sim
from jaxptx.types import f32

SHORT = dict(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
             grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1), arch="sm_90a")


def _plus_one(x, y):
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off) + 1.0)


short = kernel(**SHORT, name="short")(_plus_one)
padded = jaxptx.jax.allow_unwritten("y")(kernel(**SHORT, name="padded")(_plus_one))


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32 + 1, 1, 1), block=(32, 1, 1), arch="sm_90a")
def overrun(x, y):
    """The last CTA reads and writes past the ends of x and y."""
    _plus_one(x, y)


@jaxptx.jax.in_place(y="x")
@kernel(**SHORT)
def bump(x, y):
    """y = x + 1 in x's buffer, whole CTAs only: the tail keeps x's values."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(y.ptr + off) + 1.0)


X = np.arange(40, dtype=np.float32)
X64 = np.arange(64, dtype=np.float32)


def _jit_error(kind: str, f, *args) -> str:
    with pytest.raises(jax.errors.JaxRuntimeError, match=rf"^INTERNAL: {kind}: kernel {f.name}: ") as info:
        jax.block_until_ready(jax.jit(f)(*args))
    return str(info.value).splitlines()[0]


def test_a_fault_under_jit_reads_as_through_sim_launch_with_the_ptx_line_once() -> None:
    with pytest.raises(sim.SimFault, match=r"^kernel overrun: ld\.global\.f32: global access of 4 bytes at "
                                           r"offset 0x100 of parameter 'x' is out of bounds") as info:
        sim.launch(overrun, X64, np.zeros_like(X64))
    direct = str(info.value)
    message = _jit_error("SimFault", overrun, X64)
    assert message.startswith(f"INTERNAL: SimFault: {direct} (jaxptx_cpu_v2, kernel id "), (message, direct)
    assert message.count("PTX line") == 1 and direct.count("PTX line") == 1, message
    assert "of parameter 'x' is out of bounds" in direct and f"at {__file__}:" in direct


def test_an_unwritten_output_reads_as_through_sim_launch() -> None:
    with pytest.raises(sim.UnwrittenOutputError, match=r"^kernel short: output 0 'y' \(float32\[40\]\) has 8 of "
                                                       r"40 elements the kernel never wrote, the first at index "
                                                       r"\(32,\)") as info:
        sim.launch(short, X, np.zeros_like(X))
    message = _jit_error("UnwrittenOutputError", short, X)
    assert message.startswith(f"INTERNAL: UnwrittenOutputError: {info.value} (jaxptx_cpu_v2, kernel id "), message
    assert "kernel short: output 0 'y' (float32[40]) has 8 of 40 elements" in message


def test_declared_padding_and_in_place_outputs_hold_for_sim_launch() -> None:
    y = np.full(40, 5, np.float32)
    sim.launch(padded, X, y)
    np.testing.assert_array_equal(y, np.where(np.arange(40) < 32, X + 1, 5))
    np.testing.assert_array_equal(jax.jit(padded)(X), np.where(np.arange(40) < 32, X + 1, 0))
    x, y = X.copy(), X.copy()
    sim.launch(bump, x, y)                   # y is read before it is written: its tail is x's
    np.testing.assert_array_equal(y, np.where(np.arange(40) < 32, X + 1, X))

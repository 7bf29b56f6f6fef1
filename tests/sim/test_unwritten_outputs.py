"""sim.launch checks a traced kernel's outputs as jax.jit's CPU path does:
bytes no store, copy or atomic of the launch wrote are an
UnwrittenOutputError naming the output and its first unwritten index,
unless declared padding (allow_unwritten=)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, sim
from jaxptx.types import f32, u32


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1), arch="sm_90a")
def short(x, y):
    """y = x + 1 over whole CTAs only: a tail of N % 32 stays unwritten."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off) + 1.0)


@kernel(out_specs=(Tile(8, u32),), grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
def histogram(h):
    """Every thread adds 1 to bin tid % 8 with an atomic: no plain store."""
    ptx.red.global_.add.u32(h.ptr + ptx.mul.wide.u32(ptx.special.tid.x() & 7, 4), 1)


X = np.arange(40, dtype=np.float32)


@pytest.mark.parametrize("check", [None, True])
def test_a_grid_that_leaves_an_output_tail_is_an_error(check) -> None:
    y = np.full(40, -1, np.float32)
    with pytest.raises(sim.UnwrittenOutputError,
                       match=r"^kernel short: output 0 'y' \(float32\[40\]\) has 8 of 40 elements the kernel never "
                             r"wrote, the first at index \(32,\) \(garbage on a GPU\): make the grid cover the whole "
                             r"output, or, if the kernel leaves padding on purpose, declare it with "
                             r"jaxptx\.jax\.allow_unwritten \(sim\.launch and jaxptx\.profile: allow_unwritten=\)$"):
        sim.launch(short, X, y, check=check)
    np.testing.assert_array_equal(y[:32], X[:32] + 1)      # the arrays are updated all the same
    np.testing.assert_array_equal(y[32:], -1)


@pytest.mark.parametrize("allow", [True, ("y",), "y"])
def test_declared_padding_keeps_what_the_array_held(allow) -> None:
    y = np.full(40, -1, np.float32)
    sim.launch(short, X, y, allow_unwritten=allow)
    np.testing.assert_array_equal(y, np.where(np.arange(40) < 32, X + 1, -1))


def test_allow_unwritten_names_outputs_of_a_traced_kernel() -> None:
    with pytest.raises(sim.SimError, match=r"allow_unwritten: kernel short has no output 'x' \(outputs: y\)"):
        sim.launch(short, X, np.zeros(40, np.float32), allow_unwritten=("x",))
    with pytest.raises(sim.SimError, match=r"launch: allow_unwritten names outputs of a traced kernel; PTX text"):
        sim.launch(short.ptx(N=40), X, np.zeros(40, np.float32), grid=1, block=32, allow_unwritten=True)


def test_bytes_an_atomic_wrote_are_written() -> None:
    h = np.zeros(8, np.uint32)
    sim.launch(histogram, h)
    np.testing.assert_array_equal(h, 4)


def test_text_and_outputs_that_are_inputs_are_not_checked() -> None:
    y = np.zeros(40, np.float32)
    sim.launch(short.ptx(N=40), X, y, grid=1, block=32)      # PTX text: no outputs to speak of
    x = X.copy()
    sim.launch(short, x, x)                                  # y is x: an update in place
    np.testing.assert_array_equal(x, np.where(np.arange(40) < 32, X + 1, X))

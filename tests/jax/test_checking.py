"""``jaxptx.sim.checking()``: the sanitizer on the CPU path of ``jax.jit``."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, smem, sim
from jaxptx.types import f32, u32


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=(1, 1, 1), block=(32, 1, 1),
        arch="sm_90a")
def neighbour(x, y, *, sync=True):
    """y[i] = x[i ^ 1] through shared memory; ``sync=False`` leaves out the
    barrier between the store and the neighbour's load (a race)."""
    buf = smem.alloc(f32, 32)
    tid = ptx.special.tid.x()
    ptx.st.shared.f32(buf[tid], ptx.ld.global_.f32(x.ptr + ptx.mul.wide.u32(tid, 4)))
    if sync:
        ptx.bar.sync(0)
    v = ptx.ld.shared.f32(buf[tid ^ 1])
    ptx.st.global_.f32(y.ptr + ptx.mul.wide.u32(tid, 4), v)


X = np.arange(32, dtype=np.float32)


def test_a_race_under_jit_is_raised_naming_the_kernel_and_both_lines() -> None:
    f = jax.jit(lambda x: neighbour(x, sync=False))
    with sim.checking():
        with pytest.raises(Exception, match=r"SanitizerError: kernel neighbour: sanitizer: shared-memory "
                                             r"race: read of offset 0x4 at PTX line \d+ \(ld.shared.f32\).*"
                                             r"conflicts with the write at PTX line \d+ "
                                             r"\[test_checking.py:\d+\] \(st.shared.f32\) by "
                                             r"thread \(1, 0, 0\).* at .*test_checking.py:\d+ in the kernel"):
            jax.block_until_ready(f(X))


def test_outside_the_block_nothing_is_checked_and_all_collects() -> None:
    f = jax.jit(lambda x: neighbour(x, sync=False))
    jax.block_until_ready(f(X))                     # unchecked: runs (the emulator is in lockstep)
    with sim.checking("all"):
        with pytest.raises(Exception, match=r"sanitizer findings"):
            jax.block_until_ready(jax.jit(lambda x: neighbour(x, sync=False) * 2)(X))


def test_correct_code_passes_checked() -> None:
    with sim.checking():
        y = jax.jit(neighbour)(X)
    np.testing.assert_array_equal(np.asarray(y), X.reshape(-1, 2)[:, ::-1].reshape(-1))


def test_bad_mode() -> None:
    with pytest.raises(sim.SimError, match="checking: expected False, True, 'strict' or 'all', got 'loud'"):
        with sim.checking("loud"):
            pass

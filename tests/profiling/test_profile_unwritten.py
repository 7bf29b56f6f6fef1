"""jaxptx.profile reports an output a traced kernel leaves partly unwritten
as sim.launch and jax.jit do, and takes allow_unwritten= for padding."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx
from jaxptx import Tile, kernel, ptx, sim
from jaxptx.types import f32


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1), arch="sm_90a")
def short(x, y):
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off))


X = np.arange(40, dtype=np.float32)


def test_an_unwritten_output_is_an_error_naming_the_output_and_first_index() -> None:
    with pytest.raises(sim.UnwrittenOutputError, match=r"^kernel short: output 0 'y' \(float32\[40\]\) has 8 of 40 "
                                                       r"elements the kernel never wrote, the first at index \(32,\)"):
        jaxptx.profile.profile(short, X, np.zeros_like(X), resources=False)


def test_declared_padding_profiles() -> None:
    p = jaxptx.profile.profile(short, X, np.zeros_like(X), resources=False, allow_unwritten=("y",))
    assert p.kernel["global_requests"] == 2

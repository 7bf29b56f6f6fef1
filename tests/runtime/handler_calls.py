"""What the CUDA handler's tests share: kernels, and calling the handler on
the stand-in driver (jaxptx.testing.standin) as XLA would call it."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx
from jaxptx.jax import in_place
from jaxptx.testing.standin import HandlerError, StandInDriver, cuda_calls
from jaxptx.types import f32, s64, u32

__all__ = ["X", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "INTERNAL",
           "scaled", "cluster_rank", "add_one", "lowered_call", "run", "failure"]

X = np.arange(256, dtype=np.float32)
INVALID_ARGUMENT, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INTERNAL = 3, 8, 9, 13


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32), Tile("N", s64)),
        raw_params=[("u32", "n"), ("f32", "alpha"), ("s64", "bias")],
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a")
def scaled(x, y, z):
    """``y[i] = x[i] * alpha`` for ``i < n``, else ``x[i]``; ``z[i] = bias + i``
    (a 4-byte int, a 4-byte float and an 8-byte int scalar)."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    with ptx.if_(i < ptx.param("n")):
        ptx.mul.f32(v, v, ptx.param("alpha"))
    ptx.st.global_.f32(y.ptr + off, v)
    ptx.st.global_.s64(z.ptr + ptx.mul.wide.u32(i, 8), ptx.cvt.s64.u32(i) + ptx.param("bias"))


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", u32),),
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), cluster=(2, 1, 1),
        smem=64 * 1024, arch="sm_90a")
def cluster_rank(x, y):
    """``y[i] = rank + 10 * size`` of the cluster of element i's CTA
    (clusters of 2 CTAs, with 64 KiB of dynamic shared memory)."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    rank = ptx.special.cluster_ctarank() + ptx.special.cluster_nctarank() * 10
    ptx.st.global_.u32(y.ptr + ptx.mul.wide.u32(i, 4), rank)


@in_place(y="x")
@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a")
def add_one(x, y):
    """``x += 1`` in place."""
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 128 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(y.ptr + off) + 1.0)


def lowered_call(f, *args):
    """The CUDA custom call of ``f(*args)``, as lowered, but for a comment
    at the end of its PTX (and so its own kernel id): GPU tests in this
    process may have registered a cubin under the kernel's own id, and the
    stand-in runs PTX only."""
    (call,) = cuda_calls(jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)))
    return call.replace(ptx=call["ptx"] + b"// run by test_cuda_handler\n")


def run(call, *arrays, driver=None, **kwargs):
    driver = driver or StandInDriver()
    ran = driver.run(call, *arrays, **kwargs)
    assert driver.ctx_get_current() == 0  # every push popped
    return ran, driver


def failure(call, *arrays, driver=None, **kwargs) -> HandlerError:
    driver = driver or StandInDriver()
    # every refusal leads with its status and the handler's name; callers pin the rest
    with pytest.raises(HandlerError, match=r"^[A-Z_]+: jaxptx_launch_v\d\b") as info:
        driver.run(call, *arrays, **kwargs)
    assert driver.ctx_get_current() == 0
    return info.value

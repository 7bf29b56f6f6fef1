"""The one Launch value on the JAX path: the primitive's ``launch``
parameter, the registry entry and the custom call's attributes, and
launches over CUDA's limits refused while tracing, before anything runs."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx
from jaxptx.errors import LaunchError
from jaxptx.jax import _registry
from jaxptx.launch import Launch
from jaxptx.types import f32

from jax_kernels import affine, axpy_z

X = np.arange(256, dtype=np.float32)


@kernel(in_specs=(Tile("M", "N", f32),), out_specs=(Tile("M", "N", f32),),
        grid=lambda M, N: (N // 32, M, 1), block=(32, 1, 1), arch="sm_90a")
def rows(x, y):
    """y = x, one block per row and 32 columns."""
    row = ptx.special.ctaid.y()
    col = ptx.special.ctaid.x() * 32 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(row * x.shape[1] + col, 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off))


def test_the_primitive_carries_the_launch_and_the_call_attributes_come_from_it():
    jaxpr = jax.make_jaxpr(affine)(X)
    (eqn,) = jaxpr.eqns
    assert eqn.params["launch"] == Launch((2, 1, 1), (128, 1, 1))
    text = jax.jit(affine).lower(X).as_text()
    assert re.search(r"launch = \{block = dense<\[128, 1, 1\]> : tensor<3xi32>, cluster = "
                     r"dense<1> : tensor<3xi32>, grid = dense<\[2, 1, 1\]> : tensor<3xi32>, "
                     r"smem = 0 : i64\}", text)  # one attribute
    kernel_id = int(re.search(r"kernel_id = (\d+) : i64", text).group(1))
    assert _registry.lookup(kernel_id).launch == eqn.params["launch"]


def test_a_vmap_folded_into_grid_z_is_the_same_launch_with_grid_z_the_batch():
    xs = np.ones((3, 256), np.float32)
    (eqn,) = jax.make_jaxpr(jax.vmap(axpy_z))(xs, xs).eqns
    assert eqn.params["launch"] == Launch((2, 1, 3), (128, 1, 1))
    np.testing.assert_allclose(jax.vmap(axpy_z)(xs, xs), xs * 3)


def test_a_grid_function_over_a_limit_is_refused_while_tracing():
    np.testing.assert_array_equal(jax.jit(rows)(np.ones((3, 64), np.float32)), np.ones((3, 64)))
    too_many_rows = jax.ShapeDtypeStruct((70000, 32), jnp.float32)  # nothing is allocated
    with pytest.raises(LaunchError, match=r"^kernel rows \(grid for M=70000, N=32\): grid\.y = 70000 "
                                          r"exceeds CUDA's limit of 65535(\n|$)"):
        jax.jit(rows).trace(too_many_rows)
    with pytest.raises(LaunchError, match=r"grid: expected 1 to 3 positive ints .*got \(0, 2, 1\)"):
        jax.jit(rows).trace(jax.ShapeDtypeStruct((2, 16), jnp.float32))

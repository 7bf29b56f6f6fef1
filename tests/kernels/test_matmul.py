"""jaxptx.kernels.matmul: the front end (checks, padding, vmap, grad) over
every variant, each run on the emulator against numpy."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.kernels import matmul

ARCHES = ("sm_80", "sm_90a", "sm_100a")


def _rand(shape, dtype=jnp.bfloat16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _ref(a, b):
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def _launches(fn, *args) -> int:
    """How many kernel launches (jaxptx custom calls) ``jax.jit(fn)`` lowers to on the CPU."""
    return len(re.findall(r'custom_call @"?jaxptx_cpu_v\d', jax.jit(fn).lower(*args).as_text()))


@pytest.mark.parametrize("arch", ARCHES)
def test_odd_shape_under_jit(arch):
    """M, N, K off every tile multiple; K and N not multiples of 8 (padded)."""
    a, b = _rand((70, 50)), _rand((50, 36), seed=1)
    c = jax.jit(lambda a, b: matmul(a, b, arch=arch))(a, b)
    assert c.shape == (70, 36) and c.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(c), _ref(a, b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHES)
def test_vmap_is_one_launch(arch):
    a, b = _rand((3, 40, 64)), _rand((64, 24), jnp.bfloat16, 1)
    f = jax.vmap(lambda a: matmul(a, b, arch=arch))
    assert _launches(f, a) == 1
    c = jax.jit(f)(a)
    for g in range(3):
        np.testing.assert_allclose(np.asarray(c[g]), _ref(a[g], b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHES)
def test_grad_matches_jnp(arch):
    a, b = _rand((32, 48), jnp.float16), _rand((48, 40), jnp.float16, 1)

    def loss(f):
        return lambda a, b: jnp.sum(jnp.sin(f(a, b)))
    ours = jax.grad(loss(lambda a, b: matmul(a, b, arch=arch)), argnums=(0, 1))(a, b)
    want = jax.grad(loss(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32)),
                    argnums=(0, 1))(a, b)
    for x, y in zip(ours, want):
        assert x.dtype == y.dtype == jnp.float16
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=2e-2, atol=2e-2)


def test_output_dtype():
    a, b = _rand((16, 16)), _rand((16, 16), seed=1)
    c = matmul(a, b, preferred_element_type=jnp.bfloat16, arch="sm_80")
    assert c.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(c, np.float32), _ref(a, b), rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("args, kwargs, match", [
    ((np.ones((4, 8), np.float32), np.ones((8, 4), np.float32)), {}, "matmul a: expected bfloat16 or float16, got float32"),
    ((np.ones((2, 4, 8), ml_dtypes.bfloat16), np.ones((8, 4), ml_dtypes.bfloat16)), {}, r"matmul a: expected a 2-d array, got shape \(2, 4, 8\)"),
    ((np.ones((4, 8), ml_dtypes.bfloat16), np.ones((8, 4), np.float16)), {}, "same dtype, got bfloat16 and float16"),
    ((np.ones((4, 8), ml_dtypes.bfloat16), np.ones((6, 4), ml_dtypes.bfloat16)), {}, r"expected b.shape\[0\] == a.shape\[1\]"),
    ((np.ones((4, 8), ml_dtypes.bfloat16), np.ones((8, 4), ml_dtypes.bfloat16)), {"preferred_element_type": jnp.int8}, "preferred_element_type: expected float32"),
    ((np.ones((4, 8), ml_dtypes.bfloat16), np.ones((8, 4), ml_dtypes.bfloat16)), {"arch": "sm_75"}, "arch='sm_75' is not a variant of matmul"),
])
def test_bad_inputs(args, kwargs, match):
    with pytest.raises(SpecError, match=match):
        matmul(*args, **kwargs)

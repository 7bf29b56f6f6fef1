"""custom_vjp: a forward kernel paired with a backward kernel or JAX function."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx.errors import SpecError

from jax_kernels import affine, affine_bwd, axpy_index

RNG = np.random.default_rng(1)
X = RNG.standard_normal(256).astype(np.float32)
W = RNG.standard_normal(256).astype(np.float32)

affine_vjp = jaxptx.custom_vjp(affine, affine_bwd)


def loss(f):
    return lambda x: jnp.sum(jnp.sin(f(x)))


def test_grad_with_a_backward_kernel_matches_jnp():
    want = jax.grad(loss(lambda x: x * 2 + 1))(X)
    np.testing.assert_allclose(jax.grad(loss(affine_vjp))(X), want, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(loss(affine_vjp)))(X), want, rtol=1e-6)


def test_forward_value_is_the_kernel():
    np.testing.assert_array_equal(affine_vjp(X), X * 2 + 1)


def test_grad_under_vmap():
    xs = RNG.standard_normal((3, 256)).astype(np.float32)
    want = jax.vmap(jax.grad(loss(lambda x: x * 2 + 1)))(xs)
    got = jax.jit(jax.vmap(jax.grad(loss(affine_vjp))))(xs)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@jaxptx.custom_vjp(axpy_index)
def axpy_vjp(x, w, y, idx, dy, didx, *, scale):
    """A JAX-function backward, given as a decorator; takes the template value."""
    return dy * scale, dy


def test_decorator_form_with_template_values_and_two_outputs():
    def f(x, w, scale):
        y, idx = axpy_vjp(x, w, scale=scale)
        return jnp.sum(y ** 2) + jnp.sum(idx)

    gx, gw = jax.jit(jax.grad(f, argnums=(0, 1)), static_argnums=2)(X, W, 0.5)
    y = X * 0.5 + W
    np.testing.assert_allclose(gx, 2 * y * 0.5, rtol=1e-5)
    np.testing.assert_allclose(gw, 2 * y, rtol=1e-5)


def test_a_backward_returning_the_wrong_count_is_an_error():
    bad = jaxptx.custom_vjp(axpy_index, lambda x, w, y, idx, dy, didx: dy)
    with pytest.raises(SpecError, match=r"custom_vjp axpy_index: backward must return one "
                                        r"cotangent per input \(2\), got a single value"):
        jax.grad(lambda x: jnp.sum(bad(x, W)[0]))(X)

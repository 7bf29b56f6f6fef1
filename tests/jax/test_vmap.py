"""vmap: the batching rule loops over the batch (one launch per element)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax_kernels import affine, axpy_index

RNG = np.random.default_rng(0)
XS = RNG.standard_normal((3, 256)).astype(np.float32)


def test_vmap_over_axis_0_eager_and_jit():
    np.testing.assert_array_equal(jax.vmap(affine)(XS), XS * 2 + 1)
    np.testing.assert_array_equal(jax.jit(jax.vmap(affine))(XS), XS * 2 + 1)


def test_vmap_is_a_loop_in_the_jaxpr():
    jaxpr = str(jax.make_jaxpr(jax.vmap(affine))(XS))
    assert "scan" in jaxpr and "affine[" in jaxpr


def test_in_axes_other_than_0_and_out_axes():
    xt = np.ascontiguousarray(XS.T)  # (256, 3): batch on axis 1
    y = jax.jit(jax.vmap(affine, in_axes=1, out_axes=1))(xt)
    np.testing.assert_array_equal(y, xt * 2 + 1)


def test_unbatched_inputs_are_shared():
    w = RNG.standard_normal(256).astype(np.float32)
    y, idx = jax.vmap(lambda x: axpy_index(x, w, scale=2.0))(XS)
    np.testing.assert_allclose(y, XS * 2 + w, rtol=1e-6)
    np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(256), (3, 256)))
    y, _ = jax.vmap(axpy_index, in_axes=(None, 0))(XS[0], XS)
    np.testing.assert_allclose(y, XS[0] * 3 + XS, rtol=1e-6)


def test_nested_vmap():
    xss = RNG.standard_normal((2, 3, 256)).astype(np.float32)
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(affine)))(xss), xss * 2 + 1)
    xt = np.ascontiguousarray(np.moveaxis(xss, 0, 2))  # (3, 256, 2)
    y = jax.vmap(jax.vmap(affine, in_axes=1), in_axes=0)(xt)
    np.testing.assert_array_equal(y, np.moveaxis(xt, 2, 1) * 2 + 1)


def test_vmap_inside_a_larger_function():
    f = jax.jit(lambda xs: jnp.sum(jax.vmap(affine)(xs * 2), axis=1))
    np.testing.assert_allclose(f(XS), (XS * 4 + 1).sum(axis=1), rtol=1e-5)

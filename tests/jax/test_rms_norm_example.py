"""End to end: examples/rms_norm.py under jit, vmap and grad, against jnp."""

from __future__ import annotations

import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxptx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from rms_norm import rms_norm  # noqa: E402

EPS = 1e-6
RNG = np.random.default_rng(2)
X = RNG.standard_normal((2, 256)).astype(np.float32)
W = RNG.standard_normal(256).astype(np.float32)


def reference(x, w, eps=EPS):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rms_norm_bwd(x, w, y, dy, *, eps):
    r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    g = dy * w
    dx = r * g - x * r ** 3 * jnp.mean(g * x, axis=-1, keepdims=True)
    return dx, jnp.sum(dy * x * r, axis=0)


norm = jaxptx.custom_vjp(rms_norm, rms_norm_bwd)


def test_jit_matches_jnp():
    np.testing.assert_allclose(jax.jit(rms_norm)(X, W), reference(X, W), rtol=1e-5, atol=1e-5)
    y = jax.jit(lambda x, w: rms_norm(x, w, eps=0.5))(X, W)
    np.testing.assert_allclose(y, reference(X, W, 0.5), rtol=1e-5, atol=1e-5)


def test_vmap_matches_jnp():
    xs = RNG.standard_normal((3, 2, 256)).astype(np.float32)
    got = jax.jit(jax.vmap(rms_norm, in_axes=(0, None)))(xs, W)
    np.testing.assert_allclose(got, jax.vmap(reference, in_axes=(0, None))(xs, W),
                               rtol=1e-5, atol=1e-5)


def test_grad_matches_jnp_under_jit_and_vmap():
    def loss(f):
        return lambda x, w: jnp.sum(jnp.tanh(f(x, w)))

    want = jax.grad(loss(reference), argnums=(0, 1))(X, W)
    got = jax.jit(jax.grad(loss(norm), argnums=(0, 1)))(X, W)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    xs = np.stack([X, X[::-1]])
    want = jax.vmap(jax.grad(loss(reference)), in_axes=(0, None))(xs, W)
    got = jax.jit(jax.vmap(jax.grad(loss(norm)), in_axes=(0, None)))(xs, W)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_quickstart_demo_prints_ptx_the_custom_call_and_checks_numpy():
    import subprocess
    script = pathlib.Path(__file__).resolve().parents[2] / "examples" / "rms_norm.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert ".visible .entry rms_norm(" in out and "Resources(registers=" in out
    assert "stablehlo.custom_call @jaxptx_launch_v2(%arg0, %arg1)" in out
    assert "register_ffi_targets" not in out     # no advice where nothing is wrong
    assert re.search(r'entry = "rms_norm", kernel_id = \d+ : i64, launch = \{block = .*'
                     r'grid = dense<\[4, 1, 1\]>', out) and 'ptx = ".version' in out
    assert "== jax.jit(rms_norm) ran on cpu ==" in out
    err = float(out.split("max abs error")[1].split()[0])
    assert err < 1e-4

"""Triton's tutorial kernels through ``jaxptx.triton.triton_call`` under
``jax.jit`` on the CPU (the emulator), against numpy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("triton.language", reason="no triton: pip install -e '.[triton]'")

import jaxptx.triton as jt  # noqa: E402
from triton_kernels import (  # noqa: E402
    add_kernel, attention_kernel, layer_norm_kernel, matmul_kernel, softmax_kernel)

RNG = np.random.default_rng(0)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def test_vector_add():
    x, y = RNG.standard_normal((2, 1000)).astype(np.float32)

    def add(x, y):
        return jt.triton_call(x, y, kernel=add_kernel, out_type=f32(x.size), n=x.size,
                              grid=lambda meta: (math.ceil(x.size / meta["BLOCK"]),), BLOCK=256)

    np.testing.assert_array_equal(jax.jit(add)(x, y), x + y)


def test_fused_softmax():
    x = RNG.standard_normal((8, 100)).astype(np.float32)
    x[3, 17] = 40.0
    y = jax.jit(lambda x: jt.triton_call(x, kernel=softmax_kernel, out_type=f32(*x.shape),
                                         n_cols=x.shape[1], grid=x.shape[0], BLOCK=128,
                                         num_warps=1))(x)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)


@pytest.mark.parametrize("capability, uses", [(80, "mma.sync.aligned"), (90, "wgmma.mma_async")])
def test_matmul(capability, uses):
    a = RNG.standard_normal((64, 32)).astype(np.float16)
    b = RNG.standard_normal((32, 64)).astype(np.float16)

    def matmul(a, b):
        (m, k), (_, n) = a.shape, b.shape
        return jt.triton_call(a, b, kernel=matmul_kernel, out_type=f32(m, n), M=m, N=n, K=k,
                              grid=(m // 64, n // 64), BM=64, BN=64, BK=16,
                              compute_capability=capability)

    f = jax.jit(matmul)
    np.testing.assert_allclose(f(a, b), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5, atol=1e-4)
    ptx, = [s.ptx for s in jaxptx_kernels(f, a, b)]
    assert uses in ptx


def test_layer_norm_forward():
    x = (RNG.standard_normal((4, 200)) * 3 + 1).astype(np.float32)
    w, b = RNG.standard_normal((2, 200)).astype(np.float32)
    y = jax.jit(lambda x, w, b: jt.triton_call(x, w, b, kernel=layer_norm_kernel,
                                               out_type=f32(*x.shape), n_cols=200, eps=1e-5,
                                               grid=4, BLOCK=256, num_warps=2))(x, w, b)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_fused_attention_forward():
    s, d = 32, 16
    q, k, v = RNG.standard_normal((3, s, d)).astype(np.float16)
    scale = 1 / math.sqrt(d)
    o = jax.jit(lambda q, k, v: jt.triton_call(
        q, k, v, kernel=attention_kernel, out_type=f32(s, d), S=s, scale=scale, grid=s // 16,
        D=d, BM=16, BN=16, num_warps=1, compute_capability=80))(q, k, v)
    qf, kf, vf = (t.astype(np.float64) for t in (q, k, v))
    logits = qf @ kf.T * scale + np.triu(np.full((s, s), -np.inf), 1)
    p = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(1, keepdims=True)) @ vf, rtol=2e-2, atol=2e-2)


def jaxptx_kernels(f, *args):
    """The specialisations (with their PTX) a jitted function calls."""
    import jaxptx.jax
    return list(jaxptx.jax.kernels_in(f.lower(*args)).values())

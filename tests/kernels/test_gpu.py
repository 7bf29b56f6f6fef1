"""The kernel library on a real GPU, against XLA (``gpu``: skipped where no
NVIDIA GPU and driver are present). Each op runs the variant the GPU's
target picks (``arch="auto"``) and, where the GPU can run it, each explicit
variant, at sizes that fill the machine a little."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import kernels
from jaxptx.kernels._arch import VARIANTS, target_of

pytestmark = pytest.mark.gpu


def _variants() -> list[str]:
    """The explicit variants this GPU runs (wgmma needs exactly sm_90a, tcgen05 sm_100a)."""
    t = target_of("auto")
    ok = ["sm_80"]
    if (t.sm, t.suffix) == (90, "a"):
        ok.append("sm_90a")
    if t.sm == 100 and t.suffix in ("a", "f"):
        ok.append("sm_100a")
    return ["auto"] + [v for v in VARIANTS if v in ok]


def _gpu(x):
    return jax.device_put(x, jax.devices("gpu")[0])


def _rand(shape, dtype=jnp.bfloat16, seed=0):
    return _gpu(jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype))


@pytest.mark.parametrize("arch", _variants())
def test_matmul_matches_jnp_dot(arch):
    a, b = _rand((1000, 1032)), _rand((1032, 776), seed=1)
    got = jax.jit(lambda a, b: kernels.matmul(a, b, arch=arch))(a, b)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("arch", _variants())
def test_grouped_matmul_matches_ragged_dot(arch):
    lhs, rhs = _rand((700, 256)), _rand((4, 256, 384), seed=1)
    sizes = _gpu(jnp.array([100, 0, 350, 200], jnp.int32))
    got = jax.jit(lambda l, r, g: kernels.grouped_matmul(l, r, g, arch=arch))(lhs, rhs, sizes)
    want = jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("arch", _variants())
def test_flash_attention_matches_dot_product_attention(arch, causal):
    q, k, v = (_rand((2, 1000, 4, 128), seed=s) for s in range(3))
    got = jax.jit(lambda q, k, v: kernels.flash_attention(q, k, v, causal=causal, arch=arch))(q, k, v)
    want = jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("arch", _variants())
def test_norms_match_jnp(arch):
    x, w, b = _rand((512, 4096)), _rand((4096,), seed=1), _rand((4096,), seed=2)
    x32 = x.astype(jnp.float32)
    rms = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6) * w
    mean = x32.mean(-1, keepdims=True)
    ln = (x32 - mean) * jax.lax.rsqrt(((x32 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    for got, want in ((kernels.rms_norm(x, w, arch=arch), rms), (kernels.layer_norm(x, w, b, arch=arch), ln),
                      (kernels.softmax(x, arch=arch), jax.nn.softmax(x32, -1)),
                      (kernels.swiglu(x, w * x, arch=arch), jax.nn.silu(x32) * (w * x).astype(jnp.float32))):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=3e-2, rtol=3e-2)

"""The Hopper flash-attention forward (``jaxptx.kernels._attention_sm90``):
the emulator against a float64 numpy reference, ptxas for sm_90a (0 spills),
the instructions it is built from, and the CUDA lowering's custom call."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_reference import large_qkv, reference

from jaxptx.kernels._attention_sm90 import BN, attention_kernel, attention_sm90


def _rand(shape, dtype=jnp.bfloat16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _qkv(B, S, T, H, D, dtype=jnp.bfloat16, seed=0):
    return _rand((B, S, H, D), dtype, seed), _rand((B, T, H, D), dtype, seed + 1), \
        _rand((B, T, H, D), dtype, seed + 2)


def _check(q, k, v, causal, o, lse):
    scale = 1 / np.sqrt(q.shape[-1])
    want_o, want_lse = reference(q, k, v, causal, scale)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == jnp.float32
    # o is rounded to bf16/f16 and P is rounded to 16 bits before P @ V.
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=0, atol=1e-4)


# (B, Sq, Skv, H, D, causal, dtype): every case has B * H > 1 or several
# CTAs, a length that is not a multiple of the 128-row blocks, or both;
# Skv = 300 runs three key blocks through the two-stage ring.
CASES = [
    (2, 130, 200, 2, 64, False, jnp.bfloat16),
    (1, 200, 130, 3, 64, True, jnp.bfloat16),      # Sq > Skv
    (2, 130, 300, 1, 128, True, jnp.bfloat16),     # Sq < Skv
    (1, 256, 256, 2, 128, False, jnp.bfloat16),    # whole blocks
    (2, 100, 100, 2, 64, True, jnp.float16),
    (1, 64, 300, 2, 128, False, jnp.float16),
]


@pytest.mark.parametrize("B,S,T,H,D,causal,dtype", CASES)
def test_matches_float64_reference(B, S, T, H, D, causal, dtype):
    q, k, v = _qkv(B, S, T, H, D, dtype)
    o, lse = jax.jit(lambda q, k, v: attention_sm90(q, k, v, causal=causal, scale=1 / np.sqrt(D)))(q, k, v)
    _check(q, k, v, causal, o, lse)


def test_eager_call_matches_too():
    q, k, v = _qkv(1, 70, 70, 2, 64, seed=3)
    o, lse = attention_sm90(q, k, v, causal=True, scale=0.125)
    _check(q, k, v, True, o, lse)


def test_clean_under_the_emulators_sanitizer(monkeypatch):
    """No uninitialised register or shared reads and no shared-memory races."""
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "1")
    q, k, v = _qkv(1, 130, 300, 1, 128, seed=9)
    o, lse = attention_sm90(q, k, v, causal=True, scale=0.09)
    want_o, want_lse = reference(q, k, v, True, 0.09)
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, atol=1e-4)


@pytest.mark.parametrize("S,T", [(200, 130), (130, 200)])
def test_causal_alignment_is_jax_dot_product_attentions(S, T):
    """The reference's top-left causal mask is what ``jax.nn.dot_product_attention
    (is_causal=True)`` computes when Sq != Skv, and the kernel agrees with it."""
    q, k, v = _qkv(1, S, T, 2, 64, seed=5)
    f32 = [jnp.asarray(x, jnp.float32) for x in (q, k, v)]
    jax_o = np.asarray(jax.nn.dot_product_attention(*f32, is_causal=True), np.float64)
    want_o, _ = reference(q, k, v, True, 1 / np.sqrt(64))
    np.testing.assert_allclose(jax_o, want_o, rtol=1e-4, atol=1e-5)
    o, _ = attention_sm90(q, k, v, causal=True, scale=1 / np.sqrt(64))
    np.testing.assert_allclose(np.asarray(o, np.float64), jax_o, rtol=2e-2, atol=1.5e-2)


def test_causal_skips_key_blocks_after_the_last_query():
    """Keys from 256 on are NaN in K and V: a CTA that loaded their block
    would get NaN (0 * NaN) in O; with Sq = 200 no query reaches them."""
    S, T = 200, 384
    q, k, v = _qkv(1, S, T, 2, 64, seed=7)
    k = k.at[:, 2 * BN:].set(jnp.nan)
    v = v.at[:, 2 * BN:].set(jnp.nan)
    o, lse = attention_sm90(q, k, v, causal=True, scale=0.125)
    assert np.isfinite(np.asarray(o, np.float32)).all() and np.isfinite(np.asarray(lse)).all()
    want_o, want_lse = reference(q, k[:, :2 * BN], v[:, :2 * BN], True, 0.125)
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_large_scores_give_no_nan_rows(causal):
    """Regression: exponents as fma(s, scale_log2, -m·scale_log2) kept the
    rounding of m·scale_log2 (over 2^7 here): about half the rows were NaN."""
    q, k, v = (jnp.asarray(x) for x in large_qkv(1, 64, 2 * BN, 1, 64, 6e4, block=BN))
    o, lse = attention_sm90(q, k, v, causal=causal, scale=0.125)
    want_o, want_lse = reference(q, k, v, causal, 0.125)
    assert np.abs(want_lse).min() > 1e8
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=1e-6)


DIMS = dict(B=2, S=200, T=300, H=2, Hkv=2)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills(dtype, D, causal):
    res = attention_kernel(dtype).resources(**DIMS, D=D, causal=causal)
    assert (res.spill_stores, res.spill_loads, res.stack_frame) == (0, 0, 0), res
    # Launched with 384 threads: ptxas caps the launch budget at 65536 / 384;
    # the consumers raise theirs with setmaxnreg.inc.
    assert res.registers <= 168, res


@pytest.mark.parametrize("D", [64, 128])
def test_ptx_is_built_from_hopper_instructions(D):
    text = attention_kernel("bf16").ptx(**DIMS, D=D, causal=True)
    for needle in (f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.bf16.bf16",
                   f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                   "mbarrier.try_wait.parity.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
                   "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                   "ex2.approx.ftz.f32", "shfl.sync.bfly.b32",
                   "wgmma.wait_group.sync.aligned 1;"):     # softmax overlaps the P V of the block before
        assert needle in text, needle
    # P @ V: A from four .b32 registers, V transposed (MN-major) through its descriptor.
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{D}k16\.f32\.bf16\.bf16 \{{[^}}]+\}}, "
                     r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, 1, 1, 1, 1;", text)


def test_one_launch_and_the_cuda_custom_call():
    q, k, v = _qkv(1, 130, 130, 2, 128)

    def f(q, k, v):
        return attention_sm90(q, k, v, causal=True, scale=0.1)
    eqns = jax.make_jaxpr(f)(q, k, v).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == [attention_kernel("bf16").name]
    text = jax.jit(f).trace(q, k, v).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text


def test_every_scale_shares_one_kernel():
    """``scale`` rides the call as a raw f32 parameter: one PTX and kernel id."""
    q, k, v = _qkv(1, 64, 64, 1, 64)
    ids = set()
    for scale in (0.125, 0.3):
        f = jax.jit(lambda q, k, v, scale=scale: attention_sm90(q, k, v, causal=False, scale=scale))
        text = f.lower(q, k, v).as_text()
        ids.add(re.search(r"kernel_id = (\d+)", text).group(1))
    assert len(ids) == 1


@pytest.mark.slow
@pytest.mark.parametrize("B,S,T,H,D,causal", [(1, 640, 640, 2, 128, True), (2, 300, 700, 1, 64, False)])
def test_longer_sequences(B, S, T, H, D, causal):
    """Several laps of the two-stage ring, several CTAs per head."""
    q, k, v = _qkv(B, S, T, H, D, seed=11)
    o, lse = attention_sm90(q, k, v, causal=causal, scale=1 / np.sqrt(D))
    _check(q, k, v, causal, o, lse)


@pytest.mark.parametrize("shapes,dtypes,match", [
    (((1, 64, 1, 32),) * 3, (jnp.bfloat16,) * 3, "head dim"),
    (((1, 64, 1, 64),) * 3, (jnp.float32,) * 3, "bf16"),
    (((1, 64, 1, 64),) * 3, (jnp.bfloat16, jnp.float16, jnp.bfloat16), "bf16"),
    (((1, 64, 1, 64), (1, 64, 2, 64), (1, 64, 2, 64)), (jnp.bfloat16,) * 3, "expected q"),
])
def test_refuses_what_it_does_not_run(shapes, dtypes, match):
    args = [jnp.zeros(s, d) for s, d in zip(shapes, dtypes)]
    with pytest.raises(ValueError, match=match):
        attention_sm90(*args, causal=False, scale=0.125)
    with pytest.raises(ValueError, match="scale"):
        attention_sm90(*[jnp.zeros((1, 64, 1, 64), jnp.bfloat16)] * 3, causal=False, scale=-1.0)

"""The flash-attention backward kernels (``_attention_bwd_sm80``: dK/dV over
key blocks, dQ over query blocks, from the forward's log-sum-exp):
``jax.grad`` of ``flash_attention`` on the emulator against ``jax.grad`` of
``jax.nn.dot_product_attention`` and against the jnp VJP
(``attention_backward``) at shapes off the 64-row tile, causal and not,
D 64 and 128, bf16 and f16, grouped-query and multi-query k/v; the lse
cotangent; ptxas with no spills for every variant; the instructions in the
PTX; the CUDA lowering of ``jax.grad`` naming the backward kernels; one
launch of each under ``vmap``; the sanitizer; and a ``gpu`` check against
cuDNN's gradient on a real GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.jax import kernels_in
from jaxptx.kernels._attention_bwd import attention_backward_sm80
from jaxptx.kernels._attention_bwd_sm80 import dkdv_kernel, dq_kernel
from jaxptx.kernels._attention_sm80 import attention_sm80
from jaxptx.kernels.attention import (
    attention_backward,
    attention_backward_kernels,
    flash_attention,
)
from jaxptx.types import bf16, f16

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
PTX_T = {"bf16": bf16, "f16": f16}


def qkv(B: int, Sq: int, Skv: int, H: int, Hkv: int, D: int, dtype: str = "bf16", seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(s).astype(NP[dtype]))
                 for s in ((B, Sq, H, D), (B, Skv, Hkv, D), (B, Skv, Hkv, D)))


def _loss(attn):
    """A scalar of o whose cotangent differs per element (sin, column weights)."""
    def f(q, k, v):
        o = attn(q, k, v).astype(jnp.float32)
        return jnp.sum(jnp.sin(o) * jnp.arange(1, o.shape[-1] + 1, dtype=jnp.float32) / o.shape[-1])
    return f


def _dpa_grads(q, k, v, causal: bool):
    """jax.grad of jax.nn.dot_product_attention in f32 (it takes GQA k, v natively)."""
    f = _loss(lambda q, k, v: jax.nn.dot_product_attention(
        *(x.astype(jnp.float32) for x in (q, k, v)), is_causal=causal))
    return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)


def _close(got, want, like) -> None:
    """The forward tests' gradient tolerance: 2% of the largest entry (o, P
    and dS are rounded to 16 bits on the way)."""
    assert got.dtype == like.dtype and got.shape == like.shape
    top = float(jnp.abs(want).max())
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               atol=2e-2 * top + 1e-6, rtol=3e-2)


# (dtype, B, Sq, Skv, H, Hkv, D, causal): lengths off the 64-row tile,
# Sq < Skv and Sq > Skv (the causal alignment; key blocks no query sees),
# multi-head, grouped (ratio 2, 4) and multi-query k/v, D 64 and 128.
CASES = [
    ("bf16", 1, 70, 130, 2, 2, 64, False),
    ("bf16", 1, 130, 70, 4, 2, 64, True),
    ("f16", 1, 80, 100, 2, 1, 128, True),
    ("bf16", 1, 1, 1, 1, 1, 64, True),
]
SLOW_CASES = [
    ("bf16", 2, 65, 65, 2, 2, 128, False),
    ("f16", 1, 200, 200, 4, 1, 64, True),
    ("bf16", 1, 100, 256, 8, 2, 128, True),
    ("f16", 2, 150, 90, 4, 4, 64, False),
]


def _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    q, k, v = qkv(B, Sq, Skv, H, Hkv, D, dtype, seed=Sq + Skv)
    f = _loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch="sm_80"))
    ours = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)
    for g, w, x in zip(ours, _dpa_grads(q, k, v, causal), (q, k, v)):
        _close(g, w, x)


@pytest.mark.parametrize("dtype,B,Sq,Skv,H,Hkv,D,causal", CASES)
def test_grad_matches_dot_product_attention(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,B,Sq,Skv,H,Hkv,D,causal", SLOW_CASES)
def test_grad_matches_dot_product_attention_larger(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal)


def test_kernels_match_the_jnp_vjp_with_an_lse_cotangent() -> None:
    """The kernels against ``attention_backward`` given nonzero do and dlse
    (delta = rowsum(dO ∘ O) − dlse carries it): far tighter than against jax's
    f32 attention, since both start from the same 16-bit o."""
    q, k, v = qkv(1, 90, 110, 4, 2, 64, seed=5)
    rng = np.random.default_rng(6)
    o, lse = attention_sm80(q, k, v, causal=True, scale=0.2)
    do = jnp.asarray(rng.standard_normal(o.shape), jnp.bfloat16)
    dlse = jnp.asarray(rng.standard_normal(lse.shape), jnp.float32)
    got = attention_backward_sm80(q, k, v, o, lse, do, dlse, causal=True, scale=0.2)
    want = attention_backward(q, k, v, o, lse, do, dlse, causal=True, scale=0.2)
    no_dlse = attention_backward(q, k, v, o, lse, do, jnp.zeros_like(lse), causal=True, scale=0.2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                                   atol=1e-2 * float(jnp.abs(w).max()), rtol=1e-2)
    # dlse reaches dq and dk (d lse / dS = P·scale), not dv: dropping it in the
    # kernels would leave dq, dk far from the reference.
    for g, n in zip(got[:2], no_dlse[:2]):
        assert float(jnp.abs(g.astype(jnp.float32) - n.astype(jnp.float32)).max()) > 0.1


def test_grad_of_moderately_large_scores_matches() -> None:
    """|q|, |k| ~ 10 in bf16: scaled scores up to ~400, nearly one-hot rows.
    P = exp(S·scale − lse) keeps its accuracy there (lse to 3e-5)."""
    rng = np.random.default_rng(7)
    q, k = (jnp.asarray(rng.standard_normal((1, 32, 1, 64)) * 10, jnp.bfloat16) for _ in range(2))
    v = jnp.asarray(rng.standard_normal((1, 32, 1, 64)), jnp.bfloat16)
    ours = jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, arch="sm_80")),
                            argnums=(0, 1, 2)))(q, k, v)
    for g, w, x in zip(ours, _dpa_grads(q, k, v, False), (q, k, v)):
        assert np.isfinite(np.asarray(g, np.float32)).all()
        _close(g, w, x)


def test_sanitizer_finds_no_race_or_uninitialised_read() -> None:
    q, k, v = qkv(1, 70, 80, 2, 1, 64, seed=8)
    f = jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, causal=True, arch="sm_80")),
                         argnums=(0, 1, 2)))
    with sim.checking("all"):
        ours = jax.block_until_ready(f(q, k, v))
    for g, w, x in zip(ours, _dpa_grads(q, k, v, True), (q, k, v)):
        _close(g, w, x)


def _grad_fn(causal: bool, arch: str):
    return jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch=arch)),
                            argnums=(0, 1, 2)))


# sm_90a runs the wgmma backward: test_attention_backward_sm90.py checks its lowering.
@pytest.mark.parametrize("arch,suffix", [("sm_80", "sm_80"), ("sm_100a", "sm_100a")])
def test_cuda_lowering_of_grad_has_the_backward_kernels(arch, suffix) -> None:
    q, k, v = qkv(2, 80, 144, 4, 2, 128)
    lowered = _grad_fn(True, arch).trace(q, k, v).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("jaxptx_launch") == 3, text.count("jaxptx_launch")    # forward, dQ, dK/dV
    specs = {re.search(r"\.entry (\w+)", spec.ptx).group(1): spec for spec in kernels_in(lowered).values()}
    dq = specs[f"flash_attention_bwd_dq_bf16_d128_{suffix}"]
    dkdv = specs[f"flash_attention_bwd_dkdv_bf16_d128_{suffix}"]
    assert dq.grid == (2, 8, 1) and dkdv.grid == (3, 4, 1)      # (query / key blocks, B × heads)
    for spec in (dq, dkdv):
        assert f".target {suffix}" in spec.ptx and "mma.sync.aligned.m16n8k16" in spec.ptx
    assert "dense<[128, 1, 1]>" in text
    # S×S never exists: no HLO value has both sequence lengths (80, 144) as dimensions.
    assert not re.search(r"tensor<[^>]*\b80x144\b", text) and not re.search(r"tensor<[^>]*\b144x80\b", text)


def test_vmap_of_grad_is_one_launch_of_each_kernel() -> None:
    q, k, v = (jnp.stack([x, x]) for x in qkv(1, 70, 70, 2, 1, 64))
    jaxpr = str(jax.make_jaxpr(jax.vmap(_grad_fn(False, "sm_80")))(q, k, v))
    for name in ("flash_attention_fwd_", "flash_attention_bwd_dq_", "flash_attention_bwd_dkdv_"):
        assert len(re.findall(rf"= {name}\w+\[", jaxpr)) == 1, name
    assert "while" not in jaxpr and "scan" not in jaxpr


# (Sq, Skv, H, Hkv): off-tile GQA, and a 3-block static loop (unrolled, it spilled).
SHAPES = ((1000, 777, 16, 4), (200, 130, 4, 2))


def _no_spills(dtype: str, D: int, causal: bool, arch: str, shapes=SHAPES) -> None:
    for make in (dkdv_kernel, dq_kernel):
        for Sq, Skv, H, Hkv in shapes:
            r = make(PTX_T[dtype], D, arch).resources(B=2, Sq=Sq, Skv=Skv, H=H, Hkv=Hkv,
                                                      Sp=-(-Sq // 64) * 64, causal=causal)
            assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, (make, arch, r)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills(D, causal) -> None:
    _no_spills("bf16", D, causal, "sm_80")


@pytest.mark.slow
@pytest.mark.parametrize("dtype,arch", [("f16", "sm_80"), ("bf16", "sm_90a"), ("bf16", "sm_100a"),
                                        ("f16", "sm_90a")])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_every_variant(dtype, arch, D, causal) -> None:
    _no_spills(dtype, D, causal, arch, SHAPES + ((4096, 4096, 16, 16),))


def test_ptx_uses_the_ampere_instructions() -> None:
    for make in (dkdv_kernel, dq_kernel):
        text = make(bf16, 128).ptx(B=1, Sq=200, Skv=200, H=4, Hkv=2, Sp=256, causal=True)
        for needle in (".target sm_80", "cp.async.cg.shared.global", "cp.async.wait_group 0",
                       "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                       "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ex2.approx.ftz.f32",
                       "cvt.rn.bf16x2.f32", '.pragma "nounroll"'):
            assert needle in text, (make, needle)
        assert not re.search(r"^\s*(@%\w+\s+)?(atom|red)\.", text, re.MULTILINE)   # deterministic: no atomics
    f16_text = dq_kernel(f16, 64).ptx(B=1, Sq=64, Skv=64, H=1, Hkv=1, Sp=64, causal=False)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in f16_text


def test_kernel_backward_is_what_flash_attention_differentiates_with() -> None:
    q, k, v = qkv(1, 64, 64, 1, 1, 64)
    jaxpr = str(jax.make_jaxpr(_grad_fn(False, "sm_80"))(q, k, v))
    assert "flash_attention_bwd_dq_bf16_d64_sm_80" in jaxpr
    assert "flash_attention_bwd_dkdv_bf16_d64_sm_80" in jaxpr
    assert attention_backward_kernels.__name__ == "attention_backward_kernels"


@pytest.mark.parametrize("args,message", [
    (((1, 64, 2, 32), (1, 64, 2, 32)), (r"attention_backward_sm80: q: expected bfloat16 or float16 "
                                         r"with head dim 64 or 128, got bfloat16 \(1, 64, 2, 32\)")),
    (((1, 64, 3, 64), (1, 64, 2, 64)), (r"attention_backward_sm80: k: expected \(B, Skv, Hkv, D\) "
                                         r"with Hkv dividing q's 3 heads, got \(1, 64, 2, 64\)")),
])
def test_bad_arguments_name_the_argument(args, message) -> None:
    q, k = (jnp.zeros(s, jnp.bfloat16) for s in args)
    lse = jnp.zeros((1, q.shape[2], 64), jnp.float32)
    with pytest.raises(SpecError, match=message):
        attention_backward_sm80(q, k, k, q, lse, q, lse, causal=False, scale=0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)])
@pytest.mark.parametrize("arch", ["auto", "sm_80"])
def test_gpu_grad_matches_dot_product_attention(arch, heads, causal) -> None:
    """On a real GPU: the kernels' gradients against jax.grad of
    jax.nn.dot_product_attention (cuDNN where XLA picks it) in f32."""
    gpu = jax.devices("gpu")[0]
    H, Hkv = heads
    q, k, v = (jax.device_put(x, gpu) for x in qkv(2, 1000, 1000, H, Hkv, 128, seed=11))
    f = _loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch=arch))
    ours = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)
    for g, w, x in zip(ours, _dpa_grads(q, k, v, causal), (q, k, v)):
        _close(g, w, x)
    again = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)     # no atomics: bitwise repeatable
    for g, h in zip(ours, again):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(h))

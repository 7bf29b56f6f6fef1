"""``jaxptx.kernels.attention.flash_attention`` and its Ampere kernel
(``_attention_sm80``): the emulator against float64 numpy and
``jax.nn.dot_product_attention``, ``jax.grad`` (the backward kernels; see
also test_attention_backward.py) against the grad of that function, one
launch under ``jit`` and ``vmap``, ptxas (0 spills), the
instructions in the PTX, the CUDA lowering's custom call, argument errors
and the choice of variant."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from attention_reference import large_qkv, reference

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.jax import custom_vjp, kernels_in
from jaxptx.kernels._attention_sm80 import LOG2E, attention_kernel
from jaxptx.kernels.attention import (
    _sm90,
    attention_backward,
    attention_forward,
    flash_attention,
)
from jaxptx.types import bf16, f16

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
PTX_T = {"bf16": bf16, "f16": f16}
JNP = {"bf16": jnp.bfloat16, "f16": jnp.float16}


def qkv(B: int, Sq: int, Skv: int, H: int, D: int, dtype: str = "bf16", seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(NP[dtype])
                 for s in ((B, Sq, H, D), (B, Skv, H, D), (B, Skv, H, D)))


def check(o, lse, q, k, v, causal: bool, scale: float) -> None:
    want_o, want_lse = reference(q, k, v, causal, scale)
    # o is rounded to 16 bits (bf16: 2^-9 relative) and so is P before P·V.
    tol = 1.5e-2 if o.dtype == ml_dtypes.bfloat16 or o.dtype == jnp.bfloat16 else 3e-3
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=0, atol=1e-4)


# (dtype, B, Sq, Skv, H, D, causal): D 64 and 128, causal and not, lengths
# that are not multiples of the 64-row blocks, Sq < Skv and Sq > Skv (the
# causal mask's alignment), B x H > 1, up to 4 key blocks through the
# two-stage ring.
CASES = [
    ("bf16", 2, 128, 128, 2, 64, False),
    ("bf16", 1, 80, 200, 3, 64, True),
    ("bf16", 2, 200, 80, 1, 128, True),
    ("bf16", 1, 80, 200, 2, 128, False),
    ("f16", 2, 130, 70, 1, 64, False),
    ("f16", 1, 100, 256, 2, 128, True),
    ("bf16", 1, 1, 1, 1, 64, True),
]


@pytest.mark.parametrize("dtype,B,Sq,Skv,H,D,causal", CASES)
def test_emulator_matches_float64(dtype, B, Sq, Skv, H, D, causal) -> None:
    q, k, v = qkv(B, Sq, Skv, H, D, dtype)
    o = np.full((B, Sq, H, D), np.nan, NP[dtype])
    lse = np.full((B, H, Sq), np.nan, np.float32)
    scale = 1 / np.sqrt(D)
    sim.launch(attention_kernel(PTX_T[dtype], D), q, k, v, o, lse, scale * LOG2E, causal=causal)
    check(o, lse, q, k, v, causal, scale)


@pytest.mark.parametrize("causal", [False, True])
def test_large_scores_give_no_nan_rows(causal) -> None:
    # Regression: exponents as fma(s, scale_log2, -m·scale_log2) kept the rounding
    # of m·scale_log2 (over 2^7 here): about half the rows came out NaN.
    q, k, v = large_qkv(1, 32, 128, 1, 64, 6e4, block=64)
    o = np.full(q.shape, np.nan, NP["bf16"])
    lse = np.full((1, 1, 32), np.nan, np.float32)
    sim.launch(attention_kernel(bf16, 64), q, k, v, o, lse, 0.125 * LOG2E, causal=causal)
    want_o, want_lse = reference(q, k, v, causal, 0.125)
    assert np.abs(want_lse).min() > 1e8                      # the scale of the problem
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=1.5e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=1e-6)
    if not causal:                                           # and through jit, as jax's own op
        got = jax.jit(functools.partial(flash_attention, arch="sm_80"))(q, k, v)
        np.testing.assert_allclose(np.asarray(got, np.float32), _dpa(q, k, v, False),
                                   rtol=1.5e-2, atol=1.5e-2)


def test_sanitizer_finds_no_race_or_uninitialised_read() -> None:
    q, k, v = qkv(1, 80, 150, 1, 64, seed=3)
    o, lse = np.zeros((1, 80, 1, 64), NP["bf16"]), np.zeros((1, 1, 80), np.float32)
    sim.launch(attention_kernel(bf16, 64), q, k, v, o, lse, 0.125 * LOG2E, causal=True, check=True)
    check(o, lse, q, k, v, True, 0.125)


def _dpa(q, k, v, causal, scale=None):
    f32 = [jnp.asarray(x, jnp.float32) for x in (q, k, v)]
    return jax.nn.dot_product_attention(*f32, is_causal=causal, scale=scale)


_dpa_jit = jax.jit(_dpa, static_argnums=(3, 4))
_dpa_16bit = jax.jit(lambda q, k, v, causal, scale: jax.nn.dot_product_attention(
    q, k, v, is_causal=causal, scale=scale), static_argnums=(3, 4))


@pytest.mark.parametrize("dtype,Sq,Skv,D,causal,scale", [
    ("bf16", 200, 200, 64, True, None),
    ("f16", 80, 136, 128, False, 0.3),
])
def test_jit_matches_dot_product_attention(dtype, Sq, Skv, D, causal, scale) -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(2, Sq, Skv, 2, D, dtype, seed=1))
    f = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=causal, scale=scale, arch="sm_80"))
    o = f(q, k, v)
    assert o.shape == q.shape and o.dtype == q.dtype
    tol = 1.5e-2 if dtype == "bf16" else 3e-3
    np.testing.assert_allclose(np.asarray(o, np.float32), _dpa_jit(q, k, v, causal, scale), rtol=tol, atol=tol)
    if dtype == "bf16":   # jax's own bf16 attention (rounding its logits, probabilities) is near too
        theirs = _dpa_16bit(q, k, v, causal, scale)
        np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(theirs, np.float32), atol=6e-2)
    jaxpr = str(jax.make_jaxpr(f)(q, k, v))
    assert len(re.findall(r"= flash_attention_fwd_\w+\[", jaxpr)) == 1


def _loss(attn):
    def f(q, k, v):
        o = attn(q, k, v).astype(jnp.float32)
        return jnp.sum(jnp.sin(o) * jnp.arange(o.shape[-1], dtype=jnp.float32))
    return f


@pytest.mark.parametrize("Sq,Skv,D,causal", [(80, 80, 64, True), (70, 130, 128, False), (130, 70, 64, True)])
def test_grad_matches_dot_product_attention(Sq, Skv, D, causal) -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(1, Sq, Skv, 2, D, seed=2))
    ours = jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch="sm_80")),
                            argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(_loss(lambda q, k, v: _dpa(q, k, v, causal)), argnums=(0, 1, 2)))(q, k, v)
    for g, w, x in zip(ours, want, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
        scale = float(jnp.abs(w).max())
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w), atol=2e-2 * scale, rtol=3e-2)


def test_jnp_backward_of_large_scores_is_finite_and_matches() -> None:
    # Regression for the jnp VJP (attention_backward, the kernels' reference): it took
    # P = exp(S·scale - lse), and lse in f32 is off by half an ulp of ~1e9 here: inf
    # and NaN gradients; and rowsum(dO * O) for rowsum(P * dP) left rounding times
    # |K|·scale in dQ, which is 0 for one-hot rows. The backward kernels take both
    # shortcuts (flash attention's design; their module docstring gives the range).
    q, k, v = (jnp.asarray(x) for x in large_qkv(1, 32, 80, 1, 64, 6e4, seed=1))
    jnp_vjp = custom_vjp(attention_forward, attention_backward)
    ours = jax.jit(jax.grad(_loss(lambda q, k, v: jnp_vjp(q, k, v, causal=False, scale=0.125,
                                                           variant_name="sm_80")[0]),
                            argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(_loss(lambda q, k, v: _dpa(q, k, v, False)), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(ours, want):
        assert np.isfinite(np.asarray(g, np.float32)).all()
        scale = float(jnp.abs(w).max())
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w), atol=2e-2 * scale + 1e-6,
                                   rtol=3e-2)


def test_backward_with_a_cotangent_on_lse() -> None:
    """attention_backward's dlse term: d(sum lse)/dq = scale * P K."""
    q, k, v = (jnp.asarray(x, jnp.float32) for x in qkv(1, 16, 24, 1, 64, seed=4))
    scale = 0.125
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    lse = jax.nn.logsumexp(s, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
    backward = jax.jit(functools.partial(attention_backward, causal=False, scale=scale))
    dq, dk, dv = backward(q, k, v, o, lse, jnp.zeros_like(o), jnp.ones_like(lse))
    want = jax.jit(jax.grad(lambda q, k: jnp.sum(jax.nn.logsumexp(
        jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale, axis=-1)), argnums=(0, 1)))(q, k)
    np.testing.assert_allclose(dq, want[0], atol=1e-5)
    np.testing.assert_allclose(dk, want[1], atol=1e-5)
    np.testing.assert_allclose(dv, 0, atol=0)


def test_vmap_is_one_launch() -> None:
    problems = [qkv(1, 80, 100, 2, 64, seed=s) for s in (5, 6, 7)]
    q, k, v = (jnp.stack([jnp.asarray(p[i]) for p in problems]) for i in range(3))   # (3, 1, S, H, D)
    f = jax.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True, arch="sm_80"))
    jaxpr = str(jax.make_jaxpr(f)(q, k, v))
    assert len(re.findall(r"= flash_attention_fwd_\w+\[", jaxpr)) == 1
    assert "scan" not in jaxpr and "while" not in jaxpr
    o = jax.jit(f)(q, k, v)
    for i in range(3):
        want, _ = reference(q[i], k[i], v[i], True, 1 / 8)
        np.testing.assert_allclose(np.asarray(o[i], np.float64), want, rtol=1.5e-2, atol=1.5e-2)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills(dtype, arch, D, causal) -> None:
    for Sq, Skv in ((4096, 4096), (1000, 777)):
        r = attention_kernel(PTX_T[dtype], D, arch).resources(B=4, Sq=Sq, Skv=Skv, H=16, Hkv=16,
                                                              causal=causal)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, r
        # recorded: sm_80 D=64 ~149-153, D=128 ~203-204; sm_100a ~144-148 and ~202-206
        assert r.registers <= (170 if D == 64 else 255), r


def test_ptx_uses_the_ampere_instructions() -> None:
    text = attention_kernel(bf16, 128).ptx(B=1, Sq=200, Skv=200, H=2, Hkv=2, causal=True)
    for needle in (".target sm_80", "cp.async.cg.shared.global", "cp.async.commit_group",
                   "cp.async.wait_group 0", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ex2.approx.ftz.f32",
                   "cvt.rn.bf16x2.f32", "shfl.sync.bfly.b32", ".minnctapersm 2"):
        assert needle in text, needle
    f16_text = attention_kernel(f16, 64).ptx(B=1, Sq=64, Skv=64, H=1, Hkv=1, causal=False)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in f16_text and "cvt.rn.f16x2.f32" in f16_text


def test_cuda_lowering_is_the_launch_custom_call() -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(2, 80, 80, 2, 64))
    lowered = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True, arch="sm_80")).trace(
        q, k, v).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("jaxptx_launch") == 1 and "grid = dense<[2, 4, 1]>" in text
    assert "block = dense<[128, 1, 1]>" in text
    (spec,) = kernels_in(lowered).values()
    assert "mma.sync.aligned.m16n8k16" in spec.ptx and spec.grid == (2, 4, 1)


def test_sm100a_runs_the_tcgen05_kernel() -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(1, 80, 80, 1, 64, seed=8))
    lowered = jax.jit(lambda q, k, v: flash_attention(q, k, v, arch="sm_100a")).trace(q, k, v).lower()
    assert "flash_attention_fwd_bf16_sm_100a" in lowered.as_text()
    o = flash_attention(q, k, v, arch="sm_100a")
    check_o, _ = reference(q, k, v, False, 1 / 8)
    np.testing.assert_allclose(np.asarray(o, np.float64), check_o, rtol=1.5e-2, atol=1.5e-2)


def test_sm90a_routes_to_the_hopper_kernel_and_vmap_folds_into_b() -> None:
    # The Hopper module ships with the package: importing it must work (an
    # error here is the bug that would silently send sm_90a to the Ampere code).
    from jaxptx.kernels._attention_sm90 import attention_kernel as hopper_kernel
    from jaxptx.kernels._attention_sm90 import attention_sm90
    assert _sm90() is attention_sm90
    problems = [qkv(1, 130, 200, 2, 64, seed=s) for s in (9, 10)]
    q, k, v = (jnp.stack([jnp.asarray(p[i]) for p in problems]) for i in range(3))   # (2, 1, S, H, D)
    f = jax.jit(jax.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True, arch="sm_90a"),
                         in_axes=(0, 0, None)))
    jaxpr = str(jax.make_jaxpr(f)(q, k, v[0]))
    # The Hopper kernel's own name ("flash_attention_fwd_bf16_sm_90a"); the
    # Ampere code traced for sm_90a is "flash_attention_fwd_bf16_d64_sm_90a".
    assert hopper_kernel("bf16").name == "flash_attention_fwd_bf16_sm_90a"
    assert len(re.findall(r"= flash_attention_fwd_bf16_sm_90a\[", jaxpr)) == 1, jaxpr
    assert "_d64_" not in jaxpr and "scan" not in jaxpr
    o = f(q, k, v[0])
    for i in range(2):
        want, _ = reference(q[i], k[i], v[0], True, 1 / 8)
        np.testing.assert_allclose(np.asarray(o[i], np.float64), want, rtol=1.5e-2, atol=1.5e-2)


@pytest.mark.parametrize("args,kwargs,message", [
    (((1, 64, 1, 64), (1, 64, 1, 64), (1, 64, 64)), {}, r"v: expected 4 dims \(B, S, H, D\), got shape \(1, 64, 64\)"),
    (((1, 64, 1, 32),) * 3, {}, r"q: head dim \(last axis\) must be one of \(64, 128\), got 32"),
    (((2, 64, 2, 64), (1, 64, 1, 64), (1, 64, 1, 64)), {}, r"k: expected \(B, Skv, Hkv, D\) = \(2, Skv, Hkv, 64\)"),
    (((1, 64, 3, 64), (1, 64, 2, 64), (1, 64, 2, 64)), {}, r"k: expected a head count Hkv dividing q's H = 3"),
    (((1, 64, 1, 64), (1, 64, 1, 64), (1, 32, 1, 64)), {}, r"v: expected the shape of k \(1, 64, 1, 64\)"),
    (((1, 64, 1, 64),) * 3, {"scale": -1.0}, r"scale: expected a positive finite Python number"),
    (((1, 64, 1, 64),) * 3, {"causal": 1}, r"causal: expected a bool, got 1"),
    (((1, 64, 1, 64),) * 3, {"arch": "sm_70"}, r"arch='sm_70' is not a variant of flash_attention"),
])
def test_bad_arguments_name_the_argument(args, kwargs, message) -> None:
    arrays = [jnp.zeros(s, jnp.bfloat16) for s in args]
    with pytest.raises(SpecError, match="flash_attention: .*" + message):
        flash_attention(*arrays, **kwargs)


def test_bad_dtypes() -> None:
    x = jnp.zeros((1, 64, 1, 64), jnp.float32)
    with pytest.raises(SpecError, match=r"flash_attention: q: expected dtype bfloat16 or float16, got float32"):
        flash_attention(x, x, x)
    y = x.astype(jnp.bfloat16)
    with pytest.raises(SpecError, match=r"flash_attention: k: expected the dtype of q \(bfloat16\), got float16"):
        flash_attention(y, y.astype(jnp.float16), y)

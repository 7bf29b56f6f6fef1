"""Grouped-query and multi-query ``flash_attention``: k and v with Hkv heads,
Hkv dividing q's H, query head h reading KV head h // (H // Hkv) as in
``jax.nn.dot_product_attention``. Every variant (sm_80 ``mma.sync``, sm_90a
TMA + ``wgmma``, the Ampere code for sm_100a) on the emulator against the
float64 reference and that function, at ratios 1, 2, 4 and H (Hkv = 1); the
backward kernels' dK, dV summed over each group; one launch under ``jit``
and ``vmap`` with K and V passed at their own head count (never repeated);
ptxas (0 spills); the sanitizer; the argument errors."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from attention_reference import reference

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.jax import kernels_in
from jaxptx.kernels import _attention_sm90
from jaxptx.kernels._attention_sm80 import LOG2E, attention_kernel, attention_sm80
from jaxptx.kernels.attention import flash_attention
from jaxptx.types import bf16, f16

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
TOL = {"bf16": 1.5e-2, "f16": 3e-3}      # o and P are rounded to 16 bits


def qkv(B: int, Sq: int, Skv: int, H: int, Hkv: int, D: int, dtype: str = "bf16", seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(NP[dtype])
                 for s in ((B, Sq, H, D), (B, Skv, Hkv, D), (B, Skv, Hkv, D)))


def _dpa(q, k, v, causal: bool, scale=None):
    """jax.nn.dot_product_attention in f32 (it takes GQA k, v natively)."""
    f32 = [jnp.asarray(x, jnp.float32) for x in (q, k, v)]
    return jax.nn.dot_product_attention(*f32, is_causal=causal, scale=scale)


def test_reference_groups_heads_as_dot_product_attention() -> None:
    """The float64 reference's head mapping is jax's (h // (H // Hkv), not h % Hkv)."""
    q, k, v = qkv(1, 20, 24, 4, 2, 64, seed=11)
    want, _ = reference(q, k, v, True, 0.125)
    np.testing.assert_allclose(np.asarray(_dpa(q, k, v, True, 0.125)), want, rtol=1e-4, atol=1e-5)


# (dtype, B, Sq, Skv, H, Hkv, D, causal): ratios 1, 2, 4 and Hkv = 1 (MQA),
# D 64 and 128, lengths off the 64-row tile, Sq < Skv and Sq > Skv, B > 1.
SM80_CASES = [
    ("bf16", 1, 80, 130, 4, 4, 64, True),
    ("bf16", 2, 70, 100, 4, 2, 64, False),
    ("f16", 1, 100, 70, 4, 1, 128, True),
    ("bf16", 1, 65, 130, 8, 2, 128, False),
    ("bf16", 1, 130, 80, 3, 1, 64, True),
]


@pytest.mark.parametrize("dtype,B,Sq,Skv,H,Hkv,D,causal", SM80_CASES)
def test_sm80_emulator_matches_float64(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    q, k, v = qkv(B, Sq, Skv, H, Hkv, D, dtype)
    o = np.full((B, Sq, H, D), np.nan, NP[dtype])
    lse = np.full((B, H, Sq), np.nan, np.float32)
    scale = 1 / np.sqrt(D)
    sim.launch(attention_kernel({"bf16": bf16, "f16": f16}[dtype], D), q, k, v, o, lse, scale * LOG2E,
               causal=causal)
    want_o, want_lse = reference(q, k, v, causal, scale)
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=0, atol=1e-4)


# (arch, dtype, Sq, Skv, H, Hkv, D, causal) through jit(flash_attention):
# the Hopper kernel at ratios 1, 2, 4 and MQA with D 64 and 128, causal and
# not, off its 128-row tile (Skv = 200: two key blocks through the ring),
# Sq < Skv and Sq > Skv; sm_100a at a ratio of 2.
JIT_CASES = [
    ("sm_90a", "bf16", 130, 200, 2, 2, 64, True),
    ("sm_90a", "bf16", 70, 200, 4, 2, 128, True),
    ("sm_90a", "f16", 130, 100, 4, 1, 64, False),
    ("sm_90a", "bf16", 60, 70, 8, 2, 64, False),
    ("sm_100a", "bf16", 80, 100, 4, 2, 64, True),
]


@pytest.mark.parametrize("arch,dtype,Sq,Skv,H,Hkv,D,causal", JIT_CASES)
def test_jit_matches_dot_product_attention(arch, dtype, Sq, Skv, H, Hkv, D, causal) -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(1, Sq, Skv, H, Hkv, D, dtype, seed=1))
    o = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch=arch))(q, k, v)
    assert o.shape == q.shape and o.dtype == q.dtype
    want, _ = reference(q, k, v, causal, 1 / np.sqrt(D))
    np.testing.assert_allclose(np.asarray(o, np.float64), want, rtol=2e-2, atol=TOL[dtype])
    np.testing.assert_allclose(np.asarray(o, np.float32), _dpa(q, k, v, causal), rtol=2e-2, atol=TOL[dtype])


def test_sm90_lse_is_per_query_head() -> None:
    q, k, v = (jnp.asarray(x) for x in qkv(2, 70, 130, 4, 2, 64, seed=2))
    o, lse = _attention_sm90.attention_sm90(q, k, v, causal=True, scale=0.1)
    want_o, want_lse = reference(q, k, v, True, 0.1)
    assert lse.shape == (2, 4, 70)
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=0, atol=1e-4)


def _leaf_eqns(jaxpr):
    """The equations of ``jaxpr`` and its nested jaxprs (jit, custom_vjp,
    custom_vmap bodies) that hold no jaxpr themselves."""
    for eqn in jaxpr.eqns:
        inner = [p for p in eqn.params.values() if hasattr(p, "eqns") or hasattr(p, "jaxpr")]
        if not inner:
            yield eqn
        for p in inner:
            yield from _leaf_eqns(p if hasattr(p, "eqns") else p.jaxpr)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_one_launch_reading_k_and_v_at_their_own_head_count(arch) -> None:
    """The jaxpr is the kernel alone, fed k and v of Hkv heads: no repeat,
    broadcast or gather ahead of it; the CUDA lowering is one custom call."""
    q, k, v = (jnp.asarray(x) for x in qkv(1, 80, 100, 4, 1, 64, seed=3))
    f = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True, arch=arch))
    (eqn,) = _leaf_eqns(jax.make_jaxpr(f)(q, k, v).jaxpr)
    assert eqn.primitive.name.startswith("flash_attention_fwd_bf16_"), eqn.primitive.name
    assert [tuple(x.aval.shape) for x in eqn.invars] == [(1, 80, 4, 64), (1, 100, 1, 64), (1, 100, 1, 64)]
    lowered = f.trace(q, k, v).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("jaxptx_launch") == 1
    (spec,) = kernels_in(lowered).values()
    want = {"sm_80": ((2, 4, 1), "mma.sync.aligned.m16n8k16"), "sm_90a": ((1, 4, 1), "wgmma.mma_async")}[arch]
    assert spec.grid == want[0] and want[1] in spec.ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_vmap_is_one_launch(arch) -> None:
    problems = [qkv(1, 70, 90, 4, 2, 64, seed=s) for s in (5, 6)]
    q, k, v = (jnp.stack([jnp.asarray(p[i]) for p in problems]) for i in range(3))   # (2, 1, S, H, D)
    f = jax.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True, arch=arch))
    jaxpr = str(jax.make_jaxpr(f)(q, k, v))
    assert len(re.findall(r"= flash_attention_fwd_\w+\[", jaxpr)) == 1, jaxpr
    assert "scan" not in jaxpr and "while" not in jaxpr
    o = jax.jit(f)(q, k, v)
    for i in range(2):
        want, _ = reference(q[i], k[i], v[i], True, 1 / 8)
        np.testing.assert_allclose(np.asarray(o[i], np.float64), want, rtol=2e-2, atol=1.5e-2)


def _loss(attn):
    def f(q, k, v):
        o = attn(q, k, v).astype(jnp.float32)
        return jnp.sum(jnp.sin(o) * jnp.arange(o.shape[-1], dtype=jnp.float32))
    return f


@pytest.mark.parametrize("Sq,Skv,H,Hkv,D,causal", [(40, 56, 4, 2, 64, True), (24, 20, 4, 1, 128, False)])
def test_grad_sums_dk_dv_over_the_group(Sq, Skv, H, Hkv, D, causal) -> None:
    """Against the grad of jax.nn.dot_product_attention, which takes GQA
    natively: dK and dV of a KV head are sums over its query heads."""
    q, k, v = (jnp.asarray(x) for x in qkv(1, Sq, Skv, H, Hkv, D, seed=4))
    ours = jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch="sm_80")),
                            argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(_loss(lambda q, k, v: _dpa(q, k, v, causal)), argnums=(0, 1, 2)))(q, k, v)
    for g, w, x in zip(ours, want, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
        scale = float(jnp.abs(w).max())
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w), atol=2e-2 * scale, rtol=3e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_ampere_code(arch, D, causal) -> None:
    for H, Hkv in ((32, 8), (16, 1)):
        r = attention_kernel(bf16, D, arch).resources(B=4, Sq=1000, Skv=777, H=H, Hkv=Hkv, causal=causal)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, r
        # recorded (as with Hkv = H): D=64 143 (sm_80), 148 (sm_100a); D=128 204-206
        assert r.registers <= (170 if D == 64 else 255), r


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_hopper(D, causal) -> None:
    r = _attention_sm90.attention_kernel("bf16").resources(B=2, S=200, T=300, H=8, Hkv=2, D=D, causal=causal)
    assert (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0), r
    assert r.registers <= 168, r


def test_sm80_sanitizer_clean() -> None:
    q, k, v = qkv(1, 70, 100, 4, 2, 64, seed=7)
    o, lse = np.zeros((1, 70, 4, 64), NP["bf16"]), np.zeros((1, 4, 70), np.float32)
    sim.launch(attention_kernel(bf16, 64), q, k, v, o, lse, 0.125 * LOG2E, causal=True, check=True)
    want, _ = reference(q, k, v, True, 0.125)
    np.testing.assert_allclose(np.asarray(o, np.float64), want, rtol=1.5e-2, atol=1.5e-2)


def test_sm100a_sanitizer_clean() -> None:
    q, k, v = qkv(1, 70, 70, 2, 1, 64, seed=8)
    o, lse = np.zeros((1, 70, 2, 64), NP["bf16"]), np.zeros((1, 2, 70), np.float32)
    sim.launch(attention_kernel(bf16, 64, "sm_100a"), q, k, v, o, lse, 0.125 * LOG2E, causal=False,
               check=True)
    want, _ = reference(q, k, v, False, 0.125)
    np.testing.assert_allclose(np.asarray(o, np.float64), want, rtol=1.5e-2, atol=1.5e-2)


def test_sm90_sanitizer_clean(monkeypatch) -> None:
    monkeypatch.setenv("JAXPTX_SIM_CHECK", "1")
    q, k, v = (jnp.asarray(x) for x in qkv(1, 70, 130, 4, 1, 64, seed=9))
    o, _ = _attention_sm90.attention_sm90(q, k, v, causal=True, scale=0.125)
    want, _ = reference(q, k, v, True, 0.125)
    np.testing.assert_allclose(np.asarray(o, np.float64), want, rtol=2e-2, atol=1.5e-2)


@pytest.mark.parametrize("shapes,message", [
    (((1, 64, 6, 64), (1, 64, 4, 64), (1, 64, 4, 64)),
     (r"flash_attention: k: expected a head count Hkv dividing q's H = 6 \(query head h reads KV head "
      r"h // \(H // Hkv\)\), got Hkv = 4 in \(1, 64, 4, 64\)")),
    (((1, 64, 2, 64), (1, 64, 4, 64), (1, 64, 4, 64)),
     r"flash_attention: k: expected a head count Hkv dividing q's H = 2 .*got Hkv = 4"),
    (((2, 64, 4, 64), (1, 64, 2, 64), (1, 64, 2, 64)),
     (r"flash_attention: k: expected \(B, Skv, Hkv, D\) = \(2, Skv, Hkv, 64\) to match q \(2, 64, 4, 64\), "
      r"got \(1, 64, 2, 64\)")),
    (((1, 64, 4, 64), (1, 64, 2, 128), (1, 64, 2, 128)),
     r"flash_attention: k: expected \(B, Skv, Hkv, D\) = \(1, Skv, Hkv, 64\)"),
    (((1, 64, 4, 64), (1, 64, 2, 64), (1, 64, 1, 64)),
     r"flash_attention: v: expected the shape of k \(1, 64, 2, 64\), got \(1, 64, 1, 64\)"),
    (((1, 64, 4, 64), (1, 64, 2, 64), (1, 32, 2, 64)),
     r"flash_attention: v: expected the shape of k \(1, 64, 2, 64\), got \(1, 32, 2, 64\)"),
])
def test_bad_head_counts_and_shapes_name_the_argument(shapes, message) -> None:
    arrays = [jnp.zeros(s, jnp.bfloat16) for s in shapes]
    with pytest.raises(SpecError, match=message):
        flash_attention(*arrays, arch="sm_80")


@pytest.mark.parametrize("call,message", [
    (lambda x, y: attention_sm80(x, y, y, causal=False, scale=0.1),
     r"attention_sm80: k: expected \(B, Skv, Hkv, D\) with Hkv dividing q's 3 heads, got \(1, 64, 2, 64\)"),
    (lambda x, y: _attention_sm90.attention_sm90(x, y, y, causal=False, scale=0.1),
     r"attention_sm90: expected q \(B, Sq, H, D\) and k, v \(B, Skv, Hkv, D\) with Hkv dividing H"),
])
def test_the_variants_refuse_a_head_count_not_dividing(call, message) -> None:
    x, y = jnp.zeros((1, 64, 3, 64), jnp.bfloat16), jnp.zeros((1, 64, 2, 64), jnp.bfloat16)
    with pytest.raises(SpecError, match=message):
        call(x, y)

"""The Blackwell flash-attention forward (``jaxptx.kernels._attention_sm100``):
the emulator against a float64 numpy reference at shapes off the tile,
ptxas for sm_100a (0 spills), the instructions it is built from, the
sanitizer, and the CUDA lowering's custom call."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_reference import large_qkv, reference

import jaxptx.sim
from jaxptx.jax import kernels_in
from jaxptx.kernels._attention_sm100 import BN, attention_kernel, attention_sm100
from jaxptx.kernels.attention import flash_attention


def _rand(shape, dtype=jnp.bfloat16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _qkv(B, S, T, H, D, dtype=jnp.bfloat16, seed=0, Hkv=None):
    Hkv = H if Hkv is None else Hkv
    return _rand((B, S, H, D), dtype, seed), _rand((B, T, Hkv, D), dtype, seed + 1), \
        _rand((B, T, Hkv, D), dtype, seed + 2)


def _check(q, k, v, causal, o, lse, scale=None):
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    want_o, want_lse = reference(q, k, v, causal, scale)
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == jnp.float32
    # o is rounded to bf16/f16 and P is rounded to 16 bits before P @ V.
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=0, atol=1e-4)


# (B, Sq, Skv, Hq, Hkv, D, causal, dtype): lengths off the 128-row blocks,
# several CTAs or heads per case; Skv = 300 runs three key blocks through the
# two-stage ring (a second lap), Sq > Skv and Sq < Skv for the causal alignment.
CASES = [
    (1, 130, 200, 2, 2, 64, False, jnp.bfloat16),
    (1, 200, 130, 2, 1, 64, True, jnp.bfloat16),      # Sq > Skv, grouped-query
    (1, 70, 300, 1, 1, 128, True, jnp.bfloat16),      # Sq < Skv, three key blocks
    (1, 100, 300, 2, 1, 128, False, jnp.float16),     # multi-query
]


@pytest.mark.parametrize("B,S,T,H,Hkv,D,causal,dtype", CASES)
def test_matches_float64_reference(B, S, T, H, Hkv, D, causal, dtype):
    q, k, v = _qkv(B, S, T, H, D, dtype, Hkv=Hkv)
    o, lse = jax.jit(lambda q, k, v: attention_sm100(q, k, v, causal=causal, scale=1 / np.sqrt(D)))(q, k, v)
    _check(q, k, v, causal, o, lse)


def test_clean_under_the_emulators_sanitizer():
    """No uninitialised register, shared or tensor-memory reads, no races."""
    q, k, v = _qkv(1, 70, 200, 1, 64, seed=9)
    with jaxptx.sim.checking():
        o, lse = jax.jit(lambda q, k, v: attention_sm100(q, k, v, causal=True, scale=0.09))(q, k, v)
    _check(q, k, v, True, o, lse, scale=0.09)


def test_causal_skips_key_blocks_after_the_last_query():
    """Keys from 128 on are NaN in K and V: a CTA that loaded their block
    would get NaN (0 * NaN) in O; with Sq = 100 no query reaches them."""
    S, T = 100, 2 * BN
    q, k, v = _qkv(1, S, T, 1, 64, seed=7)
    k = k.at[:, BN:].set(jnp.nan)
    v = v.at[:, BN:].set(jnp.nan)
    o, lse = attention_sm100(q, k, v, causal=True, scale=0.125)
    assert np.isfinite(np.asarray(o, np.float32)).all() and np.isfinite(np.asarray(lse)).all()
    _check(q, k[:, :BN], v[:, :BN], True, o, lse, scale=0.125)


def test_large_scores_give_no_nan_rows():
    """Scores ~1e10 with the top score tied across two key blocks: the max
    comes off before scaling and O's rescale in tensor memory keeps both."""
    q, k, v = (jnp.asarray(x) for x in large_qkv(1, 64, 2 * BN, 1, 64, 6e4, block=BN))
    o, lse = attention_sm100(q, k, v, causal=False, scale=0.125)
    want_o, want_lse = reference(q, k, v, False, 0.125)
    assert np.abs(want_lse).min() > 1e8
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    np.testing.assert_allclose(np.asarray(lse, np.float64), want_lse, rtol=1e-6)


DIMS = {"B": 2, "S": 200, "T": 300, "H": 2, "Hkv": 2}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills(dtype, D, causal):
    res = attention_kernel(dtype).resources(**DIMS, D=D, causal=causal)
    assert (res.spill_stores, res.spill_loads, res.stack_frame) == (0, 0, 0), res
    assert res.registers <= 255, res


@pytest.mark.parametrize("D", [64, 128])
def test_ptx_is_built_from_blackwell_instructions(D):
    text = attention_kernel("bf16").ptx(**DIMS, D=D, causal=True)
    for needle in ("tcgen05.mma.cta_group::1.kind::f16", "tcgen05.ld.sync.aligned.32x32b.x128.b32",
                   "tcgen05.st.sync.aligned.32x32b.x64.b32", "tcgen05.st.sync.aligned.32x32b.x32.b32",
                   "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64",
                   "tcgen05.alloc.cta_group::1", "tcgen05.relinquish_alloc_permit", "tcgen05.dealloc",
                   "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                   "mbarrier.try_wait.parity.shared.b64", "ex2.approx.ftz.f32", "vote.sync.any.pred"):
        assert needle in text, needle
    assert "wgmma" not in text and "mma.sync" not in text
    # O += P V reads A (P) from tensor memory: [d-tmem], [a-tmem], b-desc, idesc, enable-d.
    assert re.search(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[%r\d+\], \[%r\d+\], %rd\d+, %r\d+, %p\d+;",
                     text)
    alloc = re.search(r"tcgen05\.alloc\.cta_group::1\.sync\.aligned\.shared::cta\.b32 \[[^]]+\], (\d+);", text)
    assert alloc and int(alloc.group(1)) == (256 if D == 64 else 512)


def test_one_launch_and_the_cuda_custom_call():
    q, k, v = _qkv(1, 130, 130, 2, 128)

    def f(q, k, v):
        return attention_sm100(q, k, v, causal=True, scale=0.1)
    eqns = jax.make_jaxpr(f)(q, k, v).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == [attention_kernel("bf16").name]
    lowered = jax.jit(f).trace(q, k, v).lower(lowering_platforms=("cuda",))
    assert "jaxptx_launch" in lowered.as_text()
    assert "API_VERSION_TYPED_FFI" in lowered.as_text(dialect="hlo")


def _dispatches_to_tcgen05() -> bool:
    """Whether the PTX that ``flash_attention(arch="sm_100a")`` launches is
    built on ``tcgen05`` (this module's kernel) rather than the Ampere code."""
    q = jnp.zeros((1, 64, 1, 64), jnp.bfloat16)
    lowered = jax.jit(lambda q: flash_attention(q, q, q, arch="sm_100a")).trace(q).lower(
        lowering_platforms=("cuda",))
    return any("tcgen05.mma" in spec.ptx for spec in kernels_in(lowered).values())


@pytest.mark.skipif(not _dispatches_to_tcgen05(), reason="until the dispatch diff lands: "
                    "flash_attention(arch='sm_100a') still runs the Ampere kernel")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_dispatches_here(causal):
    q, k, v = _qkv(1, 70, 130, 2, 64, seed=4, Hkv=1)
    o = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch="sm_100a"))(q, k, v)
    want_o, _ = reference(q, k, v, causal, 1 / 8)
    np.testing.assert_allclose(np.asarray(o, np.float64), want_o, rtol=2e-2, atol=1.5e-2)
    # The gradient goes through the backward the other arches use.
    g = jax.grad(lambda q: flash_attention(q, k, v, causal=causal, arch="sm_100a").astype(jnp.float32).sum())(q)
    assert g.shape == q.shape and np.isfinite(np.asarray(g, np.float32)).all()


@pytest.mark.skipif(not _dispatches_to_tcgen05(), reason="until the dispatch diff lands: "
                    "flash_attention(arch='sm_100a') still runs the Ampere kernel")
def test_vmap_through_flash_attention_is_one_launch():
    """The mapped axis folds into B (as for the Hopper kernel): one launch."""
    q, k, v = (jnp.stack([x, 2 * x]) for x in _qkv(1, 40, 70, 1, 64, seed=6))

    def f(q, k, v):
        return flash_attention(q, k, v, causal=True, arch="sm_100a")
    jaxpr = str(jax.make_jaxpr(jax.vmap(f))(q, k, v))
    assert jaxpr.count(attention_kernel("bf16").name) == 1 and "while" not in jaxpr
    o = jax.jit(jax.vmap(f))(q, k, v)
    for i in range(2):
        want_o, _ = reference(q[i], k[i], v[i], True, 1 / 8)
        np.testing.assert_allclose(np.asarray(o[i], np.float64), want_o, rtol=2e-2, atol=1.5e-2)


@pytest.mark.parametrize("B,S,T,H,D,causal", [(1, 300, 400, 2, 128, True), (2, 260, 520, 1, 64, False)])
def test_longer_sequences(B, S, T, H, D, causal):
    """Several laps of the two-stage ring, several CTAs per head (~8 s each)."""
    q, k, v = _qkv(B, S, T, H, D, seed=11)
    o, lse = attention_sm100(q, k, v, causal=causal, scale=1 / np.sqrt(D))
    _check(q, k, v, causal, o, lse)


@pytest.mark.parametrize("shapes,dtypes,match", [
    (((1, 64, 1, 32),) * 3, (jnp.bfloat16,) * 3, "head dim"),
    (((1, 64, 1, 64),) * 3, (jnp.float32,) * 3, "bf16"),
    (((1, 64, 1, 64),) * 3, (jnp.bfloat16, jnp.float16, jnp.bfloat16), "bf16"),
    (((1, 64, 3, 64), (1, 64, 2, 64), (1, 64, 2, 64)), (jnp.bfloat16,) * 3, "Hkv dividing H"),
])
def test_refuses_what_it_does_not_run(shapes, dtypes, match):
    args = [jnp.zeros(s, d) for s, d in zip(shapes, dtypes)]
    with pytest.raises(ValueError, match=match):
        attention_sm100(*args, causal=False, scale=0.125)
    with pytest.raises(ValueError, match="scale must be a positive"):
        attention_sm100(*[jnp.zeros((1, 64, 1, 64), jnp.bfloat16)] * 3, causal=False, scale=-1.0)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_schedules_give_the_same_result(seed, monkeypatch):
    """Under a random schedule the MMA warp's issuing lane can still be
    parked in its loop when the warp's other lanes reach the ``bar.sync``
    after the role branch; they wait for it there (the warp reconverges),
    and the result is the default schedule's, bit for bit."""
    q, k, v = _qkv(1, 70, 200, 1, 64, seed=3)
    run = lambda q, k, v: attention_sm100(q, k, v, causal=True, scale=0.09)  # noqa: E731
    o0, lse0 = jax.jit(run)(q, k, v)
    monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", f"random:{seed}")
    o, lse = jax.jit(run)(q, k, v)
    np.testing.assert_array_equal(np.asarray(o), np.asarray(o0))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(lse0))

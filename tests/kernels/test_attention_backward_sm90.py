"""The Hopper flash-attention backward (``_attention_bwd_sm90``: dK/dV over
key blocks, dQ over query blocks, TMA + mbarrier ring + ``wgmma``):
``jax.grad`` of ``flash_attention(arch="sm_90a")`` on the emulator against
``jax.grad`` of ``jax.nn.dot_product_attention`` and against the jnp VJP at
shapes off the tiles (causal and not, D 64 and 128, bf16 and f16, grouped
and multi-query k/v); ptxas for sm_90a with no spills and setmaxnreg
honoured; the instructions in the PTX; the CUDA lowering of ``jax.grad``
naming the Hopper kernels; one launch of each under ``vmap``; the
sanitizer; and a ``gpu`` check on a real GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_attention_backward import PTX_T, _close, _dpa_grads, _loss, qkv

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.jax import kernels_in
from jaxptx.kernels._attention_bwd import attention_backward_sm90
from jaxptx.kernels._attention_bwd_sm90 import dkdv_kernel, dq_kernel
from jaxptx.kernels._attention_sm90 import attention_sm90
from jaxptx.kernels.attention import attention_backward, flash_attention
from jaxptx.runtime import ptxas


def _grad_fn(causal: bool, arch: str = "sm_90a"):
    return jax.jit(jax.grad(_loss(lambda q, k, v: flash_attention(q, k, v, causal=causal, arch=arch)),
                            argnums=(0, 1, 2)))


def _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    q, k, v = qkv(B, Sq, Skv, H, Hkv, D, dtype, seed=Sq + Skv)
    ours = _grad_fn(causal)(q, k, v)
    for g, w, x in zip(ours, _dpa_grads(q, k, v, causal), (q, k, v)):
        _close(g, w, x)


# (dtype, B, Sq, Skv, H, Hkv, D, causal): lengths off the 64/128-row tiles;
# Skv = 130 has two key blocks in the dK/dV kernel and three in the dQ ring;
# Sq < Skv causal leaves a key block no query sees (no steps, zero dK/dV);
# grouped (ratio 2) and multi-query k/v; D 64 and 128.
CASES = [
    ("bf16", 1, 70, 130, 2, 2, 64, False),
    ("bf16", 1, 130, 70, 4, 2, 64, True),
    ("f16", 1, 80, 300, 2, 1, 128, True),
    ("bf16", 1, 1, 1, 1, 1, 64, True),
]
SLOW_CASES = [
    ("f16", 2, 150, 90, 4, 4, 128, False),
    ("bf16", 1, 200, 200, 4, 1, 64, True),
    ("bf16", 1, 100, 256, 8, 2, 128, True),
    ("f16", 1, 300, 140, 2, 2, 64, False),
]


@pytest.mark.parametrize("dtype,B,Sq,Skv,H,Hkv,D,causal", CASES)
def test_grad_matches_dot_product_attention(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,B,Sq,Skv,H,Hkv,D,causal", SLOW_CASES)
def test_grad_matches_dot_product_attention_larger(dtype, B, Sq, Skv, H, Hkv, D, causal) -> None:
    _check_grads(dtype, B, Sq, Skv, H, Hkv, D, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_kernels_match_the_jnp_vjp_with_an_lse_cotangent(causal) -> None:
    """Against ``attention_backward`` from the same o, with nonzero do and
    dlse: far tighter than against jax's f32 attention."""
    q, k, v = qkv(1, 90, 150, 4, 2, 128, seed=5)
    rng = np.random.default_rng(6)
    o, lse = attention_sm90(q, k, v, causal=causal, scale=0.2)
    do = jnp.asarray(rng.standard_normal(o.shape), jnp.bfloat16)
    dlse = jnp.asarray(rng.standard_normal(lse.shape), jnp.float32)
    got = attention_backward_sm90(q, k, v, o, lse, do, dlse, causal=causal, scale=0.2)
    want = attention_backward(q, k, v, o, lse, do, dlse, causal=causal, scale=0.2)
    no_dlse = attention_backward(q, k, v, o, lse, do, jnp.zeros_like(lse), causal=causal, scale=0.2)
    for g, w in zip(got, want):
        assert g.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                                   atol=1e-2 * float(jnp.abs(w).max()), rtol=1e-2)
    for g, n in zip(got[:2], no_dlse[:2]):      # dlse reaches dq and dk
        assert float(jnp.abs(g.astype(jnp.float32) - n.astype(jnp.float32)).max()) > 0.1


def test_sanitizer_finds_no_race_or_uninitialised_read() -> None:
    q, k, v = qkv(1, 70, 80, 2, 1, 64, seed=8)
    with sim.checking("all"):
        ours = jax.block_until_ready(_grad_fn(True)(q, k, v))
    for g, w, x in zip(ours, _dpa_grads(q, k, v, True), (q, k, v)):
        _close(g, w, x)


def _ptxas_clean(dtype: str, D: int, causal: bool, shapes) -> None:
    """No spills, no stack, and ptxas honours setmaxnreg (it ignores it, with
    a C7508 note, unless the entry's register count is pinned)."""
    for make in (dkdv_kernel, dq_kernel):
        for Sq, Skv, H, Hkv in shapes:
            text = make(PTX_T[dtype], D).ptx(B=2, Sq=Sq, Skv=Skv, H=H, Hkv=Hkv, Sp=-(-Sq // 64) * 64,
                                             causal=causal)
            log = ptxas(text, "sm_90a", verbose=True).log
            assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log, (make, log)
            assert "setmaxnreg" not in log, (make, log)


# (Sq, Skv, H, Hkv): off-tile GQA and a small problem.
SHAPES = ((1000, 777, 16, 4), (200, 130, 4, 2))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills(D, causal) -> None:
    _ptxas_clean("bf16", D, causal, SHAPES[:1])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_every_variant(dtype, D, causal) -> None:
    _ptxas_clean(dtype, D, causal, SHAPES + ((4096, 4096, 16, 16),))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ptx_uses_the_hopper_instructions(dtype) -> None:
    for make, rs in ((dkdv_kernel, "m64n128k16"), (dq_kernel, "m64n128k16")):
        text = make(PTX_T[dtype], 128).ptx(B=1, Sq=200, Skv=200, H=4, Hkv=2, Sp=256, causal=True)
        for needle in (".target sm_90a", ".maxnreg 168", "setmaxnreg.dec.sync.aligned.u32 24",
                       "setmaxnreg.inc.sync.aligned.u32 240",
                       "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                       "mbarrier.try_wait.parity.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
                       f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{dtype}.{dtype}",
                       f"wgmma.mma_async.sync.aligned.{rs}.f32.{dtype}.{dtype}",
                       "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                       "wgmma.wait_group.sync.aligned 0", "ex2.approx.ftz.f32", f"cvt.rn.{dtype}x2.f32"):
            assert needle in text, (make, needle)
        # S, dP from two descriptors (transpose bits 0, 0); the register-A
        # products read their B MN-major (transpose bit 1).
        assert re.search(r"wgmma\.mma_async[^;]*m64n64k16[^;]*\{[^}]*\}, %rd\d+, %rd\d+, [^;]*, 0, 0;", text)
        assert re.search(r"wgmma\.mma_async[^;]*m64n128k16[^;]*\{[^}]*\}, \{[^}]*\}, %rd\d+, [^;]*, 1;", text)
        assert "mma.sync" not in text and "ldmatrix" not in text
        assert not re.search(r"^\s*(@%\w+\s+)?(atom|red)\.", text, re.MULTILINE)   # deterministic
    # The dK/dV kernel's row terms come with the tiles, by bulk copy.
    text = dkdv_kernel(PTX_T[dtype], 64).ptx(B=1, Sq=64, Skv=64, H=1, Hkv=1, Sp=64, causal=False)
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in text


def test_cuda_lowering_of_grad_has_the_hopper_kernels() -> None:
    q, k, v = qkv(2, 80, 144, 4, 2, 128)
    lowered = _grad_fn(True).trace(q, k, v).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("jaxptx_launch") == 3, text.count("jaxptx_launch")    # forward, dQ, dK/dV
    specs = {re.search(r"\.entry (\w+)", spec.ptx).group(1): spec for spec in kernels_in(lowered).values()}
    dq = specs["flash_attention_bwd_dq_bf16_d128_sm_90a"]
    dkdv = specs["flash_attention_bwd_dkdv_bf16_d128_sm_90a"]
    assert "flash_attention_fwd_bf16_sm_90a" in specs
    assert dq.grid == (1, 8, 1) and dkdv.grid == (2, 4, 1)      # (128 queries / keys, B × heads)
    for spec in (dq, dkdv):
        assert ".target sm_90a" in spec.ptx and "wgmma.mma_async" in spec.ptx
        assert "cp.async.bulk.tensor" in spec.ptx
    assert "dense<[384, 1, 1]>" in text
    assert not re.search(r"tensor<[^>]*\b80x144\b", text) and not re.search(r"tensor<[^>]*\b144x80\b", text)


def test_sm90a_dispatch_and_the_other_targets_keep_the_ampere_backward() -> None:
    q, k, v = qkv(1, 64, 64, 1, 1, 64)
    hopper = str(jax.make_jaxpr(_grad_fn(False, "sm_90a"))(q, k, v))
    for name in ("flash_attention_bwd_dq_bf16_d64_sm_90a", "flash_attention_bwd_dkdv_bf16_d64_sm_90a"):
        assert name in hopper
    for arch in ("sm_80", "sm_100a"):
        jaxpr = str(jax.make_jaxpr(_grad_fn(False, arch))(q, k, v))
        assert "bwd_dq_bf16_d64_sm_90a" not in jaxpr
        assert f"flash_attention_bwd_dkdv_bf16_d64_{arch}" in jaxpr


def test_vmap_of_grad_is_one_launch_of_each_kernel() -> None:
    q, k, v = (jnp.stack([x, 2 * x]) for x in qkv(1, 70, 70, 2, 1, 64))
    f = _grad_fn(False)
    jaxpr = str(jax.make_jaxpr(jax.vmap(f))(q, k, v))
    for name in ("flash_attention_fwd_", "flash_attention_bwd_dq_", "flash_attention_bwd_dkdv_"):
        assert len(re.findall(rf"= {name}\w+\[", jaxpr)) == 1, name
    assert "while" not in jaxpr and "scan" not in jaxpr
    mapped = jax.vmap(f)(q, k, v)
    for i in range(2):
        for g, w in zip(mapped, f(q[i], k[i], v[i])):
            np.testing.assert_array_equal(np.asarray(g[i]), np.asarray(w))


@pytest.mark.parametrize("args,message", [
    (((1, 64, 2, 32), (1, 64, 2, 32)), (r"attention_backward_sm90: q: expected bfloat16 or float16 "
                                         r"with head dim 64 or 128, got bfloat16 \(1, 64, 2, 32\)")),
    (((1, 64, 3, 64), (1, 64, 2, 64)), (r"attention_backward_sm90: k: expected \(B, Skv, Hkv, D\) "
                                         r"with Hkv dividing q's 3 heads, got \(1, 64, 2, 64\)")),
])
def test_bad_arguments_name_the_argument(args, message) -> None:
    q, k = (jnp.zeros(s, jnp.bfloat16) for s in args)
    lse = jnp.zeros((1, q.shape[2], 64), jnp.float32)
    with pytest.raises(SpecError, match=message):
        attention_backward_sm90(q, k, k, q, lse, q, lse, causal=False, scale=0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)])
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_sm90a_grad_matches_dot_product_attention(D, heads, causal) -> None:
    """On a Hopper GPU: the wgmma kernels' gradients against jax.grad of
    jax.nn.dot_product_attention in f32, and bitwise repeatable."""
    gpu = jax.devices("gpu")[0]
    if not str(getattr(gpu, "compute_capability", "9.0")).startswith("9"):
        pytest.skip(f"needs an sm_90 GPU, got compute capability {gpu.compute_capability}")
    H, Hkv = heads
    q, k, v = (jax.device_put(x, gpu) for x in qkv(2, 1000, 1000, H, Hkv, D, seed=11))
    f = _grad_fn(causal)
    ours = f(q, k, v)
    for g, w, x in zip(ours, _dpa_grads(q, k, v, causal), (q, k, v)):
        _close(g, w, x)
    again = f(q, k, v)                                    # no atomics: bitwise repeatable
    for g, h in zip(ours, again):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(h))

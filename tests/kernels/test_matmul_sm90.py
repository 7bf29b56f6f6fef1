"""The Hopper GEMM (jaxptx/kernels/_matmul_sm90.py): the emulator against
numpy float64, ptxas for sm_90a, the CUDA lowering, the PTX it is made of."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.kernels._matmul_sm90 import BK, STAGES, gemm_kernel, matmul_sm90

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _operands(g: int, m: int, n: int, k: int, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((g, m, k)).astype(DTYPES[dtype])
    b = rng.standard_normal((g, k, n)).astype(DTYPES[dtype])
    return a, b


def _check(c, a, b) -> None:
    ref = np.einsum("gmk,gkn->gmn", a.astype(np.float64), b.astype(np.float64))
    assert c.shape == ref.shape and c.dtype == np.float32
    # f32 accumulation of exact bf16/f16 products: error ~ sqrt(K) * 2^-24 * |terms|
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.sqrt(a.shape[2]) * 4)


@pytest.mark.parametrize("g, m, n, k, dtype, sms", [
    (1, 128, 128, 4 * STAGES * BK, "bf16", 132),     # a K loop 4x the ring's depth
    (2, 200, 136, 520, "f16", 4),                    # ragged M, N, K; 2 clusters, 2 tiles each
    (2, 72, 264, 192, "bf16", 2),                    # one persistent cluster walks 6 tiles
    (1, 256, 128, 4 * STAGES * BK, "f16", 132),
    (3, 1, 16, 24, "bf16", 132),                     # boxes larger than the whole tensor
])
def test_matches_numpy_float64(g, m, n, k, dtype, sms) -> None:
    a, b = _operands(g, m, n, k, dtype)
    _check(np.asarray(matmul_sm90(a, b, sms=sms)), a, b)


def test_under_jit_one_launch() -> None:
    a, b = _operands(2, 64, 72, 64, "bf16", seed=1)
    f = jax.jit(lambda a, b: matmul_sm90(a, b, sms=2))
    _check(np.asarray(f(jnp.asarray(a), jnp.asarray(b))), a, b)
    jaxpr = jax.make_jaxpr(lambda a, b: matmul_sm90(a, b, sms=2))(a, b)
    assert [str(e.primitive) for e in jaxpr.jaxpr.eqns] == ["matmul_sm90_bf16"]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ptx_names_its_design_and_ptxas_spills_nothing(dtype) -> None:
    k = gemm_kernel(dtype)
    dims = dict(G=2, M=1000, N=520, K=4096, sms=132)
    text = k.ptx(**dims)
    for needle in ("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                   ".multicast::cluster", "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group",
                   "mbarrier.try_wait.parity", f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{dtype}.{dtype}",
                   "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                   "mapa.shared::cluster.u32", ".reqnctapercluster 2, 1, 1"):
        assert needle in text, needle
    res = k.resources(**dims)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    assert res.registers * 384 <= 65536


def test_cuda_lowering_is_the_custom_call() -> None:
    a = jnp.zeros((2, 300, 256), jnp.bfloat16)
    b = jnp.zeros((2, 256, 200), jnp.bfloat16)
    text = jax.jit(matmul_sm90).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text
    assert re.search(r"tensor<2x300x200xf32>", text)


@pytest.mark.parametrize("shapes, dtypes, message", [
    (((64, 64), (64, 64)), ("bf16", "bf16"), r"expected \(G, M, K\) and \(G, K, N\)"),
    (((1, 64, 64), (2, 64, 64)), ("bf16", "bf16"), "do not match"),
    (((1, 64, 64), (1, 64, 64)), ("bf16", "f16"), "both bf16 or both f16"),
    (((1, 64, 60), (1, 60, 64)), ("f16", "f16"), r"K \(60\) and N \(64\) must be multiples of 8"),
])
def test_bad_operands(shapes, dtypes, message) -> None:
    a = np.zeros(shapes[0], DTYPES[dtypes[0]])
    b = np.zeros(shapes[1], DTYPES[dtypes[1]])
    with pytest.raises(SpecError, match=message):
        matmul_sm90(a, b)

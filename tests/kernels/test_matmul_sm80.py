"""The Ampere GEMM (``jaxptx.kernels._matmul_sm80``): emulator vs numpy
float64, ptxas, the PTX's instructions and the CUDA lowering."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.kernels._matmul_sm80 import BK, STAGES, gemm_kernel, matmul_sm80

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def operands(dtype: str, g: int, m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((g, m, k)).astype(NP[dtype])
    b = rng.standard_normal((g, k, n)).astype(NP[dtype])
    return a, b


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("gmk,gkn->gmn", a.astype(np.float64), b.astype(np.float64))


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    # Products of bf16/f16 values are exact in f32; the error is f32 accumulation.
    k = a.shape[-1]
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-6 * k)


# (dtype, G, M, N, K): edges in every dim; K = 4 * STAGES * BK (a runtime K
# loop) and past it; a K below one tile.
SHAPES = [
    ("bf16", 1, 200, 136, 264),
    ("f16", 3, 200, 136, 264),
    ("bf16", 3, 128, 128, 4 * STAGES * BK),
    ("f16", 1, 130, 72, 4 * STAGES * BK + 8),
    ("bf16", 2, 40, 24, 8),
]


@pytest.mark.parametrize("dtype,g,m,n,k", SHAPES)
def test_emulator_matches_numpy(dtype: str, g: int, m: int, n: int, k: int) -> None:
    a, b = operands(dtype, g, m, n, k)
    c = np.full((g, m, n), np.nan, np.float32)
    sim.launch(gemm_kernel(dtype), a, b, c)
    check(c, a, b)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_jit_call_is_one_primitive_and_matches(dtype: str) -> None:
    a, b = operands(dtype, 3, 200, 136, 264, seed=1)
    out = jax.jit(matmul_sm80)(jnp.asarray(a), jnp.asarray(b))
    assert out.dtype == jnp.float32 and out.shape == (3, 200, 136)
    check(np.asarray(out), a, b)
    eqns = jax.make_jaxpr(matmul_sm80)(a, b).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == [f"matmul_sm80_{dtype}"]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("dims", [dict(G=1, M=200, N=136, K=264), dict(G=3, M=1024, N=1024, K=4096)])
def test_ptxas_no_spills(dtype: str, dims: dict) -> None:
    r = gemm_kernel(dtype).resources(**dims)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0
    assert r.registers <= 255


def test_ptx_uses_the_ampere_instructions() -> None:
    text = gemm_kernel("bf16").ptx(G=1, M=200, N=136, K=1024)
    for needle in ("cp.async.cg.shared.global", "cp.async.commit_group", f"cp.async.wait_group {STAGES - 2}",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "st.global.v2.f32"):
        assert needle in text, needle
    assert ".target sm_80" in text
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in gemm_kernel("f16").ptx(G=1, M=64, N=64, K=64)


def test_cuda_lowering_is_the_custom_call() -> None:
    a = jax.ShapeDtypeStruct((3, 200, 264), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((3, 264, 136), jnp.bfloat16)
    text = jax.jit(matmul_sm80).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text


def test_bad_operands_are_refused() -> None:
    a, b = operands("bf16", 1, 16, 16, 16)
    with pytest.raises(SpecError, match="operands bfloat16 or both float16"):
        matmul_sm80(a, b.astype(np.float16))
    with pytest.raises(SpecError, match="multiples of 8"):
        matmul_sm80(a[:, :, :12], b[:, :12, :])
    with pytest.raises(SpecError, match=r"expected a \(G, M, K\)"):
        matmul_sm80(a[0], b[0])


def test_sanitizer_finds_no_race_in_the_pipeline() -> None:
    """check=True tracks each cp.async until a wait_group completes it and
    orders shared accesses by barriers: a missing bar.sync or a wait_group
    one too lax in the ring is reported (tried by hand), so a clean run
    says the ring's synchronisation holds."""
    a, b = operands("bf16", 1, 130, 136, 4 * STAGES * BK + 8)
    c = np.zeros((1, 130, 136), np.float32)
    sim.launch(gemm_kernel("bf16"), a, b, c, check=True)
    check(c, a, b)

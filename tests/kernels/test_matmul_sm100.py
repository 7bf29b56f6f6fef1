"""The Blackwell GEMM (``jaxptx.kernels._matmul_sm100``), verified three
ways: the emulator against numpy in float64 (shapes off the tile, a K loop
more than four times the ring, groups, both dtypes, one CTA and CTA pairs),
ptxas for sm_100a with no spills, and the CUDA lowering's custom call."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx.kernels._matmul_sm100 import BK, STAGES, build, matmul_sm100

RNG = np.random.default_rng(100)
DTYPES = {"bfloat16": jnp.bfloat16, "float16": jnp.float16}
LONG_K = 4 * STAGES * BK + 8          # 17 K blocks (the last one 8 deep): > 4 laps of the ring


def _inputs(g: int, m: int, k: int, n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    t = DTYPES[dtype]
    return (RNG.standard_normal((g, m, k)).astype(t), RNG.standard_normal((g, k, n)).astype(t))


def _check(a: np.ndarray, b: np.ndarray, c) -> None:
    """``c`` against the float64 product, to f32 accumulation's error
    (relative to the sum of |products|, per element)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.einsum("gmk,gkn->gmn", a64, b64)
    scale = np.einsum("gmk,gkn->gmn", np.abs(a64), np.abs(b64))
    c = np.asarray(c)
    assert c.dtype == np.float32 and c.shape == want.shape
    err = np.abs(c - want)
    bad = err > 1e-5 * scale + 1e-6
    assert not bad.any(), f"{bad.sum()} wrong of {bad.size}; first at {np.argwhere(bad)[0]}"


# Grids are kept away from exactly 16 CTAs of 128 threads: the emulator's
# shared-memory window takes a 2048-element operand read by one CTA for a
# read by all 2048 threads there (reported; not this kernel's bug).
@pytest.mark.parametrize("cta_group", [1, 2])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("g", [1, 2])
def test_emulator_matches_numpy_off_the_tile(g: int, dtype: str, cta_group: int) -> None:
    a, b = _inputs(g, 200, 136, 136, dtype)          # M, N and K all off the tile
    _check(a, b, jax.jit(matmul_sm100, static_argnames="cta_group")(a, b, cta_group=cta_group))


def test_a_grid_of_sixteen_ctas() -> None:
    """16 CTAs of 128 threads: an operand read of 2048 bytes on behalf of one
    thread is not a read by every thread of the grid (an emulator fast path
    once mistook it for one)."""
    a, b = _inputs(1, 512, 64, 512, "bfloat16")
    _check(a, b, matmul_sm100(a, b))


@pytest.mark.parametrize("g, dtype, cta_group", [(2, "bfloat16", 1), (1, "float16", 2)])
def test_emulator_matches_numpy_with_a_long_k_loop(g: int, dtype: str, cta_group: int) -> None:
    a, b = _inputs(g, 136, LONG_K, 72, dtype)
    _check(a, b, matmul_sm100(a, b, cta_group=cta_group))


@pytest.mark.slow
@pytest.mark.parametrize("g, dtype, cta_group", [(1, "bfloat16", 2), (2, "float16", 1)])
def test_emulator_matches_numpy_several_pairs_and_a_long_k(g: int, dtype: str, cta_group: int) -> None:
    a, b = _inputs(g, 300, LONG_K, 264, dtype)
    _check(a, b, matmul_sm100(a, b, cta_group=cta_group))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cta_group", [1, 2])
def test_ptxas_accepts_it_with_no_spills(dtype: str, cta_group: int) -> None:
    k = build(dtype, cta_group)
    res = k.resources(G=2, M=4096, K=4096, N=4096)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    assert res.registers <= 64, res


@pytest.mark.parametrize("cta_group", [1, 2])
def test_the_ptx_uses_the_design_s_instructions(cta_group: int) -> None:
    text = build("bfloat16", cta_group).ptx(G=1, M=512, K=512, N=512)
    for needle in (f"tcgen05.mma.cta_group::{cta_group}.kind::f16", "tcgen05.ld.sync.aligned.32x32b.x32.b32",
                   f"tcgen05.commit.cta_group::{cta_group}", f"tcgen05.alloc.cta_group::{cta_group}",
                   "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                   "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group",
                   "mbarrier.try_wait.parity", "tcgen05.dealloc"):
        assert needle in text, needle
    if cta_group == 2:
        assert ".reqnctapercluster 2, 1, 1" in text and "multicast::cluster" in text
        assert "mapa.shared::cluster.u32" in text and "barrier.cluster.arrive" in text


@pytest.mark.parametrize("cta_group", [1, 2])
def test_one_primitive_and_the_cuda_lowering_shows_the_custom_call(cta_group: int) -> None:
    a, b = _inputs(2, 256, 128, 256, "bfloat16")
    f = lambda a, b: matmul_sm100(a, b, cta_group=cta_group)  # noqa: E731
    jaxpr = jax.make_jaxpr(f)(a, b)
    assert len(jaxpr.eqns) == 1, jaxpr
    text = jax.jit(f).trace(a, b).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text
    assert re.search(rf"cluster = dense<\[{cta_group}, 1, 1\]>|cluster = dense<1>", text)
    assert len(re.findall(r"stablehlo\.custom_call", text)) == 1


def test_bad_arguments_are_refused() -> None:
    a, b = _inputs(1, 64, 64, 64, "bfloat16")
    with pytest.raises(ValueError, match="cta_group"):
        matmul_sm100(a, b, cta_group=4)
    with pytest.raises(ValueError, match="must both be bfloat16"):
        matmul_sm100(a, b.astype(jnp.float16))
    with pytest.raises(ValueError, match="multiples of 8"):
        matmul_sm100(a[:, :, :60], b[:, :60])
    with pytest.raises(ValueError, match=r"\(G, M, K\)"):
        matmul_sm100(a[0], b[0])

"""grouped_matmul against jax.lax.ragged_dot: forward under jit, grad, every
arch variant (ptxas, emulator, CUDA lowering)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.kernels.grouped import grouped_kernel, grouped_matmul


def operands(m: int, k: int, n: int, g: int, dtype=jnp.bfloat16, seed: int = 0):
    rng = np.random.default_rng(seed)
    lhs = jnp.asarray(rng.standard_normal((m, k)), dtype)
    rhs = jnp.asarray(rng.standard_normal((g, k, n)), dtype)
    return lhs, rhs


def ragged(lhs, rhs, sizes):
    return jax.lax.ragged_dot(lhs, rhs, sizes, preferred_element_type=jnp.float32,
                              precision=jax.lax.Precision.HIGHEST)


def close(got, want, k: int) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-5, atol=1e-6 * k)


# M = 300 spans three 128-row tiles; boundaries at rows 100, 160, 250, 270
# fall inside tiles; group 1 and the last are empty; rows 270.. belong to no group.
SIZES = [100, 0, 60, 90, 20, 0]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_forward_under_jit_matches_ragged_dot(dtype) -> None:
    lhs, rhs = operands(300, 72, 136, len(SIZES), dtype)
    sizes = jnp.asarray(SIZES, jnp.int32)
    out = jax.jit(grouped_matmul)(lhs, rhs, sizes)
    assert out.dtype == jnp.float32 and out.shape == (300, 136)
    close(out, ragged(lhs, rhs, sizes), 72)
    assert not np.asarray(out[270:]).any()


def test_long_k_and_groups_filling_m() -> None:
    lhs, rhs = operands(136, 520, 64, 3, seed=2)
    sizes = jnp.asarray([7, 121, 8], jnp.int32)            # sums to M; a 7-row group
    close(jax.jit(grouped_matmul)(lhs, rhs, sizes), ragged(lhs, rhs, sizes), 520)


def test_all_groups_empty_gives_zeros() -> None:
    lhs, rhs = operands(64, 16, 8, 2)
    out = grouped_matmul(lhs, rhs, jnp.zeros(2, jnp.int32))
    assert not np.asarray(out).any()


def test_grad_matches_ragged_dot() -> None:
    lhs, rhs = operands(300, 72, 136, len(SIZES), seed=3)
    sizes = jnp.asarray(SIZES, jnp.int32)
    w = jnp.asarray(np.random.default_rng(4).standard_normal((300, 136)), jnp.float32)

    def loss(f):
        return lambda l, r: jnp.sum(f(l, r, sizes) * w)

    got = jax.jit(jax.grad(loss(grouped_matmul), argnums=(0, 1)))(lhs, rhs)
    want = jax.grad(loss(ragged), argnums=(0, 1))(lhs, rhs)
    for g, h in zip(got, want):
        assert g.dtype == h.dtype == jnp.bfloat16 and g.shape == h.shape
        # both round an f32 gradient to bf16: within one bf16 ulp
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(h, np.float32), rtol=2 ** -7, atol=1e-2)
    assert not np.asarray(got[1][1]).any() and not np.asarray(got[1][5]).any()   # empty groups


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_each_arch_variant(arch: str) -> None:
    kern = grouped_kernel("bf16", arch)
    r = kern.resources(M=300, K=72, N=136, G=len(SIZES))
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.registers <= 255
    text = kern.ptx(M=300, K=72, N=136, G=len(SIZES))
    assert f".target {arch}" in text
    for needle in ("cp.async.cg.shared.global", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"):
        assert needle in text
    lhs, rhs = operands(300, 72, 136, len(SIZES), seed=5)
    sizes = jnp.asarray(SIZES, jnp.int32)
    f = jax.jit(lambda l, r, s: grouped_matmul(l, r, s, arch=arch))
    close(f(lhs, rhs, sizes), ragged(lhs, rhs, sizes), 72)
    eqns = jax.make_jaxpr(f)(lhs, rhs, sizes).jaxpr.eqns
    assert len(eqns) == 1    # the custom_vjp wrapper around one kernel primitive
    lowered = f.trace(lhs, rhs, sizes).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in lowered


def test_bad_arguments() -> None:
    lhs, rhs = operands(32, 16, 8, 2)
    with pytest.raises(SpecError, match="group_sizes must be"):
        grouped_matmul(lhs, rhs, jnp.zeros(3, jnp.int32))
    with pytest.raises(SpecError, match="expected lhs"):
        grouped_matmul(lhs[:, :8], rhs, jnp.zeros(2, jnp.int32))
    with pytest.raises(SpecError, match="not a variant"):
        grouped_matmul(lhs, rhs, jnp.zeros(2, jnp.int32), arch="sm_75")


def test_sanitizer_finds_nothing() -> None:
    """Groups run the main loop back to back over the same shared ring."""
    from jaxptx import sim
    lhs, rhs = operands(300, 72, 136, len(SIZES), seed=6)
    lhs, rhs = np.array(lhs), np.array(rhs)
    out = np.zeros((300, 136), np.float32)
    sizes = np.asarray(SIZES, np.int32)
    sim.launch(grouped_kernel("bf16"), lhs, rhs, sizes, out, check=True)
    close(out, ragged(jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(sizes)), 72)


@pytest.mark.parametrize("sizes,match", [
    (np.asarray([10.0, 6.0]), r"group_sizes: expected an integer dtype \(int32\), got float64"),
    (jnp.asarray([10.0, 6.0], jnp.float32), r"group_sizes: expected an integer dtype \(int32\), got float32"),
    (np.asarray([True, False]), r"group_sizes: expected an integer dtype \(int32\), got bool"),
    (jnp.asarray([40, -8], jnp.int32), r"group_sizes: expected sizes >= 0, got group_sizes\[1\] = -8"),
    ([20, 13], r"group_sizes: expected a sum of at most M = 32 \(lhs rows\), got 33"),
])
def test_bad_group_sizes_name_the_argument(sizes, match) -> None:
    lhs, rhs = operands(32, 16, 8, 2)
    with pytest.raises(SpecError, match="grouped_matmul: " + match):
        grouped_matmul(lhs, rhs, sizes)


def test_traced_group_sizes_of_a_float_dtype_are_refused_too() -> None:
    lhs, rhs = operands(32, 16, 8, 2)
    with pytest.raises(SpecError, match=r"grouped_matmul: group_sizes: expected an integer dtype "
                                        r"\(int32\), got float32"):
        jax.jit(lambda s: grouped_matmul(lhs, rhs, s))(jnp.asarray([10.0, 6.0], jnp.float32))


def test_traced_sizes_negative_count_as_empty_and_stop_at_m() -> None:
    lhs, rhs = operands(160, 16, 8, 3, seed=7)
    f = jax.jit(grouped_matmul)
    got = f(lhs, rhs, jnp.asarray([100, -5, 40], jnp.int32))
    close(got, ragged(lhs, rhs, jnp.asarray([100, 0, 40], jnp.int32)), 16)
    sizes = jnp.asarray([100, 50, 90], jnp.int32)                 # sums past M = 160
    close(f(lhs, rhs, sizes), ragged(lhs, rhs, sizes), 16)

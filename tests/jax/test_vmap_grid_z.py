"""vmap of a ``batch="z"`` kernel: one launch, the batch as grid z."""

from __future__ import annotations

import pathlib
import re
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.jax import _primitive

from jax_kernels import axpy_z, grid_z_taken

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from mma_gemm import mma_gemm  # noqa: E402

RNG = np.random.default_rng(0)
XS = RNG.standard_normal((3, 256)).astype(np.float32)
WS = RNG.standard_normal((3, 256)).astype(np.float32)


def test_one_launch_with_the_batch_as_grid_z():
    jaxpr = str(jax.make_jaxpr(jax.vmap(axpy_z))(XS, WS))
    assert "scan" not in jaxpr and "batch=3" in jaxpr and "grid=(2, 1, 3)" in jaxpr
    text = jax.jit(jax.vmap(axpy_z)).lower(XS, WS).as_text()
    assert text.count("custom_call @jaxptx_cpu_v2(") == 1 and "grid = dense<[2, 1, 3]>" in text
    np.testing.assert_allclose(jax.jit(jax.vmap(axpy_z))(XS, WS), XS * 2 + WS, rtol=1e-6)


def test_unbatched_call_and_batched_call_share_one_ptx():
    plain = jax.jit(axpy_z).lower(XS[0], WS[0]).as_text()
    batched = jax.jit(jax.vmap(axpy_z)).lower(XS, WS).as_text()
    ptx = re.compile(r'ptx = "(.*?)"')
    assert ptx.search(plain).group(1) == ptx.search(batched).group(1)
    np.testing.assert_allclose(axpy_z(XS[1], WS[1]), XS[1] * 2 + WS[1], rtol=1e-6)


def test_a_shared_input_has_stride_zero_and_is_not_copied():
    f = jax.vmap(axpy_z, in_axes=(0, None))
    jaxpr = str(jax.make_jaxpr(f)(XS, WS[0]))
    assert "shared=(1,)" in jaxpr and "broadcast" not in jaxpr
    np.testing.assert_allclose(jax.jit(f)(XS, WS[0]), XS * 2 + WS[0], rtol=1e-6)
    spec = axpy_z.specialize_for("sm_90a", shared=("w",), N=256)
    assert spec.ptx.count("mul.wide.u32") == 3  # the index, then x and y only: w's offset is 0


def test_in_axes_other_than_0_and_out_axes():
    xt, wt = np.ascontiguousarray(XS.T), np.ascontiguousarray(WS.T)
    y = jax.jit(jax.vmap(axpy_z, in_axes=1, out_axes=1))(xt, wt)
    np.testing.assert_allclose(y, xt * 2 + wt, rtol=1e-6)


def test_nested_vmap_folds_both_levels_into_one_launch():
    xss = RNG.standard_normal((2, 3, 256)).astype(np.float32)
    wss = RNG.standard_normal((2, 3, 256)).astype(np.float32)
    f = jax.vmap(jax.vmap(axpy_z))
    jaxpr = str(jax.make_jaxpr(f)(xss, wss))
    assert "scan" not in jaxpr and "batch=6" in jaxpr
    np.testing.assert_allclose(jax.jit(f)(xss, wss), xss * 2 + wss, rtol=1e-6)


@pytest.mark.parametrize("inner, outer", [((0, None), (0, 0)), ((None, 0), (0, None)),
                                          ((0, None), (None, 0)), ((0, 0), (0, None))])
def test_nested_vmap_with_inputs_batched_at_one_level(inner, outer):
    x = RNG.standard_normal((2, 3, 256)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 256)).astype(np.float32)
    # Inputs an axis maps over have it; the others are one (3, 256) or (2, 256) or (256,) slice.
    args = []
    for a, i, o in zip((x, w), inner, outer):
        a = a if o == 0 else a[0]
        args.append(a if i == 0 else a[..., 0, :] if o == 0 else a[0])
    f = jax.jit(jax.vmap(jax.vmap(axpy_z, in_axes=inner), in_axes=outer))
    want = jax.vmap(jax.vmap(lambda a, b: a * 2 + b, in_axes=inner), in_axes=outer)(*args)
    np.testing.assert_allclose(f(*args), want, rtol=1e-6)


def test_a_batch_past_grid_z_falls_back_to_a_loop(monkeypatch):
    monkeypatch.setattr(_primitive, "GRID_Z_LIMIT", 2)
    jaxpr = str(jax.make_jaxpr(jax.vmap(axpy_z))(XS, WS))
    assert "scan" in jaxpr
    np.testing.assert_allclose(jax.vmap(axpy_z)(XS, WS), XS * 2 + WS, rtol=1e-6)


def test_a_batch_z_kernel_with_grid_z_is_refused():
    with pytest.raises(SpecError, match=r"batch='z' folds a vmap into grid z, but its grid "
                                        r"is \(1, 1, 2\)"):
        jax.vmap(grid_z_taken)(XS)


def test_grouped_gemm_is_vmap_over_the_mma_kernel():
    g, m, n, k = 3, 32, 16, 32
    a = RNG.standard_normal((g, m, k)).astype(ml_dtypes.bfloat16)
    bt = RNG.standard_normal((g, n, k)).astype(ml_dtypes.bfloat16)
    grouped = jax.jit(jax.vmap(mma_gemm))
    assert "batch=3" in str(jax.make_jaxpr(jax.vmap(mma_gemm))(a, bt))
    want = np.einsum("gmk,gnk->gmn", a.astype(np.float64), bt.astype(np.float64))
    np.testing.assert_allclose(grouped(a, bt), want, rtol=1e-5, atol=1e-4)
    shared_b = jax.jit(jax.vmap(mma_gemm, in_axes=(0, None)))(a, bt[0])
    np.testing.assert_allclose(shared_b, np.einsum("gmk,nk->gmn", a.astype(np.float64),
                                                   bt[0].astype(np.float64)), rtol=1e-5, atol=1e-4)

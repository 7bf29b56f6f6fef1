"""jaxptx.kernels.norms backward: the rms_norm and layer_norm gradient kernels.

``jax.grad`` through the ops runs the backward row kernel (``dx`` and
per-worker column sums) and the column-sum kernel (``dw``, ``db``). Checked
against the gradients in float64 numpy (closed form, on the same rounded
inputs) and against ``jax.vjp`` of the ``jnp`` references, at shapes off the
tile, every path (rows kept in registers, read twice, looped; a warp or a
CTA per row; workers taking several rows), every dtype and arch; one launch
each under ``jax.vmap``; ptxas with no spills; the CUDA lowering; the
sanitizer.
"""

from __future__ import annotations

import functools

import jax
import jax.extend
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.kernels import _norms_backward, norms
from jaxptx.kernels._norms_backward import (
    backward_plan,
    column_sum_kernel,
    row_backward_kernel,
    workers,
)
from jaxptx.kernels._norms_kernels import row_kernel
from jaxptx.kernels._norms_rows import plan

RNG = np.random.default_rng(29)
ARCHS = ("sm_80", "sm_90a", "sm_100a")
NP = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
# dx is rounded once to the dtype (half an ulp), dw/db once after an f32 sum.
TOL = {"f32": 1e-4, "bf16": 2e-2, "f16": 4e-3}
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}


def _inputs(op: str, dtype: str, shape: tuple[int, ...]) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """``(x, w[, b])`` and a cotangent ``dy``, rounded to ``dtype``."""
    n, t = shape[-1], NP[dtype]
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(t)
    vectors = [(RNG.standard_normal(n) + 1).astype(t) for _ in range(1 if op == "rms_norm" else 2)]
    return (x, *vectors), RNG.standard_normal(shape).astype(t)


def _numpy_vjp(op: str, args: tuple[np.ndarray, ...], dy: np.ndarray) -> tuple[np.ndarray, ...]:
    """The gradients in float64 numpy, closed form: ``dx``, ``dw`` (and ``db``)."""
    x, w, dy = (np.asarray(a, np.float64) for a in (args[0], args[1], dy))
    n = x.shape[-1]
    mean = 0.0 if op == "rms_norm" else x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS[op])
    xhat, g = (x - mean) * rstd, dy * w
    inner = g - xhat * (g * xhat).sum(-1, keepdims=True) / n
    if op == "layer_norm":
        inner -= g.sum(-1, keepdims=True) / n
    lead = tuple(range(x.ndim - 1))
    dw = (dy * xhat).sum(lead)
    return (rstd * inner, dw) if op == "rms_norm" else (rstd * inner, dw, dy.sum(lead))


def _check(got: tuple, want: tuple, dtype: str) -> None:
    assert len(got) == len(want)
    for i, (g, h) in enumerate(zip(got, want)):
        assert g.dtype == np.dtype(NP[dtype]) and g.shape == h.shape, i
        scale = np.abs(h).max()
        np.testing.assert_allclose(np.asarray(g, np.float64), h, rtol=TOL[dtype],
                                   atol=TOL[dtype] * scale, err_msg=f"cotangent {i}")


def _vjp(op: str, args: tuple, dy: np.ndarray, **kw) -> tuple:
    f = functools.partial(getattr(norms, op), **kw)
    return jax.jit(lambda *a: jax.vjp(f, *a)[1](dy))(*args)


@pytest.mark.parametrize("shape", [(3, 5, 96), (7, 1000), (1, 4096), (9, 40)])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_f32_gradients_match_float64_numpy_and_the_jnp_reference(op, shape):
    args, dy = _inputs(op, "f32", shape)
    got = _vjp(op, args, dy, arch="sm_90a")
    _check(got, _numpy_vjp(op, args, dy), "f32")
    reference = getattr(norms, f"{op}_reference")
    oracle = jax.vjp(reference, *args)[1](dy)            # the jnp oracle
    for g, h in zip(got, oracle):
        np.testing.assert_allclose(g, h, rtol=1e-4, atol=1e-4 * float(np.abs(h).max()))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_16_bit_gradients_on_every_arch(op, dtype, arch):
    args, dy = _inputs(op, dtype, (5, 520))       # 520 bf16 = 65 16-byte chunks: a partial round
    _check(_vjp(op, args, dy, arch=arch), _numpy_vjp(op, args, dy), dtype)


@pytest.mark.parametrize("shape,kept", [((2, 8192), False), ((3, 33), True), ((2, 16384), False)])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_rows_read_twice_looped_or_odd(op, shape, kept):
    # f32 8192: rms_norm reads the row again in its second pass, layer_norm loops (sums in
    # the scratch); 33: one element an access; bf16 16384: both loop.
    dtype = "bf16" if shape[-1] == 16384 else "f32"
    bp = backward_plan(shape[-1], dtype, 1 if op == "rms_norm" else 2)
    assert bp.keep == kept
    args, dy = _inputs(op, dtype, shape)
    _check(_vjp(op, args, dy), _numpy_vjp(op, args, dy), dtype)


@pytest.mark.parametrize("n,max_cached", [(100, 2), (1000, 4)])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_the_looping_path_with_short_rows(op, n, max_cached):
    bp = backward_plan(n, "f32", 2, max_cached)
    assert not bp.rows.cached and bp.rows.rows == (4 if n == 100 else 1)
    args, dy = _inputs(op, "f32", (5, n))
    x, w = args[:2]
    stats = row_kernel(op, "f32", "sm_80", plan(n, "f32").threads)(*args)[1]
    k = row_backward_kernel(op, "f32", "sm_80", n, max_cached)
    assert k.name.endswith("_loop")
    dx, part = jax.jit(functools.partial(k, W=workers(5, bp)))(x, w, stats, dy)
    want = _numpy_vjp(op, args, dy)
    sums = np.asarray(part, np.float64).sum(0).reshape(-1, n)
    _check((dx,), want[:1], "f32")
    np.testing.assert_allclose(sums, np.stack(want[1:]), rtol=1e-4, atol=1e-4 * np.abs(want[1]).max())


@pytest.mark.parametrize("n", [40, 1000])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_workers_take_several_rows(op, n, monkeypatch):
    # Two worker CTAs: each takes every other row (4 warps a CTA for n=40: 8 workers, 37 rows).
    monkeypatch.setattr(_norms_backward, "MAX_WORKER_CTAS", 2)
    args, dy = _inputs(op, "f16", (37, n))
    w_count = workers(37, backward_plan(n, "f16", 1))
    assert w_count == (8 if n == 40 else 2)
    f = jax.jit(lambda *a: jax.vjp(getattr(norms, op), *a)[1](dy))
    assert f"('W', {w_count})" in str(jax.make_jaxpr(f)(*args))
    _check(f(*args), _numpy_vjp(op, args, dy), "f16")


def test_forward_statistics_are_the_rows_mean_and_rstd():
    (x, w, b), _ = _inputs("layer_norm", "f32", (3, 100))
    p = plan(100, "f32")
    xf = x.astype(np.float64)
    mean = xf.mean(-1)
    _, stats = row_kernel("layer_norm", "f32", "sm_80", p.threads)(x, w, b)
    np.testing.assert_allclose(stats, np.stack([mean, 1 / np.sqrt(xf.var(-1) + 1e-5)], -1), rtol=1e-5)
    _, rstd = row_kernel("rms_norm", "f32", "sm_80", p.threads)(x, w)
    np.testing.assert_allclose(rstd, 1 / np.sqrt((xf * xf).mean(-1) + 1e-6), rtol=1e-5)


def _launches(jaxpr, name: str) -> int:
    count = 0
    for eqn in jaxpr.eqns:
        count += name in eqn.primitive.name
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            count += _launches(sub, name)
    return count


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_grad_under_vmap_is_one_launch_per_kernel(op):
    args, dy = _inputs(op, "f32", (3, 4, 48))
    vectors = args[1:]

    def per_example(x, dy_):
        return jax.vjp(lambda x, *v: getattr(norms, op)(x, *v), x, *vectors)[1](dy_)

    f = jax.vmap(per_example)
    jaxpr = jax.make_jaxpr(f)(args[0], dy).jaxpr
    assert _launches(jaxpr, f"{op}_bwd") == 1 and _launches(jaxpr, "column_sum") == 1
    got = jax.jit(f)(args[0], dy)
    for i in range(3):
        want = _numpy_vjp(op, (args[0][i], *vectors), dy[i])
        _check(tuple(g[i] for g in got), want, "f32")


def test_grad_of_vmap_sums_the_weight_gradient_over_the_batch():
    (x, w), dy = _inputs("rms_norm", "f32", (2, 3, 24))
    f = jax.vmap(norms.rms_norm, in_axes=(0, None))
    got = jax.jit(lambda x, w: jax.vjp(f, x, w)[1](dy))(x, w)
    _check(got, _numpy_vjp("rms_norm", (x, w), dy), "f32")


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_grad_is_the_backward_kernels_with_no_atomics(op):
    args, dy = _inputs(op, "bf16", (6, 256))
    jaxpr = jax.make_jaxpr(lambda *a: jax.vjp(getattr(norms, op), *a)[1](dy))(*args).jaxpr
    assert _launches(jaxpr, f"{op}_bwd_bf16") == 1 and _launches(jaxpr, "column_sum_bf16") == 1
    n, sums = 256, 1 if op == "rms_norm" else 2
    k = row_backward_kernel(op, "bf16", "sm_90a", n)
    text = k.ptx(R=6, W=workers(6, backward_plan(n, "bf16", sums))) + column_sum_kernel(
        "bf16", "sm_90a").ptx(W=8, C=sums * n)
    opcodes = set()
    for line in text.splitlines():
        words = line.split()
        if line.startswith("\t") and words and not words[0].startswith("//"):
            opcodes.add(words[words[0].startswith("@")].split(".")[0])
    assert {"ld", "st", "bar", "shfl"} <= opcodes
    assert not opcodes & {"atom", "red"}          # deterministic: a fixed summation order


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_cuda_lowering_of_grad_shows_the_backward_custom_calls(op, arch):
    args, _ = _inputs(op, "f16", (4, 64))
    loss = lambda *a: jnp.sum(getattr(norms, op)(*a, arch=arch).astype(jnp.float32))
    grad = jax.grad(loss, argnums=tuple(range(len(args))))
    text = jax.jit(grad).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("jaxptx_launch") == 3       # forward, backward rows, column sums
    assert f"{op}_bwd_f16_{arch}" in text and f"column_sum_f16_{arch}" in text
    assert text.count(f".target {arch}") == 3


def _variants():
    for arch in ARCHS:
        for op in ("rms_norm", "layer_norm"):
            for dtype, n in (("bf16", 4096), ("bf16", 16384), ("f32", 8192), ("bf16", 1024),
                             ("f16", 7), ("f32", 96)):
                bp = backward_plan(n, dtype, 1 if op == "rms_norm" else 2)
                yield f"{op}-{dtype}-{n}-{arch}", row_backward_kernel(op, dtype, arch, n), \
                    {"R": 2, "W": workers(2, bp)}, bp.rows.block
        for dtype in ("f32", "bf16", "f16"):
            yield f"column_sum-{dtype}-{arch}", column_sum_kernel(dtype, arch), {"W": 512, "C": 8192}, 256


@pytest.mark.parametrize("name,k,dims,block", list(_variants()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_ptxas_accepts_every_variant_without_spills(name, k, dims, block):
    assert f".target {name.rsplit('-', 1)[1]}" in k.ptx(**dims)
    res = k.resources(**dims)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    assert res.registers * block <= 65536           # one CTA fits an SM's register file


@pytest.mark.parametrize("arch", ARCHS)
def test_clean_under_the_sanitizer(arch):
    with sim.checking("all"):
        for op, shape, dtype in (("rms_norm", (9, 40), "f16"), ("layer_norm", (3, 520), "bf16"),
                                 ("layer_norm", (2, 8192), "f32")):
            args, dy = _inputs(op, dtype, shape)
            got = jax.block_until_ready(_vjp(op, args, dy, arch=arch))
            _check(got, _numpy_vjp(op, args, dy), dtype)


def test_empty_rows_have_zero_gradients():
    x, w = np.zeros((0, 8), np.float32), np.ones(8, np.float32)
    dx, dw = jax.grad(lambda x, w: jnp.sum(norms.rms_norm(x, w)), argnums=(0, 1))(x, w)
    assert dx.shape == (0, 8) and not np.asarray(dw).any()

"""jaxptx.kernels.norms: rms_norm, layer_norm, softmax, swiglu.

Values against numpy float64 under ``jax.jit`` (the CPU runs the emulator),
row lengths with and without a tail, every arch variant; one launch under
``jax.vmap``; ``jax.grad`` against a jnp reference; ptxas with no spills;
the CUDA lowering; bad inputs.
"""

from __future__ import annotations

import functools

import jax
import jax.extend
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.kernels import norms
from jaxptx.kernels._norms_kernels import row_kernel, swiglu_kernel
from jaxptx.kernels._norms_rows import plan
from jaxptx.kernels.norms import layer_norm, rms_norm, softmax, swiglu

RNG = np.random.default_rng(13)
ARCHS = ("sm_80", "sm_90a", "sm_100a")
NP = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
# Output rounding dominates for 16-bit types (half an ulp: 2^-9 for bf16, 2^-12 for f16).
TOL = {"f32": 2e-5, "bf16": 1e-2, "f16": 2e-3}
OPS = ("rms_norm", "layer_norm", "softmax", "swiglu")


def _inputs(op: str, dtype: str, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    n, t = shape[-1], NP[dtype]
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(t)
    if op == "rms_norm":
        return x, RNG.standard_normal(n).astype(t)
    if op == "layer_norm":
        return x, RNG.standard_normal(n).astype(t), RNG.standard_normal(n).astype(t)
    if op == "swiglu":
        return x, RNG.standard_normal(shape).astype(t)
    return (x,)


def _reference(op: str, *args: np.ndarray, eps: float | None = None) -> np.ndarray:
    """The op in numpy float64 on the (already rounded) inputs."""
    a = [np.asarray(v).astype(np.float64) for v in args]
    x = a[0]
    if op == "rms_norm":
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + (1e-6 if eps is None else eps)) * a[1]
    if op == "layer_norm":
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + (1e-5 if eps is None else eps)) * a[1] + a[2]
    if op == "softmax":
        z = np.exp(x - x.max(-1, keepdims=True))
        return z / z.sum(-1, keepdims=True)
    return x / (1 + np.exp(-x)) * a[1]


def _check(got: jax.Array, want: np.ndarray, dtype: str, op: str) -> None:
    assert got.dtype == np.dtype(NP[dtype]) and got.shape == want.shape
    tol = TOL[dtype]
    atol = tol / want.shape[-1] if op == "softmax" else tol
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=tol, atol=atol)


def _op(name: str):
    return getattr(norms, name)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("n", [1, 7, 1000, 4096])
@pytest.mark.parametrize("op", OPS)
def test_values_match_numpy_under_jit(op, n, dtype):
    args = _inputs(op, dtype, (2, n))
    got = jax.jit(functools.partial(_op(op), arch="sm_80"))(*args)
    _check(got, _reference(op, *args), dtype, op)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", OPS)
def test_every_arch_variant_and_leading_dims(op, arch):
    args = _inputs(op, "bf16", (2, 2, 520))     # 520 = 65 16-byte chunks: a partial last round
    got = jax.jit(functools.partial(_op(op), arch=arch))(*args)
    _check(got, _reference(op, *args), "bf16", op)
    jaxpr = str(jax.make_jaxpr(functools.partial(_op(op), arch=arch))(*args))
    assert f"{op}_bf16_{arch}" in jaxpr


@pytest.mark.parametrize("op", OPS)
def test_long_rows(op):
    args = _inputs(op, "f32", (1, 8192))
    _check(jax.jit(_op(op))(*args), _reference(op, *args), "f32", op)


@pytest.mark.parametrize("rows", [4, 9])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_short_rows_take_a_warp_each_several_per_cta(op, rows):
    p = plan(40, "f16")
    assert (p.threads, p.rows, p.block) == (32, 4, 128)
    args = _inputs(op, "f16", (rows, 40))     # 9 rows: 3 CTAs, the last one with 1 row
    f = jax.jit(functools.partial(_op(op), arch="sm_90a"))
    _check(f(*args), _reference(op, *args), "f16", op)
    assert f"grid=({-(-rows // 4)}, 1, 1)" in str(jax.make_jaxpr(f)(*args))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_the_looping_path_with_a_warp_per_row(op):
    p = plan(100, "f32", max_cached=2)
    assert not p.cached and p.rows == 4 and p.rounds == 1
    k = row_kernel(op, "f32", "sm_80", p.threads, False, 2)
    args = _inputs(op, "f32", (5, 100))
    template = {} if op == "softmax" else {"eps": 1e-6 if op == "rms_norm" else 1e-5}
    _check(_y(jax.jit(functools.partial(k, **template))(*args)), _reference(op, *args), "f32", op)


def _y(out):
    """``y`` of a row kernel's outputs (rms_norm and layer_norm also return their statistics)."""
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("n", [32768, 32776])
def test_rows_at_the_register_limit_and_past_it(n):
    p = plan(n, "bf16")
    assert p.threads == 1024 and p.cached == (n == 32768)  # 32776: the runtime loop
    args = _inputs("layer_norm", "bf16", (1, n))
    _check(jax.jit(layer_norm)(*args), _reference("layer_norm", *args), "bf16", "layer_norm")


def test_eps_and_a_tail_of_odd_16_bit_rows():
    x, w, b = _inputs("layer_norm", "f16", (3, 1002))   # 1002 = 2 * 501: b32 accesses
    _check(layer_norm(x, w, b, 0.5), _reference("layer_norm", x, w, b, eps=0.5), "f16", "layer_norm")
    x, w = _inputs("rms_norm", "bf16", (3, 33))        # odd: one element per access
    _check(rms_norm(x, w, eps=0.25), _reference("rms_norm", x, w, eps=0.25), "bf16", "rms_norm")


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_the_looping_path_for_rows_too_long_for_registers(op):
    # A budget of 4 values per thread sends 1000-element rows to the runtime loop.
    p = plan(1000, "f32", max_cached=4)
    assert not p.cached and p.rounds > 1
    k = row_kernel(op, "f32", "sm_80", p.threads, False, 4)
    args = _inputs(op, "f32", (3, 1000))
    template = {} if op == "softmax" else {"eps": 1e-6 if op == "rms_norm" else 1e-5}
    got = _y(jax.jit(functools.partial(k, **template))(*args))
    _check(got, _reference(op, *args), "f32", op)
    assert k.resources(R=3, N=1000).spill_stores == 0


def test_softmax_along_another_axis():
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    want = np.moveaxis(_reference("softmax", np.moveaxis(x, 1, -1)), -1, 1)
    _check(jax.jit(functools.partial(softmax, axis=1))(x), want, "f32", "softmax")


def _huge_logits(n: int) -> np.ndarray:
    """Rows a few ulps below peaks from 1e6 to FLT_MAX (both signs), and a row
    spanning -FLT_MAX..FLT_MAX: the differences to the peak are exact in f32."""
    peaks = np.array([1e6, 1e7, 1e9, 1e10, 1e11, 1e20, 3e38, -1e10, -3e38], np.float32)
    steps = RNG.integers(0, 40, (len(peaks), n)).astype(np.float32)
    ulps = np.spacing(np.abs(peaks))[:, None]
    rows = peaks[:, None] - np.sign(peaks)[:, None] * steps * ulps
    rows[:, 0] = peaks                                   # the peak itself is in the row
    wide = np.linspace(-3e38, 3e38, n, dtype=np.float32)
    return np.concatenate([rows, wide[None]]).astype(np.float32)


def _nonfinite_logits(n: int) -> np.ndarray:
    """Rows 0-3 hold +inf, NaN, +inf beside -inf, all -inf (NaN rows in
    ``jax.nn.softmax``); rows 4-7 hold -inf entries, a FLT_MAX peak or none."""
    inf = np.inf
    rows = np.tile(RNG.standard_normal(n).astype(np.float32), (8, 1))
    rows[0, [1, 4]] = inf
    rows[1, 3] = np.nan
    rows[2, 1], rows[2, 4] = inf, -inf
    rows[3, :] = -inf
    rows[4, [2, 5]] = -inf
    rows[5, ::2] = -inf
    rows[6, 1], rows[6, 2] = 3e38, -inf
    return rows


@pytest.mark.parametrize("n", [40, 1000])
@pytest.mark.parametrize("looping", [False, True])
def test_softmax_of_huge_and_nonfinite_logits_matches_jax(n, looping):
    # Regression: exp(v - peak) as ex2(fma(v, log2e, -peak*log2e)) kept the rounding
    # of peak*log2e, which overflows ex2 from peaks of ~1e9 up: NaN rows.
    if looping:
        p = plan(n, "f32", max_cached=2)
        assert not p.cached
        f = jax.jit(row_kernel("softmax", "f32", "sm_80", p.threads, False, 2))
    else:
        f = jax.jit(functools.partial(softmax, arch="sm_80"))
    x = _huge_logits(n)
    _check(f(x), _reference("softmax", x), "f32", "softmax")
    # +inf or NaN anywhere, or a row of -inf: NaN rows; -inf entries: 0 (as jax.nn.softmax).
    x = _nonfinite_logits(n)
    got, want = np.asarray(f(x)), np.asarray(jax.nn.softmax(x))
    assert np.isnan(want[:4]).all() and not np.isnan(want[4:]).any()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 / n)


@pytest.mark.parametrize("scale", [1e19, 1e37, 3e38])
def test_norms_of_huge_inputs_overflow_as_the_jnp_reference_does(scale):
    # Sums of squares past FLT_MAX overflow to inf in f32, in jnp as in the kernels:
    # rms_norm gives 0 (x * rsqrt(inf)), layer_norm gives b; inf - inf rows are NaN in both.
    x = (RNG.uniform(-1, 1, (4, 64)) * scale).astype(np.float32)
    w, b = RNG.standard_normal((2, 64)).astype(np.float32)
    with np.errstate(over="ignore"):
        cases = [(rms_norm, norms.rms_norm_reference, (x, w)),
                 (layer_norm, norms.layer_norm_reference, (x, w, b)),
                 (swiglu, norms.swiglu_reference, (x, np.broadcast_to(w, x.shape)))]
        for op, reference, args in cases:
            np.testing.assert_allclose(np.asarray(op(*args)), np.asarray(reference(*args)),
                                       rtol=2e-5, atol=1e-30, err_msg=op.__name__)


def test_swiglu_of_any_shape():
    gate, up = _inputs("swiglu", "f16", (3, 5, 7))
    _check(swiglu(gate, up), _reference("swiglu", gate, up), "f16", "swiglu")
    gate, up = np.float32(1.5), np.float32(-2.0)
    np.testing.assert_allclose(swiglu(gate, up), 1.5 / (1 + np.exp(-1.5)) * -2.0, rtol=1e-6)


def _launches(jaxpr: jax.core.Jaxpr, prefix: str) -> int:
    """Equations of kernels named ``prefix...``, sub-jaxprs included."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name.startswith(prefix)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            count += _launches(sub, prefix)
    return count


@pytest.mark.parametrize("op", OPS)
def test_vmap_is_one_launch(op):
    batch = _inputs(op, "f32", (3, 2, 40))
    single = _inputs(op, "f32", (2, 40))
    # x (and swiglu's up) batched, the weights shared.
    in_axes = (0, 0) if op == "swiglu" else (0,) + (None,) * (len(single) - 1)
    args = (batch[0], *(batch[1:] if op == "swiglu" else single[1:]))
    f = jax.vmap(_op(op), in_axes=in_axes)
    closed = jax.make_jaxpr(f)(*args)
    assert _launches(closed.jaxpr, op) == 1
    assert "batch=3" in str(closed)
    want = np.stack([_reference(op, args[0][i], *[a[i] if ax == 0 else a for a, ax in
                                                 zip(args[1:], in_axes[1:])]) for i in range(3)])
    _check(jax.jit(f)(*args), want, "f32", op)


def test_nested_vmap_is_still_one_launch():
    x, w = _inputs("rms_norm", "f32", (2, 3, 4, 16))[0], RNG.standard_normal(16).astype(np.float32)
    f = jax.vmap(jax.vmap(rms_norm, in_axes=(0, None)), in_axes=(0, None))
    assert _launches(jax.make_jaxpr(f)(x, w).jaxpr, "rms_norm") == 1
    _check(jax.jit(f)(x, w), _reference("rms_norm", x, w), "f32", "rms_norm")


def _jnp_reference(op: str):
    """The op written in jnp (f32), differentiated by JAX for the expected gradients."""
    return {"rms_norm": lambda x, w: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w,
            "layer_norm": lambda x, w, b: jax.nn.standardize(x, axis=-1, epsilon=1e-5) * w + b,
            "softmax": lambda x: jax.nn.softmax(x, axis=-1),
            "swiglu": lambda g, u: jax.nn.silu(g) * u}[op]


@pytest.mark.parametrize("op", OPS)
def test_grad_matches_jnp(op):
    args = _inputs(op, "f32", (3, 24))
    argnums = tuple(range(len(args)))

    def loss(f):
        return lambda *a: jnp.sum(jnp.sin(f(*a)) * jnp.arange(24.0))

    want = jax.grad(loss(_jnp_reference(op)), argnums=argnums)(*args)
    got = jax.jit(jax.grad(loss(_op(op)), argnums=argnums))(*args)
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=1e-4, atol=1e-4)


def test_grad_of_bf16_inputs_has_their_dtype():
    x, w = _inputs("rms_norm", "bf16", (2, 16))
    gx, gw = jax.jit(jax.grad(lambda x, w: jnp.sum(rms_norm(x, w).astype(jnp.float32)),
                              argnums=(0, 1)))(x, w)
    assert gx.dtype == gw.dtype == jnp.bfloat16
    want = jax.grad(lambda x: jnp.sum(_jnp_reference("rms_norm")(x, w.astype(np.float32))))(
        x.astype(np.float32))
    np.testing.assert_allclose(np.asarray(gx, np.float32), want, rtol=2e-2, atol=2e-2)


def _variants():
    for arch in ARCHS:
        for op in ("rms_norm", "layer_norm", "softmax"):
            # bf16 16384: 1024 threads, where ptxas spilled before .minnctapersm 1.
            for dtype, n in (("bf16", 4096), ("bf16", 16384), ("f32", 8192), ("f16", 7)):
                q = plan(n, dtype)
                yield op, arch, row_kernel(op, dtype, arch, q.threads, q.cached), {"R": 2, "N": n}
        yield "swiglu", arch, swiglu_kernel("bf16", arch), {"T": 4096}


@pytest.mark.parametrize("op,arch,k,dims", list(_variants()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_ptxas_accepts_every_variant_without_spills(op, arch, k, dims):
    assert f".target {arch}" in k.ptx(**dims)
    res = k.resources(**dims)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    assert res.registers <= 64


def test_weights_load_before_the_reduction_when_registers_allow():
    def loads_before_barrier(op: str, n: int) -> int:
        p = plan(n, "bf16")
        text = row_kernel(op, "bf16", "sm_90a", p.threads, p.cached).ptx(R=2, N=n)
        return text[:text.index("bar.sync")].count("ld.global.nc")

    assert loads_before_barrier("rms_norm", 4096) == 2       # 16 x values + 16 w values a lane
    assert loads_before_barrier("layer_norm", 4096) == 0     # w and b would exceed 32


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", OPS)
def test_cuda_lowering_is_the_custom_call(op, arch):
    args = _inputs(op, "f16", (4, 64))
    text = jax.jit(functools.partial(_op(op), arch=arch)).trace(*args).lower(
        lowering_platforms=("cuda",)).as_text()
    assert text.count("jaxptx_launch") == 1 and f".target {arch}" in text


@pytest.mark.parametrize("target,picked", [("sm_80", "sm_80"), ("sm_90a", "sm_90a"),
                                           ("sm_100a", "sm_100a"), ("sm_90", "sm_80"),
                                           ("sm_120", "sm_80")])
def test_arch_auto_picks_the_variant_for_the_target(monkeypatch, target, picked):
    monkeypatch.setenv("JAXPTX_ARCH", target)
    x, w = _inputs("rms_norm", "f32", (2, 8))
    # A fresh function: make_jaxpr caches traces of one function object.
    assert f"rms_norm_f32_{picked}_" in str(jax.make_jaxpr(lambda x, w: rms_norm(x, w))(x, w))


X = np.ones((2, 8), np.float32)
W = np.ones(8, np.float32)


@pytest.mark.parametrize("call,error,match", [
    (lambda: rms_norm(X.astype(np.int32), W), TypeError,
     r"rms_norm: x must be float32, bfloat16 or float16, got int32"),
    (lambda: rms_norm(X, np.ones(7, np.float32)), SpecError,
     r"rms_norm: w must have shape \(8,\) \(x's last axis\), got \(7,\)"),
    (lambda: rms_norm(X, W.astype(np.float16)), TypeError,
     r"rms_norm: w must have x's dtype float32, got float16"),
    (lambda: rms_norm(np.float32(1.0), W), SpecError, r"rms_norm: x must have at least one axis"),
    (lambda: rms_norm(X, W, eps=jnp.ones(2)), TypeError, r"rms_norm: eps must be a Python float"),
    (lambda: layer_norm(X, W, np.ones((1, 8), np.float32)), SpecError,
     r"layer_norm: b must have shape \(8,\)"),
    (lambda: softmax(X, axis=2), SpecError, r"softmax: axis must be an int in \[-2, 2\)"),
    (lambda: softmax(X.astype(np.float64)), TypeError, r"softmax: x must be float32, bfloat16 or "
                                                       r"float16, got float64"),
    (lambda: swiglu(X, np.ones((2, 4), np.float32)), SpecError,
     r"swiglu: up must have gate's shape \(2, 8\), got \(2, 4\)"),
    (lambda: swiglu(X, X.astype(np.float16)), TypeError, r"swiglu: up must have gate's dtype float32"),
    (lambda: rms_norm(X, W, arch="sm_75"), SpecError,
     r"rms_norm: arch='sm_75' is not a variant of rms_norm"),
])
def test_bad_inputs_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_empty_arrays_need_no_launch():
    assert rms_norm(np.zeros((0, 8), np.float32), W).shape == (0, 8)
    assert swiglu(np.zeros((0,), np.float16), np.zeros((0,), np.float16)).dtype == np.float16

"""Each kernel is one JAX primitive: binding, abstract evaluation, errors."""

from __future__ import annotations

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx import Tile, kernel, ptx
from jaxptx.errors import SpecError
from jaxptx.types import f32

from jax_kernels import affine, axpy_index, fill_first

X = np.arange(256, dtype=np.float32)


def test_one_cached_primitive_per_kernel_named_after_it():
    p = jaxptx.jax.primitive(affine)
    assert p is jaxptx.jax.primitive(affine)
    assert p.name == "affine" and p.multiple_results
    assert jaxptx.jax.primitive(axpy_index) is not p


def test_eager_and_jit_calls_compute_the_kernel():
    want = X * 2 + 1
    np.testing.assert_array_equal(affine(X), want)
    np.testing.assert_array_equal(affine(jnp.asarray(X)), want)
    np.testing.assert_array_equal(jax.jit(affine)(X), want)
    np.testing.assert_array_equal(jax.jit(lambda x: affine(x + 1) - 1)(X), X * 2 + 2)


def test_jaxpr_shows_the_primitive_with_its_params():
    text = " ".join(str(jax.make_jaxpr(lambda x, w: axpy_index(x, w, scale=0.5))(X, X)).split())
    assert ("axpy_index[ batch=0 launch=Launch(grid=(2, 1, 1), block=(128, 1, 1), "
            "cluster=(1, 1, 1), smem=0) scalars=() shared=() sizes=(('N', 256),) "
            "template=(('scale', 0.5),) ] a b"
            in text)


def test_template_values_and_several_outputs():
    y, idx = jax.jit(lambda x, w: axpy_index(x, w, scale=0.5))(X, X + 1)
    np.testing.assert_array_equal(y, X * 0.5 + X + 1)
    assert idx.dtype == jnp.int32
    np.testing.assert_array_equal(idx, np.arange(256))
    y, _ = axpy_index(X, X)  # the default scale=3.0
    np.testing.assert_array_equal(y, X * 4)


def test_a_dim_only_outputs_use_is_passed_as_a_keyword():
    y = jax.jit(lambda x: fill_first(x + 5, M=384))(X)
    assert y.shape == (384,)
    np.testing.assert_array_equal(y, np.full(384, 5, np.float32))


@pytest.mark.parametrize("call, message", [
    (lambda: affine(X.astype(np.float64)),
     r"kernel affine: argument 'x': expected dtype f32 for Tile\('N', f32, Layout.ROW\), got float64"),
    (lambda: affine(X.reshape(2, 128)),
     r"kernel affine: argument 'x': expected rank 1 .*got rank 2 with shape \(2, 128\)"),
    (lambda: axpy_index(X, X[:128]),
     r"kernel axpy_index: argument 'w' dim 0 \('N'\): expected 256 \(bound by argument 'x' dim 0\), got 128"),
    (lambda: affine(X, X),
     r"kernel affine: expected 1 input\(s\) \('x'\), got 2"),
    (lambda: axpy_index(X),
     r"kernel axpy_index: expected 2 input\(s\) \('x', 'w'\), got 1"),
    (lambda: affine([1.0, 2.0]),
     r"kernel affine: argument 'x': expected an array, got list"),
    (lambda: fill_first(X),
     r"kernel fill_first: no input binds dim\(s\) \['M'\]; pass M=\.\.\."),
    (lambda: affine(X, N=128),
     r"kernel affine: dim N=128 given as a keyword, but the inputs bind N=256"),
    (lambda: affine(X, bogus=1),
     r"kernel affine: unknown keyword 'bogus'"),
    (lambda: jax.jit(lambda x, s: axpy_index(x, x, scale=s))(X, 2.0),
     r"kernel axpy_index: template value scale is traced; .*static_argnames=\('scale',\)"),
])
def test_bad_calls_name_the_argument_the_dim_and_both_values(call, message):
    with pytest.raises(SpecError, match=message):
        call()


def test_static_template_values_under_jit():
    f = jax.jit(lambda x, s: axpy_index(x, x, scale=s)[0], static_argnames="s")
    np.testing.assert_array_equal(f(X, s=2.0), X * 3)


def test_module_kernels_cannot_be_called():
    @kernel(module=True)
    def mod():
        pass

    with pytest.raises(SpecError, match=r"kernel mod: a module=True kernel builds a whole PTX "
                                        r"module and cannot be called on arrays; call a @kernel "
                                        r"with in_specs and out_specs"):
        mod()


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), raw_params=[("u32", "n"), ("f32", "alpha")],
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a", batch="z")
def scale_head(x, y):
    """``y[i] = x[i] * alpha`` for ``i < n``, else ``x[i]``: raw params, one PTX for every value."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    xp, yp = ptx.batch_ptrs(x, y)
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(xp + off)
    with ptx.if_(i < ptx.param("n")):
        ptx.mul.f32(v, v, ptx.param("alpha"))
    ptx.st.global_.f32(yp + off, v)


def _scale_head_reference(x, n, alpha):
    return np.where(np.arange(x.shape[-1]) < n, x * np.float32(alpha), x)


def test_raw_params_take_static_keyword_values_without_respecialising():
    f = jax.jit(scale_head, static_argnames=("n", "alpha"))
    for n, alpha in ((100, 3.0), (7, -0.5)):
        np.testing.assert_array_equal(np.asarray(f(X, n=n, alpha=alpha)), _scale_head_reference(X, n, alpha))
    texts = [f.lower(X, n=n, alpha=a).as_text() for n, a in ((100, 3.0), (7, -0.5))]
    ids = {re.search(r"kernel_id = (\d+)", t).group(1) for t in texts}
    assert len(ids) == 1 and len(scale_head._cache) == 1  # one PTX, one id: the values ride the call
    assert "scalars = dense<[4, 100, 4, 1077936128]> : tensor<4xi64>" in texts[0]  # 3.0f = 0x40400000
    cuda = f.trace(X, n=7, alpha=-0.5).lower(lowering_platforms=("cuda",)).as_text()
    assert "scalars = dense<[4, 7, 4, 3204448256]> : tensor<4xi64>" in cuda  # -0.5f = 0xBF000000
    xs = np.stack([X, -X, X + 1])  # vmap: folded into grid z, the values shared by the batch
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda x: scale_head(x, n=50, alpha=2.0))(xs)),
                                  _scale_head_reference(xs, 50, 2.0))


@pytest.mark.parametrize("kwargs, message", [
    (dict(alpha=1.0), r"raw param n \(.u32\) has no value; pass n=..."),
    (dict(n=-1, alpha=1.0), r"raw param n \(.u32\): -1 is outside 0..4294967295"),
    (dict(n=1.5, alpha=1.0), r"raw param n \(.u32\): expected an int, got 1.5"),
    (dict(n=1, alpha="x"), r"raw param alpha \(.f32\): expected a real number, got 'x'"),
])
def test_bad_raw_param_values_are_refused(kwargs, message):
    with pytest.raises(SpecError, match="kernel scale_head: " + message):
        scale_head(X, **kwargs)


def test_a_traced_raw_param_is_refused():
    with pytest.raises(SpecError, match=r"raw param n is traced; raw params are static numbers"):
        jax.jit(lambda x, n: scale_head(x, n=n, alpha=1.0))(X, 3)


def test_importing_jaxptx_does_not_import_jax():
    code = "import sys, jaxptx; assert 'jax' not in sys.modules, 'jax was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)

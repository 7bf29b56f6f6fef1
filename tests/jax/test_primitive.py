"""Each kernel is one JAX primitive: binding, abstract evaluation, errors."""

from __future__ import annotations

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
    assert ("axpy_index[ batch=0 grid=(2, 1, 1) shared=() sizes=(('N', 256),) "
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

    with pytest.raises(SpecError, match="kernel mod: calling a kernel on arrays needs in_specs"):
        mod()


def test_raw_params_are_refused_at_lowering():
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), raw_params=[("u32", "n")],
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_90a")
    def with_scalar(x, y):
        ptx.ret()

    with pytest.raises(SpecError, match=r"kernel with_scalar: a JAX call passes 2 buffer pointers"
                                        r".*\.u32 n; raw scalar params"):
        jax.jit(with_scalar).lower(X[:32])


def test_importing_jaxptx_does_not_import_jax():
    code = "import sys, jaxptx; assert 'jax' not in sys.modules, 'jax was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)

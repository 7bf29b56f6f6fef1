"""CUDA lowering: a typed-FFI custom call to the shim's launch handler,
inspectable on a CPU-only jaxlib; launches run where a GPU exists."""

from __future__ import annotations

import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx import _ffi

from jax_kernels import affine, big_smem_cluster

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from rms_norm import rms_norm  # noqa: E402

X = np.arange(256, dtype=np.float32)


def _lower_cuda(f, *args):
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))


def test_stablehlo_shows_the_launch_and_its_attributes():
    text = _lower_cuda(affine, X).as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_launch\(%arg0\) \{backend_config = \"\", "
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text
    assert re.fullmatch(r"block = dense<\[128, 1, 1\]> : tensor<3xi32>, cluster = dense<1> : "
                        r"tensor<3xi32>, entry = \"affine\", grid = dense<\[2, 1, 1\]> : "
                        r"tensor<3xi32>, kernel_id = \d+ : i64, ptx = \".*\", smem = 0 : i64",
                        m.group(1))


def test_hlo_is_a_typed_ffi_call():
    hlo = _lower_cuda(affine, X).as_text(dialect="hlo")
    assert re.search(r'custom-call\(.*\), custom_call_target="jaxptx_launch".*'
                     r"api_version=API_VERSION_TYPED_FFI", hlo)


def test_cluster_and_dynamic_shared_memory_attributes():
    text = _lower_cuda(big_smem_cluster, X).as_text()
    assert "cluster = dense<[2, 1, 1]> : tensor<3xi32>" in text
    assert "smem = 65536 : i64" in text


def test_the_call_carries_the_ptx_of_the_kernel_it_names():
    lowered = _lower_cuda(rms_norm, np.zeros((2, 256), np.float32), np.zeros(256, np.float32))
    (kid, spec), = jaxptx.jax.kernels_in(lowered).items()
    assert f"kernel_id = {kid} : i64" in lowered.as_text()
    carried = re.search(r'ptx = "((?:[^"\\]|\\.)*)"', lowered.as_text(dialect="hlo")).group(1)
    # MLIR escapes bytes as \XX (two hex digits)
    assert re.sub(r"\\([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), carried) == spec.ptx
    assert f"grid = dense<[2, 1, 1]>" in lowered.as_text() and spec.grid == (2, 1, 1)
    assert ".visible .entry rms_norm(" in spec.ptx


def test_registering_other_content_under_a_taken_id_is_refused():
    _ffi.cuda_register(7, b"ptx one", "k", 2)
    _ffi.cuda_register(7, b"ptx one", "k", 2)  # the same again is fine
    with pytest.raises(ValueError, match="kernel id 7 is already registered with different content"):
        _ffi.cuda_register(7, b"ptx two", "k", 2)


def test_the_shim_imports_and_explains_a_missing_driver():
    error = _ffi.cuda_driver_error()
    if error:
        assert "libcuda.so.1" in error or "cuInit" in error
    assert _ffi.abi_info()["xla_ffi_headers"]


@pytest.mark.gpu
def test_gpu_launch_matches_the_emulator():
    x = jnp.asarray(X, device=jax.devices("gpu")[0])
    np.testing.assert_array_equal(jax.jit(affine)(x), X * 2 + 1)
    np.testing.assert_array_equal(jax.jit(big_smem_cluster)(x), X + 1)


@pytest.mark.gpu
def test_gpu_rms_norm_jit_vmap():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, 4, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    dev = jax.devices("gpu")[0]
    y = jax.jit(jax.vmap(rms_norm, in_axes=(0, None)))(jax.device_put(xs, dev), jax.device_put(w, dev))
    x64 = xs.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)

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
from mma_gemm import mma_gemm  # noqa: E402, F401  (gpu tests)
from rms_norm import rms_norm  # noqa: E402

X = np.arange(256, dtype=np.float32)


def _lower_cuda(f, *args):
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))


def test_stablehlo_shows_the_launch_and_its_attributes():
    text = _lower_cuda(affine, X).as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_launch_v2\(%arg0\) \{backend_config = \"\", "
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text
    assert re.fullmatch(r"allow_unwritten = 0 : i64, entry = \"affine\", kernel_id = \d+ : i64, "
                        r"launch = \{block = dense<\[128, 1, 1\]> : tensor<3xi32>, "
                        r"cluster = dense<1> : tensor<3xi32>, grid = dense<\[2, 1, 1\]> : "
                        r"tensor<3xi32>, smem = 0 : i64\}, may_write_inputs = 0 : i64, "
                        r"ptx = \".*\", "
                        r"scalars = dense<> : tensor<0xi64>, "
                        r"tma = dense<> : tensor<0xi64>",
                        m.group(1))


def test_hlo_is_a_typed_ffi_call():
    hlo = _lower_cuda(affine, X).as_text(dialect="hlo")
    assert re.search(r'custom-call\(.*\), custom_call_target="jaxptx_launch_v2".*'
                     r"api_version=API_VERSION_TYPED_FFI", hlo)


def test_cluster_and_dynamic_shared_memory_attributes():
    text = _lower_cuda(big_smem_cluster, X).as_text()
    assert re.search(r"launch = \{block = dense<\[128, 1, 1\]> : tensor<3xi32>, "
                     r"cluster = dense<\[2, 1, 1\]> : tensor<3xi32>, grid = dense<\[2, 1, 1\]> : "
                     r"tensor<3xi32>, smem = 65536 : i64\}", text), text


def test_the_call_carries_the_ptx_of_the_kernel_it_names():
    lowered = _lower_cuda(rms_norm, np.zeros((2, 256), np.float32), np.zeros(256, np.float32))
    (kid, spec), = jaxptx.jax.kernels_in(lowered).items()
    assert f"kernel_id = {kid} : i64" in lowered.as_text()
    carried = re.search(r'ptx = "((?:[^"\\]|\\.)*)"', lowered.as_text(dialect="hlo")).group(1)
    # MLIR escapes bytes as \XX (two hex digits)
    assert re.sub(r"\\([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), carried) == spec.ptx
    assert "grid = dense<[2, 1, 1]>" in lowered.as_text() and spec.grid == (2, 1, 1)
    assert ".visible .entry rms_norm(" in spec.ptx


def test_registering_other_content_under_a_taken_id_is_refused():
    _ffi.cuda_register(7, b"ptx one", "ptx one", "k", 2)
    _ffi.cuda_register(7, b"ptx one", "ptx one", "k", 2)  # the same again is fine
    with pytest.raises(ValueError, match="kernel id 7 is already registered with different content"):
        _ffi.cuda_register(7, b"ptx two", "ptx two", "k", 2)


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


class _Device:
    """What the CUDA lowering reads of a JAX GPU device."""

    def __init__(self, capability: str) -> None:
        self.compute_capability = capability


def test_arch_auto_takes_the_target_of_the_devices_lowered_for():
    from jaxptx.errors import SpecError
    from jaxptx.jax._lowering import arch_for_devices
    assert arch_for_devices([_Device("9.0"), _Device("9.0")], "k") == "sm_90a"
    assert arch_for_devices([_Device("8.6")], "k") == "sm_86"
    assert arch_for_devices([_Device("10.0")], "k") == "sm_100a"
    assert arch_for_devices([], "k") is None
    with pytest.raises(SpecError, match=r"kernel k: arch='auto' but the devices have compute "
                                        r"capabilities \['8.0', '9.0'\]"):
        arch_for_devices([_Device("9.0"), _Device("8.0")], "k")


def test_arch_auto_without_a_gpu_lowers_for_jaxptx_arch(monkeypatch):
    from jaxptx import Tile, kernel, ptx
    from jaxptx.types import f32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), arch="auto")
    def copy_first(x, y):
        ptx.st.global_.f32(y.ptr, ptx.ld.global_.f32(x.ptr))

    # jit caches a function's lowering, so each target gets a function of its own
    monkeypatch.setenv("JAXPTX_ARCH", "sm_100a")
    assert ".target sm_100a" in _lower_cuda(lambda x: copy_first(x), X).as_text()
    monkeypatch.setenv("JAXPTX_ARCH", "sm_80")
    assert ".target sm_80" in _lower_cuda(lambda x: copy_first(x), X).as_text()


@pytest.mark.gpu
def test_gpu_lowering_registers_a_cubin_for_the_device():
    x = jnp.asarray(X, device=jax.devices("gpu")[0])
    lowered = jax.jit(lambda v: affine(v) - 1.0).lower(x)
    (kid, _), = jaxptx.jax.kernels_in(lowered).items()
    assert _ffi.cuda_registered(kid)
    np.testing.assert_array_equal(lowered.compile()(x), X * 2)


@pytest.mark.gpu
def test_gpu_grouped_gemm_and_export():
    import ml_dtypes
    from jax import export
    dev = jax.devices("gpu")[0]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 64, 64)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((4, 32, 64)).astype(ml_dtypes.bfloat16)
    want = np.einsum("gmk,gnk->gmn", a.astype(np.float64), bt.astype(np.float64))
    grouped = jax.jit(jax.vmap(mma_gemm))
    np.testing.assert_allclose(grouped(jax.device_put(a, dev), jax.device_put(bt, dev)), want,
                               rtol=1e-4, atol=1e-3)
    exp = export.export(grouped, platforms=["cuda"],
                        disabled_checks=jaxptx.jax.disabled_checks())(a, bt)
    again = export.deserialize(exp.serialize())
    np.testing.assert_allclose(again.call(jax.device_put(a, dev), jax.device_put(bt, dev)), want,
                               rtol=1e-4, atol=1e-3)

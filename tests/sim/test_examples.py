"""The example kernels, checked three ways: ptxas accepts their PTX, and the
emulator computes what numpy computes."""

from __future__ import annotations

import pathlib
import sys

import ml_dtypes
import numpy as np

from jaxptx import sim
from jaxptx.runtime import ptxas

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))

from mma_gemm import mma_gemm  # noqa: E402
from rms_norm import rms_norm  # noqa: E402
from softmax import reference, softmax  # noqa: E402


def test_softmax() -> None:
    ptxas(softmax.ptx(B=8, N=1024), "sm_80")
    x = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32) * 4
    y = np.zeros_like(x)
    sim.launch(softmax, x, y)
    np.testing.assert_allclose(y, reference(x), rtol=1e-6, atol=1e-9)


def test_rms_norm() -> None:
    ptxas(rms_norm.ptx(B=4, N=1024), "sm_90a")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    y = np.zeros_like(x)
    sim.launch(rms_norm, x, w, y)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)


def test_mma_gemm() -> None:
    ptxas(mma_gemm.ptx(M=64, N=64, K=64), "sm_80")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 32)).astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 32), np.float32)
    sim.launch(mma_gemm, a, np.ascontiguousarray(b.T), c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-5)

"""Kernels compiled by a real compiler run correctly: Triton compiles to PTX
on this CPU-only machine (sm_80), and the emulator runs the result against
numpy, under the sanitizer (check=True: no race, uninitialised use or async
misuse in correct compiler output). Skipped when triton is not installed (it is not a test dependency:
``pip install triton`` to run these)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from triton_compile import compile_ptx, extra_params, matmul_kernel, softmax_kernel  # noqa: E402


def _compile(fn, signature: dict, constexprs: dict, num_warps: int = 4):
    return compile_ptx(fn, signature, constexprs, 80, num_warps)


def test_triton_softmax() -> None:
    kernel = _compile(softmax_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
                      {"BLOCK": 1024})
    ptx = kernel.asm["ptx"]
    x = np.random.default_rng(1).standard_normal((64, 1000)).astype(np.float32)
    y = np.zeros_like(x)
    sim.launch(ptx, x, y, np.int32(1000), *extra_params(ptx, 3), grid=(64, 1, 1), block=(128, 1, 1),
               smem=kernel.metadata.shared, check=True)
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-8)


def test_triton_matmul_uses_mma_sync() -> None:
    kernel = _compile(matmul_kernel, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
                                "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                      {"BM": 32, "BN": 32, "BK": 32})
    ptx = kernel.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16" in ptx
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float32)
    sim.launch(ptx, a, b, c, np.int32(64), np.int32(64), np.int32(64), *extra_params(ptx, 6),
               grid=(2, 2, 1), block=(128, 1, 1), smem=kernel.metadata.shared, check=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)

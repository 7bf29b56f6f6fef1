"""Blackwell kernels compiled by a real compiler run correctly: Triton 3.9
compiles to sm_100a PTX on this CPU-only machine (packed ``.f32x2``
arithmetic, three-input ``max.f32``, ``redux.sync`` on ``.f32``, ``tcgen05``
for ``tl.dot``), and the emulator runs the result against numpy. Skipped when
triton is not installed (it is not a test dependency: ``pip install triton``
to run these)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")

from triton_compile import compile_ptx, extra_params  # noqa: E402


def _compile(fn, signature: dict, constexprs: dict, num_warps: int = 4):
    return compile_ptx(fn, signature, constexprs, 100, num_warps)


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _layer_norm(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, d / tl.sqrt(var + eps) * w + b, mask=mask)


def test_triton_sm100_softmax_uses_three_input_max_and_f32_redux() -> None:
    kernel = _compile(_softmax, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
                      {"BLOCK": 1024})
    ptx = kernel.asm["ptx"]
    assert ".target sm_100a" in ptx and "redux.sync.max.f32" in ptx
    assert any(line.count(",") == 3 for line in ptx.splitlines() if "max.f32" in line and "redux" not in line)
    x = np.random.default_rng(1).standard_normal((32, 1000)).astype(np.float32)
    x[3, 17] = 40.0                   # a maximum in one lane only
    y = np.zeros_like(x)
    sim.launch(ptx, x, y, np.int32(1000), *extra_params(ptx, 3), grid=(32, 1, 1), block=(128, 1, 1),
               smem=kernel.metadata.shared)
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-8)


def test_triton_sm100_layer_norm_uses_packed_f32x2() -> None:
    kernel = _compile(_layer_norm, {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32",
                                    "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 1024})
    ptx = kernel.asm["ptx"]
    assert "f32x2" in ptx
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 1000)) * 3 + 1).astype(np.float32)
    w, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    y = np.zeros_like(x)
    sim.launch(ptx, x, w, b, y, np.int32(1000), np.float32(1e-5), *extra_params(ptx, 6),
               grid=(16, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared)
    xd = x.astype(np.float64)
    mean = xd.mean(1, keepdims=True)
    ref = (xd - mean) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_triton_sm100_matmul_uses_tcgen05() -> None:
    kernel = _compile(_matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
                                "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                      {"BM": 128, "BN": 64, "BK": 64})
    ptx = kernel.asm["ptx"]
    assert "tcgen05.mma" in ptx and "tcgen05.ld" in ptx
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 256)).astype(np.float16)
    b = rng.standard_normal((256, 128)).astype(np.float16)
    c = np.zeros((128, 128), np.float32)
    sim.launch(ptx, a, b, c, np.int32(128), np.int32(128), np.int32(256), *extra_params(ptx, 6),
               grid=(1, 2, 1), block=(128, 1, 1), smem=kernel.metadata.shared)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)

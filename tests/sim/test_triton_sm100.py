"""Blackwell kernels compiled by a real compiler run correctly: Triton 3.9
compiles to sm_100a PTX on this CPU-only machine (packed ``.f32x2``
arithmetic, three-input ``max.f32``, ``redux.sync`` on ``.f32``, ``tcgen05``
for ``tl.dot``), and the emulator runs the result against numpy. Skipped when
triton is not installed (it is not a test dependency: ``pip install triton``
to run these)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from jaxptx import parse, sim
from jaxptx.runtime._toolchain import find_tool

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")


def _compile(fn, signature: dict, constexprs: dict, num_warps: int = 4):
    # Triton's own ptxas would write .version 9.4, which ptxas 13.0 rejects.
    os.environ.setdefault("TRITON_PTXAS_BLACKWELL_PATH", find_tool("ptxas"))
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", 100, 32), options={"num_warps": num_warps})


def _extra_params(ptx: str, given: int) -> list[np.ndarray]:
    # Triton appends scratch-pointer params the kernel does not use here.
    count = len(parse(ptx).functions[0].params)
    return [np.zeros(16, np.uint8) for _ in range(count - given)]


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
    sim.launch(ptx, x, y, np.int32(1000), *_extra_params(ptx, 3), grid=(32, 1, 1), block=(128, 1, 1),
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
    sim.launch(ptx, x, w, b, y, np.int32(1000), np.float32(1e-5), *_extra_params(ptx, 6),
               grid=(16, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared)
    xd = x.astype(np.float64)
    mean = xd.mean(1, keepdims=True)
    ref = (xd - mean) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)

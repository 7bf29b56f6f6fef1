"""Kernels compiled by a real compiler run right and clean under the
sanitizer: Triton compiles to PTX on this CPU-only machine, and each kernel
is launched with ``check=True`` and compared with numpy — softmax and layer
norm for sm_80, sm_90a and sm_100a (three-input ``max.f32``, ``redux.sync``
on ``.f32``, packed ``.f32x2``), a matmul on ``mma.sync`` and a pipelined one
(``cp.async`` with ``mma.sync`` for sm_80, ``wgmma`` for sm_90a). Flash
attention, the TMA and the tcgen05 matmuls are in :mod:`test_triton_sm100`.
Skipped when triton is not installed (``pip install triton`` to run these)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")

from triton_compile import (  # noqa: E402
    MATMUL_SIGNATURE, compile_ptx, extra_params, layer_norm_kernel, matmul_kernel, matmul_operands,
    softmax_kernel)

CAPABILITIES = [80, 90]           # the pipelined matmul's builds


# What each build must use (the sm_100a builds: three-input max.f32,
# redux.sync on f32, packed f32x2 arithmetic).
_SOFTMAX_USES = {80: (), 90: (), 100: ("redux.sync.max.f32",)}
_LAYER_NORM_USES = {80: (), 90: (), 100: ("f32x2",)}


@pytest.mark.parametrize("capability", [80, 90, 100])
def test_softmax(capability: int) -> None:
    kernel = compile_ptx(softmax_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32",
                                          "BLOCK": "constexpr"}, {"BLOCK": 1024}, capability)
    ptx = kernel.asm["ptx"]
    for name in _SOFTMAX_USES[capability]:
        assert name in ptx, name
    if capability == 100:
        assert any(line.count(",") == 3 for line in ptx.splitlines() if "max.f32" in line and "redux" not in line)
    x = np.random.default_rng(1).standard_normal((16, 1000)).astype(np.float32)
    x[3, 17] = 40.0                   # a maximum in one lane only
    y = np.zeros_like(x)
    sim.launch(ptx, x, y, np.int32(1000), *extra_params(ptx, 3), grid=(16, 1, 1), block=(128, 1, 1),
               smem=kernel.metadata.shared, check=True)
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)


@pytest.mark.parametrize("capability", [80, 90, 100])
def test_layer_norm(capability: int) -> None:
    kernel = compile_ptx(layer_norm_kernel, {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32",
                                             "y_ptr": "*fp32", "n_cols": "i32", "eps": "fp32",
                                             "BLOCK": "constexpr"}, {"BLOCK": 1024}, capability)
    ptx = kernel.asm["ptx"]
    for name in _LAYER_NORM_USES[capability]:
        assert name in ptx, name
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 1000)) * 3 + 1).astype(np.float32)
    w, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    y = np.zeros_like(x)
    sim.launch(ptx, x, w, b, y, np.int32(1000), np.float32(1e-5), *extra_params(ptx, 6),
               grid=(16, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared, check=True)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_matmul_uses_mma_sync() -> None:
    kernel = compile_ptx(matmul_kernel, MATMUL_SIGNATURE, {"BM": 32, "BN": 32, "BK": 32}, 80)
    ptx = kernel.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16" in ptx
    a, b, c = matmul_operands(64, 64, 64, seed=2)
    sim.launch(ptx, a, b, c, np.int32(64), np.int32(64), np.int32(64), *extra_params(ptx, 6),
               grid=(2, 2, 1), block=(128, 1, 1), smem=kernel.metadata.shared, check=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@triton.jit
def _pipelined_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=3):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def _pipelined(capability: int):
    """The pipelined matmul for ``sm_<capability>``, its pointers aligned and
    sizes multiples of 16 (as Triton's launcher specialises them), and its
    arguments for a 128 x 64 x 256 product (grid (2, 1, 1))."""
    kernel = compile_ptx(_pipelined_matmul, MATMUL_SIGNATURE, {"BM": 64, "BN": 64, "BK": 32}, capability,
                         divisible=tuple(range(6)))
    ptx = kernel.asm["ptx"]
    a, b, c = matmul_operands(128, 64, 256, seed=4)
    args = [a, b, c, np.int32(128), np.int32(64), np.int32(256), *extra_params(ptx, 6)]
    return ptx, args, dict(grid=(2, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared)


@pytest.mark.parametrize("capability, instructions", [(80, ("mma.sync", "cp.async")), (90, ("wgmma.mma_async",))])
def test_pipelined_matmul(capability: int, instructions: tuple[str, ...]) -> None:
    ptx, args, kw = _pipelined(capability)
    for name in instructions:
        assert name in ptx, name
    sim.launch(ptx, *args, **kw, check=True)
    a, b, c = args[:3]
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def _findings(ptx: str, args: list, kw: dict) -> list[str] | str:
    """Every finding of one launch on fresh copies of ``args`` (or the error)."""
    try:
        found = sim.launch(ptx, *[a.copy() for a in args], **kw, check="all")
    except sim.SimError as e:           # a mutant may hang or fault
        return f"{type(e).__name__}: {e}"
    return [f.message for f in found]


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_coarse_shadow_cells_agree_with_byte_cells_on_mutants(capability: int, monkeypatch) -> None:
    """The pipelined matmul with each of its barriers and waits deleted in turn:
    the sanitizer's coarse cells (16 bytes, split on partial accesses) find
    what one cell per byte finds, message for message."""
    from jaxptx.sim.core.sanitizer import values
    ptx, args, kw = _pipelined(capability)
    lines = ptx.splitlines()
    barriers = [i for i, line in enumerate(lines)
                if line.strip().startswith(("bar.sync", "cp.async.wait_group", "wgmma.wait_group"))]
    assert len(barriers) >= 3
    found = 0
    for i in barriers:
        mutant = "\n".join(lines[:i] + lines[i + 1:])
        coarse = _findings(mutant, args, kw)
        monkeypatch.setattr(values, "GRAIN", 1)
        assert _findings(mutant, args, kw) == coarse, lines[i]
        monkeypatch.undo()
        found += bool(coarse) and not isinstance(coarse, str)
    assert found >= 2

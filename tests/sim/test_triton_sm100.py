"""Tensor-core kernels compiled by a real compiler run correctly: Triton 3.9
compiles ``tl.dot`` to ``tcgen05`` for sm_100a on this CPU-only machine, and
the emulator runs the result against numpy; causal flash attention and a
matmul with device-built tensor maps also run for sm_90a (``wgmma``), and
the attention for sm_80 (``mma.sync``). (Softmax, layer norm and the
``mma.sync``/``wgmma`` matmuls are in :mod:`test_triton_checked`.) Skipped
when triton is not installed (it is not a test dependency: ``pip install
triton`` to run these)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")

from triton_compile import (  # noqa: E402
    MATMUL_SIGNATURE, causal_attention_kernel, compile_ptx, extra_params, matmul_kernel, matmul_operands)


def _compile(fn, signature: dict, constexprs: dict, num_warps: int = 4):
    return compile_ptx(fn, signature, constexprs, 100, num_warps)


def test_triton_sm100_matmul_uses_tcgen05() -> None:
    kernel = _compile(matmul_kernel, MATMUL_SIGNATURE, {"BM": 128, "BN": 64, "BK": 64})
    ptx = kernel.asm["ptx"]
    assert "tcgen05.mma" in ptx and "tcgen05.ld" in ptx
    a, b, c = matmul_operands(128, 128, 256, seed=4)
    sim.launch(ptx, a, b, c, np.int32(128), np.int32(128), np.int32(256), *extra_params(ptx, 6),
               grid=(1, 2, 1), block=(128, 1, 1), smem=kernel.metadata.shared, check=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


# The sm_80 and sm_90a builds run under the sanitizer. The sm_100a builds of
# these two do not: Triton 3.9 uses tcgen05.ld results before the
# tcgen05.wait::ld it places after them (PTX ISA: the registers hold the
# data only once the wait completes), which the sanitizer reports. (The
# plain matmul above waits first and runs checked.)
_CHECKED = {80: True, 90: True, 100: False}


def _check(capability: int) -> object:
    """``check=True`` where the build runs clean, else ``"all"``."""
    return True if _CHECKED[capability] else "all"


def _only_early_tcgen05_ld_uses(capability: int, findings) -> None:
    """An unchecked build's findings are the early uses of tcgen05.ld
    results, and nothing else."""
    if not _CHECKED[capability]:
        assert findings and all("no tcgen05.wait::ld since" in f.message for f in findings), findings


@pytest.mark.parametrize("capability, instruction",
                         [(80, "mma.sync"), (90, "wgmma.mma_async"), (100, "tcgen05.mma")])
def test_triton_causal_flash_attention(capability, instruction) -> None:
    S, D = 128, 64
    kernel = compile_ptx(causal_attention_kernel, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16",
                                             "o_ptr": "*fp32", "S": "i32", "scale": "fp32", "D": "constexpr",
                                             "BM": "constexpr", "BN": "constexpr"},
                         {"D": D, "BM": 64, "BN": 64}, capability)
    ptx = kernel.asm["ptx"]
    assert instruction in ptx
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((S, D)).astype(np.float16) for _ in range(3))
    o = np.zeros((S, D), np.float32)
    findings = sim.launch(ptx, q, k, v, o, np.int32(S), np.float32(1 / 8), *extra_params(ptx, 6),
                          grid=(S // 64, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared,
                          check=_check(capability))
    _only_early_tcgen05_ld_uses(capability, findings)
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / 8
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    # the kernel rounds P to f16 before the second product: a few 1e-4
    np.testing.assert_allclose(o, (p / p.sum(1, keepdims=True)) @ v.astype(np.float64), atol=2e-3)


@triton.jit
def _matmul_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(a_d.load([pid_m * BM, k]), b_d.load([k, pid_n * BN]))
    c_d.store([pid_m * BM, pid_n * BN], acc)


@pytest.mark.parametrize("capability", [90, 100])
def test_triton_matmul_with_device_built_tensor_maps(capability) -> None:
    """TMA descriptors made on the device (tensormap.replace into global
    scratch, then cp.async.bulk.tensor loads and a TMA store)."""
    M, N, K = 256, 128, 256
    kernel = compile_ptx(_matmul_descriptors, MATMUL_SIGNATURE, {"BM": 128, "BN": 64, "BK": 64}, capability)
    ptx = kernel.asm["ptx"]
    assert "tensormap.replace" in ptx and "cp.async.bulk.tensor" in ptx
    a, b, c = matmul_operands(M, N, K, seed=2)
    blocks = (M // 128) * (N // 64)
    scratch = np.zeros(kernel.metadata.global_scratch_size * blocks, np.uint8)
    findings = sim.launch(ptx, a, b, c, np.int32(M), np.int32(N), np.int32(K), scratch, *extra_params(ptx, 7),
                          grid=(M // 128, N // 64, 1), block=(128, 1, 1), smem=kernel.metadata.shared,
                          check=_check(capability))
    _only_early_tcgen05_ld_uses(capability, findings)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@triton.jit
def _persistent_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), warp_specialize=True):
        pid_m, pid_n = tile // tl.cdiv(N, BN), tile % tl.cdiv(N, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in tl.range(0, K, BK, num_stages=3):
            acc += tl.dot(a_d.load([pid_m * BM, k]), b_d.load([pid_n * BN, k]).T)
        c_d.store([pid_m * BM, pid_n * BN], acc)


def test_triton_sm100_warp_specialised_persistent_matmul() -> None:
    """Warp specialisation (setmaxnreg, named barriers, a brx.idx jump table
    whose .branchtargets list starts on the next line), a 3-stage mbarrier
    pipeline feeding tcgen05.mma, two persistent CTAs over four tiles."""
    M = N = K = 256
    kernel = _compile(_persistent_matmul, MATMUL_SIGNATURE, {"BM": 128, "BN": 128, "BK": 64})
    ptx = kernel.asm["ptx"]
    assert all(x in ptx for x in ("tcgen05.mma", "setmaxnreg", "brx.idx", "mbarrier.try_wait"))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((N, K)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    scratch = np.zeros(kernel.metadata.global_scratch_size * 2, np.uint8)
    sim.launch(ptx, a, b, c, np.int32(M), np.int32(N), np.int32(K), scratch, *extra_params(ptx, 7),
               grid=(2, 1, 1), block=(32 * kernel.metadata.num_warps, 1, 1), smem=kernel.metadata.shared)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-5, atol=1e-4)


@triton.jit
def _scaled_matmul(a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr):
    rm, rn, rk, rs = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        sa = tl.load(as_ptr + rm[:, None] * (K // 32) + (k // 32 + rs)[None, :])
        sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + (k // 32 + rs)[None, :])
        acc = tl.dot_scaled(a, sa, "e4m3", b, sb, "e4m3", acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_triton_sm100_block_scaled_fp8_matmul() -> None:
    """tl.dot_scaled: tcgen05.mma.kind::mxf8f6f4.block_scale with ue8m0 scale
    factors per 32 elements of K, copied into tensor memory."""
    import ml_dtypes
    M = N = 128
    K = 256
    kernel = _compile(_scaled_matmul, {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "as_ptr": "*u8", "bs_ptr": "*u8",
                                       "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr",
                                       "BN": "constexpr", "BK": "constexpr"}, {"BM": 128, "BN": 128, "BK": 128})
    ptx = kernel.asm["ptx"]
    assert "kind::mxf8f6f4.block_scale" in ptx
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.float8_e4m3fn)
    sa = rng.integers(120, 134, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(120, 134, (N, K // 32)).astype(np.uint8)
    c = np.zeros((M, N), np.float32)
    sim.launch(ptx, a, b, sa, sb, c, np.int32(M), np.int32(N), np.int32(K), *extra_params(ptx, 8),
               grid=(1, 1, 1), block=(128, 1, 1), smem=kernel.metadata.shared)
    scale_a = np.repeat(2.0 ** (sa.astype(np.float64) - 127), 32, axis=1)
    scale_b = np.repeat(2.0 ** (sb.astype(np.float64) - 127), 32, axis=1).T
    ref = (a.astype(np.float64) * scale_a) @ (b.astype(np.float64) * scale_b)
    np.testing.assert_allclose(c, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())

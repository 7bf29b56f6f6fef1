"""Compiling Triton kernels to PTX on this CPU-only machine, for the tests
that run real compiler output on the emulator, and the kernels the tests
share (import it only once triton is known to be installed)."""

from __future__ import annotations

import os

import numpy as np

import triton
import triton.language as tl

from jaxptx import parse
from jaxptx.runtime._toolchain import find_tool


def compile_ptx(fn, signature: dict, constexprs: dict, capability: int, num_warps: int = 4,
                divisible: tuple[int, ...] = ()):
    """``triton.compile`` for ``sm_<capability>``; the result's ``.asm["ptx"]``
    is the PTX. ``divisible``: the positions of arguments known to be
    multiples of 16 (pointers 16-byte aligned), as Triton's launcher
    specialises them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")   # Triton 3.9 warns when unset
    # Triton's own ptxas would write .version 9.4 for sm_100, which ptxas 13.0 rejects.
    os.environ.setdefault("TRITON_PTXAS_BLACKWELL_PATH", find_tool("ptxas"))
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": num_warps})


def extra_params(ptx: str, given: int) -> list[np.ndarray]:
    """Arguments for the scratch-pointer params Triton appends (unused here)."""
    count = len(parse(ptx).functions[0].params)
    return [np.zeros(16, np.uint8) for _ in range(count - given)]


MATMUL_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                    "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
"""The signature of the matmul kernels: C (M, N) f32 = A (M, K) @ B (K, N), f16."""


def matmul_operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random f16 A (m, k) and B (k, n), and a zero f32 C (m, n)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16),
            np.zeros((m, n), np.float32))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
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


@triton.jit
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, scale, D: tl.constexpr, BM: tl.constexpr,
                            BN: tl.constexpr):
    pid = tl.program_id(0)
    rm = pid * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, S, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(k_ptr + rn[:, None] * D + rd[None, :])
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(rm[:, None] >= rn[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])

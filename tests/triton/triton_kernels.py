"""Triton's tutorial kernels (vector add, fused softmax, matmul, layer norm,
fused attention) and small kernels for the argument rules, written for
``triton_call`` as jax-triton's users write them (outputs after the inputs)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


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
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
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
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, scale, D: tl.constexpr, BM: tl.constexpr,
                     BN: tl.constexpr):
    """Causal flash attention forward, one (S, D) head: online softmax over key blocks."""
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


@triton.jit
def axpb_kernel(x_ptr, out_ptr, a, b, n, BLOCK: tl.constexpr):
    """out = a * x + b over n elements; a and b are runtime scalars."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + b, mask=mask)


@triton.jit
def grid2d_kernel(out_ptr, W: tl.constexpr):
    """out[y, x] = 1000 * program_id(1) + program_id(0) over a (gy, W) output."""
    x, y = tl.program_id(0), tl.program_id(1)
    tl.store(out_ptr + y * W + x, 1000 * y + x)


@triton.jit
def scale_inplace_kernel(x_ptr, s, n, BLOCK: tl.constexpr):
    """x *= s in place: the output is x's own buffer."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


@triton.jit
def histogram_kernel(x_ptr, bins_ptr, n, BLOCK: tl.constexpr, NBINS: tl.constexpr):
    """bins[x & (NBINS - 1)] += 1 with atomics: bins must start as zeros."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(bins_ptr + (x & (NBINS - 1)), 1, mask=mask)


@triton.jit
def square_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x, mask=mask)


@triton.jit
def square_backward_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask)
    tl.store(dx_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) * dy, mask=mask)


@triton.jit
def flag_kernel(x_ptr, out_ptr, negate, n, BLOCK: tl.constexpr):
    """out = -x if negate else x: a bool scalar."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(negate, -x, x), mask=mask)


@triton.jit
def tma_copy_kernel(in_desc, out_ptr, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """out[block] = in[block] through a host-side tensor descriptor (TMA on sm_90)."""
    pid = tl.program_id(0)
    tile = in_desc.load([pid * BM, 0])
    rm = pid * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tile)


@triton.jit
def device_desc_copy_kernel(in_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr):
    """out[block] = in[block] through a descriptor the kernel makes (sm_90: its
    128-byte map is written to Triton's global scratch, one per program)."""
    desc = tl.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, N])
    pid = tl.program_id(0)
    tile = desc.load([pid * BM, 0])
    rm = pid * BM + tl.arange(0, BM)
    rn = tl.arange(0, N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tile)


@triton.jit
def checked_copy_kernel(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    """Copies x, asserting (with debug=True) that every element is below ``limit``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.device_assert(x < limit, "x is below the limit")
    tl.store(out_ptr + offs, x, mask=mask)

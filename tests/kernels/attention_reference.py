"""A float64 numpy reference for the attention kernels' tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np


def reference(q, k, v, causal: bool, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Attention in float64: o (B, Sq, H, D) and the natural-log lse (B, H, Sq);
    causal keeps keys j <= i for query i (top-left aligned). k and v may have
    Hkv heads, Hkv dividing H (grouped-query): query head h reads KV head
    h // (H // Hkv), as in ``jax.nn.dot_product_attention``."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    per_kv = q.shape[2] // k.shape[2]
    assert per_kv * k.shape[2] == q.shape[2], (q.shape, k.shape)
    k, v = (np.repeat(x, per_kv, axis=2) for x in (k, v))     # head h -> h // per_kv
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    total = p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p / total, v), (m + np.log(total))[..., 0]


def large_qkv(B: int, Sq: int, Skv: int, H: int, D: int, magnitude: float, block: int | None = None,
              seed: int = 0):
    """bf16 q and k of ``magnitude`` (for 6e4, scores ~1e10: one-hot rows but
    for ties), v of 1. With ``block``, keys ``block..2·block`` repeat keys
    ``0..block`` (the next key block): every top score is tied across two
    blocks, so each row averages two rows of v. Regression inputs for the
    rounding of ``m·scale·log2e``."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((B, Sq, H, D)) * magnitude).astype(ml_dtypes.bfloat16)
    k = (rng.standard_normal((B, Skv, H, D)) * magnitude).astype(ml_dtypes.bfloat16)
    if block is not None:
        k[:, block:2 * block] = k[:, :block]
    v = rng.standard_normal((B, Skv, H, D)).astype(ml_dtypes.bfloat16)
    return q, k, v

"""A float64 numpy reference for the attention kernels' tests."""

from __future__ import annotations

import numpy as np


def reference(q, k, v, causal: bool, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Attention in float64: o (B, Sq, H, D) and the natural-log lse (B, H, Sq);
    causal keeps keys j <= i for query i (top-left aligned)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    total = p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p / total, v), (m + np.log(total))[..., 0]

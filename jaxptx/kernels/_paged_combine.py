"""The split-K combine of paged decode attention: one small kernel.

Split ``s`` of a sequence left its unnormalised f32 output ``O_s`` and its
``(m_s, l_s)`` (raw-score max and probability sum relative to it) in
``o_part`` (B, Nq, S, D) and ``ml`` (B, Nq, S, 2) (see :mod:`._paged_sm80`).
Only the first ``cdiv(length, SPLIT_TOKENS)`` splits of a sequence hold
anything; the combine reads those and no others:

    M = max_s m_s,   w_s = ex2((m_s - M) · scale · log2 e),
    o = Σ_s w_s O_s / Σ_s w_s l_s

summed in split order (deterministic, no atomics), rounded to q's dtype. A
sequence of length 0 has no split and gets o = 0.

Each thread owns 4 columns of one (sequence, query head); a CTA of 128
threads covers ``128 / (D/4)`` query heads: ``grid = (cdiv(Nq, that), B, 1)``.
"""

from __future__ import annotations

import functools
from typing import Any

from ..dsl import Kernel, Tile, kernel, ptx, reg
from ..types import PtxType, f32, s32
from ._paged_sm80 import SPLIT_TOKENS, cdiv

__all__ = ["combine_kernel"]

THREADS = 128
NEG_INF = float("-inf")


def _heads_per_cta(d: int) -> int:
    return THREADS // (d // 4)


def _body(o_part: Any, ml: Any, lengths: Any, o: Any, *, dtype: PtxType) -> None:
    """The combine (module docstring)."""
    _, Nq, S, D = o_part.shape
    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    chunks = D // 4
    tid = ptx.special.tid.x()
    c = tid & (chunks - 1)
    head = ptx.special.ctaid.x() * _heads_per_cta(D) + (tid >> (chunks.bit_length() - 1))
    b = ptx.special.ctaid.y()
    if Nq % _heads_per_cta(D):
        ptx.ret(pred=head >= Nq)
    length = ptx.ld.global_.nc.s32(lengths.ptr + ptx.mul.wide.u32(b, 4))
    rounded = ptx.min.s32(ptx.max.s32(length, 0) + (SPLIT_TOKENS - 1), S * SPLIT_TOKENS)
    n_valid = rounded >> (SPLIT_TOKENS.bit_length() - 1)          # splits holding tokens
    slot0 = (b * Nq + head) * S
    ml_row = ml.ptr + ptx.mul.wide.u32(slot0, 8)
    top = reg.scalar(f32, NEG_INF)
    for s in ptx.range_(0, n_valid, 1, dtype=s32):
        ptx.max.f32(top, top, ptx.ld.global_.f32(ml_row + ptx.mul.wide.s32(s, 8)))
    total = reg.scalar(f32, 0.0)
    acc = [reg.scalar(f32, 0.0) for _ in range(4)]
    scale_log2 = ptx.param("scale_log2")
    o_row = o_part.ptr + ptx.mul.wide.u32(slot0, D * 4) + ptx.cvt.u64.u32(c << 4)
    for s in ptx.range_(0, n_valid, 1, dtype=s32):
        m, l_s = ptx.ld.global_.v2.f32(ml_row + ptx.mul.wide.s32(s, 8))
        w = ptx.ex2.approx.ftz.f32((m - top) * scale_log2)
        ptx.fma.rn.f32(total, w, l_s, total)
        vals = ptx.ld.global_.v4.f32(o_row + ptx.mul.wide.s32(s, D * 4))
        for a, v in zip(acc, vals):
            ptx.fma.rn.f32(a, w, v, a)
    inv = ptx.selp.f32(ptx.rcp.rn.f32(total), 0.0, total > 0.0)   # no split: o = 0
    words = [pack(acc[1] * inv, acc[0] * inv), pack(acc[3] * inv, acc[2] * inv)]
    ptx.st.global_.v2.b32(o.ptr + ptx.mul.wide.u32((b * Nq + head) * D, 2) + ptx.cvt.u64.u32(c << 3), words)


@functools.cache
def combine_kernel(dtype: PtxType, head_dim: int, arch: str) -> Kernel:
    """The combine for ``dtype`` (q's: bf16/f16) and ``head_dim``, traced for
    ``arch``. Inputs ``o_part`` (B, Nq, S, D) and ``ml`` (B, Nq, S, 2) f32,
    ``lengths`` (B,) int32; output ``o`` (B, Nq, D); raw param
    ``scale_log2``."""
    def paged_attention_combine(o_part, ml, lengths, o):
        _body(o_part, ml, lengths, o, dtype=dtype)

    return kernel(paged_attention_combine,
                  in_specs=(Tile("B", "Nq", "S", head_dim, f32), Tile("B", "Nq", "S", 2, f32), Tile("B", s32)),
                  out_specs=(Tile("B", "Nq", head_dim, dtype),),
                  grid=lambda B, Nq: (cdiv(Nq, _heads_per_cta(head_dim)), B, 1), block=(THREADS, 1, 1),
                  arch=arch, raw_params=[("f32", "scale_log2")],
                  name=f"paged_attention_combine_{dtype.name}_d{head_dim}_{arch}")

"""The JAX side of the flash-attention backward kernels (:mod:`._attention_bwd_sm80`,
and the Hopper ones of :mod:`._attention_bwd_sm90`): the per-row preprocess
(``delta = rowsum(dO ∘ O) − dlse`` and the scaled ``lse``, O(S·D), which XLA
fuses into one pass over dO and O) and the two launches, dQ then dK/dV."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from ..errors import SpecError
from ..types import PtxType, bf16, f16
from ._attention_bwd_sm80 import dkdv_kernel, dq_kernel
from ._attention_bwd_sm90 import dkdv_kernel as dkdv_kernel_sm90
from ._attention_bwd_sm90 import dq_kernel as dq_kernel_sm90
from ._attention_sm80 import BLOCK_M, HEAD_DIMS, LOG2E, _cdiv

__all__ = ["attention_backward_sm80", "attention_backward_sm90", "row_terms"]


def row_terms(o: jax.Array, lse: jax.Array, do: jax.Array, dlse: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The kernels' per-row inputs, (B, H, Sp) f32 with Sp = Sq rounded up to 64:
    ``nlse = −lse·log2 e`` (padded with −inf: P = 0 in padded rows) and
    ``delta = rowsum(dO ∘ O) − dlse`` (padded with 0)."""
    f32_ = jnp.float32
    sq = o.shape[1]
    pad = ((0, 0), (0, 0), (0, _cdiv(sq, BLOCK_M) * BLOCK_M - sq))
    delta = jnp.einsum("bqhd,bqhd->bhq", do.astype(f32_), o.astype(f32_)) - dlse.astype(f32_)
    nlse = lse.astype(f32_) * -LOG2E
    return jnp.pad(nlse, pad, constant_values=-math.inf), jnp.pad(delta, pad)


def _check(where: str, q: jax.Array, k: jax.Array) -> PtxType:
    """The kernels' element type, after checking q's dtype and head dim and k's heads."""
    dtype = {"bfloat16": bf16, "float16": f16}.get(str(q.dtype))
    if dtype is None or q.shape[-1] not in HEAD_DIMS:
        raise SpecError(f"{where}: q: expected bfloat16 or float16 with head dim 64 "
                        f"or 128, got {q.dtype} {tuple(q.shape)}")
    if k.ndim != 4 or k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise SpecError(f"{where}: k: expected (B, Skv, Hkv, D) with Hkv dividing "
                        f"q's {q.shape[2]} heads, got {tuple(k.shape)}")
    return dtype


def attention_backward_sm80(q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array, lse: jax.Array,
                            do: jax.Array, dlse: jax.Array, *, causal: bool, scale: float,
                            arch: str = "sm_80") -> tuple[jax.Array, jax.Array, jax.Array]:
    """The VJP of the forward's ``(o, lse)`` with the kernels: ``(dq, dk, dv)``.

    Args:
        q: (B, Sq, H, D) bf16 or f16, D in {64, 128}.
        k, v: (B, Skv, Hkv, D), the dtype of ``q``; ``Hkv`` divides ``H``.
        o, lse: the forward's outputs (o like ``q``, lse (B, H, Sq) f32).
        do, dlse: their cotangents.
        causal: the forward's mask (query ``i`` sees keys ``j <= i``).
        scale: the forward's factor on the scores.
        arch: the target to trace the kernels for.

    Returns:
        dq, dk, dv in the dtypes and shapes of q, k, v; dk and dv summed
        over the query heads sharing each KV head.

    Raises:
        SpecError: a dtype other than bf16/f16, a head dim other than 64/128
            or a KV head count not dividing q's.
    """
    dtype = _check("attention_backward_sm80", q, k)
    nlse, delta = row_terms(o, lse, do.astype(q.dtype), dlse)
    D = q.shape[-1]
    params = {"causal": bool(causal), "scale_log2": float(scale) * LOG2E, "scale": float(scale)}
    do = do.astype(q.dtype)
    dq = dq_kernel(dtype, D, arch)(q, k, v, do, nlse, delta, **params)
    dk, dv = dkdv_kernel(dtype, D, arch)(q, k, v, do, nlse, delta, **params)
    return dq, dk, dv


def attention_backward_sm90(q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array, lse: jax.Array,
                            do: jax.Array, dlse: jax.Array, *, causal: bool,
                            scale: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """As :func:`attention_backward_sm80`, with the Hopper kernels
    (:mod:`._attention_bwd_sm90`: TMA, mbarriers, ``wgmma``; sm_90a only).

    Under ``jax.vmap`` the mapped axis folds into B: one launch of each
    kernel (the kernels index their batch through the TMA coordinates, so
    they have no grid-z batching of their own).

    Raises:
        SpecError: as :func:`attention_backward_sm80`.
    """
    _check("attention_backward_sm90", q, k)
    return _sm90_folded(bool(causal), float(scale))(q, k, v, o, lse, do.astype(q.dtype), dlse)


def _sm90_launch(q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array, lse: jax.Array, do: jax.Array,
                 dlse: jax.Array, *, causal: bool, scale: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The row terms and the two Hopper launches, dQ then dK/dV."""
    dtype = _check("attention_backward_sm90", q, k)
    nlse, delta = row_terms(o, lse, do, dlse)
    D = q.shape[-1]
    params = {"causal": causal, "scale_log2": scale * LOG2E, "scale": scale}
    dq = dq_kernel_sm90(dtype, D)(q, k, v, do, nlse, delta, **params)
    dk, dv = dkdv_kernel_sm90(dtype, D)(q, k, v, do, nlse, delta, **params)
    return dq, dk, dv


@functools.cache
def _sm90_folded(causal: bool, scale: float):
    """:func:`_sm90_launch` whose ``jax.vmap`` reshapes the mapped axis into B."""

    @jax.custom_batching.custom_vmap
    def folded(*args: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return _sm90_launch(*args, causal=causal, scale=scale)

    @folded.def_vmap
    def rule(size: int, batched: list[bool], *args: jax.Array):
        args = [x if bt else jnp.broadcast_to(x, (size, *x.shape)) for x, bt in zip(args, batched)]
        grads = folded(*(x.reshape(-1, *x.shape[2:]) for x in args))
        return tuple(g.reshape(size, -1, *g.shape[1:]) for g in grads), (True, True, True)

    return folded

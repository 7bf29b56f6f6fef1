"""``flash_attention``: softmax(Q·Kᵀ·scale)·V in one kernel launch, differentiable.

The layout is ``jax.nn.dot_product_attention``'s: q (B, Sq, H, D), k and v
(B, Skv, Hkv, D), bf16 or f16, D of 64 or 128. ``causal=True`` applies that
function's ``is_causal`` mask: query ``i`` sees keys ``j <= i`` (aligned at
the top-left when Sq != Skv).

Grouped-query and multi-query attention as that function has them: ``Hkv``
divides ``H`` and query head ``h`` attends with KV head ``h // (H // Hkv)``
(``Hkv = H`` is multi-head attention, ``Hkv = 1`` multi-query). Every
variant indexes the shared KV head in place; K and V are never repeated.

Variants (``arch``, resolved by :func:`jaxptx.kernels._arch.variant`):

* ``"sm_80"``: :mod:`._attention_sm80`, ``mma.sync`` + ``ldmatrix`` +
  double-buffered ``cp.async``; every GPU from sm_80 on runs it.
* ``"sm_90a"``: :mod:`._attention_sm90` (TMA + ``wgmma``) when that module is
  present, else the Ampere code traced for sm_90a.
* ``"sm_100a"``: :mod:`._attention_sm100` (TMA + ``tcgen05.mma``, S and O
  accumulators in tensor memory); ``"auto"`` on a Blackwell GPU picks it.

The backward runs kernels (a dK/dV kernel over key blocks and a dQ kernel
over query blocks, from the saved log-sum-exp; the S×S scores never exist in
memory): :mod:`._attention_bwd_sm80` (``mma.sync``) on ``"sm_80"`` and
``"sm_100a"`` traced for that target, :mod:`._attention_bwd_sm90` (TMA +
``wgmma``) on ``"sm_90a"``. With grouped KV heads, dK and dV sum over the
query heads of each group inside the kernel. :func:`attention_backward` is the same VJP in plain JAX, the
reference the tests hold the kernels to.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import SpecError
from ..jax import custom_vjp
from ._arch import VARIANTS, variant
from ._attention_bwd import attention_backward_sm80, attention_backward_sm90
from ._attention_sm80 import HEAD_DIMS, attention_sm80
from ._attention_sm100 import attention_sm100

__all__ = ["attention_backward", "attention_backward_kernels", "attention_forward", "flash_attention"]

_DTYPES = ("bfloat16", "float16")
_GRID_Y = 65535          # the kernels launch batch × heads along grid y


def _sm90() -> Any:
    """The Hopper forward, or None while its module is absent or broken."""
    try:
        from ._attention_sm90 import attention_sm90   # optional: written separately
    except ImportError:
        return None
    return attention_sm90


@functools.cache
def _batch_folded(forward: Callable[..., Any], causal: bool, scale: float) -> Callable[..., Any]:
    """``forward(q, k, v, causal=, scale=)`` whose ``jax.vmap`` reshapes the
    mapped axis into B: one launch over (N·B, S, H, D) instead of a loop of
    N launches (for kernels without ``batch="z"``). Nested maps fold again."""

    @jax.custom_batching.custom_vmap
    def folded(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        return forward(q, k, v, causal=causal, scale=scale)

    @folded.def_vmap
    def rule(size: int, batched: list[bool], q: jax.Array, k: jax.Array,
             v: jax.Array) -> tuple[tuple[jax.Array, jax.Array], tuple[bool, bool]]:
        q, k, v = (x if b else jnp.broadcast_to(x, (size, *x.shape)) for x, b in zip((q, k, v), batched))
        o, lse = folded(*(x.reshape(-1, *x.shape[2:]) for x in (q, k, v)))
        return (o.reshape(size, -1, *o.shape[1:]), lse.reshape(size, -1, *lse.shape[1:])), (True, True)

    return folded


def attention_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool, scale: float,
                      variant_name: str) -> tuple[jax.Array, jax.Array]:
    """One forward launch of ``variant_name``: ``(o, lse)``, lse (B, H, Sq) f32.

    ``variant_name`` is what :func:`~jaxptx.kernels._arch.variant` returned
    (``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``).
    """
    if variant_name == "sm_90a":
        hopper = _sm90()
        if hopper is not None:
            return _batch_folded(hopper, causal, scale)(q, k, v)
    if variant_name == "sm_100a":
        return _batch_folded(attention_sm100, causal, scale)(q, k, v)
    return attention_sm80(q, k, v, causal=causal, scale=scale, arch=variant_name)


def attention_backward(q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array, lse: jax.Array,
                       do: jax.Array, dlse: jax.Array, *, causal: bool,
                       scale: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The VJP of ``(o, lse)`` in f32 JAX: the reference the backward kernels are tested against.

    q is (B, Sq, H, D), k and v (B, Skv, Hkv, D) with ``Hkv`` dividing ``H``:
    the query heads are taken as (Hkv, H // Hkv), query head ``h`` paired
    with KV head ``h // (H // Hkv)``, and each KV head's dK, dV are the sums
    over the query heads of its group (the chain rule for a KV head that
    several query heads read).

    With S = Q·Kᵀ (per batch and query head) and P = softmax(S·scale) (the
    forward's probabilities, recomputed; masked entries 0):

    * dV = Pᵀ·dO, dP = dO·Vᵀ
    * dS = P ∘ (dP − rowsum(P ∘ dP) + dlse)   (softmax's Jacobian; dlse is
      the cotangent of lse itself, since ∂lse/∂S = P·scale)
    * dQ = scale·dS·K, dK = scale·dSᵀ·Q

    The residuals ``o`` and ``lse`` are not used, for large scores' sake:
    P = exp(S·scale − lse) would save a reduction, but in f32 lse is only
    good to half an ulp of its magnitude, a visible error in P for |q|, |k|
    ~ 300 in bf16 and an exponent past f32's range (inf, NaN) from ~1e4;
    rowsum(dO ∘ O) (flash attention's ``delta``) equals rowsum(P ∘ dP) but
    rounds apart from dP (O is 16-bit), and dS, which cancels to 0 in a
    one-hot row, would keep that error times |K|·scale in dQ.

    Returns:
        ``(dq, dk, dv)`` in the dtypes of ``q``, ``k``, ``v``.
    """
    del o, lse
    f32 = jnp.float32
    B, Sq, H, D = q.shape
    Hkv = k.shape[2]
    grouped = (B, Sq, Hkv, H // Hkv, D)          # query head h = (h // G, h % G)
    qf, dof = q.astype(f32).reshape(grouped), do.astype(f32).reshape(grouped)
    kf, vf = k.astype(f32), v.astype(f32)
    s = jnp.einsum("bqhgd,bkhd->bhgqk", qf, kf) * scale
    if causal:     # every row sees key 0 (top-left alignment): no row is all -inf
        s = jnp.where(jnp.tril(jnp.ones((Sq, k.shape[1]), bool)), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    dv = jnp.einsum("bhgqk,bqhgd->bkhd", p, dof)                 # summed over the group
    dp = jnp.einsum("bqhgd,bkhd->bhgqk", dof, vf)
    delta = jnp.sum(p * dp, axis=-1)
    dlse_g = dlse.astype(f32).reshape(B, Hkv, H // Hkv, Sq)
    ds = p * (dp - delta[..., None] + dlse_g[..., None])
    dq = jnp.einsum("bhgqk,bkhd->bqhgd", ds, kf) * scale
    dk = jnp.einsum("bhgqk,bqhgd->bkhd", ds, qf) * scale        # summed over the group
    return dq.reshape(q.shape).astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def attention_backward_kernels(q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array,
                               lse: jax.Array, do: jax.Array, dlse: jax.Array, *, causal: bool,
                               scale: float, variant_name: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The VJP of ``(o, lse)`` as kernel launches: what ``jax.grad`` of
    :func:`flash_attention` runs.

    ``"sm_90a"`` runs the Hopper backward (:mod:`._attention_bwd_sm90`: TMA,
    mbarriers, ``wgmma``); ``"sm_80"`` and ``"sm_100a"`` run the Ampere one
    (:mod:`._attention_bwd_sm80`) traced for their target. Arguments as
    :func:`attention_backward`'s; ``variant_name`` as
    :func:`attention_forward`'s.

    Returns:
        ``(dq, dk, dv)`` in the dtypes of ``q``, ``k``, ``v``.
    """
    if variant_name == "sm_90a":
        return attention_backward_sm90(q, k, v, o, lse, do, dlse, causal=causal, scale=scale)
    return attention_backward_sm80(q, k, v, o, lse, do, dlse, causal=causal, scale=scale,
                                   arch=variant_name)


_attention = custom_vjp(attention_forward, attention_backward_kernels)


def _check(q: Any, k: Any, v: Any, causal: Any, scale: Any) -> float:
    """Validate the arguments; the scale to use."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            raise SpecError(f"flash_attention: {name}: expected an array, got {type(x).__name__}")
        if len(shape) != 4:
            raise SpecError(f"flash_attention: {name}: expected 4 dims (B, S, H, D), got shape "
                            f"{tuple(shape)}")
    if str(q.dtype) not in _DTYPES:
        raise SpecError(f"flash_attention: q: expected dtype bfloat16 or float16, got {q.dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise SpecError(f"flash_attention: {name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
    B, Sq, H, D = q.shape
    if D not in HEAD_DIMS:
        raise SpecError(f"flash_attention: q: head dim (last axis) must be one of {HEAD_DIMS}, got {D}")
    if tuple(v.shape) != tuple(k.shape):
        raise SpecError(f"flash_attention: v: expected the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    Hkv = k.shape[2]
    if (k.shape[0], k.shape[3]) != (B, D):
        raise SpecError(f"flash_attention: k: expected (B, Skv, Hkv, D) = ({B}, Skv, Hkv, {D}) to "
                        f"match q {tuple(q.shape)}, got {tuple(k.shape)}")
    if Hkv == 0 or H % Hkv:
        raise SpecError(f"flash_attention: k: expected a head count Hkv dividing q's H = {H} "
                        f"(query head h reads KV head h // (H // Hkv)), got Hkv = {Hkv} in "
                        f"{tuple(k.shape)}")
    if Sq == 0 or k.shape[1] == 0:
        raise SpecError(f"flash_attention: q, k: sequence lengths must be positive, got Sq={Sq}, "
                        f"Skv={k.shape[1]}")
    if B * H > _GRID_Y:
        raise SpecError(f"flash_attention: q: batch × heads = {B * H} exceeds {_GRID_Y} (one CTA "
                        f"row per batch and head)")
    if not isinstance(causal, bool):
        raise SpecError(f"flash_attention: causal: expected a bool, got {causal!r}")
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (
            math.isfinite(scale) and scale > 0):
        raise SpecError(f"flash_attention: scale: expected a positive finite Python number "
                        f"(static), got {scale!r}")
    return float(scale)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                    scale: float | None = None, arch: str = "auto") -> jax.Array:
    """softmax(q·kᵀ·scale)·v per batch and head: one kernel launch.

    Differentiable: ``jax.grad`` runs two backward kernels (dK/dV, dQ; see
    :func:`attention_backward_kernels`).
    Under ``jax.vmap`` it stays one launch: the Ampere kernel runs the mapped
    axis as grid z, the Hopper and Blackwell ones get it folded into B.

    Args:
        q: (B, Sq, H, D), bfloat16 or float16, D of 64 or 128.
        k, v: (B, Skv, Hkv, D), the dtype of ``q``. ``Hkv`` divides ``H``:
            query head ``h`` attends with KV head ``h // (H // Hkv)``
            (grouped-query attention; ``Hkv = 1`` is multi-query, ``Hkv =
            H`` multi-head), as in ``jax.nn.dot_product_attention``. The
            kernel reads the shared KV head in place.
        causal: mask as ``jax.nn.dot_product_attention(..., is_causal=True)``
            does: query ``i`` sees keys ``j <= i``.
        scale: the factor on the scores; default ``1/sqrt(D)``. A static
            positive number.
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"`` (module
            docstring).

    Returns:
        o (B, Sq, H, D) in the dtype of ``q``.

    Raises:
        SpecError: an argument of the wrong shape, dtype or value (the
            message names it: e.g. ``k`` when its head count does not
            divide q's or its batch or head dim differs from q's, ``v``
            when its shape is not k's), or an ``arch`` with no variant.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxptx.kernels.attention import flash_attention
        >>> q = jnp.ones((1, 64, 1, 64), jnp.bfloat16)
        >>> flash_attention(q, q, q, causal=True, arch="sm_80").shape
        (1, 64, 1, 64)
        >>> q4, kv = jnp.ones((1, 64, 4, 64), jnp.bfloat16), q   # 4 query heads, 1 KV head
        >>> flash_attention(q4, kv, kv, arch="sm_80").shape
        (1, 64, 4, 64)
    """
    scale = _check(q, k, v, causal, scale)
    name = variant(arch, "flash_attention", VARIANTS)
    o, _ = _attention(q, k, v, causal=causal, scale=scale, variant_name=name)
    return o

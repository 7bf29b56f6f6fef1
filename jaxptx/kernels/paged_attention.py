"""``paged_attention``: decode attention over a paged KV cache, as vLLM and FlashInfer define it.

One query token per sequence attends to that sequence's cached keys and
values, which live in fixed-size pages of a shared pool: token ``t`` of
sequence ``b`` is row ``t % page_size`` of page ``block_tables[b, t //
page_size]``. Query head ``h`` reads KV head ``h // (Nq // Nkv)``
(grouped-query attention; ``Nq == Nkv`` is multi-head attention).

Kernels (:mod:`._paged_sm80`, :mod:`._paged_combine`): one CTA per
(split, KV head × 16 query heads, sequence) runs ``mma.sync`` over the
pages with an f32 online softmax. When a sequence can be longer than
``SPLIT_TOKENS`` = 512 tokens (``max_pages · page_size > 512``, decided from
the shapes), its pages are split into 512-token chunks across CTAs, each
writing a partial (O, max, sum), and a second kernel combines the chunks in
a fixed order (deterministic; no atomics). Otherwise one launch writes o.

Variants (``arch``): ``"sm_80"`` is that design; ``"sm_90a"`` and
``"sm_100a"`` are the same code traced for their targets (``cp.async``,
``ldmatrix`` and ``mma.sync`` run on both; a decode step is bound by
reading the pages, and the 16-row tile of a KV head's query heads is too
small for ``wgmma``'s 64 rows).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from ..types import bf16, f16
from ._arch import VARIANTS, variant
from ._paged_combine import combine_kernel
from ._paged_sm80 import HEAD_DIMS, PAGE_SIZES, SPLIT_TOKENS, cdiv, grid_y, paged_kernel

__all__ = ["SPLIT_TOKENS", "paged_attention", "paged_forward"]

LOG2E = 1.4426950408889634
_DTYPES = {"bfloat16": bf16, "float16": f16}
_GRID_LIMIT = 65535       # grid y (KV heads x query tiles) and z (sequences)


def paged_forward(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array,
                  lengths: jax.Array, *, scale: float, variant_name: str) -> jax.Array:
    """The kernel launches for checked arguments: one, or the split pass and
    the combine when ``max_pages · page_size > SPLIT_TOKENS``."""
    dtype, d = _DTYPES[str(q.dtype)], q.shape[-1]
    n_splits = cdiv(block_tables.shape[1] * k_pages.shape[1], SPLIT_TOKENS)
    scale_log2 = float(scale) * LOG2E
    if n_splits == 1:
        return paged_kernel(dtype, d, variant_name, False)(q, k_pages, v_pages, block_tables, lengths,
                                                           scale_log2=scale_log2)
    o_part, ml = paged_kernel(dtype, d, variant_name, True)(q, k_pages, v_pages, block_tables, lengths,
                                                            scale_log2=scale_log2, S=n_splits)
    return combine_kernel(dtype, d, variant_name)(o_part, ml, lengths, scale_log2=scale_log2)


@functools.cache
def _batch_folded(scale: float, variant_name: str) -> Callable[..., jax.Array]:
    """:func:`paged_forward` whose ``jax.vmap`` folds the mapped axis into the
    sequences: one launch (two with splits) over N·B sequences. Mapped page
    pools are concatenated and each element's table shifted by its offset
    in the pool; a pool shared by the batch is not copied."""

    @jax.custom_batching.custom_vmap
    def folded(q, k_pages, v_pages, block_tables, lengths):
        return paged_forward(q, k_pages, v_pages, block_tables, lengths, scale=scale,
                             variant_name=variant_name)

    @folded.def_vmap
    def rule(size: int, batched: list[bool], q, k_pages, v_pages, block_tables, lengths):
        def full(x: jax.Array, b: bool) -> jax.Array:
            return x if b else jnp.broadcast_to(x, (size, *x.shape))
        q, block_tables, lengths = (full(x, b) for x, b in zip((q, block_tables, lengths),
                                                                (batched[0], *batched[3:])))
        if batched[1] or batched[2]:
            k_pages, v_pages = full(k_pages, batched[1]), full(v_pages, batched[2])
            n_pages = k_pages.shape[1]
            block_tables = block_tables + (jnp.arange(size, dtype=jnp.int32) * n_pages)[:, None, None]
            k_pages, v_pages = (x.reshape(-1, *x.shape[2:]) for x in (k_pages, v_pages))
        if size * q.shape[1] > _GRID_LIMIT:
            raise SpecError(f"paged_attention: vmap of {size} over {q.shape[1]} sequences gives "
                            f"{size * q.shape[1]}, more than {_GRID_LIMIT} (one CTA row each)")
        o = folded(q.reshape(-1, *q.shape[2:]), k_pages, v_pages, block_tables.reshape(-1, block_tables.shape[-1]),
                   lengths.reshape(-1))
        return o.reshape(size, -1, *o.shape[1:]), True

    return folded


def paged_attention(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array,
                    lengths: jax.Array, *, scale: float | None = None, arch: str = "auto") -> jax.Array:
    """Decode attention of one query token per sequence over a paged KV cache.

    For sequence ``b`` and query head ``h`` with ``g = h // (Nq // Nkv)``:
    the keys ``K[t] = k_pages[block_tables[b, t // page_size], t % page_size,
    g]`` for ``t < lengths[b]`` (values likewise), and ``o[b, h] =
    softmax(K · q[b, h] · scale) · V``, the softmax in f32. A sequence of
    length 0 attends to nothing: its output is 0. Table entries past
    ``cdiv(lengths[b], page_size)`` are never read.

    Works under ``jax.jit`` and ``jax.vmap`` (the mapped axis is folded into
    the sequences: one launch, or two with splits). Not differentiable.

    Args:
        q: (B, Nq, H), bfloat16 or float16, H of 64 or 128.
        k_pages, v_pages: (P, page_size, Nkv, H), the dtype of ``q``;
            page_size 16, 32 or 64; Nq a multiple of Nkv.
        block_tables: (B, max_pages) int32 page indices into ``P``.
        lengths: (B,) int32 tokens of each sequence, ``0 <= lengths[b] <=
            max_pages · page_size``. Concrete tables and lengths are
            checked; traced ones are not (the kernel then clamps lengths to
            that range and page indices to ``[0, P)``, so reads stay in
            bounds).
        scale: the factor on the scores; default ``1/sqrt(H)``. A static
            positive number.
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"`` (module
            docstring).

    Returns:
        o (B, Nq, H) in the dtype of ``q``.

    Raises:
        SpecError: an argument of the wrong shape, dtype or value (the
            message names it), or an ``arch`` with no variant.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxptx.kernels import paged_attention
        >>> q = jnp.ones((2, 4, 64), jnp.bfloat16)
        >>> pages = jnp.ones((3, 16, 1, 64), jnp.bfloat16)
        >>> tables = jnp.array([[2, 0], [1, 1]], jnp.int32)
        >>> o = paged_attention(q, pages, pages, tables, jnp.array([20, 0], jnp.int32), arch="sm_80")
        >>> o.shape, float(o[0, 0, 0]), float(o[1, 0, 0])
        ((2, 4, 64), 1.0, 0.0)
    """
    scale = _check(q, k_pages, v_pages, block_tables, lengths, scale)
    name = variant(arch, "paged_attention", VARIANTS)
    return _batch_folded(scale, name)(q, k_pages, v_pages, block_tables, lengths)


def _array(name: str, x: Any, ndim: int, dims: str) -> None:
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise SpecError(f"paged_attention: {name}: expected an array, got {type(x).__name__}")
    if len(shape) != ndim:
        raise SpecError(f"paged_attention: {name}: expected {ndim} dims {dims}, got shape {tuple(shape)}")


def _check(q: Any, k: Any, v: Any, tables: Any, lengths: Any, scale: Any) -> float:
    """Validate the arguments; the scale to use."""
    for name, x, ndim, dims in (("q", q, 3, "(B, Nq, H)"), ("k_pages", k, 4, "(P, page_size, Nkv, H)"),
                                ("v_pages", v, 4, "(P, page_size, Nkv, H)"),
                                ("block_tables", tables, 2, "(B, max_pages)"), ("lengths", lengths, 1, "(B,)")):
        _array(name, x, ndim, dims)
    if str(q.dtype) not in _DTYPES:
        raise SpecError(f"paged_attention: q: expected dtype bfloat16 or float16, got {q.dtype}")
    for name, x in (("k_pages", k), ("v_pages", v)):
        if x.dtype != q.dtype:
            raise SpecError(f"paged_attention: {name}: expected the dtype of q ({q.dtype}), got {x.dtype}")
    B, Nq, H = q.shape
    P, page_size, Nkv, Hk = k.shape
    if H not in HEAD_DIMS:
        raise SpecError(f"paged_attention: q: head dim (last axis) must be one of {HEAD_DIMS}, got {H}")
    if Hk != H:
        raise SpecError(f"paged_attention: k_pages: expected head dim {H} (q's), got shape {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise SpecError(f"paged_attention: v_pages: expected the shape of k_pages {tuple(k.shape)}, "
                        f"got {tuple(v.shape)}")
    if page_size not in PAGE_SIZES:
        raise SpecError(f"paged_attention: k_pages: page_size (axis 1) must be one of {PAGE_SIZES}, "
                        f"got {page_size}")
    if P == 0 or Nkv == 0 or Nq % Nkv:
        raise SpecError(f"paged_attention: q: Nq = {Nq} query heads must be a positive multiple of "
                        f"Nkv = {Nkv} (k_pages' axis 2)")
    for name, x, dims in (("block_tables", tables, "(B, max_pages) with max_pages > 0"),
                          ("lengths", lengths, "(B,)")):
        if np.dtype(x.dtype) != np.int32:
            raise SpecError(f"paged_attention: {name}: expected dtype int32, got {x.dtype}")
        if x.shape[0] != B or 0 in x.shape:
            raise SpecError(f"paged_attention: {name}: expected shape {dims}, B = {B} (q's), got "
                            f"{tuple(x.shape)}")
    if B == 0 or B > _GRID_LIMIT or grid_y(Nq, Nkv) > _GRID_LIMIT:
        raise SpecError(f"paged_attention: q: expected 1 to {_GRID_LIMIT} sequences and KV heads × "
                        f"query tiles, got B = {B}, {grid_y(Nq, Nkv)}")
    _check_values(tables, lengths, P, page_size)
    if scale is None:
        return 1.0 / math.sqrt(H)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise SpecError(f"paged_attention: scale: expected a positive finite Python number (static), "
                        f"got {scale!r}")
    return float(scale)


def _check_values(tables: Any, lengths: Any, n_pages: int, page_size: int) -> None:
    """Concrete lengths within ``[0, max_pages · page_size]`` and the table
    entries they use within ``[0, P)``; traced values are the kernel's to clamp."""
    if isinstance(tables, jax.core.Tracer) or isinstance(lengths, jax.core.Tracer):
        return
    lengths, tables = np.asarray(lengths), np.asarray(tables)
    limit = tables.shape[1] * page_size
    bad = np.flatnonzero((lengths < 0) | (lengths > limit))
    if bad.size:
        i = int(bad[0])
        raise SpecError(f"paged_attention: lengths: expected 0 <= lengths[b] <= max_pages · page_size = "
                        f"{limit}, got lengths[{i}] = {int(lengths[i])}")
    used = np.arange(tables.shape[1])[None, :] < -(-lengths[:, None] // page_size)
    bad_b, bad_p = np.nonzero(used & ((tables < 0) | (tables >= n_pages)))
    if bad_b.size:
        b, p = int(bad_b[0]), int(bad_p[0])
        raise SpecError(f"paged_attention: block_tables: expected page indices in [0, {n_pages}) "
                        f"(k_pages' axis 0), got block_tables[{b}, {p}] = {int(tables[b, p])}")

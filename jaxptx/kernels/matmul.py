"""``matmul``: ``jnp.dot`` of bf16/f16 matrices with f32 accumulation, as one
jaxptx kernel per call.

Three variants, one per GPU generation (``arch=``; ``"auto"`` picks from the
target, see :mod:`jaxptx.kernels._arch`):

* ``"sm_80"`` (Ampere): a multi-stage ``cp.async`` ring, ``ldmatrix`` from
  XOR-swizzled shared memory, ``mma.sync.m16n8k16``;
* ``"sm_90a"`` (Hopper): TMA into 128-byte-swizzled stages, full/empty
  mbarriers, a producer warp and ``wgmma`` consumer warpgroups;
* ``"sm_100a"`` (Blackwell): TMA, ``tcgen05.mma`` into tensor memory,
  ``tcgen05.commit`` to mbarriers, a tensor-memory epilogue.

Every variant computes a batch of products ``(G, M, K) @ (G, K, N)`` in one
launch, so ``jax.vmap(matmul)`` folds the mapped axis into G (one launch,
not one per element) and ``grouped`` problems of equal shape need no loop.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from ..errors import SpecError
from ._arch import variant

__all__ = ["matmul"]

# Where each variant lives: module (relative to this package) and function,
# imported on first use.
_VARIANTS = {"sm_80": ("._matmul_sm80", "matmul_sm80"),
             "sm_90a": ("._matmul_sm90", "matmul_sm90"),
             "sm_100a": ("._matmul_sm100", "matmul_sm100")}
_INPUT_DTYPES = (jnp.bfloat16, jnp.float16)
_OUTPUT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
# Rows of A and B must be whole 16-byte units for cp.async and TMA: K and N
# are padded with zeros to a multiple of this many 2-byte elements.
_ALIGN = 8


def _variant_fn(name: str):
    module, fn = _VARIANTS[name]
    return getattr(importlib.import_module(module, __package__), fn)


def matmul(a: Any, b: Any, *, preferred_element_type: Any = jnp.float32, arch: str = "auto") -> jax.Array:
    """``jnp.dot(a, b, preferred_element_type=...)`` for bf16 or f16 ``a``
    (M, K) and ``b`` (K, N), accumulated in f32, in one jaxptx kernel launch.

    Args:
        a: (M, K) bf16 or f16.
        b: (K, N), the same dtype as ``a``.
        preferred_element_type: the output dtype: ``float32`` (default, the
            accumulator as is), ``bfloat16`` or ``float16`` (rounded from it).
        arch: ``"auto"`` (the target's newest variant), ``"sm_80"``,
            ``"sm_90a"`` or ``"sm_100a"``.

    Any M, N, K: edges that are not a multiple of the kernel's tile are
    masked (or zero-filled by TMA); K and N that are not a multiple of 8 are
    zero-padded first (a copy; rows must be whole 16-byte units).

    Under ``jax.vmap`` it stays one launch (the mapped axis becomes the
    kernel's group axis). ``jax.grad`` works: the backward is two more
    calls of this op, ``dA = dC·Bᵀ`` and ``dB = Aᵀ·dC``, with the cotangent
    ``dC`` rounded to the input dtype first (the usual mixed-precision
    choice; gradients come out in the input dtype).

    Raises:
        SpecError: a shape, dtype or ``arch`` the op does not take, naming
            the argument, what was expected and what came.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxptx.kernels import matmul
        >>> a = jnp.ones((64, 32), jnp.bfloat16); b = jnp.ones((32, 16), jnp.bfloat16)
        >>> float(matmul(a, b, arch="sm_80")[0, 0])
        32.0
    """
    out_dtype = _check(a, b, preferred_element_type)
    name = variant(arch, "matmul", tuple(_VARIANTS))
    return _matmul(name, jnp.dtype(out_dtype).name, a, b)


def _check(a: Any, b: Any, preferred_element_type: Any) -> Any:
    for what, x in (("a", a), ("b", b)):
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2:
            raise SpecError(f"matmul {what}: expected a 2-d array, got "
                            f"{'shape ' + str(tuple(shape)) if shape is not None else type(x).__name__}"
                            f" (use jax.vmap for batches)")
        if jnp.dtype(x.dtype) not in [jnp.dtype(d) for d in _INPUT_DTYPES]:
            raise SpecError(f"matmul {what}: expected bfloat16 or float16, got {jnp.dtype(x.dtype).name}"
                            f" (cast first, or use jnp.dot for other dtypes)")
    if a.dtype != b.dtype:
        raise SpecError(f"matmul: a and b must have the same dtype, got {jnp.dtype(a.dtype).name} "
                        f"and {jnp.dtype(b.dtype).name}")
    if a.shape[1] != b.shape[0]:
        raise SpecError(f"matmul: a is {tuple(a.shape)} and b is {tuple(b.shape)}; expected "
                        f"b.shape[0] == a.shape[1] (contracting K)")
    try:
        out = jnp.dtype(preferred_element_type)
    except TypeError:
        out = None
    if out not in [jnp.dtype(d) for d in _OUTPUT_DTYPES]:
        raise SpecError(f"matmul preferred_element_type: expected float32, bfloat16 or float16, "
                        f"got {preferred_element_type!r}")
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _matmul(name: str, out_dtype: str, a: jax.Array, b: jax.Array) -> jax.Array:
    m, n = a.shape[0], b.shape[1]
    pad_k, pad_n = -a.shape[1] % _ALIGN, -n % _ALIGN
    if pad_k:
        a = jnp.pad(a, ((0, 0), (0, pad_k)))
        b = jnp.pad(b, ((0, pad_k), (0, 0)))
    if pad_n:
        b = jnp.pad(b, ((0, 0), (0, pad_n)))
    c = _grouped(name)(a[None], b[None])[0]
    if pad_n:
        c = c[:, :n]
    assert c.shape == (m, n)
    return c.astype(out_dtype)


def _matmul_fwd(name: str, out_dtype: str, a: jax.Array, b: jax.Array):
    return _matmul(name, out_dtype, a, b), (a, b)


def _matmul_bwd(name: str, out_dtype: str, saved: tuple, dc: jax.Array):
    a, b = saved
    dc = dc.astype(a.dtype)
    da = _matmul(name, "float32", dc, b.T)
    db = _matmul(name, "float32", a.T, dc)
    return da.astype(a.dtype), db.astype(b.dtype)


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


@functools.cache
def _grouped(name: str):
    """The variant's (G, M, K) @ (G, K, N) function, with a vmap rule that
    folds a mapped axis into G (one launch under any number of vmaps)."""
    fn = _variant_fn(name)

    @custom_vmap
    def grouped(a3: jax.Array, b3: jax.Array) -> jax.Array:
        return fn(a3, b3)

    @grouped.def_vmap
    def _fold(axis_size: int, in_batched: list, a4: jax.Array, b4: jax.Array):
        a4 = a4 if in_batched[0] else jnp.broadcast_to(a4, (axis_size, *a4.shape))
        b4 = b4 if in_batched[1] else jnp.broadcast_to(b4, (axis_size, *b4.shape))
        v, g = a4.shape[:2]
        c = grouped(a4.reshape(v * g, *a4.shape[2:]), b4.reshape(v * g, *b4.shape[2:]))
        return c.reshape(v, g, *c.shape[1:]), True

    return grouped

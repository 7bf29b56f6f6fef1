"""``matmul_reduce_scatter``: ``psum_scatter(x @ w)`` over a mesh axis with the
reduction overlapped with the matmul, in one jaxptx kernel per device.

Inside ``jax.shard_map`` each device holds its columns of ``x`` (M, K/W)
and its rows of ``w`` (K/W, N); the full product ``x @ w`` is the sum of
the devices' partial products, and device ``r`` gets rows ``r * M/W ..``
of that sum. Each CTA of each device computes one (128 x 128) tile
position of the partial product for every owner's slice in ring order
(``r + 1``, ``r + 2``, ..., its own slice last) and stores each finished
tile straight into its owner's memory while it computes the next one; the
owner then sums its own tile with the W - 1 it was sent.

Choices (see :mod:`._mrs_protocol` for the protocol):

* **Per-source slots, summed by the owner in rank order**, not
  ``red.add.f32`` into the owner: the f32 sum is ``P0 + P1 + ... +
  P(W-1)`` in that order on every device and every run, whatever order the
  tiles arrive in (deterministic; it may differ from XLA's own
  ``psum_scatter`` in the last bits, as any other summation order would).
* ``.sys`` release/acquire flags per tile and source, holding call numbers
  (epochs), and slots double-buffered by the call's parity, so one state
  serves calls that run back to back. This function passes a fresh zero
  state each call (XLA's buffers are per call); the kernels read the epoch
  from it.

Variants (``arch``): ``"sm_90a"``: TMA + ``wgmma`` from a warp-specialised
mbarrier pipeline (:mod:`._mrs_sm90`); ``"sm_80"``: the library's
``cp.async`` + ``ldmatrix`` + ``mma.sync`` main loop (:mod:`._mrs_sm80`).
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from ._arch import variant

__all__ = ["matmul_reduce_scatter"]

_OP = "matmul_reduce_scatter"
_VARIANTS = {"sm_80": "._mrs_sm80", "sm_90a": "._mrs_sm90"}
_DTYPES = {"bfloat16": "bf16", "float16": "f16"}
_TILE = 128           # both variants' CTA tile: the flags have one row per tile position


def matmul_reduce_scatter(x: Any, w: Any, axis_name: str, *, arch: str | None = None) -> jax.Array:
    """``jax.lax.psum_scatter(x @ w, axis_name, scatter_dimension=0,
    tiled=True)`` with the reduction overlapped with the matmul; call it
    inside ``jax.shard_map``.

    Args:
        x: this device's (M, K/W) columns of ``x``, bf16 or f16.
        w: this device's (K/W, N) rows of ``w``, the dtype of ``x``.
        axis_name: the mesh axis the contraction is sharded over (W devices).
        arch: ``None`` or ``"auto"`` (the target's variant), ``"sm_90a"``
            or ``"sm_80"``.

    Returns:
        This device's (M/W, N) float32 rows of the sum over the axis.

    Raises:
        SpecError: not inside ``jax.shard_map`` over ``axis_name``, shapes
            that do not match or divide (M by W; K/W and N multiples of 8),
            dtypes other than bf16/f16 (or mixed), or an ``arch`` with no
            variant.

    Example (on 2 devices, ``x`` (M, K) and ``w`` (K, N) bf16)::

        f = jax.shard_map(lambda a, b: matmul_reduce_scatter(a, b, "d"), mesh=mesh,
                          in_specs=(P(None, "d"), P("d", None)), out_specs=P("d"))
        f(x, w)          # == jax.lax.psum_scatter over "d" of the partial products
    """
    out, _ = _with_state(x, w, axis_name, arch=arch, state=None)
    return out


def _with_state(x: Any, w: Any, axis_name: str, *, arch: str | None,
                state: tuple[Any, Any] | None) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """The op with its state ``(slots, flags)`` passed in (``None``: fresh
    zeros) and the updated state returned: a state threaded through calls
    counts them in its epochs (tests use this; see :mod:`._mrs_protocol`)."""
    dtype = _check(x, w)
    world = _axis_size(axis_name)
    (m, k), n = x.shape, w.shape[1]
    if m % world:
        raise SpecError(f"{_OP} x: its {m} rows must divide among the {world} devices of axis "
                        f"{axis_name!r}")
    if k % 8 or n % 8:
        raise SpecError(f"{_OP}: x's columns per device ({k}) and w's columns ({n}) must be "
                        f"multiples of 8 (16-byte rows); pad them")
    name = variant("auto" if arch is None else arch, _OP, tuple(_VARIANTS))
    s = m // world
    tiles = -(-s // _TILE) * -(-n // _TILE)
    if state is None:
        state = (jnp.zeros((2, world, s, n), jnp.float32), jnp.zeros((tiles, world), jnp.uint32))
    kernel = importlib.import_module(_VARIANTS[name], __package__).mrs_kernel(dtype)
    if name == "sm_90a":
        x, w = x.reshape(world, s, k), w.reshape(1, k, n)
    out, slots, flags = kernel(x, w, *state, axis_name=axis_name)
    return out, (slots, flags)


def _check(x: Any, w: Any) -> str:
    """The PTX name of the operands' dtype, after checking ranks, dtypes and K."""
    for what, a in (("x", x), ("w", w)):
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != 2:
            got = f"shape {tuple(shape)}" if shape is not None else type(a).__name__
            raise SpecError(f"{_OP} {what}: expected a 2-d array (this device's shard), got {got}")
        name = np.dtype(a.dtype).name
        if name not in _DTYPES:
            raise SpecError(f"{_OP} {what}: expected bfloat16 or float16, got {name}")
    if x.dtype != w.dtype:
        raise SpecError(f"{_OP}: x and w must have the same dtype, got {np.dtype(x.dtype).name} "
                        f"and {np.dtype(w.dtype).name}")
    if x.shape[1] != w.shape[0]:
        raise SpecError(f"{_OP}: x is {tuple(x.shape)} and w is {tuple(w.shape)} on this device; "
                        f"expected w.shape[0] == x.shape[1] (the contraction's shard)")
    return _DTYPES[np.dtype(x.dtype).name]


def _axis_size(axis_name: Any) -> int:
    if not isinstance(axis_name, str):
        raise SpecError(f"{_OP} axis_name: expected the name of a mesh axis, got {axis_name!r}")
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError:
        raise SpecError(f"{_OP}: axis_name={axis_name!r} is not a mesh axis here (called outside "
                        f"jax.shard_map, or inside one whose mesh has no axis {axis_name!r})") from None

"""Collective kernels: ``all_reduce`` and ``all_gather_matmul``, called inside
``jax.shard_map``; each is one jaxptx kernel launch per device whose CTAs
read and write the other devices of the mesh axis (``@kernel(peers=...)``).
On a machine without GPUs the shards meet in one emulated node
(:mod:`jaxptx.jax._peer_cpu`).

Example (inside a shard_map over axis ``"d"``)::

    total = all_reduce(x, "d")                 # == jax.lax.psum(x, "d")
    y = all_gather_matmul(x, w, "d")           # == all_gather(x, "d", tiled=True) @ w
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from ..runtime import detect_arch
from ._arch import variant
from ._collective_gather_sm80 import gather_kernel_sm80, layout_sm80
from ._collective_gather_sm90 import gather_kernel_sm90, layout_sm90
from ._collective_reduce import METHODS, ctas_for, reduce_kernel, vec_of

__all__ = ["ONE_SHOT_MAX_BYTES", "all_gather_matmul", "all_reduce", "choose_method"]

# Per-device bytes up to which "auto" all-reduces in one shot: below this the
# all-reduce is latency-bound and one round of reads beats two rounds of
# barriers; above it two-shot moves 2/W of the data per device instead of all of it.
ONE_SHOT_MAX_BYTES = 256 * 1024
_REDUCE_DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def _axis_size(op: str, axis_name: Any) -> int:
    """The size of mesh axis ``axis_name`` of the enclosing ``jax.shard_map``.

    Raises:
        SpecError: not a string, or no such axis here (outside shard_map).
    """
    if not isinstance(axis_name, str):
        raise SpecError(f"{op} axis_name: expected the name of a mesh axis of the enclosing "
                        f"jax.shard_map (a str), got {axis_name!r}")
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError:
        raise SpecError(f"{op}: axis_name={axis_name!r} is not a mesh axis here (called outside "
                        f"jax.shard_map, or inside one whose mesh has no axis {axis_name!r}); "
                        f"call it inside jax.shard_map over a mesh with that axis") from None


def _has_multicast() -> bool:
    """Whether the platform has multicast objects: the emulator always has;
    a GPU says so through ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``."""
    if detect_arch() is None:
        return True
    try:
        from cuda.bindings import driver  # optional heavy dependency: only with a GPU
        err, dev = driver.cuDeviceGet(0)
        err2, ok = driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev)
        return not int(err) and not int(err2) and bool(ok)
    except Exception:   # noqa: BLE001 - no driver or an older one: no multicast
        return False


def choose_method(nbytes: int, arch: str, multicast: bool) -> str:
    """What ``method="auto"`` runs for ``nbytes`` per device on variant
    ``arch``: ``"one_shot"`` up to :data:`ONE_SHOT_MAX_BYTES`; above it
    ``"multimem"`` where the target has it (sm_90 and later) and the platform
    has a multicast object, else ``"two_shot"``."""
    if nbytes <= ONE_SHOT_MAX_BYTES:
        return "one_shot"
    return "multimem" if multicast and arch != "sm_80" else "two_shot"


def all_reduce(x: Any, axis_name: str, *, method: str = "auto", arch: str = "auto") -> jax.Array:
    """``jax.lax.psum(x, axis_name)`` as one jaxptx kernel per device, called
    inside ``jax.shard_map``: the sum over the devices of the mesh axis,
    accumulated in f32 and rounded once to ``x``'s dtype; every device gets
    the same bits.

    Args:
        x: an array of float32, bfloat16 or float16, any shape (the same on
            every device).
        axis_name: the mesh axis of the enclosing ``jax.shard_map`` to sum over.
        method: ``"one_shot"`` (every device reads every device's ``x``),
            ``"two_shot"`` (reduce-scatter then all-gather over peer
            pointers), ``"multimem"`` (``multimem.ld_reduce`` +
            ``multimem.st`` over the multicast address; sm_90+) or
            ``"auto"`` (:func:`choose_method`: one-shot up to 256 KiB per
            device, multimem above where the platform has multicast, else
            two-shot).
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``: the
            kernel's target.

    Returns:
        The sum, shaped and typed as ``x``.

    Raises:
        SpecError: outside ``jax.shard_map`` or an unknown axis, a dtype
            other than f32/bf16/f16, an unknown ``method`` or ``arch``, or
            ``"multimem"`` on sm_80.
    """
    world = _axis_size("all_reduce", axis_name)
    dtype = _REDUCE_DTYPES.get(np.dtype(x.dtype).name) if hasattr(x, "dtype") else None
    if dtype is None:
        got = np.dtype(x.dtype).name if hasattr(x, "dtype") else type(x).__name__
        raise SpecError(f"all_reduce x: expected float32, bfloat16 or float16, got {got}")
    if method != "auto" and method not in METHODS:
        raise SpecError(f"all_reduce method: expected 'auto' or one of {', '.join(map(repr, METHODS))}, "
                        f"got {method!r}")
    name = variant(arch, "all_reduce")
    if method == "auto":
        method = choose_method(x.size * np.dtype(x.dtype).itemsize, name, _has_multicast())
    if method == "multimem" and name == "sm_80":
        raise SpecError("all_reduce method='multimem' needs sm_90 or later (multimem.ld_reduce); "
                        "arch is sm_80: use method='two_shot'")
    if x.size == 0:
        return jnp.asarray(x)
    flat = jnp.ravel(x)
    pad = -flat.size % (world * vec_of(dtype))
    if pad:
        flat = jnp.pad(flat, (0, pad))
    ctas = ctas_for(method, flat.size, dtype, world)
    k = reduce_kernel(method, dtype, name)
    out = k(flat, jnp.zeros((ctas,), jnp.uint32), axis_name=axis_name)
    return out[:x.size].reshape(x.shape)


def _check_gather(x: Any, w: Any) -> str:
    """The PTX type name of ``x``/``w`` after checking ranks, dtypes and K.

    Raises:
        SpecError: naming the argument: not 2-d, not bf16/f16, mixed dtypes,
            or ``w.shape[0] != x.shape[1]``.
    """
    for what, a in (("x", x), ("w", w)):
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != 2:
            got = f"shape {tuple(shape)}" if shape is not None else type(a).__name__
            raise SpecError(f"all_gather_matmul {what}: expected a 2-d array, got {got}")
        if np.dtype(a.dtype).name not in ("bfloat16", "float16"):
            raise SpecError(f"all_gather_matmul {what}: expected bfloat16 or float16, got "
                            f"{np.dtype(a.dtype).name}")
    if x.dtype != w.dtype:
        raise SpecError(f"all_gather_matmul: x and w must have the same dtype, got "
                        f"{np.dtype(x.dtype).name} and {np.dtype(w.dtype).name}")
    if x.shape[1] != w.shape[0]:
        raise SpecError(f"all_gather_matmul: x is {tuple(x.shape)} and w is {tuple(w.shape)}; "
                        f"expected w.shape[0] == x.shape[1] (contracting K)")
    return "bf16" if np.dtype(x.dtype).name == "bfloat16" else "f16"


def all_gather_matmul(x: Any, w: Any, axis_name: str, *, arch: str = "auto") -> jax.Array:
    """``jax.lax.all_gather(x, axis_name, tiled=True) @ w`` as one jaxptx
    kernel per device, called inside ``jax.shard_map``, the gather
    overlapped with the matmul: each device pushes its rows of ``x`` into
    every other device's gather buffer (flags per block of 128 rows) and
    computes its own rows' tiles first, then each other shard's as its rows
    arrive (:mod:`jaxptx.kernels._collective_gather`).

    Args:
        x: (R, K) bfloat16 or float16: this device's rows (x sharded on rows).
        w: (K, N), the same dtype: this device's columns (w sharded on columns).
        axis_name: the mesh axis of the enclosing ``jax.shard_map`` that
            shards ``x``'s rows.
        arch: ``"auto"``, ``"sm_80"`` (``mma.sync``) or ``"sm_90a"`` (TMA +
            ``wgmma``).

    Returns:
        (W R, N) float32: every device's rows, in rank order, times ``w``.
        K and N that are not multiples of 8 are zero-padded first (a copy).

    Raises:
        SpecError: outside ``jax.shard_map`` or an unknown axis, not 2-d,
            not bf16/f16, mixed dtypes, mismatched K, or an unknown ``arch``.
    """
    world = _axis_size("all_gather_matmul", axis_name)
    dtype = _check_gather(x, w)
    name = variant(arch, "all_gather_matmul", ("sm_80", "sm_90a"))
    r, n = x.shape[0], w.shape[1]
    pad_k, pad_n = -x.shape[1] % 8, -n % 8
    if pad_k:
        x, w = jnp.pad(x, ((0, 0), (0, pad_k))), jnp.pad(w, ((0, pad_k), (0, 0)))
    if pad_n:
        w = jnp.pad(w, ((0, 0), (0, pad_n)))
    if name == "sm_80":
        k, lay = gather_kernel_sm80(dtype), layout_sm80(r, x.shape[1], w.shape[1], world)
    else:
        k, lay = gather_kernel_sm90(dtype), layout_sm90(r, x.shape[1], w.shape[1], world)
    flag = jnp.zeros((lay.slots,), jnp.uint32)
    gathered = jnp.zeros((world, r, x.shape[1]), x.dtype)
    out = k(x, w, flag, gathered, axis_name=axis_name).reshape(world * r, w.shape[1])
    return out[:, :n] if pad_n else out

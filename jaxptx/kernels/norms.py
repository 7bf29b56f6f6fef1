"""Row normalisations and gated activations as JAX ops, each one jaxptx kernel.

``rms_norm``, ``layer_norm`` and ``softmax`` normalise along the last axis
of ``x`` (any leading dims are flattened into rows; one CTA per row, or one
warp per row and four rows per CTA for rows of at most 16 values a lane);
``swiglu`` is elementwise. Inputs are f32, bf16 or f16 and the output has
the input's dtype; statistics (sums, maxima, the inverse deviation) are kept
in f32. Loads and stores are 16 bytes wide (``ld.global.v4.b32``) where the
row length keeps every row aligned, narrower otherwise (see
:mod:`jaxptx.kernels._norms_rows`), so any row length works.

Each call is one kernel launch: one primitive in ``jax.make_jaxpr``, also
under ``jax.vmap`` (the kernels are ``batch="z"``: the batch runs as grid
z). Under ``jax.grad`` the ops are differentiable through
:func:`jaxptx.custom_vjp`. ``rms_norm`` and ``layer_norm`` have backward
kernels (:mod:`jaxptx.kernels._norms_backward`): their forward kernels also
write each row's f32 statistics (``rstd``; ``mean`` and ``rstd``), 4 or 8
bytes a row, which the backward reads instead of recomputing them; one
launch computes ``dx`` and per-worker column sums of ``dy * xhat`` (and
``dy``) into an f32 scratch, a second sums that scratch into ``dw`` (and
``db``) in a fixed order, with no atomics, so gradients are bitwise
reproducible. ``softmax`` and ``swiglu`` differentiate in plain ``jnp``
(XLA): softmax from its saved output, ``dx = y * (dy - sum(dy * y))``,
swiglu by recomputing its f32 reference. The ``*_reference`` functions are
the ops in ``jnp``, the tests' oracle.

``arch`` picks the variant: ``"sm_80"``, ``"sm_90a"``, ``"sm_100a"`` or
``"auto"`` (see :func:`jaxptx.kernels._arch.variant`). The code is the same
for all three; each is its own kernel object, traced and compiled for its
target.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxptx.kernels.norms import rms_norm
    >>> x = jnp.ones((2, 8), jnp.float32)
    >>> y = jax.jit(rms_norm)(x, jnp.full((8,), 2.0, jnp.float32))
    >>> bool(jnp.allclose(y, 2.0, rtol=1e-5))
    True
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from ..jax import custom_vjp
from ._arch import variant
from ._norms_backward import backward_plan, column_sum_kernel, row_backward_kernel
from ._norms_backward import workers as backward_workers
from ._norms_kernels import row_kernel, swiglu_kernel
from ._norms_rows import plan

__all__ = ["rms_norm", "layer_norm", "softmax", "swiglu"]

_DTYPES = {np.dtype(jnp.float32): "f32", np.dtype(jnp.bfloat16): "bf16", np.dtype(jnp.float16): "f16"}


# -- public ops ------------------------------------------------------------------------------

def rms_norm(x: Any, w: Any, eps: float = 1e-6, *, arch: str = "auto") -> jax.Array:
    """``y = x / sqrt(mean(x², axis=-1) + eps) * w`` over the last axis.

    Differentiable: ``jax.grad`` runs two backward kernels (``dx``, and
    ``dw`` summed over rows in a fixed order), reading the ``rstd`` per row
    the forward saved.

    Args:
        x: an array of shape ``(..., N)``, f32, bf16 or f16.
        w: the scale, shape ``(N,)``, ``x``'s dtype.
        eps: added to the mean square (a Python float: it is compiled in).
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        ``y``, ``x``'s shape and dtype.

    Raises:
        SpecError: (a ``TypeError`` and a ``ValueError``) ``x`` or ``w`` of a
            dtype other than f32/bf16/f16, ``w``'s dtype not ``x``'s, ``x``
            with no axis, ``w`` not of shape ``(N,)``, ``eps`` not a Python
            float or negative, a bad ``arch``.

    Example::

        y = rms_norm(x, w)                       # x: (batch, seq, hidden)
        g = jax.grad(lambda x: rms_norm(x, w).sum())(x)
    """
    x, dtype = _operand("rms_norm", "x", x)
    w = _vector("rms_norm", "w", w, x, dtype)
    return _RMS_NORM(x, w, eps=_eps("rms_norm", eps), arch=variant(arch, "rms_norm"))[0]


def layer_norm(x: Any, w: Any, b: Any, eps: float = 1e-5, *, arch: str = "auto") -> jax.Array:
    """``y = (x - mean) / sqrt(var + eps) * w + b`` over the last axis.

    The variance is the mean squared deviation from the mean, computed in a
    second pass over the row (no cancellation). Differentiable: ``jax.grad``
    runs two backward kernels (``dx``; ``dw`` and ``db`` summed over rows in
    a fixed order), reading the ``mean`` and ``rstd`` the forward saved.

    Args:
        x: an array of shape ``(..., N)``, f32, bf16 or f16.
        w, b: scale and shift, shape ``(N,)``, ``x``'s dtype.
        eps: added to the variance (a Python float).
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        ``y``, ``x``'s shape and dtype.

    Raises:
        SpecError: (a ``TypeError`` and a ``ValueError``) a dtype other than
            f32/bf16/f16, ``w``/``b`` not of ``x``'s dtype, ``x`` with no axis,
            ``w`` or ``b`` not of shape ``(N,)``, a bad ``eps`` or ``arch``.

    Example::

        y = jax.jit(layer_norm)(x, gamma, beta)
    """
    x, dtype = _operand("layer_norm", "x", x)
    w = _vector("layer_norm", "w", w, x, dtype)
    b = _vector("layer_norm", "b", b, x, dtype)
    return _LAYER_NORM(x, w, b, eps=_eps("layer_norm", eps), arch=variant(arch, "layer_norm"))[0]


def softmax(x: Any, axis: int = -1, *, arch: str = "auto") -> jax.Array:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    The kernel works on the last axis; another ``axis`` is moved last and
    back (two transposes around the launch).

    Args:
        x: an array with at least one axis, f32, bf16 or f16.
        axis: the axis to normalise (negative counts from the end).
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        the probabilities, ``x``'s shape and dtype.

    Raises:
        SpecError: (a ``TypeError`` and a ``ValueError``) a dtype other than
            f32/bf16/f16, ``x`` with no axis, ``axis`` out of range, a bad ``arch``.

    Example::

        p = softmax(logits)                 # over the last axis
        p = softmax(scores, axis=1)
    """
    x, _ = _operand("softmax", "x", x)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) \
            or not -x.ndim <= axis < x.ndim:
        raise SpecError(f"softmax: axis must be an int in [{-x.ndim}, {x.ndim}) for x of shape "
                        f"{tuple(x.shape)}, got {axis!r}")
    axis = int(axis) % x.ndim
    name = variant(arch, "softmax")
    if axis == x.ndim - 1:
        return _SOFTMAX(x, arch=name)
    return jnp.moveaxis(_SOFTMAX(jnp.moveaxis(x, axis, -1), arch=name), -1, axis)


def swiglu(gate: Any, up: Any, *, arch: str = "auto") -> jax.Array:
    """``silu(gate) * up = gate * sigmoid(gate) * up``, elementwise.

    Runs over the flattened arrays, one 16-byte chunk (or the widest access
    the total size allows) per thread.

    Args:
        gate, up: arrays of one shape and dtype, f32, bf16 or f16.
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``.

    Returns:
        the product, ``gate``'s shape and dtype.

    Raises:
        SpecError: (a ``TypeError`` and a ``ValueError``) a dtype other than
            f32/bf16/f16, ``up``'s dtype or shape not ``gate``'s, a bad ``arch``.

    Example::

        h = swiglu(x @ w_gate, x @ w_up)
    """
    gate, dtype = _operand("swiglu", "gate", gate, min_ndim=0)
    up, _ = _operand("swiglu", "up", up, min_ndim=0)
    if up.shape != gate.shape:
        raise SpecError(f"swiglu: up must have gate's shape {tuple(gate.shape)}, got {tuple(up.shape)}")
    if up.dtype != gate.dtype:
        raise SpecError(f"swiglu: up must have gate's dtype {gate.dtype}, got {up.dtype}")
    return _SWIGLU(gate, up, arch=variant(arch, "swiglu"))


# -- forward: reshape to rows, pick the kernel, launch once ---------------------------------

def _rows_call(op: str, x: jax.Array, vectors: tuple, arch: str, **template: Any) -> jax.Array:
    n = x.shape[-1]
    if x.size == 0:
        return jnp.zeros_like(x)
    p = plan(n, _DTYPES[np.dtype(x.dtype)])
    k = row_kernel(op, p.dtype, arch, p.threads, p.cached)
    y = k(x.reshape(-1, n), *vectors, **template)
    return y.reshape(x.shape)


def _rms_norm_fwd(x, w, *, eps: float, arch: str) -> tuple[jax.Array, jax.Array]:
    return _stats_call("rms_norm", x, (w,), arch, (), eps=eps)


def _layer_norm_fwd(x, w, b, *, eps: float, arch: str) -> tuple[jax.Array, jax.Array]:
    return _stats_call("layer_norm", x, (w, b), arch, (2,), eps=eps)


def _stats_call(op: str, x: jax.Array, vectors: tuple, arch: str, per_row: tuple[int, ...],
                **template: Any) -> tuple[jax.Array, jax.Array]:
    """``y`` and the row statistics the backward reads: f32 of shape
    ``x.shape[:-1] + per_row`` (``rstd``; ``(mean, rstd)`` pairs for layer_norm)."""
    n, stats_shape = x.shape[-1], (*x.shape[:-1], *per_row)
    if x.size == 0:
        return jnp.zeros_like(x), jnp.zeros(stats_shape, jnp.float32)
    p = plan(n, _DTYPES[np.dtype(x.dtype)])
    k = row_kernel(op, p.dtype, arch, p.threads, p.cached)
    y, stats = k(x.reshape(-1, n), *vectors, **template)
    return y.reshape(x.shape), stats.reshape(stats_shape)


def _softmax_fwd(x, *, arch: str) -> jax.Array:
    return _rows_call("softmax", x, (), arch)


def _swiglu_fwd(gate, up, *, arch: str) -> jax.Array:
    if gate.size == 0:
        return jnp.zeros_like(gate)
    k = swiglu_kernel(_DTYPES[np.dtype(gate.dtype)], arch)
    return k(gate.reshape(-1), up.reshape(-1)).reshape(gate.shape)


# -- backward: kernels for the norms; jnp references (the tests' oracle) ---------------------

def rms_norm_reference(x: jax.Array, w: jax.Array, eps: float = 1e-6) -> jax.Array:
    """``rms_norm`` in ``jnp`` with f32 statistics (the tests' oracle, its vjp too)."""
    xf = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * rstd * w.astype(jnp.float32)).astype(x.dtype)


def layer_norm_reference(x: jax.Array, w: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    """``layer_norm`` in ``jnp`` with f32 statistics."""
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps) * w.astype(jnp.float32) + b.astype(jnp.float32)
    return y.astype(x.dtype)


def swiglu_reference(gate: jax.Array, up: jax.Array) -> jax.Array:
    """``swiglu`` in ``jnp``, computed in f32."""
    g = gate.astype(jnp.float32)
    return (jax.nn.silu(g) * up.astype(jnp.float32)).astype(gate.dtype)


def _rms_norm_bwd(x, w, y, rstd, dy, drstd, *, arch: str) -> tuple:
    # The statistics are residuals the public op drops, never differentiated: drstd is zero.
    return _norm_backward("rms_norm", x, w, rstd, dy, arch)


def _layer_norm_bwd(x, w, b, y, stats, dy, dstats, *, arch: str) -> tuple:
    return _norm_backward("layer_norm", x, w, stats, dy, arch)


def _norm_backward(op: str, x, w, stats, dy, arch: str) -> tuple:
    """``dx`` and the weight gradients (``dw``, and ``db`` for ``layer_norm``):
    the row kernel, then the column sum of its per-worker scratch (two launches)."""
    sums = 1 if op == "rms_norm" else 2
    if x.size == 0:
        return (jnp.zeros_like(x), *[jnp.zeros_like(w)] * sums)
    n, dtype = x.shape[-1], _DTYPES[np.dtype(x.dtype)]
    rows = x.reshape(-1, n)
    workers = backward_workers(rows.shape[0], backward_plan(n, dtype, sums))
    k = row_backward_kernel(op, dtype, arch, n)
    stats = stats.reshape(rows.shape[0], *stats.shape[x.ndim - 1:])
    dx, part = k(rows, w, stats, dy.reshape(-1, n), W=workers)
    total = column_sum_kernel(dtype, arch)(part.reshape(workers, sums * n))
    return (dx.reshape(x.shape), *[total[s * n:(s + 1) * n] for s in range(sums)])


def _softmax_bwd(x, y, dy) -> jax.Array:
    yf, dyf = y.astype(jnp.float32), dy.astype(jnp.float32)
    return (yf * (dyf - jnp.sum(dyf * yf, axis=-1, keepdims=True))).astype(x.dtype)


def _swiglu_bwd(gate, up, out, dout) -> tuple:
    return jax.vjp(swiglu_reference, gate, up)[1](dout)


_RMS_NORM = custom_vjp(_rms_norm_fwd, _rms_norm_bwd)
_LAYER_NORM = custom_vjp(_layer_norm_fwd, _layer_norm_bwd)
_SOFTMAX = custom_vjp(_softmax_fwd, _softmax_bwd)
_SWIGLU = custom_vjp(_swiglu_fwd, _swiglu_bwd)


# -- argument checks --------------------------------------------------------------------------

def _operand(op: str, name: str, value: Any, *, min_ndim: int = 1) -> tuple[jax.Array, str]:
    """``value`` as an array of a supported dtype, and that dtype's PTX name."""
    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
        value = jnp.asarray(value)
    dtype = _DTYPES.get(np.dtype(value.dtype))
    if dtype is None:
        raise SpecError(f"{op}: {name} must be float32, bfloat16 or float16, got {value.dtype}")
    if value.ndim < min_ndim:
        raise SpecError(f"{op}: {name} must have at least one axis (..., N), got a scalar")
    return value, dtype


def _vector(op: str, name: str, value: Any, x: jax.Array, dtype: str) -> jax.Array:
    """A per-column parameter: shape ``(N,)`` and ``x``'s dtype."""
    value, vdtype = _operand(op, name, value, min_ndim=0)
    if vdtype != dtype:
        raise SpecError(f"{op}: {name} must have x's dtype {x.dtype}, got {value.dtype}")
    if tuple(value.shape) != (x.shape[-1],):
        raise SpecError(f"{op}: {name} must have shape ({x.shape[-1]},) (x's last axis), "
                        f"got {tuple(value.shape)}")
    return value


def _eps(op: str, eps: Any) -> float:
    try:
        value = float(eps)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise SpecError(f"{op}: eps must be a Python float (it is compiled into the kernel), "
                        f"got {eps!r}") from None
    if not value >= 0:
        raise SpecError(f"{op}: eps must be >= 0, got {value}")
    return value

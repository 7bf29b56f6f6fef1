"""The JAX integration: every kernel is a JAX primitive.

Calling a :class:`~jaxptx.Kernel` on arrays binds its primitive (one per
kernel, named after it): shapes and dtypes are checked against the kernel's
``Tile`` specs, and the outputs come from ``out_specs``. The primitive lowers
to a typed-FFI custom call: ``jaxptx_launch`` on CUDA (the PTX launched on
XLA's stream by the ``jaxptx._ffi`` shim) and ``jaxptx_cpu`` on the CPU (the
kernel run on the emulator, ``jaxptx.sim``). It batches under ``jax.vmap``
(a loop over the batch), runs per shard inside ``jax.shard_map``, and
:func:`custom_vjp` pairs a forward kernel with its backward for ``jax.grad``.

Importing this package is cheap: jax itself loads on the first kernel call.

Example:
    >>> import jax, numpy as np
    >>> from jaxptx import Tile, kernel, ptx
    >>> from jaxptx.types import f32
    >>> @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
    ...         grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1))
    ... def double(x, y):
    ...     i = ptx.special.ctaid.x() * 32 + ptx.special.tid.x()
    ...     off = ptx.mul.wide.u32(i, 4)
    ...     v = ptx.ld.global_.f32(x.ptr + off)
    ...     ptx.st.global_.f32(y.ptr + off, v + v)
    >>> jax.jit(double)(np.arange(64, dtype=np.float32))[:4]
    Array([0., 2., 4., 6.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from ..dsl import Kernel
from ..dsl._kernel import set_call_hook

__all__ = ["custom_vjp", "primitive", "kernels_in"]


def _call(kernel: Kernel, args: tuple, kwargs: dict) -> Any:
    from ._primitive import call  # jax (heavy) loads on the first kernel call
    return call(kernel, args, kwargs)


def primitive(kernel: Kernel) -> Any:
    """The ``jax.extend.core.Primitive`` of ``kernel`` (created on first use).

    Its parameters are ``template`` and ``sizes`` (sorted ``(name, value)``
    pairs) and ``grid``; it has multiple results, one per ``out_specs`` entry.
    """
    from ._primitive import primitive as get  # jax (heavy) loads here
    return get(kernel)


def custom_vjp(forward: Any, backward: Any = None) -> Any:
    """Pair a forward kernel (or JAX function) with its backward as a ``jax.custom_vjp``.

    ``backward`` is called as ``backward(*inputs, *outputs, *cotangents,
    **template)`` — the forward's inputs, its outputs and one cotangent per
    output — and returns one cotangent per input (a tuple, or a single array
    when the forward has one input; ``None`` for a zero cotangent). It may be
    a kernel (its ``in_specs`` take those tensors, its ``out_specs`` give the
    input cotangents) or any JAX function. Template keywords reach
    ``backward`` where it accepts them. Without ``backward``, returns a
    decorator that takes it.

    Args:
        forward: the forward computation, called as ``forward(*inputs, **template)``.
        backward: the backward computation (see above).

    Returns:
        A function ``f(*inputs, **template)`` that ``jax.grad``, ``jax.jit``
        and ``jax.vmap`` accept; template values are static.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = custom_vjp(jnp.sin, lambda x, y, dy: dy * jnp.cos(x))
        >>> float(jax.grad(f)(0.0))
        1.0
    """
    from ._vjp import custom_vjp as make  # jax (heavy) loads here
    return make(forward, backward)


def kernels_in(lowered: Any) -> dict[int, Any]:
    """The kernels a lowered function calls, as ``{kernel_id: Specialization}``.

    ``lowered`` is a ``jax.stages.Lowered`` (``jax.jit(f).lower(...)``) or its
    text; each specialisation carries its PTX (``.ptx``) and launch shape.
    """
    from ._registry import kernels_in as find
    return find(lowered)


set_call_hook(_call)

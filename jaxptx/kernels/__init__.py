"""jaxptx.kernels: ready JAX ops, each a jaxptx kernel (one primitive per
launch, visible in the jaxpr), each choosing its variant from ``arch``:
``"auto"`` (the target's newest, see :mod:`jaxptx.kernels._arch`),
``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``. On a machine without a GPU
every variant runs on the CPU emulator.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxptx import kernels
    >>> x = jnp.ones((2, 8), jnp.float32)
    >>> float(jax.jit(kernels.softmax)(x)[0, 0])
    0.125
"""

from .matmul import matmul as matmul

__all__ = ["matmul"]

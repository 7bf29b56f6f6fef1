"""Triton kernels as JAX primitives: jax-triton's API (``triton_call``) on jaxptx.

Code written for jax-triton runs with ``import jaxptx.triton as jt`` in place
of ``import jax_triton as jt``. Each kernel is compiled ahead of time by the
installed Triton (no GPU needed) and called through
:func:`jaxptx.jax.ptx_call`, so it also runs on the CPU (the emulator), under
``jax.vmap`` and ``jax.shard_map``, and under ``jax.grad`` with a backward
given to :func:`jaxptx.custom_vjp`.

Needs Triton (``pip install 'jaxptx[triton]'``); ``import jaxptx`` never
imports it.
"""

from __future__ import annotations

try:
    import triton as _triton   # the optional dependency: jaxptx[triton]
except ImportError as e:
    raise ImportError("jaxptx.triton needs Triton, which is not installed: "
                      "pip install 'jaxptx[triton]' (Triton 3.3 or later)") from e

if tuple(int(p) for p in _triton.__version__.split(".")[:2] if p.isdigit()) < (3, 3):
    raise ImportError(f"jaxptx.triton needs Triton 3.3 or later, found {_triton.__version__}: "
                      f"pip install 'jaxptx[triton]'")

from ._call import triton_call as triton_call
from ._descriptor import TensorDescriptor as TensorDescriptor
from ._descriptor import strides_from_shape as strides_from_shape

__all__ = ["triton_call", "strides_from_shape", "TensorDescriptor"]

"""jaxptx.kernels: ready JAX ops, each a jaxptx kernel (one primitive per
launch, visible in the jaxpr), each choosing its variant from ``arch``:
``"auto"`` (the target's newest, see :mod:`jaxptx.kernels._arch`),
``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``. On a machine without a GPU
every variant runs on the CPU emulator.

* :func:`rms_norm`, :func:`layer_norm`, :func:`softmax`, :func:`swiglu`:
  bandwidth-bound row kernels, f32/bf16/f16 with f32 statistics;
* :func:`matmul`: ``jnp.dot`` of bf16/f16 matrices, f32 accumulation;
  Ampere (``cp.async`` + ``ldmatrix`` + ``mma.sync``), Hopper (TMA +
  mbarriers + warp-specialised ``wgmma``, persistent, clustered) and
  Blackwell (``tcgen05.mma`` into tensor memory) variants;
* :func:`grouped_matmul`: ``jax.lax.ragged_dot`` in one launch (MoE);
* :func:`flash_attention`: ``jax.nn.dot_product_attention``'s forward,
  Ampere and Hopper variants, differentiable.
* :func:`all_reduce`, :func:`all_gather_matmul`, :func:`matmul_reduce_scatter`:
  collectives inside ``jax.shard_map`` (peer-pointer one-shot / two-shot and
  multimem all-reduce; the all-gather, or the reduce-scatter, overlapped with
  an ``mma.sync`` or TMA + ``wgmma`` GEMM).
* :func:`scaled_matmul`, :func:`scaled_grouped_matmul`: ``jax.nn.scaled_matmul``
  (mxfp8, nvfp4, mxfp4 block-scaled GEMM; Blackwell ``tcgen05.mma`` block-scaled
  kinds, Hopper FP8 ``wgmma`` for mxfp8) and its ragged MoE form, with the
  packing helpers :func:`pack_fp4`, :func:`unpack_fp4`, :func:`pack_fp6`,
  :func:`unpack_fp6`, :func:`fp8_to_bits`,
  :func:`fp8_from_bits`, :func:`block_quantize`, :func:`block_dequantize`.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxptx import kernels
    >>> x = jnp.ones((2, 8), jnp.float32)
    >>> float(jax.jit(kernels.softmax)(x)[0, 0])
    0.125
"""

from ._fp_pack import block_dequantize as block_dequantize
from ._fp_pack import block_quantize as block_quantize
from ._fp_pack import fp8_from_bits as fp8_from_bits
from ._fp_pack import fp8_to_bits as fp8_to_bits
from ._fp_pack import pack_fp4 as pack_fp4
from ._fp_pack import pack_fp6 as pack_fp6
from ._fp_pack import unpack_fp4 as unpack_fp4
from ._fp_pack import unpack_fp6 as unpack_fp6
from .attention import flash_attention as flash_attention
from .collectives import all_gather_matmul as all_gather_matmul
from .collectives import all_reduce as all_reduce
from .grouped import grouped_matmul as grouped_matmul
from .matmul import matmul as matmul
from .matmul_reduce_scatter import matmul_reduce_scatter as matmul_reduce_scatter
from .norms import layer_norm as layer_norm
from .norms import rms_norm as rms_norm
from .norms import softmax as softmax
from .norms import swiglu as swiglu
from .paged_attention import paged_attention as paged_attention
from .scaled_matmul import scaled_grouped_matmul as scaled_grouped_matmul
from .scaled_matmul import scaled_matmul as scaled_matmul

__all__ = ["rms_norm", "layer_norm", "softmax", "swiglu", "matmul", "grouped_matmul", "flash_attention",
           "paged_attention", "scaled_matmul", "scaled_grouped_matmul", "pack_fp4", "unpack_fp4", "pack_fp6",
           "unpack_fp6", "fp8_to_bits", "fp8_from_bits", "block_quantize", "block_dequantize", "all_reduce",
           "all_gather_matmul", "matmul_reduce_scatter"]

"""Grouped (ragged) GEMM for mixture-of-experts: ``jax.lax.ragged_dot`` in one launch.

``grouped_matmul(lhs, rhs, group_sizes)``: rows ``[s_g, s_g + group_sizes[g])``
of ``lhs`` (M, K), with ``s_g`` the sum of the sizes before ``g``, multiply
``rhs[g]`` (K, N); rows past the last group are zero; the result is (M, N)
float32.

The kernel is the Ampere GEMM of :mod:`jaxptx.kernels._matmul_sm80` (its
``cp.async`` ring, swizzled ``ldmatrix`` and ``mma.sync`` main loop and
masked epilogue), one CTA per 128 x 128 output tile. Each CTA walks the
groups at run time, reading ``group_sizes`` from global memory and keeping
the running start: for every non-empty group whose rows overlap its tile it
runs the main loop over ``rhs[g]`` with A's rows outside the group
zero-filled (``cp.async`` src-size 0), so every group adds into one
accumulator only the rows it owns; a tile that straddles a group boundary
simply runs the main loop once per group it touches. The walk stops at the
first group past the tile. The epilogue then stores the tile once (rows past
the groups hold zeros).

``group_sizes`` must be integers. Concrete sizes (not traced) are checked:
each ``>= 0`` and their sum ``<= M``. Traced sizes cannot be checked; the
kernel then counts a negative size as 0 and stops every group at row M
(``jax.lax.ragged_dot`` also drops rows past M, but gives rows of no
meaning for negative sizes).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import ptx, reg, smem
from ..dsl import Tile, kernel
from ..errors import SpecError
from ..jax import custom_vjp
from ..types import bf16, f16, f32, s32, u32
from ._arch import variant
from ._matmul_sm80 import (BM, BN, SMEM_BYTES, THREADS, Operands, cdiv, check_operands, epilogue,
                           mainloop, new_accumulators)

__all__ = ["grouped_matmul", "grouped_kernel"]


@functools.cache
def grouped_kernel(dtype: str, arch: str = "sm_80") -> Any:
    """The grouped GEMM kernel for ``dtype`` ("bf16" or "f16"), traced for
    ``arch``: the same ``mma.sync`` code for every target (sm_90a and
    sm_100a run Ampere's instructions)."""
    t = {"bf16": bf16, "f16": f16}[dtype]

    @kernel(in_specs=(Tile("M", "K", t), Tile("G", "K", "N", t), Tile("G", s32)),
            out_specs=(Tile("M", "N", f32),),
            grid=lambda M, N: (cdiv(N, BN), cdiv(M, BM), 1), block=(THREADS, 1, 1),
            arch=arch, extern_smem=True, name=f"grouped_matmul_{dtype}_{arch}")
    def grouped_matmul_kernel(lhs, rhs, group_sizes, out):
        """out = ragged_dot(lhs, rhs, group_sizes) (module docstring)."""
        M, K = lhs.shape
        G, _, N = rhs.shape
        buf = smem.alloc(u32, (SMEM_BYTES // 4,), align=1024)
        m0 = ptx.special.ctaid.y() * BM
        n0 = ptx.special.ctaid.x() * BN
        tile_end = m0 + BM
        acc = new_accumulators()
        start = reg.scalar(u32, 0)
        sizes = group_sizes.ptr
        for g in ptx.range_(0, G, dtype=u32):
            # Traced sizes are unchecked: a negative one counts as 0 (as a u32 it
            # would wrap the running start back); start + size < 2^32 then.
            size = ptx.ld.global_.s32(sizes + ptx.mul.wide.u32(g, 4))
            size = ptx.cvt.u32.s32(ptx.max.s32(size, 0))
            end = (start + size).min(M)
            touches = ptx.and_.pred(ptx.and_.pred(start < tile_end, end > m0), end > start)
            with ptx.if_(touches):
                ops = Operands(a=lhs.ptr, b=rhs.ptr + ptx.mul.wide.u32(g, K * N * 2), m0=m0, n0=n0,
                               M=M, N=N, K=K, dtype=dtype, row_lo=start, row_hi=end)
                mainloop(ops, acc, buf.base, reuse=True)
            start.set(end)
            ptx.break_(pred=start >= tile_end)
        epilogue(acc, out.ptr, m0, n0, M, N)

    return grouped_matmul_kernel


def _forward(lhs: Any, rhs: Any, group_sizes: Any, *, arch: str = "auto") -> Any:
    dtype = check_operands(lhs, rhs, "grouped_matmul")
    return grouped_kernel(dtype, variant(arch, "grouped_matmul"))(lhs, rhs, group_sizes)


def _backward(lhs: Any, rhs: Any, group_sizes: Any, out: Any, d_out: Any) -> tuple:
    """jnp VJP: d_lhs = ragged_dot(d_out, rhs^T); d_rhs[g] = lhs_g^T d_out_g,
    with each row's group from the cumulative sizes (rows past them: none)."""
    del out
    d_out = d_out.astype(jnp.float32)
    d_lhs = jax.lax.ragged_dot(d_out, jnp.swapaxes(rhs, 1, 2).astype(jnp.float32), group_sizes,
                               preferred_element_type=jnp.float32)
    ends = jnp.cumsum(group_sizes)
    row_group = jnp.searchsorted(ends, jnp.arange(lhs.shape[0]), side="right")
    one_hot = (row_group[:, None] == jnp.arange(rhs.shape[0])[None, :]).astype(jnp.float32)
    d_rhs = jnp.einsum("mg,mk,mn->gkn", one_hot, lhs.astype(jnp.float32), d_out,
                       precision=jax.lax.Precision.HIGHEST)
    return d_lhs.astype(lhs.dtype), d_rhs.astype(rhs.dtype), None


_differentiable = custom_vjp(_forward, _backward)


def grouped_matmul(lhs: Any, rhs: Any, group_sizes: Any, *, arch: str = "auto") -> Any:
    """What ``jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=f32)``
    computes, in one kernel launch.

    Args:
        lhs: (M, K) bf16 or f16, rows grouped consecutively.
        rhs: (G, K, N), the same dtype; K and N multiples of 8.
        group_sizes: (G,) integers (any integer dtype; used as int32),
            non-negative, summing to at most M (empty groups allowed). Checked
            when concrete; traced sizes are not: a negative size then counts
            as 0 and groups stop at row M.
        arch: ``"auto"``, ``"sm_80"``, ``"sm_90a"`` or ``"sm_100a"``; every
            variant is the Ampere ``mma.sync`` kernel traced for that target.

    Returns:
        (M, N) float32; rows past ``sum(group_sizes)`` are zero.

    Differentiable (``jaxptx.custom_vjp``) with a jnp backward, not a kernel:
    ``d_lhs = ragged_dot(d_out, rhs^T)`` and ``d_rhs[g] = lhs_g^T d_out_g``
    (an einsum over a row-to-group one-hot), in f32, cast to the input
    dtypes; ``group_sizes`` gets no gradient.

    Raises:
        SpecError: bad shapes or dtypes, a ``group_sizes`` of a non-integer
            dtype, or concrete sizes that are negative or sum past M.
    """
    if lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1]:
        raise SpecError(f"grouped_matmul: expected lhs (M, K) and rhs (G, K, N), got "
                        f"{lhs.shape} and {rhs.shape}")
    if not hasattr(group_sizes, "dtype"):
        group_sizes = np.asarray(group_sizes)
    if group_sizes.shape != (rhs.shape[0],):
        raise SpecError(f"grouped_matmul: group_sizes must be ({rhs.shape[0]},), got {group_sizes.shape}")
    _check_sizes(group_sizes, lhs.shape[0])
    if np.dtype(group_sizes.dtype) != np.int32:
        group_sizes = jnp.asarray(group_sizes, jnp.int32)
    variant(arch, "grouped_matmul")
    return _differentiable(lhs, rhs, group_sizes, arch=arch)


def _check_sizes(group_sizes: Any, m: int) -> None:
    """Integer sizes; when concrete, each >= 0 and summing to at most ``m``."""
    dtype = np.dtype(group_sizes.dtype)
    if not np.issubdtype(dtype, np.integer):
        raise SpecError(f"grouped_matmul: group_sizes: expected an integer dtype (int32), got {dtype}")
    if isinstance(group_sizes, jax.core.Tracer):
        return                                    # the kernel's rule: module docstring
    sizes = [int(v) for v in np.asarray(group_sizes)]
    negative = [i for i, v in enumerate(sizes) if v < 0]
    if negative:
        i = negative[0]
        raise SpecError(f"grouped_matmul: group_sizes: expected sizes >= 0, got "
                        f"group_sizes[{i}] = {sizes[i]}")
    if sum(sizes) > m:
        raise SpecError(f"grouped_matmul: group_sizes: expected a sum of at most M = {m} "
                        f"(lhs rows), got {sum(sizes)}")

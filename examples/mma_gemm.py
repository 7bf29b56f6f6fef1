"""A small tensor-core GEMM: one warp per 16×8 tile of C = A·B with
``mma.sync.aligned.m16n8k16`` (bf16 in, f32 accumulate).

A is M×K row-major and B is given transposed (N×K row-major), so every
fragment register is one aligned 32-bit load of two consecutive bf16 values
(PTX ISA, "Matrix Fragments for mma.m16n8k16": lane l holds rows l/4 and
l/4 + 8, columns 2(l%4) and 2(l%4) + 8 of A; columns 2(l%4) and 2(l%4)+8 of
B's row l/4). The K loop unrolls at trace time.

    python examples/mma_gemm.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from jaxptx import Tile, kernel, ptx, reg
from jaxptx.types import bf16, f32


@kernel(
    in_specs=(Tile("M", "K", bf16), Tile("N", "K", bf16)),
    out_specs=(Tile("M", "N", f32),),
    grid=lambda M, N: (N // 8, M // 16, 1),
    block=(32, 1, 1),
    arch="sm_80",
    batch="z",
)
def mma_gemm(a, bt, c):
    """``c = a @ bt.T`` for bf16 ``a`` (M×K) and ``bt`` (N×K).

    ``jax.vmap(mma_gemm)`` is a grouped GEMM in one launch: problem ``g`` runs
    at ``%ctaid.z == g`` (``batch="z"``; each operand indexed by ``batch_ptr``).
    """
    k_dim, n_dim = a.shape[1], c.shape[1]
    lane = ptx.special.laneid()
    group, quad = lane >> 2, lane & 3
    row0 = ptx.special.ctaid.y() * 16 + group          # rows of A and C this lane touches
    col0 = ptx.special.ctaid.x() * 8 + group           # the row of B^T (column of C) for B
    a_base, b_base, c_base = ptx.batch_ptrs(a, bt, c)
    a_row = a_base + ptx.mul.wide.u32(row0 * k_dim + quad * 2, 2)
    b_row = b_base + ptx.mul.wide.u32(col0 * k_dim + quad * 2, 2)
    eight_rows = 8 * k_dim * 2                          # bytes between rows g and g + 8 of A
    acc = reg.array(f32, 4)
    for r in acc:
        r.set(0.0)
    for k in range(0, k_dim, 16):
        frag_a = [ptx.ld.global_.b32(a_row + (k * 2 + off)) for off in (0, eight_rows, 16, eight_rows + 16)]
        frag_b = [ptx.ld.global_.b32(b_row + (k * 2 + off)) for off in (0, 16)]
        ptx.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(acc, frag_a, frag_b, acc)
    col = ptx.special.ctaid.x() * 8 + quad * 2
    out = c_base + ptx.mul.wide.u32(row0 * n_dim + col, 4)
    ptx.st.global_.v2.f32(out, (acc[0], acc[1]))
    ptx.st.global_.v2.f32(out + 8 * n_dim * 4, (acc[2], acc[3]))


def main() -> None:
    """Check a 64×64×64 product on the emulator against numpy."""
    from jaxptx import sim
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 64), np.float32)
    sim.launch(mma_gemm, a, np.ascontiguousarray(b.T), c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    print(f"emulator vs numpy: max abs error {np.abs(c - ref).max():.2e}")



if __name__ == "__main__":
    main()

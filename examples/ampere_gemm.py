"""An Ampere (sm_80) tensor-core GEMM: ``c = a @ b``, bf16 in, f32 out.

One CTA of 4 warps computes a 64 x 64 tile of C, each warp a 32 x 32
quarter as 2 x 4 ``mma.sync.m16n8k16`` accumulators. The runtime K loop
**double-buffers**: while K tile ``kt`` is read from one half of shared
memory, 16-byte ``cp.async`` copies fill the other with tile ``kt + 1``
(a ``commit_group`` per tile; ``wait_group 1``: all but the newest landed).
Shared tiles are XOR-swizzled (``jaxptx.fragments.swizzle``) so that
``ldmatrix``, reading 8 rows of one 16-byte column, hits 8 different banks;
``ldmatrix.x4.trans`` turns B's K x N rows into the column fragment ``mma``
wants, and ``fragments.mma_base`` says where each accumulator lives.
M, N must be multiples of 64 and K of 32 (``jaxptx.kernels.matmul`` is the
general, 4-stage version).

    python examples/ampere_gemm.py
"""

from __future__ import annotations

from jaxptx import Tile, fragments, kernel, ptx, reg, smem
from jaxptx.types import b32, bf16, f32, u32

BM, BN, BK = 64, 64, 32
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2      # 4 KiB each: A rows 64 B, B rows 128 B
STAGE = A_BYTES + B_BYTES


@kernel(in_specs=(Tile("M", "K", bf16), Tile("K", "N", bf16)), out_specs=(Tile("M", "N", f32),),
        grid=lambda M, N: (N // BN, M // BM, 1), block=(128, 1, 1), arch="sm_80")
def ampere_gemm(a, b, c):
    """``c = a @ b`` for bf16 ``a`` (M x K) and ``b`` (K x N), f32 ``c``."""
    M, K = a.shape
    N = b.shape[1]
    buf = smem.alloc(b32, (2 * STAGE // 4,), align=128)   # [A0 B0 | A1 B1]
    tid = ptx.special.tid.x()
    lane, warp = tid & 31, tid >> 5
    m0, n0 = ptx.special.ctaid.y() * BM, ptx.special.ctaid.x() * BN
    base = buf.base

    # cp.async: A is 64 rows x 4 chunks, B 32 rows x 8 chunks; two of each per thread.
    ar, ac, bk, bc = tid >> 2, tid & 3, tid >> 3, tid & 7
    a_src = a.ptr + ptx.mul.wide.u32((m0 + ar) * K + ac * 8, 2)
    b_src = b.ptr + ptx.mul.wide.u32(bk * N + n0 + bc * 8, 2)
    a_dst = [base + fragments.swizzle(ar + r, ac << 4, bytes=64) for r in (0, 32)]
    b_dst = [base + A_BYTES + fragments.swizzle(bk + r, bc << 4, bytes=128) for r in (0, 16)]

    def load_tile(stage) -> None:
        """Issue the copies of the K tile at a_src / b_src into ``stage`` (a byte offset), step on."""
        cp = ptx.cp.async_.cg.shared.global_
        for i, d in enumerate(a_dst):
            cp(ptx.addr(d + stage), ptx.addr(a_src, i * 32 * K * 2), 16)
        for i, d in enumerate(b_dst):
            cp(ptx.addr(d + stage), ptx.addr(b_src, i * 16 * N * 2), 16)
        ptx.add.u64(a_src, a_src, BK * 2)
        ptx.add.u64(b_src, b_src, BK * N * 2)

    # ldmatrix: lane l addresses row l % 16 of a 16 x 16 block, 16-byte chunk l // 16.
    wm, wn = warp >> 1, warp & 1
    row, half = lane & 15, lane >> 4
    lda = [[base + fragments.swizzle(wm * 32 + i * 16 + row, (2 * kk + half) << 4, bytes=64)
            for kk in range(BK // 16)] for i in range(2)]
    ldb = [base + A_BYTES + fragments.swizzle(row, (wn * 4 + 2 * j + half) << 4, bytes=128) for j in range(2)]
    acc = [[reg.array(f32, 4) for _ in range(4)] for _ in range(2)]
    for tile in acc[0] + acc[1]:
        for r in tile:
            r.set(0.0)
    fa = [reg.array(b32, 4) for _ in range(2)]
    fb = [reg.array(b32, 4) for _ in range(2)]

    stage = reg.scalar(u32, 0)                # byte offset of the buffer being read
    load_tile(stage)
    ptx.cp.async_.commit_group()
    for kt in ptx.range_(0, K // BK):
        with ptx.if_(kt + 1 < K // BK):
            load_tile(stage ^ STAGE)          # prefetch into the other buffer
        ptx.cp.async_.commit_group()          # one group per tile (empty after the last one)
        ptx.cp.async_.wait_group(1)           # all but the newest: tile kt has landed here...
        ptx.bar.sync(0)                       # ...and in everyone's
        for kk in range(BK // 16):
            for i in range(2):
                ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(fa[i], ptx.addr(lda[i][kk] + stage))
            for j in range(2):
                ptx.ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16(fb[j], ptx.addr(ldb[j] + stage, kk * 16 * 128))
            for i in range(2):
                for j in range(4):
                    frag_b = fb[j // 2][2 * (j % 2):2 * (j % 2) + 2]
                    ptx.mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32(acc[i][j], fa[i], frag_b, acc[i][j])
        ptx.bar.sync(0)                       # everyone is done reading before it is refilled
        ptx.xor.b32(stage, stage, STAGE)

    r0, c0 = fragments.mma_base("m16n8k16", lane)
    out = c.ptr + ptx.mul.wide.u32((m0 + wm * 32 + r0) * N + n0 + wn * 32 + c0, 4)
    for i in range(2):
        for j in range(4):
            for h in (0, 2):                  # registers (0, 1) and (2, 3): rows r and r + 8
                dr, dc = fragments.mma_offset("m16n8k16", h)
                ptx.st.global_.v2.f32(ptx.addr(out, ((i * 16 + dr) * N + j * 8 + dc) * 4),
                                      (acc[i][j][h], acc[i][j][h + 1]))


def main() -> None:
    """Summarise the kernel, run a 128 x 128 x 256 product under ``jax.jit``, check it."""
    import jax
    import numpy as np
    from tiny import summary

    M, N, K = 128, 128, 256
    print(summary(ampere_gemm, M=M, N=N, K=K))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(jax.numpy.bfloat16)
    b = rng.standard_normal((K, N)).astype(jax.numpy.bfloat16)
    c = np.asarray(jax.jit(ampere_gemm)(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - want).max() / np.abs(want).max())
    print(f"== jax.jit(ampere_gemm) on {jax.devices()[0].platform}: max error {err:.1e} of max |c| ==")
    if err > 1e-5:
        raise SystemExit("ampere_gemm: the emulator's result does not match numpy")


if __name__ == "__main__":
    main()

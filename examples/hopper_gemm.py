"""A Hopper (sm_90a) pipelined GEMM: ``c = a @ b``, bf16 in, f32 out.

One CTA computes a 64 x 128 tile of C with two roles:

* a **producer** (thread 0 of warp 4, a warp of its own) issues **TMA**
  copies: per 64-wide K block, A's 64 x 64 box and B's 64 x 128 block as
  two 64 x 64 boxes, 128-byte swizzled, into a ring of ``STAGES`` stages;
* the **consumer** warpgroup (warps 0-3) runs ``wgmma.mma_async
  .m64n128k16`` on each stage straight from shared memory, through matrix
  descriptors (``tile.matrix_desc()``: A K-major, B MN-major, since b is
  K x N row-major), accumulating in 64 registers per thread.

A :class:`jaxptx.pipeline.Pipeline` connects them: ``full[s]`` completes
when stage ``s``'s TMA bytes have arrived, ``empty[s]`` when the consumer
has released it; each side keeps its stage and phase in registers, so the
K loop is a runtime loop. ``smem.tma_tile`` declares a shared tile that
matches the tensor's TMA box (it checks the swizzles agree).
M must be a multiple of 64, N of 128, K of 64 (``jaxptx.kernels.matmul``
is the general, persistent, multicast version).

    python examples/hopper_gemm.py
"""

from __future__ import annotations

from jaxptx import Layout, Tile, fragments, kernel, pipeline, ptx, reg, smem
from jaxptx.types import bf16, f32, s32

BM, BN, BK, STAGES = 64, 128, 64, 3
SPAN = 64                                   # bf16 elements in one 128-byte swizzled row: a TMA box width
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2
WG = 128                                    # threads in a warpgroup


@kernel(in_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(BM, BK)),
                  Tile("K", "N", bf16, Layout.TMA_128B, tma_box=(BK, SPAN))),
        out_specs=(Tile("M", "N", f32),), grid=lambda M, N: (N // BN, M // BM, 1),
        block=(WG + 32, 1, 1), arch="sm_90a", extern_smem=True)
def hopper_gemm(a, b, c):
    """``c = a @ b`` for bf16 ``a`` (M x K) and ``b`` (K x N), f32 ``c``."""
    M, K = a.shape
    N = b.shape[1]
    # Declared one after another in the dynamic shared memory: stage s is tile 0 + s * bytes.
    a_tiles = [smem.tma_tile(a, major="K") for _ in range(STAGES)]                   # 64 x 64
    b_tiles = [smem.tma_tile(b, major="MN", boxes=BN // SPAN) for _ in range(STAGES)]  # 64 x 128
    pipe = pipeline.Pipeline(STAGES, consumer_arrivals=WG)  # every consumer thread releases each stage
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        pipe.init()
    ptx.bar.sync(0)
    m0, n0 = ptx.special.ctaid.y() * BM, ptx.special.ctaid.x() * BN

    with ptx.if_(tid == WG):                    # the producer
        load = ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        for kb in ptx.range_(0, K // BK, dtype=s32):
            s = pipe.wait_empty()               # the consumer is done with stage s
            full = pipe.arm(A_BYTES + B_BYTES)  # full[s] now waits for that many bytes
            load(ptx.addr(a_tiles[0].base + s * A_BYTES), ptx.addr(a.tma_desc(), coords=(kb * BK, m0)), full)
            for j in range(BN // SPAN):
                load(ptx.addr(b_tiles[0].base + s * B_BYTES, j * BK * 128),
                     ptx.addr(b.tma_desc(), coords=(n0 + j * SPAN, kb * BK)), full)
            pipe.producer.advance()

    with ptx.if_(tid < WG):                     # the consumer warpgroup
        acc = reg.array(f32, BN // 2)
        for r in acc:
            r.set(0.0)
        a_desc, b_desc = a_tiles[0].matrix_desc(), b_tiles[0].matrix_desc()
        for _ in ptx.range_(0, K // BK, dtype=s32):
            s = pipe.wait_full()                # stage s's bytes have landed
            da = a_desc + ptx.cvt.u64.u32(s * (A_BYTES >> 4))    # descriptors count 16-byte units
            db = b_desc + ptx.cvt.u64.u32(s * (B_BYTES >> 4))
            ptx.wgmma.fence.sync.aligned()
            for kk in range(BK // 16):
                a_step = a_tiles[0].offset_bytes(k=16 * kk) >> 4    # 32 B along A's swizzled rows
                b_step = b_tiles[0].offset_bytes(k=16 * kk) >> 4    # 16 rows of B: 2048 B
                # scale-d 1 (accumulate), scale-a/b 1, transpose A 0 (K-major), B 1 (MN-major)
                ptx.wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16(acc, da + a_step, db + b_step, 1, 1, 1, 0, 1)
            ptx.wgmma.commit_group.sync.aligned()
            ptx.wgmma.wait_group.sync.aligned(0)                 # done reading stage s
            pipe.release()

        row, col = fragments.wgmma_base(tid)
        out = c.ptr + ptx.mul.wide.u32((m0 + row) * N + n0 + col, 4)
        for j in range(0, BN // 2, 2):          # registers j, j + 1 are adjacent columns
            dr, dc = fragments.wgmma_offset(BN, j)
            ptx.st.global_.v2.f32(ptx.addr(out, (dr * N + dc) * 4), (acc[j], acc[j + 1]))


def main() -> None:
    """Summarise the kernel, run a 128 x 256 x 384 product under ``jax.jit``, check it."""
    import jax
    import numpy as np
    from tiny import summary

    M, N, K = 128, 256, 384                     # 6 K blocks: two laps of the 3-stage ring
    print(summary(hopper_gemm, M=M, N=N, K=K))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(jax.numpy.bfloat16)
    b = rng.standard_normal((K, N)).astype(jax.numpy.bfloat16)
    c = np.asarray(jax.jit(hopper_gemm)(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - want).max() / np.abs(want).max())
    print(f"== jax.jit(hopper_gemm) on {jax.devices()[0].platform}: max error {err:.1e} of max |c| ==")
    if err > 1e-5:
        raise SystemExit("hopper_gemm: the emulator's result does not match numpy")


if __name__ == "__main__":
    main()

"""A Blackwell (sm_100a) GEMM: ``c = a @ b``, bf16 in, f32 out, accumulated
in tensor memory. One CTA of 4 warps computes a 128 x 128 tile of C:

* thread 0, the **producer**, fills a ring of ``STAGES`` shared stages by
  **TMA**, with the same :class:`jaxptx.pipeline.Pipeline` as
  ``hopper_gemm.py``;
* thread 32 alone issues the whole 128 x 128 MMA: four
  ``tcgen05.mma.kind::f16`` (K = 16) per stage into an accumulator in
  **tensor memory** (``tcgen05.TensorMemory``: 128 lanes x 128 f32
  columns), operands read through sm_100 shared-memory descriptors
  (``tcgen05.smem_desc``, ``k_offset``), shape and types from an
  instruction descriptor (``tcgen05.instr_desc``). ``tcgen05.commit``
  arrives on the stage's ``empty`` barrier once the MMAs reading it are
  done, and on ``done`` after the last one;
* then every warp reads its part out: ``tcgen05.ld.32x32b.x32`` gives
  thread ``t`` of warp ``w`` 32 columns of lane (row) ``32 w + t``.

M and N must be multiples of 128, K of 64 (``jaxptx.kernels.matmul`` is the
general version, with a TMA-store epilogue and a two-CTA form).

    python examples/blackwell_gemm.py
"""

from __future__ import annotations

from jaxptx import Layout, Tile, kernel, pipeline, ptx, reg, smem, tcgen05
from jaxptx.types import b32, bf16, f32, s32, u32

BM, BN, BK, STAGES = 128, 128, 64, 4
SPAN = 64                                   # bf16 elements in one 128-byte swizzled row: a TMA box width
A_BYTES, B_BYTES = BM * BK * 2, BK * BN * 2


@kernel(in_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(BM, BK)),
                  Tile("K", "N", bf16, Layout.TMA_128B, tma_box=(BK, SPAN))),
        out_specs=(Tile("M", "N", f32),), grid=lambda M, N: (N // BN, M // BM, 1),
        block=(128, 1, 1), arch="sm_100a", extern_smem=True)
def blackwell_gemm(a, b, c):
    """``c = a @ b`` for bf16 ``a`` (M x K) and ``b`` (K x N), f32 ``c``."""
    M, K = a.shape
    N = b.shape[1]
    a_tiles = [smem.tma_tile(a, major="K") for _ in range(STAGES)]                   # 128 x 64
    b_tiles = [smem.tma_tile(b, major="MN", boxes=BN // SPAN) for _ in range(STAGES)]  # 64 x 128
    pipe = pipeline.Pipeline(STAGES)        # empty[s]: one tcgen05.commit per stage
    done = smem.mbarrier(1)
    tmem = tcgen05.TensorMemory(BN)         # the 128 x 128 f32 accumulator
    tid = ptx.special.tid.x()
    warp = tid >> 5
    with ptx.if_(warp == 0):
        tmem.alloc()                        # a whole warp allocates
        tmem.relinquish()
    with ptx.if_(tid == 0):
        ptx.mbarrier.init.shared.b64(done[0], 1)
        pipe.init()                         # (its fence covers done's init too)
    tmem.sync_after_alloc()                 # fence, bar.sync, fence: every thread sees both
    taddr = tmem.address()
    m0, n0 = ptx.special.ctaid.y() * BM, ptx.special.ctaid.x() * BN

    with ptx.if_(tid == 0):                 # the producer
        load = ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        for kb in ptx.range_(0, K // BK, dtype=s32):
            s = pipe.wait_empty()
            full = pipe.arm(A_BYTES + B_BYTES)
            load(ptx.addr(a_tiles[0].base + s * A_BYTES), ptx.addr(a.tma_desc(), coords=(kb * BK, m0)), full)
            for j in range(BN // SPAN):
                load(ptx.addr(b_tiles[0].base + s * B_BYTES, j * BK * 128),
                     ptx.addr(b.tma_desc(), coords=(n0 + j * SPAN, kb * BK)), full)
            pipe.producer.advance()

    with ptx.if_(tid == 32):                # the MMA issuer
        idesc = reg.scalar(u32, tcgen05.instr_desc(kind="f16", a="bf16", m=BM, n=BN, a_major="K", b_major="MN"))
        a_desc, b_desc = tcgen05.smem_desc(a_tiles[0]), tcgen05.smem_desc(b_tiles[0])
        always = reg.pred(init=1)
        commit = ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64
        for kb in ptx.range_(0, K // BK, dtype=s32):
            s = pipe.wait_full()
            ptx.tcgen05.fence__after_thread_sync()
            da = a_desc + ptx.cvt.u64.u32(s * (A_BYTES >> 4))    # descriptors count 16-byte units
            db = b_desc + ptx.cvt.u64.u32(s * (B_BYTES >> 4))
            for kk in range(BK // 16):
                a_step = tcgen05.k_offset(16 * kk, major="K", swizzle="128B", dtype=bf16, shape=(BM, BK))
                b_step = tcgen05.k_offset(16 * kk, major="MN", swizzle="128B", dtype=bf16, shape=(BK, BN))
                accumulate = (kb != 0) if kk == 0 else always     # the first MMA overwrites D
                ptx.tcgen05.mma.cta_group__1.kind__f16(ptx.addr(taddr), tcgen05.advance(da, a_step),
                                                       tcgen05.advance(db, b_step), idesc, accumulate)
            commit(pipe.empty[pipe.consumer.stage])              # stage s is free once these finish
            pipe.consumer.advance()
        commit(done[0])

    pipeline.wait_parity(done[0], 0)        # every MMA has finished writing tensor memory
    ptx.tcgen05.fence__after_thread_sync()
    out = c.ptr + ptx.mul.wide.u32((m0 + tid) * N + n0, 4)     # thread t: row m0 + t
    for col in range(0, BN, 32):
        vals = reg.array(b32, 32)           # lane 32w + t, columns col .. col + 31 (address: lane << 16 | column)
        ptx.tcgen05.ld.sync.aligned._32x32b.x32.b32(vals, ptx.addr(taddr + ((warp * 32) << 16) + col))
        ptx.tcgen05.wait__ld.sync.aligned()
        for j in range(0, 32, 4):
            ptx.st.global_.v4.b32(ptx.addr(out, (col + j) * 4), tuple(vals[j:j + 4]))
    ptx.tcgen05.fence__before_thread_sync()
    ptx.bar.sync(0)                         # every warp is done reading tensor memory
    with ptx.if_(warp == 0):
        tmem.dealloc(taddr)


def main() -> None:
    """Summarise the kernel, run a 256 x 256 x 512 product under ``jax.jit``, check it."""
    import jax
    import numpy as np
    from tiny import summary

    M, N, K = 256, 256, 512                 # 8 K blocks: two laps of the 4-stage ring
    print(summary(blackwell_gemm, M=M, N=N, K=K))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(jax.numpy.bfloat16)
    b = rng.standard_normal((K, N)).astype(jax.numpy.bfloat16)
    c = np.asarray(jax.jit(blackwell_gemm)(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(c - want).max() / np.abs(want).max())
    print(f"== jax.jit(blackwell_gemm) on {jax.devices()[0].platform}: max error {err:.1e} of max |c| ==")
    if err > 1e-5:
        raise SystemExit("blackwell_gemm: the emulator's result does not match numpy")


if __name__ == "__main__":
    main()

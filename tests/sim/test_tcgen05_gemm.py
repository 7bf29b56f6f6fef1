"""A whole tcgen05 GEMM on the emulator, the way a Blackwell kernel runs
one: plain loads put A (M x K) and B (N x K, both K-major f16) into shared
memory in the canonical no-swizzle layout, warp 0 allocates tensor memory,
one thread issues ``tcgen05.mma.kind::f16`` K/16 times (f32 accumulator in
tensor memory, accumulating after the first), commits to an mbarrier that
every thread waits on, each warp reads its 32 lanes back with
``tcgen05.ld.32x32b``, stores D, and warp 0 frees the columns. Checked
against numpy; assembled by ptxas for sm_100a.

Layout (PTX ISA 9.7.16.3 "Canonical layouts", K-major, no swizzle): core
matrices of 8 rows x 16 bytes (8 f16 along K) lie 128 bytes each; core
matrix (row group g, K chunk c) at ``(g * K/8 + c) * 128``, so LBO (next K
chunk) = 128 bytes and SBO (next 8-row group) = K/8 * 128 bytes; the MMA of
K block ``kb`` starts ``kb * 256`` bytes in.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"


def canonical_k_major(x: np.ndarray) -> np.ndarray:
    """f16 matrix (rows, K) as the bytes of the layout in the module docstring."""
    rows, k = x.shape
    tiles = x.astype(np.float16).reshape(rows // 8, 8, k // 8, 8).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(tiles).view(np.uint8).reshape(-1)


def smem_desc(start: int, lbo: int, sbo: int) -> int:
    """sm_100 shared-memory descriptor (PTX ISA "Shared memory descriptor"):
    addresses >> 4 in bits 0-13 / 16-29 / 32-45, bits 46-48 = 0b001, no swizzle."""
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46


def instr_desc(m: int, n: int) -> int:
    """kind::f16 instruction descriptor: f32 D (bits 4-5 = 1), f16 A and B
    (0), both K-major, N >> 3 in bits 17-22, M >> 4 in bits 24-28."""
    return 1 << 4 | (n >> 3) << 17 | (m >> 4) << 24


def kernel(m: int, n: int, k: int) -> str:
    a_bytes, b_bytes = m * k * 2, n * k * 2
    ncols = max(32, n)
    mmas = "\n    ".join(
        f"add.u64 %rd12, %rd10, {(kb * 256) >> 4};\n    add.u64 %rd13, %rd11, {(kb * 256) >> 4};\n    "
        f"setp.ne.u32 %p4, {kb}, 0;\n    "
        f"tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd12, %rd13, %r21, %p4;"
        for kb in range(k // 16))
    regs = "{" + ", ".join(f"%f{i}" for i in range(n)) + "}"
    stores = "\n    ".join(f"st.global.f32 [%rd5+{4 * j}], %f{j};" for j in range(n))
    return HEAD + f""".visible .entry gemm(.param .u64 img, .param .u64 d)
{{
    .shared .align 128 .b8 smem[{a_bytes + b_bytes}];
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 slot;
    .reg .pred %p<8>;
    .reg .b32 %r<40>;
    .reg .f32 %f<{n}>;
    .reg .b64 %rd<20>;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    setp.lt.u32 %p2, %r1, 32;
    ld.param.u64 %rd1, [img];
    mov.u32 %r2, %r1;
COPY:
    setp.ge.u32 %p3, %r2, {(a_bytes + b_bytes) // 4};
    @%p3 bra COPIED;
    mul.wide.u32 %rd2, %r2, 4;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.u32 %r3, [%rd3];
    mov.u32 %r4, smem;
    shl.b32 %r5, %r2, 2;
    add.u32 %r4, %r4, %r5;
    st.shared.u32 [%r4], %r3;
    add.u32 %r2, %r2, 128;
    bra COPY;
COPIED:
    @%p2 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], {ncols};
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    fence.proxy.async.shared::cta;
    fence.mbarrier_init.release.cluster;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r20, [slot];
    @!%p1 bra ISSUED;
    mov.u32 %r6, smem;
    cvt.u64.u32 %rd6, %r6;
    shr.u64 %rd6, %rd6, 4;
    or.b64 %rd10, %rd6, {smem_desc(0, 128, k // 8 * 128)};
    add.u64 %rd7, %rd6, {a_bytes >> 4};
    or.b64 %rd11, %rd7, {smem_desc(0, 128, k // 8 * 128)};
    mov.u32 %r21, {instr_desc(m, n)};
    {mmas}
    tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [bar];
ISSUED:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [bar], 0;
    @!%p5 bra ISSUED;
    tcgen05.fence::after_thread_sync;
    shr.u32 %r7, %r1, 5;
    shl.b32 %r8, %r7, 21;
    add.u32 %r9, %r20, %r8;
    tcgen05.ld.sync.aligned.32x32b.x{n}.b32 {regs}, [%r9];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd4, [d];
    mul.wide.u32 %rd8, %r1, {4 * n};
    add.u64 %rd5, %rd4, %rd8;
    {stores}
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @%p2 tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r20, {ncols};
    @%p2 tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
    ret;
}}
"""


@pytest.mark.parametrize("n, k", [(64, 64), (32, 16), (128, 32)])
def test_f16_gemm_through_tensor_memory_matches_numpy(n: int, k: int) -> None:
    m = 128
    rng = np.random.default_rng(n + k)
    # Halves in [-4, 4]: products and sums of K of them are exact in f32.
    a = rng.integers(-8, 9, size=(m, k)) / 2
    b = rng.integers(-8, 9, size=(k, n)) / 2
    img = np.concatenate([canonical_k_major(a), canonical_k_major(b.T)])
    text = kernel(m, n, k)
    ptxas(text, "sm_100a")
    d = np.zeros((m, n), dtype=np.float32)
    sim.launch(text, img, d, block=(128, 1, 1), grid=(1, 1, 1))
    np.testing.assert_array_equal(d, (a @ b).astype(np.float32))

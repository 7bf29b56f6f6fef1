"""Helpers for the ``tcgen05.mma`` tests: shared-memory images in the ISA's
canonical layouts, sm_100 descriptors, instruction descriptors, and one
kernel that runs an MMA through tensor memory.

The layouts are written here from PTX ISA 9.7.16.3.3 "Canonical Layouts"
(CuTe shape:stride form, in elements, ``T`` elements per 16 bytes) and
9.7.16.10.6 "Swizzling" (CuTe ``Swizzle<B, M, S>`` on byte addresses),
independently of the emulator's address code.

The kernel (one or two CTAs of 128 threads): copy an image into shared
memory, ``tcgen05.alloc`` 512 columns, ``tcgen05.st`` a 128 x C word image
into tensor memory (D's old value, A, scale factors), thread 0 runs the MMA
lines and ``tcgen05.commit`` to an mbarrier, everyone waits on it,
``tcgen05.ld`` the 128 x C words back out, ``tcgen05.dealloc``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from jaxptx import sim
from jaxptx.runtime import ptxas

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"
RNG = np.random.default_rng(2024)

# Descriptor swizzle field -> (atom row bytes W, CuTe Swizzle B, M) (PTX ISA Table 40 / 55).
SWIZZLES = {0: (16, 0, 4), 1: (128, 2, 5), 2: (128, 3, 4), 4: (64, 2, 4), 6: (32, 1, 4)}
FLOAT_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
                "e5m2": ml_dtypes.float8_e5m2, "e2m3": ml_dtypes.float6_e2m3fn,
                "e3m2": ml_dtypes.float6_e3m2fn, "e2m1": ml_dtypes.float4_e2m1fn}
BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4,
        "s8": 8, "u8": 8}


def to_bits(values: np.ndarray, ty: str) -> np.ndarray:
    """Element bits (int64) of exactly representable ``values``."""
    if ty == "tf32":
        return values.astype(np.float32).view(np.uint32).astype(np.int64)
    if ty in ("s8", "u8"):
        return values.astype(np.int64) & 0xFF
    raw = values.astype(FLOAT_DTYPES[ty])
    assert np.array_equal(raw.astype(np.float64), values), f"values not exact in {ty}"
    width = {16: np.uint16}.get(BITS[ty], np.uint8)
    return raw.view(width).astype(np.int64) & ((1 << BITS[ty]) - 1)


def cute_offset(shape, stride, coord: int) -> int:
    """Offset of 1-D ``coord`` in a nested CuTe layout (first mode fastest)."""
    if isinstance(shape, int):
        return coord * stride
    total = 0
    for sh, st in zip(shape, stride):
        size = int(np.prod(_flat(sh)))
        total += cute_offset(sh, st, coord % size)
        coord //= size
    return total


def _flat(shape) -> list[int]:
    return [shape] if isinstance(shape, int) else [x for s in shape for x in _flat(s)]


def canonical(major: str, mode: int, T: int, mn: int, k: int) -> tuple[tuple, int, int]:
    """A dense canonical layout of an MN x K operand (PTX ISA 9.7.16.3.3):
    ``(layout, LBO elements, SBO elements)``."""
    c = SWIZZLES[mode][0] // 16
    if major == "K":
        m, kk = mn // 8, k // (2 * T)
        assert kk == 1
        if mode == 0:
            lbo, sbo = 8 * T * m, 8 * T
            return (((8, m), (T, 2)), ((T, sbo), (1, lbo))), lbo, sbo
        lbo, sbo = 1, 8 * c * T
        return (((8, m), (T, 2)), ((c * T, sbo), (1, T))), lbo, sbo
    m, kk = mn // (T * c), k // 8
    if mode == 0:
        lbo, sbo = 8 * T * m, 8 * T
        return (((T, 1, m), (8, kk)), ((1, T, sbo), (T, lbo))), lbo, sbo
    lbo, sbo = 8 * c * T, 8 * c * T * m
    return (((T, c, m), (8, kk)), ((1, T, lbo), (c * T, sbo))), lbo, sbo


def swizzle(mode: int, addr: int) -> int:
    """CuTe ``Swizzle<B, M, S>`` of the mode on a byte address (S = 3, or 2 for 32B atoms)."""
    _, b, mbase = SWIZZLES[mode]
    if not b:
        return addr
    shift = 7 - mbase
    mask = ((1 << b) - 1) << 7
    return addr ^ ((addr & mask) >> shift)


def place(img: np.ndarray, bits: np.ndarray, start: int, major: str, mode: int, T: int, ebits: int) -> int:
    """Write element bits ``(MN, K)`` into byte image ``img`` at ``start``;
    returns the descriptor (LBO/SBO from :func:`canonical`)."""
    mn, k = bits.shape
    layout, lbo, sbo = canonical(major, mode, T, mn, k)
    (sx, sy), (tx, ty) = layout
    for x in range(mn):
        for y in range(k):
            off = cute_offset(sx, tx, x) + cute_offset(sy, ty, y)
            chunk = swizzle(mode, start + (off // T) * 16)
            bit = (off % T) * ebits
            for j in range(ebits):
                byte, b = chunk + (bit + j) // 8, (bit + j) % 8
                img[byte] |= ((int(bits[x, y]) >> j) & 1) << b
    lbo_bytes = 16 if (major == "K" and mode != 0) else lbo * 16 // T
    return desc(start, lbo_bytes, sbo * 16 // T, mode)


def desc(start: int, lbo: int, sbo: int, mode: int, base: int = 0) -> int:
    """An sm_100 shared-memory descriptor (PTX ISA Table 40)."""
    enc = lambda v: (v & 0x3FFFF) >> 4         # noqa: E731
    return enc(start) | enc(lbo) << 16 | enc(sbo) << 32 | 1 << 46 | base << 49 | mode << 61


def idesc(atype: int, btype: int, dtype: int, m: int, n: int, *, neg_a=0, neg_b=0, mn_a=0, mn_b=0,
          sat=0) -> int:
    """PTX ISA Table 42 instruction descriptor."""
    return (sat << 3 | dtype << 4 | atype << 7 | btype << 10 | neg_a << 13 | neg_b << 14 | mn_a << 15
            | mn_b << 16 | (n >> 3) << 17 | (m >> 4) << 24)


def idesc_scaled(atype: int, btype: int, m: int, n: int, *, ue8m0=1, sfa=0, sfb=0, neg_a=0, neg_b=0,
                 mn_a=0, mn_b=0) -> int:
    """PTX ISA Tables 43/44 (block-scaled kinds)."""
    return (sfb << 4 | atype << 7 | btype << 10 | neg_a << 13 | neg_b << 14 | mn_a << 15 | mn_b << 16
            | (n >> 3) << 17 | ue8m0 << 23 | (m >> 7) << 27 | sfa << 29)


def mma_kernel(lines: str, cols: int, smem: int, *, ctas: int = 1, params: str = "", head: str = HEAD) -> str:
    """The test kernel (module docstring). ``lines`` run in thread 0 (of the
    even CTA for a pair) with ``%taddr`` the allocated base, ``%rd20..`` /
    ``%r20..`` loaded from ``params``; ``cols`` words a lane go in and out."""
    group = f"cta_group::{ctas}"
    st = "\n    ".join(
        f"ld.global.v4.u32 {{%r1, %r2, %r3, %r4}}, [%rd5+{32 * c}];\n    "
        f"ld.global.v4.u32 {{%r5, %r6, %r7, %r8}}, [%rd5+{32 * c + 16}];\n    "
        f"add.u32 %r9, %r10, {8 * c};\n    "
        f"tcgen05.st.sync.aligned.32x32b.x8.b32 [%r9], {{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}};"
        for c in range(cols // 8))
    ld = "\n    ".join(
        f"add.u32 %r9, %r10, {8 * c};\n    "
        f"tcgen05.ld.sync.aligned.32x32b.x8.b32 {{%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}}, [%r9];\n    "
        f"tcgen05.wait::ld.sync.aligned;\n    "
        f"st.global.v4.u32 [%rd6+{32 * c}], {{%r1, %r2, %r3, %r4}};\n    "
        f"st.global.v4.u32 [%rd6+{32 * c + 16}], {{%r5, %r6, %r7, %r8}};"
        for c in range(cols // 8))
    commit = (f"tcgen05.commit.{group}.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
              "[bar], %rs1;" if ctas == 2 else
              f"tcgen05.commit.{group}.mbarrier::arrive::one.shared::cluster.b64 [bar];")
    leader = "setp.eq.and.u32 %p1, %r11, 0, %p2;" if ctas == 2 else "mov.pred %p1, %p2;"
    return head + f""".visible .entry k(.param .u64 img, .param .u64 tin, .param .u64 tout{params})
{{
    .shared .align 1024 .b8 smem[{smem}];
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 slot;
    .reg .pred %p<8>;
    .reg .b16 %rs<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<40>;
    mov.u32 %r12, %tid.x;
    mov.u32 %r11, %cluster_ctarank;
    mov.u32 %r13, %ctaid.x;
    setp.eq.u32 %p2, %r12, 0;
    ld.param.u64 %rd1, [img];
    mul.wide.u32 %rd2, %r13, {smem};
    add.u64 %rd1, %rd1, %rd2;
    mov.u32 %r14, %r12;
COPY:
    setp.ge.u32 %p3, %r14, {smem // 4};
    @%p3 bra COPIED;
    mul.wide.u32 %rd3, %r14, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r15, [%rd4];
    mov.u32 %r16, smem;
    shl.b32 %r17, %r14, 2;
    add.u32 %r16, %r16, %r17;
    st.shared.u32 [%r16], %r15;
    add.u32 %r14, %r14, 128;
    bra COPY;
COPIED:
    setp.lt.u32 %p4, %r12, 32;
    @%p4 tcgen05.alloc.{group}.sync.aligned.shared::cta.b32 [slot], 512;
    @%p2 mbarrier.init.shared::cta.b64 [bar], 1;
    fence.mbarrier_init.release.cluster;
    tcgen05.fence::before_thread_sync;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r18, [slot];
    shr.u32 %r19, %r12, 5;
    shl.b32 %r19, %r19, 21;
    add.u32 %r10, %r18, %r19;
    mul.wide.u32 %rd7, %r13, {128 * cols * 4};
    mul.wide.u32 %rd8, %r12, {cols * 4};
    add.u64 %rd7, %rd7, %rd8;
    ld.param.u64 %rd5, [tin];
    add.u64 %rd5, %rd5, %rd7;
    ld.param.u64 %rd6, [tout];
    add.u64 %rd6, %rd6, %rd7;
    {st}
    tcgen05.wait::st.sync.aligned;
    tcgen05.fence::before_thread_sync;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    tcgen05.fence::after_thread_sync;
    mov.b32 %taddr, %r18;
    mov.u16 %rs1, 3;
    {leader}
    @!%p1 bra ISSUED;
    {lines}
    {commit}
ISSUED:
    mov.u32 %r20, 0;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [bar], %r20;
    @!%p5 bra WAIT;
    tcgen05.fence::after_thread_sync;
    {ld}
    tcgen05.fence::before_thread_sync;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    @%p4 tcgen05.dealloc.{group}.sync.aligned.b32 %r18, 512;
    @%p4 tcgen05.relinquish_alloc_permit.{group}.sync.aligned;
    ret;
}}
"""


def run(lines: str, img: np.ndarray, tm: np.ndarray, *, ctas: int = 1, params: str = "",
        args: tuple = (), assemble: bool = True, head: str = HEAD) -> np.ndarray:
    """Run :func:`mma_kernel`; ``img`` (ctas, smem bytes), ``tm`` (ctas, 128,
    C) uint32 tensor memory in; returns tensor memory out."""
    img = np.asarray(img, np.uint8).reshape(ctas, -1)
    tm = np.asarray(tm, np.uint32).reshape(ctas, 128, -1)
    decls = "\n    .reg .b32 %taddr;"
    text = mma_kernel(lines, tm.shape[2], img.shape[1], ctas=ctas, params=params, head=head)
    text = text.replace("    .reg .pred %p<8>;", "    .reg .pred %p<8>;" + decls)
    if assemble:
        ptxas(text, "sm_100a")
    out = np.zeros_like(tm)
    sim.launch(text, img.reshape(-1), tm.reshape(-1), out.reshape(-1), *args, block=(128, 1, 1),
               grid=(ctas, 1, 1), cluster=(ctas, 1, 1))
    return out

"""Sparse ``tcgen05.mma.sp`` / ``tcgen05.mma.ws.sp`` on the emulator against
numpy.

A is stored packed, M x K/2, and its 4-bit metadata codes (PTX ISA
9.7.16.10.8: two 2-bit indices, the first in bits 0-1, from the ISA's lists
of meaningful values) put each stored value back in its K-wide row: 1:2 for
``tf32`` (one of two), 2:4 for 16- and 8-bit kinds (two of four), 4:8 in
pairs for ``mxf4`` kinds. The reference builds the dense A from the codes
and multiplies in float64/int64.

The ISA draws the metadata's place in tensor memory only in figures; the
tests write it as the emulator reads it (CUTLASS's ``tmem_e_frg`` layout,
see :func:`jaxptx.sim.semantics.tcgen05_operands.sparse_metadata`): for
``f16``/``tf32`` the 32-bit metadata of row r in two 16-bit halves at lanes
``r%8 + 8b + 16*(r/16)``, bits ``16*((r/8)%2)``, column ``meta + selector``;
for 8- and 4-bit kinds the 64-bit metadata of row r in lane r, two columns.
Every kernel is assembled by ptxas for sm_100a (``tcgen05_mma_harness``).
"""

from __future__ import annotations

import numpy as np
import pytest
from tcgen05_mma_harness import (
    BITS,
    RNG,
    idesc,
    idesc_scaled,
    place,
    run,
    to_bits,
)

from jaxptx.sim import SimError

CODES = {"f16": 0, "bf16": 1, "tf32": 2, "e4m3": 0, "e5m2": 1, "e2m1": 5, "u8": 0, "s8": 1}
DENSE_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64}
PAIR_CODES = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b0110, 0b1110)
TF32_CODES = (0b0100, 0b1110)
PARAMS = ", .param .u64 da, .param .u64 db, .param .u32 id, .param .u32 en"
LOADS = ("ld.param.u64 %rd21, [da];\n    ld.param.u64 %rd22, [db];\n    ld.param.u32 %r21, [id];\n    "
         "ld.param.u32 %r23, [en];\n    setp.ne.u32 %p7, %r23, 0;\n    ")
META_COL, A_COL, COLS = 96, 64, 104       # metadata / A-in-TMEM columns, words a lane in the image


def values(ty: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random nonzero values exact in ``ty`` (sums stay exact in f32)."""
    if ty in ("s8", "u8"):
        v = RNG.integers(1, 100, shape)
        return (v * RNG.choice([-1, 1], shape) if ty == "s8" else v).astype(np.float64)
    if ty == "e2m1":
        return RNG.choice([0.5, 1.0, 1.5, 2.0, 3.0, -1.0, -2.0], shape)
    return RNG.choice([-4, -3, -2, -1, 1, 2, 3, 4], shape).astype(np.float64)


def codes_for(kind: str, rows: int) -> np.ndarray:
    chunks = 8 if kind in ("f16", "tf32") else 16
    return RNG.choice(TF32_CODES if kind == "tf32" else PAIR_CODES, (rows, chunks))


def dense_from(packed: np.ndarray, codes: np.ndarray, kind: str) -> np.ndarray:
    """The K-wide rows of A, placing each stored value by its chunk's code (PTX ISA 9.7.16.10.8)."""
    rows, chunks = codes.shape
    width = 2 if kind in ("mxf4", "mxf4nvf4") else 1
    per = 2 if kind == "tf32" else 4 * width
    A = np.zeros((rows, chunks * per))
    for r in range(rows):
        for j in range(chunks):
            lo, hi = codes[r, j] & 3, codes[r, j] >> 2
            if kind == "tf32":
                assert hi == lo + 1
                A[r, 2 * j + lo // 2] = packed[r, j]
                continue
            for t, index in enumerate((lo, hi)):
                for e in range(width):
                    A[r, j * per + index * width + e] = packed[r, (2 * j + t) * width + e]
    return A


def meta_image(tm: np.ndarray, codes: np.ndarray, kind: str, col: int, sel: int = 0, lane0: int = 0) -> None:
    """Write ``codes`` (rows, chunks) into tensor-memory image ``tm`` (128, C)."""
    rows = codes.shape[0]
    stream = [sum(int(c) << (4 * j) for j, c in enumerate(codes[r])) for r in range(rows)]
    for r in range(rows):
        if kind in ("f16", "tf32"):
            for b in (0, 1):
                lane = lane0 + r % 8 + 8 * b + 16 * (r // 16)
                shift = 16 * ((r // 8) % 2)
                tm[lane, col + sel] |= np.uint32(((stream[r] >> (16 * b)) & 0xFFFF) << shift)
        else:
            tm[lane0 + r, col] = stream[r] & 0xFFFF_FFFF
            tm[lane0 + r, col + 1] = stream[r] >> 32


def f32(words: np.ndarray) -> np.ndarray:
    return words.astype(np.uint32).view(np.float32).astype(np.float64)


def sparse_gemm(kind: str, atype: str, btype: str, *, m: int = 128, n: int = 32, dtype: int = 1,
                a_tmem: bool = False, sel: int = 0, ws: bool = False, codes: np.ndarray | None = None,
                word: int | None = None, mode_a: int = 2):
    """One sparse MMA: packed A (smem or TMEM), B (K x N, MN-major) from
    shared memory, metadata at column META_COL; returns (dense A, B, tensor memory out)."""
    k = 2 * DENSE_K[kind]
    packed = values(atype, (m, k // 2))
    codes = codes_for(kind, m) if codes is None else codes
    A = dense_from(packed, codes, kind)
    B = values(btype, (k, n))
    img = np.zeros(32768, np.uint8)
    tbits = 32 if kind == "tf32" else BITS[atype]
    T = 128 // max(tbits, 8)
    da = 0 if a_tmem else place(img, to_bits(packed, atype), 0, "K", mode_a, T, BITS[atype])
    tb = 128 // max(BITS[btype], 8)
    db = place(img, to_bits(B.T, btype), 16384, "MN", 1 if kind == "tf32" else 0, tb, BITS[btype])
    tm = np.zeros((128, COLS), np.uint32)
    for h in range(2 if ws and m == 64 else 4 if ws and m == 32 else 1):
        meta_image(tm, codes, kind, META_COL, sel, lane0=m * h)
    if a_tmem:                                    # 16-bit A: two elements a word, row r in lane r
        bits = to_bits(packed, atype).astype(np.uint32)
        tm[:m, A_COL:A_COL + k // 4] = bits[:, 0::2] | bits[:, 1::2] << np.uint32(16)
    if word is None:
        word = idesc(CODES[atype], CODES[btype], dtype, m, n, mn_b=1) | 1 << 2 | sel
    a_op = "[%r31]" if a_tmem else "%rd21"
    pre = f"add.u32 %r30, %taddr, {META_COL};\n    add.u32 %r31, %taddr, {A_COL};\n    "
    op = f"tcgen05.mma.ws.sp.cta_group::1.kind::{kind}" if ws else f"tcgen05.mma.sp.cta_group::1.kind::{kind}"
    line = f"{op} [%taddr], {a_op}, %rd22, [%r30], %r21, %p7;"
    out = run(LOADS + pre + line, img, tm, params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    return A, B, out[0]


@pytest.mark.parametrize("kind,atype,btype,dtype", [
    ("f16", "f16", "f16", 1), ("f16", "bf16", "bf16", 1), ("tf32", "tf32", "tf32", 1),
    ("f8f6f4", "e4m3", "e5m2", 1), ("i8", "s8", "u8", 2)])
def test_sparse_tile_every_unscaled_kind(kind: str, atype: str, btype: str, dtype: int) -> None:
    A, B, out = sparse_gemm(kind, atype, btype, dtype=dtype)
    got = out[:, :32].view(np.int32) if dtype == 2 else f32(out[:, :32])
    assert (A != 0).sum() == A.size // 2
    np.testing.assert_array_equal(got, A @ B)


@pytest.mark.parametrize("kind", ["f16", "tf32"])
def test_sparsity_selector_picks_the_metadata_column(kind: str) -> None:
    A, B, out = sparse_gemm(kind, kind, kind, sel=1)
    np.testing.assert_array_equal(f32(out[:, :32]), A @ B)


def test_sparse_a_from_tensor_memory() -> None:
    A, B, out = sparse_gemm("f16", "f16", "f16", a_tmem=True)
    np.testing.assert_array_equal(f32(out[:, :32]), A @ B)


@pytest.mark.parametrize("m", [32, 64, 128])
def test_ws_sparse_folds_n_and_reads_each_metadata_copy(m: int) -> None:
    n = 64
    A, B, out = sparse_gemm("f16", "f16", "f16", m=m, n=n, ws=True)
    fold = 128 // m
    width = n // fold
    D = f32(out)
    for h in range(fold):
        np.testing.assert_array_equal(D[m * h:m * (h + 1), :width], (A @ B)[:, h * width:(h + 1) * width])


def test_block_scaled_sparse_mxf8f6f4() -> None:
    """One ue8m0 factor per row of A / column of B covers the whole sparse K = 64."""
    m, n, k = 128, 32, 64
    packed = values("e4m3", (m, k // 2))
    codes = codes_for("mxf8f6f4", m)
    A = dense_from(packed, codes, "mxf8f6f4")
    B = values("e4m3", (k, n))
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(packed, "e4m3"), 0, "K", 2, 16, 8)
    db = place(img, to_bits(B.T, "e4m3"), 16384, "MN", 0, 16, 8)
    tm = np.zeros((128, COLS), np.uint32)
    meta_image(tm, codes, "mxf8f6f4", META_COL)
    ea = RNG.integers(125, 130, m)
    eb = RNG.integers(125, 130, n)
    # PTX ISA "Block Scaling": row / column x's factor at lane x % 32 of every
    # 32-lane partition, column x / 32 from the address, byte 0 (scale ID 0).
    for part in range(4):
        tm[32 * part:32 * part + 32, 40:44] = ea.reshape(4, 32).T.astype(np.uint32)
        tm[32 * part:32 * part + 32, 48] = eb.astype(np.uint32)
    word = idesc_scaled(0, 0, m, n, mn_b=1) | 1 << 2
    line = ("add.u32 %r30, %taddr, 96;\n    add.u32 %r31, %taddr, 40;\n    add.u32 %r32, %taddr, 48;\n    "
            "tcgen05.mma.sp.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [%taddr], %rd21, %rd22, "
            "[%r30], %r21, [%r31], [%r32], %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    want = (A * 2.0 ** (ea - 127)[:, None]) @ (B * 2.0 ** (eb - 127)[None, :])
    np.testing.assert_array_equal(f32(out[0][:, :32]), want)


def test_undefined_metadata_code_is_refused() -> None:
    codes = codes_for("f16", 128)
    codes[5, 3] = 0b0000
    with pytest.raises(SimError, match=r"row 5 of A, chunk 3: metadata code 0b0000"):
        sparse_gemm("f16", "f16", "f16", codes=codes)


def test_selector_2_and_m64_are_refused() -> None:
    with pytest.raises(SimError, match="sparsity selector 2"):
        sparse_gemm("f16", "f16", "f16", word=idesc(0, 0, 1, 128, 32, mn_b=1) | 1 << 2 | 2)
    with pytest.raises(SimError, match="Layout F"):
        sparse_gemm("f16", "f16", "f16", m=64)
    with pytest.raises(SimError, match="must be 0 for .kind::i8"):
        sparse_gemm("i8", "s8", "u8", dtype=2, word=idesc(1, 0, 2, 128, 32, mn_b=1) | 1 << 2 | 1)


def test_sparsity_bit_must_match_the_instruction() -> None:
    with pytest.raises(SimError, match="sparsity bit"):
        sparse_gemm("f16", "f16", "f16", word=idesc(0, 0, 1, 128, 32, mn_b=1))


def test_cta_pair_m256_each_cta_reads_its_own_rows_metadata() -> None:
    """``.cta_group::2``, M = 256: each CTA holds 128 rows of packed A, their
    metadata and of D; B's columns are split between the pair."""
    m, n, k = 256, 32, 32
    packed = values("f16", (m, k // 2))
    codes = codes_for("f16", m)
    A = dense_from(packed, codes, "f16")
    B = values("f16", (k, n))
    img = np.zeros((2, 32768), np.uint8)
    tm = np.zeros((2, 128, COLS), np.uint32)
    for c in range(2):
        da = place(img[c], to_bits(packed[128 * c:128 * (c + 1)], "f16"), 0, "K", 2, 8, 16)
        db = place(img[c], to_bits(B[:, 16 * c:16 * (c + 1)].T, "f16"), 16384, "MN", 0, 8, 16)
        meta_image(tm[c], codes[128 * c:128 * (c + 1)], "f16", META_COL)
    word = idesc(0, 0, 1, m, n, mn_b=1) | 1 << 2
    line = (f"add.u32 %r30, %taddr, {META_COL};\n    "
            "tcgen05.mma.sp.cta_group::2.kind::f16 [%taddr], %rd21, %rd22, [%r30], %r21, %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS, ctas=2,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    for c in range(2):
        np.testing.assert_array_equal(f32(out[c][:, :n]), (A @ B)[128 * c:128 * (c + 1)])


def test_mxf4_pairwise_4_of_8() -> None:
    """``.kind::mxf4``: A is 4:8 sparse in 2-element pairs (K = 128, 64 stored
    e2m1 values a row, 32 to a 16-byte chunk); block32 = two factors of 64 columns each."""
    m, n, k = 128, 32, 128
    packed = values("e2m1", (m, k // 2))
    codes = codes_for("mxf4", m)
    A = dense_from(packed, codes, "mxf4")
    B = values("e2m1", (k, n))
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(packed, "e2m1"), 0, "K", 2, 32, 4)
    # B (K = 128) K-major without swizzle: 16-byte K chunks LBO = 512 bytes
    # apart, so the second 64-element K half starts two chunks (1024 bytes) on.
    db = place(img, to_bits(B[:64].T, "e2m1"), 16384, "K", 0, 32, 4)
    place(img, to_bits(B[64:].T, "e2m1"), 16384 + 1024, "K", 0, 32, 4)
    tm = np.zeros((128, COLS), np.uint32)
    meta_image(tm, codes, "mxf4", META_COL)
    ea = RNG.integers(126, 129, (m, 2))
    eb = RNG.integers(126, 129, (n, 2))
    for part in range(4):
        for q in range(4):
            tm[32 * part:32 * part + 32, 40 + q] = (ea[32 * q:32 * q + 32, 0] | ea[32 * q:32 * q + 32, 1] << 8)
        tm[32 * part:32 * part + 32, 48] = eb[:, 0] | eb[:, 1] << 8
    word = idesc_scaled(1, 1, m, n) | 1 << 2
    line = ("add.u32 %r30, %taddr, 96;\n    add.u32 %r31, %taddr, 40;\n    add.u32 %r32, %taddr, 48;\n    "
            "tcgen05.mma.sp.cta_group::1.kind::mxf4.block_scale.scale_vec::2X [%taddr], %rd21, %rd22, "
            "[%r30], %r21, [%r31], [%r32], %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    sa = np.repeat(2.0 ** (ea - 127), 64, axis=1)
    sb = np.repeat(2.0 ** (eb - 127), 64, axis=1).T
    np.testing.assert_array_equal(f32(out[0][:, :32]), (A * sa) @ (B * sb))

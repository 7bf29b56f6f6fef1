"""``tcgen05.mma`` on the emulator: GEMM tiles through tensor memory against
numpy, for every dense kind, every swizzle mode, K- and MN-major operands, A
from shared or tensor memory, accumulate / overwrite / scale-input-d,
disable-output-lane masks, M = 64 (Layout F), ``.ws`` shapes with N folded
over the lanes, the zero-column mask, and refusals of what the ISA does not
define. Every kernel is assembled by ptxas for sm_100a (see
``tcgen05_mma_harness``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx.sim import SimError
from tcgen05_mma_harness import BITS, FLOAT_DTYPES, RNG, desc, idesc, place, run, to_bits

# idesc type codes (PTX ISA Table 42).
CODES = {"f16": 0, "bf16": 1, "tf32": 2, "e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5,
         "u8": 0, "s8": 1}
KIND_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32}
PARAMS = ", .param .u64 da, .param .u64 db, .param .u32 id, .param .u32 en"
LOADS = ("ld.param.u64 %rd21, [da];\n    ld.param.u64 %rd22, [db];\n    ld.param.u32 %r21, [id];\n    "
         "ld.param.u32 %r23, [en];\n    setp.ne.u32 %p7, %r23, 0;\n    ")


def values(ty: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random values exact in ``ty`` whose products and sums stay exact in f32."""
    if ty in ("s8", "u8"):
        return RNG.integers(-128 if ty == "s8" else 0, 128 if ty == "s8" else 256, shape).astype(np.float64)
    if ty in ("e2m1", "e2m3", "e3m2"):
        raw = RNG.integers(0, 1 << BITS[ty], shape).astype(np.uint8)
        return raw.view(FLOAT_DTYPES[ty]).astype(np.float64)
    return RNG.integers(-6, 7, shape).astype(np.float64)


def smem_layout(kind: str, ty: str) -> tuple[int, int]:
    """(elements a 16-byte chunk holds, bits an element takes there)."""
    if kind in ("mxf4", "mxf4nvf4"):
        return 32, 4
    return 128 // max(BITS[ty], 8), BITS[ty]


def f32(words: np.ndarray) -> np.ndarray:
    return words.astype(np.uint32).view(np.float32).astype(np.float64)


def gemm(kind: str, atype: str, btype: str, *, m: int = 128, n: int = 32, mode: int = 0, amajor: str = "K",
         bmajor: str = "K", dtype: str = "f32", enable: int = 0, old: np.ndarray | None = None,
         tail: str = "", mods: str = "", sat: int = 0, neg: tuple[int, int] = (0, 0), pre: str = ""):
    """One ``tcgen05.mma.cta_group::1.kind::<kind>`` with A and B from shared
    memory; returns (A, B, tensor memory out)."""
    k = KIND_K[kind]
    A, B = values(atype, (m, k)), values(btype, (k, n))
    img = np.zeros(32768, np.uint8)
    ta, ea = smem_layout(kind, atype)
    tb, eb = smem_layout(kind, btype)
    da = place(img, to_bits(A, atype), 0, amajor, mode, ta, ea)
    db = place(img, to_bits(B.T, btype), 16384, bmajor, mode, tb, eb)
    word = idesc(CODES[atype], CODES[btype], {"f16": 0, "f32": 1, "s32": 2}[dtype], m, n,
                 mn_a=amajor == "MN", mn_b=bmajor == "MN", sat=sat, neg_a=neg[0], neg_b=neg[1])
    tm = np.zeros((128, max(8, n)), np.uint32) if old is None else old
    line = f"tcgen05.mma.cta_group::1.kind::{kind}{mods} [%taddr], %rd21, %rd22, %r21{tail or ', %p7'};"
    out = run(LOADS + pre + line, img, tm, params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(enable)))
    return A, B, out[0]


@pytest.mark.parametrize("mode", [0, 2, 4, 6])
@pytest.mark.parametrize("amajor,bmajor", [("K", "K"), ("MN", "MN"), ("MN", "K")])
def test_f16_tile_every_swizzle_and_major(mode: int, amajor: str, bmajor: str) -> None:
    A, B, out = gemm("f16", "f16", "f16", n=64, mode=mode, amajor=amajor, bmajor=bmajor)
    np.testing.assert_array_equal(f32(out), A @ B)


def test_bf16_negated_and_f16_accumulator() -> None:
    A, B, out = gemm("f16", "bf16", "bf16", n=16, mode=2, neg=(1, 0))
    np.testing.assert_array_equal(f32(out[:, :16]), -A @ B)
    old = np.zeros((128, 16), np.uint32)
    C = values("f16", (128, 16))
    old[:] = C.astype(np.float16).view(np.uint16) | np.uint32(0xABCD0000)   # high halves are ignored
    A, B, out = gemm("f16", "f16", "f16", n=16, mode=4, dtype="f16", enable=1, old=old, neg=(0, 1))
    assert not (out >> 16).any()                              # D's 16-bit elements: low halves only
    got = (out & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)
    np.testing.assert_array_equal(got, A @ -B + C)


@pytest.mark.parametrize("mode", [0, 2, 4, 6])
@pytest.mark.parametrize("kind,atype,btype,dtype", [("f16", "bf16", "bf16", "f32"), ("tf32", "tf32", "tf32", "f32"),
                                                    ("f8f6f4", "e4m3", "e2m1", "f32"), ("i8", "s8", "u8", "s32")])
def test_every_kind_every_swizzle_k_major(kind: str, atype: str, btype: str, dtype: str, mode: int) -> None:
    A, B, out = gemm(kind, atype, btype, n=16, mode=mode, dtype=dtype)
    got = out[:, :16].view(np.int32) if dtype == "s32" else f32(out[:, :16])
    np.testing.assert_array_equal(got, A @ B)


@pytest.mark.parametrize("mode,major", [(0, "K"), (2, "K"), (4, "K"), (6, "K"), (1, "MN")])
def test_tf32_tile(mode: int, major: str) -> None:
    A, B, out = gemm("tf32", "tf32", "tf32", n=32, mode=mode, amajor=major, bmajor=major)
    np.testing.assert_array_equal(f32(out), A @ B)


@pytest.mark.parametrize("atype,btype,mode,major", [
    ("e4m3", "e5m2", 2, "K"), ("e5m2", "e4m3", 0, "K"), ("e2m3", "e3m2", 4, "K"), ("e3m2", "e2m1", 6, "K"),
    ("e2m1", "e2m1", 2, "K"), ("e4m3", "e4m3", 4, "MN"), ("e5m2", "e5m2", 6, "MN"),
])
def test_f8f6f4_mixed_types(atype: str, btype: str, mode: int, major: str) -> None:
    A, B, out = gemm("f8f6f4", atype, btype, n=64 if major == "MN" else 32, mode=mode, amajor=major,
                     bmajor=major)
    np.testing.assert_array_equal(f32(out), A @ B)


def test_f8f6f4_into_f16() -> None:
    A, B, out = gemm("f8f6f4", "e2m1", "e4m3", n=16, mode=2, dtype="f16")
    want = (A @ B).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal((out[:, :16] & 0xFFFF).astype(np.uint16).view(np.float16), want)


@pytest.mark.parametrize("atype,btype,major", [("s8", "u8", "K"), ("u8", "s8", "MN"), ("s8", "s8", "K")])
def test_i8_exact_s32(atype: str, btype: str, major: str) -> None:
    A, B, out = gemm("i8", atype, btype, n=32, mode=6 if major == "MN" else 2, amajor=major, bmajor=major,
                     dtype="s32")
    np.testing.assert_array_equal(out.view(np.int32), (A @ B).astype(np.int64))


def test_i8_saturate_and_wrap() -> None:
    old = np.full((128, 32), 2**31 - 100, np.uint32)
    for sat in (0, 1):
        A, B, out = gemm("i8", "u8", "u8", n=32, mode=2, dtype="s32", enable=1, old=old.copy(), sat=sat)
        exact = (A @ B).astype(np.int64) + (2**31 - 100)
        want = np.clip(exact, -2**31, 2**31 - 1) if sat else (exact + 2**31) % 2**32 - 2**31
        np.testing.assert_array_equal(out.view(np.int32), want)


def test_enable_input_d_accumulates_or_overwrites_and_scale_input_d() -> None:
    C = values("f16", (128, 16)) * 8
    old = C.astype(np.float32).view(np.uint32).copy()
    for enable in (0, 1):
        A, B, out = gemm("f16", "f16", "f16", n=16, mode=2, enable=enable, old=old.copy())
        np.testing.assert_array_equal(f32(out), A @ B + (C if enable else 0))
    A, B, out = gemm("tf32", "tf32", "tf32", n=16, mode=2, old=old.copy(), tail=", %p7, 3", enable=1)
    np.testing.assert_array_equal(f32(out), A @ B + C / 8)


def test_disable_output_lane_mask() -> None:
    old = np.full((128, 16), np.float32(-1.0).view(np.uint32), np.uint32)
    words = [0x0000_00FF, 0x8000_0001, 0, 0xFFFF_FFFF]
    movs = "".join(f"mov.b32 %r{25 + i}, {w};\n    " for i, w in enumerate(words))
    tail = ", {%r25, %r26, %r27, %r28}, %p7"
    A, B, out = gemm("f16", "f16", "f16", n=16, mode=2, old=old, tail=tail, pre=movs)
    lanes = np.arange(128)
    off = np.array([(words[ln // 32] >> (ln % 32)) & 1 for ln in lanes], bool)
    D = f32(out)
    np.testing.assert_array_equal(D[off], -1.0)
    np.testing.assert_array_equal(D[~off], (A @ B)[~off])


@pytest.mark.parametrize("lane", [0, 16])
def test_m64_uses_half_the_lanes_layout_f(lane: int) -> None:
    """Layout F: row i at lane base + (i % 16) + 32 * (i // 16)."""
    old = np.full((128, 16), 7, np.uint32)
    A, B, out = gemm("f16", "f16", "f16", m=64, n=16, mode=2, old=old)
    if lane:
        A, B, out = _with_lane_offset(lane)
    rows = np.arange(64)
    lanes = lane + rows % 16 + 32 * (rows // 16)
    np.testing.assert_array_equal(f32(out[lanes]), A @ B)
    untouched = np.setdiff1d(np.arange(128), lanes)
    assert (out[untouched] == 7).all()


def _with_lane_offset(lane: int):
    k, n = 16, 16
    A, B = values("f16", (64, k)), values("f16", (k, n))
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(A, "f16"), 0, "K", 2, 8, 16)
    db = place(img, to_bits(B.T, "f16"), 16384, "K", 2, 8, 16)
    word = idesc(0, 0, 1, 64, n)
    line = (f"add.u32 %r24, %taddr, {lane << 16};\n    "
            "tcgen05.mma.cta_group::1.kind::f16 [%r24], %rd21, %rd22, %r21, %p7;")
    out = run(LOADS + line, img, np.full((128, 16), 7, np.uint32), params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    return A, B, out[0]


def test_a_from_tensor_memory() -> None:
    """A in tensor memory: row i in lane i, K elements packed into 32-bit
    columns from the a-tmem column (2 f16 a word; 4 8-bit containers, e2m1
    in bits 2-5 of its byte)."""
    for kind, ty, per, k in (("f16", "f16", 2, 16), ("f8f6f4", "e4m3", 4, 32), ("f8f6f4", "e2m1", 4, 32)):
        A, B = values(ty, (128, k)), values("e4m3" if kind == "f8f6f4" else ty, (k, 32))
        bits = to_bits(A, ty) << (2 if ty == "e2m1" else 0)
        width = 32 // per
        tm = np.zeros((128, 48), np.uint32)
        for j in range(k):
            tm[:, 40 + j // per] |= (bits[:, j] << (width * (j % per))).astype(np.uint32)
        img = np.zeros(32768, np.uint8)
        btype = "e4m3" if kind == "f8f6f4" else ty
        db = place(img, to_bits(B.T, btype), 16384, "K", 2, 128 // BITS[btype], BITS[btype])
        word = idesc(CODES[ty], CODES[btype], 1, 128, 32)
        line = (f"add.u32 %r24, %taddr, 40;\n    "
                f"tcgen05.mma.cta_group::1.kind::{kind} [%taddr], [%r24], %rd22, %r21, %p7;")
        out = run(LOADS + line, img, tm, params=PARAMS, args=(np.uint64(0), np.uint64(db), np.uint32(word),
                                                                np.uint32(0)))
        np.testing.assert_array_equal(f32(out[0][:, :32]), A @ B, err_msg=f"{kind} {ty}")


@pytest.mark.parametrize("m,n", [(32, 64), (64, 128), (128, 64)])
def test_ws_shapes_fold_n_over_the_lanes(m: int, n: int) -> None:
    """Layouts G/E/D: column j of row i at lane i + M * (j // (N/f)), column j % (N/f)."""
    k = 16
    A, B = values("f16", (m, k)), values("f16", (k, n))
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(A, "f16"), 0, "K", 2, 8, 16)
    db = place(img, to_bits(B.T, "f16"), 16384, "K", 2, 8, 16)
    line = "tcgen05.mma.ws.cta_group::1.kind::f16 [%taddr], %rd21, %rd22, %r21, %p7;"
    fold = 128 // m
    out = run(LOADS + line, img, np.zeros((128, n // fold), np.uint32), params=PARAMS,
              args=(np.uint64(da), np.uint64(db), np.uint32(idesc(0, 0, 1, m, n)), np.uint32(0)))[0]
    D = np.concatenate([f32(out[m * h:m * (h + 1)]) for h in range(fold)], axis=1)
    np.testing.assert_array_equal(D, A @ B)


def test_ws_zero_column_mask_descriptor() -> None:
    """PTX ISA 9.7.16.4.3 example 2 (M = 128): use 4 columns, zero 3, repeat;
    with a shift of 2, MMA column j takes B column j + 2."""
    k, n = 16, 64
    A, B = values("f16", (128, k)), values("f16", (k, n + 8))      # 8-row groups; 66 used
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(A, "f16"), 0, "K", 2, 8, 16)
    db = place(img, to_bits(B.T, "f16"), 16384, "K", 2, 8, 16)
    zcm = 1 << 39 | 2 << 40 | 3 << 48 | 2 << 56
    line = "mov.b64 %rd23, %rd24;\n    tcgen05.mma.ws.cta_group::1.kind::f16 [%taddr], %rd21, %rd22, %r21, %p7, %rd23;"
    params = PARAMS + ", .param .u64 zcm"
    lines = LOADS + "ld.param.u64 %rd24, [zcm];\n    " + line
    word = idesc(0, 0, 1, 128, n) | 2 << 30          # maximum shift 16
    out = run(lines, img, np.zeros((128, n), np.uint32), params=params,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0), np.uint64(zcm)))[0]
    zero = (np.arange(n) % 7) >= 4
    want = A @ np.where(zero[None, :], 0, B[:, 2:n + 2])
    np.testing.assert_array_equal(f32(out), want)


BAD = [
    (idesc(0, 0, 1, 48, 32), r"M \(bits 24-28\) must be one of 64, 128 .*got 48"),
    (idesc(0, 0, 1, 128, 264), r"N \(bits 17-22\) must be a multiple of 8 in \[8, 256\] .*got 264"),
    (idesc(0, 0, 1, 128, 32) | 1 << 2, "sparsity bit"),
    (idesc(2, 2, 1, 128, 32), "atype .* must be 0 \\(f16\\)/1 \\(bf16\\)"),
    (idesc(0, 0, 2, 128, 32), "dtype .* must be 0 \\(f16\\)/1 \\(f32\\)"),
    (idesc(0, 1, 1, 128, 32), "one type for .kind::f16, got f16 and bf16"),
]


@pytest.mark.parametrize("word,message", BAD)
def test_bad_instruction_descriptors_are_refused(word: int, message: str) -> None:
    img = np.zeros(32768, np.uint8)
    line = "tcgen05.mma.cta_group::1.kind::f16 [%taddr], %rd21, %rd22, %r21, %p7;"
    with pytest.raises(SimError, match=message):
        run(LOADS + line, img, np.zeros((128, 8), np.uint32), params=PARAMS, assemble=False,
            args=(np.uint64(desc(0, 16, 128, 2)), np.uint64(desc(16384, 16, 128, 2)), np.uint32(word),
                  np.uint32(0)))


def test_bad_shared_memory_descriptors_are_refused() -> None:
    img = np.zeros(32768, np.uint8)
    line = "tcgen05.mma.cta_group::1.kind::f16 [%taddr], %rd21, %rd22, %r21, %p7;"
    good = desc(16384, 16, 128, 2)
    for da, message in ((good & ~(1 << 46), "bits 46-48 must be the fixed value 0b001"),
                        (good | 3 << 61, "swizzle mode .* got 3"),
                        (desc(0, 16, 128, 1), "32B atomicity is for MN-major operands only")):
        with pytest.raises(SimError, match=message):
            run(LOADS + line, img, np.zeros((128, 8), np.uint32), params=PARAMS, assemble=False,
                args=(np.uint64(da), np.uint64(good), np.uint32(idesc(0, 0, 1, 128, 32)), np.uint32(0)))


def test_ashift_form_runs_and_shifts_a_after_the_mma() -> None:
    """``.ashift`` (once refused here) runs: the MMA reads A from tensor
    memory as it is, then A's rows move one lane down (row 0 keeps its own,
    lane 127's old row is lost). More in ``test_tcgen05_ashift.py``; sparse
    ``tcgen05.mma.sp`` in ``test_tcgen05_sparse.py``."""
    A, B = values("f16", (128, 16)), values("f16", (16, 16))
    tm = np.zeros((128, 48), np.uint32)
    bits = to_bits(A, "f16")
    tm[:, 40:48] = (bits[:, 0::2] | bits[:, 1::2] << 16).astype(np.uint32)
    img = np.zeros(32768, np.uint8)
    db = place(img, to_bits(B.T, "f16"), 16384, "K", 2, 8, 16)
    line = ("add.u32 %r24, %taddr, 40;\n    "
            "tcgen05.mma.cta_group::1.kind::f16.ashift [%taddr], [%r24], %rd22, %r21, %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS,
              args=(np.uint64(0), np.uint64(db), np.uint32(idesc(0, 0, 1, 128, 16)), np.uint32(0)))[0]
    np.testing.assert_array_equal(f32(out[:, :16]), A @ B)
    np.testing.assert_array_equal(out[1:, 40:], tm[:-1, 40:])
    np.testing.assert_array_equal(out[0, 40:], tm[0, 40:])


def test_bf16_values_are_exact() -> None:
    """A sanity check of the harness's bit packing against ml_dtypes."""
    v = np.array([1.5, -2.0, 3.0])
    assert np.array_equal(to_bits(v, "bf16"), v.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.int64))

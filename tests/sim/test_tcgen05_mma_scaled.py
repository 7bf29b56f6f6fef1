"""``tcgen05.mma`` block scaling (``.kind::mxf8f6f4``, ``mxf4``,
``mxf4nvf4``: scale factors in tensor memory, PTX ISA 9.7.16.10.7) and
``.cta_group::2`` across the two CTAs of a cluster pair, against numpy.
Every kernel is assembled by ptxas for sm_100a."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError
from tcgen05_mma_harness import HEAD, RNG, idesc, idesc_scaled, place, run, to_bits
from test_tcgen05_mma import LOADS, PARAMS, f32, values

CODES = {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5}
SFA_COL, SFB_COL = 64, 72


def scale_words(factors: np.ndarray, sf_id: int) -> np.ndarray:
    """Tensor-memory words ``(128, 8)`` holding scale-factor bytes
    ``factors`` ``(count, blocks)``: row/column x at lane x % 32 of every
    32-lane partition, column x // 32, bytes sf_id.. (PTX ISA "Scale Factor
    A/B ID"; CUTLASS's 32x128b.warpx4 copy makes the same image)."""
    words = np.zeros((128, 8), np.uint32)
    for x in range(factors.shape[0]):
        for b in range(factors.shape[1]):
            for part in range(4):
                words[32 * part + x % 32, x // 32] |= np.uint32(int(factors[x, b]) << (8 * (sf_id + b)))
    return words


def ue8m0(count: int, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    raw = RNG.integers(125, 130, (count, blocks))
    return raw, np.ldexp(1.0, raw - 127)


def ue4m3(count: int, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    raw = RNG.integers(0x30, 0x44, (count, blocks))        # 0.5 .. 3.5
    return raw, raw.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def scaled_gemm(kind: str, mods: str, atype: str, btype: str, blocks: int, scale: str, *, n: int = 32,
                sfa_id: int = 0, sfb_id: int = 0, head: str = HEAD):
    """One block-scaled MMA (M = 128, A and B K-major in shared memory)."""
    k = 32 if kind == "mxf8f6f4" else 64
    A, B = values(atype, (128, k)), values(btype, (k, n))
    per, ebits = (32, 4) if kind != "mxf8f6f4" else (16, {"e2m1": 4, "e2m3": 6, "e3m2": 6}.get(atype, 8))
    img = np.zeros(32768, np.uint8)
    da = place(img, to_bits(A, atype), 0, "K", 2, per, ebits)
    bbits = {"e2m1": 4, "e2m3": 6, "e3m2": 6}.get(btype, 8) if kind == "mxf8f6f4" else 4
    db = place(img, to_bits(B.T, btype), 16384, "K", 2, per, bbits)
    make = ue8m0 if scale == "ue8m0" else ue4m3
    ra, sa = make(128, blocks)
    rb, sb = make(n, blocks)
    tm = np.zeros((128, 80), np.uint32)
    tm[:, SFA_COL:SFA_COL + 8] = scale_words(ra, sfa_id)
    tm[:, SFB_COL:SFB_COL + 8] = scale_words(rb, sfb_id)
    codes = CODES if kind == "mxf8f6f4" else {"e2m1": 1}
    word = idesc_scaled(codes[atype], codes[btype], 128, n, ue8m0=int(scale == "ue8m0"), sfa=sfa_id, sfb=sfb_id)
    line = (f"add.u32 %r24, %taddr, {SFA_COL};\n    add.u32 %r25, %taddr, {SFB_COL};\n    "
            f"tcgen05.mma.cta_group::1.kind::{kind}.block_scale{mods} [%taddr], %rd21, %rd22, %r21, "
            "[%r24], [%r25], %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS, head=head,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))[0]
    As = A * np.repeat(sa, k // blocks, axis=1)
    Bs = B * np.repeat(sb.T, k // blocks, axis=0)
    want = (As @ Bs).astype(np.float32).astype(np.float64)
    return f32(out[:, :n]), want


@pytest.mark.parametrize("atype,btype,sfa,sfb", [("e4m3", "e2m1", 0, 3), ("e2m3", "e5m2", 2, 1),
                                                 ("e3m2", "e3m2", 1, 0)])
def test_mxf8f6f4_scale_vec_1x(atype: str, btype: str, sfa: int, sfb: int) -> None:
    got, want = scaled_gemm("mxf8f6f4", ".scale_vec::1X", atype, btype, 1, "ue8m0", sfa_id=sfa, sfb_id=sfb)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sf_id", [0, 2])
def test_mxf4_scale_vec_2x(sf_id: int) -> None:
    got, want = scaled_gemm("mxf4", ".scale_vec::2X", "e2m1", "e2m1", 2, "ue8m0", sfa_id=sf_id, sfb_id=2 - sf_id)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scale,mods,blocks", [("ue4m3", ".scale_vec::4X", 4), ("ue8m0", ".scale_vec::4X", 4),
                                               ("ue8m0", ".scale_vec::2X", 2)])
def test_mxf4nvf4(scale: str, mods: str, blocks: int) -> None:
    got, want = scaled_gemm("mxf4nvf4", mods, "e2m1", "e2m1", blocks, scale, n=64)
    np.testing.assert_array_equal(got, want)


def test_block16_and_default_block32_aliases() -> None:
    head = HEAD.replace("8.7", "8.8")
    got, want = scaled_gemm("mxf4nvf4", ".block16", "e2m1", "e2m1", 4, "ue4m3", head=head)
    np.testing.assert_array_equal(got, want)
    got, want = scaled_gemm("mxf4", "", "e2m1", "e2m1", 2, "ue8m0", head=head)
    np.testing.assert_array_equal(got, want)


def test_scale_factor_id_that_is_not_aligned_is_refused() -> None:
    with pytest.raises(SimError, match="scale factor A ID 1 .* expected one of 0, 2"):
        scaled_gemm("mxf4", ".scale_vec::2X", "e2m1", "e2m1", 2, "ue8m0", sfa_id=1)


# --- cta_group::2 -------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [256, 128])
def test_cta_pair_splits_a_and_b_and_writes_both_tensor_memories(m: int) -> None:
    """The even CTA's shared memory holds A rows 0..M/2-1 and B columns
    0..N/2-1, the odd CTA's the rest; each CTA's tensor memory gets its M/2
    rows of D (Layout A for M = 256; Layout B for M = 128: N folded over
    lanes 0-63 / 64-127)."""
    n, k = 64, 16
    A, B = values("f16", (m, k)), values("f16", (k, n))
    img = np.zeros((2, 32768), np.uint8)
    for c in range(2):
        da = place(img[c], to_bits(A[c * m // 2:(c + 1) * m // 2], "f16"), 0, "K", 2, 8, 16)
        db = place(img[c], to_bits(B[:, c * n // 2:(c + 1) * n // 2].T, "f16"), 16384, "K", 2, 8, 16)
    line = "tcgen05.mma.cta_group::2.kind::f16 [%taddr], %rd21, %rd22, %r21, %p7;"
    out = run(LOADS + line, img, np.zeros((2, 128, n), np.uint32), params=PARAMS, ctas=2,
              args=(np.uint64(da), np.uint64(db), np.uint32(idesc(0, 0, 1, m, n)), np.uint32(0)))
    want = A @ B
    for c in range(2):
        rows = want[c * m // 2:(c + 1) * m // 2]
        if m == 256:
            np.testing.assert_array_equal(f32(out[c]), rows)
        else:
            got = np.concatenate([f32(out[c][:64, :n // 2]), f32(out[c][64:, :n // 2])], axis=1)
            np.testing.assert_array_equal(got, rows)


def test_cta_pair_needs_a_cluster() -> None:
    text = HEAD + """.visible .entry k(.param .u32 id)
{
    .reg .b32 %r<4>;
    .reg .pred %p1;
    ld.param.u32 %r1, [id];
    mov.b32 %r2, 0;
    setp.ne.u32 %p1, %r2, 0;
    tcgen05.mma.cta_group::2.kind::f16 [%r2], %rd1, %rd1, %r1, %p1;
    ret;
}
""".replace(".reg .pred %p1;", ".reg .pred %p1;\n    .reg .b64 %rd1;\n    mov.b64 %rd1, 0;")
    ptxas(text, "sm_100a")
    with pytest.raises(SimError, match="cta_group::2 needs a CTA pair in the cluster; CTA 0 has rank 0 in a "
                                       "cluster of 1"):
        sim.launch(text, np.uint32(idesc(0, 0, 1, 256, 32)), block=(1, 1, 1))


def test_block_scaled_cta_pair() -> None:
    """mxf8f6f4, M = 256 over a CTA pair: each CTA's tensor memory holds the
    scale factors its data paths use (its own 128 rows of A, all N columns of B)."""
    m, n, k = 256, 32, 32
    A, B = values("e4m3", (m, k)), values("e2m1", (k, n))
    ra, sa = ue8m0(m, 1)
    rb, sb = ue8m0(n, 1)
    img = np.zeros((2, 32768), np.uint8)
    tm = np.zeros((2, 128, 80), np.uint32)
    for c in range(2):
        da = place(img[c], to_bits(A[128 * c:128 * (c + 1)], "e4m3"), 0, "K", 2, 16, 8)
        db = place(img[c], to_bits(B[:, 16 * c:16 * (c + 1)].T, "e2m1"), 16384, "K", 2, 16, 4)
        tm[c, :, SFA_COL:SFA_COL + 8] = scale_words(ra[128 * c:128 * (c + 1)], 1)
        tm[c, :, SFB_COL:SFB_COL + 8] = scale_words(rb, 2)
    word = idesc_scaled(0, 5, m, n, sfa=1, sfb=2)
    line = (f"add.u32 %r24, %taddr, {SFA_COL};\n    add.u32 %r25, %taddr, {SFB_COL};\n    "
            "tcgen05.mma.cta_group::2.kind::mxf8f6f4.block_scale.scale_vec::1X [%taddr], %rd21, %rd22, %r21, "
            "[%r24], [%r25], %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS, ctas=2,
              args=(np.uint64(da), np.uint64(db), np.uint32(word), np.uint32(0)))
    want = ((A * sa) @ (B * sb.T)).astype(np.float32)
    for c in range(2):
        np.testing.assert_array_equal(f32(out[c][:, :n]), want[128 * c:128 * (c + 1)])

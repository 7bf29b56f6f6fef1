"""``tcgen05.mma ... .ashift`` on the emulator, against numpy references
derived from the PTX ISA's text (see :mod:`jaxptx.sim.semantics.tcgen05_mma`):
the MMA reads A from tensor memory as it is at issue, then A's rows move
down one row in each CTA's tensor memory (row 0 keeps its words, the last
row's old words are lost); a later MMA reads the shifted A. Every kernel is
assembled by ptxas for sm_100a (see ``tcgen05_mma_harness``)."""

from __future__ import annotations

import numpy as np
import pytest
import jaxptx.profile  # noqa: F401  (registers the profiler: profile=True below)
from tcgen05_mma_harness import BITS, idesc, mma_kernel, place, run, to_bits
from test_tcgen05_mma import CODES, LOADS, PARAMS, f32, values

from jaxptx import sim
from jaxptx.sim import SimError

A_COL = 40          # A's first tensor-memory column; D from column 0
WIDTH = 56          # columns moved in and out (48..55: a marker that must stay)
# kind -> (A type, B type, D type code, K)
KINDS = {"f16": ("f16", "f16", 1, 16), "tf32": ("tf32", "tf32", 1, 8), "f8f6f4": ("e4m3", "e5m2", 1, 32),
         "i8": ("s8", "u8", 2, 32)}


def a_words(A: np.ndarray, ty: str) -> np.ndarray:
    """A (rows, K) packed into 32-bit tensor-memory words (rows, K / per word)."""
    bits = to_bits(A, ty)
    per = 32 // max(8, BITS[ty])
    out = np.zeros((A.shape[0], A.shape[1] // per), np.uint32)
    for j in range(A.shape[1]):
        out[:, j // per] |= (bits[:, j] << ((32 // per) * (j % per))).astype(np.uint32)
    return out


def shifted(rows: np.ndarray, times: int = 1) -> np.ndarray:
    """The ISA's ``.ashift`` on a (R, ...) array of rows: row r+1 takes row r,
    row 0 keeps its own, the last row's old value is dropped."""
    out = rows.copy()
    for _ in range(times):
        out[1:] = out[:-1].copy()
    return out


def b_image(img: np.ndarray, B: np.ndarray, ty: str) -> int:
    """B (K, N) into shared memory at 16 KiB (K-major, 128B swizzle); its descriptor."""
    return place(img, to_bits(B.T, ty), 16384, "K", 2, 128 // max(BITS[ty], 8), BITS[ty])


def tensor_memory(words: np.ndarray) -> np.ndarray:
    """A's words at column ``A_COL`` of a (128, WIDTH) image with a random marker after them."""
    tm = np.zeros((128, WIDTH), np.uint32)
    tm[:, A_COL:A_COL + words.shape[1]] = words
    tm[:, 48:] = (np.arange(128 * 8, dtype=np.uint64).reshape(128, 8) * 2654435761 % 2**32).astype(np.uint32)
    return tm


def result(out: np.ndarray, dtype_code: int, n: int) -> np.ndarray:
    return out[:, :n].view(np.int32).astype(np.int64) if dtype_code == 2 else f32(out[:, :n])


@pytest.mark.parametrize("kind", list(KINDS))
def test_mma_reads_a_then_shifts_its_rows(kind: str) -> None:
    """D = A @ B with A as it was; afterwards A's rows are one lane lower."""
    atype, btype, dcode, k = KINDS[kind]
    n = 32
    A, B = values(atype, (128, k)), values(btype, (k, n))
    words = a_words(A, atype)
    tm = tensor_memory(words)
    img = np.zeros(32768, np.uint8)
    db = b_image(img, B, btype)
    word = np.uint32(idesc(CODES[atype], CODES[btype], dcode, 128, n))
    line = (f"add.u32 %r24, %taddr, {A_COL};\n    "
            f"tcgen05.mma.cta_group::1.kind::{kind}.ashift [%taddr], [%r24], %rd22, %r21, %p7;")
    out = run(LOADS + line, img, tm, params=PARAMS, args=(np.uint64(0), np.uint64(db), word, np.uint32(0)))[0]
    np.testing.assert_array_equal(result(out, dcode, n), A @ B)
    want = tm.copy()
    want[:, A_COL:A_COL + words.shape[1]] = shifted(words)
    np.testing.assert_array_equal(out[:, 32:], want[:, 32:])       # A shifted, the rest untouched


def test_next_mmas_read_the_shifted_a() -> None:
    """Two ``.ashift`` MMAs (the second ``.collector::a::lastuse``) then a
    plain one, all into one accumulator: D = A@B + S(A)@B + S(S(A))@B."""
    n, k = 32, 16
    A, B = values("f16", (128, k)), values("f16", (k, n))
    words = a_words(A, "f16")
    tm = tensor_memory(words)
    img = np.zeros(32768, np.uint8)
    db = b_image(img, B, "f16")
    word = np.uint32(idesc(0, 0, 1, 128, n))
    head = "tcgen05.mma.cta_group::1.kind::f16"
    ops = "[%taddr], [%r24], %rd22, %r21"
    lines = (f"add.u32 %r24, %taddr, {A_COL};\n    setp.ne.u32 %p6, %r21, 0;\n    "
             f"{head}.ashift {ops}, %p7;\n    {head}.ashift.collector::a::lastuse {ops}, %p6;\n    "
             f"{head} {ops}, %p6;")
    out = run(LOADS + lines, img, tm, params=PARAMS, args=(np.uint64(0), np.uint64(db), word, np.uint32(0)))[0]
    once, twice = shifted(A), shifted(A, 2)
    np.testing.assert_array_equal(f32(out[:, :n]), A @ B + once @ B + twice @ B)
    np.testing.assert_array_equal(out[:, A_COL:48], shifted(words, 2))
    assert twice[1].tolist() == A[0].tolist() and twice[2].tolist() == A[0].tolist()


@pytest.mark.parametrize("m", [256, 128])
def test_cta_pair_each_cta_shifts_its_own_rows(m: int) -> None:
    """``.cta_group::2``: each CTA's tensor memory holds its M/2 rows of A
    (for M = 128, Layout B: read from lanes 0-63 and again from 64-127) and
    shifts them within itself; nothing crosses between the CTAs."""
    n, k = 32, 16
    rows = m // 2
    A, B = values("f16", (m, k)), values("f16", (k, n))
    tm = np.zeros((2, 128, WIDTH), np.uint32)
    img = np.zeros((2, 32768), np.uint8)
    for c in range(2):
        w = a_words(A[c * rows:(c + 1) * rows], "f16")
        tm[c] = tensor_memory(np.concatenate([w] * (128 // rows)))
        db = b_image(img[c], B[:, c * n // 2:(c + 1) * n // 2], "f16")
    word = np.uint32(idesc(0, 0, 1, m, n))
    line = (f"add.u32 %r24, %taddr, {A_COL};\n    "
            "tcgen05.mma.cta_group::2.kind::f16.ashift [%taddr], [%r24], %rd22, %r21, %p7;")
    out = run(LOADS + line, img, tm, ctas=2, params=PARAMS,
              args=(np.uint64(0), np.uint64(db), word, np.uint32(0)))
    want = A @ B
    for c in range(2):
        D = want[c * rows:(c + 1) * rows]
        if m == 256:
            np.testing.assert_array_equal(f32(out[c][:, :n]), D)
        else:                       # Layout B: columns 0..N/2-1 in lanes 0-63, the rest in 64-127
            got = np.concatenate([f32(out[c][:64, :n // 2]), f32(out[c][64:, :n // 2])], axis=1)
            np.testing.assert_array_equal(got, D)
        w = a_words(A[c * rows:(c + 1) * rows], "f16")
        copies = np.concatenate([shifted(w)] * (128 // rows))
        np.testing.assert_array_equal(out[c][:, A_COL:48], copies)
        np.testing.assert_array_equal(out[c][:, 48:], tm[c][:, 48:])


def test_ashift_with_m64_is_refused() -> None:
    """The ISA allows ``.ashift`` only with M = 128 or 256 (M comes from the
    run-time instruction descriptor, so ptxas cannot check it)."""
    img = np.zeros(32768, np.uint8)
    word = np.uint32(idesc(0, 0, 1, 64, 32))
    line = (f"add.u32 %r24, %taddr, {A_COL};\n    "
            "tcgen05.mma.cta_group::1.kind::f16.ashift [%taddr], [%r24], %rd22, %r21, %p7;")
    with pytest.raises(SimError, match="only allowed with M = 128 or M = 256 .* M = 64"):
        run(LOADS + line, img, np.zeros((128, 8), np.uint32), params=PARAMS,
            args=(np.uint64(0), np.uint64(b_image(img, np.zeros((16, 32)), "f16")), word, np.uint32(0)))


def test_sparse_a_shifts_its_stored_values_not_the_metadata() -> None:
    """``tcgen05.mma.sp ... .ashift``: the stored M x K/2 values of A move
    down one row; the metadata stays, so the next sparse MMA spreads row r's
    new values by row r's own codes."""
    import test_tcgen05_sparse as sp
    n, k = 32, 32
    packed, B = sp.values("f16", (128, k // 2)), sp.values("f16", (k, n))
    codes = sp.codes_for("f16", 128)
    img = np.zeros(32768, np.uint8)
    db = place(img, to_bits(B.T, "f16"), 16384, "MN", 0, 8, 16)
    tm = np.zeros((128, sp.COLS), np.uint32)
    sp.meta_image(tm, codes, "f16", sp.META_COL)
    tm[:, sp.A_COL:sp.A_COL + 8] = a_words(packed, "f16")
    word = np.uint32(idesc(0, 0, 1, 128, n, mn_b=1) | 1 << 2)
    ops = "[%taddr], [%r31], %rd22, [%r30], %r21"
    lines = (f"add.u32 %r30, %taddr, {sp.META_COL};\n    add.u32 %r31, %taddr, {sp.A_COL};\n    "
             "setp.ne.u32 %p6, %r21, 0;\n    "
             f"tcgen05.mma.sp.cta_group::1.kind::f16.ashift {ops}, %p7;\n    "
             f"tcgen05.mma.sp.cta_group::1.kind::f16 {ops}, %p6;")
    out = run(LOADS + lines, img, tm, params=PARAMS, args=(np.uint64(0), np.uint64(db), word, np.uint32(0)))[0]
    want = sp.dense_from(packed, codes, "f16") @ B + sp.dense_from(shifted(packed), codes, "f16") @ B
    np.testing.assert_array_equal(f32(out[:, :n]), want)
    np.testing.assert_array_equal(out[:, sp.A_COL:sp.A_COL + 8], shifted(tm[:, sp.A_COL:sp.A_COL + 8]))
    np.testing.assert_array_equal(out[:, sp.META_COL:], tm[:, sp.META_COL:])


@pytest.mark.parametrize("form", ["", ".ashift"])
def test_the_sanitizer_and_the_profiler_see_ashift_as_an_mma(form: str) -> None:
    """The harness copies B into shared memory with plain stores and no
    ``fence.proxy.async``: the sanitizer reports it for the plain and the
    ``.ashift`` MMA alike (both read B through the async proxy) and nothing
    once the fence is there; the profiler counts either as tensor work."""
    n, k = 32, 16
    A, B = values("f16", (128, k)), values("f16", (k, n))
    tm = tensor_memory(a_words(A, "f16"))
    img = np.zeros(32768, np.uint8)
    db = b_image(img, B, "f16")
    word = np.uint32(idesc(0, 0, 1, 128, n))
    line = (f"add.u32 %r24, %taddr, {A_COL};\n    "
            f"tcgen05.mma.cta_group::1.kind::f16{form} [%taddr], [%r24], %rd22, %r21, %p7;")
    text = mma_kernel(LOADS + line, WIDTH, img.size, params=PARAMS)
    text = text.replace("    .reg .pred %p<8>;", "    .reg .pred %p<8>;\n    .reg .b32 %taddr;")
    args = (np.uint64(0), np.uint64(db), word, np.uint32(0))

    def launch(kernel: str, **kw):
        return sim.launch(kernel, img.copy(), tm.copy().reshape(-1), np.zeros(tm.size, np.uint32), *args,
                          block=(128, 1, 1), grid=(1, 1, 1), cluster=(1, 1, 1), **kw)
    found = launch(text, check="all")
    assert [f.kind for f in found] == ["proxy"] and "tcgen05.mma" in found[0].line, found
    assert launch(text.replace("COPIED:\n", "COPIED:\n    fence.proxy.async.shared::cta;\n"), check="all") == []
    assert launch(text, profile=True).tensor_flops == {"f16": 2 * 128 * n * k}

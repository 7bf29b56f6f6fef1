"""The sm_100 ``ldmatrix`` / ``stmatrix`` forms on the emulator:
``ldmatrix.m16n16.{x1,x2}.trans`` (``.b8`` and the unpacking
``.b8x16.{b6x16_p32,b4x16_p64}``), ``ldmatrix.m8n16.{x1,x2,x4}.b8x16.*`` and
``stmatrix.m16n8.{x1,x2,x4}.trans.b8``.

The references here are written from the PTX ISA's words, per form, with
plain Python loops (independent of the emulator's table of maps): lanes
``R*j .. R*j+R-1`` give the row addresses of matrix ``j``; for ``.m16n16``
"each thread loads 4 consecutive columns across 2 rows" of the transposed
16x16 matrix (register ``r``: row ``lane/4 + 8r``, columns
``4*(lane%4) ..+3``); for ``.m8n16`` row ``lane/4``, columns
``4*(lane%4) ..+3``; ``stmatrix.m16n8.trans`` takes a 16x8 matrix in the
``mma`` accumulator arrangement (bytes 0,1 in row ``lane/4``, bytes 2,3 in
row ``lane/4 + 8``, columns ``2*(lane%4)``, ``+1``) and stores its 8 columns
as 16-byte rows. Packed 6/4-bit rows hold element ``t`` at bit ``6t``/``4t``;
an unpacked 8-bit element holds a 6-bit value in bits 0-5 and a 4-bit value
in bits 2-5 (PTX ISA "Optional Decompression"). Every kernel is assembled by
ptxas for sm_100a.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

HEAD = ".version 8.8\n.target sm_100a\n.address_size 64\n"
RNG = np.random.default_rng(100)


def _vec(n: int) -> str:
    return "{" + ", ".join(f"r{i}" for i in range(n)) + "}"


def ldmatrix_ptx(op: str, nregs: int) -> str:
    """Lane l copies 16 bytes of ``src`` to shared memory at l*16, then the
    warp runs ``op`` with row address smem + offs[l]; lane l stores its
    ``nregs`` registers at out + l*16."""
    stores = "\n    ".join(f"st.global.b32 [%d+{4 * i}], r{i};" for i in range(nregs))
    return HEAD + f""".visible .entry k(.param .u64 src, .param .u64 offs, .param .u64 out)
{{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %s, %o, %d, %q, %p, %v0, %v1, %base, %t16, %t8;
    .reg .u32 %lane;
    .reg .b32 r<{nregs}>;
    mov.u32 %lane, %tid.x;
    mul.wide.u32 %t16, %lane, 16;
    mul.wide.u32 %t8, %lane, 8;
    ld.param.u64 %s, [src];
    add.u64 %s, %s, %t16;
    ld.global.v2.u64 {{%v0, %v1}}, [%s];
    mov.u64 %base, smem;
    add.u64 %p, %base, %t16;
    st.shared.v2.u64 [%p], {{%v0, %v1}};
    bar.sync 0;
    ld.param.u64 %o, [offs];
    add.u64 %o, %o, %t8;
    ld.global.u64 %q, [%o];
    add.u64 %q, %q, %base;
    {op} {_vec(nregs)}, [%q];
    ld.param.u64 %d, [out];
    add.u64 %d, %d, %t16;
    {stores}
    ret;
}}
"""


def stmatrix_ptx(op: str, nregs: int) -> str:
    """Lane l loads ``nregs`` registers from regs + l*16, the warp runs
    ``op`` with row address smem + offs[l], then lane l copies shared bytes
    l*16 .. l*16+15 to out + l*16."""
    loads = "\n    ".join(f"ld.global.b32 r{i}, [%s+{4 * i}];" for i in range(nregs))
    return HEAD + f""".visible .entry k(.param .u64 regs, .param .u64 offs, .param .u64 out)
{{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %s, %o, %d, %q, %p, %v0, %v1, %base, %t16, %t8;
    .reg .u32 %lane;
    .reg .b32 r<{nregs}>;
    mov.u32 %lane, %tid.x;
    mul.wide.u32 %t16, %lane, 16;
    mul.wide.u32 %t8, %lane, 8;
    ld.param.u64 %s, [regs];
    add.u64 %s, %s, %t16;
    {loads}
    mov.u64 %base, smem;
    ld.param.u64 %o, [offs];
    add.u64 %o, %o, %t8;
    ld.global.u64 %q, [%o];
    add.u64 %q, %q, %base;
    {op} [%q], {_vec(nregs)};
    bar.sync 0;
    add.u64 %p, %base, %t16;
    ld.shared.v2.u64 {{%v0, %v1}}, [%p];
    ld.param.u64 %d, [out];
    add.u64 %d, %d, %t16;
    st.global.v2.u64 [%d], {{%v0, %v1}};
    ret;
}}
"""


def _assembled(text: str) -> str:
    ptxas(text, "sm_100a")
    return text


def _row_offsets(nrows: int) -> np.ndarray:
    """Lanes 0..nrows-1 address distinct shuffled 16-byte rows; the other
    lanes hold a misaligned, out-of-bounds offset that must be ignored."""
    offs = np.full(32, 0xFFFF_FFF3, dtype=np.uint64)
    offs[:nrows] = RNG.permutation(32)[:nrows].astype(np.uint64) * 16
    return offs


def _unpacked(row: bytes, fmt: str) -> list[int]:
    """The 16 elements of a 16-byte row as 8-bit register elements."""
    if fmt == "b8":
        return list(row)
    whole = int.from_bytes(row, "little")
    if fmt == "b6x16_p32":
        return [(whole >> (6 * t)) & 0x3F for t in range(16)]
    return [((whole >> (4 * t)) & 0xF) << 2 for t in range(16)]


def _word(elements: list[int]) -> int:
    return sum(int(e) << (8 * i) for i, e in enumerate(elements))


def _run_ldmatrix(op: str, nregs: int, nrows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = RNG.integers(0, 256, size=512, dtype=np.uint8)
    offs = _row_offsets(nrows)
    out = np.zeros((32, 4), np.uint32)
    sim.launch(_assembled(ldmatrix_ptx(op, nregs)), data, offs, out, block=(32, 1, 1))
    rows = data.reshape(32, 16)
    return out, rows, offs


@pytest.mark.parametrize("num", [1, 2])
@pytest.mark.parametrize("fmt", ["b8", "b6x16_p32", "b4x16_p64"])
@pytest.mark.parametrize("space", ["", ".shared", ".shared::cta"])
def test_ldmatrix_m16n16_trans(num: int, fmt: str, space: str) -> None:
    suffix = ".b8" if fmt == "b8" else f".b8x16.{fmt}"
    op = f"ldmatrix.sync.aligned.m16n16.x{num}.trans{space}{suffix}"
    if space == "":      # generic addressing: the shared window address
        op = "cvta.shared.u64 %q, %q;\n    " + op
    out, rows, offs = _run_ldmatrix(op, 2 * num, 16 * num)
    for j in range(num):
        m = [_unpacked(rows[int(offs[16 * j + i]) // 16].tobytes(), fmt) for i in range(16)]
        t = [[m[c][r] for c in range(16)] for r in range(16)]          # the transpose
        for lane in range(32):
            g, q = lane // 4, lane % 4
            for r in range(2):
                assert out[lane, 2 * j + r] == _word(t[g + 8 * r][4 * q:4 * q + 4]), (j, lane, r)
    assert not out[:, 2 * num:].any()


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("fmt", ["b6x16_p32", "b4x16_p64"])
def test_ldmatrix_m8n16_unpacks(num: int, fmt: str) -> None:
    op = f"ldmatrix.sync.aligned.m8n16.x{num}.shared.b8x16.{fmt}"
    out, rows, offs = _run_ldmatrix(op, num, 8 * num)
    for j in range(num):
        m = [_unpacked(rows[int(offs[8 * j + i]) // 16].tobytes(), fmt) for i in range(8)]
        for lane in range(32):
            g, q = lane // 4, lane % 4
            assert out[lane, j] == _word(m[g][4 * q:4 * q + 4]), (j, lane)
    assert not out[:, num:].any()


def test_ldmatrix_unpacking_ignores_padding_and_places_bits() -> None:
    """One row whose padding is all ones: the 4-bit element 0xF lands as 0x3C,
    the 6-bit element 0x3F as 0x3F, and no padding bit shows."""
    data = np.zeros(512, np.uint8)
    data[8:16] = 0xFF                                    # row 0: b4x16_p64 padding (bytes 8-15)
    data[16 + 12:32] = 0xFF                              # row 1: b6x16_p32 padding (bytes 12-15)
    data[0] = 0x0F                                       # row 0 element 0 = 0xF, element 1 = 0
    data[16] = 0x3F                                      # row 1 element 0 = 0x3F
    offs = np.zeros(32, np.uint64)
    for fmt, row, want in (("b4x16_p64", 0, 0x3C), ("b6x16_p32", 1, 0x3F)):
        offs[:8] = row * 16
        out = np.zeros((32, 4), np.uint32)
        op = f"ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.{fmt}"
        sim.launch(_assembled(ldmatrix_ptx(op, 1)), data, offs, out, block=(32, 1, 1))
        # every row is the same one: lanes 4g hold elements 0..3 of it, the rest 4..15 (zero)
        np.testing.assert_array_equal(out[:, 0], np.where(np.arange(32) % 4 == 0, want, 0))
        assert not out[:, 1:].any()


@pytest.mark.parametrize("num", [1, 2, 4])
def test_stmatrix_m16n8_trans_b8(num: int) -> None:
    regs = np.zeros((32, 4), np.uint32)
    regs[:, :num] = RNG.integers(0, 1 << 32, size=(32, num), dtype=np.uint64).astype(np.uint32)
    offs = _row_offsets(8 * num)
    out = np.zeros((32, 16), np.uint8)
    op = f"stmatrix.sync.aligned.m16n8.x{num}.trans.shared.b8"
    sim.launch(_assembled(stmatrix_ptx(op, num)), regs, offs, out, block=(32, 1, 1))
    expected = np.zeros((32, 16), np.uint8)
    for j in range(num):
        a = np.zeros((16, 8), np.uint8)                   # the 16x8 matrix
        for lane in range(32):
            g, q = lane // 4, lane % 4
            b = [(int(regs[lane, j]) >> (8 * k)) & 0xFF for k in range(4)]
            a[g, 2 * q], a[g, 2 * q + 1], a[g + 8, 2 * q], a[g + 8, 2 * q + 1] = b
        for n in range(8):                                # column n -> the row at lane 8j+n's address
            expected[int(offs[8 * j + n]) // 16] = a[:, n]
    np.testing.assert_array_equal(out, expected)


def test_ldmatrix_m16n16_feeds_mma_e4m3_a_fragment() -> None:
    """A 16x32 e4m3 matrix stored K-major (memory row k = column k of A)
    loaded with ``ldmatrix.m16n16.x2.trans.b8`` is exactly the A fragment of
    ``mma.m16n8k32 .e4m3``: D = A @ B checked against numpy."""
    a = RNG.integers(-4, 5, size=(16, 32)).astype(ml_dtypes.float8_e4m3fn)
    b = RNG.integers(-4, 5, size=(32, 8)).astype(ml_dtypes.float8_e4m3fn)
    src = np.ascontiguousarray(a.T).view(np.uint8).reshape(-1)     # 32 rows of 16 bytes
    bt = np.ascontiguousarray(b.T).view(np.uint8).reshape(-1)       # B^T: 8 rows of 32 bytes
    offs = (np.arange(32, dtype=np.uint64) * 16)
    out = np.zeros((32, 4), np.float32)
    text = HEAD + """.visible .entry k(.param .u64 src, .param .u64 bt, .param .u64 offs, .param .u64 out)
{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %s, %o, %d, %q, %p, %v0, %v1, %base, %t16, %t8, %bp;
    .reg .u32 %lane, %g, %qq, %boff;
    .reg .b32 a<4>, b<2>;
    .reg .f32 c<4>;
    mov.u32 %lane, %tid.x;
    mul.wide.u32 %t16, %lane, 16;
    mul.wide.u32 %t8, %lane, 8;
    ld.param.u64 %s, [src];
    add.u64 %s, %s, %t16;
    ld.global.v2.u64 {%v0, %v1}, [%s];
    mov.u64 %base, smem;
    add.u64 %p, %base, %t16;
    st.shared.v2.u64 [%p], {%v0, %v1};
    bar.sync 0;
    ld.param.u64 %o, [offs];
    add.u64 %o, %o, %t8;
    ld.global.u64 %q, [%o];
    add.u64 %q, %q, %base;
    ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8 {a0, a1, a2, a3}, [%q];
    shr.u32 %g, %lane, 2;
    and.b32 %qq, %lane, 3;
    mul.lo.u32 %boff, %g, 32;
    mad.lo.u32 %boff, %qq, 4, %boff;
    ld.param.u64 %bp, [bt];
    cvt.u64.u32 %p, %boff;
    add.u64 %bp, %bp, %p;
    ld.global.b32 b0, [%bp];
    ld.global.b32 b1, [%bp+16];
    mov.f32 c0, 0f00000000;
    mov.f32 c1, 0f00000000;
    mov.f32 c2, 0f00000000;
    mov.f32 c3, 0f00000000;
    mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {c0, c1, c2, c3}, {a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3};
    ld.param.u64 %d, [out];
    add.u64 %d, %d, %t16;
    st.global.v4.f32 [%d], {c0, c1, c2, c3};
    ret;
}
"""
    sim.launch(_assembled(text), src, bt, offs, out, block=(32, 1, 1))
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = np.zeros((16, 8))
    for lane in range(32):                                # accumulator layout of mma.m16n8
        g, q = lane // 4, lane % 4
        got[g, 2 * q], got[g, 2 * q + 1], got[g + 8, 2 * q], got[g + 8, 2 * q + 1] = out[lane]
    np.testing.assert_array_equal(got, want)


def test_new_forms_fault_on_misaligned_row_and_partial_warp() -> None:
    offs = _row_offsets(16)
    offs[9] += 4
    op = "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"
    text = _assembled(ldmatrix_ptx(op, 2))
    with pytest.raises(SimError, match=r"row address .* of lane 9 is not 16-byte aligned"):
        sim.launch(text, np.zeros(512, np.uint8), offs, np.zeros((32, 4), np.uint32), block=(32, 1, 1))
    offs = _row_offsets(8)
    st = _assembled(stmatrix_ptx("stmatrix.sync.aligned.m16n8.x1.trans.shared.b8", 1))
    with pytest.raises(SimError, match="executed by 16 of the 32 threads of a warp"):
        sim.launch(st, np.zeros((32, 4), np.uint32), offs, np.zeros((32, 16), np.uint8), block=(16, 1, 1))

"""jaxptx.dsl.fragments: the pure-Python maps and the registers the DSL
forms emit, both against the PTX ISA's fragment formulas written out here
(``isa_c``, ``isa_wgmma_d``, ``ISA_TCGEN05``), with an emulator run that
moves known values through mma.sync / wgmma / tcgen05.ld; and the swizzle
against the emulator's wgmma swizzle modes.

The DSL helpers and the emulator both read :mod:`jaxptx.isa.fragments`, so
"the DSL agrees with the emulator" holds by construction; what these tests
pin is that the one table (and the DSL's shift-and-mask emission of it) is
the ISA's."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, reg, sim, smem
from jaxptx.dsl import fragments as fr
from jaxptx.errors import TraceError
from jaxptx.types import b32, bf16, f32, f64, s32, u32

RNG = np.random.default_rng(0)

# --- mma.sync ------------------------------------------------------------------

# shape, A/B type, C/D type, (A, B, C/D registers), element bits of A/B
MMA = [("m16n8k16", "bf16", "f32", (4, 2, 4), 16), ("m16n8k8", "bf16", "f32", (2, 1, 4), 16),
       ("m16n8k16", "f16", "f16", (4, 2, 2), 16), ("m16n8k32", "s8", "s32", (4, 2, 4), 8),
       ("m8n8k4", "f64", "f64", (1, 1, 2), 64)]


def dims(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def isa_c(shape: str, lane: int, reg: int, ctype: str) -> tuple[int, int]:
    """PTX ISA "Matrix Fragments for mma.m*n*k*", C/D: c_i at row groupID +
    8 (i // 2), column 2 threadID_in_group + i % 2 (i < 2 for the 8 x 8
    accumulators); an .f16x2 register r holds c_2r and c_2r+1."""
    i = 2 * reg if ctype == "f16" else reg
    return lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2


def pack_fragments(mat: np.ndarray, which: str, bits: int) -> np.ndarray:
    """Per-lane A or B fragment registers (PTX ISA "Matrix Fragments for
    mma.m*n*k*": runs of e = 32/bits consecutive K elements per register;
    A run p at row groupID + 8 (p % (M/8)), B run p at rows tig*e + 4e*p)."""
    e = max(1, 32 // bits)
    rows, cols = mat.shape
    count = rows * cols // 32 // e
    out = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        regs = []
        for p in range(count):
            if which == "a":
                r, c = g + 8 * (p % (rows // 8)), t * e + 4 * e * (p // (rows // 8))
                regs.append(mat[r, c:c + e])
            else:
                r, c = t * e + 4 * e * p, g
                regs.append(mat[r:r + e, c])
        out.append(np.concatenate(regs))
    return np.ascontiguousarray(np.stack(out))


def mma_kernel(shape: str, ab: str, ctype: str, counts: tuple[int, int, int]):
    na, nb, nc = counts
    wide = ab == "f64"
    word = f64 if wide else b32
    acc_t = {"f32": f32, "s32": s32, "f16": b32, "f64": f64}[ctype]

    @kernel(in_specs=(Tile(32, na, word), Tile(32, nb, word)), out_specs=(Tile(32, nc, acc_t), Tile(32, 2, u32)),
            grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80", name=f"mma_{shape}_{ab}_{ctype}")
    def k(fa, fb, out, base):
        lane = ptx.special.laneid()
        size = 8 if wide else 4
        a = [ptx.ld.global_(word, fa.ptr + ptx.mul.wide.u32(lane, na * size) + i * size) for i in range(na)]
        b = [ptx.ld.global_(word, fb.ptr + ptx.mul.wide.u32(lane, nb * size) + i * size) for i in range(nb)]
        c = reg.array(acc_t, nc)
        for r in c:
            r.set(0.0 if ctype in ("f32", "f64") else 0)
        types = ("f16", "f16", "f16", "f16") if ctype == "f16" else (ctype, ab, ab, ctype)
        op = ptx.Instr(("mma", "sync", "aligned", shape, "row", "col", *types))
        op(c, a, b, c)
        for j in range(nc):
            ptx.st.global_(acc_t, out.ptr + ptx.mul.wide.u32(lane, nc * size) + j * size, c[j])
        row, col = fr.mma_base(shape, ctype=ctype)
        at = base.ptr + ptx.mul.wide.u32(lane, 8)
        ptx.st.global_.u32(at, row)
        ptx.st.global_.u32(at + 4, col)

    return k


@pytest.mark.parametrize("shape,ab,ctype,counts,bits", MMA)
def test_mma_accumulator_layout_on_the_emulator(shape, ab, ctype, counts, bits) -> None:
    m, n, kk = dims(shape)
    a = RNG.integers(-3, 4, (m, kk))
    b = RNG.integers(-3, 4, (kk, n))
    d = a @ b
    npt = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "s8": np.int8, "f64": np.float64}[ab]
    fa = pack_fragments(a.astype(npt), "a", bits)
    fb = pack_fragments(b.astype(npt), "b", bits)
    if ab != "f64":
        fa, fb = fa.view(np.uint32), fb.view(np.uint32)
    na, nb, nc = counts
    out = np.zeros((32, nc), {"f32": np.float32, "s32": np.int32, "f16": np.uint32, "f64": np.float64}[ctype])
    base = np.zeros((32, 2), np.uint32)
    sim.launch(mma_kernel(shape, ab, ctype, counts), fa, fb, out, base)
    if ctype == "f16":
        out = out.view(np.float16).reshape(32, nc, 2)
    assert fr.mma_registers(shape, ctype) == nc
    for lane in range(32):
        assert tuple(base[lane]) == isa_c(shape, lane, 0, ctype)
        for j in range(nc):
            r, c = isa_c(shape, lane, j, ctype)
            assert fr.mma_coords(shape, lane, j, ctype) == (r, c)
            if ctype == "f16":
                assert tuple(out[lane, j]) == (d[r, c], d[r, c + 1])
            else:
                assert out[lane, j] == d[r, c], (lane, j)


def test_mma_refusals() -> None:
    with pytest.raises(TraceError, match="no accumulator layout"):
        fr.mma_coords("m8n8k4", 0, 0, "f32")
    with pytest.raises(TraceError, match="out of range"):
        fr.mma_coords("m16n8k16", 0, 4)


# --- wgmma (and the swizzle modes it reads) ---------------------------------------------------

def isa_wgmma_d(t: int, i: int) -> tuple[int, int]:
    """PTX ISA "Register Fragments" for wgmma D: warp t // 32 owns rows
    16 (t // 32) .. +15; d_i of lane l is row l // 4 + 8 ((i // 2) % 2),
    column 8 (i // 4) + 2 (l % 4) + i % 2 of that slab."""
    lane = t % 32
    return 16 * (t // 32) + lane // 4 + 8 * (i // 2 % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def wgmma_kernel(n: int, kw: int):
    @kernel(in_specs=(Tile(64, kw, bf16), Tile(n, kw, bf16)), out_specs=(Tile(128, n // 2, f32), Tile(128, 2, u32)),
            grid=(1, 1, 1), block=(128, 1, 1), arch="sm_90a", name=f"wgmma_n{n}_k{kw}")
    def k(a, b, out, base):
        tid = ptx.special.tid.x()
        sa = smem.wgmma_tile(bf16, (64, kw), major="K")
        sb = smem.wgmma_tile(bf16, (n, kw), major="K")
        span = kw * 2                              # bytes per row = the swizzle mode
        chunks = span // 16
        for src, tile, rows in ((a, sa, 64), (b, sb, n)):
            for first in range(0, rows * chunks, 128):
                idx = tid + first
                with ptx.if_(idx < rows * chunks):
                    v = ptx.ld.global_.v4.b32(src.ptr + ptx.mul.wide.u32(idx, 16))
                    dst = tile.base + fr.swizzle(idx // chunks, (idx % chunks) << 4, bytes=span)
                    ptx.st.shared.v4.b32(dst, v)
        ptx.fence.proxy.async_.shared__cta()
        ptx.bar.sync(0)
        acc = reg.array(f32, n // 2)
        for r in acc:
            r.set(0.0)
        ptx.wgmma.fence.sync.aligned()
        op = ptx.Instr(("wgmma", "mma_async", "sync", "aligned", f"m64n{n}k16", "f32", "bf16", "bf16"))
        for kk in range(kw // 16):
            op(acc, sa.desc() + 2 * kk, sb.desc() + 2 * kk, 1, 1, 1, 0, 0)
        ptx.wgmma.commit_group.sync.aligned()
        ptx.wgmma.wait_group.sync.aligned(0)
        for j in range(n // 2):
            ptx.st.global_.f32(out.ptr + ptx.mul.wide.u32(tid, n * 2) + 4 * j, acc[j])
        row, col = fr.wgmma_base()
        at = base.ptr + ptx.mul.wide.u32(tid, 8)
        ptx.st.global_.u32(at, row)
        ptx.st.global_.u32(at + 4, col)

    return k


@pytest.mark.parametrize("n,kw", [(24, 16), (8, 32), (16, 64)])
def test_wgmma_layout_and_swizzle_on_the_emulator(n: int, kw: int) -> None:
    """kw 16/32/64 bf16 rows are 32/64/128 bytes: the tiles take that swizzle
    mode, written with fragments.swizzle and read by the emulator's wgmma."""
    a = RNG.integers(-3, 4, (64, kw))
    b = RNG.integers(-3, 4, (n, kw))
    d = a @ b.T
    out = np.zeros((128, n // 2), np.float32)
    base = np.zeros((128, 2), np.uint32)
    sim.launch(wgmma_kernel(n, kw), a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), out, base)
    for t in range(128):
        assert tuple(base[t]) == isa_wgmma_d(t, 0)
        for j in range(n // 2):
            r, c = isa_wgmma_d(t, j)
            assert fr.wgmma_coords(n, t, j) == (r, c)
            assert out[t, j] == d[r, c], (t, j)


# --- tcgen05.ld ----------------------------------------------------------------------

# PTX ISA "Matrix fragments for tcgen05.ld/st": (lane, column) of register
# r of thread l, and registers per .x1; .xN repeats along the columns.
ISA_TCGEN05 = {
    "32x32b": (1, lambda l, r: (l, r)),
    "16x64b": (1, lambda l, r: (l // 4 + 8 * (l % 2), l // 2 % 2 + 2 * r)),
    "16x128b": (2, lambda l, r: (l // 4 + 8 * (r % 2), l % 4 + 4 * (r // 2))),
    "16x256b": (4, lambda l, r: (l // 4 + 8 * (r // 2 % 2), r % 2 + 2 * (l % 4) + 8 * (r // 4))),
}


def tcgen05_kernel(shape: str, num: int):
    nregs = fr.tcgen05_ld_registers(shape, num)

    @kernel(out_specs=(Tile(32, nregs, u32), Tile(32, 2, u32)), grid=(1, 1, 1), block=(32, 1, 1),
            arch="sm_100a", name=f"tc_ld_{shape}_x{num}")
    def k(out, base):
        lane = ptx.special.laneid()
        slot = smem.alloc(u32, (1,))
        ptx.tcgen05.alloc.cta_group__1.sync.aligned.shared__cta.b32(slot[0], 32)
        ptx.tcgen05.fence__before_thread_sync()
        ptx.bar.sync(0)
        ptx.tcgen05.fence__after_thread_sync()
        tmem = ptx.ld.shared.b32(slot[0])
        codes = reg.array(b32, 32)                 # lane t, column c holds 64 t + c
        for c in range(32):
            ptx.mad.lo.u32(codes[c], lane, 64, c)
        ptx.tcgen05.st.sync.aligned._32x32b.x32.b32(tmem, codes)
        ptx.tcgen05.wait__st.sync.aligned()
        vals = reg.array(b32, nregs)
        ptx.Instr(("tcgen05", "ld", "sync", "aligned", shape, f"x{num}", "b32"))(vals, tmem)
        ptx.tcgen05.wait__ld.sync.aligned()
        for j in range(nregs):
            ptx.st.global_.b32(out.ptr + ptx.mul.wide.u32(lane, nregs * 4) + 4 * j, vals[j])
        row, col = fr.tcgen05_ld_base(shape)
        at = base.ptr + ptx.mul.wide.u32(lane, 8)
        ptx.st.global_.u32(at, row)
        ptx.st.global_.u32(at + 4, col)
        ptx.tcgen05.dealloc.cta_group__1.sync.aligned.b32(tmem, 32)
        ptx.tcgen05.relinquish_alloc_permit.cta_group__1.sync.aligned()

    return k


@pytest.mark.parametrize("shape,num", [("32x32b", 4), ("16x64b", 8), ("16x128b", 4), ("16x256b", 2)])
def test_tcgen05_ld_layout_on_the_emulator(shape: str, num: int) -> None:
    per, where = ISA_TCGEN05[shape]
    nregs = fr.tcgen05_ld_registers(shape, num)
    assert nregs == per * num
    out = np.zeros((32, nregs), np.uint32)
    base = np.zeros((32, 2), np.uint32)
    sim.launch(tcgen05_kernel(shape, num), out, base)
    for t in range(32):
        assert tuple(base[t]) == where(t, 0)
        for j in range(nregs):
            lane, col = where(t, j)
            assert fr.tcgen05_ld_coords(shape, t, j, num) == (lane, col)
            assert out[t, j] == 64 * lane + col, (t, j)


# --- offsets, the wgmma base's mask, refusals -----------------------------------------------

def test_offsets_are_the_isa_cells_relative_to_register_0() -> None:
    for j in range(4):
        assert fr.mma_offset("m16n8k16", j) == (8 * (j // 2), j % 2)
    assert [fr.mma_offset("m16n8k16", j, "f16") for j in range(2)] == [(0, 0), (8, 0)]
    assert [fr.mma_offset("m8n8k16", j, "s32") for j in range(2)] == [(0, 0), (0, 1)]
    for j in range(12):
        want = isa_wgmma_d(0, j)
        assert fr.wgmma_offset(24, j) == (want[0], want[1])
    for shape, (per, where) in ISA_TCGEN05.items():
        for j in range(2 * per):
            lane0, col0 = where(0, 0)
            lane, col = where(0, j)
            assert fr.tcgen05_ld_offset(shape, j, 2) == (lane - lane0, col - col0), (shape, j)


@kernel(out_specs=(Tile(256, 2, u32), Tile(256, 2, u32)), grid=(1, 1, 1), block=(256, 1, 1), arch="sm_90a")
def bases(wg, tc):
    tid = ptx.special.tid.x()
    at = ptx.mul.wide.u32(tid, 8)
    row, col = fr.wgmma_base()                  # %tid.x up to 255: only its low 7 bits count
    ptx.st.global_.u32(wg.ptr + at, row)
    ptx.st.global_.u32(wg.ptr + at + 4, col)
    row, col = fr.tcgen05_ld_base("16x64b")     # %laneid
    ptx.st.global_.u32(tc.ptr + at, row)
    ptx.st.global_.u32(tc.ptr + at + 4, col)


def test_emitted_bases_are_the_isa_cells_of_register_0() -> None:
    wg = np.zeros((256, 2), np.uint32)
    tc = np.zeros((256, 2), np.uint32)
    sim.launch(bases, wg, tc)
    for t in range(256):
        assert tuple(wg[t]) == isa_wgmma_d(t % 128, 0), t
        assert tuple(tc[t]) == ISA_TCGEN05["16x64b"][1](t % 32, 0), t


@pytest.mark.parametrize("call, message", [
    (lambda: fr.mma_registers("m16n8k16", "bf16"), r"ctype: expected one of \('f32', 's32', 'f64', 'f16'\)"),
    (lambda: fr.mma_offset("m16n8k16", 2, "f16"), r"register 2 out of range 0\.\.1"),
    (lambda: fr.wgmma_coords(20, 0, 0), "N must be a multiple of 8 in 8..256, got 20"),
    (lambda: fr.wgmma_offset(16, 8), "register 8 out of range 0..7 for N=16"),
    (lambda: fr.wgmma_coords(16, 128, 0), "thread 128 out of range 0..127"),
    (lambda: fr.tcgen05_ld_registers("16x32bx2"), r"expected a shape in \('32x32b', '16x64b', '16x128b', '16x256b'\)"),
    (lambda: fr.tcgen05_ld_offset("32x32b", 0, 3), r"\.x3 is not a repeat count"),
    (lambda: fr.tcgen05_ld_coords("16x128b", 0, 2), r"register 2 out of range 0\.\.1"),
    (lambda: fr.tcgen05_ld_coords("16x128b", 32, 0), "thread 32 out of range 0..31"),
])
def test_helper_refusals(call, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        call()


# --- swizzle -----------------------------------------------------------------------------

@pytest.mark.parametrize("span", [128, 64, 32])
def test_swizzle_python_model(span: int) -> None:
    for row in range(32):
        seen = set()
        for chunk in range(span // 16):
            off = fr.swizzle(row, chunk * 16 + 2, bytes=span)
            assert off // span == row and off % 16 == 2
            seen.add((off % span) // 16)
            want = chunk ^ ((row * span >> 7) & (span // 16 - 1))
            assert (off % span) // 16 == want
        assert len(seen) == span // 16
    assert fr.swizzle(1, 0, bytes=128) == 128 + 16 and fr.swizzle(2, 0, bytes=64) == 128 + 16


@kernel(out_specs=(Tile(3, 256, u32),), grid=(1, 1, 1), block=(256, 1, 1), arch="sm_80")
def swizzle_regs(out):
    tid = ptx.special.tid.x()
    for i, span in enumerate((128, 64, 32)):
        chunks = span // 16
        off = fr.swizzle(tid // chunks, (tid % chunks) << 4, bytes=span)
        ptx.st.global_.u32(out.ptr + ptx.mul.wide.u32(tid, 4) + i * 1024, off)


def test_swizzle_registers_match_python() -> None:
    out = np.zeros((3, 256), np.uint32)
    sim.launch(swizzle_regs, out)
    for i, span in enumerate((128, 64, 32)):
        chunks = span // 16
        assert [int(x) for x in out[i]] == [fr.swizzle(t // chunks, (t % chunks) * 16, bytes=span) for t in range(256)]


def test_swizzle_refusals() -> None:
    with pytest.raises(TraceError, match="128, 64 or 32"):
        fr.swizzle(0, 0, bytes=16)
    with pytest.raises(TraceError, match="outside"):
        fr.swizzle(0, 64, bytes=64)

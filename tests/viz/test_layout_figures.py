"""jaxptx.viz layout figures: each figure's data against the PTX ISA's
fragment-layout formulas, written out here (not taken from the table of
layouts, jaxptx.isa.fragments, that the figures draw), and (for mma.sync
and ldmatrix) an emulator run that moves numbered values through the
instruction. The figures, the emulator and the DSL's fragment maps all read
that one table, so they agree by construction; these tests pin the table
to the ISA.

In the formulas ``l`` is the lane (or warpgroup thread ``t``), ``g = l // 4``
its group and ``q = l % 4`` its thread in the group, ``i`` the element of the
thread's fragment and ``r`` a register."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxptx import sim, viz                                      # noqa: E402

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _close(fig) -> None:
    import matplotlib.pyplot as plt
    plt.close(fig)


def _covers_once(data: np.ndarray, threads: int) -> None:
    """Every cell is held by exactly one (thread, element) pair."""
    assert (data >= 0).all()
    pairs = data[0] * 10_000 + data[1]
    assert len(np.unique(pairs)) == pairs.size
    assert set(np.unique(data[0])) == set(range(threads))


def _expected(shape: tuple[int, int], threads: int, elements: int,
              where: Callable[[int, int], tuple[int, int]]) -> np.ndarray:
    """``(2, *shape)``: the thread and element that ``where(thread, element)
    -> (row, col)`` puts in each cell, -1 where none does."""
    out = np.full((2, *shape), -1, dtype=np.int64)
    for t in range(threads):
        for i in range(elements):
            r, c = where(t, i)
            assert out[0, r, c] == -1, (t, i, r, c)      # the formula puts one value in a cell
            out[:, r, c] = t, i
    return out


# PTX ISA, "Matrix Fragments for mma.m16n8k8 / m16n8k16 / m16n8k32 / m8n8k4":
# (rows, columns of the operand), elements a lane holds, (row, col) of element i.
MMA_FRAGMENTS = {
    ("m16n8k16", "a", "f16"): ((16, 16), 8, lambda l, i: (l // 4 + 8 * (i // 2 % 2),
                                                          2 * (l % 4) + i % 2 + 8 * (i // 4))),
    ("m16n8k16", "b", "bf16"): ((16, 8), 4, lambda l, i: (2 * (l % 4) + i % 2 + 8 * (i // 2), l // 4)),
    ("m16n8k16", "c", "f32"): ((16, 8), 4, lambda l, i: (l // 4 + 8 * (i // 2), 2 * (l % 4) + i % 2)),
    ("m16n8k8", "a", "tf32"): ((16, 8), 4, lambda l, i: (l // 4 + 8 * (i % 2), l % 4 + 4 * (i // 2))),
    ("m16n8k32", "a", "s8"): ((16, 32), 16, lambda l, i: (l // 4 + 8 * (i // 4 % 2),
                                                          4 * (l % 4) + i % 4 + 16 * (i // 8))),
    ("m16n8k32", "b", "e4m3"): ((32, 8), 8, lambda l, i: (4 * (l % 4) + i % 4 + 16 * (i // 4), l // 4)),
    ("m8n8k4", "a", "f64"): ((8, 4), 1, lambda l, i: (l // 4, l % 4)),
    ("m16n8k8", "b", "f16"): ((8, 8), 2, lambda l, i: (2 * (l % 4) + i, l // 4)),
}


@pytest.mark.parametrize("shape, operand, type_name", list(MMA_FRAGMENTS))
def test_mma_fragment_is_the_isa_layout(shape: str, operand: str, type_name: str) -> None:
    fig = viz.mma_fragment(shape, operand, type_name)
    cells, elements, where = MMA_FRAGMENTS[shape, operand, type_name]
    np.testing.assert_array_equal(fig.data, _expected(cells, 32, elements, where))
    _covers_once(fig.data, 32)
    _close(fig)


def _quad_pair_c(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m8n8k4 with f32 accumulators: quad-pair ``(l >> 2) & 3``
    (quads p and p + 4) computes its own 8 x 8 D, in which row = X + (i & 2)
    with X = (l & 1) + 4 ((l >> 4) & 1) and col = (i & 4) + (l & 2) + (i & 1).
    The figure stacks the four quad-pairs' matrices downwards."""
    x = (lane & 1) + 4 * ((lane >> 4) & 1)
    return 8 * ((lane >> 2) & 3) + x + (i & 2), (i & 4) + (lane & 2) + (i & 1)


def test_quad_pair_mma_stacks_the_four_groups() -> None:
    fig = viz.mma_fragment("m8n8k4", "c", "f32", "row")
    np.testing.assert_array_equal(fig.data, _expected((4 * 8, 8), 32, 8, _quad_pair_c))
    _close(fig)


def _mma_ptx() -> str:
    regs = ", ".join
    return HEAD + f""".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pd)
{{
    .reg .u64 %a, %b, %d, %off;
    .reg .u32 %lane;
    .reg .b32 a<4>, b<2>;
    .reg .f32 c<4>, d<4>;
    mov.u32 %lane, %tid.x;
    ld.param.u64 %a, [pa];
    ld.param.u64 %b, [pb];
    ld.param.u64 %d, [pd];
    mul.wide.u32 %off, %lane, 16;
    add.u64 %a, %a, %off;
    add.u64 %d, %d, %off;
    mul.wide.u32 %off, %lane, 8;
    add.u64 %b, %b, %off;
    ld.global.v4.b32 {{{regs(f'a{i}' for i in range(4))}}}, [%a];
    ld.global.v2.b32 {{{regs(f'b{i}' for i in range(2))}}}, [%b];
    mov.f32 c0, 0f00000000;
    mov.f32 c1, 0f00000000;
    mov.f32 c2, 0f00000000;
    mov.f32 c3, 0f00000000;
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{regs(f'd{i}' for i in range(4))}}},
        {{{regs(f'a{i}' for i in range(4))}}}, {{b0, b1}}, {{{regs(f'c{i}' for i in range(4))}}};
    st.global.v4.f32 [%d], {{{regs(f'd{i}' for i in range(4))}}};
    ret;
}}
"""


def test_mma_figures_agree_with_an_emulator_mma() -> None:
    """A[m, 0] = m, A[m, 1] = 1, B[0, n] = 1, B[1, n] = 16 n, zero elsewhere,
    placed into registers by the A and B figures: D[m, n] = m + 16 n must come
    back where the C figure says."""
    fa, fb, fc = (viz.mma_fragment("m16n8k16", w, t) for w, t in (("a", "f16"), ("b", "f16"), ("c", "f32")))
    a = np.zeros((16, 16)); a[:, 0] = np.arange(16); a[:, 1] = 1
    b = np.zeros((16, 8)); b[0, :] = 1; b[1, :] = 16 * np.arange(8)
    a_regs = np.zeros((32, 8), np.float16)
    b_regs = np.zeros((32, 4), np.float16)
    for (r, c), lane in np.ndenumerate(fa.data[0]):
        a_regs[lane, fa.data[1][r, c]] = a[r, c]
    for (r, c), lane in np.ndenumerate(fb.data[0]):
        b_regs[lane, fb.data[1][r, c]] = b[r, c]
    d = np.zeros((32, 4), np.float32)
    sim.launch(_mma_ptx(), a_regs, b_regs, d, block=(32, 1, 1))
    want = np.zeros((32, 4))
    for (r, c), lane in np.ndenumerate(fc.data[0]):
        want[lane, fc.data[1][r, c]] = r + 16 * c
    np.testing.assert_array_equal(d, want)
    for f in (fa, fb, fc):
        _close(f)


def _wgmma_d(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, wgmma D (32-bit accumulators): warp t // 32 owns rows
    16 (t // 32) .. +15; element i of lane l sits at row g + 8 ((i // 2) % 2),
    column 8 (i // 4) + 2 q + i % 2 of that slab."""
    lane = t % 32
    return 16 * (t // 32) + lane // 4 + 8 * (i // 2 % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def _wgmma_a(t: int, i: int) -> tuple[int, int]:
    """PTX ISA, wgmma A in registers (16-bit types, K = 16): each warp's 16
    rows laid out as mma.m16n8k16's A."""
    lane = t % 32
    return 16 * (t // 32) + lane // 4 + 8 * (i // 2 % 2), 2 * (lane % 4) + i % 2 + 8 * (i // 4)


@pytest.mark.parametrize("n", [8, 16, 64])
def test_wgmma_d_fragment_is_the_isa_layout(n: int) -> None:
    fig = viz.wgmma_fragment(n)
    np.testing.assert_array_equal(fig.data, _expected((64, n), 128, n // 2, _wgmma_d))
    _covers_once(fig.data, 128)
    _close(fig)


def test_wgmma_a_fragment_is_the_isa_layout() -> None:
    fig = viz.wgmma_fragment(operand="a", k=16, type_name="bf16")
    np.testing.assert_array_equal(fig.data, _expected((64, 16), 128, 8, _wgmma_a))
    _covers_once(fig.data, 128)
    with pytest.raises(ValueError, match="operand must be 'd' or 'a'"):
        viz.wgmma_fragment(operand="b")
    _close(fig)


def _ldmatrix_ptx(op: str, nregs: int) -> str:
    stores = "\n    ".join(f"st.global.b32 [%d+{4 * i}], r{i};" for i in range(nregs))
    return HEAD + f""".visible .entry k(.param .u64 src, .param .u64 out)
{{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %s, %d, %p, %v0, %v1, %base, %t16;
    .reg .u32 %lane;
    .reg .b32 r<{nregs}>;
    mov.u32 %lane, %tid.x;
    mul.wide.u32 %t16, %lane, 16;
    ld.param.u64 %s, [src];
    add.u64 %s, %s, %t16;
    ld.global.v2.u64 {{%v0, %v1}}, [%s];
    mov.u64 %base, smem;
    add.u64 %p, %base, %t16;
    st.shared.v2.u64 [%p], {{%v0, %v1}};
    bar.sync 0;
    {op} {{{", ".join(f"r{i}" for i in range(nregs))}}}, [%p];
    ld.param.u64 %d, [out];
    add.u64 %d, %d, %t16;
    {stores}
    ret;
}}
"""


@pytest.mark.parametrize("trans, num", [(False, 4), (True, 1), (True, 2)])
def test_ldmatrix_figure_agrees_with_an_emulator_ldmatrix(trans: bool, num: int) -> None:
    """Shared row ``i`` (matrix ``i // 8``, row ``i % 8``, given by lane i)
    holds 16-bit values ``64 j + 8 row + col``; each lane's registers must
    hold what the figure places at its (lane, register, element)."""
    fig = viz.ldmatrix_map("m8n8", trans, num)
    rows = np.arange(32 * 8, dtype=np.uint16).reshape(32, 8)     # value 64 j + 8 r + c of row 8 j + r
    out = np.zeros((32, 4), np.uint32)
    op = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
    sim.launch(_ldmatrix_ptx(op, num), rows, out, block=(32, 1, 1))
    halves = out.view(np.uint16).reshape(32, 4, 2)
    lane, reg, elem = fig.data
    for (r, c), ln in np.ndenumerate(lane):
        j, col = divmod(c, 8)
        assert halves[ln, reg[r, c], elem[r, c]] == 64 * j + 8 * r + col
    np.testing.assert_array_equal(fig.data, _matrix_map("m8n8", trans, num))
    _close(fig)


# PTX ISA, ldmatrix / stmatrix fragments: (shape, .trans) -> ((rows, columns)
# of one matrix as it lies in memory, registers a matrix, elements a register,
# (row, col) of element e of register r of lane l).
MATRIX_MAPS = {
    ("m8n8", False): ((8, 8), 1, 2, lambda l, r, e: (l // 4, 2 * (l % 4) + e)),
    ("m8n8", True): ((8, 8), 1, 2, lambda l, r, e: (2 * (l % 4) + e, l // 4)),
    # ldmatrix .m16n16 .trans .b8: register r holds rows 4q..4q+3 of column g + 8r
    ("m16n16", True): ((16, 16), 2, 4, lambda l, r, e: (4 * (l % 4) + e, l // 4 + 8 * r)),
    # ldmatrix .m8n16 (8-bit): row g, columns 4q..4q+3
    ("m8n16", True): ((8, 16), 1, 4, lambda l, r, e: (l // 4, 4 * (l % 4) + e)),
    # stmatrix .m16n8 .trans .b8: byte e is element (g + 8 (e // 2), 2q + e % 2), stored transposed
    ("m16n8", True): ((8, 16), 1, 4, lambda l, r, e: (2 * (l % 4) + e % 2, l // 4 + 8 * (e // 2))),
}


def _matrix_map(shape: str, trans: bool, num: int) -> np.ndarray:
    """``(3, rows, num * cols)``: lane, register (``j * registers + r``) and
    element of each cell, matrix ``j`` to the right of matrix ``j - 1``."""
    (rows, cols), nregs, per, where = MATRIX_MAPS[shape, trans]
    out = np.full((3, rows, num * cols), -1, dtype=np.int64)
    for j in range(num):
        for lane in range(32):
            for r in range(nregs):
                for e in range(per):
                    row, col = where(lane, r, e)
                    assert out[0, row, j * cols + col] == -1
                    out[:, row, j * cols + col] = lane, j * nregs + r, e
    assert (out >= 0).all()
    return out


@pytest.mark.parametrize("shape", ["m16n16", "m8n16", "m16n8"])
def test_eight_bit_matrix_maps_are_the_isa_maps(shape: str) -> None:
    fig = viz.ldmatrix_map(shape, True, 2)
    np.testing.assert_array_equal(fig.data, _matrix_map(shape, True, 2))
    _close(fig)


# PTX ISA, "Matrix fragments for tcgen05.ld / tcgen05.st": shape -> (TMEM
# lanes, 32-bit columns and registers a thread per .x1, (lane, column) of
# register r of thread l; .xN repeats the .x1 image N times to the right).
TCGEN05_LD = {
    "32x32b": (32, 1, 1, lambda l, r: (l, r)),
    "16x64b": (16, 2, 1, lambda l, r: (l // 4 + 8 * (l % 2), l // 2 % 2 + 2 * r)),
    "16x128b": (16, 4, 2, lambda l, r: (l // 4 + 8 * (r % 2), l % 4 + 4 * (r // 2))),
    "16x256b": (16, 8, 4, lambda l, r: (l // 4 + 8 * (r // 2 % 2), r % 2 + 2 * (l % 4) + 8 * (r // 4))),
}


@pytest.mark.parametrize("shape, num", [("32x32b", 2), ("16x64b", 4), ("16x128b", 2), ("16x256b", 1),
                                        ("16x256b", 4)])
def test_tcgen05_ld_map_is_the_isa_map(shape: str, num: int) -> None:
    fig = viz.tcgen05_ld_map(shape, num)
    lanes, cols, regs, where = TCGEN05_LD[shape]
    np.testing.assert_array_equal(fig.data, _expected((lanes, cols * num), 32, regs * num, where))
    _covers_once(fig.data, 32)
    with pytest.raises(ValueError, match="shape must be one of"):
        viz.tcgen05_ld_map("16x32bx2")
    _close(fig)

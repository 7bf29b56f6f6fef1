"""jaxptx.viz layout figures: each figure's data against the emulator's
layout functions, the DSL's pure-Python fragment maps, the PTX ISA's
formulas, and (for mma.sync and ldmatrix) an emulator run that moves
numbered values through the instruction."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxptx import sim, viz                                      # noqa: E402
from jaxptx.dsl import fragments as dslf                          # noqa: E402
from jaxptx.sim.semantics.fragments import mma_layout            # noqa: E402
from jaxptx.sim.semantics.matrix_ldst import fragment_map        # noqa: E402
from jaxptx.sim.semantics.tcgen05_move import fragment_cells     # noqa: E402
from jaxptx.sim.semantics.wgmma import wgmma_a_layout, wgmma_d_layout  # noqa: E402

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


@pytest.mark.parametrize("shape, operand, type_name", [
    ("m16n8k16", "a", "f16"), ("m16n8k16", "b", "bf16"), ("m16n8k16", "c", "f32"),
    ("m16n8k8", "a", "tf32"), ("m16n8k32", "a", "s8"), ("m16n8k32", "b", "e4m3"),
    ("m8n8k4", "a", "f64"), ("m16n8k8", "b", "f16"),
])
def test_mma_fragment_is_the_emulator_layout(shape: str, operand: str, type_name: str) -> None:
    fig = viz.mma_fragment(shape, operand, type_name)
    grp, row, col = mma_layout(shape, operand, type_name)
    assert (grp == 0).all()
    lane = np.arange(32)[:, None].repeat(row.shape[1], 1)
    elem = np.arange(row.shape[1])[None, :].repeat(32, 0)
    assert (fig.data[0][row, col] == lane).all() and (fig.data[1][row, col] == elem).all()
    _covers_once(fig.data, 32)
    _close(fig)


def test_mma_c_fragment_matches_the_isa_formula_and_the_dsl() -> None:
    fig = viz.mma_fragment("m16n8k16", "c", "f32")
    for lane in range(32):
        for i in range(4):
            r, c = np.argwhere((fig.data[0] == lane) & (fig.data[1] == i))[0]
            assert (r, c) == (lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2)   # PTX ISA figure
            assert (r, c) == dslf.mma_coords("m16n8k16", lane, i)
    _close(fig)


def test_quad_pair_mma_stacks_the_four_groups() -> None:
    fig = viz.mma_fragment("m8n8k4", "c", "f32", "row")
    grp, row, col = mma_layout("m8n8k4", "c", "f32", "row")
    assert fig.data.shape == (2, 4 * 8, 8)
    assert (fig.data[0][grp * 8 + row, col] == np.arange(32)[:, None]).all()
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


@pytest.mark.parametrize("n", [8, 16, 64])
def test_wgmma_d_fragment_is_the_emulator_layout_and_the_dsl_map(n: int) -> None:
    fig = viz.wgmma_fragment(n)
    _, row, col = wgmma_d_layout(n)
    assert fig.data.shape == (2, 64, n)
    assert (fig.data[0][row, col] == np.arange(128)[:, None]).all()
    _covers_once(fig.data, 128)
    for t in (0, 5, 37, 127):
        for j in range(n // 2):
            assert tuple(np.argwhere((fig.data[0] == t) & (fig.data[1] == j))[0]) == dslf.wgmma_coords(n, t, j)
    _close(fig)


def test_wgmma_a_fragment_is_the_emulator_layout() -> None:
    fig = viz.wgmma_fragment(operand="a", k=16, type_name="bf16")
    _, row, col = wgmma_a_layout(16, "bf16")
    assert (fig.data[0][row, col] == np.arange(128)[:, None]).all()
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
    row_map, col_map = fragment_map("m8n8", trans)
    assert (lane[row_map, col_map] == np.arange(32)[:, None, None]).all()
    _close(fig)


@pytest.mark.parametrize("shape", ["m16n16", "m8n16", "m16n8"])
def test_eight_bit_matrix_maps_are_the_emulator_maps(shape: str) -> None:
    fig = viz.ldmatrix_map(shape, True, 2)
    row, col = fragment_map(shape, True)
    cols = int(col.max()) + 1
    lanes = np.arange(32)[:, None, None]
    assert (fig.data[0][row, col] == lanes).all() and (fig.data[0][row, col + cols] == lanes).all()
    assert (fig.data[1][row, col + cols] == np.arange(row.shape[1])[None, :, None] + row.shape[1]).all()
    _close(fig)


@pytest.mark.parametrize("shape, num", [("32x32b", 2), ("16x64b", 4), ("16x128b", 2), ("16x256b", 1),
                                        ("16x256b", 4)])
def test_tcgen05_ld_map_is_the_emulator_map_and_the_dsl_map(shape: str, num: int) -> None:
    fig = viz.tcgen05_ld_map(shape, num)
    nregs = dslf.tcgen05_ld_registers(shape, num)
    lane, cols = fragment_cells(shape, nregs, False)
    for t in range(32):
        for j in range(nregs):
            assert fig.data[0][lane[t, j], cols[t, j, 0]] == t and fig.data[1][lane[t, j], cols[t, j, 0]] == j
            assert (lane[t, j], cols[t, j, 0]) == dslf.tcgen05_ld_coords(shape, t, j, num)
    _covers_once(fig.data, 32)
    with pytest.raises(ValueError, match="shape must be one of"):
        viz.tcgen05_ld_map("16x32bx2")
    _close(fig)

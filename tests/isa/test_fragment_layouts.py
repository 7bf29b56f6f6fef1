"""jaxptx.isa.fragments, the one table of fragment layouts that the DSL's
epilogue helpers, the emulator and jaxptx.viz read.

Three kinds of check:

* every layout the instruction table can ask for is a bijection between
  (thread, register, element) and the cells of its matrices, with the
  register count the instruction table gives the operand;
* golden entries, (thread, element) -> (row, col), written here from the PTX
  ISA's fragment figures and their "row = ..., col = ..." formulas (not from
  the code under test);
* the cache: the same arguments give the same object and read-only arrays
  (the emulator's hot paths rely on it).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxptx import isa
from jaxptx.isa import fragments as L


def assert_bijection(layout: L.FragmentLayout, threads: int) -> None:
    """Every cell of ``layout.dims`` is held by exactly one (thread, register, element)."""
    g, r, c = layout.grid
    groups, rows, cols = layout.dims
    assert layout.threads == threads
    assert g.shape == (threads, layout.registers, layout.elements)
    assert (g >= 0).all() and (r >= 0).all() and (c >= 0).all()
    assert (g < groups).all() and (r < rows).all() and (c < cols).all(), layout.name
    flat = np.sort(((g * rows + r) * cols + c).ravel())
    np.testing.assert_array_equal(flat, np.arange(groups * rows * cols), err_msg=layout.name)


def forms(sim: str) -> list[dict[str, str]]:
    """Every combination of slot values of the instruction-table forms that
    run emulator function ``sim``, with the form's operands' count rules."""
    out = []
    for inst in isa.INSTRUCTIONS:
        if inst.sim != sim:
            continue
        names = [s.name for s in inst.slots]
        for values in itertools.product(*(s.values for s in inst.slots)):
            out.append({**dict(zip(names, values)), "_counts": {o.name: o.count for o in inst.operands}})
    return out


def count(form: dict, operand: str) -> int:
    rule = form["_counts"][operand]
    return rule if isinstance(rule, int) else isa.COUNTS[rule](form)


# --- every layout the instruction table asks for ------------------------------------------

@pytest.mark.parametrize("form", forms("mma_sync"), ids=lambda f: ".".join(
    f[k] for k in ("shape", "alayout", "blayout", "dtype", "atype", "btype", "ctype")))
def test_every_mma_form_has_bijective_fragments_of_the_tables_register_counts(form: dict) -> None:
    shape = form["shape"]
    for operand, type_key, major in (("a", "atype", form["alayout"]), ("b", "btype", form["blayout"]),
                                     ("c", "ctype", ""), ("d", "dtype", "")):
        layout = L.mma(shape, operand, form[type_key], major)
        assert_bijection(layout, 32)
        assert layout.registers == count(form, operand), (layout.name, operand)


@pytest.mark.parametrize("form", forms("wgmma_mma_async"), ids=lambda f: f"{f['shape']}.{f['dtype']}.{f['atype']}")
def test_every_wgmma_form_has_bijective_fragments_of_the_tables_register_counts(form: dict) -> None:
    _, n, k = L.shape_dims(form["shape"])
    d = L.wgmma_d(n, form["dtype"])
    assert_bijection(d, 128)
    assert d.dims == (1, 64, n) and d.registers == count(form, "d")
    if "a" in form["_counts"]:                      # A from registers
        a = L.wgmma_a(k, form["atype"])
        assert_bijection(a, 128)
        assert a.dims == (1, 64, k) and a.registers == count(form, "a")


@pytest.mark.parametrize("form", forms("tcgen05_ld") + forms("tcgen05_st"),
                         ids=lambda f: f"{f['shape']}.{f['num']}.{f.get('pack') or f.get('unpack')}")
def test_every_tcgen05_ld_st_form_is_bijective(form: dict) -> None:
    shape, num = form["shape"], int(form["num"][1:])
    packed = form.get("pack", form.get("unpack")) is not None
    registers = count(form, "r")
    width = (2 if packed else 1) * registers     # columns one half of 16x32bx2 covers
    layout = L.tcgen05(shape, num, packed, split=width if shape == "16x32bx2" else 0)
    assert_bijection(layout, 32)
    assert layout.registers == registers and layout.elements == (2 if packed else 1)


@pytest.mark.parametrize("form", forms("ldmatrix") + forms("stmatrix"),
                         ids=lambda f: f"{f['shape']}.{f['num']}")
def test_every_ldmatrix_stmatrix_form_is_bijective(form: dict) -> None:
    num = {"x1": 1, "x2": 2, "x4": 4}[form["num"]]
    for trans in (False, True):
        layout = L.ldmatrix(form["shape"], trans, num)
        assert_bijection(layout, 32)
        assert layout.registers == count(form, "d" if "d" in form["_counts"] else "r")
        assert layout.dims[1] == L.LDMATRIX_SHAPES[form["shape"]] * num


@pytest.mark.parametrize("rows, cols, count_, type_name", [
    (16, 16, 8, "f32"), (16, 16, 16, "f16"), (32, 8, 16, "f16"), (8, 32, 8, "f32"), (16, 16, 8, "s8"),
    (8, 4, 1, "f64"), (8, 128, 32, "b1"), (16, 8, 4, "tf32"), (8, 16, 16, "f16")])
def test_wmma_fragments_cover_every_cell_equally(rows: int, cols: int, count_: int, type_name: str) -> None:
    """The emulator's wmma layout: element i of lane l at row-major position
    (l * count + i) mod (rows * cols); fragments larger than the matrix repeat."""
    layout = L.wmma(rows, cols, count_, type_name)
    _, r, c = layout.flat
    pos = (np.arange(32)[:, None] * count_ + np.arange(count_)[None, :]) % (rows * cols)
    np.testing.assert_array_equal(r, pos // cols)
    np.testing.assert_array_equal(c, pos % cols)
    hits = np.bincount((r * cols + c).ravel(), minlength=rows * cols)
    assert (hits == 32 * count_ // (rows * cols)).all()


# --- golden entries from the PTX ISA's figures ----------------------------------------------
# (layout, thread, element index a_i / b_i / c_i / d_i / r_j, (row, col)). groupID =
# lane >> 2, threadID_in_group = lane % 4; lane 5 is (1, 1), lane 6 (1, 2), lane 31 (7, 3).

MMA_GOLDEN = [
    # m16n8k16 .f16 A: row g for a0,a1,a4,a5 else g+8; col 2t + (i&1), +8 for i >= 4.
    (("m16n8k16", "a", "f16"), 0, [(0, 0, 0), (1, 0, 1), (2, 8, 0), (3, 8, 1), (4, 0, 8), (7, 8, 9)]),
    (("m16n8k16", "a", "f16"), 5, [(0, 1, 2), (7, 9, 11)]),
    (("m16n8k16", "a", "bf16"), 31, [(0, 7, 6), (3, 15, 7), (6, 15, 14)]),
    # m16n8k16 .f16 B: row 2t + (i&1), +8 for i >= 2; col g.
    (("m16n8k16", "b", "f16"), 0, [(0, 0, 0), (1, 1, 0), (2, 8, 0), (3, 9, 0)]),
    (("m16n8k16", "b", "f16"), 6, [(0, 4, 1), (3, 13, 1)]),
    (("m16n8k16", "b", "bf16"), 31, [(0, 6, 7), (3, 15, 7)]),
    # C/D (.f32, .s32): row g for c0,c1 else g+8; col 2t + (i&1).
    (("m16n8k16", "c", "f32"), 0, [(0, 0, 0), (1, 0, 1), (2, 8, 0), (3, 8, 1)]),
    (("m16n8k16", "d", "f32"), 13, [(0, 3, 2), (3, 11, 3)]),
    (("m16n8k32", "c", "s32"), 31, [(3, 15, 7)]),
    # .f16 C packs c0,c1 in register 0 and c2,c3 in register 1: same cells.
    (("m16n8k16", "c", "f16"), 13, [(0, 3, 2), (1, 3, 3), (2, 11, 2), (3, 11, 3)]),
    # m16n8k8 .f16 A: row g for a0,a1 else g+8; col 2t + (i&1). B: row 2t + i, col g.
    (("m16n8k8", "a", "f16"), 0, [(2, 8, 0)]),
    (("m16n8k8", "a", "f16"), 7, [(0, 1, 6), (3, 9, 7)]),
    (("m16n8k8", "b", "f16"), 9, [(1, 3, 2)]),
    # m16n8k8 .tf32 A: row g for a0,a2 else g+8; col t for a0,a1 else t+4.
    (("m16n8k8", "a", "tf32"), 0, [(1, 8, 0), (2, 0, 4)]),
    (("m16n8k8", "a", "tf32"), 30, [(3, 15, 6)]),
    # m16n8k32 .s8 A: row g for 0<=i<4 or 8<=i<12 else g+8; col 4t + (i&3), +16 for i >= 8.
    (("m16n8k32", "a", "s8"), 0, [(4, 8, 0), (8, 0, 16), (15, 8, 19)]),
    (("m16n8k32", "a", "u8"), 31, [(0, 7, 12), (15, 15, 31)]),
    # m16n8k32 .s8 B: row 4t + (i&3), +16 for i >= 4; col g.
    (("m16n8k32", "b", "s8"), 0, [(4, 16, 0)]),
    (("m16n8k32", "b", "e4m3"), 31, [(7, 31, 7)]),
    # m16n8k16 .f64 A: row g for even i else g+8; col 2i + t (even i), 2i - 2 + t (odd i).
    (("m16n8k16", "a", "f64"), 1, [(0, 0, 1), (1, 8, 1), (6, 0, 13), (7, 8, 13)]),
    # m16n8k64 .s4 A: row g for 0<=i<8 or 16<=i<24 else g+8; col 8t + (i&7), +32 for i >= 16.
    (("m16n8k64", "a", "s4"), 0, [(8, 8, 0), (16, 0, 32)]),
    (("m16n8k64", "a", "s4"), 31, [(31, 15, 63)]),
    # m8n8k4 .f64: A row g, col t; m8n8k16 .s8: A row g, col 4t + i; C row g, col 2t + i.
    (("m8n8k4", "a", "f64"), 14, [(0, 3, 2)]),
    (("m8n8k16", "a", "s8"), 5, [(3, 1, 7)]),
    (("m8n8k16", "c", "s32"), 5, [(1, 1, 3)]),
    # m8n8k128 .b1 A: row g, col 32t + i.
    (("m8n8k128", "a", "b1"), 3, [(31, 0, 127)]),
]


@pytest.mark.parametrize("args, lane, cells", MMA_GOLDEN, ids=lambda x: str(x))
def test_mma_golden_entries(args: tuple, lane: int, cells: list) -> None:
    _, row, col = L.mma(*args).flat
    for i, r, c in cells:
        assert (row[lane, i], col[lane, i]) == (r, c), (args, lane, i)


def test_mma_register_packing_is_the_isas() -> None:
    """m16n8k16 .f16 A: four .f16x2 registers of two; B two of two; f32 C four of one;
    .s8 m16n8k32 A: four .b32 registers of four; .f64 A: eight registers of one."""
    got = [(lay.registers, lay.elements) for lay in (
        L.mma("m16n8k16", "a", "f16"), L.mma("m16n8k16", "b", "f16"), L.mma("m16n8k16", "c", "f32"),
        L.mma("m16n8k32", "a", "s8"), L.mma("m16n8k16", "a", "f64"), L.mma("m16n8k16", "c", "f16"))]
    assert got == [(4, 2), (2, 2), (4, 1), (4, 4), (8, 1), (2, 2)]


def test_quad_pair_m8n8k4_golden_entries() -> None:
    """PTX ISA "Matrix Fragments for mma.m8n8k4 with .f16": lanes 4q..4q+3 and
    16+4q..16+4q+3 compute product q. Row-major A: row lane%4 (+4 from lane 16),
    col i; column-major A: row i%4 (+4 from lane 16), col lane%4. f32 C: row
    X + (i & 2) with X = (lane & 1) + 4 (lane >> 4 & 1), col (lane & 2) + (i & 1)
    + (i & 4)."""
    g, r, c = L.mma("m8n8k4", "a", "f16", "row").flat
    assert (g[21, 2], r[21, 2], c[21, 2]) == (1, 5, 2)
    g, r, c = L.mma("m8n8k4", "a", "f16", "col").flat
    assert (g[21, 2], r[21, 2], c[21, 2]) == (1, 6, 1)
    g, r, c = L.mma("m8n8k4", "c", "f32").flat
    assert (g[19, 0], r[19, 0], c[19, 0]) == (0, 5, 2)
    assert (g[19, 6], r[19, 6], c[19, 6]) == (0, 7, 6)
    assert (g[6, 3], r[6, 3], c[6, 3]) == (1, 2, 3)


def test_wgmma_golden_entries() -> None:
    """PTX ISA "Register Fragments" for wgmma.m64nNk16: D's d0 of thread 0 at
    (0, 0), d1 (0, 1), d2 (8, 0), d4 (0, 8); thread 1 starts at column 2,
    thread 4 at row 1, warp w at row 16w. A is mma.m16n8k16's A per warp."""
    _, r, c = L.wgmma_d(64).flat
    assert [(r[0, i], c[0, i]) for i in (0, 1, 2, 3, 4)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8)]
    assert (r[1, 0], c[1, 0]) == (0, 2) and (r[4, 0], c[4, 0]) == (1, 0) and (r[32, 0], c[32, 0]) == (16, 0)
    assert (r[127, 31], c[127, 31]) == (63, 63)
    _, r, c = L.wgmma_a(16, "bf16").flat
    assert (r[32, 0], c[32, 0]) == (16, 0) and (r[127, 7], c[127, 7]) == (63, 15) and (r[69, 4], c[69, 4]) == (33, 10)


TCGEN05_GOLDEN = [
    # PTX ISA "Matrix fragments for tcgen05.ld/st" (thread, register) -> (lane, column).
    ("32x32b", 4, [(0, 0, 0, 0), (7, 3, 7, 3), (31, 1, 31, 1)]),
    ("16x64b", 4, [(1, 0, 8, 0), (2, 0, 0, 1), (3, 0, 8, 1), (4, 0, 1, 0), (31, 3, 15, 7)]),
    ("16x128b", 2, [(1, 0, 0, 1), (0, 1, 8, 0), (5, 2, 1, 5), (31, 3, 15, 7)]),
    ("16x256b", 2, [(1, 0, 0, 2), (0, 1, 0, 1), (0, 2, 8, 0), (0, 4, 0, 8), (31, 7, 15, 15)]),
]


@pytest.mark.parametrize("shape, num, cells", TCGEN05_GOLDEN)
def test_tcgen05_golden_entries(shape: str, num: int, cells: list) -> None:
    layout = L.tcgen05(shape, num)
    assert layout.registers == L.TCGEN05_SHAPES[shape] * num
    for t, j, lane, col in cells:
        assert layout.coords(t, j)[1:] == (lane, col), (shape, t, j)


def test_tcgen05_half_split_and_packing() -> None:
    """.16x32bx2: threads 16-31 read the same lanes as 0-15, immHalfSplitoff
    columns on; .pack::16b: register j takes columns 2c and 2c + 1."""
    layout = L.tcgen05("16x32bx2", 2, split=8)
    assert layout.coords(15, 1)[1:] == (15, 1) and layout.coords(16, 0)[1:] == (0, 8)
    packed = L.tcgen05("32x32b", 2, packed=True)
    assert [packed.coords(3, 1, e)[1:] for e in (0, 1)] == [(3, 2), (3, 3)]
    assert L.tcgen05("16x32bx2", 1, packed=True, split=5).coords(17, 0, 1)[1:] == (1, 6)


def test_ldmatrix_golden_entries() -> None:
    """PTX ISA "ldmatrix": .m8n8 lane l holds row l/4, columns 2(l%4), +1 of
    each matrix (register j for matrix j, its rows 8j.. here); .trans the
    transpose; .m16n16 .trans .b8 register r rows 4q..4q+3 of column g + 8r."""
    layout = L.ldmatrix("m8n8", False, 4)
    assert layout.coords(5, 0, 1)[1:] == (1, 3) and layout.coords(5, 2, 0)[1:] == (17, 2)
    assert L.ldmatrix("m8n8", True).coords(5, 0, 1)[1:] == (3, 1)
    assert L.ldmatrix("m16n16", True).coords(5, 1, 2)[1:] == (6, 9)
    assert L.ldmatrix("m8n16").coords(5, 0, 3)[1:] == (1, 7)
    assert L.ldmatrix("m16n8", True).coords(5, 0, 3)[1:] == (3, 9)


# --- the record and its cache -----------------------------------------------------------------

def test_coords_is_thread_part_plus_register_part_and_matches_the_grid() -> None:
    layout = L.wgmma_d(24)
    t, j = np.arange(128)[:, None], np.arange(12)[None, :]
    _, r, c = layout.coords(t, j)
    _, tr, tc = layout.thread_offset(t)
    _, rr, rc = layout.register_offset(j)
    np.testing.assert_array_equal(r, tr + rr)
    np.testing.assert_array_equal(c, tc + rc)
    np.testing.assert_array_equal(r, layout.grid[1][:, :, 0])
    assert layout.register_offset(5) == (0, 0, 9) and layout.register_offset(6) == (0, 8, 8)


def test_layouts_are_cached_and_read_only() -> None:
    a, b = L.mma("m16n8k16", "c", "f32"), L.mma("m16n8k16", "c", "f32")
    assert a is b and a.flat is b.flat and a.grid is b.grid
    with pytest.raises(ValueError, match="read-only"):
        a.flat[1][0, 0] = 5


@pytest.mark.parametrize("call, message", [
    (lambda: L.mma("m16n8k16", "e", "f16"), "operand must be 'a', 'b', 'c' or 'd', got 'e'"),
    (lambda: L.mma("m32n8k16", "a", "f16"), "no layout for shape 'm32n8k16'"),
    (lambda: L.mma("m16n8k16", "c", "bf16"), r"accumulator type must be one of \('f16', 'f32', 's32', 'f64'\)"),
    (lambda: L.mma("m16n8k8", "a", "s8"), "K of 'm16n8k8' is not a whole number of .s8 registers"),
    (lambda: L.mma("m16n8k16", "a", "q7"), "expected an element type in .*got 'q7'"),
    (lambda: L.shape_dims("16x8x16"), "expected an MMA shape like 'm16n8k16', got '16x8x16'"),
    (lambda: L.wgmma_d(20), "N must be a multiple of 8 in 8..256, got 20"),
    (lambda: L.wgmma_d(16, "bf16"), "D type must be f16, f32 or s32, got 'bf16'"),
    (lambda: L.tcgen05("16x512b"), r"expected a shape in \('32x32b', .*got '16x512b'"),
    (lambda: L.tcgen05("32x32b", 3), r"\.x3 is not a repeat count"),
    (lambda: L.ldmatrix("m8n32"), "expected a shape in .*got 'm8n32'"),
    (lambda: L.ldmatrix("m8n8", num=3), "num must be 1, 2 or 4, got 3"),
    (lambda: L.wmma(16, 12, 8, "f32"), r"powers of two, got \(16, 12, 8\)"),
])
def test_refusals(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_package_docstring_example_runs() -> None:
    import doctest
    result = doctest.testmod(L, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

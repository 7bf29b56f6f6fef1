"""Register-fragment pictures: which lane (thread) and register holds which
matrix element, drawn from the one table of fragment layouts.

Each function returns a matplotlib ``Figure`` whose ``.data`` holds the
numbers it draws, read from :mod:`jaxptx.isa.fragments` — the layouts the
emulator and the DSL's epilogue helpers read too: :func:`~jaxptx.isa.fragments.mma`
(``mma.sync``), :func:`~jaxptx.isa.fragments.wgmma_a` /
:func:`~jaxptx.isa.fragments.wgmma_d`, :func:`~jaxptx.isa.fragments.ldmatrix`
(``ldmatrix`` / ``stmatrix``) and :func:`~jaxptx.isa.fragments.tcgen05`
(``tcgen05.ld`` / ``tcgen05.st``). A picture and an emulator run cannot
disagree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..isa import fragments as layouts
from ._draw import cell_grid, figure_with_data, pyplot

__all__ = ["layout_grid", "mma_fragment", "wgmma_fragment", "ldmatrix_map", "tcgen05_ld_map"]


def layout_grid(group: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """``(2, G*R, C)`` int array from an emulator layout ``(group, row, col)``
    (each ``(threads, elements)``): ``[0]`` the thread holding each matrix
    element, ``[1]`` its element index in that thread's fragment; groups
    (the quad-pairs of ``m8n8k4``) stacked downwards, -1 where no thread
    holds an element."""
    group, row, col = (np.asarray(a) for a in (group, row, col))
    rows, cols = int(row.max()) + 1, int(col.max()) + 1
    out = np.full((2, (int(group.max()) + 1) * rows, cols), -1, dtype=np.int64)
    thread, elem = np.meshgrid(np.arange(row.shape[0]), np.arange(row.shape[1]), indexing="ij")
    out[0, group * rows + row, col] = thread
    out[1, group * rows + row, col] = elem
    return out


def _labels(data: np.ndarray, prefix: str) -> np.ndarray:
    return np.vectorize(lambda t, e: f"T{t}\n{prefix}{e}" if t >= 0 else "")(data[0], data[1])


def _grid_figure(data: np.ndarray, prefix: str, title: str, xlabel: str, ylabel: str,
                 colour: np.ndarray | None = None) -> Any:
    plt = pyplot()
    rows, cols = data.shape[1:]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * cols + 1.2), max(2.5, 0.45 * rows + 1.4)))
    cell_grid(ax, data[0] % 32 if colour is None else colour, _labels(data, prefix), title=title,
              xlabel=xlabel, ylabel=ylabel, fontsize=7.5)
    fig.tight_layout()
    return fig


def mma_fragment(shape: str = "m16n8k16", operand: str = "a", type_name: str = "f16",
                 major: str = "") -> Any:
    """The ``mma.sync`` fragment of one operand: each matrix element labelled
    ``T<lane>`` and ``<operand><i>`` (its element index in the lane's
    fragment, as the PTX ISA's figures number them).

    Args:
        shape: an ``mma.sync`` shape (``"m16n8k16"``, ``"m16n8k8"``, ``"m8n8k4"`` ...).
        operand: ``"a"``, ``"b"`` or ``"c"`` (C and D share a layout).
        type_name: the operand's element type (``"f16"``, ``"bf16"``, ``"tf32"``,
            ``"s8"``, ``"e4m3"``, ``"f64"`` ...; ``"f32"`` for an f32 C).
        major: ``"row"`` or ``"col"`` for the quad-pair ``m8n8k4`` f16 forms.

    Returns:
        A ``Figure``; ``fig.data`` is the ``(2, rows, cols)`` array of
        :func:`layout_grid` (lane, element) of
        ``jaxptx.isa.fragments.mma(shape, operand, type_name, major).flat``.
    """
    data = layout_grid(*layouts.mma(shape, operand, type_name, major).flat)
    dims = {"a": ("row (M)", "column (K)"), "b": ("row (K)", "column (N)"), "c": ("row (M)", "column (N)")}
    ylabel, xlabel = dims[operand]
    fig = _grid_figure(data, operand, f"mma.sync.{shape} {operand.upper()} ({type_name})", xlabel, ylabel)
    return figure_with_data(fig, data)


def wgmma_fragment(n: int = 16, operand: str = "d", k: int = 16, type_name: str = "f16",
                   rows: int = 64) -> Any:
    """A ``wgmma.mma_async.m64nNk*`` register fragment over the 128 threads of
    a warpgroup: the accumulator D (``operand="d"``, 64 x ``n``) or A from
    registers (``operand="a"``, 64 x ``k``).

    Args:
        n: N of the shape (D is 64 x ``n``, ``n / 2`` registers a thread).
        operand: ``"d"`` or ``"a"``.
        k, type_name: K and the element type of A (``operand="a"``).
        rows: draw only the first ``rows`` rows (16 per warp); the data
            keeps all 64.

    Returns:
        A ``Figure``; ``fig.data`` is the ``(2, 64, cols)`` (thread, element)
        array of ``jaxptx.isa.fragments.wgmma_d(n)`` or
        ``wgmma_a(k, type_name)``.
    """
    if operand == "d":
        data = layout_grid(*layouts.wgmma_d(n).flat)
        title, xlabel = f"wgmma.m64n{n} D (f32 accumulator)", "column (N)"
    elif operand == "a":
        data = layout_grid(*layouts.wgmma_a(k, type_name).flat)
        title, xlabel = f"wgmma.m64nNk{k} A in registers ({type_name})", "column (K)"
    else:
        raise ValueError(f"wgmma_fragment: operand must be 'd' or 'a', got {operand!r}")
    shown = data[:, :rows]
    if rows < 64:
        title += f", rows 0-{rows - 1} of 64"
    # Colour by warp (the warpgroup's 16-row slabs), lighter for odd lanes' quads.
    fig = _grid_figure(shown, operand, title, xlabel, "row (M)", colour=shown[0] // 32 * 2 + (shown[0] // 4) % 2)
    return figure_with_data(fig, data)


def ldmatrix_map(shape: str = "m8n8", trans: bool = False, num: int = 1) -> Any:
    """Where ``ldmatrix`` puts (and ``stmatrix`` takes) each element of the
    ``num`` matrices (``.x1/.x2/.x4``), drawn as they lie in shared memory:
    one row per 16-byte row address, matrices side by side. Each element is
    labelled ``T<lane>`` and ``r<register>.<element of the register>``; the
    row address of row ``i`` of matrix ``j`` comes from lane ``R*j + i``.

    Args:
        shape: ``"m8n8"`` (16-bit), ``"m16n16"`` (8-bit, transposed),
            ``"m8n16"`` (8-bit) or ``"m16n8"`` (``stmatrix`` 8-bit, transposed).
        trans: ``.trans`` (``m8n8`` only; the 8-bit shapes fix it).
        num: 1, 2 or 4 matrices.

    Returns:
        A ``Figure``; ``fig.data`` is ``(3, rows, num * cols)``: lane,
        destination register (``j * registers_per_matrix + r``) and element
        within the register, from ``jaxptx.isa.fragments.ldmatrix(shape, trans, num)``.
    """
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix_map: num must be 1, 2 or 4, got {num!r}")
    _, row, col = layouts.ldmatrix(shape, trans, num).grid
    rows, cols = layouts.LDMATRIX_SHAPES[shape], int(col.max()) + 1
    data = np.full((3, rows, num * cols), -1, dtype=np.int64)
    lane, reg, elem = np.meshgrid(*(np.arange(n) for n in row.shape), indexing="ij")
    # matrix j (rows R*j.. of the layout) drawn to the right of matrix j - 1
    data[:, row % rows, col + (row // rows) * cols] = lane, reg, elem
    plt = pyplot()
    # Matrices in a grid, matrix j at row j % 2, column j // 2 for .x4: the
    # four 8 x 8 quarters of a 16 x 16 tile as mma.m16n8k16's A uses them.
    grid_r, grid_c = (2, 2) if num == 4 else (1, num)
    fig, axes = plt.subplots(grid_r, grid_c, figsize=(0.62 * cols * grid_c + 1.2, 0.5 * rows * grid_r + 1.6),
                             squeeze=False)
    labels = np.vectorize(lambda t, r, e: f"T{t}\nr{r}.{e}")(data[0], data[1], data[2])
    for j in range(num):
        ax = axes[j % grid_r, j // grid_r]
        part = slice(j * cols, (j + 1) * cols)
        cell_grid(ax, data[0][:, part] // 4, labels[:, part], fontsize=7,
                  xlabel=f"matrix {j}: element of the 16-byte row", ylabel="row (address from lane "
                  f"{rows * j}+row)")
    mods = f"{shape}{'.trans' if trans else ''}.x{num}"
    fig.suptitle(f"ldmatrix / stmatrix .{mods}", fontsize=11)
    fig.tight_layout()
    return figure_with_data(fig, data)


def tcgen05_ld_map(shape: str = "16x256b", num: int = 1) -> Any:
    """The tensor-memory cells one warp's ``tcgen05.ld.<shape>.x<num>`` reads
    (``tcgen05.st`` writes): lanes down, 32-bit columns across, each cell
    labelled ``T<thread>`` and ``r<register>``, relative to ``taddr``.

    Returns:
        A ``Figure``; ``fig.data`` is ``(2, lanes, columns)`` (thread,
        register) from ``jaxptx.isa.fragments.tcgen05(shape, num)``.
    """
    shape = shape.lstrip(".")
    shapes = tuple(s for s in layouts.TCGEN05_SHAPES if s != "16x32bx2")
    if shape not in shapes:
        raise ValueError(f"tcgen05_ld_map: shape must be one of {shapes}, got {shape!r}")
    layout = layouts.tcgen05(shape, num)
    _, lane, col = (a[:, :, 0] for a in layout.grid)
    data = np.full((2, *layout.dims[1:]), -1, dtype=np.int64)
    thread, reg = np.meshgrid(np.arange(32), np.arange(layout.registers), indexing="ij")
    data[0, lane, col] = thread
    data[1, lane, col] = reg
    plt = pyplot()
    rows, ncols = data.shape[1:]
    fig, ax = plt.subplots(figsize=(max(3.5, 0.6 * ncols + 1.5), 0.45 * rows + 1.4))
    labels = np.vectorize(lambda t, r: f"T{t}\nr{r}")(data[0], data[1])
    cell_grid(ax, data[0] // 4 if shape != "32x32b" else data[1], labels,
              title=f"tcgen05.ld.{shape}.x{num}", xlabel="column (32-bit) from taddr",
              ylabel="lane from taddr", fontsize=7)
    fig.tight_layout()
    return figure_with_data(fig, data)

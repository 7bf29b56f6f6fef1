"""Fragments of the matrix-multiply instructions: ``mma.sync``, ``wgmma`` and
the emulator's ``wmma``."""

from __future__ import annotations

import functools

from ._layout import Digit, FragmentLayout, layout, per_register, shape_dims

__all__ = ["mma", "wgmma_a", "wgmma_d", "wmma"]


# --- mma.sync ---------------------------------------------------------------------------------
# PTX ISA "Matrix Fragments for mma.m*n*k*": groupID = %laneid >> 2 and
# threadID_in_group = %laneid % 4 place each lane; its elements a0, a1, ...
# run along K (A, B) or pair up along N (C/D) from there.

_ACCUMULATORS = ("f16", "f32", "s32", "f64")


@functools.cache
def mma(shape: str, operand: str, type_name: str, major: str = "") -> FragmentLayout:
    """The fragment of ``mma.sync.aligned.<shape>`` operand ``operand``.

    With ``e`` elements of ``type_name`` to a register (``e = 32 / bits``;
    one for ``.tf32`` and ``.f64``), A holds runs of ``e`` consecutive K
    elements per register: run ``p`` of lane ``l`` is row ``groupID + 8 (p %
    (M / 8))``, columns from ``e threadID_in_group + 4 e (p // (M / 8))``.
    B holds run ``p`` down rows from ``e threadID_in_group + 4 e p``, column
    ``groupID``. C/D element ``i`` is row ``groupID + 8 (i // 2)``, column
    ``2 threadID_in_group + i % 2`` (two to an ``.f16x2`` register).
    ``m8n8k4`` with ``.f16`` A/B (``.f16``/``.f32`` C) is four independent
    8x8x4 products, one per quad-pair (groups 0-3; PTX ISA "Matrix Fragments
    for mma.m8n8k4 with .f16 floating point type").

    Args:
        shape: ``"m16n8k*"`` or ``"m8n8k*"``.
        operand: ``"a"``, ``"b"``, ``"c"`` or ``"d"`` (C and D share a layout).
        type_name: the operand's element type (``"f16"``, ``"s8"``, ``"f32"`` ...).
        major: ``"row"`` or ``"col"`` for the quad-pair A/B (anything but
            ``"row"`` is column-major); ignored elsewhere.

    Raises:
        ValueError: a shape, operand or type with no fragment layout.
    """
    m, n, k = shape_dims(shape)
    which = {"a": "a", "b": "b", "c": "c", "d": "c"}.get(operand)
    if which is None:
        raise ValueError(f"mma fragment: operand must be 'a', 'b', 'c' or 'd', got {operand!r}")
    if shape == "m8n8k4" and type_name in ("f16", "f32"):
        return _quad_pair(which, type_name, major == "row")
    if m not in (8, 16) or n != 8:
        raise ValueError(f"mma fragment: no layout for shape {shape!r} (m16n8k* or m8n8k*)")
    name = f"mma.{shape} {which.upper()} .{type_name}"
    lane_c = (Digit(4, col=2), Digit(8, row=1))
    if which == "c":
        if type_name not in _ACCUMULATORS:
            raise ValueError(f"mma fragment: accumulator type must be one of {_ACCUMULATORS}, got {type_name!r}")
        return layout(name, (1, m, n), lane_c, (Digit(2, col=1), Digit(m // 8, row=8)),
                       2 if type_name == "f16" else 1)
    e = per_register(type_name)
    if k % (4 * e):
        raise ValueError(f"mma fragment: K of {shape!r} is not a whole number of .{type_name} registers "
                         f"per thread")
    if which == "a":
        return layout(name, (1, m, k), (Digit(4, col=e), Digit(8, row=1)),
                       (Digit(e, col=1), Digit(m // 8, row=8), Digit(k // (4 * e), col=4 * e)), e)
    return layout(name, (1, k, n), (Digit(4, row=e), Digit(8, col=1)),
                   (Digit(e, row=1), Digit(k // (4 * e), row=4 * e)), e)


def _quad_pair(which: str, type_name: str, row_major: bool) -> FragmentLayout:
    """``mma.m8n8k4`` with ``.f16`` A/B: lanes ``4q..4q+3`` (low half of the
    8 x 8 product) and ``16+4q..16+4q+3`` (high half) compute group ``q``."""
    name = f"mma.m8n8k4 {which.upper()} .{type_name}{' row' if row_major else ''}"
    quad = Digit(4, group=1)
    if which == "c" and type_name == "f32":
        return layout(name, (4, 8, 8), (Digit(2, row=1), Digit(2, col=2), quad, Digit(2, row=4)),
                       (Digit(2, col=1), Digit(2, row=2), Digit(2, col=4)))
    if which == "c":
        return layout(name, (4, 8, 8), (Digit(4, row=1), quad, Digit(2, row=4)), (Digit(8, col=1),), 2)
    # A's high group holds rows 4-7, B's columns 4-7; row-major fragments run along the row.
    half = Digit(2, row=4) if which == "a" else Digit(2, col=4)
    across, along = (Digit(4, row=1), Digit(4, col=1)) if row_major else (Digit(4, col=1), Digit(4, row=1))
    dims = (4, 8, 4) if which == "a" else (4, 4, 8)
    return layout(name, dims, (across, quad, half), (along,), 2)


# --- wgmma ------------------------------------------------------------------------------------

@functools.cache
def wgmma_a(k: int, type_name: str) -> FragmentLayout:
    """A of ``wgmma.mma_async.m64nNk<k>`` from registers (PTX ISA "Register
    Fragments"): warp ``w`` of the warpgroup holds rows ``16w .. 16w+15`` as
    the A fragment of ``mma.m16n8k<k>``.

    Raises:
        ValueError: ``k`` and ``type_name`` make no ``mma`` A fragment.
    """
    base = mma(f"m16n8k{k}", "a", type_name)
    return FragmentLayout(f"wgmma.m64nNk{k} A .{type_name}", (1, 64, k), base.thread + (Digit(4, row=16),),
                          base.register, base.element)


@functools.cache
def wgmma_d(n: int, type_name: str = "f32") -> FragmentLayout:
    """The accumulator D of ``wgmma.mma_async.m64n<n>`` (PTX ISA "Register
    Fragments"): element ``d_i`` of lane ``l`` of warp ``w`` is row ``16w +
    l / 4 + 8 ((i / 2) % 2)``, column ``8 (i / 4) + 2 (l % 4) + i % 2`` — the
    ``mma.m16n8`` accumulator repeated over N in 8-column blocks. ``.f16``
    accumulators pack two elements to a register, ``.f32``/``.s32`` one.

    Raises:
        ValueError: ``n`` is not a multiple of 8 in 8..256, or the type is
            not an accumulator type.
    """
    if not isinstance(n, int) or not 8 <= n <= 256 or n % 8:
        raise ValueError(f"wgmma fragment: N must be a multiple of 8 in 8..256, got {n!r}")
    if type_name not in ("f16", "f32", "s32"):
        raise ValueError(f"wgmma fragment: D type must be f16, f32 or s32, got {type_name!r}")
    return layout(f"wgmma.m64n{n} D .{type_name}", (1, 64, n),
                   (Digit(4, col=2), Digit(8, row=1), Digit(4, row=16)),
                   (Digit(2, col=1), Digit(2, row=8), Digit(n // 8, col=8)), 2 if type_name == "f16" else 1)


# --- wmma (the emulator's choice) ---------------------------------------------------------------

@functools.cache
def wmma(rows: int, cols: int, count: int, type_name: str) -> FragmentLayout:
    """The emulator's ``wmma`` fragment of a ``rows`` x ``cols`` matrix,
    ``count`` elements of ``type_name`` a thread. PTX leaves the layout
    unspecified; the emulator gives element ``i`` of lane ``l`` the cell at
    row-major position ``(l * count + i) mod (rows * cols)`` (fragments
    larger than the matrix repeat across the warp).

    Raises:
        ValueError: sizes that are not powers of two, or an unknown type.
    """
    total = rows * cols
    if any(v <= 0 or v & (v - 1) for v in (rows, cols, count)):
        raise ValueError(f"wmma fragment: rows, cols and count must be powers of two, got {(rows, cols, count)}")

    def bit(step: int) -> Digit:          # one binary digit of the row-major position
        step %= total
        return Digit(2, row=step // cols, col=step % cols)
    sequence = [bit(1 << b) for b in range(count.bit_length() - 1)]
    thread = [bit(count << b) for b in range(5)]
    per = min(count, per_register(type_name))
    return layout(f"wmma {rows}x{cols} .{type_name}", (1, rows, cols), thread, sequence, per)

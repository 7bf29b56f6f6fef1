"""Warp and warpgroup fragments: which thread holds which matrix element.

The collective matrix instructions (``mma.sync``, ``wgmma``) gather every
executing group's per-thread fragment elements into whole matrices, compute,
and scatter the results back. The index maps are those of PTX ISA "Matrix
Fragments for mma.m*n*k*" (:func:`mma_layout`); :func:`groups` finds the
groups among the executing threads. When the whole grid executes in thread
order, gathering is one ``np.take`` with the layout's flat permutation.
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.host import ShapeCache
from ..errors import SimError
from ..core.step import Step

__all__ = ["groups", "mma_layout", "gather", "scatter", "dims_of", "frozen", "ELEMENT_BITS"]

ELEMENT_BITS = {"b1": 1, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "e4m3": 8, "e5m2": 8,
                "f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "s32": 32, "f64": 64}

# --- warps ------------------------------------------------------------------------------

def groups(s: Step, size: int = 32) -> tuple[np.ndarray, np.ndarray, int]:
    """Collective execution over warps (``size`` 32) or warpgroups (128).

    Returns ``(slot, rank, count)``: each executing thread's group among the
    executing groups (0..count-1) and its rank within its group.

    Raises:
        SimError: a group does not execute with all its threads.
    """
    if s.n == s.m.nthreads and s.m.ntid % size == 0:
        # The whole grid in thread order, whole groups: group k is threads
        # k*size .. k*size+size-1.
        slot, rank = _in_order(s.n, size)
        return slot, rank, s.n // size
    local = s.threads % s.m.ntid
    ident = (s.threads // s.m.ntid) * (-(-s.m.ntid // size)) + local // size
    uniq, slot, counts = np.unique(ident, return_inverse=True, return_counts=True)
    if (counts != size).any():
        what = "warp" if size == 32 else "warpgroup"
        bad = int(counts[counts != size][0])
        raise SimError(f"{s.ins.name}: executed by {bad} of the {size} threads of a {what}; the "
                       f".sync.aligned instruction needs the whole {what} (PTX: undefined behaviour)")
    return slot.reshape(-1), local % size, len(uniq)


def _in_order(n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(slot, rank)`` of ``n`` threads in order in groups of ``size``."""
    hit = _IN_ORDER.get((n, size))
    if hit is None:
        hit = _IN_ORDER.put((n, size), (np.arange(n) // size, np.arange(n) % size))
    return hit


_IN_ORDER = ShapeCache()


def _ordered(slot: np.ndarray, rank: np.ndarray, count: int, lanes: int) -> bool:
    """Whether thread ``i`` is rank ``i % lanes`` of group ``i // lanes``."""
    if len(slot) != count * lanes:
        return False
    want = _in_order(len(slot), lanes)
    return (slot is want[0] and rank is want[1]) or \
        (np.array_equal(slot, want[0]) and np.array_equal(rank, want[1]))


def _permutation(layout: tuple[np.ndarray, ...], dims: tuple[int, ...]) -> np.ndarray | None:
    """Flat matrix index of each ``(lane, element)`` of ``layout`` when every
    matrix element appears exactly once, else ``None``."""
    key = (dims,) + tuple(a.tobytes() for a in layout) + (layout[0].shape,)
    if key not in _PERMUTATIONS:
        grp, row, col = layout
        flat = ((grp * dims[1] + row) * dims[2] + col).reshape(-1)
        whole = len(flat) == dims[0] * dims[1] * dims[2] and \
            np.array_equal(np.sort(flat), np.arange(len(flat)))
        if len(_PERMUTATIONS) > 64:
            _PERMUTATIONS.clear()
        _PERMUTATIONS[key] = frozen(flat, np.argsort(flat)) if whole else None
    return _PERMUTATIONS[key]


_PERMUTATIONS: dict[tuple, tuple[np.ndarray, np.ndarray] | None] = {}



# --- mma fragment layouts -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def dims_of(shape: str) -> tuple[int, int, int]:
    """(M, N, K) of ``m16n8k16``."""
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    out = tuple(np.array(a) for a in arrays)
    for a in out:
        a.flags.writeable = False       # cached: shared by every call
    return out


@functools.lru_cache(maxsize=None)
def mma_layout(shape: str, which: str, type_name: str, major: str = "") -> tuple[np.ndarray, ...]:
    """``(group, row, col)`` of every fragment element, each ``(32, count)``:
    lane ``l``'s element ``i`` of operand ``which`` ("a", "b" or "c"; C and
    D share a layout) is ``matrix[group][row][col]``.

    PTX ISA "Matrix Fragments for mma.m*n*k*": with ``groupID = lane >> 2``
    and ``threadID_in_group = lane % 4``, every shape but the quad-pair
    ``m8n8k4.f16`` holds A in runs of ``e = 32 / bits`` consecutive K
    elements (one register; one element for ``.tf32``/``.f64``): run ``p``
    of lane ``l`` is row ``groupID + 8 * (p % (M / 8))``, columns
    ``threadID_in_group * e + 4 * e * (p // (M / 8))`` onwards. B holds run
    ``p`` at rows ``threadID_in_group * e + 4 * e * p`` onwards, column
    ``groupID``. C/D element ``i`` is row ``groupID + 8 * (i // 2)``, column
    ``threadID_in_group * 2 + i % 2``.
    """
    m, n, k = dims_of(shape)
    lane = np.arange(32)[:, None]
    if shape == "m8n8k4" and type_name in ("f16", "f32"):
        return _quad_pair_layout(which, type_name, major)
    g, t = lane >> 2, lane & 3
    if which == "c":
        i = np.arange(m * n // 32)[None, :]
        row, col = g + 8 * (i // 2), t * 2 + (i % 2)
    else:
        e = max(1, 32 // ELEMENT_BITS[type_name])
        i = np.arange((m if which == "a" else n) * k // 32)[None, :]
        run, j = i // e, i % e
        if which == "a":
            blocks = m // 8
            row, col = g + 8 * (run % blocks), t * e + j + 4 * e * (run // blocks)
        else:
            row, col = t * e + j + 4 * e * run, g + 0 * i
    row, col = np.broadcast_arrays(row, col)
    return frozen(np.zeros_like(row), row, col)


def _quad_pair_layout(which: str, type_name: str, major: str) -> tuple[np.ndarray, ...]:
    """PTX ISA "Matrix Fragments for mma.m8n8k4 with .f16 floating point
    type": four independent 8x8x4 products, one per quad-pair (lanes
    ``4q..4q+3`` low group and ``16+4q..16+4q+3`` high group)."""
    lane = np.arange(32)[:, None]
    quad, high, r4 = (lane % 16) // 4, 4 * (lane >= 16), lane % 4
    i = np.arange(8 if which == "c" else 4)[None, :]
    if which == "a":
        row, col = (r4 + high, i) if major == "row" else (i + high, r4)
    elif which == "b":
        row, col = (r4, i + high) if major == "row" else (i, r4 + high)
    elif type_name == "f16":
        row, col = r4 + high, i
    else:
        row, col = (lane & 1) + (i & 2) + high, (i & 4) + (lane & 2) + (i & 1)
    row, col, quad = np.broadcast_arrays(row, col, quad)
    return frozen(quad, row, col)


def gather(frag: np.ndarray, slot: np.ndarray, rank: np.ndarray, count: int,
           layout: tuple[np.ndarray, ...], dims: tuple[int, int, int]) -> np.ndarray:
    """Whole matrices ``(count, groups, rows, cols)`` from per-thread fragment
    elements ``frag`` ``(n, elements)``."""
    grp, row, col = layout
    lanes = grp.shape[0]
    perm = _permutation(layout, dims)
    if perm is not None and _ordered(slot, rank, count, lanes):
        # Whole groups in order: each matrix is a fixed permutation of its
        # group's fragment elements.
        per = np.ascontiguousarray(frag).reshape(count, -1)
        return np.take(per, perm[1], axis=1).reshape((count,) + dims)
    per = np.zeros((count, lanes, frag.shape[1]), dtype=frag.dtype)
    per[slot, rank] = frag
    out = np.zeros((count,) + dims, dtype=frag.dtype)
    out[:, grp, row, col] = per
    return out


def scatter(mats: np.ndarray, slot: np.ndarray, rank: np.ndarray,
            layout: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per-thread fragment elements ``(n, elements)`` of whole matrices."""
    grp, row, col = layout
    perm = _permutation(layout, mats.shape[1:])
    if perm is not None and _ordered(slot, rank, len(mats), grp.shape[0]):
        flat = np.ascontiguousarray(mats).reshape(len(mats), -1)
        return np.take(flat, perm[0], axis=1).reshape(len(slot), -1)
    return mats[:, grp, row, col][slot, rank]

"""Warp and warpgroup fragments: which thread holds which matrix element.

The collective matrix instructions (``mma.sync``, ``wgmma``) gather every
executing group's per-thread fragment elements into whole matrices, compute,
and scatter the results back. The index maps are those of PTX ISA "Matrix
Fragments for mma.m*n*k*", read from the one table of fragment layouts,
:mod:`jaxptx.isa.fragments` (:func:`mma_layout`); :func:`groups` finds the
groups among the executing threads. When the whole grid executes in thread
order, gathering is one ``np.take`` with the layout's flat permutation.
"""

from __future__ import annotations

import numpy as np

from ...isa import fragments as layouts
from ...isa.fragments import ELEMENT_BITS, shape_dims as dims_of
from ..core import fastpaths
from ..core.host import ShapeCache
from ..errors import SimError
from ..core.step import Step

__all__ = ["groups", "mma_layout", "gather", "scatter", "dims_of", "frozen", "ordered", "cta_blocks",
           "ELEMENT_BITS"]

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


def ordered(slot: np.ndarray, rank: np.ndarray, count: int, lanes: int) -> bool:
    """Whether thread ``i`` is rank ``i % lanes`` of group ``i // lanes``."""
    if len(slot) != count * lanes:
        return False
    want = _in_order(len(slot), lanes)
    return (slot is want[0] and rank is want[1]) or \
        (np.array_equal(slot, want[0]) and np.array_equal(rank, want[1]))


def cta_blocks(threads: np.ndarray, ntid: int, nthreads: int) -> tuple[int, int, int, int] | None:
    """``(c0, c1, lo, hi)`` when ``threads`` are exactly threads ``lo`` to
    ``hi - 1`` of each CTA ``c0`` to ``c1 - 1``, in order (the whole grid,
    or e.g. the consumer warpgroups of every CTA), so that a register's
    slice for them is the view ``reg.reshape(-1, ntid)[c0:c1, lo:hi]``;
    ``None`` otherwise."""
    n = len(threads)
    if not n:
        return None
    if n == nthreads and int(threads[0]) == 0 and int(threads[-1]) == n - 1:
        if bool((threads[1:] > threads[:-1]).all()):
            return 0, nthreads // ntid, 0, ntid
        return None
    c0, lo = divmod(int(threads[0]), ntid)
    breaks = np.flatnonzero(np.diff(threads) != 1)
    length = int(breaks[0]) + 1 if len(breaks) else n
    if n % length or lo + length > ntid:
        return None
    rows = n // length
    want = (np.arange(c0, c0 + rows, dtype=np.int64)[:, None] * ntid + lo
            + np.arange(length, dtype=np.int64)[None, :])
    if not np.array_equal(threads.reshape(rows, length), want):
        return None
    return c0, c0 + rows, lo, lo + length


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

def frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Read-only copies of ``arrays`` (cached values shared by every call)."""
    out = tuple(np.array(a) for a in arrays)
    for a in out:
        a.flags.writeable = False
    return out


def mma_layout(shape: str, which: str, type_name: str, major: str = "") -> tuple[np.ndarray, ...]:
    """``(group, row, col)`` of every fragment element, each ``(32, count)``:
    lane ``l``'s element ``i`` of operand ``which`` ("a", "b" or "c"; C and
    D share a layout) is ``matrix[group][row][col]``. The arrays of
    :func:`jaxptx.isa.fragments.mma` (computed once per layout; the same
    arguments give the same arrays)."""
    return layouts.mma(shape, which, type_name, major).flat


def gather(frag: np.ndarray, slot: np.ndarray, rank: np.ndarray, count: int,
           layout: tuple[np.ndarray, ...], dims: tuple[int, int, int]) -> np.ndarray:
    """Whole matrices ``(count, groups, rows, cols)`` from per-thread fragment
    elements ``frag`` ``(n, elements)``."""
    grp, row, col = layout
    lanes = grp.shape[0]
    perm = _permutation(layout, dims)
    if perm is not None and ordered(slot, rank, count, lanes):
        # Whole groups in order: each matrix is a fixed permutation of its
        # group's fragment elements.
        per = np.ascontiguousarray(frag).reshape(count, -1)
        return np.take(per, perm[1], axis=1).reshape((count,) + dims)
    per = np.zeros((count, lanes, frag.shape[1]), dtype=frag.dtype)
    per[slot, rank] = frag
    if perm is not None and fastpaths.on():     # each element once: the same permutation per group
        return np.take(per.reshape(count, -1), perm[1], axis=1).reshape((count,) + dims)
    out = np.zeros((count,) + dims, dtype=frag.dtype)
    out[:, grp, row, col] = per
    return out


def scatter(mats: np.ndarray, slot: np.ndarray, rank: np.ndarray,
            layout: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per-thread fragment elements ``(n, elements)`` of whole matrices."""
    grp, row, col = layout
    perm = _permutation(layout, mats.shape[1:])
    if perm is not None and ordered(slot, rank, len(mats), grp.shape[0]):
        flat = np.ascontiguousarray(mats).reshape(len(mats), -1)
        return np.take(flat, perm[0], axis=1).reshape(len(slot), -1)
    if perm is not None and fastpaths.on():
        flat = np.ascontiguousarray(mats).reshape(len(mats), -1)
        return np.take(flat, perm[0], axis=1).reshape((len(mats),) + grp.shape)[slot, rank]
    return mats[:, grp, row, col][slot, rank]

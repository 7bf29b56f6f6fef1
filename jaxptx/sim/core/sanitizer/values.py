"""Small helpers and constants the sanitizer's checks share."""

from __future__ import annotations

import numpy as np

from .... import ir
from ....isa import UNITS

__all__ = ["ASYNC_READERS", "ASYNC_RESULTS", "MASKED", "SCOPES", "register_move", "bits_of", "bytes_of",
           "pack_at", "unpack_at", "distinct", "increasing", "ascending", "sort_order", "repeated", "local_thread", "orders_ctas", "remote_mbarrier", "GRAIN",
           "grain_of", "fitting_grain", "cells", "expand", "as_cells", "differ", "first_differing_byte"]

# From the instruction table (jaxptx.isa.UNITS), by emulator operation:
# shared-memory reads by the async proxy, in flight until the issuing thread
# waits (the kind of wait that resolves them); registers written
# asynchronously (the kind of wait that defines them); warp collectives over
# a member mask.
ASYNC_READERS = {sim: u.async_reads for sim, u in UNITS.items() if u.async_reads}
ASYNC_RESULTS = {sim: u.async_results for sim, u in UNITS.items() if u.async_results}
MASKED = frozenset(sim for sim, u in UNITS.items() if u.member_mask)


def register_move(ins: ir.Instruction) -> bool:
    """A ``mov`` between registers (a copy, a pack or an unpack)."""
    return len(ins.operands) == 2 and all(isinstance(o, (ir.Register, ir.Vector)) for o in ins.operands)


def bits_of(ins: ir.Instruction) -> int:
    """The width of a ``mov``'s type suffix in bits (``mov.b64``: 64)."""
    for mod in reversed(ins.modifiers):
        digits = "".join(ch for ch in mod if ch.isdigit())
        if digits and mod[0] in "bsuf":
            return int(digits)
    return 32


def bytes_of(values: np.ndarray, width: int) -> np.ndarray:
    """The little-endian bytes of ``width``-byte values, flattened."""
    v = np.ascontiguousarray(values)
    if v.dtype.itemsize != width:
        v = np.ascontiguousarray(v.astype(f"<u{width}"))
    return v.view(np.uint8).reshape(-1)


# The shadow states keep one record per cell of ``grain`` bytes, as coarse as
# the accesses so far allow: a launch starts at GRAIN bytes (or the largest
# power of two dividing the memory's size) and splits its cells the first
# time an access covers part of one. Accesses of whole cells cost one check
# per cell, not per byte; every byte of a cell has had the same history, so
# the findings are those of a per-byte shadow.
GRAIN = 16
_CELL_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}


def grain_of(size: int) -> int:
    """The largest power of two up to :data:`GRAIN` dividing ``size``."""
    return GRAIN if size == 0 else min(GRAIN, size & -size)


def fitting_grain(grain: int, offsets: np.ndarray, width: int) -> int:
    """The coarsest grain, up to ``grain``, whose cells ``width``-byte
    accesses at byte ``offsets`` cover whole."""
    low = (int(np.bitwise_or.reduce(offsets)) if len(offsets) else 0) | width
    return min(grain, low & -low)


def cells(offsets: np.ndarray, width: int, grain: int) -> np.ndarray:
    """The cells ``width``-byte accesses at byte ``offsets`` cover (each a
    whole number of cells), flattened access by access."""
    per = width // grain
    first = offsets >> (grain.bit_length() - 1)         # (grains are powers of two: a shift, not a division)
    return first if per == 1 else (first[:, None] + np.arange(per)).ravel()


def expand(idx: np.ndarray | slice, ratio: int) -> np.ndarray | slice:
    """Cell indices (or a range) after each cell split into ``ratio``."""
    if ratio == 1:
        return idx
    if isinstance(idx, slice):
        return slice(idx.start * ratio, idx.stop * ratio)
    return (np.asarray(idx)[:, None] * ratio + np.arange(ratio)).ravel()


def as_cells(data: np.ndarray, grain: int) -> np.ndarray:
    """Bytes as one value per ``grain``-byte cell (16-byte cells: a pair
    of 64-bit words per row), for comparing contents cell by cell."""
    words = np.ascontiguousarray(data).view(_CELL_TYPES[grain])
    return words.reshape(-1, 2) if grain == 16 else words


def differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per cell, whether two :func:`as_cells` arrays differ."""
    ne = a != b
    return ne.any(axis=1) if ne.ndim == 2 else ne


def first_differing_byte(a: np.ndarray, b: np.ndarray) -> int:
    """The first byte in which two cells' contents (:func:`as_cells` rows)
    differ, 0 if none: the byte a per-byte shadow would name."""
    ne = np.flatnonzero(np.ascontiguousarray(a).view(np.uint8) != np.ascontiguousarray(b).view(np.uint8))
    return int(ne[0]) if len(ne) else 0


def pack_at(threads: np.ndarray, pc: int) -> np.ndarray:
    """Global thread and PC in one record (thread << 20 | pc)."""
    return (np.asarray(threads, dtype=np.int64) << 20 | pc).astype(np.int64)


def unpack_at(record: int) -> tuple[int, int]:
    """``(thread, pc)`` of a :func:`pack_at` record."""
    thread, pc = divmod(int(record), 1 << 20)
    return thread, pc


def distinct(threads: np.ndarray) -> np.ndarray:
    """The distinct threads of a per-byte thread array (usually one)."""
    if len(threads) and threads[0] == threads[-1] and (threads == threads[0]).all():
        return threads[:1]
    runs = threads[np.r_[0, np.flatnonzero(threads[1:] != threads[:-1]) + 1]] if len(threads) else threads
    return np.unique(runs)          # per-byte arrays repeat each thread in runs: unique over the runs


def increasing(idx: np.ndarray) -> bool:
    """Whether ``idx`` is strictly increasing (then no value repeats): one
    sequential pass, the common answer for the accesses of a warp-ordered
    thread set."""
    return len(idx) < 2 or bool((idx[1:] > idx[:-1]).all())


def local_thread(th: np.ndarray, ntid: int) -> np.ndarray:
    """CTA-local thread indices of global threads ``th`` (a mask when the
    CTA's size is a power of two, not a division)."""
    return th & (ntid - 1) if ntid & (ntid - 1) == 0 else th % ntid


def ascending(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (one sequential pass)."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def sort_order(idx: np.ndarray) -> np.ndarray | None:
    """A stable sorting order of ``idx``, or None when it is sorted already
    (the accesses of ascending threads to ascending or shared words)."""
    return None if ascending(idx) else np.argsort(idx, kind="stable")


def repeated(idx: np.ndarray, scratch: np.ndarray) -> bool:
    """Whether a value appears twice in ``idx`` (indices into ``scratch``,
    an int64 array it scribbles on): a sequential test for increasing
    indices first, else two passes over the scratch, not a sort."""
    if increasing(idx):
        return False
    pos = np.arange(len(idx))
    scratch[idx] = pos
    return not (scratch[idx] == pos).all()


SCOPES = ("gpu", "sys")


def orders_ctas(ins: ir.Instruction) -> bool:
    """An instruction that can order memory between CTAs: a gpu- or
    system-scope fence, ``membar.gl``/``.sys``, or a release/acquire access."""
    mods = set(ins.modifiers)
    if ins.opcode in ("fence", "membar"):
        return bool(mods & {"gpu", "sys", "gl"})
    return bool(mods & {"release", "acquire", "acq_rel"}) and bool(mods & set(SCOPES))


def remote_mbarrier(ins: ir.Instruction) -> bool:
    """An instruction that can arrive on or wait for another CTA's mbarrier
    (a ``.shared::cluster`` mbarrier address, a multicast commit)."""
    names = ins.opcode + "." + ".".join(ins.modifiers)
    return ("mbarrier" in names or "commit" in names) and "shared::cluster" in ins.modifiers

"""Small helpers and constants the sanitizer's checks share."""

from __future__ import annotations

import numpy as np

from .... import ir

__all__ = ["ASYNC_READERS", "WGMMA_REGS", "MASKED", "SCOPES", "register_move", "bits_of", "bytes_of",
           "pack_at", "unpack_at", "distinct", "repeated", "orders_ctas", "remote_mbarrier"]

# Instructions whose shared-memory reads are async-proxy reads, in flight
# until the issuing thread waits: the wait that resolves them.
ASYNC_READERS = {"wgmma_mma_async": "wgmma", "tcgen05_mma": "tcgen05", "tcgen05_mma_sp": "tcgen05",
                 "tcgen05_cp": "tcgen05"}
WGMMA_REGS = ("wgmma_mma_async",)
MASKED = frozenset(["shfl_sync", "vote_sync", "match_all_sync", "match_any_sync", "redux_sync"])


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


def repeated(idx: np.ndarray, scratch: np.ndarray) -> bool:
    """Whether a value appears twice in ``idx`` (indices into ``scratch``,
    an int64 array it scribbles on): two passes, not a sort."""
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

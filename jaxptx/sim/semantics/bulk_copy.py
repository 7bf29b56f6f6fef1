"""Emulator semantics: bulk copies (``cp.async.bulk``), and the memory
helpers the tensor copies (:mod:`.tma`) share with them.

The copies happen when the instruction executes: the bytes are in place
before the next instruction, and a copy that signals an mbarrier performs
its complete-tx (of the bytes it moved) right away — except under
``schedule="random"``, where they complete later (:mod:`..core.deferred`):
at a random step, at the ``cp.async.bulk.wait_group`` of a bulk group, or
when nothing else can run. Copies go through the async
proxy: the observers hear them as ``copy_read``/``copy_write`` (the
sanitizer does not check them for races, but marks the shared bytes they
write as initialised).
"""

from __future__ import annotations


import numpy as np

from ...types import TYPES
from ..memory.spaces import RANK_SHIFT, SHARED_OFFSET
from ..errors import SimError
from .mbarrier import barrier_index, complete_tx, present
from .memory import check_cta_window
from ..core.deferred import deferred_of, later
from ..core.step import SPACES, Step
from .registry import semantics

__all__: list[str] = []

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_U32 = TYPES["u32"]
_OFFSET = np.uint64(SHARED_OFFSET)
_SHIFT = np.uint64(RANK_SHIFT)


# --- memory helpers ----------------------------------------------------------------------------


def _space(s: Step, slot: str) -> str:
    return SPACES[s.mod(slot)]


def _leaders(pos: np.ndarray, width: int, chunk: int) -> np.ndarray | slice:
    """Of accesses ``pos`` of ``width`` bytes that come in runs of
    ``chunk`` bytes (positions ``k*i .. k*i+k-1`` at consecutive addresses,
    the first ``chunk``-aligned), those that start a run."""
    return slice(None) if chunk == width else pos % (chunk // width) == 0


def _read(s: Step, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
          chunk: int | None = None) -> np.ndarray:
    """``width``-byte values; shared memory is read by the async proxy (the
    sanitizer sees one access per run of ``chunk`` bytes: see
    :func:`_leaders`)."""
    if space != "shared":
        return s.m.memory.load(space, addr, threads, width, s.ins.name)
    out = np.empty(len(addr), dtype=_UINT[width])
    told = s.m.observers.hook("copy_read")
    for view, idx, pos in s.m.memory.locations("shared", addr, threads, width, s.ins.name):
        out[pos] = view[idx]
        if told is not None:
            lead = _leaders(pos, width, chunk or width)
            told(idx[lead].astype(np.int64) * width, threads[pos[lead]], chunk or width)
    return out


def _write(s: Step, space: str, addr: np.ndarray, threads: np.ndarray, values: np.ndarray,
           width: int, chunk: int | None = None) -> None:
    """Store ``width``-byte values; shared-memory writes are async-proxy
    writes (the sanitizer sees one per run of ``chunk`` bytes)."""
    if space != "shared":
        s.m.memory.store(space, addr, threads, values, width, s.ins.name)
        return
    values = np.asarray(values).astype(_UINT[width], copy=False)
    told = s.m.observers.hook("copy_write")
    for view, idx, pos in s.m.memory.locations("shared", addr, threads, width, s.ins.name):
        view[idx] = values[pos]
        if told is not None:
            lead = _leaders(pos, width, chunk or width)
            told(idx[lead].astype(np.int64) * width, threads[pos[lead]], chunk or width)


def _aligned(s: Step, addr: np.ndarray, size: int, what: str) -> None:
    bad = (addr & np.uint64(size - 1)) != 0
    if bad.any():
        raise SimError(f"{s.ins.name}: {what} {int(addr[bad][0]):#x} is not {size}-byte aligned")


def _cluster_size(s: Step) -> int:
    return int(np.prod(s.m.cluster))


Target = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]


def _ranks(s: Step, addr: np.ndarray) -> np.ndarray:
    """``%cluster_ctarank`` of the CTA whose shared memory holds each
    shared-space address: the rank it carries (:mod:`..memory.spaces`)."""
    return (np.asarray(addr, dtype=np.uint64) >> _SHIFT).astype(np.int64)


def _at_rank(rank: np.ndarray | int, addr: np.ndarray) -> np.ndarray:
    """The shared::cluster address of ``addr``'s offset in the CTA of ``rank``."""
    return (np.asarray(rank).astype(np.uint64) << _SHIFT) | (addr & _OFFSET)


def _check_pair(s: Step, dst: np.ndarray, mbar: np.ndarray) -> None:
    """The mbarrier of a unicast copy lies in the destination's CTA
    (``.cta_group::1``, the default) or in that CTA or its peer, the CTA
    whose ``%cluster_ctarank`` differs in bit 0 (``.cta_group::2``; a 2-SM
    kernel clears bit 24 of its own mbarrier's address to name the even
    CTA's); a ``.shared::cta`` destination is the executing CTA's (PTX
    ISA, cp.async.bulk.tensor)."""
    if s.mod("dst") == "shared::cta":
        check_cta_window(s, dst, "destination")
    d, m = _ranks(s, dst), _ranks(s, mbar)
    pair = s.mod("cta_group") == "cta_group::2"
    bad = (m != d) & ~(pair & (m == (d ^ 1)))
    if bad.any():
        i = int(np.nonzero(bad)[0][0])
        allowed = "that CTA or its peer (.cta_group::2)" if pair else "that CTA (.cta_group::1)"
        raise SimError(f"{s.ins.name}: the mbarrier is in the CTA of cluster rank {int(m[i])} and the "
                       f"destination in rank {int(d[i])}; it must be in {allowed} (PTX: undefined behaviour)")


def _targets(s: Step, dst: np.ndarray, mbar: np.ndarray | None) -> list[Target]:
    """``(thread positions, dst, mbar)`` per destination CTA: with
    ``.multicast::cluster`` the same CTA-relative offsets in each CTA whose
    bit is set in ``ctaMask`` (bit r: the CTA of %cluster_ctarank r), the
    mbarrier signal going to that CTA (``.cta_group::1``) or, with
    ``.cta_group::2``, to the CTA of its pair whose rank has the parity of
    the CTA holding ``[mbar]``; otherwise the addresses as given."""
    k = present(s, "cta_mask")
    if k is None or not s.mod("multicast"):
        if mbar is not None:
            _check_pair(s, dst, mbar)
        return [(np.arange(s.n), dst, mbar)]
    mask = s.src(k, TYPES["u16"]).astype(np.int64)
    size = _cluster_size(s)
    if (mask >> size).any():
        raise SimError(f"{s.ins.name}: ctaMask {int(mask.max()):#x} names CTAs outside the cluster of {size}")
    parity = None
    if mbar is not None and s.mod("cta_group") == "cta_group::2":
        parity = _ranks(s, mbar) & 1
    out = []
    for rank in range(size):
        pos = np.nonzero((mask >> rank) & 1)[0]
        if len(pos):
            bar = None
            if mbar is not None:
                signalled = rank if parity is None else (rank & ~1) | parity[pos]
                if (np.asarray(signalled) >= size).any():
                    raise SimError(f"{s.ins.name}: the peer of CTA rank {rank} is outside the cluster "
                                   f"of {size} (.cta_group::2 needs CTA pairs)")
                bar = _at_rank(signalled, mbar[pos])
            out.append((pos, _at_rank(rank, dst[pos]), bar))
    return out


def _signal(s: Step, pos: np.ndarray, mbar: np.ndarray | None, nbytes: np.ndarray) -> None:
    """complete-tx of the bytes each copy moved, on its mbarrier."""
    if mbar is not None and len(pos):
        sub = Step(s.m, s.ins, s.r, s.threads[pos])
        words = barrier_index(sub, 0, addr=mbar)
        s.m.observers.tma_signal(sub.threads, words)
        complete_tx(sub, words, nbytes)


def _mbar(s: Step) -> np.ndarray | None:
    k = present(s, "mbar")
    return None if k is None else s.address(k)[1].copy()   # kept past the step (..core.deferred)


def read_bulk_source(s: Step, src: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of each thread's ``size``-byte shared-memory source read by
    the async proxy (in 16-byte runs), with the position of the thread each
    byte belongs to: ``(positions, bytes)``."""
    total = int(size.sum())
    rep = np.repeat(np.arange(s.n), size)
    off = (np.arange(total) - np.repeat(np.cumsum(size) - size, size)).astype(np.uint64)
    return rep, _read(s, _space(s, "src"), src[rep] + off, s.threads[rep], 1, 16)


# --- cp.async.bulk ------------------------------------------------------------------------------


@semantics('cp_async_bulk')
def cp_async_bulk(s: Step) -> None:
    """``cp.async.bulk.dst.src.completion [dst], [src], size{, [mbar]}{, ctaMask}``.

    PTX ISA, cp.async.bulk: copies ``size`` bytes (a multiple of 16, both
    addresses 16-byte aligned) global → shared::cluster (optionally
    multicast to the CTAs of ``ctaMask``), shared::cta → shared::cluster, or
    shared::cta → global. The mbarrier forms perform complete-tx of ``size``
    bytes on ``[mbar]`` (in each destination CTA when multicast); the
    bulk_group form completes at once. ``.cp_mask``: byte j of each 16-byte
    chunk is written only when bit j of ``byte_mask`` is set."""
    dst, src = s.address(0)[1].copy(), s.address(1)[1].copy()     # kept past the step (..core.deferred)
    size = s.src(2, _U32).astype(np.int64)
    if (size % 16).any():
        raise SimError(f"{s.ins.name}: size {int(size[size % 16 != 0][0])} is not a multiple of 16")
    _aligned(s, dst, 16, "destination")
    _aligned(s, src, 16, "source")
    if s.mod("src") == "shared::cta":
        check_cta_window(s, src, "source")
    total = int(size.sum())
    rep = np.repeat(np.arange(s.n), size)
    off = (np.arange(total) - np.repeat(np.cumsum(size) - size, size)).astype(np.uint64)
    keep = np.ones(total, dtype=bool)
    k = present(s, "byte_mask")
    if k is not None:
        bit = (off % np.uint64(16)).astype(np.int64)
        keep = ((s.src(k, TYPES["u16"]).astype(np.int64)[rep] >> bit) & 1) == 1
    space = _space(s, "dst")
    mbar = _mbar(s)
    targets = _targets(s, dst, mbar)            # operands are read at issue (.deferred)

    def copy() -> None:
        data = _read(s, _space(s, "src"), src[rep] + off, s.threads[rep], 1, 16)   # (16-byte runs: checked above)
        for pos, d, bar in targets:
            sel = np.isin(rep, pos) & keep if len(pos) != s.n else keep
            _write(s, space, d[np.searchsorted(pos, rep[sel])] + off[sel], s.threads[rep[sel]], data[sel], 1,
                   1 if k is not None else 16)
            _signal(s, pos, bar, size[pos])
    later(s, copy, "bulk" if mbar is None else "mbarrier")


@semantics('cp_async_bulk_commit_group', 'cp_async_bulk_prefetch')
def cp_async_bulk_nothing(s: Step) -> None:
    """``cp.async.bulk.commit_group``, ``cp.async.bulk.prefetch``: nothing to
    do — the emulator has no caches, and bulk groups are waited for whole."""


@semantics('cp_async_bulk_wait_group')
def cp_async_bulk_wait_group(s: Step) -> None:
    """``cp.async.bulk.wait_group{.read} n``: the executing threads' bulk-group
    copies complete (at issue on the default schedule; under a random one,
    every pending one of theirs now: completing early is allowed)."""
    d = deferred_of(s)
    if d is not None:
        d.bulk_wait(s.threads)


# --- cp.async.bulk.tensor ------------------------------------------------------------------------

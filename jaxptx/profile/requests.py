"""Warp-level requests from one instruction's accesses, counted the way
Nsight Compute counts them.

A *request* is one warp's execution of a memory instruction over its
active lanes (a ``ld.global.v4.f32`` is one request, although the emulator
reads its four elements separately).

* **Global** (and generic addresses that land in global memory): the
  *sectors* of a request are the distinct aligned 32-byte segments its lanes
  touch (``l1tex__t_sectors_pipe_lsu_mem_global_op_ld/st``); the ideal is
  ``ceil(bytes requested / 32)``.
* **Shared**: a request is served in *wavefronts*. Lanes are split into
  phases by their access width ``W`` (the bytes one lane moves: 4 or less:
  one phase of 32 lanes; 8: two half-warps; 16: four quarter-warps, which
  is also how ``ldmatrix``/``stmatrix`` serve each matrix's 8 row
  addresses). Within a phase, bank ``(address / 4) % 32`` serves one 4-byte
  word per wavefront, and several lanes reading the same word share it
  (broadcast), so a phase needs as many wavefronts as the most distinct
  words any bank holds. The ideal is one per phase with active lanes; the
  excess is ``shared_bank_conflicts`` (Nsight's
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared``).
* **Tensor-core operands** read from shared memory through descriptors
  (``wgmma``, ``tcgen05.mma``, ``tcgen05.cp``): the ISA defines their layout
  as 8-row x 16-byte core matrices; a model counts the distinct 16-byte
  chunks an MMA reads, ideally 8 (128 bytes, one per bank group) a
  wavefront, and a bank group (chunk % 8) holding more than its share as
  extra wavefronts. These are kept apart from the LSU counts
  (``tensor_smem_*``): Nsight does not count them as shared requests.
* **Bulk copies** (TMA): bytes only (``tma_bytes``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["LineCounts", "Sample", "count", "FIELDS"]


@dataclasses.dataclass
class LineCounts:
    """Memory and tensor counts of one PTX line, summed over its executions."""

    global_requests: int = 0
    global_sectors: int = 0
    global_ideal_sectors: int = 0
    global_bytes: int = 0
    shared_requests: int = 0
    shared_wavefronts: int = 0
    shared_ideal_wavefronts: int = 0
    shared_bank_conflicts: int = 0
    shared_bytes: int = 0
    local_requests: int = 0
    local_bytes: int = 0
    tensor_smem_bytes: int = 0
    tensor_smem_wavefronts: int = 0
    tensor_smem_conflicts: int = 0
    tma_bytes: int = 0
    tensor_flops: int = 0
    width: int = 0          # bytes one lane moves per request (the last seen)


FIELDS = tuple(f.name for f in dataclasses.fields(LineCounts) if f.name != "width")
"""The summed fields of :class:`LineCounts`, in order."""


def _changes(sorted_keys: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal values."""
    first = np.empty(len(sorted_keys), dtype=bool)
    if len(sorted_keys):
        first[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return first


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (no sort when they already are, as the
    keys of a coalesced access by ascending threads; else a stable sort,
    fast on nearly sorted keys)."""
    s = keys if _ascending(keys) else np.sort(keys, kind="stable")
    return s[_changes(s)]


def _distinct_words(keys: np.ndarray, words: int) -> np.ndarray:
    """:func:`_distinct` of ``(phase group) << 20 | word`` keys (``words``
    4-byte words of shared memory per CTA): by marks in a bitmap of (group,
    word) when the groups span few enough words, which needs no sort when
    the keys do not come in order (lanes of a warp reading a few words in
    turn)."""
    if len(keys) < 2 or _ascending(keys):
        return _distinct(keys)
    group = keys >> 20
    lo, hi = int(group.min()), int(group.max())
    span = (hi - lo + 1) * words
    if words == 0 or span > 4 * len(keys):
        return _distinct(keys)
    marks = np.zeros(span, dtype=bool)
    marks[(group - lo) * words + (keys & ((1 << 20) - 1))] = True
    at = np.flatnonzero(marks)
    return ((at // words + lo) << 20) | (at % words)


def _ascending(keys: np.ndarray) -> bool:
    """Whether ``keys`` never decrease (one sequential pass)."""
    return len(keys) < 2 or bool((keys[1:] >= keys[:-1]).all())


def _warps(w: np.ndarray, sizes: np.ndarray | None = None) -> tuple[int, np.ndarray | None]:
    """The number of distinct warps in ``w`` and, given ``sizes`` (bytes
    per element), the bytes of each (in any order): by runs when the warps
    come in order (ascending threads), else by counting, never by sorting."""
    if _ascending(w):
        starts = np.flatnonzero(_changes(w))
        if sizes is None:
            return len(starts), None
        return len(starts), np.add.reduceat(sizes, starts) if len(starts) else np.zeros(0, dtype=np.int64)
    if sizes is None:
        return int(np.count_nonzero(np.bincount(w))), None
    present = np.bincount(w) > 0
    return int(np.count_nonzero(present)), np.bincount(w, weights=sizes)[present]


def count(c: Any, pc: int, line: LineCounts, records: list[tuple]) -> None:
    """Add the requests of one execution of ``pc`` (its ``records``:
    ``(buffer, byte offsets, threads, width, write)``) to ``line``."""
    kind = c.kinds[pc]
    if kind.traffic == "none" or not records:
        return
    mem = c.m.memory
    shared, local = mem.shared, mem.local
    g, s, loc = [], [], []
    for rec in records:
        buf = rec[0]
        if buf is shared:
            s.append(rec)
        elif buf is local:
            loc.append(rec)
        elif buf is not mem.param and buf is not mem.const:
            g.append(rec)
    if kind.traffic == "tma":
        line.tma_bytes += sum(len(r[2]) * r[3] for r in (g or s))
        return
    if kind.traffic == "tensor":
        if s:
            _tensor_reads(c, line, s)
        return
    if g:
        _global(c, line, g)
    if s:
        _shared(c, pc, line, s)
    if loc:
        line.local_requests += len(np.unique(np.concatenate([c.warp_of(r[2]) for r in loc])))
        line.local_bytes += sum(len(r[2]) * r[3] for r in loc)


def _as_int64(off: np.ndarray) -> np.ndarray:
    """Byte offsets as int64 (offsets below 2**63 are the same numbers
    viewed as int64: no conversion pass)."""
    off = np.asarray(off)
    if off.dtype == np.uint64:
        return off.view(np.int64)
    return off if off.dtype == np.int64 else off.astype(np.int64)


def _sectors(off: np.ndarray) -> np.ndarray:
    """The 32-byte sector of each byte offset, as int64."""
    return _as_int64(off) >> 5


def _global_one(c: Any, line: LineCounts, buf: np.ndarray, off: np.ndarray, thr: np.ndarray,
                width: int) -> bool:
    """:func:`_global` for one gather or scatter whose sectors never
    decrease (threads always come ascending): requests, bytes and sectors
    from counts of changes, the warps' runs found arithmetically when the
    threads are consecutive, the buffer's touched sectors marked as one
    range when they are one. Returns False, counting nothing, when the
    sectors do not come in order (then :func:`_global` sorts)."""
    n = len(thr)
    if c._warp_shift is None or n < 2:
        return False
    sec = _sectors(off)
    if not bool((sec[1:] >= sec[:-1]).all()):
        return False
    sec_step = sec[1:] != sec[:-1]
    changes = int(np.count_nonzero(sec_step))
    t0 = int(thr[0])
    if int(thr[-1]) - t0 == n - 1:                 # consecutive threads: warps are runs of 32 from t0
        bounds = np.arange(32 - (t0 & 31), n, 32)  # the first position of each warp after the first
        per_warp = np.diff(np.r_[0, bounds, n])
    else:
        w = thr >> 5
        bounds = np.flatnonzero(w[1:] != w[:-1]) + 1
        per_warp = np.diff(np.r_[0, bounds, n])
    # (warp, sector) keys change where the sector does, and where the warp does in mid-sector
    distinct = 1 + changes + int(np.count_nonzero(~sec_step[bounds - 1])) if len(bounds) else 1 + changes
    per_warp = per_warp * width
    line.global_requests += len(per_warp)
    line.global_sectors += distinct
    line.global_ideal_sectors += int(((per_warp + 31) // 32).sum())
    line.global_bytes += n * width
    lo, hi = int(sec[0]), int(sec[-1])
    _touch(c, buf, slice(lo, hi + 1) if hi - lo == changes else sec)
    return True


def _touch(c: Any, buf: np.ndarray, sectors: np.ndarray | slice) -> None:
    """Mark ``sectors`` (or a range of them) of global buffer ``buf`` as touched."""
    k = c.buffer_id(buf)
    touched = c.touched.get(k)
    if touched is None:
        touched = c.touched[k] = np.zeros(-(-len(buf) // 32), dtype=bool)
    touched[sectors] = True


def _global(c: Any, line: LineCounts, records: list[tuple]) -> None:
    if len(records) == 1:
        buf, off, thr, width, _ = records[0]
        if _global_one(c, line, buf, off, thr, width):
            return
    keys, warps, sizes = [], [], []
    for buf, off, thr, width, _ in records:
        w = c.warp_of(thr)
        k = c.buffer_id(buf)
        sectors = np.asarray(off, dtype=np.int64) >> 5
        keys.append((w << 42) | (k << 31) | sectors)
        warps.append(w)
        sizes.append(np.full(len(w), width, dtype=np.int64))
        touched = c.touched.get(k)
        if touched is None:
            touched = c.touched[k] = np.zeros(-(-len(buf) // 32), dtype=bool)
        touched[sectors] = True
    w = np.concatenate(warps) if len(warps) > 1 else warps[0]
    requests, per_warp = _warps(w, np.concatenate(sizes) if len(sizes) > 1 else sizes[0])
    line.global_requests += requests
    line.global_sectors += len(_distinct(np.concatenate(keys) if len(keys) > 1 else keys[0]))
    line.global_ideal_sectors += int(np.ceil(per_warp / 32).sum())
    line.global_bytes += int(per_warp.sum())


def _shared(c: Any, pc: int, line: LineCounts, records: list[tuple]) -> None:
    size = c.m.memory.shared_size
    total = sum(len(r[2]) * r[3] for r in records)
    most = max(len(r[2]) for r in records)
    if most == 0:
        return
    width = 1 << max(0, int(round(np.log2(total / most))))      # bytes per lane
    per_phase = 32 if width <= 4 else max(1, 128 // width)
    phases = 32 // per_phase
    keys, warps = [], []
    ntid = c.ntid
    for _, off, thr, each, _ in records:
        w = c.warp_of(thr)
        off = _as_int64(off)
        word = (off & (size - 1) if size & (size - 1) == 0 else off % size) >> 2
        if phases == 1:             # (4-byte lanes or less: the phase is the warp)
            key = (w << 20) | word
        else:
            lane = (thr & 31) if ntid % 32 == 0 else (thr % ntid) % 32
            key = ((w * phases + lane // per_phase) << 20) | word
        if each > 4:            # an 8- or 16-byte element covers 2 or 4 words
            key = (key[:, None] + np.arange(each // 4)).reshape(-1)
        keys.append(key)
        warps.append(w)
    u = _distinct_words(np.concatenate(keys) if len(keys) > 1 else keys[0], size >> 2)
    wp = u >> 20
    banked = np.sort((wp << 5) | (u & 31), kind="stable")
    starts = np.flatnonzero(_changes(banked))
    runs = np.diff(np.append(starts, len(banked)))           # distinct words per (phase, bank)
    run_wp = banked[starts] >> 5
    groups = np.flatnonzero(_changes(run_wp))
    wavefronts = int(np.maximum.reduceat(runs, groups).sum()) if len(runs) else 0
    ideal = len(groups)
    requests, _ = _warps(np.concatenate(warps) if len(warps) > 1 else warps[0])
    line.shared_requests += requests
    line.shared_wavefronts += wavefronts
    line.shared_ideal_wavefronts += ideal
    line.shared_bank_conflicts += wavefronts - ideal
    line.shared_bytes += total
    line.width = width
    if pc not in c.samples:
        c.samples[pc] = _sample(c, records, width, per_phase, size)


def _sample(c: Any, records: list[tuple], width: int, per_phase: int, size: int) -> Sample:
    """One warp's access (the first warp of the first execution) for the
    bank map: its lanes and 4-byte words now, their banks and passes when
    first asked for (:meth:`Sample.rows`)."""
    first = int(c.warp_of(records[0][2][:1])[0])
    lanes, offsets = [], []
    for _, off, thr, w, _ in records:
        if c._warp_shift is not None:       # ascending threads: the warp's lanes are one block, found by bisection
            sel = slice(*np.searchsorted(thr, [first << 5, (first + 1) << 5]).tolist())
        else:
            sel = c.warp_of(thr) == first
        t = thr[sel]
        o = np.asarray(off, dtype=np.int64)[sel] % size
        for b in (range(0, w, 4) if w >= 4 else (0,)):
            lanes.append((t % c.ntid) % 32)
            offsets.append(o + b)
    return Sample(first, width, per_phase, np.concatenate(lanes).astype(np.int64),
                  np.concatenate(offsets).astype(np.int64) >> 2)


class Sample:
    """One warp's shared access, kept as arrays until :meth:`rows` (a
    profile's samples are built only when asked for)."""

    __slots__ = ("lane", "per_phase", "warp", "width", "word")

    def __init__(self, warp: int, width: int, per_phase: int, lane: np.ndarray, word: np.ndarray) -> None:
        self.warp, self.width, self.per_phase, self.lane, self.word = warp, width, per_phase, lane, word

    def rows(self) -> dict:
        """Per (lane, 4-byte word), in lane then word order, its bank and
        the wavefront (pass) that serves it: the words of one (phase, bank)
        take passes in the order they first appear."""
        per_phase = self.per_phase
        order = np.lexsort((self.word, self.lane))
        lane, word = self.lane[order], self.word[order]
        group = (lane // per_phase) * 32 + word % 32
        pairs, first_at, which = np.unique((group << 32) | word, return_index=True, return_inverse=True)
        by_first = np.lexsort((first_at, pairs >> 32))
        rank = np.empty(len(pairs), dtype=np.int64)
        starts = np.flatnonzero(_changes(pairs[by_first] >> 32))
        rank[by_first] = np.arange(len(pairs)) - np.repeat(starts, np.diff(np.append(starts, len(pairs))))
        passes = rank[which.reshape(-1)]
        rows = [{"lane": ln, "word": wd, "bank": wd % 32, "phase": ln // per_phase, "pass": ps}
                for ln, wd, ps in zip(lane.tolist(), word.tolist(), passes.tolist())]
        return {"warp": self.warp, "width": self.width, "lanes_per_phase": per_phase, "accesses": rows}


def _tensor_reads(c: Any, line: LineCounts, records: list[tuple]) -> None:
    """All operand reads of one tensor-core step at once: distinct 16-byte
    chunks per issuing thread, 8 to a wavefront, more where a bank group
    (chunk % 8) holds more than its share."""
    size = c.m.memory.shared_size
    off = np.concatenate([np.asarray(r[1], dtype=np.int64) for r in records])
    owner = np.concatenate([np.broadcast_to(np.asarray(r[2], dtype=np.int64), (len(r[1]),)) for r in records])
    u = _distinct((owner << 24) | ((off % size) >> 4))
    who = u >> 24
    starts = np.flatnonzero(_changes(who))
    n = np.diff(np.append(starts, len(u)))                           # chunks per issuing thread
    grouped = np.sort((who << 3) | (u & 7), kind="stable")
    gs = np.flatnonzero(_changes(grouped))
    per_group = np.diff(np.append(gs, len(grouped)))
    most = np.maximum.reduceat(per_group, np.flatnonzero(_changes(grouped[gs] >> 3)))
    ideal = -(-n // 8)
    waves = np.maximum(ideal, most)
    line.tensor_smem_bytes += int(n.sum()) * 16
    line.tensor_smem_wavefronts += int(waves.sum())
    line.tensor_smem_conflicts += int((waves - ideal).sum())

"""Emulator semantics: Blackwell tensor-memory management and ordering
(PTX ISA 9.7.16.7 "tcgen05.alloc / dealloc / relinquish_alloc_permit",
"tcgen05.commit", "tcgen05.wait", "tcgen05.fence", and 9.7.16.6 "tcgen05
Memory Consistency Model"). The moves between registers, shared memory and
tensor memory are in :mod:`.tcgen05_move`, the MMA in :mod:`.tcgen05_mma`,
the tensor memory itself in :mod:`jaxptx.sim.memory.tmem`.

Why the ordering instructions do nothing here: on the default schedule the
emulator completes every ``tcgen05`` operation (``.mma``, ``.cp``,
``.shift``, ``.ld``, ``.st``) before the next instruction runs, in program
order, so by the time a ``tcgen05.wait::ld/st`` or a ``tcgen05.fence::*``
executes there is nothing in flight to wait for or to order.
``tcgen05.commit`` likewise finds the operations it tracks already complete
and arrives on its mbarrier at once. Under ``schedule="random"``
(:mod:`..core.deferred`) ``.mma``, ``.cp`` and ``.shift`` complete later,
in issue order per thread, and the commit's arrive is queued behind the
executing thread's earlier ones: it happens at a seeded step after they
have all completed, so a kernel that reads D before the mbarrier wait sees
the seed. ``.ld`` and ``.st`` still complete at issue.

CTA pairs: ``.cta_group::2`` acts on the executing CTA and its peer, the
CTA of the cluster whose ``%cluster_ctarank`` differs in bit 0. All tcgen05
instructions of a kernel must give the same ``.cta_group`` (PTX ISA); the
emulator checks it on the instructions that carry one (a check first
written by a second helper on this task).
"""

from __future__ import annotations

import functools

import numpy as np

from ...types import TYPES
from ..core.deferred import later
from ..core.step import Step
from ..errors import SimError
from ..memory import tmem
from ..memory.spaces import RANK_SHIFT, SHARED_OFFSET
from .fragments import groups
from .mbarrier import arrive, barrier_index, present
from .registry import semantics

__all__ = ["tcgen05_alloc", "tcgen05_dealloc", "tcgen05_relinquish", "tcgen05_commit", "tcgen05_wait",
           "tcgen05_fence", "where", "warp_leaders", "uniform_per_warp", "peer_cta"]

_U32 = TYPES["u32"]
_U16 = TYPES["u16"]


def where(s: Step) -> str:
    """The instruction and where it is: ``tcgen05.alloc... [PTX line N]``."""
    loc = s.ins.loc
    if loc and len(loc) == 3:
        return f"{s.ins.name} [PTX line {loc[1]}]"
    if loc and len(loc) == 2:
        return f"{s.ins.name} [{loc[0]}:{loc[1]}]"
    return s.ins.name


def warp_leaders(s: Step) -> tuple[np.ndarray, np.ndarray]:
    """``(positions of each executing warp's lane 0, warp of each thread)``
    for a ``.sync.aligned`` instruction (whole warps only)."""
    slot, rank, _ = groups(s)
    leaders = np.flatnonzero(rank == 0)
    return leaders[np.argsort(slot[leaders], kind="stable")], slot


def uniform_per_warp(s: Step, values: np.ndarray, name: str) -> np.ndarray:
    """One value per executing warp; all lanes of a ``.sync.aligned`` warp
    must give the same value (PTX: undefined behaviour otherwise)."""
    leaders, slot = warp_leaders(s)
    first = values[leaders]
    bad = values != first[slot]
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise SimError(f"{s.ins.name}: every thread of a warp must give the same {name}; thread "
                       f"{int(s.threads[k])} gives {int(values[k]):#x}, its warp's lane 0 {int(first[slot[k]]):#x}")
    return first


def _cta_group(s: Step) -> int:
    """1 or 2 from ``.cta_group``, checked against the kernel's first one."""
    group = s.mod("cta_group", "cta_group::1")
    first = getattr(s.m, "_tcgen05_cta_group", None)
    if first is None:
        s.m._tcgen05_cta_group = (group, where(s))
    elif first[0] != group:
        raise SimError(f"{s.ins.name}: .{group}, but {first[1]} gave .{first[0]}; all tcgen05 instructions of a "
                       "kernel must give the same .cta_group")
    return 2 if group == "cta_group::2" else 1


def peer_cta(s: Step, cta: int) -> int | None:
    """The peer CTA of ``cta`` for ``.cta_group::2`` (ranks differing in
    bit 0), ``None`` for ``.cta_group::1``."""
    if _cta_group(s) == 1:
        return None
    size = int(np.prod(s.m.cluster))
    rank = int(s.m.cluster_register("cluster_ctarank", 0, np.array([cta]))[0])
    if (rank ^ 1) >= size:
        raise SimError(f"{s.ins.name}: .cta_group::2 needs a CTA pair in the cluster; CTA {cta} has rank {rank} "
                       f"in a cluster of {size}")
    return int(s.m.cluster_cta(np.array([cta]), np.array([rank ^ 1]))[0])


@semantics("tcgen05_alloc")
def tcgen05_alloc(s: Step) -> None:
    """``tcgen05.alloc``: each executing warp allocates ``nCols`` columns of
    its CTA's tensor memory (with ``.cta_group::2`` the same columns in its
    peer CTA too) and writes the address (lane 0, the first column) as a
    32-bit word to the shared-memory location ``[dst]``."""
    leaders, _ = warp_leaders(s)
    counts = uniform_per_warp(s, s.src(1, _U32).astype(np.int64), "nCols")
    space, addr = s.address(0)
    addr = uniform_per_warp(s, np.asarray(addr, dtype=np.uint64), "[dst] address")
    here = where(s)
    for k, pos in enumerate(leaders):
        cta = int(s.threads[pos]) // s.m.ntid
        column = tmem.allocate(s.m, cta, int(counts[k]), here, peer_cta(s, cta))
        s.m.memory.store(space, addr[k:k + 1], s.threads[pos:pos + 1], np.array([column], dtype=np.uint32), 4,
                         s.ins.name)


@semantics("tcgen05_dealloc")
def tcgen05_dealloc(s: Step) -> None:
    """``tcgen05.dealloc taddr, nCols``: each executing warp frees the block
    an alloc returned at ``taddr`` (lane 0) of exactly ``nCols`` columns in
    its own CTA (with ``.cta_group::2`` each CTA of the pair frees its own)."""
    _cta_group(s)
    leaders, _ = warp_leaders(s)
    taddr = uniform_per_warp(s, s.src(0, _U32).astype(np.int64), "taddr")
    counts = uniform_per_warp(s, s.src(1, _U32).astype(np.int64), "nCols")
    here = where(s)
    for k, pos in enumerate(leaders):
        cta = int(s.threads[pos]) // s.m.ntid
        if tmem.lane_of(taddr[k]):
            raise SimError(f"{here}: taddr {int(taddr[k]):#010x} has lane {tmem.lane_of(taddr[k])}; "
                           "tcgen05.dealloc takes the address tcgen05.alloc returned (lane 0)")
        tmem.deallocate(s.m, cta, tmem.column_of(taddr[k]), int(counts[k]), here)


@semantics("tcgen05_relinquish")
def tcgen05_relinquish(s: Step) -> None:
    """``tcgen05.relinquish_alloc_permit``: the executing warps' CTAs may no
    longer allocate tensor memory (a later alloc is an error)."""
    _cta_group(s)
    leaders, _ = warp_leaders(s)
    here = where(s)
    for pos in leaders:
        tmem.relinquish(s.m, int(s.threads[pos]) // s.m.ntid, here)


def _arrive_once(s: Step, idx: np.ndarray) -> None:
    n = len(idx)
    arrive(s, idx, np.ones(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool))


@semantics("tcgen05_commit")
def tcgen05_commit(s: Step) -> None:
    """``tcgen05.commit...mbarrier::arrive::one``: each executing thread
    arrives once on ``[mbar]`` when its prior asynchronous tcgen05 operations
    complete — at once on the default schedule (they already have), under a
    random one queued behind them (module docstring). With
    ``.multicast::cluster`` it arrives on the mbarrier at the same offset in
    each CTA whose bit is set in ``ctaMask`` (bit r: cluster rank r). The
    operands are read at issue."""
    _cta_group(s)
    space, addr = s.address(0)
    k = present(s, "ctaMask")
    if k is None or not s.mod("multicast"):
        idx = barrier_index(s, 0) if space != "shared" else barrier_index(s, 0, addr=addr)
        later(s, functools.partial(_arrive_once, s, idx), "tcgen05")
        return
    if space != "shared":
        raise SimError(f"{s.ins.name}: .multicast::cluster needs a .shared::cluster mbarrier address")
    mask = s.src(k, _U16).astype(np.int64)
    size = int(np.prod(s.m.cluster))
    if (mask >> size).any():
        raise SimError(f"{s.ins.name}: ctaMask {int(mask.max()):#06x} names CTAs outside the cluster of {size}")
    offset = np.asarray(addr, dtype=np.uint64) & np.uint64(SHARED_OFFSET)
    arrivals = []
    for rank in range(size):
        pos = np.flatnonzero((mask >> rank) & 1)
        if len(pos):
            sub = Step(s.m, s.ins, s.r, s.threads[pos])
            at = np.uint64(rank << RANK_SHIFT) | offset[pos]
            arrivals.append((sub, barrier_index(sub, 0, addr=at)))

    def arrive_all() -> None:
        for sub, idx in arrivals:
            _arrive_once(sub, idx)
    later(s, arrive_all, "tcgen05")


@semantics("tcgen05_wait")
def tcgen05_wait(s: Step) -> None:
    """``tcgen05.wait::ld`` / ``::st``: nothing to wait for (module
    docstring); the warp must execute it whole (``.sync.aligned``)."""
    groups(s)


@semantics("tcgen05_fence")
def tcgen05_fence(s: Step) -> None:
    """``tcgen05.fence::before_thread_sync`` / ``::after_thread_sync``: no
    effect, as every tcgen05 operation has completed in program order
    (module docstring)."""

"""Barriers of the SIMT machine: ``bar.sync``/``bar.red``/``bar.arrive`` per
CTA and ``barrier.cluster`` per cluster.

A thread that arrives at a barrier waits (state ``WAITING``) until every
live thread of its CTA (or the barrier's thread count) has arrived; then
all of them are released at once. Threads that have exited no longer count
towards a barrier without a thread count. These functions work on the
machine's per-thread state arrays; :func:`release` returns the threads it
releases, and the machine schedules them again.

Thread states: ``RUNNING``, ``WAITING`` (at a barrier), ``EXITED``,
``PARKED`` (on an mbarrier whose phase it waits for) and ``SPINNING`` (in
a loop proven to change nothing; :mod:`.hangs`).

A warp reconverges at an ``.aligned`` barrier (:func:`reconverge`): lanes
that reach it while other live lanes of their warp are still behind it (at
a smaller PC: in a branch, parked on an mbarrier, held back by a random
schedule) wait for them, as a warp does on hardware, where the compiler
reconverges a divergent warp before the barrier that post-dominates the
branch. Only lanes that went past it or elsewhere make the barrier
divergent (:func:`whole_warps` faults).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...types import TYPES
from ..errors import SimFault
from .step import Step

if TYPE_CHECKING:
    from ..core.view import MachineView

__all__ = ["RUNNING", "WAITING", "EXITED", "PARKED", "SPINNING", "CLUSTER_BARRIER", "WARP_SYNC", "RECONVERGE",
           "everyone", "arrive", "reconverge", "warp_sync", "whole_warps", "lanes_among", "live_lanes", "release"]

RUNNING, WAITING, EXITED, PARKED, SPINNING = 0, 1, 2, 3, 4
CLUSTER_BARRIER = 99          # the barrier id of a thread in barrier.cluster.wait
WARP_SYNC = 98                # ... of a thread in bar.warp.sync waiting for its mask's lanes
RECONVERGE = 97               # ... of a lane at an .aligned barrier waiting for its warp's lanes behind it


def everyone(m: "MachineView", taken: np.ndarray) -> bool:
    """Whether ``taken`` are all the live threads (so none waits at a
    barrier, parks or spins) and no ``bar.arrive`` is pending."""
    if m.arrived.any():
        return False
    return len(taken) == m.nthreads or len(taken) == int(np.count_nonzero(m.state != EXITED))


def arrive(m: "MachineView", s: Step, pc: int) -> None:
    """bar.sync / bar.red wait at barrier ``a``; bar.arrive only counts
    (PTX ISA, bar). bar.red's d is the reduction of its predicate over the
    threads of the barrier, written when the barrier completes (``_reduce``)."""
    sim = s.r.inst.sim
    aligned = s.ins.opcode == "bar" or "aligned" in s.ins.modifiers
    if aligned:
        go = reconverge(m, s.threads, pc)
        if len(go) == 0:
            return
        if len(go) != s.n:
            s = Step(m, s.ins, s.r, go)
    red = sim == "bar_red"
    ops = s.ins.operands[1:-1] if red else s.ins.operands   # bar.red d, a{, b}, c
    ident = s.value(ops[0], TYPES["u32"]).astype(np.int64)
    count = s.value(ops[1], TYPES["u32"]).astype(np.int64) if len(ops) > 1 else np.zeros(s.n, np.int64)
    _check_operands(m, s, ident, count, len(ops) > 1)
    obs = m.observers
    if aligned:
        if m.check:
            obs.aligned_barrier(s.threads)      # the sanitizer's finding (check="all" goes on)
        else:
            whole_warps(m, s)
    if sim == "bar_arrive":
        np.add.at(m.arrived, (s.threads // m.ntid) * 16 + ident, 1)
        obs.barrier_arrive(s.threads, (s.threads // m.ntid) * 16 + ident)
        return
    m.state[s.threads] = WAITING
    m.barrier[s.threads] = ident
    m.barrier_count[s.threads] = count
    m.barrier_pc[s.threads] = pc if red else -1
    if red:
        m.barrier_pred[s.threads] = s.pred(len(s.ins.operands) - 1)


def _check_operands(m: "MachineView", s: Step, ident: np.ndarray, count: np.ndarray, counted: bool) -> None:
    """Fault on a barrier id outside 0..15 or a thread count that is not
    whole warps (PTX ISA, bar: "When specifying a thread count, the value
    must be a multiple of the warp size"; bar.arrive needs a non-zero one).
    Immediates are checked before running; these are register values."""
    bad = ident > 15
    if bad.any():
        k = int(np.argmax(bad))
        raise SimFault(f"{s.ins.name}: barrier {int(ident[k])} does not exist (a CTA has barriers 0..15; "
                       f"{_who(m, int(s.threads[k]))})")
    if counted:
        bad = (count % 32 != 0) | ((count == 0) & (s.r.inst.sim == "bar_arrive"))
        if bad.any():
            k = int(np.argmax(bad))
            why = "is not a multiple of the warp size (32)" if count[k] % 32 else "must not be 0 for an arrive"
            raise SimFault(f"{s.ins.name}: thread count {int(count[k])} {why}: barriers count whole warps "
                           f"({_who(m, int(s.threads[k]))})")


def reconverge(m: "MachineView", threads: np.ndarray, pc: int) -> np.ndarray:
    """Lanes ``threads`` reach the ``.aligned`` barrier at ``pc``: those whose
    warp has live lanes still behind it (a smaller or equal next PC, or
    already waiting here to reconverge) and none past it wait (``WAITING``,
    ``RECONVERGE``) until every live lane of the warp is here; returns the
    lanes that go on. A warp with a lane past the barrier, or waiting to
    reconverge at another one, goes on as it is, for :func:`whole_warps` (or
    the sanitizer) to report. Cheap when every warp is whole."""
    lane0 = threads - threads % m.ntid % 32
    first, counts = np.unique(lane0, return_counts=True)
    partial = first[counts < 32]
    if len(partial) == 0:
        return threads
    lanes = partial[:, None] + np.arange(32)
    real = lanes < (partial // m.ntid * m.ntid + m.ntid)[:, None]
    lanes = np.where(real, lanes, partial[:, None])
    away = real & (m.state[lanes] != EXITED) & ~np.isin(lanes, threads)
    if not away.any():
        return threads
    m.sync_pcs()
    nxt = m.pc[lanes]                       # the next instruction of each lane
    waits = (m.state[lanes] == WAITING) & (m.barrier[lanes] == RECONVERGE)
    here = away & waits & (nxt == pc + 1)
    behind = away & ~waits & (nxt <= pc)
    hold = (here | behind).any(axis=1) & ~(away & ~here & ~behind).any(axis=1)
    if not hold.any():
        return threads
    held = np.isin(lane0, partial[hold])
    wait = threads[held]
    m.state[wait] = WAITING
    m.barrier[wait] = RECONVERGE
    m.pc[wait] = pc + 1
    return threads[~held]


def whole_warps(m: "MachineView", s: Step) -> None:
    """Fault when part of a warp executes an ``.aligned`` barrier (``bar``
    is ``barrier.aligned``) while other non-exited lanes of that warp do
    not (after :func:`reconverge` held back the lanes whose warp-mates are
    only behind): PTX ISA, bar: with ``.aligned`` "all threads in CTA will execute
    the same barrier instruction", and barriers are executed per warp.
    Cheap when every warp is whole (one ``np.unique``); a checked launch
    (``check``) reports it as the sanitizer's finding instead."""
    threads = s.threads
    lane0 = threads - threads % m.ntid % 32               # each thread's warp's lane 0 (warps are CTA-local)
    first, counts = np.unique(lane0, return_counts=True)
    partial = first[counts < 32]
    if len(partial) == 0:
        return
    lanes = partial[:, None] + np.arange(32)
    real = lanes < (partial // m.ntid * m.ntid + m.ntid)[:, None]
    lanes = np.where(real, lanes, partial[:, None])
    away = real & (m.state[lanes] != EXITED) & ~np.isin(lanes, threads)
    if away.any():
        w = int(np.argmax(away.any(axis=1)))
        t = int(threads[np.argmax(lane0 == partial[w])])
        gone = int(lanes[w][np.argmax(away[w])]) % m.ntid
        raise SimFault(f"{s.ins.name}: {_who(m, t)} reaches this .aligned barrier without thread {gone} of its "
                       "warp, which has not exited (every thread of a warp must execute an aligned barrier "
                       "together; bar.sync is barrier.sync.aligned)")


def _who(m: "MachineView", thread: int) -> str:
    cta, tid = divmod(thread, m.ntid)
    return f"CTA {cta}, thread {tid}"


def warp_sync(m: "MachineView", s: Step, pc: int) -> np.ndarray:
    """``bar.warp.sync membermask``: each thread waits until every live lane
    its mask names has executed a ``bar.warp.sync`` (any one: on sm_70+ the
    lanes need not be converged). Returns the threads that go on at once
    (their mask's lanes are all here); the rest wait (``WARP_SYNC``)."""
    mask = s.src(0, TYPES["u32"]).astype(np.int64)
    th = s.threads
    ready = (mask & ~lanes_among(m, th) & live_lanes(m, th)) == 0
    wait = th[~ready]
    if len(wait):
        m.state[wait] = WAITING
        m.barrier[wait] = WARP_SYNC
        m.warp_mask[wait] = mask[~ready]
    return th[ready]


def lanes_among(m: "MachineView", threads: np.ndarray) -> np.ndarray:
    """Per thread, the bit mask of the lanes of its warp that are among
    ``threads`` (warps are CTA-local: 32 lanes from each CTA's thread 0)."""
    threads = np.asarray(threads, dtype=np.int64)
    lane = threads % m.ntid % 32
    warp = threads // m.ntid * 64 + threads % m.ntid // 32
    # distinct lanes of a warp: their bits' sum is their OR (exact in float64 below 2**53)
    bits = np.bincount(warp, weights=np.left_shift(1, lane).astype(np.float64))
    return bits.astype(np.int64)[warp]


_LANE_BITS = 1 << np.arange(32, dtype=np.int64)


def live_lanes(m: "MachineView", threads: np.ndarray) -> np.ndarray:
    """Per thread, the bit mask of the live (not exited) lanes of its warp.
    Worked out once per warp among ``threads`` (usually whole warps in
    ascending order: the distinct warps are the heads of runs)."""
    threads = np.asarray(threads, dtype=np.int64)
    if len(threads) == 0:
        return threads.copy()
    base = threads - threads % m.ntid % 32                  # each thread's warp's lane 0
    if (base[1:] >= base[:-1]).all():
        head = np.empty(len(base), dtype=bool)
        head[0] = True
        np.not_equal(base[1:], base[:-1], out=head[1:])
        warps, which = base[head], np.cumsum(head) - 1
    else:
        warps, which = np.unique(base, return_inverse=True)
        which = which.reshape(-1)
    lanes = warps[:, None] + np.arange(32)
    ok = lanes < (warps // m.ntid * m.ntid + m.ntid)[:, None]
    live = ok & (m.state[np.minimum(lanes, m.nthreads - 1)] != EXITED)
    return (live @ _LANE_BITS)[which]


def _release_reconverged(m: "MachineView", waiting: np.ndarray, released: list[np.ndarray]) -> np.ndarray:
    """Lanes waiting to reconverge (:func:`reconverge`) whose warp's live
    lanes are all waiting with them run the barrier again, together
    (appended to ``released``, their PC back on it); returns the rest."""
    at = waiting[m.barrier[waiting] == RECONVERGE]
    if len(at) == 0:
        return waiting
    done = lanes_among(m, at) == live_lanes(m, at)
    if done.any():
        go = at[done]
        m.state[go] = RUNNING
        m.barrier[go] = -1
        m.pc[go] -= 1
        released.append(go)
    return waiting[(m.barrier[waiting] != RECONVERGE) & (m.state[waiting] == WAITING)]


def _release_warp_syncs(m: "MachineView", waiting: np.ndarray, released: list[np.ndarray]) -> np.ndarray:
    """Release the threads in bar.warp.sync whose mask's live lanes have all
    arrived (appended to ``released``); returns the rest."""
    at = waiting[m.barrier[waiting] == WARP_SYNC]
    if len(at) == 0:
        return waiting
    arrived = lanes_among(m, at)
    done = (m.warp_mask[at] & live_lanes(m, at) & ~arrived) == 0
    if done.any():
        go = at[done]
        m.state[go] = RUNNING
        m.barrier[go] = -1
        released.append(go)
        if m.observers.listens("warp_sync"):
            gone = m.warp_mask[go] & ~live_lanes(m, go) & ~arrived[done]
            m.observers.warp_sync(go, gone, m.pc[go] - 1)
    return waiting[(m.barrier[waiting] != WARP_SYNC) & (m.state[waiting] == WAITING)]


def _release_cluster(m: "MachineView", waiting: np.ndarray, released: list[np.ndarray]) -> np.ndarray:
    """``barrier.cluster``: complete the phase of every cluster whose live
    threads have all arrived, and release the threads waiting on a phase
    that has completed (appended to ``released``); returns the rest.

    A thread waits on the phase it arrived in (``arrived_phase``), not on
    whatever phase is open when it reaches its wait: a warp that arrives,
    is held back, and waits after its cluster's phase completed goes on at
    once (PTX ISA, barrier.cluster: the wait completes when all threads of
    the cluster have arrived)."""
    first = m.cluster_first(np.arange(m.nctas))
    alive = np.bincount(first[np.nonzero(m.state != EXITED)[0] // m.ntid], minlength=m.nctas)
    heads = np.unique(first)
    full = heads[(m.cluster_arrivals[heads] > 0) & (m.cluster_arrivals[heads] >= alive[heads])]
    if len(full):
        m.cluster_arrivals[full] -= alive[full]
        m.cluster_phase[full] += 1
    at = waiting[m.barrier[waiting] == CLUSTER_BARRIER]
    if len(at):
        done = at[m.arrived_phase[at] < m.cluster_phase[first[at // m.ntid]]]
        if len(done):
            m.state[done] = RUNNING
            m.barrier[done] = -1
            m.arrived_phase[done] = -1          # the arrival is consumed
            released.append(done)
            m.observers.cluster_complete(done)
    # the rest: those waiting at CTA barriers (not the ones released just now)
    return waiting[(m.barrier[waiting] != CLUSTER_BARRIER) & (m.state[waiting] == WAITING)]


def release(m: "MachineView") -> np.ndarray:
    """Release every (CTA, barrier) whose arrivals reached its count (all
    the CTA's live threads when the barrier names none), all at once;
    returns the released threads (ascending)."""
    waiting = np.nonzero(m.state == WAITING)[0]
    released: list[np.ndarray] = []
    if len(waiting):
        waiting = _release_reconverged(m, waiting, released)
    if len(waiting):
        waiting = _release_warp_syncs(m, waiting, released)
    if len(waiting):
        waiting = _release_cluster(m, waiting, released)
    if len(waiting):
        _release_cta(m, waiting, released)
    if not released:
        return waiting[:0]
    return released[0] if len(released) == 1 else np.sort(np.concatenate(released))


def _release_cta(m: "MachineView", waiting: np.ndarray, released: list[np.ndarray]) -> None:
    """bar.sync / bar.red: release the (CTA, barrier) pairs that are complete."""
    ctas = waiting // m.ntid
    key = ctas * 16 + m.barrier[waiting]          # PTX has barriers 0..15
    arrived = np.bincount(key, minlength=m.nctas * 16) + m.arrived
    alive = np.bincount(np.nonzero(m.state != EXITED)[0] // m.ntid, minlength=m.nctas)
    need = np.repeat(alive, 16)
    counted = m.barrier_count[waiting] > 0
    if counted.any():
        need[key[counted]] = 0
        np.maximum.at(need, key[counted], m.barrier_count[waiting][counted])
    done = arrived[key] >= need[key]
    if done.any():
        go = waiting[done]
        released.append(go)
        m.state[go] = RUNNING
        m.barrier[go] = -1
        m.arrived[key[done]] = 0
        _reduce(m, go, key[done])
        m.observers.barrier_complete(go, key[done])


def _reduce(m: "MachineView", go: np.ndarray, key: np.ndarray) -> None:
    """Write the bar.red results of the released threads ``go`` (barrier
    ``key`` = CTA * 16 + id): popc counts the true predicates of the
    barrier's threads, and/or combine them (PTX ISA, bar.red)."""
    red = m.barrier_pc[go] >= 0
    if not red.any():
        return
    go, key = go[red], key[red]
    true = np.bincount(key, weights=m.barrier_pred[go], minlength=m.nctas * 16).astype(np.int64)
    total = np.bincount(key, minlength=m.nctas * 16)
    pcs = m.barrier_pc[go]
    for pc in np.unique(pcs):
        sel = pcs == pc
        s = Step(m, m.program.code[pc], m.program.resolved[pc], go[sel])
        t, n = true[key[sel]], total[key[sel]]
        if s.mod("op") == "popc":
            s.dst(0, t.astype(np.uint32), TYPES["u32"])
        else:
            s.dst(0, t == n if s.mod("op") == "and" else t > 0, TYPES["pred"])
    m.barrier_pc[go] = -1

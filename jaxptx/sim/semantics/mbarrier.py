"""Emulator semantics: mbarriers and ``cp.async.mbarrier.arrive`` (``mapa``
and ``getctarank`` are in :mod:`.cluster`; the bulk and tensor copies in
:mod:`.bulk_copy` and :mod:`.tma`).

The mbarrier object
-------------------

PTX ISA, "mbarrier": an opaque 64-bit object in shared memory (8 bytes,
8-aligned) holding the current phase, the pending arrival count of the
current phase, the expected arrival count of the next phases and the
tx-count (pending transaction bytes). Expected and pending counts lie in
0..2^20-1, the tx-count in -(2^20-1)..2^20-1. The emulator stores it as::

    bits  0-19   pending arrival count
    bits 20-39   expected arrival count
    bits 40-60   tx-count (21-bit two's complement)
    bit  61      0
    bit  62      1 while the object is initialised (mbarrier.init sets it,
                 mbarrier.inval clears the whole word); any other operation
                 on a word without it is an error
    bit  63      parity of the current phase

The *state* a ``mbarrier.arrive`` returns has the same layout: the object as
it was immediately before the thread's arrive-on (after its own expect-tx),
so bit 63 names the phase the arrival counted towards and bits 0-19 are the
pending count ``mbarrier.pending_count`` reports (PTX ISA,
mbarrier.pending_count: "the pending count of the mbarrier object prior to
the arrive-on operation").

A phase completes when the pending count and the tx-count are both zero
(PTX ISA, "Phase Completion of the mbarrier object"); then the phase flips
and the pending count is reloaded from the expected count. Every operation
applies all the executing threads' updates at once, per barrier, in thread
order: arrivals are counted with cumulative sums, so one step may complete a
phase (and even carry later arrivals into the next one); the tokens are the
per-thread states before each arrival. Waits never block the step (kernels
loop on ``try_wait``), but a thread whose wait finds its phase incomplete is
parked (``Machine.park``) on the object until its phase bit or validity
changes: every write of an object reports its new bits (``Machine.changed``),
which wakes the threads parked on it. So a consumer spinning on a full
barrier costs nothing until the producer's copy completes it, and a spin on
a phase nothing can complete is reported as a hang (:mod:`..core.hangs`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...types import TYPES
from ..errors import SimError
from .memory import check_cta_window, operand_index
from ..core.deferred import deferred_of
from ..core.forensics import Waiting
from ..core.step import Step
from .registry import register, semantics

__all__ = ["barrier_index", "complete_tx", "present"]

LIMIT = (1 << 20) - 1
_M20 = np.uint64(LIMIT)
_M21 = np.uint64((1 << 21) - 1)
VALID = np.uint64(1 << 62)
_MARK = np.uint64(62)         # bits 62-63 (valid, phase): all a wait's result depends on
_U64 = TYPES["u64"]
_U32 = TYPES["u32"]


def present(s: Step, name: str) -> int | None:
    """Position of the table operand ``name``, or ``None`` when this
    instruction does not have it (an optional operand left out)."""
    k = operand_index(s, name)
    return k if k is not None and k < len(s.ins.operands) else None


# --- the object ----------------------------------------------------------------------------


def pack(phase: np.ndarray, pending: np.ndarray, expected: np.ndarray, tx: np.ndarray) -> np.ndarray:
    """mbarrier words (valid) from int64 fields."""
    u = np.uint64
    return (VALID | (np.asarray(phase).astype(u) << u(63))
            | (np.asarray(pending).astype(np.int64).astype(u) & _M20)
            | ((np.asarray(expected).astype(np.int64).astype(u) & _M20) << u(20))
            | ((np.asarray(tx).astype(np.int64).astype(u) & _M21) << u(40)))


def unpack(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(phase, pending, expected, tx)`` of mbarrier words, as int64."""
    u = np.uint64
    phase = (words >> u(63)).astype(np.int64)
    pending = (words & _M20).astype(np.int64)
    expected = ((words >> u(20)) & _M20).astype(np.int64)
    tx = ((words >> u(40)) & _M21).astype(np.int64)
    return phase, pending, expected, np.where(tx > LIMIT, tx - (1 << 21), tx)


def _words(s: Step) -> np.ndarray:
    return s.m.memory.shared.view(np.uint64)


def _where(s: Step, idx: int) -> str:
    size = s.m.memory.shared_size or 1
    cta, off = divmod(int(idx) * 8, size)
    return f"the mbarrier at shared offset {off:#x} of CTA {cta}"


def barrier_index(s: Step, k: int, addr: np.ndarray | None = None, check: bool = True) -> np.ndarray:
    """Index (in shared memory viewed as uint64) of the mbarrier each thread
    names with operand ``k`` (or the shared-space addresses ``addr``).

    The address is in the instruction's space: ``.shared::cta`` (the
    executing CTA's), or ``.shared::cluster`` (an address carrying another
    CTA's rank reaches it), or generic. ``check``: the barrier must be
    initialised."""
    space = "shared"
    if addr is None:
        space, addr = s.address(k)
        space = "shared" if space == "shared" else "generic"
        if space == "shared" and "shared::cluster" not in s.ins.modifiers:
            check_cta_window(s, addr, "mbarrier address")
    idx = np.empty(len(addr), dtype=np.int64)
    for view, ix, pos in s.m.memory.locations(space, addr, s.threads, 8, s.ins.name):
        if view.base is not s.m.memory.shared:
            raise SimError(f"{s.ins.name}: the mbarrier address {int(addr[pos[0]]):#x} is not in shared memory")
        idx[pos] = ix.astype(np.int64)
    if check:
        bad = (_words(s)[idx] & VALID) == 0
        if bad.any():
            raise SimError(f"{s.ins.name}: {_where(s, idx[bad][0])} is not initialised (mbarrier.init) "
                           "or was invalidated")
    return idx


def _store(s: Step, uniq: np.ndarray, phase, pending, expected, tx) -> None:
    bad = (np.abs(tx) > LIMIT) | (expected < 0) | (expected > LIMIT)
    if bad.any():
        k = int(np.nonzero(bad)[0][0])
        raise SimError(f"{s.ins.name}: {_where(s, uniq[k])}: tx-count {int(tx[k])} or expected count "
                       f"{int(expected[k])} out of range")
    _write(s, uniq, pack(phase, pending, expected, tx))


def _write(s: Step, idx: np.ndarray, words: np.ndarray) -> None:
    """Store mbarrier words and wake the threads parked on those whose
    phase or validity changed."""
    if s.m.observers.listens("mbarrier_phases"):
        flipped = ((_words(s)[idx] ^ np.broadcast_to(words, np.shape(idx))) >> np.uint64(63)) & np.uint64(1)
        s.m.observers.mbarrier_phases(idx, flipped)
    _words(s)[idx] = words
    s.m.changed(np.asarray(idx), np.broadcast_to(words, np.shape(idx)) >> _MARK)


def _settle(phase, pending, expected, tx):
    """Phase completion: pending and tx-count both zero flips the phase and
    reloads the pending count (PTX ISA, "Phase Completion")."""
    done = (pending == 0) & (tx == 0)
    return np.where(done, phase ^ 1, phase), np.where(done, expected, pending)


def complete_tx(s: Step, idx: np.ndarray, amount: np.ndarray, sign: int = -1) -> None:
    """complete-tx (``sign`` -1) or expect-tx (+1) of ``amount`` bytes per
    thread on barriers ``idx`` (all amounts reaching one barrier in this
    step are applied together), then phase completion."""
    uniq, inv = np.unique(idx, return_inverse=True)
    total = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(total, inv, np.asarray(amount, dtype=np.int64))
    phase, pending, expected, tx = unpack(_words(s)[uniq])
    tx = tx + sign * total
    phase, pending = _settle(phase, pending, expected, tx)
    _store(s, uniq, phase, pending, expected, tx)


def arrive(s: Step, idx: np.ndarray, count: np.ndarray, expect: np.ndarray, drop: np.ndarray,
           no_complete: bool = False) -> np.ndarray:
    """Arrive-on by each executing thread: first its expect-tx of ``expect``
    bytes, then ``count`` arrivals; ``drop`` also lowers the expected count
    (PTX ISA, mbarrier.arrive / arrive_drop). Returns each thread's state
    token (the object just before its arrival)."""
    s.m.observers.mbarrier_arrive(s.threads, idx)
    order = np.argsort(idx, kind="stable")
    ids = idx[order]
    c = np.asarray(count, dtype=np.int64)[order]
    x = np.asarray(expect, dtype=np.int64)[order]
    d = np.where(np.asarray(drop)[order], c, 0)
    uniq, start, inv = np.unique(ids, return_index=True, return_inverse=True)
    phase, pending, expected, tx = unpack(_words(s)[uniq])
    tokens = np.empty(len(ids), dtype=np.uint64)
    total = [np.add.reduceat(v, start) for v in (c, x, d)]
    after = pending - total[0]
    fast = after >= 0
    # The usual step: no barrier gets more arrivals than it has pending.
    sel = fast[inv]
    if sel.any():
        ce, xe, de = (_exclusive(v, start, inv) for v in (c, x, d))
        tokens[sel] = pack(phase[inv], pending[inv] - ce, expected[inv] - de, tx[inv] + xe + x)[sel]
    new = [phase.copy(), after, expected - total[2], tx + total[1]]
    done = fast & (new[1] == 0) & (new[3] == 0)
    if no_complete and done.any():
        raise SimError(f"{s.ins.name}: the arrival would complete the phase of {_where(s, uniq[done][0])} "
                       "(undefined for .noComplete)")
    new[0] = np.where(done, phase ^ 1, phase)
    new[1] = np.where(done, new[2], new[1])
    for b in np.nonzero(~fast)[0]:          # more arrivals than pending: phase by phase
        lo = start[b]
        hi = start[b + 1] if b + 1 < len(start) else len(ids)
        state = [int(phase[b]), int(pending[b]), int(expected[b]), int(tx[b])]
        _arrive_slowly(s, uniq[b], c[lo:hi], x[lo:hi], d[lo:hi], state, tokens[lo:hi], no_complete)
        for k in range(4):
            new[k][b] = state[k]
    _store(s, uniq, *new)
    out = np.empty_like(tokens)
    out[order] = tokens
    return out


def _exclusive(v: np.ndarray, start: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sums of ``v`` within each run of equal keys."""
    cs = np.cumsum(v)
    return cs - v - (cs[start] - v[start])[inv]


def _arrive_slowly(s: Step, where: int, c, x, d, state: list[int], tokens: np.ndarray,
                   no_complete: bool) -> None:
    """One barrier's arrivals when they complete a phase before the last
    one (the rest count towards the next phase); ``state`` and ``tokens``
    are updated in place."""
    phase, pending, expected, tx = state
    j = 0
    while j < len(c):
        cc, cx, cd = np.cumsum(c[j:]), np.cumsum(x[j:]), np.cumsum(d[j:])
        tokens[j:] = pack(np.full(len(cc), phase), pending - (cc - c[j:]), expected - (cd - d[j:]), tx + cx)
        hit = np.nonzero(cc >= pending)[0]
        if len(hit) == 0:
            pending, expected, tx = pending - int(cc[-1]), expected - int(cd[-1]), tx + int(cx[-1])
            break
        k = int(hit[0])
        if cc[k] > pending or tx + cx[k] != 0 or no_complete:
            raise SimError(f"{s.ins.name}: more arrivals on {_where(s, where)} than its pending count "
                           f"{pending} in this phase")
        phase, expected = phase ^ 1, expected - int(cd[k])
        pending, tx = expected, 0
        j += k + 1
    state[:] = [phase, pending, expected, tx]


# --- instructions ----------------------------------------------------------------------------


@semantics('mbarrier_init')
def mbarrier_init(s: Step) -> None:
    """``mbarrier.init [addr], count``: phase 0, pending = expected = count,
    tx-count 0 (PTX ISA, mbarrier.init; count in 1..2^20-1)."""
    idx = barrier_index(s, 0, check=False)
    count = s.src(1, _U32).astype(np.int64)
    if ((count < 1) | (count > LIMIT)).any():
        raise SimError(f"{s.ins.name}: count {int(count[(count < 1) | (count > LIMIT)][0])} is not in 1..2^20-1")
    s.m.observers.mbarrier_init(idx)
    _write(s, idx, pack(np.zeros(s.n, np.int64), count, count, np.zeros(s.n, np.int64)))


@semantics('mbarrier_inval')
def mbarrier_inval(s: Step) -> None:
    """``mbarrier.inval``: the object is no longer an mbarrier (the emulator
    clears the word, so later mbarrier operations on it are errors)."""
    idx = barrier_index(s, 0)
    _write(s, idx, np.zeros(len(idx), np.uint64))


def _arrive_form(drop: bool, no_complete: bool) -> Callable[[Step], None]:
    def run(s: Step) -> None:
        idx = barrier_index(s, 1)
        k = present(s, "count")
        count = s.src(k, _U32).astype(np.int64) if k is not None else np.ones(s.n, np.int64)
        if ((count < 1) | (count > LIMIT)).any():
            raise SimError(f"{s.ins.name}: count must be in 1..2^20-1")
        k = present(s, "tx_count")
        expect = s.src(k, _U32).astype(np.int64) if k is not None else np.zeros(s.n, np.int64)
        if (expect > LIMIT).any():
            raise SimError(f"{s.ins.name}: tx_count {int(expect.max())} exceeds 2^20-1")
        tokens = arrive(s, idx, count, expect, np.full(s.n, drop), no_complete)
        s.dst(0, tokens, TYPES["b64"])
    name = "arrive_drop" if drop else "arrive"
    run.__name__ = f"mbarrier_{name}"
    run.__doc__ = (f"``mbarrier.{name}{{.expect_tx,.noComplete}} state, [addr]{{, count | tx_count}}``: "
                   "expect-tx of tx_count bytes, then an arrive-on of count (default 1)"
                   + (" that also lowers the expected count of later phases" if drop else "")
                   + "; state is the object before the arrival (PTX ISA, mbarrier.arrive"
                   + ("_drop" if drop else "") + ("; .noComplete must not complete the phase)"
                                                   if no_complete else ")"))
    return run


def _tx(sign: int) -> Callable[[Step], None]:
    def run(s: Step) -> None:
        amount = s.src(1, _U32).astype(np.int64)
        if (amount > LIMIT).any():
            raise SimError(f"{s.ins.name}: tx_count {int(amount.max())} exceeds 2^20-1")
        complete_tx(s, barrier_index(s, 0), amount, sign)
    run.__name__ = "mbarrier_expect_tx" if sign > 0 else "mbarrier_complete_tx"
    run.__doc__ = (f"``{run.__name__.replace('_', '.', 1)} [addr], tx_count``: "
                   + ("raise" if sign > 0 else "lower") + " the tx-count by tx_count; the phase completes "
                   "if that leaves pending arrivals and tx-count at zero (PTX ISA, expect-tx / complete-tx "
                   "operations)")
    return run


def _waited(s: Step, idx: np.ndarray, words: np.ndarray, complete: np.ndarray) -> None:
    """Write waitComplete and park the threads that found their phase
    incomplete until the phase (or validity) of their mbarrier changes."""
    s.dst(0, complete, TYPES["pred"])
    if s.m.observers.listens("mbarrier_acquire") and complete.any():
        s.m.observers.mbarrier_acquire(s.threads[complete], idx[complete])
    if not complete.all():
        fail = ~complete
        s.m.park(s.threads[fail], idx[fail], words[fail] >> _MARK, lambda word: _describe(s.m.memory, word))


def _describe(memory, word: int) -> Waiting:
    """A parked-on mbarrier for a hang report: where, phase, counts."""
    size = memory.shared_size or 1
    cta, off = divmod(word * 8, size)
    w = memory.shared.view(np.uint64)[word:word + 1]
    if not (w & VALID).any():
        return Waiting(f"the mbarrier at shared offset {off:#x} of CTA {cta}, which is not initialised",
                       {"cta": cta, "offset": off, "initialised": False})
    phase, pending, expected, tx = (int(v[0]) for v in unpack(w))
    return Waiting(f"the mbarrier at shared offset {off:#x} of CTA {cta} to complete its phase {phase} "
                   f"(parity {phase & 1}): {pending} of {expected} arrivals pending, tx-count {tx}",
                   {"cta": cta, "offset": off, "initialised": True, "phase": phase, "pending": pending,
                    "expected": expected, "tx": tx})


@semantics('mbarrier_test_wait', 'mbarrier_try_wait')
def mbarrier_test_wait(s: Step) -> None:
    """``mbarrier.test_wait/try_wait waitComplete, [addr], state``: true when
    the phase the state token names has completed, i.e. the object's phase
    differs from the token's (PTX ISA: valid only for the current or the
    immediately preceding phase). A thread that finds it incomplete is parked."""
    idx = barrier_index(s, 1)
    words = _words(s)[idx]
    token = s.src(2, _U64)
    _waited(s, idx, words, (words >> np.uint64(63)) != (token >> np.uint64(63)))


@semantics('mbarrier_test_wait_parity', 'mbarrier_try_wait_parity')
def mbarrier_test_wait_parity(s: Step) -> None:
    """``mbarrier.test_wait/try_wait.parity waitComplete, [addr], phaseParity``:
    true when the phase of parity ``phaseParity`` has completed, i.e. the
    current phase has the other parity (PTX ISA: the parity names the current
    or the immediately preceding phase). A thread that finds it incomplete is parked."""
    idx = barrier_index(s, 1)
    words = _words(s)[idx]
    parity = s.src(2, _U32).astype(np.uint64) & np.uint64(1)
    _waited(s, idx, words, (words >> np.uint64(63)) != parity)


@semantics('mbarrier_pending_count')
def mbarrier_pending_count(s: Step) -> None:
    """``mbarrier.pending_count count, state``: the pending count before the
    arrival that produced ``state`` (bits 0-19 of the emulator's token)."""
    s.dst(0, (s.src(1, _U64) & _M20).astype(np.uint32), _U32)


@semantics('cp_async_mbarrier_arrive')
def cp_async_mbarrier_arrive(s: Step) -> None:
    """``cp.async.mbarrier.arrive{.noinc} [addr]``: an arrive-on when the
    thread's earlier cp.async copies complete — at once here, as they
    complete at issue. Without ``.noinc`` the pending count is first raised
    by 1, so the net change is zero; with ``.noinc`` it is one arrival (PTX
    ISA, cp.async.mbarrier.arrive)."""
    d = deferred_of(s)
    if d is not None:
        d.cp_async_arrive(s.threads)        # the arrive-on waits for the thread's copies
    idx = barrier_index(s, 0)
    s.m.observers.cp_async_to_mbarrier(s.threads, idx)
    if not s.mod("noinc"):
        s.m.observers.mbarrier_arrive(s.threads, idx)
    if s.mod("noinc"):
        arrive(s, idx, np.ones(s.n, np.int64), np.zeros(s.n, np.int64), np.zeros(s.n, bool))


register("mbarrier_arrive", _arrive_form(False, False))
register("mbarrier_arrive_expect_tx", _arrive_form(False, False))
register("mbarrier_arrive_noComplete", _arrive_form(False, True))
register("mbarrier_arrive_drop", _arrive_form(True, False))
register("mbarrier_arrive_drop_expect_tx", _arrive_form(True, False))
register("mbarrier_arrive_drop_noComplete", _arrive_form(True, True))
register("mbarrier_expect_tx", _tx(+1))
register("mbarrier_complete_tx", _tx(-1))

"""Hangs: when no thread can make progress, the launch stops and says why.

The rule
--------
The machine is deterministic: what it does next depends only on its state
(program counters, thread states, registers, memory, barrier and mbarrier
bookkeeping). A thread can wait in three ways, and each costs nothing
until what it waits on changes:

* **At a barrier** (``bar.sync``/``bar.red``, ``barrier.cluster.wait``):
  state ``WAITING``. Only other threads' arrivals (or exits, for a barrier
  without a thread count) release it.
* **On an mbarrier**: a thread whose ``mbarrier.test_wait``/``try_wait``
  finds its phase incomplete is ``PARKED`` on that mbarrier until the
  object's phase bit or validity changes, the only things that can change
  the wait's result (every arrive, expect-tx, complete-tx, init and inval
  wakes the threads parked on the object it changes). Async copies and
  tensor-core operations complete when they are issued, so any pending
  arrival or transaction must come from a thread that can still run.
* **In a loop that changes nothing** (``LOOP: bra LOOP;``, a volatile load
  spinning on a flag nobody writes): found by sampling. Every so often the
  machine notes every thread's PC and state; when they come back, it hashes
  the whole machine; when a hash comes back too, the threads that ran in
  between are in a cycle that changes nothing. They are ``SPINNING``: put
  aside, with a hash of the *shared* state (memory, barriers, and every
  thread that is not running) as the proof. They run again only when no
  other thread can run and the shared state differs from their proof.

When no thread is ready (every live thread waits, is parked or spins), the
machine first runs the parked threads once more (a wait loop may have
another way out, such as a retry limit). If they park again and nothing
changed since, and every spinning thread's proof still holds, no thread can
ever make progress: the launch stops with a :class:`SimError` that names,
per group, what the threads wait on (the barrier and its arrivals, or the
mbarrier with its phase, pending arrivals and tx-count, or the loop and the
addresses it reads), which threads (CTA and thread indices as ranges), and
their PTX lines (Python lines for traced kernels).

On a node of devices (:class:`jaxptx.sim.System`) the proofs also hash the
memory of every other device (``Memory.peer_globals``), and a machine with
no ready thread does not decide alone: the node runs the other devices'
machines, and only when none can run does it ask each to wake what the
changed memory may release (``Machine.unstall``); when none wakes, the
node's deadlock names every device's stuck threads.

A correct producer/consumer pipeline is never reported: its consumers,
parked on a full barrier, are woken by the producer's arrive or the copy's
complete-tx; its producer, parked on an empty barrier, by the consumers'
arrivals; a point where nothing is ready is reached only when nothing that
could run is left. A loop that changes memory and changes it back within
one turn counts as changing nothing. A loop whose condition is constant
for its type is stopped when a thread first takes its backward branch
(:mod:`.endless`). ``max_steps`` bounds everything else (a loop whose
state keeps changing, like a counter that never reaches its bound, or a
loop that reads ``%clock``: the emulator's clocks count steps); its error
names the threads still running and their lines. ``max_seconds`` bounds
a launch's wall time, and a long launch reports its progress
(:mod:`.progress`).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from .forensics import loop_reads
from .naming import instruction_at, ranges, source_lines, thread_ranges, where
from .barriers import CLUSTER_BARRIER, EXITED, PARKED, RECONVERGE, RUNNING, SPINNING, WAITING, WARP_SYNC
from ..errors import SimError
from .progress import setting

if TYPE_CHECKING:
    from ..core.view import MachineView

__all__ = ["MAX_STEPS_ENV", "CycleWatch", "Spinners", "default_max_steps", "hang_message", "running_message",
           "shared_state"]

MAX_STEPS_ENV = "JAXPTX_SIM_MAX_STEPS"
"""The environment variable that sets ``max_steps`` when a launch passes none."""
_DEFAULT_MAX_STEPS = 50_000_000
_PER_THREAD = ("pc", "barrier", "barrier_count", "barrier_pred", "barrier_pc", "park_word", "carry")
_SKIP = frozenset(_PER_THREAD) | {"state", "all_threads"}
_MAX_GROUPS = 8         # wait groups listed in a message


# --- words for messages ------------------------------------------------------------------------

def default_max_steps() -> int:
    """``JAXPTX_SIM_MAX_STEPS`` if set, else 50,000,000.

    Raises:
        SimError: the variable is set to something other than an int >= 1.
    """
    return setting(MAX_STEPS_ENV, _max_steps)


def _max_steps(raw: str | None) -> int:
    text = (raw or "").strip().replace("_", "")
    if not text:
        return _DEFAULT_MAX_STEPS
    if not text.isdigit() or int(text) < 1:
        raise SimError(f"{MAX_STEPS_ENV}: expected an int >= 1, got {raw!r}")
    return int(text)


# --- state hashes ------------------------------------------------------------------------------

def _update(h: Any, a: np.ndarray) -> None:
    a = np.ascontiguousarray(a)
    h.update(str((a.dtype.str, a.shape)).encode())
    h.update(a.view(np.uint8) if a.ndim else a.reshape(1).view(np.uint8))


def _update_any(h: Any, name: str, value: Any, depth: int = 0) -> None:
    """Hash machine state another module keeps on the machine (tensor
    memory, a carry flag...): arrays, and dicts / objects holding them."""
    if isinstance(value, np.ndarray):
        h.update(name.encode())
        _update(h, value)
    elif isinstance(value, dict) and depth < 3:
        for k in sorted(value, key=repr):
            _update_any(h, f"{name}[{k!r}]", value[k], depth + 1)
    elif hasattr(value, "__dict__") and depth < 3 and not callable(value):
        for k, v in sorted(vars(value).items()):
            if not k.startswith("_") or isinstance(v, np.ndarray):
                _update_any(h, f"{name}.{k}", v, depth + 1)
    elif isinstance(value, (int, float, str, bool, list, tuple, type(None))) and depth:
        h.update(f"{name}={value!r}".encode())


def _state_hash(m: "MachineView", keep: np.ndarray | None) -> bytes:
    """A hash of the machine's state. ``keep``: the threads whose private
    state (PC, registers, call frames) counts (``None``: every thread)."""
    m.sync_pcs()
    h = hashlib.blake2b(digest_size=16)
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    state = m.state if keep is None else np.where(m.state == SPINNING, RUNNING, m.state)
    _update(h, state)
    for name in _PER_THREAD:
        a = getattr(m, name, None)
        if isinstance(a, np.ndarray) and a.shape[:1] == (m.nthreads,):
            h.update(name.encode())
            _update(h, pick(a))
    for name in sorted(m.frames):
        h.update(name.encode())
        _update(h, pick(m.frames[name]))
    for name in sorted(m.regs.arrays):
        h.update(name.encode())
        _update(h, pick(m.regs.arrays[name]))
    mem = m.memory
    for name, a in (("shared", mem.shared), ("local", mem.local)):
        h.update(name.encode())
        _update(h, a)
    for k, a in enumerate(mem.globals):
        h.update(f"global{k}".encode())
        _update(h, a)
    # On a node, memory other devices' threads change (and this launch may
    # read through peer or multicast addresses) is part of every proof: a
    # waiter runs again when a peer writes.
    peers = getattr(mem, "peer_globals", None)
    if peers is not None:
        for k, a in enumerate(peers()):
            h.update(f"peer{k}".encode())
            _update(h, a)
    for name, value in sorted(vars(m).items()):
        if name not in _SKIP and isinstance(value, (np.ndarray, dict)) and name not in ("frames", "groups",
                                                                                          "parked"):
            _update_any(h, name, value)
        elif name == "_tensor_memory" or (hasattr(value, "__dict__") and name == "tmem"):
            _update_any(h, name, value)
    return h.digest()


def full_state(m: "MachineView") -> bytes:
    """A hash of everything that decides what the machine does next."""
    return _state_hash(m, None)


def shared_state(m: "MachineView") -> bytes:
    """A hash of the state a spinning thread's loop may read: memory,
    barriers, and the private state of every thread that is neither
    running nor spinning."""
    return _state_hash(m, np.flatnonzero((m.state != RUNNING) & (m.state != SPINNING)))


# --- spinning loops -----------------------------------------------------------------------------

class Spinners:
    """Threads proven to spin: ``(threads, proof, pcs)`` per loop, where
    ``proof`` is :func:`shared_state` when the loop was found and ``pcs``
    the loop's instructions."""

    def __init__(self) -> None:
        self.loops: list[tuple[np.ndarray, bytes, frozenset[int]]] = []

    def add(self, threads: np.ndarray, proof: bytes, pcs: frozenset[int]) -> None:
        """Record a loop."""
        self.loops.append((threads, proof, pcs))

    def stale(self, proof: bytes) -> np.ndarray:
        """Remove and return the threads of loops proven under another
        shared state than ``proof`` (they may see something new)."""
        keep = [x for x in self.loops if x[1] == proof]
        gone = [x[0] for x in self.loops if x[1] != proof]
        self.loops = keep
        return np.sort(np.concatenate(gone)) if gone else np.zeros(0, np.int64)

    def __bool__(self) -> bool:
        return bool(self.loops)


class CycleWatch:
    """Sampling cycle detection (see the module docstring). The machine
    calls :meth:`start` when ``steps`` reaches :attr:`next`, then
    :meth:`after` after each step while :attr:`active`."""

    FIRST = 4096            # steps before the first sample
    LONGEST = 1 << 17       # the longest interval between samples (each doubles)
    WINDOW = 512            # steps a sample waits for the PCs to come back
    HASHES = 3              # whole-state hashes a sample takes at most (3: a loop whose
                            # state alternates between two values is found too)

    def __init__(self, m: "MachineView", first: int | None = None) -> None:
        self.m = m
        self.interval = self.FIRST if first is None else first
        self.next = self.interval
        self.active = False

    def start(self, step: int) -> None:
        """Note every thread's PC and state."""
        m = self.m
        m.sync_pcs()
        self.pcs, self.states = m.pc.copy(), m.state.copy()
        self.until = step + self.WINDOW
        self.seen: dict[bytes, int] | None = None
        self.segments: list[tuple[list[np.ndarray], set[int]]] = []
        self.ran: list[np.ndarray] = []
        self.visited: set[int] = set()
        self.active = True

    def after(self, step: int, pc: int, threads: np.ndarray) -> None:
        """Called after each step while sampling."""
        m = self.m
        if self.seen is not None:
            self.ran.append(threads)
            self.visited.add(pc)
        m.sync_pcs()
        if not (np.array_equal(m.pc, self.pcs) and np.array_equal(m.state, self.states)):
            if step >= self.until:
                self._stop(step, grow=True)
            return
        digest = full_state(m)
        if self.seen is None:
            self.seen = {digest: 0}
            self.until = step + self.WINDOW
            return
        self.segments.append((self.ran, self.visited))
        self.ran, self.visited = [], set()
        k = self.seen.get(digest)
        if k is not None:
            loop = self.segments[k:]
            threads = np.unique(np.concatenate([t for ran, _ in loop for t in ran]))
            pcs = frozenset().union(*(v for _, v in loop))
            self._stop(step, grow=False)
            m.spin(threads, pcs)
            return
        self.seen[digest] = len(self.segments)
        self.until = step + self.WINDOW
        if len(self.seen) >= self.HASHES:
            self._stop(step, grow=True)

    def _stop(self, step: int, grow: bool) -> None:
        self.active = False
        self.seen = None
        self.segments, self.ran = [], []
        if grow:
            self.interval = min(self.interval * 2, self.LONGEST)
        self.next = step + self.interval


# --- messages -----------------------------------------------------------------------------------

def _barrier_groups(m: "MachineView", waiting: np.ndarray) -> list[str]:
    out = []
    alive = np.bincount(np.flatnonzero(m.state != EXITED) // m.ntid, minlength=m.nctas)
    exited = m.ntid - alive
    cluster = waiting[m.barrier[waiting] == CLUSTER_BARRIER]
    if len(cluster):
        first = m.cluster_first(cluster // m.ntid)
        for f in np.unique(first):
            ts = cluster[first == f]
            members = np.flatnonzero(m.cluster_first(np.arange(m.nctas)) == f)
            live = int(alive[members].sum())
            out.append(f"barrier.cluster.wait at {instruction_at(m, int(m.pc[ts[0]]) - 1)} reached by {thread_ranges(m, ts)}; "
                       f"the cluster of CTAs {ranges(members)} has {int(m.cluster_arrivals[f])} arrivals of "
                       f"the {live} its live threads must make")
    warp = waiting[m.barrier[waiting] == WARP_SYNC]
    if len(warp):
        out.append(f"bar.warp.sync at {instruction_at(m, int(m.pc[warp[0]]) - 1)} reached by {thread_ranges(m, warp)}, "
                   f"which wait for the other lanes their member masks name")
    held = waiting[m.barrier[waiting] == RECONVERGE]
    if len(held):
        out.append(f".aligned barrier at {instruction_at(m, int(m.pc[held[0]]) - 1)} reached by "
                   f"{thread_ranges(m, held)}, which wait for the other live lanes of their warps to reach it "
                   f"(a warp executes an .aligned barrier together)")
    rest = waiting[(m.barrier[waiting] != CLUSTER_BARRIER) & (m.barrier[waiting] != WARP_SYNC)
                   & (m.barrier[waiting] != RECONVERGE)]
    key = (rest // m.ntid) * 16 + m.barrier[rest]
    for k in np.unique(key):
        ts = rest[key == k]
        cta, ident = divmod(int(k), 16)
        count = int(m.barrier_count[ts].max())
        need = f"the {count} threads it counts" if count else f"all {int(alive[cta])} live threads of the CTA"
        gone = f"; {int(exited[cta])} threads of CTA {cta} have exited" if exited[cta] else ""
        pending = int(m.arrived[k])
        extra = f" and {pending} bar.arrive arrivals" if pending else ""
        out.append(f"barrier {ident} at {instruction_at(m, int(m.pc[ts[0]]) - 1)} reached by {thread_ranges(m, ts)}{extra}, "
                   f"but it waits for {need}{gone}")
    return out


def _parked_groups(m: "MachineView") -> list[str]:
    out = []
    for word, (threads, _, describe) in sorted(m.parked.items()):
        pcs = m.pc[threads] - 1
        lines = ", ".join(instruction_at(m, int(p)) for p in np.unique(pcs))
        out.append(f"{thread_ranges(m, threads)} wait at {lines} for {describe(word)}, and no thread that "
                   "can still run arrives on it or completes its transactions")
    return out


def _reads(m: "MachineView", pcs: frozenset[int], threads: np.ndarray) -> str:
    """The memory a loop reads: each load's address for the first thread."""
    found = [f"{ins.name}{where(ins)}" + (f" reads {read[0]} address {read[1]:#x}" if read else "")
             for ins, read in loop_reads(m, pcs, threads)]
    return ("; " + ", ".join(found) + ", which no thread that can still run writes") if found else ""


def hang_message(m: "MachineView", steps: int) -> str:
    """The error when no thread can make progress."""
    m.sync_pcs()
    groups = _barrier_groups(m, np.flatnonzero(m.state == WAITING)) + _parked_groups(m)
    for threads, _, pcs in m.spinners.loops:
        groups.append(f"{thread_ranges(m, threads)} spin in the loop at {source_lines(m, pcs)} without changing "
                      f"anything{_reads(m, pcs, threads)}")
    more = len(groups) - _MAX_GROUPS
    groups = groups[:_MAX_GROUPS] + ([f"... and {more} more groups"] if more > 0 else [])
    return (f"{m.program.name}: deadlock: " + "\n  ".join(groups) +
            f"\n  (no thread can make progress; stopped after {steps} steps)")


def running_message(m: "MachineView", limit: int) -> str:
    """The error when ``max_steps`` runs out: who is still running, where."""
    m.sync_pcs()
    live = np.flatnonzero((m.state == RUNNING) | (m.state == SPINNING))
    pcs = m.pc[live]
    parts = [f"{thread_ranges(m, live[pcs == p])} at {instruction_at(m, int(p))}" for p in np.unique(pcs)[:_MAX_GROUPS]]
    parked = int(np.count_nonzero(m.state == PARKED))
    waiting = int(np.count_nonzero(m.state == WAITING))
    tail = f"; {parked} threads parked on mbarriers, {waiting} waiting at barriers" if parked or waiting else ""
    return (f"{m.program.name}: more than {limit} steps (max_steps); still running: " + "; ".join(parts) + tail +
            ". Raise max_steps (sim.launch / Device.launch, or JAXPTX_SIM_MAX_STEPS) if the kernel is just long.")

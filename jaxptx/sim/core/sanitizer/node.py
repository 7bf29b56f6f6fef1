"""The sanitizer across a node: races between grids of different devices (or
two grids of one device) in global memory, and what orders them.

:meth:`jaxptx.sim.System.launch` with ``check=`` makes one :class:`NodeChecker`
for its grids and joins every grid's :class:`~.Sanitizer` to it
(:meth:`~.Sanitizer.join_node`). Each grid's sanitizer goes on checking
pairs of its own threads' accesses, in every buffer it touches (its device's
and, through peer addresses, the others'); it hands every global access to
the checker too, which checks it against the other grids' accesses of the
same cells (:mod:`.node_shadow`) and keeps the orderings between grids
(:mod:`.knowledge`).

What orders accesses of different grids is a release/acquire chain whose
every link is morally strong (PTX ISA, "Memory Consistency Model": the
release's and the acquire's scopes each include the other thread):

- a release (``st.release``, ``red``/``atom`` with ``.release``/``.acq_rel``,
  ``multimem.st``/``multimem.red`` with ``.release``), or a fence followed
  in program order by a strong write (``fence.acq_rel``/``fence.sc``/
  ``membar`` then a ``.relaxed`` store or an atomic), publishes what its
  thread knows at the location written;
- an acquire (``ld.acquire``, ``atom`` with ``.acquire``/``.acq_rel``,
  ``multimem.ld_reduce.acquire``), or a strong read followed by a fence,
  takes what was published there;
- the scope of the pair is the narrowest of the operations' (and the
  fence's): ``.sys`` joins grids of any devices; ``.gpu`` joins the grids of
  one device only — a device that publishes with ``fence.acq_rel.gpu`` and
  is read from a peer has published nothing to that peer. ``.cta`` and
  ``.cluster`` join no grids.

Strong accesses of two devices race with each other unless both have
``.sys`` scope (morally strong), strong accesses of one device's grids
unless one is below ``.gpu`` scope; a plain store of the value already there
is not a race outside ``check="strict"``, as within a grid.

The grids of a launch sequence (:meth:`jaxptx.sim.Device.launch_sequence`)
are also ordered by their completion: a grid that completes releases all it
did and knew (:meth:`NodeChecker.complete`), and a dependent grid's
``griddepcontrol.wait`` acquires that for the threads passing it
(:meth:`NodeChecker.acquire_completion`). ``launch_dependents`` orders no
memory, so a dependent's access before its ``wait`` races with its
prerequisite's conflicting accesses, and the report says so, naming both
grids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...memory.spaces import GLOBAL_SHIFT
from .knowledge import EMPTY, Acquisitions, Knowledge, completion
from .node_shadow import KINDS, NodeShadow
from .values import as_cells, bytes_of, cells, differ, fitting_grain, grain_of

__all__ = ["NodeChecker", "GPU", "SYS"]

CTA, CLUSTER, GPU, SYS = 0, 1, 2, 3
"""Scopes, narrowest first."""

READ, STRONG_READ, STRONG_WRITE = range(len(KINDS))


class NodeChecker:
    """Happens-before between the grids of one node launch.

    Args:
        devices: the node's devices (``index``, ``_buffers``, ``_first_slot``).
        strict: report plain stores of the value already there too.
    """

    def __init__(self, devices: Sequence[Any], strict: bool = False) -> None:
        self.strict = strict
        self.keys: dict[int, int] = {}             # id(buffer) -> node buffer key
        self.buffers: list[np.ndarray] = []
        self.owner: list[int] = []                 # node buffer key -> device
        self.names: list[str] = []
        for d in devices:
            for k, buf in enumerate(d._buffers):
                self.keys[id(buf)] = len(self.buffers)
                self.buffers.append(buf)
                self.owner.append(d.index)
                self.names.append(f"device {d.index}'s allocation at {(k + d._first_slot) << GLOBAL_SHIFT:#x}")
        self.grids: list[Any] = []                 # grid -> its Sanitizer
        self.device: list[int] = []                # grid -> its device
        self.acquired: list[Acquisitions] = []
        self.fence_scope: list[np.ndarray] = []    # per grid, per thread: scope of its last fence (-1: none)
        self.fence_stamp: list[np.ndarray] = []    # ... and the thread's stamp then
        self.pending: list[dict[int, dict[tuple[int, int], int]]] = []   # strong reads a fence will make acquires
        self.shadows: dict[int, NodeShadow] = {}
        self.released: dict[tuple[int, int], dict[tuple[int, bool], Knowledge]] = {}
        self.grid_names: list[str | None] = []      # per grid: its name in a launch sequence (None: by device)
        self.completions: dict[int, Knowledge] = {}     # grid -> what its completion released

    def join(self, sanitizer: Any, device: int) -> int:
        """Add a grid on ``device`` checked by ``sanitizer``; returns its index."""
        n = sanitizer.m.nthreads
        self.grids.append(sanitizer)
        self.device.append(device)
        self.acquired.append(Acquisitions(sanitizer.ntid))
        self.fence_scope.append(np.full(n, -1, dtype=np.int8))
        self.fence_stamp.append(np.zeros(n, dtype=np.int32))
        self.pending.append({})
        self.grid_names.append(None)
        return len(self.grids) - 1

    def name(self, grid: int, name: str) -> None:
        """Call grid ``grid`` ``name`` in reports (``"grid 1 (consume)"``): a
        grid of a launch sequence, ordered by ``griddepcontrol.wait``."""
        self.grid_names[grid] = name

    # a launch sequence's completions ---------------------------------------------------
    def complete(self, grid: int) -> None:
        """Grid ``grid`` completed: it releases every access it made and
        what its threads had acquired."""
        san = self.grids[grid]
        acquired = EMPTY
        for _, known in self.acquired[grid].knowledge(san.clocks, np.arange(san.clocks.n)):
            acquired = acquired.join(known)
        self.completions[grid] = completion(grid, acquired)

    def acquire_completion(self, grid: int, threads: np.ndarray, prerequisites: Sequence[int]) -> None:
        """``threads`` of grid ``grid`` passed ``griddepcontrol.wait``: each
        acquires what the completions of ``prerequisites`` (grids, all
        completed) released."""
        known = EMPTY
        for p in prerequisites:
            known = known.join(self.completions.get(p, EMPTY))
        if known:
            clocks, acquired = self.grids[grid].clocks, self.acquired[grid]
            for t in threads.tolist():
                acquired.add(clocks, t, known)

    def peers(self, device: int) -> list[tuple[np.ndarray, str]]:
        """Every other device's buffers and their names."""
        return [(b, name) for b, d, name in zip(self.buffers, self.owner, self.names) if d != device]

    # accesses ---------------------------------------------------------------------------
    def access(self, san: Any, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, write: bool,
               atomic: bool, strong: bool, release: bool, acquire: bool, values: np.ndarray | None) -> None:
        """A global access by grid ``san.node_grid``'s ``threads``: check it
        against the other grids' accesses, record it, then the orderings it
        makes (a release publishes, an acquire takes)."""
        key = self.keys.get(id(buf))
        if key is None:
            return
        g = san.node_grid
        scope = san._scope() if strong else CTA
        if scope < GPU:                 # strong within its CTA or cluster only: plain between grids
            strong = release = acquire = False
            write = write or atomic
        shadow, idx, per = self._cells(key, off, width)
        th = np.repeat(threads, per) if per > 1 else threads
        stamps = san.clocks.own(th)
        new = None
        if write and not strong and values is not None:
            new = as_cells(bytes_of(values, width), shadow.grain)
        access = _Access(g, idx, th, stamps, write or atomic, strong, scope == SYS, new,
                         as_cells(buf, shadow.grain) if new is not None else None)
        self._check(san, key, shadow, access)
        self._record(san, shadow, access)
        if strong:
            self._sync(san, key, off, threads, write or atomic, not write or atomic, release, acquire, scope)

    def _cells(self, key: int, off: np.ndarray, width: int) -> tuple[NodeShadow, np.ndarray, int]:
        """The buffer's records (split finer first if the access covers part
        of a cell), the cells the access covers and cells per access."""
        shadow = self.shadows.get(key)
        size = len(self.buffers[key])
        if shadow is None:
            grain = grain_of(size)
            shadow = self.shadows[key] = NodeShadow(size // grain, grain)
        fit = fitting_grain(shadow.grain, off, width)
        if fit < shadow.grain:
            shadow.split(fit)
        return shadow, cells(off, width, shadow.grain), max(width // shadow.grain, 1)

    def _check(self, san: Any, key: int, shadow: NodeShadow, a: "_Access") -> None:
        """Report the first conflict with another grid's access that nothing orders."""
        idx, g = a.idx, a.grid
        w = shadow.w_grid[idx].astype(np.int64)
        clash = (w >= 0) & (w != g)
        if clash.any() and a.new is not None and not self.strict:
            clash &= differ(a.old[idx], a.new)
        if self._race(san, key, a, clash, w, shadow.w_thread[idx], shadow.w_stamp[idx], shadow.w_pc[idx],
                      "plain write"):
            return
        for other, mine in shadow.slots.items():
            if other == g:
                continue
            same_device = self.device[other] == self.device[g]
            for kind, slot in enumerate(mine):
                if slot is None or (kind != STRONG_WRITE and not a.write):
                    continue           # reads conflict with writes only
                thread = slot.thread[idx]
                clash = thread >= 0
                if a.strong and kind != READ:        # strong against strong: a race unless morally strong
                    if same_device:
                        continue
                    clash &= ~(slot.sys[idx] & a.sys)
                if self._race(san, key, a, clash, np.full(len(idx), other), thread, slot.stamp[idx],
                              slot.pc[idx], KINDS[kind]):
                    return

    def _race(self, san: Any, key: int, a: "_Access", clash: np.ndarray, grids: np.ndarray,
              threads: np.ndarray, stamps: np.ndarray, pcs: np.ndarray, other_kind: str) -> bool:
        """Report the first of the ``clash`` cells whose other access is not
        known to ``a``'s thread; returns whether one was."""
        sel = np.flatnonzero(clash)
        if len(sel) == 0:
            return False
        known = self.ordered(a.grid, a.th[sel], grids[sel], threads[sel], stamps[sel])
        if known.all():
            return False
        k = int(sel[np.argmax(~known)])
        self._report(san, key, a, k, int(grids[k]), int(threads[k]), int(pcs[k]), other_kind)
        return True

    def ordered(self, grid: int, threads: np.ndarray, grids: np.ndarray, others: np.ndarray,
                stamps: np.ndarray) -> np.ndarray:
        """Per pair: whether the access by grid ``grids``' thread ``others``
        stamped ``stamps`` happens before grid ``grid``'s thread ``threads`` now."""
        out = np.zeros(len(threads), dtype=bool)
        ntid = np.array([s.ntid for s in self.grids], dtype=np.int64)[grids]
        san = self.grids[grid]
        for pos, known in self.acquired[grid].knowledge(san.clocks, threads):
            out[pos] = known.covers(grids[pos], others[pos] // ntid[pos], others[pos] % ntid[pos], stamps[pos])
        return out

    def _record(self, san: Any, shadow: NodeShadow, a: "_Access") -> None:
        if a.write and not a.strong:
            shadow.write(a.idx, a.grid, a.th, a.stamps, san.pc)
        else:
            kind = (STRONG_WRITE if a.write else STRONG_READ) if a.strong else READ
            shadow.slot(a.grid, kind).put(a.idx, a.th, a.stamps, san.pc, a.sys)

    def _report(self, san: Any, key: int, a: "_Access", k: int, other: int, thread: int, pc: int,
                other_kind: str) -> None:
        them = self.grids[other]
        d, e = self.device[a.grid], self.device[other]
        where = f"offset {int(a.idx[k]) * self.shadows[key].grain:#x} of {self.names[key]}"
        mine, theirs = self.grid_names[a.grid], self.grid_names[other]
        of_mine = of_theirs = ""
        if mine is not None and theirs is not None:         # grids of a launch sequence
            first, then = (theirs, mine) if other < a.grid else (mine, theirs)
            head, why = f"between {mine} and {theirs} of device {d}", (
                f"nothing orders {then}'s access after {first}'s: only a griddepcontrol.wait before it would (it "
                "acquires the completion of the grids before its own; launch_dependents orders no memory), or a "
                "release/acquire chain at .gpu or .sys scope")
            of_mine, of_theirs = f" of {mine}", f" of {theirs}"
        elif d != e:
            head, why = "between devices", ("nothing orders accesses of different devices (no release/acquire "
                                            "chain at .sys scope between them; .gpu scope orders a device's own "
                                            "accesses only)")
        else:
            head, why = f"between grids of device {d}", ("nothing orders accesses of different grids (no "
                                                         "release/acquire chain at .gpu or .sys scope between them)")
        kind = ("strong write of" if a.write else "strong read of") if a.strong else \
            "write of" if a.write else "read of"
        san.report("race", f"global-memory race {head}: {kind} {where} at {san.at(int(a.th[k]))}{of_mine} "
                   f"conflicts with the {other_kind} at {them.line(pc)} by {them.who(thread)}{of_theirs}: {why}",
                   san.line(san.pc), them.line(pc), other_device=e)

    # orderings --------------------------------------------------------------------------
    def _sync(self, san: Any, key: int, off: np.ndarray, threads: np.ndarray, writes: bool, reads: bool,
              release: bool, acquire: bool, scope: int) -> None:
        """The orderings a strong access at ``scope`` makes."""
        g = san.node_grid
        off = np.asarray(off, dtype=np.int64)
        if writes:
            fenced = self.fence_scope[g][threads]
            if release:
                self._release(san, key, off, threads, np.full(len(threads), scope), san.clocks.own(threads))
            elif (fenced >= GPU).any():
                sel = np.flatnonzero(fenced >= GPU)
                self._release(san, key, off[sel], threads[sel], np.minimum(fenced[sel], scope),
                              self.fence_stamp[g][threads[sel]])
        if reads:
            if acquire:
                for t, o in zip(threads.tolist(), off.tolist()):
                    self._acquire(g, t, (key, o), scope)
            else:
                pending = self.pending[g]
                for t, o in zip(threads.tolist(), off.tolist()):
                    pending.setdefault(t, {})[(key, o)] = scope

    def _release(self, san: Any, key: int, off: np.ndarray, threads: np.ndarray, scopes: np.ndarray,
                 stamps: np.ndarray) -> None:
        """``threads`` publish what they know at ``off`` (each its own row
        up to ``stamps``: the release's step, or its fence's)."""
        g, ntid, device = san.node_grid, san.ntid, self.device[san.node_grid]
        for t, o, scope, stamp in zip(threads.tolist(), off.tolist(), scopes.tolist(), stamps.tolist()):
            cta, tid = divmod(t, ntid)
            row = san.clocks.row(t)[:ntid]
            row[tid] = stamp
            known = Knowledge({(g, cta): row}).join(self.acquired[g].of(san.clocks, t))
            held = self.released.setdefault((key, o), {})
            tag = (device, scope == SYS)
            held[tag] = known if tag not in held else held[tag].join(known)
        san.clocks.tick(np.unique(threads))

    def _acquire(self, grid: int, thread: int, location: tuple[int, int], scope: int) -> None:
        """``thread`` takes what was published at ``location`` by releases
        whose scope and its own join them."""
        held = self.released.get(location)
        if not held:
            return
        device = self.device[grid]
        known = EMPTY
        for (by, sys), k in held.items():
            if by == device or (sys and scope == SYS):
                known = known.join(k)
        if known:
            self.acquired[grid].add(self.grids[grid].clocks, thread, known)

    def fence(self, san: Any, threads: np.ndarray, scope: int) -> None:
        """A fence at ``scope`` by ``threads``: strong reads before it
        acquire; strong writes after it release what the threads know now."""
        if scope < GPU:
            return
        g = san.node_grid
        pending = self.pending[g]
        if pending:
            for t in threads.tolist():
                for location, read_scope in pending.pop(t, {}).items():
                    self._acquire(g, t, location, min(read_scope, scope))
        self.fence_scope[g][threads] = scope
        self.fence_stamp[g][threads] = san.clocks.own(threads)
        san.clocks.tick(threads)


class _Access:
    """One access, cell by cell, as the node's checks see it."""

    __slots__ = ("grid", "idx", "th", "stamps", "write", "strong", "sys", "new", "old")

    def __init__(self, grid: int, idx: np.ndarray, th: np.ndarray, stamps: np.ndarray, write: bool, strong: bool,
                 sys: bool, new: np.ndarray | None, old: np.ndarray | None) -> None:
        self.grid, self.idx, self.th, self.stamps = grid, idx, th, stamps
        self.write, self.strong, self.sys, self.new, self.old = write, strong, sys, new, old

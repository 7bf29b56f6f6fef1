"""Happens-before between the grids of a node: what a thread knows of other
grids' threads, carried from grid to grid by releases and acquires.

Within a CTA the sanitizer's vector clocks (:mod:`.clocks`) say what orders
what. Between grids (a node's devices, or two grids of one device) a clock
entry per thread of the node would cost ``threads²``; instead a release
carries a :class:`Knowledge`: for each CTA of the node it has heard of, that
CTA's clock row (its threads' stamps) as the releasing chain knew it. An
access by thread ``x`` of CTA ``c`` of grid ``g`` stamped ``s`` happens
before everything a thread does once its knowledge has ``rows[g, c][x] >= s``.

A thread's knowledge is never stored per thread. Each acquire that brings
something new is logged with the acquiring thread's stamp then
(:class:`Acquisitions`, one per grid); a thread ``u`` knows an acquisition of
thread ``t`` of its CTA once its clock says it comes after it
(``vc[u][t] >= stamp``: a barrier, mbarrier or CTA-scope release/acquire
since). So one acquire by thread 0 followed by ``bar.sync`` informs the whole
CTA, and a thread that skipped the barrier knows nothing.

A grid's completion is released whole: a grid that has completed makes no
more accesses, so knowing that it completed (:attr:`Knowledge.done`, what
:func:`completion` makes and a dependent grid's ``griddepcontrol.wait``
acquires) covers every access it made, with no clock rows at all.
"""

from __future__ import annotations

import numpy as np

from .clocks import Clocks

__all__ = ["Knowledge", "Acquisitions", "EMPTY", "completion"]


class Knowledge:
    """Per ``(grid, CTA)``, a CTA clock row: the stamps of that CTA's threads
    known to happen before; and ``done``, the grids known to have completed
    (every access of theirs happens before). Immutable: :meth:`join` makes
    a new one."""

    __slots__ = ("rows", "done")

    def __init__(self, rows: dict[tuple[int, int], np.ndarray] | None = None,
                 done: frozenset[int] = frozenset()) -> None:
        self.rows: dict[tuple[int, int], np.ndarray] = rows or {}
        self.done = done

    def __bool__(self) -> bool:
        """Whether it knows anything."""
        return bool(self.rows or self.done)

    def join(self, other: "Knowledge") -> "Knowledge":
        """What either knows (elementwise maximum of common rows)."""
        if not other:
            return self
        if not self:
            return other
        rows = dict(self.rows)
        for key, row in other.rows.items():
            mine = rows.get(key)
            rows[key] = row if mine is None else np.maximum(mine, row)
        return Knowledge(rows, self.done | other.done)

    def within(self, other: "Knowledge") -> bool:
        """Whether ``other`` knows everything this does."""
        if not self.done <= other.done:
            return False
        for key, row in self.rows.items():
            if key[0] in other.done:
                continue
            theirs = other.rows.get(key)
            if theirs is None or (row > theirs).any():
                return False
        return True

    def covers(self, grids: np.ndarray, ctas: np.ndarray, tids: np.ndarray, stamps: np.ndarray) -> np.ndarray:
        """Per access ``(grid, CTA, CTA-local thread, stamp)``: whether it is known."""
        out = np.zeros(len(stamps), dtype=bool)
        for (grid, cta), row in self.rows.items():
            mine = (grids == grid) & (ctas == cta)
            if mine.any():
                out[mine] = row[tids[mine]] >= stamps[mine]
        if self.done:
            out |= np.isin(grids, list(self.done))
        return out


EMPTY = Knowledge()


def completion(grid: int, acquired: Knowledge) -> Knowledge:
    """What grid ``grid``'s completion releases: all of its own accesses,
    and what its threads had acquired from other grids (``acquired``, the
    join of theirs), so that waiting on a grid that waited on another
    orders both."""
    return Knowledge(acquired.rows, acquired.done | {grid})


class Acquisitions:
    """The acquisitions of one grid's threads that brought new knowledge, per
    CTA and thread: ``(stamps, knowledge)`` with each thread's knowledge
    cumulative over its own acquisitions."""

    def __init__(self, ntid: int) -> None:
        self.ntid = ntid
        self.by_cta: dict[int, dict[int, tuple[list[int], list[Knowledge]]]] = {}

    def knowledge(self, clocks: Clocks, threads: np.ndarray) -> list[tuple[np.ndarray, Knowledge]]:
        """What ``threads`` (grid-wide indices) know, grouped: ``(positions
        in threads, their knowledge)``; positions with none are left out."""
        ctas = threads // self.ntid
        out: list[tuple[np.ndarray, Knowledge]] = []
        for cta in np.unique(ctas).tolist():
            log = self.by_cta.get(cta)
            if not log:
                continue
            pos = np.flatnonzero(ctas == cta)
            columns, entries = [], []
            for tid, (stamps, known) in log.items():
                seen = clocks.knows(threads[pos], tid)
                columns.append(np.searchsorted(np.asarray(stamps), seen, side="right") - 1)
                entries.append(known)
            combos = np.stack(columns, axis=1)
            unique, inverse = np.unique(combos, axis=0, return_inverse=True)
            for r, combo in enumerate(unique.tolist()):
                joined = EMPTY
                for e, known in zip(combo, entries):
                    if e >= 0:
                        joined = joined.join(known[e])
                if joined:
                    out.append((pos[inverse.reshape(-1) == r], joined))
        return out

    def of(self, clocks: Clocks, thread: int) -> Knowledge:
        """What one thread knows."""
        found = self.knowledge(clocks, np.array([thread], dtype=np.int64))
        return found[0][1] if found else EMPTY

    def add(self, clocks: Clocks, thread: int, known: Knowledge) -> None:
        """``thread`` acquired ``known``: if it is news, the thread starts a
        new step and the acquisition is logged at it."""
        if known.within(self.of(clocks, thread)):
            return
        t = np.array([thread], dtype=np.int64)
        clocks.tick(t)
        cta, tid = divmod(thread, self.ntid)
        stamps, entries = self.by_cta.setdefault(cta, {}).setdefault(tid, ([], []))
        stamps.append(int(clocks.own(t)[0]))
        entries.append((entries[-1] if entries else EMPTY).join(known))

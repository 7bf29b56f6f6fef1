"""The taint tracker of a fidelity launch (see :mod:`jaxptx.sim.fidelity`):
:class:`Tracker` counts executions per PC and follows the taint of
approximate and reading values through registers, memory and tensor memory,
as an observer of the launch's events (``machine.observe(Tracker(machine))``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import ir
from ...isa import APPROX, EXACT
from ..core.naming import where as _where
from ..core.observers import LOAD, STORE, Observer
from .report import Fidelity, Reach, Usage
from .roles import Roles, plan_roles

__all__ = ["Tracker"]

_CLEAN = -1            # the taint of a clean value (others: the PC of the value's origin)
_T = np.int32


class Tracker(Observer):
    """Counts executions per PC and follows taint through one launch (see
    :mod:`jaxptx.sim.fidelity`). Taint values are the origin's PC, -1 clean."""

    def __init__(self, machine: Any) -> None:
        self.m = machine
        program = machine.program
        self.infos = plan_roles(program, machine.regs.dtypes)
        self.counts = np.zeros(len(program.code), dtype=np.int64)
        self.nthreads = machine.nthreads
        self.live = False                              # an origin has run: taint may exist
        self.regs: dict[str, np.ndarray] = {}          # register -> taint per thread
        self.memory: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # id(buffer) -> (buffer, taint per byte)
        self.tmem = np.full(machine.nctas, _CLEAN, dtype=_T)          # per cluster (its first CTA)
        self.scratch = np.full(self.nthreads, _CLEAN, dtype=_T)        # this step's taint per thread
        self.pending: tuple | None = None
        self.writes: list[tuple] = []
        self.touched: list[np.ndarray] = []
        self.reached: dict[tuple[int, str, str], Reach] = {}

    # hooks -------------------------------------------------------------------------
    def before_step(self, pc: int, threads: np.ndarray) -> None:
        """The machine is about to run ``pc`` on ``threads``."""
        if self.pending is not None:
            self._flush()
        info = self.infos[pc]
        taken = threads
        if info.guard is not None:
            g = self.m.regs.get(info.guard)
            if g is not None:
                g = (g if len(threads) == self.nthreads else g[threads]).astype(bool)
                taken = threads[~g if info.negated else g]
        self.counts[pc] += len(taken)
        if info.cls != EXACT and len(taken):
            self.live = True
        if not self.live:
            return
        guard = self._taint(info.guard, threads) if info.guard is not None else None
        if info.use is not None:
            self._report_use(pc, info, threads, taken, guard)
        for name in info.addresses:
            self._report(pc, "address", self._taint(name, taken))
        src = self._sources(pc, info, taken)
        self.scratch[taken] = src
        self.pending = (info, taken, threads, guard)

    def access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, kind: str,
               values: np.ndarray | None = None) -> None:
        """One gather or scatter of the current instruction (a load, a store,
        or a read-modify-write, which reads and writes)."""
        if self.pending is None:
            return
        if kind == STORE:
            self.writes.append((buf, off, threads, width, False))
            return
        held = self.memory.get(id(buf))
        if held is not None:
            bytes_ = held[1][_bytes(off, width)].reshape(len(off), width).max(axis=1)
            if (bytes_ != _CLEAN).any():
                np.maximum.at(self.scratch, threads, bytes_)
                self.touched.append(threads)
        if kind != LOAD:
            self.writes.append((buf, off, threads, width, True))

    # taint ---------------------------------------------------------------------------
    def _taint(self, name: str | None, threads: np.ndarray) -> np.ndarray | None:
        """Register ``name``'s taint for ``threads`` (``None``: all clean)."""
        a = self.regs.get(name)
        if a is None:
            return None
        return a if len(threads) == self.nthreads else a[threads]

    def _sources(self, pc: int, info: Roles, taken: np.ndarray) -> np.ndarray:
        """The taint each executing thread's results start with: its
        sources', its guard's, and tensor memory's (or this PC, for an
        approximate or reading instruction)."""
        if info.cls != EXACT:
            return np.full(len(taken), pc, dtype=_T)
        src = np.full(len(taken), _CLEAN, dtype=_T)
        for name in info.srcs + ((info.guard,) if info.guard is not None else ()):
            t = self._taint(name, taken)
            if t is not None:
                np.maximum(src, t, out=src)
        if info.tmem and len(taken):
            np.maximum(src, self.tmem[self.m.cluster_first(taken // self.m.ntid)], out=src)
        return src

    def _flush(self) -> None:
        """Give the last step's results (registers, memory, tensor memory)
        the taint its sources and loads had."""
        info, taken, threads, guard = self.pending
        self.pending = None
        writes, self.writes = self.writes, []
        scratch = self.scratch
        for buf, off, who, width, update in writes:
            if update and len(who) and int(scratch[who].max()) != _CLEAN:
                # threads updating the same word (atomics in thread order) see each other's values
                _, same = np.unique(off, return_inverse=True)
                top = np.full(int(same.max()) + 1, _CLEAN, dtype=_T)
                np.maximum.at(top, same, scratch[who])
                np.maximum.at(scratch, who, top[same])
                self.touched.append(who)
        if info.collective and len(taken):
            self._spread(taken)
        final = scratch[taken]
        for buf, off, who, width, update in writes:
            self._store(buf, off, scratch[who], width, update)
        scratch[taken] = _CLEAN
        for t in self.touched:
            scratch[t] = _CLEAN
        self.touched = []
        if info.tmem and len(taken) and (final != _CLEAN).any():
            np.maximum.at(self.tmem, self.m.cluster_first(taken // self.m.ntid), final)
        if info.cta_wide:
            self._cta_wide(info, taken, final)
            return
        for name in info.dests:
            self._set(name, taken, final)
        for name in info.weak:
            self._raise(name, taken, final)
        if guard is not None and len(taken) != len(threads) and (guard != _CLEAN).any():
            # threads that skipped the write keep their old value because of a tainted guard
            for name in info.dests:
                self._raise(name, threads, guard)

    def _spread(self, taken: np.ndarray) -> None:
        """Lanes that exchange values: every thread of a CTA takes the CTA's taint."""
        ctas = taken // self.m.ntid
        top = np.full(self.m.nctas, _CLEAN, dtype=_T)
        np.maximum.at(top, ctas, self.scratch[taken])
        self.scratch[taken] = top[ctas]

    def _cta_wide(self, info: Roles, taken: np.ndarray, final: np.ndarray) -> None:
        """``bar.red``: the result, written when the barrier completes,
        depends on every thread of the CTA."""
        if not len(taken) or not (final != _CLEAN).any():
            return
        ntid = self.m.ntid
        ctas = taken // ntid
        for cta in np.unique(ctas[final != _CLEAN]).tolist():
            top = np.full(ntid, int(final[ctas == cta].max()), dtype=_T)
            for name in info.dests:
                self._raise(name, np.arange(cta * ntid, (cta + 1) * ntid), top)

    def _set(self, name: str, threads: np.ndarray, taint: np.ndarray) -> None:
        a = self.regs.get(name)
        clean = not (taint != _CLEAN).any()
        if a is None:
            if clean:
                return
            a = self.regs[name] = np.full(self.nthreads, _CLEAN, dtype=_T)
        if len(threads) == self.nthreads:
            if clean:
                del self.regs[name]
            else:
                a[:] = taint
        else:
            a[threads] = taint

    def _raise(self, name: str, threads: np.ndarray, taint: np.ndarray) -> None:
        if not (taint != _CLEAN).any():
            return
        a = self.regs.get(name)
        if a is None:
            a = self.regs[name] = np.full(self.nthreads, _CLEAN, dtype=_T)
        np.maximum.at(a, threads, taint)

    def _store(self, buf: np.ndarray, off: np.ndarray, taint: np.ndarray, width: int, update: bool) -> None:
        """Bytes written: their taint becomes the writer's (grows, for an update)."""
        held = self.memory.get(id(buf))
        if held is None:
            if not (taint != _CLEAN).any():
                return
            held = self.memory[id(buf)] = (buf, np.full(len(buf), _CLEAN, dtype=_T))
        at = _bytes(off, width)
        per_byte = np.repeat(taint, width)
        if update:
            np.maximum.at(held[1], at, per_byte)
        else:
            held[1][at] = per_byte

    # reports ----------------------------------------------------------------------------
    def _report_use(self, pc: int, info: Roles, threads: np.ndarray, taken: np.ndarray,
                    guard: np.ndarray | None) -> None:
        """A branch's or barrier's guard (deciding for every thread at it)
        and operands."""
        if guard is not None:
            self._report(pc, info.use, guard)
        for name in info.decides:
            self._report(pc, info.use, self._taint(name, taken))

    def _report(self, pc: int, use: str, taint: np.ndarray | None) -> None:
        if taint is None or not len(taint):
            return
        origin = int(taint.max())
        if origin == _CLEAN:
            return
        origin_class = self.infos[origin].cls
        key = (pc, use, origin_class)
        if key in self.reached:
            return
        code = self.m.program.code
        ins, src = code[pc], code[origin]
        self.reached[key] = Reach(_line(ins), _where(ins).strip(" []") or ins.name, ins.name, use,
                                  origin_class, _line(src), _where(src).strip(" []") or src.name, src.name)

    # result ----------------------------------------------------------------------------------
    def result(self, findings: list | None = None, profile: Any = None) -> Fidelity:
        """The :class:`Fidelity` of the finished launch."""
        if self.pending is not None:
            self._flush()
        exact: dict[str, int] = {}
        approximate: dict[str, Usage] = {}
        reading: dict[str, Usage] = {}
        for pc, (ins, info) in enumerate(zip(self.m.program.code, self.infos)):
            n = int(self.counts[pc])
            if n == 0:
                continue
            name = ins.name
            if info.cls == EXACT:
                exact[name] = exact.get(name, 0) + n
                continue
            into = approximate if info.cls == APPROX else reading
            old = into.get(name)
            bounds = tuple(b for c in info.clauses for b in c.bounds)
            notes = tuple(c.note for c in info.clauses if c.note)
            if old is not None:
                n += old.count
                bounds = tuple(dict.fromkeys(old.bounds + bounds))
                notes = tuple(dict.fromkeys(old.notes + notes))
            into[name] = Usage(n, bounds, notes)
        reached = sorted(self.reached.values(), key=lambda r: (r.line is None, r.line or 0, r.reached))
        return Fidelity(exact, approximate, reading, reached, findings, profile)


def _bytes(off: np.ndarray, width: int) -> np.ndarray:
    """The byte offsets of ``width``-byte accesses at ``off``, access by access."""
    off = np.asarray(off, dtype=np.int64)
    if width == 1:
        return off
    return (off[:, None] + np.arange(width, dtype=np.int64)).reshape(-1)


def _line(ins: ir.Instruction) -> int | None:
    """The PTX line of a parsed instruction."""
    return int(ins.loc[1]) if ins.loc and len(ins.loc) == 3 else None


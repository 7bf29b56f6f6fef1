"""The fidelity report of one launch: which instructions ran exactly, which
within the ISA's stated error, which by the emulator's reading of the ISA,
and whether a value of the last two kinds reached an address, a branch or a
barrier.

``Device.launch(..., fidelity=True)`` returns a :class:`Fidelity`. The class
of each instruction comes from the ISA table (:func:`jaxptx.isa.fidelity_of`
reads the entries' ``fidelity`` clauses and ``.approx`` modifiers).

Taint tracking (:class:`Tracker`, hooked into the machine as the profiler's
counter is: ``before(pc, threads)`` ahead of each step, and the memory's
``counter`` hook for every access):

* an approximate or reading instruction taints its destinations, naming
  itself as their origin; every instruction's destinations take the taint
  of its sources (and of its guard predicate), per thread (lane) — a
  destination written with untainted sources becomes clean again;
* instructions that combine lanes (warp collectives, matrix
  multiply-accumulates, ``bar.red``) spread taint over the CTA;
* memory is tracked per byte: shared memory (every CTA's window), local
  memory and each global allocation. A store sets the taint of the bytes it
  writes; a load takes the taint of the bytes it reads; read-modify-writes
  (atomics, mbarrier words, async-proxy copies) merge both ways and never
  clear taint;
* tensor memory is one cell per cluster: ``tcgen05`` instructions that use
  it take its taint and add theirs (never clearing).

A taint is reported when it reaches a ``[...]`` address operand
("address"), the guard or target of a control-flow instruction ("branch":
``@p bra``, ``brx.idx``, a guarded ``ret``/``exit``), or an operand of a
synchronisation instruction (UNITS class ``sync``: ``bar``/``barrier``
ids and counts, mbarrier addresses and counts: "barrier"). Flows through
control dependence (values computed differently because of a tainted
branch) are not followed; the branch itself is reported. Memory starts
clean at each launch: a previous launch's approximate results are not
remembered.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import ir, isa
from ..isa import APPROX, EXACT, UNITS
from .core.hangs import where as _where
from .core.machine import MACHINE

__all__ = ["Fidelity", "Reach", "Tracker", "Usage", "attach"]

_CLEAN = -1
_T = np.int32
CARRY = "CC.CF"
"""The carry flag's name among the tracked registers (no PTX register has it)."""


@dataclasses.dataclass(frozen=True)
class Usage:
    """How often an approximate or reading instruction ran, and why it is
    not exact.

    Attributes:
        count: thread-instructions executed (each thread whose guard let it
            run counts once).
        bounds: the error bounds the PTX ISA states (approximate forms).
        notes: what the ISA leaves open and what the emulator does.
    """

    count: int
    bounds: tuple[isa.Bound, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict: ``count``, ``bounds`` (each ``measure``,
        ``value``, ``ulps``, ``log2``, ``over``, ``text``) and ``note``."""
        return {"count": self.count,
                "bounds": [{"measure": b.measure, "value": b.value, "ulps": b.ulps, "log2": b.log2,
                            "over": b.over, "text": str(b)} for b in self.bounds],
                "note": "; ".join(self.notes)}


@dataclasses.dataclass(frozen=True)
class Reach:
    """A value of an approximate or reading instruction used where it
    decides more than a result.

    Attributes:
        line: the PTX line of the instruction that used it (``None`` when
            the kernel was not parsed from text); ``where``: its location as
            messages give it (``PTX line 12`` or ``file.py:41``).
        instruction: that instruction's spelling (``ld.global.f32``).
        reached: ``"address"``, ``"branch"`` or ``"barrier"``.
        origin_class: ``"approx"`` or ``"reading"``; ``origin_line``,
            ``origin_where``, ``origin_instruction``: the instruction the
            value came from.
    """

    line: int | None
    where: str
    instruction: str
    reached: str
    origin_class: str
    origin_line: int | None
    origin_where: str
    origin_instruction: str

    def __str__(self) -> str:
        article = "an" if self.reached == "address" else "a"
        return (f"{self.where} ({self.instruction}): {article} {self.reached} depends on {self.origin_where} "
                f"({self.origin_instruction}, {self.origin_class})")


class Fidelity:
    """The fidelity report of one launch (``Device.launch(fidelity=True)``).

    Attributes:
        exact: spelling → thread-instructions executed, for instructions
            the emulator runs with bit-exact PTX semantics.
        approximate: spelling → :class:`Usage` (with the ISA's bounds) for
            instructions whose result is only within the ISA's stated error.
        reading: spelling → :class:`Usage` (with its note) for instructions
            that follow the emulator's reading of a point the ISA leaves to
            figures or unspecified.
        reached: every :class:`Reach`: an approximate or reading value used
            as an address, in a branch or at a barrier (one per
            instruction, kind of use and origin class).
        findings: the sanitizer's findings when the launch ran with
            ``check="all"`` (else ``None``); ``profile``: the
            :class:`jaxptx.profile.Profile` when it ran with ``profile=True``.
    """

    def __init__(self, exact: dict[str, int], approximate: dict[str, Usage], reading: dict[str, Usage],
                 reached: list[Reach], findings: list | None = None, profile: Any = None) -> None:
        self.exact = exact
        self.approximate = approximate
        self.reading = reading
        self.reached = reached
        self.findings = findings
        self.profile = profile

    @property
    def is_exact(self) -> bool:
        """No approximate or reading instruction ran."""
        return not self.approximate and not self.reading

    def summary(self) -> str:
        """A few lines for people: the counts, each inexact instruction with
        its bound or note, and each value that reached more than a result."""
        lines = [f"fidelity: {sum(self.exact.values()):,} exact thread-instructions ({len(self.exact)} kinds)"
                 + ("; every instruction exact" if self.is_exact else "")]
        for name, u in sorted(self.approximate.items()):
            bound = "; ".join(str(b) for b in u.bounds) or "; ".join(u.notes)
            lines.append(f"  approximate {name} x{u.count:,}: {bound}")
        for name, u in sorted(self.reading.items()):
            lines.append(f"  reading {name} x{u.count:,}: {'; '.join(u.notes)}")
        if self.reached:
            lines.extend(f"  reached: {r}" for r in self.reached)
        elif not self.is_exact:
            lines.append("  no approximate or reading value reached an address, a branch or a barrier")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict with the keys ``exact``, ``approximate``,
        ``reading``, ``reached`` and ``is_exact``."""
        return {"exact": dict(self.exact),
                "approximate": {k: u.to_dict() for k, u in self.approximate.items()},
                "reading": {k: u.to_dict() for k, u in self.reading.items()},
                "reached": [dataclasses.asdict(r) for r in self.reached],
                "is_exact": self.is_exact}

    def __repr__(self) -> str:
        return (f"Fidelity(exact={len(self.exact)} kinds, approximate={sorted(self.approximate)}, "
                f"reading={sorted(self.reading)}, reached={len(self.reached)})")


# --- what each instruction does with taint ---------------------------------------------------

@dataclasses.dataclass
class _Info:
    """One PC's classification and register roles (computed once a launch)."""

    cls: str
    clauses: tuple = ()
    guard: str | None = None
    negated: bool = False
    srcs: tuple[str, ...] = ()           # registers whose taint flows to the results
    dests: tuple[str, ...] = ()          # registers written (their taint replaced)
    weak: tuple[str, ...] = ()           # registers maybe written (their taint only grows)
    addresses: tuple[str, ...] = ()      # registers inside [...] operands
    decides: tuple[str, ...] = ()        # registers a branch or barrier depends on
    use: str | None = None               # "branch" or "barrier" for decides and the guard
    collective: bool = False             # results combine the lanes of a warp, warpgroup or CTA
    cta_wide: bool = False               # dests written when a barrier completes, for the CTA
    tmem: bool = False                   # reads and writes tensor memory


def _registers(op: Any, regs: Any, out: list[str]) -> list[str]:
    """The register names ``op`` mentions (vector registers by component)."""
    if type(op) is ir.Register or isinstance(op, ir.Symbol):
        if op.name in regs:
            out.append(op.name)
        elif type(op) is ir.Register:
            out.extend(n for n in (f"{op.name}.{c}" for c in "xyzw") if n in regs)
    elif isinstance(op, (ir.Vector, ir.Parens)):
        for item in op.items:
            _registers(item, regs, out)
    elif isinstance(op, ir.Pair):
        _registers(op.first, regs, out)
        _registers(op.second, regs, out)
    elif isinstance(op, ir.Negated):
        _registers(op.operand, regs, out)
    elif isinstance(op, ir.Address):
        if op.base is not None:
            _registers(op.base, regs, out)
        if op.extra is not None:
            _registers(op.extra, regs, out)
    return out


def _plan(program: Any, regs: Any) -> list[_Info]:
    """Per PC, its :class:`_Info`."""
    sites: dict[str, list[str]] = {}            # function -> return registers of every call of it
    for ins, r in zip(program.code, program.resolved):
        if r is not None and r.inst.sim == "call" and isinstance(ins.operands[0], ir.Parens):
            callee = next((o for o in ins.operands if not isinstance(o, ir.Parens)), None)
            if isinstance(callee, ir.Symbol):
                sites.setdefault(callee.name, []).extend(_registers(ins.operands[0], regs, []))
    return [_info(program, pc, ins, r, regs, sites) for pc, (ins, r) in enumerate(zip(program.code,
                                                                                      program.resolved))]


def _info(program: Any, pc: int, ins: ir.Instruction, r: isa.Resolved | None, regs: Any,
          sites: dict[str, list[str]]) -> _Info:
    """What the instruction at ``pc`` does with taint: its class (from the
    table), which registers it reads, writes, addresses with or decides a
    branch or barrier by, and whether it mixes lanes or uses tensor memory."""
    cls, clauses = isa.fidelity_of(r.inst, r.values) if r is not None else (EXACT, ())
    info = _Info(cls, clauses)
    if ins.guard is not None:
        info.guard, info.negated = ins.guard.register.name, ins.guard.negated
    sim = r.inst.sim if r is not None else None
    unit = UNITS.get(sim) if sim is not None else None
    kind = unit.cls if unit is not None else None
    if kind == "control":
        info.use = "branch"
    elif kind == "sync" and unit.wait != "fence":
        info.use = "barrier"
    if sim == "call" or (sim == "ret" and program.function_of[pc]):
        srcs, dests, weak = _call_roles(program, pc, ins, sim, regs, sites)
        addresses: list[str] = []
        decides: list[str] = []
    else:
        srcs, dests, weak, addresses, decides = _operand_roles(ins, r, regs, info.use is not None)
    if info.use == "barrier":
        addresses = []                            # an mbarrier's address reaches a barrier
    # Lanes that exchange values: warp collectives, matrix fragments (ldmatrix,
    # stmatrix, MMAs) and bar.red, whose result is written when the barrier completes.
    info.cta_wide = kind == "sync" and sim in MACHINE and bool(dests)
    info.collective = kind in ("warp", "tensor", "memory.shared") or info.cta_wide
    if r is not None and r.inst.carry:            # the hidden carry flag, as a register
        srcs.append(CARRY)
        weak.append(CARRY)
    info.tmem = kind == "tensor_memory" or (unit is not None and unit.async_reads == "tcgen05")
    if kind == "tensor":
        srcs.extend(dests)                        # accumulators: D is read as well as written
    info.srcs, info.dests, info.weak = _unique(srcs), _unique(dests), _unique(weak)
    info.addresses, info.decides = _unique(addresses), _unique(decides)
    return info


def _operand_roles(ins: ir.Instruction, r: isa.Resolved | None, regs: Any, decides_use: bool) -> tuple:
    """``(sources, destinations, maybe written, in addresses, deciding a
    branch or barrier)`` registers of an instruction, by its table form's
    operands (``out``: destination; a ``pred`` operand of a barrier is data,
    as ``bar.red``'s)."""
    srcs: list[str] = []
    dests: list[str] = []
    weak: list[str] = []
    addresses: list[str] = []
    decides: list[str] = []
    forms = r.operands if r is not None else ()
    for k, op in enumerate(ins.operands):
        form = forms[k] if k < len(forms) else None
        names = _registers(op, regs, [])
        if form is not None and form.out:
            dests.extend(names)
            continue
        if r is None and k == 0:
            weak.extend(names)                    # no table form: maybe written
        srcs.extend(names)
        if isinstance(op, ir.Address):
            addresses.extend(names)
        if decides_use and not isinstance(op, ir.Parens) and not (form is not None and form.kinds == ("pred",)):
            decides.extend(names)
    return srcs, dests, weak, addresses, decides


def _call_roles(program: Any, pc: int, ins: ir.Instruction, sim: str, regs: Any,
                sites: dict[str, list[str]]) -> tuple[list[str], list[str], list[str]]:
    """``(sources, destinations, maybe written)`` of ``call`` (arguments into
    the callee's register parameters) and of a function's ``ret`` (its
    results into the registers of whichever call site each thread came
    from: every site's, never cleared)."""
    srcs: list[str] = []
    dests: list[str] = []
    if sim == "ret":
        f = program.functions[program.function_of[pc]]
        for name in f.returns:
            _registers(ir.Register(name), regs, srcs)
        return srcs, [], list(sites.get(f.name, ()))
    callee = next((o for o in ins.operands if not isinstance(o, ir.Parens)), None)
    lists = [o for o in ins.operands if isinstance(o, ir.Parens)]
    for o in lists[1:] if isinstance(ins.operands[0], ir.Parens) else lists:
        _registers(o, regs, srcs)
    f = program.functions.get(callee.name) if isinstance(callee, ir.Symbol) else None
    for name in f.params if f is not None else ():
        _registers(ir.Register(name), regs, dests)
    return srcs, dests, []


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


# --- the tracker -------------------------------------------------------------------------------

def attach(machine: Any) -> Tracker:
    """Hook a :class:`Tracker` into a prepared machine (``Device._run``):
    the machine calls its ``before`` ahead of every step, the memory its
    ``access`` for every access (after any profiler's counter)."""
    tracker = Tracker(machine)
    machine.fidelity = tracker
    tracker.chained = machine.memory.counter
    machine.memory.counter = tracker.access
    return tracker


class Tracker:
    """Counts executions per PC and follows taint through one launch (see
    the module docstring). Taint values are the origin's PC, -1 clean."""

    def __init__(self, machine: Any) -> None:
        self.m = machine
        program = machine.program
        self.infos = _plan(program, machine.regs.dtypes)
        self.counts = np.zeros(len(program.code), dtype=np.int64)
        self.nthreads = machine.nthreads
        self.chained: Any = None
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
    def before(self, pc: int, threads: np.ndarray) -> None:
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

    def access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, write: Any) -> None:
        """One gather or scatter of the current instruction (the memory's
        ``counter`` hook: ``write`` False, True, or ``"update"`` for a
        read-modify-write)."""
        if self.chained is not None:
            self.chained(buf, off, threads, width, write)
        if self.pending is None:
            return
        if write is True:
            self.writes.append((buf, off, threads, width, False))
            return
        held = self.memory.get(id(buf))
        if held is not None:
            bytes_ = held[1][_bytes(off, width)].reshape(len(off), width).max(axis=1)
            if (bytes_ != _CLEAN).any():
                np.maximum.at(self.scratch, threads, bytes_)
                self.touched.append(threads)
        if write:
            self.writes.append((buf, off, threads, width, True))

    # taint ---------------------------------------------------------------------------
    def _taint(self, name: str | None, threads: np.ndarray) -> np.ndarray | None:
        """Register ``name``'s taint for ``threads`` (``None``: all clean)."""
        a = self.regs.get(name)
        if a is None:
            return None
        return a if len(threads) == self.nthreads else a[threads]

    def _sources(self, pc: int, info: _Info, taken: np.ndarray) -> np.ndarray:
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

    def _cta_wide(self, info: _Info, taken: np.ndarray, final: np.ndarray) -> None:
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
    def _report_use(self, pc: int, info: _Info, threads: np.ndarray, taken: np.ndarray,
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
        """The :class:`Fidelity` of the finished launch (unhooks the tracker)."""
        if self.pending is not None:
            self._flush()
        self.m.fidelity = None
        if self.m.memory.counter == self.access:
            self.m.memory.counter = self.chained
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


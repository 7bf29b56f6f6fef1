"""The profiler in the emulator: per-instruction execution counts and every
memory access, grouped into warp-level requests.

:class:`Counter` is an observer of the launch's events
(:mod:`jaxptx.sim.core.observers`): ``before_step`` ahead of every step
(one PC, the threads at it) and ``access`` for every gather or scatter the
instruction's semantics make. The accesses of one step are one
instruction's, so when the next step starts (or the launch ends) they are
turned into requests (:mod:`.requests`) for that instruction's line.
Nothing here runs when a launch is not profiled. Importing this module
registers :func:`attach` with the emulator (``jaxptx.sim.device.PROFILER``),
which does not import the layers above it.
"""

from __future__ import annotations

import weakref

from typing import Any

import numpy as np

from .. import ir
from ..sim import device as _device
from ..sim.core.observers import Observer
from ..isa import UNITS
from ..isa.encodings import EncodingError, InstrDesc
from ..sim.errors import SimError
from . import mix, requests
from .requests import LineCounts

__all__ = ["Counter", "attach"]

# Per prepared program (by id, held weakly), the Kind of each instruction: a
# program launched again (the device caches them) needs no second pass over
# its code.
_KINDS: dict[int, tuple[Any, list[mix.Kind]]] = {}


def _kinds(program: Any) -> list[mix.Kind]:
    """The :class:`.mix.Kind` of each instruction of ``program``, cached."""
    hit = _KINDS.get(id(program))
    if hit is not None and hit[0]() is program:
        return hit[1]
    kinds = [mix.kind_of(r, ins) for r, ins in zip(program.resolved, program.code)]
    if len(_KINDS) > 16:
        _KINDS.clear()
    _KINDS[id(program)] = (weakref.ref(program), kinds)
    return kinds


def attach(machine: Any, module: ir.Module) -> "Counter":
    """Hook a :class:`Counter` into a prepared machine (``Device._run``)."""
    return machine.observe(Counter(machine, module))


class Counter(Observer):
    """Counts of one launch, per PC (see the module docstring).

    Attributes:
        executions: warp-level executions per PC (a warp with at least one
            thread at the PC counts once, as Nsight's ``inst_executed``).
        lanes: threads at the PC, summed over executions.
        active: threads whose guard let them execute (predicated on).
        counts: per PC the memory and tensor counts (:class:`.requests.LineCounts`).
    """

    def __init__(self, machine: Any, module: ir.Module) -> None:
        self.m = machine
        self.module = module
        program = machine.program
        n = len(program.code)
        self.ntid = machine.ntid
        self.nthreads = machine.nthreads
        self.total_warps = machine.nctas * machine.warps_per_cta
        self.executions = [0] * n
        self.lanes = [0] * n
        self.active = [0] * n
        self.counts: list[LineCounts | None] = [None] * n
        self.kinds = _kinds(program)
        self.guards = [None if ins is None else ins.guard for ins in program.code]
        self.pending: list[tuple] = []
        self.pc = -1
        self.tensor_flops: dict[str, int] = {}       # element type -> FLOPs
        self.unknown: dict[int, str] = {}             # pc -> why its tensor FLOPs are not counted
        self.samples: dict[int, requests.Sample] = {}   # pc -> one warp's shared access
        self.touched: dict[int, np.ndarray] = {}      # global buffer id -> sectors ever touched
        self._buffers: dict[int, int] = {}
        self._warp_shift = 5 if self.ntid % 32 == 0 else None

    # hooks -----------------------------------------------------------------------
    def before_step(self, pc: int, threads: np.ndarray) -> None:
        """The machine is about to run ``pc`` on ``threads`` (ascending)."""
        if self.pending:
            self.flush()
        self.pc = pc
        n = len(threads)
        if n == self.nthreads:
            warps = self.total_warps
        else:
            w = self.warp_of(threads)
            warps = 1 + int(np.count_nonzero(w[1:] != w[:-1])) if n else 0
        self.executions[pc] += warps
        self.lanes[pc] += n
        guard = self.guards[pc]
        kind = self.kinds[pc]
        if guard is None or not n:
            self.active[pc] += n
            if kind.flops_per_issue is not None and n:
                self._tensor(pc, kind, threads)
            return
        g = self.m.regs.get(guard.register.name)
        if g is None:
            self.active[pc] += n
            taken = threads
        else:
            g = g if n == self.nthreads else g[threads]
            on = int(np.count_nonzero(g))              # (counted, not gathered: the common case)
            self.active[pc] += n - on if guard.negated else on
            if kind.flops_per_issue is None:
                return
            g = g.astype(bool)
            taken = threads[~g if guard.negated else g]
        if kind.flops_per_issue is not None and len(taken):
            self._tensor(pc, kind, taken)

    def access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, kind: str,
               values: np.ndarray | None = None) -> None:
        """One gather or scatter of the current instruction."""
        self.pending.append((buf, off, threads, width, kind))

    # requests --------------------------------------------------------------------------
    def warp_of(self, threads: np.ndarray) -> np.ndarray:
        """Global warp index of each thread."""
        if self._warp_shift is not None:
            return threads >> 5
        ntid = self.ntid
        return (threads // ntid) * ((ntid + 31) // 32) + (threads % ntid) // 32

    def buffer_id(self, buf: np.ndarray) -> int:
        """A small number for a global buffer (sector keys of different
        buffers never meet)."""
        k = self._buffers.get(id(buf))
        if k is None:
            k = self._buffers[id(buf)] = len(self._buffers)
        return k

    def flush(self) -> None:
        """Turn the pending accesses of the last instruction into requests."""
        records, self.pending = self.pending, []
        pc = self.pc
        if pc < 0:
            return
        line = self.counts[pc]
        if line is None:
            line = self.counts[pc] = LineCounts()
        requests.count(self, pc, line, records)

    def _tensor(self, pc: int, kind: "mix.Kind", taken: np.ndarray) -> None:
        """FLOPs of a tensor-core instruction: per warp (``mma.sync``,
        ``wmma``), per warpgroup (``wgmma``) or per issuing thread
        (``tcgen05.mma``, whose shape is in its instruction descriptor)."""
        if UNITS[kind.name].async_reads == "tcgen05":      # tcgen05.mma: the shape is in its descriptor
            flops = _tcgen05_flops(self, pc, taken)
            for elem, f in flops.items():
                self.tensor_flops[elem] = self.tensor_flops.get(elem, 0) + f
            line = self.counts[pc] or LineCounts()
            self.counts[pc] = line
            line.tensor_flops += sum(flops.values())
            return
        w = self.warp_of(taken)
        units = 1 + int(np.count_nonzero(w[1:] != w[:-1]))
        if kind.per_warpgroup:
            g = w >> 2 if self._warp_shift is not None else w // 4
            units = 1 + int(np.count_nonzero(g[1:] != g[:-1]))
        flops = units * kind.flops_per_issue
        self.tensor_flops[kind.element] = self.tensor_flops.get(kind.element, 0) + flops
        line = self.counts[pc] or LineCounts()
        self.counts[pc] = line
        line.tensor_flops += flops

    def result(self, findings: list | None = None) -> Any:
        """The :class:`~.report.Profile` of the finished launch."""
        if self.pending:
            self.flush()
        from .report import build
        return build(self, findings)


def _tcgen05_flops(c: Counter, pc: int, taken: np.ndarray) -> dict[str, int]:
    """``2 * M * N * K`` of each issuing thread's ``tcgen05.mma`` (M, N from
    its instruction descriptor, K from the kind; PTX ISA "Instruction
    descriptor"), by A's element type. A descriptor that cannot be read or
    decoded adds nothing and leaves its reason in ``c.unknown[pc]`` (the
    line's ``tensor_flops_unknown``); the launch itself refuses it next."""
    from ..sim.core.step import Step
    from ..types import TYPES
    m = c.m
    ins, r = m.program.code[pc], m.program.resolved[pc]
    s = Step(m, ins, r, taken)
    kind = s.mod("kind")
    cta_group = 2 if s.mod("cta_group") == "cta_group::2" else 1
    ws = ins.opcode.endswith(".ws")
    try:
        words = s.src(3, TYPES["u32"]).astype(np.int64)
    except SimError as e:
        c.unknown[pc] = f"instruction descriptor not read: {e}"
        return {}
    out: dict[str, int] = {}
    values, counts = np.unique(words, return_counts=True)
    for word, count in zip(values.tolist(), counts.tolist()):
        try:
            d = InstrDesc.decode(word, kind)
            d.check_shape(cta_group, ws)
        except EncodingError as e:
            c.unknown[pc] = f"instruction descriptor {word:#010x}: {e}"
            continue
        out[d.atype] = out.get(d.atype, 0) + 2 * d.m * d.n * d.k * count
    return out


_device.PROFILER[0] = attach

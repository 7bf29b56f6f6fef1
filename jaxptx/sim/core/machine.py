"""The SIMT machine: every thread of the grid at once, one instruction at a time.

Each thread has its own registers (numpy arrays over all threads) and its
own program counter. While all running threads share one PC the machine
executes it for all of them; after a divergent branch it runs the smallest
PC among the running threads for the threads at that PC, so paths
reconverge where they meet again, for any control flow. ``bar.sync`` parks
threads until every running thread of their CTA (or the barrier's count)
has arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ... import ir
from .barriers import CLUSTER_BARRIER, EXITED, RUNNING, WAITING, arrive, deadlock, everyone, release
from .calls import call, return_
from ..memory.spaces import Memory
from .program import Program, Variable
from ..errors import SimError
from .sanitizer import Sanitizer
from .step import Step
from .registers import RegisterFile, SpecialRegisters

__all__ = ["Machine", "MACHINE", "NO_OPS"]

MACHINE = frozenset(["bra", "brx_idx", "call", "ret", "exit", "trap", "bar_sync", "bar_red", "bar_arrive",
                     "barrier_cluster_arrive", "barrier_cluster_wait"])
"""``sim`` names the machine executes itself: they change program counters or
thread states, so no semantics function can run them."""

NO_OPS = frozenset(["fence", "fence_proxy", "prefetch", "nanosleep", "pmevent", "griddepcontrol",
                    "bar_warp_sync", "setmaxnreg", "brkpt"])
"""``sim`` names with no effect on the emulator: it completes every memory
operation in program order, has no caches to prefetch into and no register
allocation to change."""

_BARRIERS = ("bar_sync", "bar_red", "bar_arrive")
_NOT_PLAIN = MACHINE | NO_OPS
_NO_PC = np.iinfo(np.int64).max     # above every PC: a thread that does not run now


class Machine:
    """One launch of a prepared program.

    Attributes:
        program: the kernel. memory: its address spaces.
        semantics: ``sim`` name → semantics function (the registry of
            :mod:`jaxptx.sim.semantics`; passed in, so that the machine core
            does not depend on the instruction families).
        grid, block: launch dims; ``ntid`` threads per CTA, ``nthreads`` in all.
        max_steps: a bound on executed steps (a guard against endless loops).
    """

    def __init__(self, program: Program, grid: tuple[int, int, int], block: tuple[int, int, int],
                 memory: Memory, semantics: Mapping[str, Callable], *, cluster: tuple[int, int, int] = (1, 1, 1), dynamic_smem: int = 0,
                 global_bases: dict[str, int] | None = None, max_steps: int = 50_000_000,
                 check: bool = False) -> None:
        self.program = program
        self.semantics = semantics
        self.grid = grid
        self.block = block
        self.cluster = cluster
        self.dynamic_smem = dynamic_smem
        self.global_bases = global_bases or {}
        self.memory = memory
        self.ntid = block[0] * block[1] * block[2]
        self.nctas = grid[0] * grid[1] * grid[2]
        self.nthreads = self.ntid * self.nctas
        self.warps_per_cta = -(-self.ntid // 32)
        self.max_steps = max_steps
        self.regs = RegisterFile(program.registers, self.nthreads)
        self.pc = np.zeros(self.nthreads, dtype=np.int64)
        self.state = np.zeros(self.nthreads, dtype=np.int8)
        self.barrier = np.full(self.nthreads, -1, dtype=np.int64)
        self.barrier_count = np.zeros(self.nthreads, dtype=np.int64)
        # bar.red: each waiting thread's predicate and the PC of its bar.red
        # (-1 for bar.sync); bar.arrive: arrivals without waiting per (CTA, barrier).
        self.barrier_pred = np.zeros(self.nthreads, dtype=bool)
        self.barrier_pc = np.full(self.nthreads, -1, dtype=np.int64)
        self.arrived = np.zeros(self.nctas * 16, dtype=np.int64)
        self.all_threads = np.arange(self.nthreads)
        self.frames: dict[str, np.ndarray] = {}   # function -> calling PC per thread (-1: not in it)
        self.current_pc: int | None = None
        self.sanitizer = Sanitizer(self) if check else None
        memory.cluster_cta = self.cluster_cta
        self.cluster_arrivals = np.zeros(self.nctas, dtype=np.int64)   # by rank-0 CTA
        # Threads whose last mbarrier test_wait / try_wait found their phase
        # incomplete: they yield to the other running threads until every
        # running thread is spinning, so a spin loop at a low PC cannot starve
        # the thread that would complete the phase.
        self.spinning = np.zeros(self.nthreads, dtype=bool)
        # Checks run when every thread has exited (tensor memory leaks); state
        # that needs one registers it here.
        self.exit_checks: list[Callable[["Machine"], None]] = []
        if self.sanitizer is not None:
            memory.watch = self.sanitizer.shared_access
        self._special = SpecialRegisters(self)
        # Per PC: the semantics function of an instruction that only computes
        # (the machine's own control-flow and barrier names excluded), else None.
        self._plain = [semantics.get(r.inst.sim) if r is not None and r.inst.sim not in _NOT_PLAIN
                       else None for r in program.resolved]

    def close(self) -> None:
        """Drop the per-thread state and the references back to the machine
        (memory hooks, special registers, sanitizer). Without this the
        machine and its megabytes of registers live in a reference cycle
        until the cycle collector runs, and every launch maps fresh pages."""
        self.memory.cluster_cta = lambda cta, rank: cta
        self.memory.watch = None
        self._special = None
        self.sanitizer = None
        self.regs = None
        self.frames = {}

    # registers ---------------------------------------------------------------
    def read_register(self, name: str, threads: np.ndarray) -> np.ndarray:
        """Raw bits of register ``name`` (or a special register) for ``threads``."""
        reg = self.regs.get(name)
        if reg is not None:
            if self.sanitizer is not None:
                self.sanitizer.read_register(name, threads)
            return reg if len(threads) == self.nthreads else reg[threads]
        return self._special.read(name, threads)

    def write_register(self, name: str, threads: np.ndarray, bits: np.ndarray) -> None:
        """Write raw bits to register ``name`` for ``threads``."""
        if name not in self.regs.dtypes:
            raise SimError(f"write to undeclared register {name}")
        if len(threads) == self.nthreads:
            self.regs.replace(name, bits)
        else:
            self.regs.get(name)[threads] = bits
        if self.sanitizer is not None:
            self.sanitizer.write_register(name, threads)

    def register_width(self, name: str) -> int:
        """Bits of register ``name``'s storage."""
        dtype = self.regs.dtypes.get(name)
        if dtype is None:
            raise SimError(f"write to undeclared register {name}")
        return 1 if dtype == np.bool_ else dtype.itemsize * 8

    def variable_address(self, v: Variable) -> int:
        """A variable's address in its own space."""
        if v.space == "global":
            return self.global_bases[v.name]
        if v.space == "shared" and v.offset < 0:    # the .extern dynamic array
            return -(-self.program.shared_size // 16) * 16
        return v.offset

    def cluster_first(self, cta: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of rank 0 in each CTA's cluster."""
        gx, gy, _ = self.grid
        cx, cy, cz = self.cluster
        x, y, z = cta % gx, (cta // gx) % gy, cta // (gx * gy)
        return (x - x % cx) + gx * ((y - y % cy) + gy * (z - z % cz))

    def cluster_cta(self, cta: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Linear index of the CTA of ``rank`` in each CTA's cluster."""
        gx, gy, _ = self.grid
        cx, cy, _ = self.cluster
        first = self.cluster_first(cta)
        return first + rank % cx + gx * ((rank // cx) % cy) + gx * gy * (rank // (cx * cy))

    def cluster_register(self, base: str, axis: int, cta: np.ndarray) -> np.ndarray:
        """``%cluster_ctarank`` and friends for CTAs ``cta``."""
        gx, gy, _ = self.grid
        cx, cy, cz = self.cluster
        pos = (cta % gx, (cta // gx) % gy, cta // (gx * gy))
        inner = (pos[0] % cx, pos[1] % cy, pos[2] % cz)
        outer = (pos[0] // cx, pos[1] // cy, pos[2] // cz)
        if base == "cluster_ctarank":
            return inner[0] + cx * (inner[1] + cy * inner[2])
        if base == "cluster_nctarank":
            return np.full(len(cta), cx * cy * cz)
        if base == "cluster_ctaid":
            return inner[axis]
        if base == "cluster_nctaid":
            return np.full(len(cta), self.cluster[axis])
        if base == "clusterid":
            return outer[axis]
        return np.full(len(cta), (self.grid[axis] // self.cluster[axis]))

    # execution -----------------------------------------------------------------
    def run(self) -> None:
        """Run until every thread has exited.

        Raises:
            SimError: a fault, an unsupported instruction, a deadlock at a
                barrier, or more than ``max_steps`` steps.
        """
        code = self.program.code
        steps = 0
        uniform = 0        # the PC all running threads share, or None
        running = self.all_threads
        while True:
            if uniform is not None:
                pc, threads = uniform, running
            else:
                live = self.state == RUNNING
                if not live.any():
                    if (self.state == WAITING).any():
                        raise SimError(deadlock(self))
                    for check in self.exit_checks:
                        check(self)
                    return
                ready = live
                if self.spinning.any():
                    ready = live & ~self.spinning
                    if not ready.any():
                        self.spinning[:] = False
                        ready = live
                pcs = np.where(ready, self.pc, _NO_PC)
                pc = int(pcs.min())
                threads = np.flatnonzero(pcs == pc)
                running = None
            if pc >= len(code):
                raise SimError(f"{self.program.name}: ran past the end of the kernel (missing ret?)")
            steps += 1
            if steps > self.max_steps:
                raise SimError(f"{self.program.name}: more than {self.max_steps} steps; endless loop?")
            uniform, running = self._execute(pc, threads, uniform is not None, running)

    def _execute(self, pc: int, threads: np.ndarray, was_uniform: bool, running):
        self.current_pc = pc
        fn = self._plain[pc]
        if fn is not None:
            return self._execute_plain(fn, pc, threads, was_uniform)
        ins = self.program.code[pc]
        taken = threads
        if ins.guard is not None:
            g = self.read_register(ins.guard.register.name, threads).astype(bool)
            taken = threads[~g] if ins.guard.negated else threads[g]
        r = self.program.resolved[pc]
        sim = r.inst.sim if r is not None else None
        target = None
        if sim == "bra":
            target = self._label(ins.operands[0])
        elif sim == "brx_idx":
            target = self._indexed_target(Step(self, ins, r, taken))
        elif sim == "trap":
            if len(taken):
                raise SimError(f"{self.program.name}: trap executed by {_threads(self, taken)}"
                               f"{_where(ins)}")
        elif sim == "call":
            target = call(Step(self, ins, r, taken), pc)
        elif sim == "ret" and self.program.function_of[pc]:
            return_(Step(self, ins, r, taken), self.program.function_of[pc])
        elif sim in ("ret", "exit"):
            self.state[taken] = EXITED
        elif sim == "bar_sync" and len(ins.operands) == 1 and everyone(self, was_uniform, taken):
            # Every live thread of every CTA is here: the barrier completes at once.
            if self.sanitizer is not None:
                self.sanitizer.barrier_released(np.arange(self.nctas))
            return pc + 1, threads
        elif sim in _BARRIERS:
            arrive(self, Step(self, ins, r, taken), pc)
        elif sim == "barrier_cluster_arrive":
            np.add.at(self.cluster_arrivals, self.cluster_first(taken // self.ntid), 1)
        elif sim == "barrier_cluster_wait":
            self.state[taken] = WAITING
            self.barrier[taken] = CLUSTER_BARRIER
        elif sim in NO_OPS:
            pass
        elif sim is None or sim not in self.semantics:
            raise SimError(f"{self.program.name}: the emulator does not run {ins.name} yet")
        elif len(taken):
            try:
                self.semantics[sim](Step(self, ins, r, taken))
            except SimError as e:
                raise _located(e, ins) from None
        if sim == "ret" and self.program.function_of[pc]:
            sim = "returned"      # the PCs are set; reconverge below like any step
            self.pc[threads[~np.isin(threads, taken)]] = pc + 1
            live = self.state == RUNNING
            if len(threads) == int(live.sum()):
                pcs = self.pc[threads]
                if (pcs == pcs[0]).all():
                    return int(pcs[0]), threads
            return None, None
        # next PCs
        if was_uniform and (len(taken) == len(threads) or len(taken) == 0) and \
                sim not in ("ret", "exit", "barrier_cluster_wait", *_BARRIERS) and \
                not isinstance(target, np.ndarray):
            nxt = target if (target is not None and len(taken)) else pc + 1
            return nxt, threads
        self._set_pc(threads, pc + 1)
        if target is not None:
            self.pc[taken] = target
        if sim in _BARRIERS or sim == "barrier_cluster_wait":
            release(self)
        live = self.state == RUNNING
        if sim not in ("ret", "exit", "barrier_cluster_wait", *_BARRIERS) and len(threads) == int(live.sum()):
            pcs = self.pc[threads]
            if (pcs == pcs[0]).all():
                return int(pcs[0]), threads
        return None, None

    def _execute_plain(self, fn, pc: int, threads: np.ndarray, was_uniform: bool):
        """An instruction that computes (no control flow, no barrier): run
        its semantics; every executing thread goes on to ``pc + 1``."""
        ins = self.program.code[pc]
        taken = threads
        if ins.guard is not None:
            g = self.read_register(ins.guard.register.name, threads).astype(bool)
            taken = threads[~g] if ins.guard.negated else threads[g]
        if len(taken):
            try:
                fn(Step(self, ins, self.program.resolved[pc], taken))
            except SimError as e:
                raise _located(e, ins) from None
        if was_uniform:
            return pc + 1, threads
        self._set_pc(threads, pc + 1)
        if len(threads) == int(np.count_nonzero(self.state == RUNNING)):
            return pc + 1, threads
        return None, None

    def _set_pc(self, threads: np.ndarray, pc: int) -> None:
        if len(threads) == self.nthreads:       # then threads is every thread, in order
            self.pc.fill(pc)
        else:
            self.pc[threads] = pc

    def _indexed_target(self, s: Step) -> int | np.ndarray:
        """``brx.idx index, tlist``: each thread's entry of the
        ``.branchtargets`` list (PTX ISA, brx.idx: an index past the list's
        end is undefined behaviour; the emulator faults)."""
        op = s.ins.operands[1]
        table = self.program.branch_tables.get(op.name) if isinstance(op, ir.Symbol) else None
        if table is None:
            raise SimError(f"{self.program.name}: brx.idx: {op!r} names no .branchtargets list")
        index = s.src(0).astype(np.int64)
        bad = index >= len(table)
        if bad.any():
            t = s.threads[np.flatnonzero(bad)[0]]
            raise SimError(f"{self.program.name}: brx.idx index {index[bad][0]} is past the end of "
                           f"{op.name} ({len(table)} targets), {_threads(self, np.array([t]))}")
        targets = np.asarray(table, dtype=np.int64)[index]
        return int(targets[0]) if (targets == targets[0]).all() else targets

    def _label(self, op: ir.Operand) -> int:
        if not isinstance(op, ir.Symbol) or op.name not in self.program.labels:
            raise SimError(f"{self.program.name}: branch to unknown label {op!r}")
        return self.program.labels[op.name]


def _threads(m: Machine, threads: np.ndarray) -> str:
    """``thread (x, y, z) of CTA (x, y, z)`` for the first of ``threads``, and
    how many others."""
    t = int(threads[0])
    cta, tid = divmod(t, m.ntid)
    bx, by, _ = m.block
    gx, gy, _ = m.grid
    where = (f"thread ({tid % bx}, {tid // bx % by}, {tid // (bx * by)}) of CTA "
             f"({cta % gx}, {cta // gx % gy}, {cta // (gx * gy)})")
    return where + (f" and {len(threads) - 1} other threads" if len(threads) > 1 else "")


def _where(ins: ir.Instruction) -> str:
    """`` [PTX line N]`` for parsed PTX, `` [file:line]`` for a traced kernel."""
    if ins.loc and len(ins.loc) == 3:
        return f" [PTX line {ins.loc[1]}]"
    if ins.loc and len(ins.loc) == 2:
        return f" [{ins.loc[0]}:{ins.loc[1]}]"
    return ""


def _located(e: SimError, ins: ir.Instruction) -> SimError:
    """The same error with the instruction's PTX line appended (once)."""
    if "PTX line" in str(e) or not (ins.loc and len(ins.loc) == 3):
        return e
    return type(e)(f"{e} [PTX line {ins.loc[1]}]")

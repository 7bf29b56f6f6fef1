"""The SIMT machine: every thread of the grid at once, one instruction at a time.

Each thread has its own registers (numpy arrays over all threads) and its
own program counter. Running threads are kept in groups by PC
(:attr:`Machine.groups`); each step runs the group with the smallest PC, so
after a divergent branch paths reconverge where they meet again, for any
control flow, and a step costs the same however many other threads wait.
``bar.sync`` makes threads wait until every live thread of their CTA (or
the barrier's count) has arrived; a failed ``mbarrier.try_wait`` parks its
threads until the mbarrier's phase changes; loops that change nothing are
found and put aside. When no thread can make progress the launch stops with
an error naming what each thread waits on (:mod:`.hangs` has the rule).

A loop whose condition is constant for its type (``setp.ge.u32 p, r, 0``
guarding its backward branch) stops the launch the first time a thread
takes that branch (:mod:`.endless` has the proof).

``max_steps`` bounds the steps of a launch (``sim.launch(max_steps=...)``,
``Device.launch(max_steps=...)``); when a launch does not pass one, the
environment variable ``JAXPTX_SIM_MAX_STEPS`` sets it (the JAX CPU path
reads it this way), else 50,000,000. ``max_seconds`` (``JAXPTX_SIM_TIMEOUT``)
bounds its wall time, and a launch that runs longer than a few seconds
reports its progress (:mod:`.progress`).

This module is the scheduler: the loop that picks the next group of threads
and the instructions that move threads (branches, calls, barriers, exits).
The per-thread state it runs on, and what semantics call on the machine,
are :class:`.launch_state.LaunchState`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ... import ir, isa
from ...launch import Launch
from .barriers import CLUSTER_BARRIER, EXITED, RUNNING, WAITING, arrive, everyone, release, warp_sync
from .calls import call, return_
from .endless import endless_loop
from .hangs import MAX_STEPS_ENV, CycleWatch, default_max_steps, hang_message, running_message, shared_state
from .naming import first_thread, located, source_lines, thread_ranges, where
from .launch_state import LaunchState
from ..memory.spaces import Memory
from .progress import Clock, default_max_seconds, instruction_text, progress_seconds
from .program import Program
from .scheduled import MACHINE, NO_OPS
from .schedules import RandomSchedule
from ..errors import SimDeadlock, SimError, SimFault
from .forensics import stuck_warps, table
from .step import Step, plans
from . import fastpaths

__all__ = ["Machine", "MACHINE", "NO_OPS", "MAX_STEPS_ENV"]

_BARRIERS = ("bar_sync", "bar_red", "bar_arrive")
RANDOM_FIRST_SAMPLE = 256      # steps before a random schedule's first look for spinning warps
_NOT_PLAIN = MACHINE | NO_OPS
_EMPTY = np.zeros(0, dtype=np.int64)
_NO_TURN = 1 << 62          # a step no launch reaches: a lone launch's turn never ends


class Machine(LaunchState):
    """One launch of a prepared program: the scheduler over its
    :class:`.launch_state.LaunchState` (whose attributes it has).

    Attributes:
        max_steps: a bound on executed steps (``None``: :func:`default_max_steps`).
        max_seconds: a bound on :meth:`run`'s wall time in seconds (``None``
            passed: :func:`.progress.default_max_seconds`; ``None`` here: no bound).
        progress_every: seconds between progress reports (``None``: none;
            :func:`.progress.progress_seconds` says).
        clock: the running launch's :class:`.progress.Clock` (``None``
            before :meth:`run`).
        watch: the :class:`.hangs.CycleWatch` that finds loops changing nothing.
        schedule: ``None`` (each step runs every thread at the smallest PC)
            or the :class:`.schedules.RandomSchedule` of ``schedule="random"``
            with ``seed``.
        residency: with ``max_resident_ctas`` below the grid's CTAs, the
            :class:`.launch_state.Residency` saying which clusters run; a
            cluster whose threads have all exited frees its slot, and the
            next waiting cluster starts at the first instruction.

    Tools watching the launch join it with :meth:`observe` before :meth:`run`
    and hear its events (:mod:`.observers`).
    """

    def __init__(self, program: Program, launch: Launch, memory: Memory, semantics: Mapping[str, Callable], *,
                 global_bases: dict[str, int] | None = None, max_steps: int | None = None,
                 check: bool = False, max_seconds: float | None = None, schedule: str | None = None,
                 seed: int | None = None, max_resident_ctas: int | None = None) -> None:
        super().__init__(program, launch, memory, semantics, global_bases=global_bases, check=check,
                         max_resident_ctas=max_resident_ctas)
        self.max_steps = default_max_steps() if max_steps is None else max_steps
        self.max_seconds = default_max_seconds() if max_seconds is None else max_seconds
        self.progress_every = progress_seconds()
        self.clock: Clock | None = None
        self._exits: set[int] = set()       # PCs of backward branches whose loops may be left
        self._probe: bytes | None = None     # shared state when parked threads last ran again
        self._on_begin = self._on_after = None      # the observers' begin/after hooks while running
        # Which threads run next: None, every thread at the smallest PC (the
        # default schedule); else a RandomSchedule (schedule="random").
        self.schedule = RandomSchedule(self, seed) if schedule == "random" else None
        # A random schedule runs one warp a step, so a spinning warp holds
        # the others back sooner: look for spins sooner too.
        self.watch = CycleWatch(self, first=None if self.schedule is None else RANDOM_FIRST_SAMPLE)
        # Per PC: the semantics function of an instruction that only computes
        # (the machine's own control-flow and barrier names excluded), else
        # None; and the end of the straight run of unguarded such
        # instructions from there (_straight).
        self._plain, self._runs = _plain_table(program, semantics)
        self._plans = plans(program)        # per PC: what its Steps know in advance

    def close(self) -> None:
        """Drop the launch's state (:meth:`.launch_state.LaunchState.close`)
        and the scheduler's references back to the machine."""
        super().close()
        self._on_begin = self._on_after = None
        self.schedule = None
        self.watch = None
        self.clock = None

    # execution -----------------------------------------------------------------
    def run(self) -> None:
        """Run until every thread has exited, reporting progress when it
        takes long (:mod:`.progress`).

        Raises:
            SimError: a fault, an unsupported instruction, a hang (no thread
                can make progress), a loop that cannot be left, more than
                ``max_steps`` steps, or more than ``max_seconds`` of wall time.
        """
        self.start()
        ok = False
        try:
            self._run()
            ok = True
        finally:
            self.clock.finish(ok)

    def start(self) -> None:
        """Start the launch's clock: what :meth:`run` does first, and what a
        node (:class:`jaxptx.sim.System`) does before it calls :meth:`run_until`."""
        self.clock = Clock(self, self.max_seconds, self.progress_every)

    def run_until(self, steps: int) -> bool:
        """Run until the launch has taken ``steps`` steps or no thread is
        ready (a node's turn: the node runs its devices' machines in turns,
        and decides what a stall means, :meth:`unstall`). After
        :meth:`start`.

        Returns:
            True when every thread has exited (the exit checks have run).

        Raises:
            SimError: as :meth:`run`, except that a stall returns instead of
                raising :class:`SimDeadlock`.
        """
        return self._run(steps)

    def _run(self, until: int | None = None) -> bool:
        """:meth:`run`'s loop; with ``until``, :meth:`run_until`'s. The turn's
        bound shares the comparison that bounds ``max_steps`` and the clock,
        so a step pays nothing for it."""
        code = self.program.code
        plain = self._plain
        groups = self.groups
        watch = self.watch
        limit = self.max_steps
        clock = self.clock
        # One comparison a step serves max_steps, the clock's next look and a node's turn.
        turn = _NO_TURN if until is None else until + 1       # the first step of the next turn
        stop = min(limit + 1, clock.next, turn)
        steps, thread_steps = self.steps, self.thread_steps
        schedule = self.schedule
        before = self.observers.hook("before_step")
        self._on_begin = self.observers.hook("begin")
        self._on_after = self.observers.hook("after")
        runs = self._runs
        # Straight runs of plain instructions go back to back (_straight)
        # under the default schedule; tools that hear per-step events
        # (before_step, begin, after) hear each of the run's steps there too.
        straight = schedule is None and fastpaths.on()
        while True:
            if not groups:
                self.steps, self.thread_steps = steps, thread_steps
                if until is not None:
                    if (self.state != EXITED).any():
                        return False        # stalled: the node decides (unstall)
                elif self._stalled(steps):
                    continue
                if schedule is not None:
                    schedule.deferred.complete_all()     # the grid completes with its copies
                for check in self.exit_checks:
                    check(self)
                return True
            steps += 1
            if schedule is not None:
                pc, threads = schedule.pick(groups, steps)
                self._take(pc, threads)
            elif len(groups) == 1:
                pc, threads = groups.popitem()
            else:
                pc = min(groups)
                threads = groups.pop(pc)
            self.steps = steps          # what %clock reads
            thread_steps += len(threads)
            if steps >= stop:
                self._place(pc, threads)        # where the report and the errors see them
                if steps >= turn:               # the node's turn is over: this step runs next turn
                    self.steps, self.thread_steps = steps - 1, thread_steps - len(threads)
                    return False
                if steps > limit:
                    raise SimError(running_message(self, limit))
                stop = min(limit + 1, clock.look(steps, thread_steps), turn)
                self._take(pc, threads)
            if pc >= len(code):
                raise SimError(f"{self.program.name}: ran past the end of the kernel (missing ret?)")
            self.current_pc = pc
            if before is not None:
                before(pc, threads)
            fn = plain[pc]
            if fn is None:
                self._execute(pc, threads)
            elif straight and not groups and runs[pc] > pc + 1 and not watch.active:
                steps, thread_steps = self._straight(pc, threads, steps, thread_steps, min(stop, watch.next))
            else:
                self._execute_plain(fn, pc, threads)
            if watch.active:
                watch.after(steps, pc, threads)
            elif steps >= watch.next:
                watch.start(steps)

    def _straight(self, pc: int, threads: np.ndarray, steps: int, thread_steps: int,
                  bound: int) -> tuple[int, int]:
        """The fast path of :meth:`_run` (:mod:`.fastpaths`): run the straight
        run of plain unguarded instructions from ``pc`` back to back, without
        putting ``threads`` (every running thread: the only group) back into
        :attr:`groups` between them. Each instruction is a step as the
        scheduler counts it (``%clock``, ``max_steps``); the run stops before
        the step numbered ``bound`` (the scheduler's next look, or the cycle
        watch's next sample), which the scheduler then takes itself, and
        after an instruction that parks threads or wakes others. Called with
        step ``steps`` (the first instruction's) already counted; returns
        the step and thread-step counts after the run, the threads placed
        at the PC where it stopped; the scheduler then ends the last step
        as it ends any other (the cycle watch's look)."""
        code, resolved, plain, plan = self.program.code, self.program.resolved, self._plain, self._plans
        end = self._runs[pc]
        n = len(threads)
        groups = self.groups
        before = self.observers.hook("before_step")     # the scheduler told it of the first step
        begin, after = self._on_begin, self._on_after
        first = True
        while True:
            ins = code[pc]
            if before is not None and not first:
                before(pc, threads)
            first = False
            try:
                step = Step(self, ins, resolved[pc], threads, plan[pc])
                if begin is None and after is None:
                    plain[pc](step)
                else:
                    if begin is not None:
                        begin(pc, step.r.inst.sim)
                    plain[pc](step)
                    if after is not None:
                        after(step.r.inst.sim, step)
            except SimError as e:
                raise located(e, ins) from None
            pc += 1
            if self._parking:
                threads = self._park(threads, pc)
                break
            if groups or pc >= end or steps + 1 >= bound:
                break
            steps += 1
            thread_steps += n
            self.steps = steps
            self.current_pc = pc
        self._place(pc, threads)
        return steps, thread_steps

    def _take(self, pc: int, threads: np.ndarray) -> None:
        """Take running ``threads`` (ascending) out of the group at ``pc``."""
        group = self.groups[pc]
        keep = group[~np.isin(group, threads, assume_unique=True)] if len(group) != len(threads) else group[:0]
        if len(keep):
            self.groups[pc] = keep
        else:
            del self.groups[pc]

    def _stalled(self, steps: int) -> bool:
        """No thread is ready: run parked threads once more, or spinning
        ones whose proof no longer holds; raise when neither can change
        anything (see :mod:`.hangs`). False when every thread has exited."""
        if not (self.state != EXITED).any():
            return False
        if self.unstall():
            return True
        warps = stuck_warps(self)
        raise SimDeadlock(f"{hang_message(self, steps)}{self._not_started()}\n  stuck warps:\n    " +
                          table(warps).replace("\n", "\n    "), warps)

    def _not_started(self) -> str:
        """For a hang message: the CTAs that ``max_resident_ctas`` still keeps waiting."""
        waiting = self.residency.waiting() if self.residency is not None else _EMPTY
        if not len(waiting):
            return ""
        gx, gy, _ = self.grid
        shown = ", ".join(str((c % gx, c // gx % gy, c // (gx * gy))) for c in waiting[:4].tolist())
        more = f" and {len(waiting) - 4} more" if len(waiting) > 4 else ""
        return (f"\n  {len(waiting)} CTAs have not started (max_resident_ctas={self.residency.max_ctas} keeps "
                f"them waiting until a resident CTA exits): {shown}{more}")

    def unstall(self) -> bool:
        """No thread is ready: wake the parked threads if the shared state
        changed since they last ran, else the spinning threads whose proof
        no longer holds (see :mod:`.hangs`). Returns whether any woke; when
        none did, no thread of this launch can make progress until another
        device changes memory it reads."""
        if self.schedule is not None and self.schedule.deferred.complete_all():
            return True         # copies still in flight complete first: a waiter may go on
        proof = shared_state(self)
        if self.parked and proof != self._probe:
            self._probe = proof
            parked = np.sort(np.concatenate([entry[0] for entry in self.parked.values()]))
            self.parked = {}
            self._wake(parked)
            return True
        stale = self.spinners.stale(proof)
        if len(stale):
            self._wake(stale)
            return True
        return False

    def _guard(self, ins: ir.Instruction, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The threads whose guard lets them execute ``ins``, and the rest."""
        if ins.guard is None:
            return threads, _EMPTY
        g = self.read_register(ins.guard.register.name, threads).astype(bool)
        if ins.guard.negated:
            g = ~g
        if g.all():             # every thread executes: no copies of the thread list
            return threads, _EMPTY
        return threads[g], threads[~g]

    def _execute_plain(self, fn: Callable, pc: int, threads: np.ndarray) -> None:
        """An instruction that computes (no control flow, no barrier): run
        its semantics; every executing thread goes on to ``pc + 1``."""
        ins = self.program.code[pc]
        taken = threads
        if ins.guard is not None:
            taken = self._guard(ins, threads)[0]
        if len(taken):
            begin, after = self._on_begin, self._on_after
            try:
                step = Step(self, ins, self.program.resolved[pc], taken, self._plans[pc])
                if begin is not None:
                    begin(pc, step.r.inst.sim)
                fn(step)
                if after is not None:
                    after(step.r.inst.sim, step)
            except SimError as e:
                raise located(e, ins) from None
            if self._parking:
                threads = self._park(threads, pc + 1)
        self._place(pc + 1, threads)

    def _execute(self, pc: int, threads: np.ndarray) -> None:
        """Control flow, barriers, exits and no-ops."""
        ins = self.program.code[pc]
        r = self.program.resolved[pc]
        sim = r.inst.sim if r is not None else None
        taken, rest = self._guard(ins, threads)
        if sim in ("bra", "brx_idx", "call"):
            if len(taken) == 0:
                self._place(pc + 1, rest)
                return
            if sim == "bra":
                target = self._label(ins.operands[0])
                if target <= pc and pc not in self._exits:
                    self._check_loop(pc, target, taken)
            elif sim == "brx_idx":
                target = self._indexed_target(Step(self, ins, r, taken))
            else:
                target = call(Step(self, ins, r, taken), pc)
            self._place(pc + 1, rest)
            if isinstance(target, np.ndarray):
                self.pc[taken] = target
                self._place_at_pcs(taken)
            else:
                self._place(target, taken)
        elif sim == "trap":
            if len(taken):
                raise SimFault(f"{self.program.name}: trap executed by {first_thread(self, taken)}{where(ins)}")
            self._place(pc + 1, threads)
        elif sim == "ret" and self.program.function_of[pc]:
            if len(taken):
                return_(Step(self, ins, r, taken), self.program.function_of[pc])
            self._place(pc + 1, rest)
            self._place_at_pcs(taken)
        elif sim in ("ret", "exit"):
            self.state[taken] = EXITED
            self.pc[taken] = pc
            self._place(pc + 1, rest)
            if self.residency is not None and len(taken):
                self._start(self.residency.exited(taken))
            if len(taken) and (self.state == WAITING).any():
                self._release()         # a barrier may now have every live thread
        elif sim == "bar_sync" and len(rest) == 0 and len(ins.operands) == 1 and everyone(self, taken):
            # Every live thread of every CTA is here: the barrier completes at once.
            self.observers.begin(pc, sim)
            self.observers.aligned_barrier(taken)
            self.observers.everyone_synchronised()
            self._place(pc + 1, threads)
        elif sim in _BARRIERS:
            if len(taken):
                self.observers.begin(pc, sim)
                arrive(self, Step(self, ins, r, taken), pc)
            self.pc[taken] = pc + 1
            self._place(pc + 1, threads[self.state[threads] == RUNNING])
            self._release()
        elif sim == "barrier_cluster_arrive":
            heads = self.cluster_first(taken // self.ntid)
            self.arrived_phase[taken] = self.cluster_phase[heads]
            np.add.at(self.cluster_arrivals, heads, 1)
            self._place(pc + 1, threads)
            self._release()             # the phase may complete (with or without waiters)
        elif sim == "barrier_cluster_wait":
            # A thread that has not arrived waits for the phase open now (its
            # own arrival, which never comes, is part of it).
            fresh = taken[self.arrived_phase[taken] < 0]
            self.arrived_phase[fresh] = self.cluster_phase[self.cluster_first(fresh // self.ntid)]
            self.state[taken] = WAITING
            self.barrier[taken] = CLUSTER_BARRIER
            self.pc[taken] = pc + 1
            self._place(pc + 1, rest)
            self._release()
        elif sim in NO_OPS:
            if len(taken):
                self.observers.begin(pc, sim)
                if sim == "fence_proxy" and "async" in ins.modifiers:
                    self.observers.proxy_fence(taken)
                elif sim == "fence":
                    self.observers.fence(taken)
            self._place(pc + 1, threads)
        elif sim == "bar_warp_sync":
            self._warp_sync(ins, r, pc, threads, taken)
        else:
            raise SimError(f"{self.program.name}: the emulator does not run {ins.name} yet{where(ins)}")

    def _start(self, threads: np.ndarray) -> None:
        """CTAs that were waiting for a resident slot start: ``threads`` run from the first instruction."""
        if len(threads):
            self.state[threads] = RUNNING
            self.pc[threads] = 0
            self._place(0, threads)

    def _warp_sync(self, ins: ir.Instruction, r: isa.Resolved, pc: int, threads: np.ndarray,
                   taken: np.ndarray) -> None:
        """``bar.warp.sync``: lanes whose mask's live lanes are all here go on;
        the others wait for them (a divergent warp's halves may sync at
        different instructions)."""
        go = taken
        if len(taken):
            s = Step(self, ins, r, taken)
            self.observers.begin(pc, "bar_warp_sync")
            self.observers.member_mask(s, waits=True)
            go = warp_sync(self, s, pc)
            if len(go):
                self.observers.warp_sync(go)
        self.pc[taken] = pc + 1
        self._place(pc + 1, threads[self.state[threads] == RUNNING])
        if len(go) != len(taken) or (self.state == WAITING).any():
            self._release()

    def _check_loop(self, pc: int, target: int, taken: np.ndarray) -> None:
        """Stop the launch when ``taken`` threads take the backward branch at
        ``pc`` of a loop that can never be left (:mod:`.endless`)."""
        why = endless_loop(self.program, pc, target)
        if why is None:
            self._exits.add(pc)
        else:
            code = self.program.code
            raise SimError(f"{self.program.name}: endless loop: {thread_ranges(self, taken)} took "
                           f"`{instruction_text(code[pc])}`{where(code[pc])}, the backward branch of the loop at "
                           f"{source_lines(self, range(target, pc + 1))}, and can never leave it: {why}")

    def _release(self) -> None:
        """Run the threads whose barriers completed."""
        self._place_at_pcs(release(self))

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
                           f"{op.name} ({len(table)} targets), {first_thread(self, np.array([t]))}")
        targets = np.asarray(table, dtype=np.int64)[index]
        return int(targets[0]) if (targets == targets[0]).all() else targets

    def _label(self, op: ir.Operand) -> int:
        if not isinstance(op, ir.Symbol) or op.name not in self.program.labels:
            raise SimError(f"{self.program.name}: branch to unknown label {op!r}")
        return self.program.labels[op.name]


def _plain_table(program: Program, semantics: Mapping[str, Callable]) -> tuple[list, list[int]]:
    """Per PC of ``program``: the semantics function of an instruction that
    only computes, else ``None``; and the PC after the straight run of
    unguarded such instructions that starts there (the PC itself when the
    instruction is none of them). Kept on the program across launches."""
    def make() -> tuple[Mapping, list, list[int]]:
        plain = [semantics.get(r.inst.sim) if r is not None and r.inst.sim not in _NOT_PLAIN else None
                 for r in program.resolved]
        runs = [0] * len(plain)
        end = len(plain)
        for pc in range(len(plain) - 1, -1, -1):
            if plain[pc] is None or program.code[pc].guard is not None:
                end = pc
                runs[pc] = pc
            else:
                runs[pc] = end
        return semantics, plain, runs
    held = program.derive(("plain", id(semantics)), make)
    if held[0] is not semantics:            # another mapping at a reused id
        held = program.derived[("plain", id(semantics))] = make()
    return held[1], held[2]

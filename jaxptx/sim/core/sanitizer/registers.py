"""The sanitizer's checks of registers: uninitialised reads, async results read
early, definedness carried by moves."""

from __future__ import annotations

from typing import Any

import numpy as np

from .... import ir
from .values import ASYNC_RESULTS, bits_of, register_move

__all__ = ["RegisterChecks"]


class RegisterChecks:
    """Mixed into :class:`Sanitizer`: registers."""

    def begin(self, pc: int, sim: str | None) -> None:
        """An instruction starts executing."""
        self.pc, self.sim = pc, sim
        self._tma_bytes = []
        self._open_groups = None
        self._moving = (sim == "mov" and register_move(self.m.program.code[pc])) or sim == "selp"
        if self._moving:
            self._quiet = True

    def ignore_reads(self, on: bool) -> None:
        """Suspend register read checks (operands an instruction ignores)."""
        self._quiet = on

    def read_register(self, name: str, threads: np.ndarray) -> None:
        """Check a read of register ``name`` by ``threads``."""
        done = self.written.get(name)
        if done is None or self._quiet:
            return
        if name in self._defined_everywhere:
            bad = None
        else:
            bad = ~done[threads]
            if not bad.any() and len(threads) == len(done):
                self._defined_everywhere.add(name)
        if bad is not None and bad.any():
            t = int(threads[bad][0])
            pc = self.m.current_pc if self.m.current_pc is not None else self.pc   # a guard: before begin()
            self.report("uninitialised", f"read of uninitialised register {name} at {self.at(t, pc)}",
                        self.line(pc))
        pending = self.pending_regs.get(name)
        if pending is not None and ASYNC_RESULTS.get(self.sim) != "wgmma":   # (wgmma chains accumulate in flight)
            kind, tag, pcs = pending
            sel = tag[threads]
            late = sel >= (self.wg_done if kind == "wgmma" else self.ld_done)[threads]
            late &= sel >= 0
            if late.any():
                t = int(threads[late][0])
                wait = "wgmma.wait_group" if kind == "wgmma" else "tcgen05.wait::ld"
                src = "wgmma.mma_async" if kind == "wgmma" else "tcgen05.ld"
                self.report("async", f"read of {name} at {self.at(t)} before the {src} at "
                            f"{self.line(int(pcs[t]))} that writes it completed (no {wait} since)",
                            self.line(self.pc), self.line(int(pcs[t])))

    def write_register(self, name: str, threads: np.ndarray) -> None:
        """Record a write of register ``name`` by ``threads``."""
        done = self.written.get(name)
        if done is None:
            return
        if name not in self._defined_everywhere:
            if len(threads) == len(done):       # every thread (thread sets have no repeats)
                done.fill(True)
                self._defined_everywhere.add(name)
            else:
                done[threads] = True
        kind = ASYNC_RESULTS.get(self.sim)
        pending = self.pending_regs.get(name)
        if kind is None:
            if pending is not None:
                self._early_write(name, threads, pending[1], pending[2],
                                  self.wg_done if pending[0] == "wgmma" else self.ld_done, "writes")
                pending[1][threads] = -1
            flying = self.flying_regs.get(name)
            if flying is not None:
                self._early_write(name, threads, flying[0], flying[1], self.wg_done, "reads")
            return
        if pending is None:
            n = self.m.nthreads
            pending = self.pending_regs[name] = (kind, np.full(n, -1, np.int64), np.zeros(n, np.int64))
        cached = self._open_groups
        if cached is None or cached[0] is not threads:      # (once per instruction: begin() forgets it)
            cached = self._open_groups = (threads,
                                          (self.wg_open if kind == "wgmma" else self.ld_open)[threads])
        pending[1][threads] = cached[1]
        pending[2][threads] = self.pc

    def _flying_operand(self, name: str, threads: np.ndarray) -> None:
        """Register ``name`` is an operand a wgmma reads until it completes."""
        flying = self.flying_regs.get(name)
        if flying is None:
            n = self.m.nthreads
            flying = self.flying_regs[name] = (np.full(n, -1, np.int64), np.zeros(n, np.int64))
        flying[0][threads] = self.wg_open[threads]
        flying[1][threads] = self.pc

    def _early_write(self, name: str, threads: np.ndarray, tag: np.ndarray, pcs: np.ndarray,
                     done: np.ndarray, how: str) -> None:
        """A write of ``name`` while an async instruction that ``how`` it
        (reads or writes) has not completed for the writing thread."""
        t = tag[threads]
        late = (t >= 0) & (t >= done[threads])
        if late.any():
            k = int(threads[late][0])
            src = self.line(int(pcs[k]))
            wait = "tcgen05.wait::ld" if "tcgen05.ld" in src else "wgmma.wait_group"
            self.report("async", f"write of {name} at {self.at(k)} while the async {src} that {how} it "
                        f"has not completed (no {wait} since)", self.line(self.pc), src)

    def _bytes_defined(self, op: Any, threads: np.ndarray, nbytes: int) -> np.ndarray:
        """Per thread, a mask of which of ``op``'s ``nbytes`` bytes hold
        defined values (an immediate: all)."""
        full = np.full(len(threads), (1 << nbytes) - 1, dtype=np.int64)
        name = getattr(op, "name", None)
        done = self.written.get(name) if isinstance(op, ir.Register) else None
        if done is None:
            return full
        partial = self.partial.get(name)
        mask = np.where(done[threads], full, 0)
        return mask if partial is None else np.where(done[threads], mask, partial[threads] & full)

    def _set_defined(self, op: Any, threads: np.ndarray, mask: np.ndarray, nbytes: int) -> None:
        name = getattr(op, "name", None)
        done = self.written.get(name) if isinstance(op, ir.Register) else None
        if done is None:
            return
        whole = mask == (1 << nbytes) - 1
        done[threads] = whole
        if not whole.all():
            self._defined_everywhere.discard(name)
            partial = self.partial.setdefault(name, np.zeros(self.m.nthreads, dtype=np.int64))
            partial[threads] = mask

    def _select_definedness(self, s) -> None:
        """``selp d, a, b, c``: the predicate is used; d is as defined as
        the operand it selects (the other one is not read)."""
        ins, th = s.ins, s.threads
        self.read_register(ins.operands[3].name, th) if isinstance(ins.operands[3], ir.Register) else None
        pick = s.pred(3)
        width = bits_of(ins) // 8
        a = self._bytes_defined(ins.operands[1], th, width)
        b = self._bytes_defined(ins.operands[2], th, width)
        self._set_defined(ins.operands[0], th, np.where(pick, a, b), width)

    def _move_definedness(self, ins: ir.Instruction, threads: np.ndarray) -> None:
        """``mov`` copies, packs (``mov.b64 d, {a, b}``) and unpacks
        (``mov.b64 {a, b}, d``) carry undefined bytes along instead of
        reading them: compilers pack undefined halves on purpose, and only a
        use of an undefined value is a bug."""
        width = bits_of(ins) // 8
        dst, src = ins.operands[0], ins.operands[1]
        if isinstance(src, ir.Vector):
            step = width // len(src.items)
            mask = np.zeros(len(threads), dtype=np.int64)
            for i, item in enumerate(src.items):
                part = self._bytes_defined(item, threads, step)
                mask |= np.where(part == (1 << step) - 1, ((1 << step) - 1) << (i * step), 0)
            self._set_defined(dst, threads, mask, width)
        elif isinstance(dst, ir.Vector):
            step = width // len(dst.items)
            whole = self._bytes_defined(src, threads, width)
            for i, item in enumerate(dst.items):
                part = (whole >> (i * step)) & ((1 << step) - 1)
                self._set_defined(item, threads, np.where(part == (1 << step) - 1, part, 0), step)
        else:
            self._set_defined(dst, threads, self._bytes_defined(src, threads, width), width)

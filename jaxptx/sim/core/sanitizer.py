"""The sanitizer of ``launch(..., check=True)``.

It watches every register read and every shared-memory access:

- a register read before any write to it, by the reading thread;
- a shared-memory read of bytes no thread has written;
- a shared-memory race: two threads of one CTA touching the same byte
  between two barriers, at least one of them writing. Atomics (``atom``,
  ``red``) do not race with each other, but do with a plain load or store
  of the same byte by another thread; an atomic reads, so it also needs
  initialised bytes.

Out-of-bounds accesses and barriers that only part of a CTA reaches are
faults with or without the sanitizer. The first finding raises
:class:`SanitizerError` naming the PTX line, the CTA and thread, and the
register or address.
"""

from __future__ import annotations

import numpy as np

from ..errors import SimError

__all__ = ["Sanitizer", "SanitizerError"]

MANY = -2  # several threads' atomics touched the byte


class SanitizerError(SimError):
    """A bug the sanitizer found (uninitialised read, shared-memory race)."""


class Sanitizer:
    """Shadow state for one launch: which registers and shared bytes are
    initialised, and who last read and wrote each shared byte in which
    barrier epoch of its CTA."""

    def __init__(self, machine) -> None:
        self.m = machine
        n = machine.nthreads
        self.written = {name: np.zeros(n, dtype=bool) for name in machine.regs}
        size = len(machine.memory.shared)
        self.shared_init = np.zeros(size, dtype=bool)
        self.writer = np.full(size, -1, dtype=np.int64)
        self.reader = np.full(size, -1, dtype=np.int64)
        self.write_epoch = np.full(size, -1, dtype=np.int64)
        self.read_epoch = np.full(size, -1, dtype=np.int64)
        # The thread of the atomics on each byte this epoch (MANY: several).
        self.atomic_thread = np.full(size, -1, dtype=np.int64)
        self.atomic_epoch = np.full(size, -1, dtype=np.int64)
        self.epoch = np.zeros(machine.nctas, dtype=np.int64)

    # registers -------------------------------------------------------------------
    def read_register(self, name: str, threads: np.ndarray) -> None:
        done = self.written.get(name)
        if done is None:
            return
        bad = ~done[threads]
        if bad.any():
            t = int(threads[bad][0])
            raise SanitizerError(f"sanitizer: read of uninitialised register {name} {self.where(t)}")

    def write_register(self, name: str, threads: np.ndarray) -> None:
        done = self.written.get(name)
        if done is not None:
            done[threads] = True

    # shared memory ------------------------------------------------------------------
    def shared_access(self, linear: np.ndarray, threads: np.ndarray, width: int, write: bool,
                      atomic: bool = False) -> None:
        """Check and record an access of ``width`` bytes at each flat shared
        index (an atomic read-modify-write when ``atomic``)."""
        size = self.m.memory.shared_size or 1
        cta = (linear // size).astype(np.int64)
        epoch = self.epoch[cta]
        for b in range(width):
            idx = (linear + b).astype(np.int64)
            if atomic:
                self._atomic(idx, threads, epoch)
                continue
            self._race(idx, threads, epoch, write)
            if not write and not self.shared_init[idx].all():
                k = int(np.nonzero(~self.shared_init[idx])[0][0])
                raise SanitizerError(f"sanitizer: read of uninitialised shared memory at offset "
                                     f"{int(idx[k] % size):#x} {self.where(int(threads[k]))}")
            if write:
                self.shared_init[idx] = True
                self.writer[idx] = threads
                self.write_epoch[idx] = epoch
            else:
                self.reader[idx] = threads
                self.read_epoch[idx] = epoch

    def _atomic(self, idx: np.ndarray, threads: np.ndarray, epoch: np.ndarray) -> None:
        size = self.m.memory.shared_size or 1
        if not self.shared_init[idx].all():
            k = int(np.nonzero(~self.shared_init[idx])[0][0])
            raise SanitizerError(f"sanitizer: atomic on uninitialised shared memory at offset "
                                 f"{int(idx[k] % size):#x} {self.where(int(threads[k]))}")
        clash = (((self.write_epoch[idx] == epoch) & (self.writer[idx] != threads)
                  & (self.writer[idx] >= 0))
                 | ((self.read_epoch[idx] == epoch) & (self.reader[idx] != threads)
                    & (self.reader[idx] >= 0)))
        if clash.any():
            k = int(np.nonzero(clash)[0][0])
            raise SanitizerError(f"sanitizer: shared-memory race: atomic on offset "
                                 f"{int(idx[k] % size):#x} {self.where(int(threads[k]))} conflicts "
                                 "with a plain access by another thread of the CTA since the last "
                                 "barrier")
        seen = self.atomic_epoch[idx] == epoch
        order = np.argsort(idx, kind="stable")
        shared_here = np.zeros(len(idx), dtype=bool)   # several threads on one byte in this step
        if len(idx) > 1:
            same = (idx[order][1:] == idx[order][:-1]) & (threads[order][1:] != threads[order][:-1])
            shared_here[order[1:][same]] = shared_here[order[:-1][same]] = True
        many = shared_here | (seen & (self.atomic_thread[idx] != threads))
        self.atomic_thread[idx] = np.where(many, MANY, threads)
        self.atomic_epoch[idx] = epoch

    def _race(self, idx: np.ndarray, threads: np.ndarray, epoch: np.ndarray, write: bool) -> None:
        size = self.m.memory.shared_size or 1
        clash = (self.write_epoch[idx] == epoch) & (self.writer[idx] != threads) & (self.writer[idx] >= 0)
        clash |= ((self.atomic_epoch[idx] == epoch) & (self.atomic_thread[idx] != threads)
                  & (self.atomic_thread[idx] != -1))
        if write:
            clash |= (self.read_epoch[idx] == epoch) & (self.reader[idx] != threads) & (self.reader[idx] >= 0)
        if write and len(idx) > 1:
            order = np.argsort(idx, kind="stable")
            same = idx[order][1:] == idx[order][:-1]
            other = threads[order][1:] != threads[order][:-1]
            if (same & other).any():
                clash[order[1:][same & other]] = True
        if clash.any():
            k = int(np.nonzero(clash)[0][0])
            kind = "write" if write else "read"
            raise SanitizerError(f"sanitizer: shared-memory race: {kind} of offset {int(idx[k] % size):#x} "
                                 f"{self.where(int(threads[k]))} conflicts with another thread of the CTA "
                                 "since the last barrier")

    def barrier_released(self, ctas: np.ndarray) -> None:
        """A barrier completed in ``ctas``: a new epoch begins there."""
        self.epoch[ctas] += 1

    # messages ---------------------------------------------------------------------------
    def where(self, thread: int) -> str:
        m = self.m
        cta, tid = divmod(thread, m.ntid)
        bx, by, _ = m.block
        gx, gy, _ = m.grid
        pc = m.current_pc
        ins = m.program.code[pc] if pc is not None and pc < len(m.program.code) else None
        line = f"PTX line {ins.loc[1]} ({ins.name})" if ins is not None and ins.loc and len(ins.loc) == 3 \
            else (ins.name if ins is not None else "?")
        return (f"at {line}, CTA ({cta % gx}, {(cta // gx) % gy}, {cta // (gx * gy)}) thread "
                f"({tid % bx}, {(tid // bx) % by}, {tid // (bx * by)})")

"""The sanitizer of ``launch(..., check=...)``: a happens-before checker.

It watches every register read and write, every shared-memory access (by
threads and by the async proxy: TMA, bulk copies, ``wgmma``,
``tcgen05.mma``) and every synchronisation, and reports:

- **races**: two accesses to a shared byte by different threads, at least
  one a write, that nothing orders (:mod:`.clocks` says what orders what:
  barriers among their participants only, ``bar.arrive`` as a release,
  ``bar.warp.sync``, mbarrier arrive → phase completion → ``try_wait``,
  ``cp.async.wait_group``, ``wgmma.wait_group``, ``tcgen05.commit``).
  Several threads storing the *same* value is a race only in
  ``check="strict"`` (compilers emit such stores on purpose);
- **async data used too early**: reading a ``cp.async`` destination before
  ``cp.async.wait_group``, a TMA destination before its mbarrier phase is
  observed, ``wgmma`` accumulators before ``wgmma.wait_group``,
  ``tcgen05.ld`` results before ``tcgen05.wait::ld``; overwriting shared
  memory an async copy or MMA is still reading;
- **a missing proxy fence**: a generic-proxy write to shared memory read by
  the async proxy with no ``fence.proxy.async`` after it;
- **uninitialised reads** of registers and shared memory (a register an
  instruction ignores — ``wgmma`` accumulators with scale-d false — is not
  read);
- **barrier divergence**: an ``.aligned`` barrier reached by part of a warp.

Each finding names both accesses (instruction, PTX line or the kernel's
Python line, CTA and thread) and what ordering was missing. ``check=True``
(or ``"strict"``) raises :class:`SanitizerError` at the first finding;
``check="all"`` collects every distinct finding and the launch returns
them. Lanes are ordered by program order within a thread only; reads are
remembered per (byte, warp): the last reading lane of each warp.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .... import ir
from ...errors import SimError
from .clocks import Clocks
from .shadow import ASYNC, CP_ASYNC, TMA, SharedShadow

__all__ = ["Sanitizer", "SanitizerError", "Finding", "MODES"]

MODES = (True, "strict", "all")

# Instructions whose shared-memory reads are async-proxy reads, in flight
# until the issuing thread waits: the wait that resolves them.
_ASYNC_READERS = {"wgmma_mma_async": "wgmma", "tcgen05_mma": "tcgen05", "tcgen05_mma_sp": "tcgen05",
                  "tcgen05_cp": "tcgen05"}
_WGMMA_REGS = ("wgmma_mma_async",)
_MASKED = frozenset(["shfl_sync", "vote_sync", "match_all_sync", "match_any_sync", "redux_sync"])


def _register_move(ins: ir.Instruction) -> bool:
    """A ``mov`` between registers (a copy, a pack or an unpack)."""
    return len(ins.operands) == 2 and all(isinstance(o, (ir.Register, ir.Vector)) for o in ins.operands)


def _bits(ins: ir.Instruction) -> int:
    """The width of a ``mov``'s type suffix in bits (``mov.b64``: 64)."""
    for mod in reversed(ins.modifiers):
        digits = "".join(ch for ch in mod if ch.isdigit())
        if digits and mod[0] in "bsuf":
            return int(digits)
    return 32


def _bytes_of(values: np.ndarray, width: int) -> np.ndarray:
    """The little-endian bytes of ``width``-byte values, flattened."""
    v = np.ascontiguousarray(values)
    if v.dtype.itemsize != width:
        v = np.ascontiguousarray(v.astype(f"<u{width}"))
    return v.view(np.uint8).reshape(-1)


def _pack_at(threads: np.ndarray, pc: int, ntid: int) -> np.ndarray:
    """Global thread and PC in one record (thread << 20 | pc)."""
    return (np.asarray(threads, dtype=np.int64) << 20 | pc).astype(np.int64)


def _distinct(threads: np.ndarray) -> np.ndarray:
    """The distinct threads of a per-byte thread array (usually one)."""
    if len(threads) and threads[0] == threads[-1] and (threads == threads[0]).all():
        return threads[:1]
    runs = threads[np.r_[0, np.flatnonzero(threads[1:] != threads[:-1]) + 1]] if len(threads) else threads
    return np.unique(runs)          # per-byte arrays repeat each thread in runs: unique over the runs


_SCOPES = ("gpu", "sys")


def _orders_ctas(ins: ir.Instruction) -> bool:
    """An instruction that can order memory between CTAs: a gpu- or
    system-scope fence, ``membar.gl``/``.sys``, or a release/acquire access."""
    mods = set(ins.modifiers)
    if ins.opcode in ("fence", "membar"):
        return bool(mods & {"gpu", "sys", "gl"})
    return bool(mods & {"release", "acquire", "acq_rel"}) and bool(mods & set(_SCOPES))


class SanitizerError(SimError):
    """A bug the sanitizer found; ``findings`` holds every finding (one with
    ``check=True``)."""

    def __init__(self, message: str, findings: list["Finding"] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


@dataclasses.dataclass(frozen=True)
class Finding:
    """One sanitizer finding.

    Attributes:
        kind: ``race``, ``uninitialised``, ``async`` (async data used before
            its completion was observed), ``proxy`` (missing
            ``fence.proxy.async``) or ``divergence``.
        message: the full report.
        line: where the finding's access is (PTX line or file:line) and
            ``other``: the other access's, when there is one.
    """

    kind: str
    message: str
    line: str
    other: str = ""


class Sanitizer:
    """The shadow state of one launch and the checks on it."""

    def __init__(self, machine, mode: Any = True) -> None:
        self.m = machine
        self.mode = mode
        self.strict = mode == "strict"
        self.findings: list[Finding] = []
        self._seen: set[tuple] = set()
        n = machine.nthreads
        self.ntid = machine.ntid
        self.written = {name: np.zeros(n, dtype=bool) for name in machine.regs}
        self.clocks = Clocks(machine.nctas, machine.ntid)
        self.shadow = SharedShadow(machine.nctas, machine.memory.shared_size, machine.ntid)
        self.sim: str | None = None          # the executing instruction's semantics name
        self.pc = -1
        self._quiet = False
        self._moving = False
        self.partial: dict[str, np.ndarray] = {}   # register -> defined-byte mask where partly defined
        self.reader: int | None = None        # set while an issuer reads through another CTA's window
        memory = machine.memory
        self.local_init = np.zeros(len(memory.local), dtype=bool)
        self._globals = {id(b): k for k, b in enumerate(memory.globals)}
        self._sem_cache: dict[int, tuple[bool, bool, bool]] = {}
        self.location_clocks: dict[tuple, np.ndarray] = {}
        self.pending_acquire: dict[int, tuple] = {}
        self.fenced_threads = np.zeros(machine.nthreads, dtype=bool)
        self._global_shadow: dict[int, tuple[np.ndarray, ...]] = {}
        # Orderings between CTAs come only from gpu-scope fences and
        # release/acquire operations; a kernel with any is not checked across CTAs.
        self.cross_cta = not any(_orders_ctas(ins) for ins in machine.program.code if ins is not None)
        # cp.async groups, wgmma groups, tcgen05.ld issues per thread
        self.cp_open = np.zeros(n, dtype=np.int64)
        self.cp_done = np.zeros(n, dtype=np.int64)
        self.wg_open = np.zeros(n, dtype=np.int64)
        self.wg_done = np.zeros(n, dtype=np.int64)
        self.ld_open = np.zeros(n, dtype=np.int64)
        self.bulk_open = np.zeros(n, dtype=np.int64)
        self.bulk_done = np.zeros(n, dtype=np.int64)
        self.flying_regs: dict[str, tuple[np.ndarray, np.ndarray]] = {}   # wgmma A operands: (group, pc)
        self.ld_done = np.zeros(n, dtype=np.int64)
        self.pending_regs: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}   # name -> (kind, tag, pc)
        # async reads in flight: (kind, group, issuing threads, reader per byte, flat bytes, PC)
        self.in_flight: list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray, int]] = []
        self.completions: dict[int, int] = {}   # mbarrier word -> phases completed
        self._mbar_column: dict[int, int] = {}  # mbarrier word -> its column in the clocks
        self._tma_bytes: list[tuple[np.ndarray, np.ndarray]] = []
        self._cp_pending = False

    # findings ----------------------------------------------------------------------------
    def report(self, kind: str, message: str, line: str, other: str = "") -> None:
        """Record a finding; raise at once unless collecting (``check="all"``)."""
        finding = Finding(kind, "sanitizer: " + message, line, other)
        if self.mode != "all":
            raise SanitizerError(finding.message, [finding])
        key = (kind, line, other)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(finding)

    def at(self, thread: int, pc: int | None = None) -> str:
        """``PTX line 12 (ld.shared.u32), CTA (0, 0, 0) thread (5, 0, 0)``."""
        return f"{self.line(self.pc if pc is None else pc)}, {self.who(thread)}"

    def line(self, pc: int) -> str:
        """Where the instruction at ``pc`` came from, and its name."""
        code = self.m.program.code
        ins = code[pc] if 0 <= pc < len(code) else None
        if ins is None:
            return "?"
        if ins.loc and len(ins.loc) == 3:
            return f"PTX line {ins.loc[1]} ({ins.name})"
        if ins.loc and len(ins.loc) == 2:
            return f"{ins.loc[0]}:{ins.loc[1]} ({ins.name})"
        return ins.name

    def who(self, thread: int) -> str:
        """``CTA (x, y, z) thread (x, y, z)`` of a global thread index."""
        m = self.m
        cta, tid = divmod(int(thread), m.ntid)
        bx, by, _ = m.block
        gx, gy, _ = m.grid
        return (f"CTA ({cta % gx}, {(cta // gx) % gy}, {cta // (gx * gy)}) thread "
                f"({tid % bx}, {(tid // bx) % by}, {tid // (bx * by)})")

    def _thread_at(self, thread: int, tid: int) -> str:
        """The CTA-local thread ``tid`` of ``thread``'s CTA, as ``thread (x, y, z)``."""
        return "thread " + self.who(int(thread) // self.ntid * self.ntid + int(tid)).split(" thread ")[1]

    # instructions ------------------------------------------------------------------------
    def begin(self, pc: int, sim: str | None) -> None:
        """An instruction starts executing."""
        self.pc, self.sim = pc, sim
        self._tma_bytes = []
        self._moving = (sim == "mov" and _register_move(self.m.program.code[pc])) or sim == "selp"
        if self._moving:
            self._quiet = True

    def quiet(self, on: bool) -> None:
        """Suspend register read checks (operands an instruction ignores)."""
        self._quiet = on

    # registers ---------------------------------------------------------------------------
    def read_register(self, name: str, threads: np.ndarray) -> None:
        """Check a read of register ``name`` by ``threads``."""
        done = self.written.get(name)
        if done is None or self._quiet:
            return
        bad = ~done[threads]
        if bad.any():
            t = int(threads[bad][0])
            pc = self.m.current_pc if self.m.current_pc is not None else self.pc   # a guard: before begin()
            self.report("uninitialised", f"read of uninitialised register {name} at {self.at(t, pc)}",
                        self.line(pc))
        pending = self.pending_regs.get(name)
        if pending is not None and self.sim not in _WGMMA_REGS:
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
        done[threads] = True
        kind = ("wgmma" if self.sim in _WGMMA_REGS else
                "tcgen05" if self.sim == "tcgen05_ld" else None)
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
        pending[1][threads] = (self.wg_open if kind == "wgmma" else self.ld_open)[threads]
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
            partial = self.partial.setdefault(name, np.zeros(self.m.nthreads, dtype=np.int64))
            partial[threads] = mask

    def _select_definedness(self, s) -> None:
        """``selp d, a, b, c``: the predicate is used; d is as defined as
        the operand it selects (the other one is not read)."""
        ins, th = s.ins, s.threads
        self.read_register(ins.operands[3].name, th) if isinstance(ins.operands[3], ir.Register) else None
        pick = s.pred(3)
        width = _bits(ins) // 8
        a = self._bytes_defined(ins.operands[1], th, width)
        b = self._bytes_defined(ins.operands[2], th, width)
        self._set_defined(ins.operands[0], th, np.where(pick, a, b), width)

    def _move_definedness(self, ins: ir.Instruction, threads: np.ndarray) -> None:
        """``mov`` copies, packs (``mov.b64 d, {a, b}``) and unpacks
        (``mov.b64 {a, b}, d``) carry undefined bytes along instead of
        reading them: compilers pack undefined halves on purpose, and only a
        use of an undefined value is a bug."""
        width = _bits(ins) // 8
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

    # shared memory -----------------------------------------------------------------------
    def shared_access(self, linear: np.ndarray, threads: np.ndarray, width: int, write: bool,
                      atomic: bool = False, values: np.ndarray | None = None) -> None:
        """Check and record an access of ``width`` bytes at each flat shared
        index by ``threads`` (``values``: what a store writes)."""
        linear = np.asarray(linear, dtype=np.int64)
        if self.reader is not None:
            threads = np.full(len(linear), self.reader)
        idx = (linear[:, None] + np.arange(width)).ravel()
        th = np.repeat(np.asarray(threads, dtype=np.int64), width)
        byte_values = None
        if values is not None:
            byte_values = _bytes_of(values, width)
        local = idx // max(self.shadow.size, 1) == th // self.ntid
        if not local.all():                 # another CTA's shared memory: initialisation only
            far = ~local
            if not write:
                self._check_init(idx[far], th[far], "read of")
            else:
                self.shadow.init[idx[far]] = True
            idx, th = idx[local], th[local]
            byte_values = None if byte_values is None else byte_values[local]
        if len(idx) == 0:
            return
        kind = _ASYNC_READERS.get(self.sim)
        strong, release, acquire = self._semantics()
        if write and self.sim == "cp_async":
            self.cp_async_written(idx, th)
        elif atomic or strong:
            self._atomic(idx, th, reads=atomic or not write, writes=atomic or write)
            self._location_sync(linear, np.asarray(threads, dtype=np.int64), 0, write or atomic,
                                not write or atomic, release, acquire)
        elif write:
            self._write(idx, th, byte_values)
        elif kind is not None:
            self.async_read(idx, th, kind)
        else:
            self._read(idx, th)

    def other_access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int,
                     write: bool, atomic: bool = False, values: np.ndarray | None = None) -> None:
        """Local memory (reads of bytes never written) and global memory
        (conflicting accesses from different CTAs) for ``threads``."""
        off = np.asarray(off, dtype=np.int64)
        idx = (off[:, None] + np.arange(width)).ravel()
        if buf is self.m.memory.local:
            if write:
                self.local_init[idx] = True
            elif not self.local_init[idx].all():
                k = int(np.argmax(~self.local_init[idx])) // width
                self.report("uninitialised", f"read of uninitialised local memory at {self.at(int(threads[k]))}",
                            self.line(self.pc))
            return
        key = self._globals.get(id(buf))
        strong, release, acquire = self._semantics()
        if key is not None and (atomic or strong):
            self._location_sync(off, np.asarray(threads, dtype=np.int64), key + 1, write or atomic,
                                not write or atomic, release, acquire)
        if key is None or not self.cross_cta:
            return
        shadow = self._global_shadow.get(key)
        if shadow is None:
            n = len(buf)
            shadow = self._global_shadow[key] = (np.full(n, -1, np.int32), np.full(n, -1, np.int32),
                                                 np.zeros(n, np.int64), np.zeros(n, np.int64),
                                                 np.full(n, -1, np.int32), np.zeros(n, np.int64))
        # CTA of the last plain write, of the plain reads since, of the strong
        # (gpu-scope) accesses since (-1: none, -2: several); thread << 20 | pc of each
        writer, reader, w_at, r_at, strong_cta, s_at = shadow
        th = np.repeat(np.asarray(threads, dtype=np.int64), width)
        cta = (th // self.ntid).astype(np.int32)
        if (atomic or strong) and not self._cta_scoped():
            w, r = writer[idx], reader[idx]
            plain = (w >= 0) & (w != cta)
            if write or atomic:
                plain |= (r == -2) | ((r >= 0) & (r != cta))
            if plain.any():
                k = int(np.argmax(plain))
                at = w_at[idx[k]] if w[k] >= 0 and w[k] != cta[k] else r_at[idx[k]]
                self._global_race("atomic" if atomic else "strong access", k, idx, th, at, "the plain access")
            a = strong_cta[idx]
            strong_cta[idx] = np.where((a == -1) | (a == cta), cta, -2)
            s_at[idx] = _pack_at(th, self.pc, self.ntid)
            return
        a = strong_cta[idx]
        mixed = (a == -2) | ((a >= 0) & (a != cta))
        if mixed.any():
            k = int(np.argmax(mixed))
            self._global_race("write" if write else "read", k, idx, th, s_at[idx[k]], "the atomic or strong access")
        if write:
            strong_cta[idx] = -1
        w = writer[idx]
        clash = (w >= 0) & (w != cta)
        if write and values is not None and not self.strict:
            clash &= buf[idx] != _bytes_of(values, width)
        if write and len(idx) > 1:              # CTAs storing to one byte in the same step
            order = np.argsort(idx, kind="stable")
            i, c = idx[order], cta[order]
            dup = (i[1:] == i[:-1]) & (c[1:] != c[:-1])
            if values is not None and not self.strict:
                v = _bytes_of(values, width)[order]
                dup &= v[1:] != v[:-1]
            if dup.any():
                j = int(np.argmax(dup))
                first, second = int(order[j]), int(order[j + 1])
                self._global_race("write", second, idx, th, int(th[first]) << 20 | self.pc, "the write")
        if write:
            r = reader[idx]
            war = (r == -2) | ((r >= 0) & (r != cta))
            if war.any() and not clash.any():
                k = int(np.argmax(war))
                self._global_race("write", k, idx, th, r_at[idx[k]], "a read")
            writer[idx] = cta
            reader[idx] = -1
            w_at[idx] = _pack_at(th, self.pc, self.ntid)
        else:
            r = reader[idx]
            reader[idx] = np.where((r == -1) | (r == cta), cta, -2)
            r_at[idx] = _pack_at(th, self.pc, self.ntid)
        if clash.any():
            k = int(np.argmax(clash))
            self._global_race("write" if write else "read", k, idx, th, w_at[idx[k]], "the write")

    def _global_race(self, kind: str, k: int, idx: np.ndarray, th: np.ndarray, at: int, other: str) -> None:
        tid, pc = divmod(int(at), 1 << 20)
        self.report("race", f"global-memory race between CTAs: {kind} at {self.at(int(th[k]))} conflicts with "
                    f"{other} at {self.line(pc)} by {self.who(tid)}: nothing orders accesses of different "
                    "CTAs (no gpu-scope fence or release/acquire in the kernel)",
                    self.line(self.pc), self.line(pc))

    def _cta_scoped(self) -> bool:
        """The executing strong access has ``.cta`` scope: it orders nothing,
        and is not morally strong, between CTAs."""
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        return ins is not None and "cta" in ins.modifiers

    # release/acquire through memory -------------------------------------------------------
    def _semantics(self) -> tuple[bool, bool, bool]:
        """(strong, release, acquire) of the executing memory instruction:
        atomics and ``.relaxed``/``.volatile``/``.acquire``/``.release``
        accesses are strong (they do not race with each other)."""
        cached = self._sem_cache.get(self.pc)
        if cached is None:
            code = self.m.program.code
            ins = code[self.pc] if 0 <= self.pc < len(code) else None
            mods = set(ins.modifiers) if ins is not None else set()
            release = bool(mods & {"release", "acq_rel"})
            acquire = bool(mods & {"acquire", "acq_rel"})
            strong = (ins is not None and ins.opcode in ("atom", "red")) or release or acquire \
                or bool(mods & {"relaxed", "volatile"})
            cached = self._sem_cache[self.pc] = (strong, release, acquire)
        return cached

    def _location_sync(self, offsets: np.ndarray, threads: np.ndarray, space: int, writes: bool,
                       reads: bool, release: bool, acquire: bool) -> None:
        """Orderings through one memory location, per CTA: a release store
        (or any strong store after a fence) publishes the thread's clock
        there; an acquire load joins it (a relaxed load does when a fence
        follows it). ``space``: 0 shared, k + 1 global buffer k."""
        offsets = np.asarray(offsets, dtype=np.int64)
        cta = threads // self.ntid
        pairs = np.stack([cta, offsets], axis=1)
        for c, off in (np.unique(pairs, axis=0) if len(pairs) > 1 else pairs).tolist():
            mine = threads[(cta == c) & (offsets == off)]
            key = (c, space, off)
            if writes:
                publish = mine if release else mine[self.fenced_threads[mine]]
                if len(publish):
                    held = self.location_clocks.get(key)
                    joined = self.clocks.vc[publish].max(axis=0)
                    self.location_clocks[key] = joined if held is None else np.maximum(held, joined[:len(held)])
                    self.clocks._tick(publish)
                    self.fenced_threads[publish] = False
            if reads:
                if acquire:
                    self._acquire_location(mine, key)
                else:
                    for t in mine.tolist():
                        self.pending_acquire[t] = key

    def _acquire_location(self, threads: np.ndarray, key: tuple) -> None:
        held = self.location_clocks.get(key)
        if held is not None:
            width = min(len(held), self.clocks.vc.shape[1])
            self.clocks.vc[threads, :width] = np.maximum(self.clocks.vc[threads, :width], held[:width])

    def fence(self, threads: np.ndarray) -> None:
        """``fence``/``membar``: relaxed loads before it acquire, strong
        stores after it release (the fence-atomic patterns of the memory
        model)."""
        for t in threads.tolist():
            key = self.pending_acquire.pop(t, None)
            if key is not None:
                self._acquire_location(np.array([t]), key)
        self.fenced_threads[threads] = True

    def member_mask(self, s) -> None:
        """``shfl.sync``/``vote.sync``/``match.sync``/``redux.sync``/
        ``bar.warp.sync``: every lane the member mask names must execute the
        instruction with the thread, and the thread must be in its mask."""
        mask = s.src(len(s.ins.operands) - 1).astype(np.int64) & 0xFFFFFFFF
        th = s.threads
        warp = th // self.ntid * 64 + th % self.ntid // 32
        lane = th % self.ntid % 32
        here = np.zeros(len(th), dtype=np.int64)
        for w in _distinct(warp).tolist():
            sel = warp == w
            here[sel] = np.bitwise_or.reduce(np.left_shift(1, lane[sel]))
        missing = mask & ~here
        outside = (mask >> lane) & 1 == 0
        bad = (missing != 0) | outside
        if bad.any():
            k = int(np.argmax(bad))
            if outside[k]:
                why = f"its own lane {int(lane[k])} is not in the member mask {int(mask[k]):#010x}"
            else:
                gone = int(missing[k]).bit_length() - 1
                why = (f"the member mask {int(mask[k]):#010x} names lane {gone}, which is not executing it "
                       "(exited, or elsewhere in the program)")
            self.report("divergence", f"{self.line(self.pc)} at {self.who(int(th[k]))}: {why}",
                        self.line(self.pc))
        if s.ins.opcode == "shfl.sync":
            self._shuffle_source(s, mask, lane)

    def _shuffle_source(self, s, mask: np.ndarray, lane: np.ndarray) -> None:
        """``shfl.sync``: the lane each thread reads from (PTX ISA, shfl.sync:
        from ``b``, the clamp and segment mask ``c`` and the mode) must be in
        the member mask, else the result is undefined."""
        mode = next((m for m in s.ins.modifiers if m in ("up", "down", "bfly", "idx")), "idx")
        b = s.src(2).astype(np.int64) & 0x1F
        c = s.src(3).astype(np.int64)
        clamp, seg = c & 0x1F, (c >> 8) & 0x1F
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - b
            valid = j >= max_lane
        elif mode == "down":
            j = lane + b
            valid = j <= max_lane
        elif mode == "bfly":
            j = lane ^ b
            valid = j <= max_lane
        else:
            j = min_lane | (b & ~seg)
            valid = j <= max_lane
        j = np.where(valid, j, lane)
        bad = ((mask >> (j & 31)) & 1) == 0
        if bad.any():
            k = int(np.argmax(bad))
            self.report("divergence", f"{self.line(self.pc)} at {self.who(int(s.threads[k]))}: it reads lane "
                        f"{int(j[k])}, which is outside the member mask {int(mask[k]):#010x} (the value is "
                        "undefined)", self.line(self.pc))

    def _check_init(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        bad = ~self.shadow.init[idx]
        if bad.any():
            k = int(np.argmax(bad))
            size = max(self.shadow.size, 1)
            self.report("uninitialised", f"{what} uninitialised shared memory at offset "
                        f"{int(idx[k] % size):#x} at {self.at(int(th[k]))}", self.line(self.pc))

    def _knows(self, th: np.ndarray):
        vc = self.clocks.vc
        return lambda rows, others: vc[th[rows], others]

    def _read(self, idx: np.ndarray, th: np.ndarray) -> None:
        sh = self.shadow
        self._check_init(idx, th, "read of")
        self._check_pending(idx, th, "read")
        tid = th % self.ntid
        writer = sh.w_tid[idx].astype(np.int64)
        other = (writer >= 0) & (writer != tid)
        if other.any():
            late = np.zeros(len(idx), dtype=bool)
            late[other] = sh.w_clock[idx[other]] > self.clocks.knows(th[other], writer[other])
            if late.any():
                k = int(np.argmax(late))
                self._race("read", idx[k], th[k], "write", int(writer[k]), int(sh.w_pc[idx[k]]))
        slot = sh.unordered_atomics(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("read", idx[k], th[k], "atomic", int(sh.a_tid[idx[k], slot[k]]),
                       int(sh.a_pc[idx[k], slot[k]]))
        sh.record_read(idx, tid, self.clocks.own(th), self.pc, self._knows(th))

    def _write(self, idx: np.ndarray, th: np.ndarray, byte_values: np.ndarray | None) -> None:
        sh = self.shadow
        tid = th % self.ntid
        old = self.m.memory.shared[idx] if byte_values is not None else None
        same = (old == byte_values) & sh.init[idx] if old is not None and not self.strict else None
        self._check_pending(idx, th, "write")
        writer = sh.w_tid[idx].astype(np.int64)
        other = (writer >= 0) & (writer != tid)
        if same is not None:
            other &= ~same
        if other.any():
            late = np.zeros(len(idx), dtype=bool)
            late[other] = sh.w_clock[idx[other]] > self.clocks.knows(th[other], writer[other])
            if late.any():
                k = int(np.argmax(late))
                self._race("write", idx[k], th[k], "write", int(writer[k]), int(sh.w_pc[idx[k]]))
        self._check_in_flight(idx, th, "write")
        slot = sh.unordered_reads(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("write", idx[k], th[k], "read", int(sh.r_tid[idx[k], slot[k]]),
                       int(sh.r_pc[idx[k], slot[k]]))
        slot = sh.unordered_atomics(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("write", idx[k], th[k], "atomic", int(sh.a_tid[idx[k], slot[k]]),
                       int(sh.a_pc[idx[k], slot[k]]))
        self._same_step_conflicts(idx, th, byte_values)
        sh.record_write(idx, tid, self.clocks.own(th), self.pc)

    def _same_step_conflicts(self, idx: np.ndarray, th: np.ndarray, byte_values: np.ndarray | None) -> None:
        """Several threads writing one byte in the same instruction (with
        different values, unless strict)."""
        if len(idx) < 2:
            return
        order = np.argsort(idx, kind="stable")
        i, t = idx[order], th[order]
        dup = (i[1:] == i[:-1]) & (t[1:] != t[:-1])
        if byte_values is not None and not self.strict:
            v = byte_values[order]
            dup &= v[1:] != v[:-1]
        if dup.any():
            k = int(np.argmax(dup))
            self._race("write", i[k + 1], t[k + 1], "write", int(t[k] % self.ntid), self.pc)

    def _atomic(self, idx: np.ndarray, th: np.ndarray, reads: bool = True, writes: bool = True) -> None:
        """An atomic or strong (``.relaxed``/``.acquire``/``.release``/
        ``.volatile``) access: it does not race with other such accesses,
        only with plain ones nothing orders."""
        sh = self.shadow
        if reads:
            self._check_init(idx, th, "atomic on")
        if writes:
            sh.init[idx] = True
        tid = th % self.ntid
        writer = sh.w_tid[idx].astype(np.int64)
        other = (writer >= 0) & (writer != tid) & ~sh.w_atomic[idx]
        if other.any():
            late = np.zeros(len(idx), dtype=bool)
            late[other] = sh.w_clock[idx[other]] > self.clocks.knows(th[other], writer[other])
            if late.any():
                k = int(np.argmax(late))
                self._race("atomic on", idx[k], th[k], "write", int(writer[k]), int(sh.w_pc[idx[k]]))
        self._check_in_flight(idx, th, "atomic on")
        slot = sh.unordered_reads(idx, tid, self._knows(th))
        if (slot >= 0).any():
            k = int(np.argmax(slot >= 0))
            self._race("atomic on", idx[k], th[k], "read", int(sh.r_tid[idx[k], slot[k]]),
                       int(sh.r_pc[idx[k], slot[k]]))
        a_tid, a_clock, a_pc = sh.atomics()
        a_tid[idx, tid // 32] = tid
        a_clock[idx, tid // 32] = self.clocks.own(th)
        a_pc[idx, tid // 32] = self.pc

    def _race(self, kind: str, byte: int, thread: int, other_kind: str, other_tid: int, other_pc: int) -> None:
        size = max(self.shadow.size, 1)
        other_line = self.line(other_pc)
        other = f"the {other_kind} at {other_line} by {self._thread_at(thread, other_tid)}"
        of = "" if kind.endswith(" on") else " of"
        self.report("race", f"shared-memory race: {kind}{of} offset {int(byte % size):#x} at "
                    f"{self.at(int(thread))} conflicts with {other}: no barrier or mbarrier orders them",
                    self.line(self.pc), other_line)

    def _check_pending(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        sh = self.shadow
        pend = sh.pend[idx]
        if not pend.any():
            return
        if (pend == CP_ASYNC).any():
            k = int(np.argmax(pend == CP_ASYNC))
            issuer = int(sh.pend_key[idx[k]])
            copy = self.line(int(sh.w_pc[idx[k]]))
            self.report("async", f"{what} of shared offset {int(idx[k] % sh.size):#x} at "
                        f"{self.at(int(th[k]))}: the cp.async at {copy} by "
                        f"{self._thread_at(th[k], issuer % self.ntid)} is still copying into it (no "
                        "cp.async.wait_group completed it)", self.line(self.pc), copy)
        tma = np.nonzero(pend == TMA)[0]
        if len(tma):
            words = sh.pend_key[idx[tma]]
            for word in _distinct(words).tolist():
                sel = tma[words == word]
                column = self._column(word)
                seen = self.clocks.vc[th[sel], column]
                late = seen <= sh.pend_seq[idx[sel]]
                if late.any():
                    k = int(sel[np.argmax(late)])
                    copy = self.line(int(sh.w_pc[idx[k]]))
                    self.report("async", f"{what} of shared offset {int(idx[k] % sh.size):#x} at "
                                f"{self.at(int(th[k]))}: the async copy at {copy} completes on the "
                                f"mbarrier at shared offset {word * 8 % sh.size:#x}, and this thread has "
                                "not observed that phase complete (try_wait/test_wait, or a barrier "
                                "after a thread that did)", self.line(self.pc), copy)

    # async proxy ---------------------------------------------------------------------------
    def async_read(self, idx: np.ndarray, th: np.ndarray, kind: str) -> None:
        """Shared bytes read by the async proxy for ``th``'s instruction:
        initialised, complete, ordered after their writes, fenced; in flight
        until the thread waits (``kind``: ``wgmma``, ``tcgen05``, ``bulk``)."""
        sh = self.shadow
        self._check_init(idx, th, "async-proxy read of")
        self._check_pending(idx, th, "async-proxy read")
        tid = th % self.ntid
        writer = sh.w_tid[idx].astype(np.int64)
        other = (writer >= 0) & (writer != tid)
        if other.any():
            late = np.zeros(len(idx), dtype=bool)
            late[other] = sh.w_clock[idx[other]] > self.clocks.knows(th[other], writer[other])
            if late.any():
                k = int(np.argmax(late))
                self._race("async-proxy read", idx[k], th[k], "write", int(writer[k]), int(sh.w_pc[idx[k]]))
        unfenced = (writer >= 0) & ~sh.fenced[idx]
        if unfenced.any():
            k = int(np.argmax(unfenced))
            self.report("proxy", f"the async proxy reads shared offset {int(idx[k] % sh.size):#x} at "
                        f"{self.at(int(th[k]))}, written through the generic proxy at "
                        f"{self.line(int(sh.w_pc[idx[k]]))} by {self._thread_at(th[k], writer[k])} with "
                        "no fence.proxy.async between them", self.line(self.pc), self.line(int(sh.w_pc[idx[k]])))
        sh.flying[idx] = True
        issuers = _distinct(th)
        group = (self.wg_open[issuers] if kind == "wgmma" else           # each issuer's open group
                 self.bulk_open[issuers] if kind == "bulk" else np.zeros(len(issuers), np.int64))
        self.in_flight.append((kind, group, issuers, th, idx, self.pc))

    def _check_in_flight(self, idx: np.ndarray, th: np.ndarray, what: str) -> None:
        """A write to bytes an async read (wgmma, tcgen05.mma, a bulk
        store) may still be reading: nothing waited for it yet, or (for
        reads tied to an mbarrier by a commit) the writer has not observed
        the phase that completes them."""
        sh = self.shadow
        flying = sh.flying[idx]
        if not flying.any():
            return
        mark = sh.mark
        mark[idx[flying]] = True                # the bytes written that are in flight
        sh.who[idx[flying]] = th[flying]        # and who writes each
        keep, dropped = [], []
        for entry in self.in_flight:
            kind, seq, _, readers, where, pc = entry
            hit = mark[where]
            if not hit.any():
                keep.append(entry)
                continue
            if "@" in kind:
                column = self._mbar_column[int(kind.split("@")[1])]
                writers = _distinct(sh.who[where[hit]])
                if (self.clocks.vc[writers, column] > seq).all():
                    dropped.append(entry)          # the writer saw the commit's phase complete
                    continue
            k = int(np.nonzero(hit)[0][0])
            byte = int(where[k])
            t = int(th[np.argmax(idx == byte)])
            self.report("async", f"{what} of shared offset {byte % sh.size:#x} at {self.at(t)} while "
                        f"the async read by {self.line(pc)} ({self._thread_at(t, int(readers[k]) % self.ntid)}) "
                        "is still in flight (no wait for it orders the write after it)",
                        self.line(self.pc), self.line(pc))
            keep.append(entry)
        mark[idx] = False
        if dropped:
            for entry in dropped:
                sh.flying[entry[4]] = False
            for entry in keep:
                sh.flying[entry[4]] = True
            self.in_flight = keep

    def async_write(self, idx: np.ndarray, th: np.ndarray) -> None:
        """Shared bytes written by a TMA or bulk copy issued by ``th``:
        checked like a write of the issuing thread (the stage must be free),
        then in flight until the copy's mbarrier phase is observed."""
        sh = self.shadow
        idx = np.asarray(idx, dtype=np.int64)
        th = np.asarray(th, dtype=np.int64)
        local = idx // max(sh.size, 1) == th // self.ntid
        if local.any():
            li, lt = idx[local], th[local]
            self._check_in_flight(li, lt, "async-proxy write")
            tid = lt % self.ntid
            slot = sh.unordered_reads(li, tid, self._knows(lt))
            if (slot >= 0).any():
                k = int(np.argmax(slot >= 0))
                self._race("async-proxy write", li[k], lt[k], "read", int(sh.r_tid[li[k], slot[k]]),
                           int(sh.r_pc[li[k], slot[k]]))
        sh.record_write(idx, np.full(len(idx), ASYNC), 0, self.pc)
        self._tma_bytes.append((idx, th))

    def tma_signal(self, threads: np.ndarray, words: np.ndarray) -> None:
        """The copies this instruction issued for ``threads`` complete-tx on
        their mbarrier ``words`` (called before the phase can complete)."""
        sh = self.shadow
        order = np.argsort(threads, kind="stable")
        keys, vals = np.asarray(threads)[order], np.asarray(words, dtype=np.int64)[order]
        rest = []
        for idx, th in self._tma_bytes:
            at = np.clip(np.searchsorted(keys, th), 0, len(keys) - 1)
            mine = keys[at] == th
            if not mine.any():
                rest.append((idx, th))
                continue
            b, w = idx[mine], vals[at[mine]]
            sh.pend[b] = TMA
            sh.pend_key[b] = w
            for word in _distinct(w).tolist():
                self._column(word)
                sh.pend_seq[b[w == word]] = self.completions.get(word, 0)
            if not mine.all():
                rest.append((idx[~mine], th[~mine]))
        self._tma_bytes = rest

    def _column(self, word: int) -> int:
        """The clock column standing for mbarrier ``word``'s completed phases."""
        col = self._mbar_column.get(word)
        if col is None:
            col = self._mbar_column[word] = self.clocks.vc.shape[1]
            self.clocks.vc = np.pad(self.clocks.vc, ((0, 0), (0, 1)))
            for table in (self.clocks._mbarrier, self.clocks._completed):
                for key, held in list(table.items()):
                    table[key] = np.pad(held, (0, self.clocks.vc.shape[1] - len(held)))
            for key, held in list(self.clocks._arrived.items()):
                self.clocks._arrived[key] = np.pad(held, (0, self.clocks.vc.shape[1] - len(held)))
        return col

    def proxy_fence(self, threads: np.ndarray) -> None:
        """``fence.proxy.async`` by ``threads``: the generic writes each has
        seen become visible to the async proxy."""
        sh = self.shadow
        for cta in np.unique(threads // self.ntid).tolist():
            mine = threads[threads // self.ntid == cta]
            known = self.clocks.vc[mine, :self.ntid].max(axis=0)
            r = sh.cta_range(cta)
            w = sh.w_tid[r].astype(np.int64)
            ok = (w >= 0) & (sh.w_clock[r] <= known[np.where(w >= 0, w, 0)])
            sh.fenced[r] |= ok

    def _resolve(self, kind: str, threads: np.ndarray, done: np.ndarray | None = None) -> None:
        """Async reads of ``kind`` issued by ``threads`` are complete now
        (for wgmma: the groups below ``done`` per thread): they become reads
        stamped with their issuing thread's clock."""
        mine = np.zeros(self.m.nthreads, dtype=bool)
        mine[threads] = True
        keep, finished = [], []
        for entry in self.in_flight:
            k, group, issuers, readers, idx, pc = entry
            hit = mine[issuers]
            if done is not None:
                hit &= group < done[issuers]      # group: per issuer
            if k != kind or not hit.any():
                keep.append(entry)
            elif hit.all():
                finished.append(entry)
            else:           # some issuers waited: their bytes land, the rest stay in flight
                sel = np.isin(readers, issuers[hit])
                finished.append((k, group[hit], issuers[hit], readers[sel], idx[sel], pc))
                keep.append((k, group[~hit], issuers[~hit], readers[~sel], idx[~sel], pc))
        if not finished:
            return
        sh = self.shadow
        for _, _, _, readers, idx, pc in finished:
            sh.flying[idx] = False
            sh.record_read(idx, readers % self.ntid, self.clocks.own(readers), pc, self._knows(readers))
        for _, _, _, _, idx, _ in keep:
            sh.flying[idx] = True
        self.in_flight = keep

    # synchronisation -----------------------------------------------------------------------
    def after(self, sim: str, s) -> None:
        """The bookkeeping of synchronising and async instructions, after
        their semantics ran for the threads ``s.threads``."""
        th = s.threads
        if self._moving:
            self._quiet = self._moving = False
            if sim == "selp":
                self._select_definedness(s)
            else:
                self._move_definedness(s.ins, th)
            return
        if sim in _MASKED:
            self.member_mask(s)
        if sim == "cp_async":
            return
        if sim == "cp_async_commit_group" or (sim == "cp_async_wait_group" and s.ins.opcode.endswith("all")):
            self.cp_open[th] += 1
        if sim == "cp_async_wait_group":
            n = 0 if "wait_all" in s.ins.name else int(s.src(0).astype(np.int64)[0])
            self.cp_done[th] = self.cp_open[th] - n
            self._complete_cp_async(th)
        elif sim == "wgmma_commit_group":
            self.wg_open[th] += 1
        elif sim == "wgmma_wait_group":
            n = int(s.src(0).astype(np.int64)[0])
            self.wg_done[th] = self.wg_open[th] - n
            self._resolve("wgmma", th, self.wg_done)
        elif sim == "tcgen05_ld":
            self.ld_open[th] += 1
        elif sim == "tcgen05_wait":
            if "ld" in "".join(s.ins.modifiers):
                self.ld_done[th] = self.ld_open[th]
        elif sim == "cp_async_bulk_commit_group":
            self.bulk_open[th] += 1
        elif sim == "cp_async_bulk_wait_group":
            n = int(s.src(0).astype(np.int64)[0])
            self.bulk_done[th] = self.bulk_open[th] - n
            self._resolve("bulk", th, self.bulk_done)
        elif sim == "wgmma_mma_async" and isinstance(s.ins.operands[1], ir.Vector):
            for op in s.ins.operands[1].items:       # A from registers: read until the wgmma completes
                if isinstance(op, ir.Register):
                    self._flying_operand(op.name, th)

    def cp_async_written(self, idx: np.ndarray, th: np.ndarray) -> None:
        """``cp.async`` bytes: written (checked like a store), then in flight
        in the issuing thread's open group."""
        sh = self.shadow
        self._write(idx, th, None)
        sh.pend[idx] = CP_ASYNC
        sh.pend_key[idx] = th
        sh.pend_seq[idx] = self.cp_open[th]
        self._cp_pending = True

    def _complete_cp_async(self, threads: np.ndarray) -> None:
        if not self._cp_pending:
            return
        sh = self.shadow
        for cta in np.unique(threads // self.ntid).tolist():
            r = sh.cta_range(cta)
            pend = np.nonzero(sh.pend[r] == CP_ASYNC)[0] + r.start
            if len(pend) == 0:
                continue
            issuer = sh.pend_key[pend]
            mine = np.isin(issuer, threads)
            done = mine & (sh.pend_seq[pend] < self.cp_done[issuer])
            b = pend[done]
            sh.pend[b] = 0
            sh.w_clock[b] = self.clocks.own(issuer[done])

    def cp_async_to_mbarrier(self, threads: np.ndarray, words: np.ndarray) -> None:
        """``cp.async.mbarrier.arrive``: the threads' cp.async copies so far
        complete on the mbarrier's current phase."""
        sh = self.shadow
        for cta in np.unique(threads // self.ntid).tolist():
            r = sh.cta_range(cta)
            pend = np.nonzero(sh.pend[r] == CP_ASYNC)[0] + r.start
            for t, word in zip(threads.tolist(), words.tolist()):
                b = pend[sh.pend_key[pend] == t]
                sh.pend[b] = TMA
                sh.pend_key[b] = word
                sh.pend_seq[b] = self.completions.get(word, 0)
                self._column(word)

    def barrier_arrive(self, threads: np.ndarray, keys: np.ndarray) -> None:
        """``bar.arrive``: a release into each barrier key (CTA * 16 + id)."""
        for key in np.unique(keys).tolist():
            self.clocks.barrier_release(threads[keys == key], key)

    def barrier_complete(self, threads: np.ndarray, keys: np.ndarray) -> None:
        """Barriers completed: each key's waiting threads synchronise."""
        for key in np.unique(keys).tolist():
            self.clocks.barrier_complete(threads[keys == key], key)

    def everyone_synchronised(self) -> None:
        """Every thread of every CTA passed one barrier."""
        self.clocks.join_ctas(self.m.nctas)

    def warp_sync(self, threads: np.ndarray) -> None:
        """``bar.warp.sync``: the executing lanes of each warp synchronise."""
        for mine in self._warps(threads):
            self.clocks.join(mine)

    def cluster_complete(self, threads: np.ndarray) -> None:
        """``barrier.cluster.wait`` completed for ``threads``: each CTA's part joins."""
        for cta in np.unique(threads // self.ntid).tolist():
            self.clocks.join(threads[threads // self.ntid == cta])

    def mbarrier_arrive(self, threads: np.ndarray, words: np.ndarray) -> None:
        """Arrive-on operations of ``threads`` on the mbarrier ``words``."""
        for w in np.unique(words).tolist():
            self._column(w)
        if self.sim in ("tcgen05_commit",):
            self._tie("tcgen05", threads, words)
        self.clocks.mbarrier_release(threads, words)

    def _tie(self, kind: str, threads: np.ndarray, words: np.ndarray) -> None:
        """The ``kind`` async reads of ``threads`` complete with the current
        phase of their commit's mbarrier: a write to those bytes must come
        from a thread that observed that phase."""
        order = np.argsort(threads, kind="stable")
        keys, vals = np.asarray(threads)[order], np.asarray(words, dtype=np.int64)[order]
        tied = []
        for entry in self.in_flight:
            k, group, issuers, readers, idx, pc = entry
            at = np.clip(np.searchsorted(keys, issuers), 0, len(keys) - 1)
            if k != kind or not (keys[at] == issuers).all():
                tied.append(entry)
                continue
            word = int(vals[at[0]])
            self._column(word)
            tied.append((f"{kind}@{word}", self.completions.get(word, 0), issuers, readers, idx, pc))
        self.in_flight = tied

    def mbarrier_acquire(self, threads: np.ndarray, words: np.ndarray) -> None:
        """``threads`` observed a completed phase of ``words``."""
        self.clocks.mbarrier_acquire(threads, words)
        for w in np.unique(words).tolist():
            col = self._column(w)
            sel = threads[words == w]
            self.clocks.vc[sel, col] = np.maximum(self.clocks.vc[sel, col], self.completions.get(w, 0))

    def mbarrier_phases(self, words: np.ndarray, completed: np.ndarray) -> None:
        """Phase completions (``completed``: how many, per word)."""
        for w, c in zip(np.asarray(words).tolist(), np.asarray(completed).tolist()):
            if c:
                self.completions[w] = self.completions.get(w, 0) + int(c)
                self.clocks.mbarrier_complete(w)

    def mbarrier_init(self, words: np.ndarray) -> None:
        """``mbarrier.init``/``inval``: a fresh object (its 8 bytes now hold a value)."""
        self.clocks.mbarrier_reset(words)
        words = np.asarray(words, dtype=np.int64)
        self.shadow.init[(words[:, None] * 8 + np.arange(8)).ravel()] = True

    def _warps(self, threads: np.ndarray) -> list[np.ndarray]:
        """``threads`` grouped by warp (warps are CTA-local: 32 lanes from
        each CTA's thread 0)."""
        key = threads // self.ntid * 64 + threads % self.ntid // 32
        return [threads[key == k] for k in np.unique(key).tolist()]

    def _lanes(self, thread: int) -> np.ndarray:
        """Every lane of ``thread``'s warp."""
        base = thread // self.ntid * self.ntid
        first = thread % self.ntid // 32 * 32
        return base + np.arange(first, min(first + 32, self.ntid))

    def aligned_barrier(self, threads: np.ndarray) -> None:
        """An ``.aligned`` barrier executed by ``threads``: every live lane of
        their warps must execute it together."""
        from ..barriers import EXITED
        for mine in self._warps(threads):
            lanes = self._lanes(int(mine[0]))
            live = lanes[self.m.state[lanes] != EXITED]
            away = live[~np.isin(live, mine)]
            if len(away):
                t = int(mine[0])
                self.report("divergence", f"barrier divergence: {self.line(self.pc)} is .aligned, but "
                            f"{self.who(t)} reaches it without {self._thread_at(t, int(away[0]) % self.ntid)} "
                            "of its warp (the whole warp must execute it together)", self.line(self.pc))

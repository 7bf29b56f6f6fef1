"""The sanitizer's checks of local and global memory, and release/acquire
orderings through memory locations."""

from __future__ import annotations

import numpy as np

from .values import (as_cells, bytes_of, cells, differ, fitting_grain, grain_of, orders_ctas, pack_at, repeated,
                     unpack_at)

__all__ = ["MemoryChecks", "READ_LOG_BYTES"]

# Plain reads of a global buffer nothing has written yet are kept as they
# came, up to this many bytes, and recorded only when the buffer is first
# written: inputs that are only read never cost a per-byte record.
READ_LOG_BYTES = 1 << 24


class MemoryChecks:
    """Mixed into :class:`Sanitizer`: local and global memory, and release/acquire orderings through memory locations."""

    def other_access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int,
                     write: bool, atomic: bool = False, values: np.ndarray | None = None) -> None:
        """Local memory (reads of bytes never written) and global memory
        (conflicting accesses from different CTAs) for ``threads``."""
        off = np.asarray(off, dtype=np.int64)
        if buf is self.m.memory.local:
            idx = (off[:, None] + np.arange(width)).ravel()
            if write:
                self.local_init[idx] = True
            elif not self.local_init[idx].all():
                k = int(np.argmax(~self.local_init[idx])) // width
                self.report("uninitialised", f"read of uninitialised local memory at {self.at(int(threads[k]))}",
                            self.line(self.pc))
            return
        key = self._globals.get(id(buf))
        if key is None:
            return
        strong, release, acquire = self._semantics()
        if atomic or strong:
            self._location_sync(off, np.asarray(threads, dtype=np.int64), key + 1, write or atomic,
                                not write or atomic, release, acquire)
        log = self._read_log.get(key)
        if log is not None:
            plain_read = not (write or atomic or strong)
            if plain_read:
                # Nothing but plain reads of this buffer so far: nothing to
                # conflict with. They are recorded when it is first written.
                log.append((off.copy(), np.asarray(threads, dtype=np.int64).copy(), width, self.pc,
                            self.fence_epoch.copy()))
                self._logged[key] += len(off) * width
                if self._logged[key] < READ_LOG_BYTES:
                    return
            del self._read_log[key]
            for off_, threads_, width_, pc, epochs in log:
                logged = self._global_cells(key, off_, width_)
                self._record_global_reads(key, logged, np.repeat(threads_, width_ // self._global_grain[key]),
                                          pc, epochs)
            if plain_read:
                return
        idx = self._global_cells(key, off, width)
        grain = self._global_grain[key]
        writer, reader, w_at, r_at, strong_cta, s_at, w_epoch, r_epoch = \
            self._global_records(key, strong=atomic or strong)
        th = np.asarray(threads, dtype=np.int64)
        if width > grain:
            th = np.repeat(th, width // grain)
        new = None if values is None else as_cells(bytes_of(values, width), grain)
        cta = (th // self.ntid).astype(np.int32)
        w = writer[idx]
        # Accesses a CTA published with a gpu-scope fence or release since
        # may be ordered before another CTA's (through a flag): not a race.
        w_open = (w >= 0) & (w != cta)
        if w_epoch is not None:
            w_open &= ~self._published(w, w_epoch[idx])
        r_open = None
        if write or atomic or strong:
            r = reader[idx]
            several = (r == -2) if not self.cta_sync else np.zeros(len(r), dtype=bool)   # readers not tracked one by one
            r_open = several | ((r >= 0) & (r != cta))
            if r_epoch is not None:
                r_open &= ~self._published(r, r_epoch[idx]) | several
        if (atomic or strong) and not self._cta_scoped():
            plain = w_open.copy()
            if write or atomic:
                plain |= r_open
            if plain.any():
                k = int(np.argmax(plain))
                at = w_at[idx[k]] if w[k] >= 0 and w[k] != cta[k] else r_at[idx[k]]
                self._global_race("atomic" if atomic else "strong access", k, idx, th, at, "the plain access")
            a = strong_cta[idx]
            strong_cta[idx] = np.where((a == -1) | (a == cta), cta, -2)
            s_at[idx] = pack_at(th, self.pc)
            return
        if strong_cta is not None:          # (kernels without strong accesses here keep no such record)
            a = strong_cta[idx]
            mixed = (a == -2) | ((a >= 0) & (a != cta))
            if mixed.any():
                k = int(np.argmax(mixed))
                self._global_race("write" if write else "read", k, idx, th, s_at[idx[k]],
                                  "the atomic or strong access")
            if write:
                strong_cta[idx] = -1
        clash = w_open
        if write and new is not None and not self.strict:
            clash &= differ(as_cells(buf, grain)[idx], new)
        if write and len(idx) > 1 and self._repeats(key, idx):   # CTAs storing to one byte at once
            order = np.argsort(idx, kind="stable")
            i, c = idx[order], cta[order]
            dup = (i[1:] == i[:-1]) & (c[1:] != c[:-1])
            if new is not None and not self.strict:
                v = new[order]
                dup &= differ(v[1:], v[:-1])
            if dup.any():
                j = int(np.argmax(dup))
                first, second = int(order[j]), int(order[j + 1])
                self._global_race("write", second, idx, th, int(pack_at(th[first], self.pc)), "the write")
        if write:
            if r_open.any() and not clash.any():
                k = int(np.argmax(r_open))
                self._global_race("write", k, idx, th, r_at[idx[k]], "a read")
            writer[idx] = cta
            reader[idx] = -1
            w_at[idx] = pack_at(th, self.pc)
            if w_epoch is not None:
                w_epoch[idx] = self.fence_epoch[cta]
        else:
            self._record_global_reads(key, idx, th, self.pc, self.fence_epoch)
        if clash.any():
            k = int(np.argmax(clash))
            self._global_race("write" if write else "read", k, idx, th, w_at[idx[k]], "the write")

    def _global_cells(self, key: int, offsets: np.ndarray, width: int) -> np.ndarray:
        """The shadow cells of global buffer ``key`` that ``width``-byte
        accesses at byte ``offsets`` cover, splitting its cells first if
        they cover part of one (see :data:`.values.GRAIN`)."""
        grain = self._global_grain.get(key)
        if grain is None:
            grain = self._global_grain[key] = grain_of(len(self.m.memory.globals[key]))
        fit = fitting_grain(grain, offsets, width)
        if fit < grain:
            shadow = self._global_shadow.get(key)
            if shadow is not None:
                self._global_shadow[key] = tuple(None if a is None else np.repeat(a, grain // fit)
                                                 for a in shadow)
            self._global_scratch.pop(key, None)
            self._global_grain[key] = grain = fit
        return cells(offsets, width, grain)

    def _global_records(self, key: int, strong: bool = False) -> tuple[np.ndarray | None, ...]:
        """Global buffer ``key``'s per-cell records: the CTA of the last plain
        write, of the plain reads since, of the strong (gpu-scope) accesses
        since (-1: none, -2: several); thread << 20 | pc of each; the
        writer's and the reader's gpu-fence epochs then. The strong records
        are made at the first strong access (``strong``), the epochs only
        in kernels with gpu-scope fences or releases (else None)."""
        shadow = self._global_shadow.get(key)
        n = len(self.m.memory.globals[key]) // self._global_grain[key]
        if shadow is None:
            epochs = (np.zeros(n, np.int32), np.zeros(n, np.int32)) if self.cta_sync else (None, None)
            shadow = self._global_shadow[key] = (np.full(n, -1, np.int32), np.full(n, -1, np.int32),
                                                 np.zeros(n, np.int64), np.zeros(n, np.int64),
                                                 None, None) + epochs
        if strong and shadow[4] is None:
            shadow = self._global_shadow[key] = shadow[:4] + (np.full(n, -1, np.int32),
                                                              np.zeros(n, np.int64)) + shadow[6:]
        return shadow

    def _repeats(self, key: int, idx: np.ndarray) -> bool:
        """Whether a cell appears twice in ``idx`` (through a scratch array
        per global buffer: two passes, not a sort)."""
        scratch = self._global_scratch.get(key)
        if scratch is None:
            n = len(self.m.memory.globals[key]) // self._global_grain[key]
            scratch = self._global_scratch[key] = np.zeros(n, dtype=np.int64)
        return repeated(idx, scratch)

    def _record_global_reads(self, key: int, idx: np.ndarray, th: np.ndarray, pc: int,
                             fence_epoch: np.ndarray) -> None:
        """Record plain reads of cells ``idx`` of global buffer ``key`` by
        ``th`` (at ``pc``, the CTAs' fence epochs then)."""
        _, reader, _, r_at, _, _, _, r_epoch = self._global_records(key)
        cta = (th // self.ntid).astype(np.int32)
        r = reader[idx]
        reader[idx] = np.where((r == -1) | (r == cta), cta, -2)
        r_at[idx] = pack_at(th, pc)
        if r_epoch is not None:
            r_epoch[idx] = fence_epoch[cta]

    def _published(self, ctas: np.ndarray, epochs: np.ndarray) -> np.ndarray:
        """Whether each CTA has run a gpu-scope fence or release since the
        access stamped with its ``epochs`` (always False in kernels without
        any: nothing there can order CTAs)."""
        if not self.cta_sync:
            return np.zeros(len(ctas), dtype=bool)
        return self.fence_epoch[np.maximum(ctas, 0)] > epochs

    def _global_race(self, kind: str, k: int, idx: np.ndarray, th: np.ndarray, at: int, other: str) -> None:
        tid, pc = unpack_at(at)
        self.report("race", f"global-memory race between CTAs: {kind} at {self.at(int(th[k]))} conflicts with "
                    f"{other} at {self.line(pc)} by {self.who(tid)}: nothing orders accesses of different "
                    "CTAs (no gpu-scope fence or release by that CTA between them)",
                    self.line(self.pc), self.line(pc))

    def _cta_scoped(self) -> bool:
        """The executing strong access has ``.cta`` scope: it orders nothing,
        and is not morally strong, between CTAs."""
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        return ins is not None and "cta" in ins.modifiers

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
            if writes and release and not self._cta_scoped():
                self.fence_epoch[c] += 1            # a gpu-scope release publishes the CTA's accesses
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
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        if ins is not None and orders_ctas(ins):
            np.add.at(self.fence_epoch, np.unique(threads // self.ntid), 1)
        for t in threads.tolist():
            key = self.pending_acquire.pop(t, None)
            if key is not None:
                self._acquire_location(np.array([t]), key)
        self.fenced_threads[threads] = True

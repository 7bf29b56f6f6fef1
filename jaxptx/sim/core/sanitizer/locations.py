"""The sanitizer's orderings through memory: the memory-order semantics of
the executing access, release/acquire through one location, fences."""

from __future__ import annotations

import numpy as np

from .values import orders_ctas

__all__ = ["LocationChecks", "SCOPE_RANKS"]

SCOPE_RANKS = {"cta": 0, "cluster": 1, "gpu": 2, "gl": 2, "sys": 3}
"""Scopes (and ``membar`` levels), narrowest first: ``.gpu`` is 2, ``.sys`` 3
(:mod:`.node` compares them)."""


class LocationChecks:
    """Mixed into :class:`Sanitizer`: release/acquire orderings through
    memory locations (shared or global) and fences."""

    def _cta_scoped(self) -> bool:
        """The executing strong access has ``.cta`` scope: it orders nothing,
        and is not morally strong, between CTAs."""
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        return ins is not None and "cta" in ins.modifiers

    def _scope(self) -> int:
        """The scope of the executing strong access or fence, as a
        :data:`SCOPE_RANKS` rank: its ``.cta``/``.cluster``/``.gpu``/``.sys``
        (``membar``: its level); ``.volatile`` is ``.relaxed.sys`` (PTX ISA,
        "Memory Consistency Model": volatile operations); else ``.gpu``, the
        default scope of atomics."""
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        if ins is None:
            return SCOPE_RANKS["gpu"]
        for mod in ins.modifiers:
            rank = SCOPE_RANKS.get(mod)
            if rank is not None:
                return rank
        return SCOPE_RANKS["sys"] if "volatile" in ins.modifiers else SCOPE_RANKS["gpu"]

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
                    joined = self.clocks.joined(publish)
                    self.location_clocks[key] = joined if held is None else np.maximum(held, joined[:len(held)])
                    self.clocks.tick(publish)
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
            self.clocks.acquire(threads, held)

    def fence(self, threads: np.ndarray) -> None:
        """``fence``/``membar``: relaxed loads before it acquire, strong
        stores after it release (the fence-atomic patterns of the memory
        model)."""
        if self.node is not None:
            self.node.fence(self, threads, self._scope())
        code = self.m.program.code
        ins = code[self.pc] if 0 <= self.pc < len(code) else None
        if ins is not None and orders_ctas(ins):
            np.add.at(self.fence_epoch, np.unique(threads // self.ntid), 1)
        for t in threads.tolist():
            key = self.pending_acquire.pop(t, None)
            if key is not None:
                self._acquire_location(np.array([t]), key)
        self.fenced_threads[threads] = True

"""The emulator's memory: global buffers, per-CTA shared memory, per-thread
local memory, the param and const spaces, and generic addressing.

Addresses are 64-bit. Global buffer ``k`` lives at ``(k + 1) << 36``; the
generic window of shared memory starts at ``SHARED_WINDOW`` and that of local
memory at ``LOCAL_WINDOW`` (each thread sees its own CTA's shared memory and
its own local memory there). State-space addresses (``ld.shared``) are
offsets within the space. Accesses are gathers and scatters over all the
executing threads at once; misaligned or out-of-bounds ones raise.
"""

from __future__ import annotations

import numpy as np

from ._program import SimError

__all__ = ["Memory", "GLOBAL_SHIFT", "SHARED_WINDOW", "LOCAL_WINDOW", "CONST_WINDOW", "PARAM_WINDOW",
           "CLUSTER_TAG"]

GLOBAL_SHIFT = 36
SHARED_WINDOW = 0x7000_0000_0000
LOCAL_WINDOW = 0x7800_0000_0000
CONST_WINDOW = 0x7C00_0000_0000
PARAM_WINDOW = 0x7E00_0000_0000
_WINDOW_SIZE = 1 << 40
# A shared::cluster address of another CTA (from mapa): this bit, the CTA's
# rank in the cluster in bits 24-30, the offset in its window below.
CLUSTER_TAG = 1 << 31
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_LOG2 = {1: 0, 2: 1, 4: 2, 8: 3}


def _padded(nbytes: int) -> np.ndarray:
    return np.zeros(max(16, -(-nbytes // 16) * 16), dtype=np.uint8)


class Memory:
    """All address spaces of one launch.

    Attributes:
        globals: global buffers (uint8, padded to 16 bytes) and their sizes.
        shared: ``(nctas, shared_size)`` bytes, flattened.
        local: ``(nthreads, local_size)`` bytes, flattened.
        param, const: the kernel's param and const bytes.
    """

    def __init__(self, nctas: int, ntid: int, shared_size: int, local_size: int,
                 param_size: int, const_size: int) -> None:
        self.globals: list[np.ndarray] = []
        self.sizes: list[int] = []
        self.shared_size = shared_size
        self.local_size = local_size
        self.ntid = ntid
        self.shared = _padded(nctas * shared_size)
        self.local = _padded(nctas * ntid * local_size)
        self.param = _padded(param_size)
        self.const = _padded(const_size)
        # Called as watch(flat shared indices, threads, width, write) for every
        # shared access when the sanitizer runs.
        self.watch = None
        # (CTA index, rank) -> index of that rank's CTA in its cluster (set by the machine).
        self.cluster_cta = lambda cta, rank: cta

    def add_global(self, nbytes: int) -> int:
        """Allocate a zeroed global buffer; returns its base address."""
        self.globals.append(_padded(nbytes))
        self.sizes.append(nbytes)
        return (len(self.globals)) << GLOBAL_SHIFT

    # address translation -------------------------------------------------------
    def _resolve(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
                 what: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Split an access into ``(buffer, byte offsets, positions)`` groups."""
        addr = addr.astype(np.uint64, copy=False)
        if space == "generic":
            return self._generic(addr, threads, width, what)
        every = np.arange(len(addr))
        if space == "global":
            return self._global(addr, every, threads, width, what)
        if space == "shared":
            owner = threads // self.ntid
            if (addr & np.uint64(CLUSTER_TAG)).any():
                owner, addr = self._remote(owner, addr)
            return [self._window(self.shared, self.shared_size, owner, addr,
                                 every, threads, width, "shared", what)]
        if space == "local":
            return [self._window(self.local, self.local_size, threads, addr, every, threads,
                                 width, "local", what)]
        buf = self.param if space == "param" else self.const
        return [self._window(buf, len(buf), np.zeros_like(threads), addr, every, threads,
                             width, space, what)]

    def _remote(self, owner: np.ndarray, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distributed shared memory: an address made by ``mapa`` carries
        ``CLUSTER_TAG`` and the target CTA's rank in bits 24-30; others are
        the executing CTA's own."""
        tagged = (addr & np.uint64(CLUSTER_TAG)) != 0
        rank = ((addr >> np.uint64(24)) & np.uint64(0x7F)).astype(np.int64)
        owner = np.where(tagged, self.cluster_cta(owner, rank), owner)
        return owner, addr & np.uint64(0xFFFFFF)

    def _generic(self, addr: np.ndarray, threads: np.ndarray, width: int, what: str):
        groups = []
        rest = np.ones(len(addr), dtype=bool)
        for base, space in ((SHARED_WINDOW, "shared"), (LOCAL_WINDOW, "local"),
                            (CONST_WINDOW, "const"), (PARAM_WINDOW, "param")):
            inside = (addr >= base) & (addr < base + _WINDOW_SIZE)
            if inside.any():
                pos = np.nonzero(inside)[0]
                rest &= ~inside
                offsets = addr[pos] - np.uint64(base)
                if space == "shared":
                    owner = threads[pos] // self.ntid
                    if (offsets & np.uint64(CLUSTER_TAG)).any():    # generic mapa address
                        owner, offsets = self._remote(owner, offsets)
                    groups.append(self._window(self.shared, self.shared_size, owner,
                                               offsets, pos, threads, width, space, what))
                elif space == "local":
                    groups.append(self._window(self.local, self.local_size, threads[pos], offsets, pos,
                                               threads, width, space, what))
                else:
                    buf = self.param if space == "param" else self.const
                    groups.append(self._window(buf, len(buf), np.zeros_like(pos), offsets, pos, threads,
                                               width, space, what))
        if rest.all():
            return self._global(addr, np.arange(len(addr)), threads, width, what)
        if rest.any():
            pos = np.nonzero(rest)[0]
            groups.extend(self._global(addr[pos], pos, threads, width, what))
        return groups

    def _global(self, addr: np.ndarray, pos: np.ndarray, threads: np.ndarray, width: int, what: str):
        if len(addr):
            # The usual access: one buffer, in bounds, aligned — four array ops.
            lo, hi = int(addr.min()), int(addr.max())
            k = (lo >> GLOBAL_SHIFT) - 1
            if (hi >> GLOBAL_SHIFT) - 1 == k and 0 <= k < len(self.globals):
                base = (k + 1) << GLOBAL_SHIFT
                if hi - base + width <= self.sizes[k] and not (width > 1 and (addr & np.uint64(width - 1)).any()):
                    return [(self.globals[k], addr - np.uint64(base), pos)]
        ids = (addr >> np.uint64(GLOBAL_SHIFT)).astype(np.int64) - 1
        offsets = addr & np.uint64((1 << GLOBAL_SHIFT) - 1)
        groups = []
        first = int(ids[0]) if len(ids) else 0
        distinct = [first] if (ids == first).all() else np.unique(ids)   # one buffer: the usual case
        for k in distinct:
            sel = ids == k
            if k < 0 or k >= len(self.globals):
                bad = int(addr[sel][0])
                raise SimError(f"{what}: address {bad:#x} is not in any global buffer "
                               f"({self._who(threads[pos[sel][0]])})")
            off = offsets[sel]
            self._check(off, width, self.sizes[k], "global", what, (k + 1) << GLOBAL_SHIFT, threads[pos[sel]])
            groups.append((self.globals[k], off, pos[sel]))
        return groups

    def _window(self, buf: np.ndarray, size: int, owner: np.ndarray, offsets: np.ndarray,
                pos: np.ndarray, threads: np.ndarray, width: int, space: str, what: str):
        self._check(offsets, width, size, space, what, 0, threads[pos])
        return buf, owner.astype(np.uint64) * np.uint64(size) + offsets, pos

    def _who(self, thread: int) -> str:
        cta, tid = divmod(int(thread), self.ntid)
        return f"CTA {cta}, thread {tid}"

    def _check(self, off: np.ndarray, width: int, size: int, space: str, what: str, base: int,
               threads: np.ndarray) -> None:
        if len(off) == 0:
            return
        if width > 1 and (off % np.uint64(width)).any():
            k = int(np.nonzero((off % np.uint64(width)) != 0)[0][0])
            raise SimError(f"{what}: misaligned {width}-byte {space} access at {base + int(off[k]):#x} "
                           f"({self._who(threads[k])})")
        if int(off.max()) + width > size:
            k = int(np.nonzero(off + np.uint64(width) > np.uint64(size))[0][0])
            raise SimError(f"{what}: {space} access of {width} bytes at offset {int(off[k]):#x} is out of "
                           f"bounds (the {space} buffer has {size} bytes; {self._who(threads[k])})")

    # access ----------------------------------------------------------------------
    def load(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
             what: str = "ld") -> np.ndarray:
        """``width``-byte unsigned values at ``addr`` for each thread."""
        out = np.empty(len(addr), dtype=_UINT[width])
        for buf, off, pos in self._resolve(space, addr, threads, width, what):
            if self.watch is not None and buf is self.shared:
                self.watch(off, threads[pos], width, False)
            elements = buf.view(_UINT[width])[off >> np.uint64(_LOG2[width])]
            if len(pos) == len(out):
                return elements        # every thread in one group: no scatter into `out`
            out[pos] = elements
        return out

    def store(self, space: str, addr: np.ndarray, threads: np.ndarray, values: np.ndarray,
              width: int, what: str = "st") -> None:
        """Store ``width``-byte unsigned ``values`` at ``addr`` (later threads win)."""
        values = np.asarray(values).astype(_UINT[width], copy=False)
        for buf, off, pos in self._resolve(space, addr, threads, width, what):
            if self.watch is not None and buf is self.shared:
                self.watch(off, threads[pos], width, True)
            buf.view(_UINT[width])[off >> np.uint64(_LOG2[width])] = values if len(pos) == len(values) \
                else values[pos]

    def locations(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
                  what: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The ``(buffer view, element index, positions)`` groups of an access,
        for read-modify-write operations (atomics)."""
        return [(buf.view(_UINT[width]), off // np.uint64(width), pos)
                for buf, off, pos in self._resolve(space, addr, threads, width, what)]

"""The emulator's memory: global buffers, per-CTA shared memory, per-thread
local memory, the param and const spaces, and generic addressing.

Addresses are 64-bit. Global buffer ``k`` lives at ``(k + 1) << 36``; the
generic window of shared memory starts at ``SHARED_WINDOW`` and that of local
memory at ``LOCAL_WINDOW`` (each thread sees its own CTA's shared memory and
its own local memory there). A shared address holds the cluster rank of the
CTA whose memory it names from bit ``RANK_SHIFT`` up and the offset in that
CTA's window below (:data:`SHARED_OFFSET`), as on hardware: a CTA's
``shared::cta`` addresses are its ``shared::cluster`` addresses (PTX ISA,
"Shared State Space": the shared::cta window lies inside the shared::cluster
window), so in CTA rank 1 of a cluster ``mov.u32 %r, smem_var`` has bit 24
set, and clearing it names the same byte of rank 0. Outside clusters every
rank is 0 and shared addresses are plain offsets. On device ``d`` of a node
(:class:`jaxptx.sim.System`) global buffer ``k`` lives at ``(d << DEVICE_SHIFT)
+ ((k + 1) << 36)`` (:attr:`Memory.first_slot`), so that addresses are unique
across the node, and ``MULTICAST_BASE`` starts the node's multicast objects;
a global address outside the launch's own buffers goes to the node
(:attr:`Memory.elsewhere`). State-space addresses (``ld.shared``) are
offsets within the space. Accesses are gathers and scatters over all the
executing threads at once; misaligned or out-of-bounds ones, those into a
freed allocation and stores to the const window fault (:class:`SimFault`,
naming the buffer where the launch named it: :attr:`Memory.names`).
"""

from __future__ import annotations

import numpy as np

from ..numerics.b128 import B128
from ..core.observers import ATOMIC, LOAD, STORE, UPDATE
from ..core import fastpaths
from ..errors import SimFault

__all__ = ["Memory", "GLOBAL_SHIFT", "SHARED_WINDOW", "LOCAL_WINDOW", "CONST_WINDOW", "PARAM_WINDOW",
           "RANK_SHIFT", "SHARED_OFFSET", "DEVICE_SHIFT", "NODE_BASE", "MULTICAST_BASE"]

GLOBAL_SHIFT = 36
# A node's device d has its allocations at d << DEVICE_SHIFT and up (device 0
# and a lone device: as above); device index 0xFF marks multicast addresses.
DEVICE_SHIFT = 48
NODE_BASE = 1 << DEVICE_SHIFT           # above every window: device 1's first address
MULTICAST_BASE = 0xFF << DEVICE_SHIFT
SHARED_WINDOW = 0x7000_0000_0000
LOCAL_WINDOW = 0x7800_0000_0000
CONST_WINDOW = 0x7C00_0000_0000
PARAM_WINDOW = 0x7E00_0000_0000
_WINDOW_SIZE = 1 << 40
# A shared address: the cluster rank of the CTA it names from this bit up,
# the offset in that CTA's window below (a CTA has at most 228 KiB of shared
# memory, a cluster at most 16 CTAs).
RANK_SHIFT = 24
SHARED_OFFSET = (1 << RANK_SHIFT) - 1
_RANK_SHIFT = np.uint64(RANK_SHIFT)
_OFFSET = np.uint64(SHARED_OFFSET)
# Element dtype of each access width; 16-byte accesses (``ld.b128``) move
# B128 records. Buffers are padded to 16 bytes, so every view fits.
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: B128}
_LOG2 = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}


def _uniform(a: np.ndarray) -> bool:
    """Whether ``a`` is a broadcast of one value (``Step.address`` of a variable)."""
    return a.ndim == 1 and a.strides[0] == 0 and len(a) > 1


def _summary(a: np.ndarray) -> tuple[int, int, int]:
    """``(min, max, bitwise or)`` of a non-empty address array (reductions
    over a broadcast are slow in numpy: it has one value)."""
    if _uniform(a):
        v = int(a[0])
        return v, v, v
    return int(a.min()), int(a.max()), int(np.bitwise_or.reduce(a))


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
        # The bytes of each CTA's window a kernel may use (the window itself is
        # padded to 16 bytes so every CTA's mbarriers stay aligned).
        self.shared_limit = shared_size
        self.local_size = local_size
        self.ntid = ntid
        self.nthreads = nctas * ntid
        self._cta_bases: np.ndarray | None = None
        self._all: np.ndarray | None = None     # the array last found to be every thread (_everyone)
        self._scratch: np.ndarray | None = None     # gather(scratch=True)'s vectors
        self._index: np.ndarray | None = None       # _flat's indices
        self.shared = _padded(nctas * shared_size)
        self.local = _padded(nctas * ntid * local_size)
        self.param = _padded(param_size)
        self.const = _padded(const_size)
        # The launch's observers' access event (jaxptx.sim.core.observers):
        # on_access(buffer, byte offsets, threads, width, kind, values) for
        # every access, None when nobody watches them.
        self.on_access = None
        # Global buffer index -> what it is, for messages ("parameter 'x'");
        # and the indices of freed allocations (an access is a use after free).
        self.names: dict[int, str] = {}
        self.freed: frozenset[int] = frozenset()
        # The global slot (address >> GLOBAL_SHIFT) of buffer 0: 1 for a lone
        # device; (d << (DEVICE_SHIFT - GLOBAL_SHIFT)) + 1 for device d of a node.
        self.first_slot = 1
        # A node's seams (jaxptx.sim.System), None for a lone device:
        # elsewhere(addr, positions, threads, width, what) resolves global
        # addresses outside this launch's buffers (a peer's memory) into
        # access groups; multicast(addr, threads, width, what) maps multimem
        # addresses to every bound copy; peer_globals() lists the buffers
        # other devices may change (hashed into hang proofs, :mod:`..core.hangs`).
        self.elsewhere = None
        self.multicast = None
        self.peer_globals = None
        # (CTA index, rank) -> index of that rank's CTA in its cluster (set by the machine).
        self.cluster_cta = lambda cta, rank: cta
        # Each CTA's %cluster_ctarank and the cluster size (set_clusters);
        # None and 1 when every cluster is one CTA.
        self.cta_ranks: np.ndarray | None = None
        self.cluster_size = 1
        self._thread_ranks: np.ndarray | None = None      # per thread, and as address bits
        self._thread_bits: np.ndarray | None = None
        self._owners: tuple | None = None       # (cluster_cta, size, table) of _owner_table

    def set_clusters(self, ranks: np.ndarray | None, size: int) -> None:
        """Each CTA's ``%cluster_ctarank`` (``None`` when clusters are single
        CTAs) and the cluster size: shared addresses then carry the rank of
        the CTA they name (module docstring)."""
        self.cta_ranks = None if ranks is None else np.asarray(ranks, dtype=np.int64)
        self.cluster_size = size
        self._thread_ranks = self._thread_bits = None
        self._owners = None

    def _ranks_of(self, threads: np.ndarray) -> np.ndarray:
        """The cluster rank of each thread's CTA (int64; cta_ranks is set)."""
        if self._thread_ranks is None:
            self._thread_ranks = np.repeat(self.cta_ranks, self.ntid)
        return self._thread_ranks if _every_thread(threads, self.nthreads) else self._thread_ranks[threads]

    def rank_bits(self, threads: np.ndarray) -> np.ndarray | None:
        """``rank << RANK_SHIFT`` (uint64) of each thread's CTA: what its
        shared addresses carry; ``None`` outside clusters (all zero)."""
        if self.cta_ranks is None:
            return None
        if self._thread_bits is None:
            self._thread_bits = np.repeat(self.cta_ranks, self.ntid).astype(np.uint64) << _RANK_SHIFT
        return self._thread_bits if _every_thread(threads, self.nthreads) else self._thread_bits[threads]

    def shared_address(self, offsets: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """The shared addresses of CTA-relative ``offsets`` in each thread's
        own CTA (a matrix descriptor's start address holds only the offset:
        its 14-bit ``>> 4`` field stops at bit 17)."""
        offsets = np.asarray(offsets, dtype=np.uint64)
        bits = self.rank_bits(threads)
        return offsets if bits is None else (offsets & _OFFSET) | bits

    def foreign(self, addr: np.ndarray, threads: np.ndarray) -> int | None:
        """Position of the first shared address that names another CTA than
        its thread's (its rank bits differ), ``None`` when none does (always
        outside clusters)."""
        if self.cta_ranks is None or not len(addr):
            return None
        bad = (np.asarray(addr, dtype=np.uint64) >> _RANK_SHIFT).view(np.int64) != self._ranks_of(threads)
        return int(np.flatnonzero(bad)[0]) if bad.any() else None

    def add_global(self, nbytes: int) -> int:
        """Allocate a zeroed global buffer; returns its base address."""
        self.globals.append(_padded(nbytes))
        self.sizes.append(nbytes)
        return (len(self.globals)) << GLOBAL_SHIFT

    # address translation -------------------------------------------------------
    def _resolve(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
                 what: str, write: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """Split an access into ``(buffer, byte offsets, positions)`` groups
        (offsets int64; positions ``None`` when the group is every thread)."""
        addr = addr.astype(np.uint64, copy=False)
        if space == "generic":
            return self._generic(addr, threads, width, what, write)
        if space == "global":
            return self._global(addr, None, threads, width, what)
        if space == "shared":
            owner = None
            if self.cta_ranks is not None and len(addr):
                owner, addr = self._ranked(addr, threads, what)
            return [self._window(self.shared, self.shared_size, owner, addr,
                                 None, threads, width, "shared", what, self.shared_limit)]
        if space == "local":
            return [self._window(self.local, self.local_size, threads, addr, None, threads,
                                 width, "local", what)]
        buf = self.param if space == "param" else self.const
        return [self._window(buf, len(buf), 0, addr, None, threads, width, space, what)]

    def _ranked(self, addr: np.ndarray, threads: np.ndarray, what: str) -> tuple[np.ndarray | None, np.ndarray]:
        """Distributed shared memory: ``(owner CTA of each address, None when
        every one is the accessing thread's own; offsets in its window)``
        from the rank each shared address carries (module docstring)."""
        rank = (addr >> _RANK_SHIFT).view(np.int64)
        own = self._ranks_of(threads)
        offsets = addr & _OFFSET
        if (rank == own).all():         # the usual access: each thread's own CTA
            return None, offsets
        bad = rank >= self.cluster_size
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise SimFault(f"{what}: shared address {int(addr[k]):#x} names the CTA of cluster rank {int(rank[k])}, "
                           f"but the cluster has {self.cluster_size} CTAs (bits {RANK_SHIFT} and up of a shared "
                           f"address hold the rank; {self._who(threads[k])})")
        if fastpaths.on() and len(addr) > 4 * self.cluster_size * (self.nthreads // self.ntid):
            # A wide access (a bulk or tensor copy): look each (CTA, rank) up
            # in a table of every pair, computed once per cluster layout.
            return self._owner_table()[(threads // self.ntid) * self.cluster_size + rank], offsets
        return self.cluster_cta(threads // self.ntid, rank), offsets

    def _owner_table(self) -> np.ndarray:
        """``cluster_cta(cta, rank)`` for every CTA and rank, at ``cta *
        cluster_size + rank`` (rebuilt when the cluster layout changes)."""
        fn, size = self.cluster_cta, self.cluster_size
        cached = self._owners
        if cached is None or cached[0] is not fn or cached[1] != size:
            nctas = self.nthreads // self.ntid
            cta, rank = np.divmod(np.arange(nctas * size, dtype=np.int64), size)
            cached = self._owners = (fn, size, np.asarray(fn(cta, rank), dtype=np.int64))
        return cached[2]

    def _generic(self, addr: np.ndarray, threads: np.ndarray, width: int, what: str, write: bool = False):
        if len(addr):
            top = int(addr.max())
            if top < SHARED_WINDOW or (top >= NODE_BASE and int(addr.min()) >= NODE_BASE):   # all global
                return self._global(addr, None, threads, width, what)
        groups = []
        rest = np.ones(len(addr), dtype=bool)
        for base, space in ((SHARED_WINDOW, "shared"), (LOCAL_WINDOW, "local"),
                            (CONST_WINDOW, "const"), (PARAM_WINDOW, "param")):
            inside = (addr >= base) & (addr < base + _WINDOW_SIZE)
            if inside.any():
                whole = bool(inside.all())
                pos = None if whole else np.nonzero(inside)[0]
                rest &= ~inside
                offsets = addr - np.uint64(base) if whole else addr[pos] - np.uint64(base)
                if space == "shared":
                    owner = None
                    if self.cta_ranks is not None:
                        owner, offsets = self._ranked(offsets, threads if whole else threads[pos], what)
                    elif not whole:
                        owner = threads[pos] // self.ntid
                    groups.append(self._window(self.shared, self.shared_size, owner,
                                               offsets, pos, threads, width, space, what, self.shared_limit))
                elif space == "local":
                    owner = threads if whole else threads[pos]
                    groups.append(self._window(self.local, self.local_size, owner, offsets, pos, threads,
                                               width, space, what))
                else:
                    if write and space == "const":
                        self._read_only(addr, inside, threads, what)
                    buf = self.param if space == "param" else self.const
                    groups.append(self._window(buf, len(buf), 0, offsets, pos, threads, width, space, what))
        if rest.all():
            return self._global(addr, None, threads, width, what)
        if rest.any():
            pos = np.nonzero(rest)[0]
            groups.extend(self._global(addr[pos], pos, threads, width, what))
        return groups

    def _global(self, addr: np.ndarray, pos: np.ndarray | None, threads: np.ndarray, width: int, what: str):
        if len(addr):
            # The usual access: one buffer, in bounds, aligned — a few array ops.
            lo, hi, bits = _summary(addr)
            first = self.first_slot
            k = (lo >> GLOBAL_SHIFT) - first
            if (hi >> GLOBAL_SHIFT) - first == k and 0 <= k < len(self.globals):
                base = (k + first) << GLOBAL_SHIFT
                if hi - base + width <= self.sizes[k] and \
                        not (width > 1 and bits & (width - 1)):
                    return [(self.globals[k], addr.view(np.int64) - base, pos)]
        every = np.arange(len(addr)) if pos is None else pos
        slot0 = self.first_slot
        ids = (addr >> np.uint64(GLOBAL_SHIFT)).astype(np.int64) - slot0
        offsets = (addr & np.uint64((1 << GLOBAL_SHIFT) - 1)).view(np.int64)
        groups = []
        first = int(ids[0]) if len(ids) else 0
        distinct = [first] if (ids == first).all() else np.unique(ids)   # one buffer: the usual case
        for k in distinct:
            sel = ids == k
            if (k < 0 or k >= len(self.globals)) and self.elsewhere is not None:     # a node's other memory
                groups.extend(self.elsewhere(addr[sel], every[sel], threads, width, what))
                continue
            if k < 0 or k >= len(self.globals):
                bad = int(addr[sel][0])
                raise SimFault(f"{what}: address {bad:#x} is not in any global buffer "
                               f"({self._who(threads[every[sel][0]])})")
            if k in self.freed:
                bad = int(addr[sel][0])
                raise SimFault(f"{what}: address {bad:#x} is in the allocation at {(k + slot0) << GLOBAL_SHIFT:#x}, "
                               f"which was freed (a use after free; {self._who(threads[every[sel][0]])})")
            off = offsets[sel]
            self._check(off, width, self.sizes[k], "global", what, (k + slot0) << GLOBAL_SHIFT,
                        threads[every[sel]])
            groups.append((self.globals[k], off, every[sel]))
        return groups

    def _window(self, buf: np.ndarray, size: int, owner: np.ndarray | int | None, offsets: np.ndarray,
                pos: np.ndarray | None, threads: np.ndarray, width: int, space: str, what: str,
                limit: int | None = None):
        """One group in a per-CTA (``owner`` None: each thread's own CTA),
        per-thread or single window of ``size`` bytes, of which the first
        ``limit`` (default all) may be accessed."""
        off = offsets.view(np.int64)
        limit = size if limit is None else limit
        if len(off):
            lo, hi, bits = _summary(off)
            if lo < 0 or hi + width > limit or (width > 1 and bits & (width - 1)):
                self._check(offsets.astype(np.uint64), width, limit, space, what, 0,
                            threads if pos is None else threads[pos])
        if owner is None:
            if pos is None and _every_thread(threads, self.nthreads):
                return buf, self._cta_base() + off, pos
            owner = threads // self.ntid if pos is None else threads[pos] // self.ntid
        if isinstance(owner, int):
            return buf, off if owner == 0 else off + owner * size, pos
        return buf, owner.astype(np.int64) * size + off, pos

    def _cta_base(self) -> np.ndarray:
        """Byte offset of each thread's CTA in shared memory (whole grid; once)."""
        if self._cta_bases is None:
            self._cta_bases = np.arange(self.nthreads, dtype=np.int64) // self.ntid * self.shared_size
        return self._cta_bases

    def _who(self, thread: int) -> str:
        cta, tid = divmod(int(thread), self.ntid)
        return f"CTA {cta}, thread {tid}"

    def describe(self, address: int) -> str:
        """`` (offset 0x10 of parameter 'x')`` for a generic or global
        address in a named global buffer, else ``""``."""
        k = (int(address) >> GLOBAL_SHIFT) - self.first_slot
        if SHARED_WINDOW <= address < NODE_BASE or k not in self.names:
            return ""
        return f" (offset {int(address) & ((1 << GLOBAL_SHIFT) - 1):#x} of {self.names[k]})"

    def _read_only(self, addr: np.ndarray, inside: np.ndarray, threads: np.ndarray, what: str) -> None:
        """A store through a generic address into the const window: constant
        memory is read-only (PTX ISA, "Constant State Space"), so it faults."""
        k = int(np.flatnonzero(inside)[0])
        raise SimFault(f"{what}: store to constant memory at generic address {int(addr[k]):#x} (offset "
                       f"{int(addr[k]) - CONST_WINDOW:#x} of the const space, which is read-only; "
                       f"{self._who(threads[k])})")

    def _check(self, off: np.ndarray, width: int, size: int, space: str, what: str, base: int,
               threads: np.ndarray) -> None:
        if len(off) == 0:
            return
        off = off.astype(np.uint64, copy=False)
        name = self.names.get((base >> GLOBAL_SHIFT) - self.first_slot) if space == "global" else None
        if width > 1 and (off % np.uint64(width)).any():
            k = int(np.nonzero((off % np.uint64(width)) != 0)[0][0])
            where = f"offset {int(off[k]):#x} of {name}; " if name else ""
            raise SimFault(f"{what}: misaligned {width}-byte {space} access at {base + int(off[k]):#x} "
                           f"({where}{self._who(threads[k])})")
        if int(off.max()) + width > size:
            k = int(np.nonzero(off + np.uint64(width) > np.uint64(size))[0][0])
            if name:
                raise SimFault(f"{what}: {space} access of {width} bytes at offset {int(off[k]):#x} of {name} "
                               f"is out of bounds (its buffer has {size} bytes; {self._who(threads[k])})")
            raise SimFault(f"{what}: {space} access of {width} bytes at offset {int(off[k]):#x} is out of "
                           f"bounds (the {space} buffer has {size} bytes; {self._who(threads[k])})")

    # the one-buffer fast path ------------------------------------------------------
    def hears(self, kind: str) -> bool:
        """Whether the access hook wants accesses of ``kind``: a hook whose
        ``hears_loads`` attribute is false (the device's store recorder)
        ignores loads, so they need not be told."""
        hook = self.on_access
        return hook is not None and (kind != LOAD or getattr(hook, "hears_loads", True))

    def _flat(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int, count: int,
              offset: int = 0) -> tuple[np.ndarray, np.ndarray, int] | None:
        """``(buffer, index, total)`` of an access of ``count`` elements of
        ``width`` bytes a thread (``total`` bytes: 1, 2, 4 or 8 bytes a
        vector, or one 16-byte element) at ``addr + offset`` when the fast paths are on and
        every address lies in one global buffer or, for every thread of the
        grid in order, in each thread's own shared window, in bounds and
        aligned to ``total``: ``index`` counts ``total``-byte units of the
        buffer (int64; the memory's own scratch array, valid until the next
        access). ``None`` otherwise, and then the general path
        (:meth:`_resolve`) decides, faults included: this path only takes
        accesses on which the general one cannot fault."""
        if width not in (1, 2, 4, 8) and not (width == 16 and count == 1):
            return None
        total = width * count
        if not len(addr) or not fastpaths.on() or _uniform(addr):
            return None
        addr = addr.astype(np.uint64, copy=False)
        lo, hi, bits = _summary(addr)
        lo, hi = lo + offset, hi + offset
        if (bits | offset) & (total - 1) or lo < 0 or hi >= 1 << 64:       # (no wrapping around)
            return None
        window = 0
        if space == "generic":
            if hi < SHARED_WINDOW or lo >= NODE_BASE:
                space = "global"
            elif lo >= SHARED_WINDOW and hi < SHARED_WINDOW + _WINDOW_SIZE:
                space, window, hi = "shared", SHARED_WINDOW, hi - SHARED_WINDOW
            else:
                return None
        shift = _LOG2.get(total)
        if shift is None:
            return None
        if space == "global":
            first = self.first_slot
            k = (lo >> GLOBAL_SHIFT) - first
            if (hi >> GLOBAL_SHIFT) - first != k or not 0 <= k < len(self.globals):
                return None
            base = (k + first) << GLOBAL_SHIFT
            if hi - base + total > self.sizes[k]:
                return None
            buf = self.globals[k]
        elif space != "shared" or self.cta_ranks is not None or self.shared_size % total \
                or hi + total > self.shared_limit or not self._everyone(threads):
            return None
        else:
            base, buf = window, self.shared
        # index = (addr + offset - base) >> shift, in place in the scratch
        # array (no fresh pages a step); every term fits in int64.
        index = self._index
        if index is None or len(index) != len(addr):
            index = self._index = np.empty(len(addr), dtype=np.int64)
        np.subtract(addr.view(np.int64), base - offset, out=index)
        if buf is self.shared:
            index += self._cta_base()
        index >>= shift
        return buf, index, total

    def _everyone(self, threads: np.ndarray) -> bool:
        """:func:`_every_thread` for the grid, remembering the last array
        found to be it (the machine passes one array for every thread)."""
        if threads is self._all:
            return True
        if _every_thread(threads, self.nthreads):
            self._all = threads
            return True
        return False

    def gather(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
               count: int = 1, scratch: bool = False, offset: int = 0) -> np.ndarray | None:
        """The ``count`` consecutive ``width``-byte unsigned elements at each
        address, ``(n, count)`` (``(n,)`` for one), when the access takes the
        one-buffer fast path (:meth:`_flat`: in bounds and each address
        aligned to ``count * width``); ``None`` otherwise, and then the
        caller loads element by element (:meth:`load`), which checks and
        reports faults. A hook that hears loads is told each element's load
        first, with the arguments :meth:`load` gives it. With ``scratch`` a
        vector lands in an array the memory keeps for the next such gather
        (no fresh pages a step), so the caller must copy what it keeps
        before then. ``offset``: added to every address (``[%rd + 16]``),
        folded into the index arithmetic."""
        flat = self._flat(space, addr, threads, width, count, offset)
        if flat is None:
            return None
        buf, index, total = flat
        if self.hears(LOAD):
            # The events of load(): byte offsets (fresh arrays; the hook may
            # keep them, or reach the memory and reuse its scratch index).
            hook, lead = self.on_access, index << _LOG2[total]
            for i in range(count):
                hook(buf, lead + i * width if i else lead, threads, width, LOAD)
            index = lead >> _LOG2[total]
        # mode="clip": every index is in bounds (checked), and numpy's
        # default "raise" checks each again and buffers `out`.
        if count == 1:
            return buf.view(_UINT[width]).take(index, mode="clip")
        # Whole vectors as elements of a void view (bytes, one gather; numpy
        # gathers 2-d rows several times slower).
        units = _units(buf, total)
        if not scratch:
            return units.take(index, mode="clip").view(_UINT[width]).reshape(-1, count)
        out = self._scratch
        if out is None or out.shape != index.shape or out.dtype != units.dtype:
            out = self._scratch = np.empty(index.shape, dtype=units.dtype)
        return units.take(index, out=out, mode="clip").view(_UINT[width]).reshape(-1, count)

    def scatter(self, space: str, addr: np.ndarray, threads: np.ndarray, values: np.ndarray,
                width: int, count: int = 1, offset: int = 0) -> bool:
        """Store ``values`` (``(n, count)`` or ``(n,)`` unsigned elements of
        ``width`` bytes) as :meth:`gather` loads them, when the access takes
        the one-buffer fast path; ``False`` (nothing stored) otherwise.
        Where several threads store to one address the later thread wins,
        as in :meth:`store` (vectors aligned to their size overlap whole or
        not at all). ``offset``: as for :meth:`gather`. A listening access
        hook hears each element's store just before it is written, with
        the arguments :meth:`store` gives it, so stores go element by
        element then (still one bounds check for the vector)."""
        flat = self._flat(space, addr, threads, width, count, offset)
        if flat is None:
            return False
        buf, index, total = flat
        hook = self.on_access
        if hook is not None:
            # The events of store(): byte offsets (fresh arrays) and contiguous values.
            lead = index << _LOG2[total]
            elements = buf.view(_UINT[width])
            for i in range(count):
                off = lead + i * width if i else lead
                column = values if count == 1 else np.ascontiguousarray(values[:, i])
                hook(buf, off, threads, width, STORE, column)
                elements[off >> _LOG2[width] if width > 1 else off] = column
        elif count == 1:
            buf.view(_UINT[width])[index] = values
        else:           # whole vectors as void elements (2-d row scatters are ten times slower)
            _units(buf, total)[index] = np.ascontiguousarray(values).view(_units_dtype(total)).reshape(-1)
        return True

    # access ----------------------------------------------------------------------
    def load(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
             what: str = "ld") -> np.ndarray:
        """``width``-byte unsigned values at ``addr`` for each thread."""
        fast = self.gather(space, addr, threads, width)
        if fast is not None:
            return fast
        out = None
        shift = _LOG2[width]
        for buf, off, pos in self._resolve(space, addr, threads, width, what):
            if self.on_access is not None:
                self.on_access(buf, off, threads if pos is None else threads[pos], width, LOAD)
            if _uniform(off):      # one address for every thread
                elements = np.full(len(off), buf.view(_UINT[width])[int(off[0]) >> shift])
            else:
                elements = buf.view(_UINT[width]).take(off >> shift if shift else off)
            if pos is None or len(pos) == len(addr):
                return elements        # every thread in one group: no scatter into `out`
            if out is None:
                out = np.empty(len(addr), dtype=_UINT[width])
            out[pos] = elements
        return out if out is not None else np.empty(len(addr), dtype=_UINT[width])

    def store(self, space: str, addr: np.ndarray, threads: np.ndarray, values: np.ndarray,
              width: int, what: str = "st") -> None:
        """Store ``width``-byte unsigned ``values`` at ``addr`` (later threads win)."""
        values = np.asarray(values).astype(_UINT[width], copy=False)
        if values.shape == (len(addr),) and self.scatter(space, addr, threads, values, width):
            return
        shift = _LOG2[width]
        for buf, off, pos in self._resolve(space, addr, threads, width, what, write=True):
            if self.on_access is not None:
                self.on_access(buf, off, threads if pos is None else threads[pos], width, STORE,
                               values if pos is None or len(pos) == len(values) else values[pos])
            buf.view(_UINT[width])[off >> shift if shift else off] = \
                values if pos is None or len(pos) == len(values) else values[pos]

    def locations(self, space: str, addr: np.ndarray, threads: np.ndarray, width: int,
                  what: str, atomic: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The ``(buffer view, element index, positions)`` groups of an access,
        for read-modify-write operations. The sanitizer sees it only as an
        ``atomic`` (mbarrier words and async-proxy copies keep their own
        rules)."""
        groups = []
        kind = ATOMIC if atomic else UPDATE
        for buf, off, pos in self._resolve(space, addr, threads, width, what, write=True):
            if self.on_access is not None:
                self.on_access(buf, off, threads if pos is None else threads[pos], width, kind)
            groups.append((buf.view(_UINT[width]), off // width,
                           np.arange(len(addr)) if pos is None else pos))
        return groups


def _units_dtype(total: int) -> np.dtype:
    """The void dtype of ``total`` bytes: one element per vector."""
    return np.dtype(f"V{total}")


def _units(buf: np.ndarray, total: int) -> np.ndarray:
    """``buf``'s whole ``total``-byte units as void elements (1-d)."""
    return buf[:len(buf) // total * total].view(_units_dtype(total))


def _every_thread(threads: np.ndarray, n: int) -> bool:
    """Whether ``threads`` is exactly 0..n-1 in order (every thread of the
    grid once), not just n entries (a repeated thread, as an operand read
    on behalf of one issuer has)."""
    return (len(threads) == n and int(threads[0]) == 0 and int(threads[-1]) == n - 1
            and bool((threads[1:] > threads[:-1]).all()))

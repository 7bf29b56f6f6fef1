"""Device memory of :class:`jaxptx.sim.Device`: allocations that persist
between launches, the host copies in and out, leak reports and the record of
which bytes launches wrote.

:class:`DeviceMemory` is the first layer of ``Device``
(:class:`~.device_modules.DeviceModules` adds loaded modules on top of it,
``Device`` the launches). Device addresses are ints; allocation ``k`` starts
at ``(k + 1) << 36`` (:mod:`.memory.spaces`). A freed allocation's range is
not handed out again while any fresh one is left (``_MAX_ALLOCATIONS``, 1791,
below the shared window), so a stale pointer faults instead of reading
another allocation.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from .core.observers import LOAD, STORE, Observer
from .errors import SimError
from .memory.spaces import GLOBAL_SHIFT, SHARED_WINDOW

__all__ = ["DeviceMemory", "StoreRecorder", "is_int"]

_OFFSET_MASK = (1 << GLOBAL_SHIFT) - 1
_MAX_ALLOCATIONS = (SHARED_WINDOW >> GLOBAL_SHIFT) - 1      # addresses stay below the shared window


def _padded(nbytes: int) -> np.ndarray:
    return np.zeros(max(16, -(-nbytes // 16) * 16), dtype=np.uint8)


class DeviceMemory:
    """The memory of an emulated device (``cuMemAlloc``, ``cuMemcpy*``,
    ``cuMemsetD8``, ``cuMemFree``): the allocations, who owns each, and the
    byte masks of :meth:`track_stores`. Device addresses are ints.
    """

    # The global slot (address >> 36) of allocation 0; a node's device d
    # starts at slot (d << 12) + 1 (jaxptx.sim.System: addresses unique across the node).
    _first_slot = 1

    def __init__(self) -> None:
        self._buffers: list[np.ndarray] = []
        self._sizes: list[int] = []
        self._owners: list[str | None] = []       # "alloc", "module" or None (freed)
        self._free_slots: collections.deque[int] = collections.deque()     # freed, oldest first
        self._stored: dict[int, np.ndarray] | None = None      # allocation -> bytes plain stores wrote
        self._updated: dict[int, np.ndarray] = {}               # ... and read-modify-writes (atomics)
        self._closed = False

    @property
    def buffers(self) -> list[np.ndarray]:
        """The backing arrays of the device's allocation slots, in slot order
        (what a tool that hears memory-access events compares buffers with;
        read them, do not resize them)."""
        return self._buffers

    @property
    def holds_module_globals(self) -> bool:
        """Whether a loaded module's ``.global`` variables live in this
        device's memory (their values carry over from launch to launch)."""
        return "module" in self._owners

    def alias(self, address: int, target: int) -> None:
        """Make the allocation at ``address`` share the memory of the one at
        ``target`` (both of this device, whole allocations of one size): what
        ``cuMemMap`` of physical memory into a reserved range does. Each
        address then reads and writes the same bytes.

        Raises:
            SimError: an address that is not the start of a live allocation,
                or two allocations of different sizes.
        """
        (k, off), (j, off2) = self._locate(address, 1, "alias address"), self._locate(target, 1, "alias target")
        if off or off2 or self._sizes[k] != self._sizes[j]:
            raise SimError(f"alias: {int(address):#x} and {int(target):#x} must start allocations of one size "
                           f"(got offsets {off}, {off2}; sizes {self._sizes[k]}, {self._sizes[j]})")
        self._buffers[k] = self._buffers[j]

    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of zero-filled device memory (``cuMemAlloc``).

        Returns:
            The device address of the first byte (16-byte aligned).

        Addresses are not reused: a freed allocation's range stays unused,
        so that a stale pointer faults, until the device has made 1791
        allocations (the ranges below the shared window); then the range
        freed longest ago is handed out again.

        Raises:
            SimError: ``nbytes`` is not an int in ``0 .. 2**36``, or the
                device has no address range left (1791 live allocations),
                or it is closed.
        """
        if not is_int(nbytes) or not 0 <= int(nbytes) <= 1 << GLOBAL_SHIFT:
            raise SimError(f"alloc: nbytes must be an int in 0..2**{GLOBAL_SHIFT}, got {nbytes!r}")
        return self._allocate(int(nbytes), "alloc")

    def _allocate(self, nbytes: int, owner: str) -> int:
        self._check_open("alloc")
        k = len(self._buffers)
        if k < _MAX_ALLOCATIONS:          # a fresh range: freed ones stay unused while any is left
            self._buffers.append(_padded(nbytes))
            self._sizes.append(nbytes)
            self._owners.append(owner)
        elif self._free_slots:
            k = self._free_slots.popleft()
            self._buffers[k], self._sizes[k], self._owners[k] = _padded(nbytes), nbytes, owner
        else:
            raise SimError(f"alloc: the device has {k} live allocations, the most it can address")
        return (k + self._first_slot) << GLOBAL_SHIFT

    def free(self, address: int) -> None:
        """Free the allocation that starts at ``address`` (``cuMemFree``).

        Raises:
            SimError: ``address`` is not the start of a live allocation made
                by :meth:`alloc` or :meth:`to_device`.
        """
        k, offset = self._locate(address, 0, "free")
        if offset:
            base = (k + self._first_slot) << GLOBAL_SHIFT
            raise SimError(f"free: {int(address):#x} is inside the allocation at {base:#x}, not its start")
        if self._owners[k] != "alloc":
            raise SimError(f"free: {int(address):#x} holds a module's global variables; it is not freed "
                           "by free()")
        self._buffers[k], self._sizes[k], self._owners[k] = _padded(0), 0, None
        self._free_slots.append(k)
        if self._stored is not None:
            self._stored.pop(k, None)
        self._updated.pop(k, None)

    def _locate(self, address: Any, nbytes: int, what: str) -> tuple[int, int]:
        """``(allocation index, offset)`` of ``nbytes`` at ``address``."""
        if not is_int(address):
            raise SimError(f"{what}: expected a device address (an int), got {type(address).__name__} "
                           f"{address!r:.60}")
        self._check_open(what)
        address = int(address)
        k, offset = (address >> GLOBAL_SHIFT) - self._first_slot, address & _OFFSET_MASK
        if address >= 0 and 0 <= k < len(self._owners) and self._owners[k] is None:
            raise SimError(f"{what}: {address:#x} is in the allocation at {address - offset:#x}, "
                           "which was freed (a use after free)")
        if address < 0 or not 0 <= k < len(self._owners):
            raise SimError(f"{what}: {address:#x} is not an address on this device (it is in no live "
                           "allocation)")
        if offset + nbytes > self._sizes[k]:
            base = address - offset
            raise SimError(f"{what}: {nbytes} bytes at {address:#x} go past the end of the allocation at "
                           f"{base:#x} ({self._sizes[k]} bytes; the access starts at offset {offset})")
        return k, offset

    def _bytes(self, address: Any, nbytes: int, what: str) -> np.ndarray:
        """A writable uint8 view of ``nbytes`` of device memory."""
        k, offset = self._locate(address, nbytes, what)
        return self._buffers[k][offset:offset + nbytes]

    def write(self, address: int, data: Any) -> None:
        """Copy host bytes (``bytes``-like or a numpy array's contents) to
        ``address`` (``cuMemcpyHtoD``).

        Raises:
            SimError: the bytes do not fit in the allocation at ``address``.
        """
        raw = host_bytes(data, "write")
        self._bytes(address, len(raw), "write")[:] = raw

    def read(self, address: int, nbytes: int) -> bytes:
        """``nbytes`` of device memory at ``address`` (``cuMemcpyDtoH``).

        Raises:
            SimError: the range is not inside one allocation.
        """
        if not is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"read: nbytes must be an int >= 0, got {nbytes!r}")
        return self._bytes(address, int(nbytes), "read").tobytes()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from device address ``src`` to ``dst`` (``cuMemcpyDtoD``)."""
        if not is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"copy: nbytes must be an int >= 0, got {nbytes!r}")
        data = self._bytes(src, int(nbytes), "copy source").copy()
        self._bytes(dst, int(nbytes), "copy destination")[:] = data

    def memset(self, address: int, value: int, nbytes: int) -> None:
        """Set ``nbytes`` bytes at ``address`` to ``value`` (``cuMemsetD8``)."""
        if not is_int(value) or not 0 <= int(value) <= 255:
            raise SimError(f"memset: value must be a byte 0..255, got {value!r}")
        if not is_int(nbytes) or int(nbytes) < 0:
            raise SimError(f"memset: nbytes must be an int >= 0, got {nbytes!r}")
        self._bytes(address, int(nbytes), "memset")[:] = int(value)

    def track_stores(self, on: bool = True) -> None:
        """From now on, record which bytes of device memory the plain stores
        of every launch write (``st``, vector stores, bulk and TMA stores to
        global memory; not atomics): see :meth:`stored`; and which bytes any
        write reaches, atomics included: see :meth:`written`. Each call
        starts the record afresh; ``on=False`` stops recording (and drops
        the record)."""
        self._stored = {} if on else None
        self._updated = {}

    def written(self, address: int, nbytes: int) -> np.ndarray:
        """Per byte of the ``nbytes`` at ``address``: whether a store, a
        bulk or tensor copy or an atomic of a launch since
        :meth:`track_stores` wrote it (every way a kernel writes global
        memory; what the unwritten-output check reads).

        Raises:
            SimError: the range is not inside one allocation.
        """
        k, offset = self._locate(address, int(nbytes), "written")
        out = self.stored(address, nbytes)
        mask = self._updated.get(k)
        if mask is not None:
            out |= mask[offset:offset + int(nbytes)].astype(bool)
        return out

    def stored(self, address: int, nbytes: int) -> np.ndarray:
        """Per byte of the ``nbytes`` at ``address``: whether a plain store
        of a launch since :meth:`track_stores` wrote it (all False when
        nothing is recorded).

        Raises:
            SimError: the range is not inside one allocation.
        """
        k, offset = self._locate(address, int(nbytes), "stored")
        mask = (self._stored or {}).get(k)
        if mask is None:
            return np.zeros(int(nbytes), dtype=bool)
        return mask[offset:offset + int(nbytes)].astype(bool)

    def store_recorder(self) -> "StoreRecorder | None":
        """The observer that records a launch's writes into the masks of
        :meth:`track_stores` (``None`` when nothing is tracked)."""
        if self._stored is None:
            return None
        return StoreRecorder({id(b): k for k, b in enumerate(self._buffers)}, self._stored, self._updated)

    def to_device(self, array: Any) -> int:
        """Allocate device memory for ``array`` (a numpy array or bytes) and
        copy it in; returns its device address."""
        raw = host_bytes(array, "to_device")
        address = self._allocate(len(raw), "alloc")
        self._bytes(address, len(raw), "to_device")[:] = raw
        return address

    def from_device(self, address: int, like: Any) -> np.ndarray:
        """A new array shaped and typed like ``like`` (anything with
        ``shape`` and ``dtype``), filled from device memory at ``address``.

        Raises:
            SimError: ``like`` has no shape/dtype, or its size runs past the
                allocation at ``address``.
        """
        try:
            shape, dtype = tuple(like.shape), np.dtype(like.dtype)
        except (AttributeError, TypeError):
            raise SimError(f"from_device: like must have a shape and a dtype (a numpy array), "
                           f"got {type(like).__name__}") from None
        if dtype.hasobject:
            raise SimError(f"from_device: like has dtype {dtype}, which holds Python objects, not bytes")
        out = np.empty(shape, dtype)
        out.reshape(-1).view(np.uint8)[:] = self._bytes(address, out.nbytes, "from_device")
        return out

    def leaks(self) -> list[tuple[int, int]]:
        """``(address, nbytes)`` of every live allocation made by
        :meth:`alloc` or :meth:`to_device` (not a module's global
        variables), in the order they were made."""
        return [((k + self._first_slot) << GLOBAL_SHIFT, self._sizes[k]) for k, owner in enumerate(self._owners)
                if owner == "alloc"]

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise SimError(f"{what}: the device is closed")


# A store's bytes in a :meth:`DeviceMemory.track_stores` mask: a word of 0x01 bytes per width.
_ONES = {1: np.uint8(1), 2: np.uint16(0x0101), 4: np.uint32(0x0101_0101), 8: np.uint64(0x0101_0101_0101_0101)}


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int (Python or numpy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def host_bytes(data: Any, what: str) -> np.ndarray:
    """The bytes of host data (``bytes``-like or a numpy array) as a uint8 array.

    Raises:
        SimError: ``data`` is neither (``what`` names the call).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, np.uint8)
    if isinstance(data, np.ndarray) and not data.dtype.hasobject:
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    raise SimError(f"{what}: expected a numpy array or bytes, got {type(data).__name__}")


class StoreRecorder(Observer):
    """Marks the global bytes a launch writes in per-allocation masks: plain
    stores in ``stored``, read-modify-writes (atomics and the rest) in
    ``updated`` (one scatter of ``width``-byte words of 0x01 bytes an access).

    Args:
        index: ``id`` of each global buffer → its allocation index.
        stored, updated: allocation index → byte mask, filled as writes come.
    """

    def __init__(self, index: dict[int, int], stored: dict[int, np.ndarray],
                 updated: dict[int, np.ndarray]) -> None:
        self._index = index
        self._stored = stored
        self._updated = updated

    def access(self, buf: np.ndarray, off: np.ndarray, threads: np.ndarray, width: int, kind: str,
               values: np.ndarray | None = None) -> None:
        """Mark the bytes of a store or read-modify-write of global memory."""
        if kind == LOAD:
            return
        k = self._index.get(id(buf))
        if k is None:                       # shared or local memory
            return
        masks = self._stored if kind == STORE else self._updated
        mask = masks.get(k)
        if mask is None:
            mask = masks[k] = np.zeros(len(buf), dtype=np.uint8)
        at = np.asarray(off, dtype=np.int64)
        if width == 16:
            words = mask.view(np.uint64)
            words[at >> 3] = _ONES[8]
            words[(at >> 3) + 1] = _ONES[8]
        else:           # (offsets are non-negative: a shift is int64 //)
            mask.view(_ONES[width].dtype)[at >> (width.bit_length() - 1)] = _ONES[width]

    # Loads mark nothing, so the memory need not tell them: it then takes
    # its one-gather fast path for loads (Memory.hears).
    access.hears_loads = False  # type: ignore[attr-defined]

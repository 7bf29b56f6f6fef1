"""How a launch on one device of a node reaches the rest of the node's memory.

A node (:class:`jaxptx.sim.System`) gives device ``d``'s allocations the
addresses ``(d << DEVICE_SHIFT) + ((k + 1) << 36)`` (:mod:`.memory.spaces`),
so an address names its device. A launch's :class:`~.memory.spaces.Memory`
resolves its own device's addresses as a lone device's; the rest go through
three seams this module fills (:class:`NodeLink`):

* ``elsewhere``: a global address of another device. With peer access
  enabled (``System.enable_peer_access``) the access goes to a
  :class:`PeerWindow` on that device's buffers, so loads, stores and
  atomics reach them as they reach the launch's own; without it the access
  faults, naming both devices and the address. A multicast address faults
  too: only ``multimem`` instructions may use it.
* ``multicast``: a ``multimem`` address. Each multicast object
  (:class:`~.multicast.Multicast`) maps its offsets to a buffer on every
  member device; the access is split per object and, per object, into one
  copy per member in device order (reductions are deterministic).
* ``peer_globals``: the buffers of every other device, hashed into the
  hang proofs (:mod:`.core.hangs`), so a thread spinning on a flag a peer
  sets runs again when the peer writes.

Accesses through a window are told to the launch's observers: the
sanitizer checks another device's buffer as its own between the launch's
threads, and hands every access to the node's checker for the pairs with
other devices' grids (:mod:`.core.sanitizer.node`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .errors import SimFault
from .memory.spaces import DEVICE_SHIFT, GLOBAL_SHIFT, MULTICAST_BASE, Memory

__all__ = ["Node", "NodeLink", "PeerWindow", "Copy"]


class Node(Protocol):
    """What a launch's memory and a multicast object see of their node
    (:class:`jaxptx.sim.System`)."""

    devices: Sequence[Any]
    peer_access: bool
    multicasts: Sequence[Any]

    def index_of(self, device: Any, what: str) -> int:
        """The index of ``device`` (an index or one of ``devices``)."""

    def multicast_address(self, device: int, addr: np.ndarray) -> np.ndarray:
        """``addr`` with ``device``'s ranges mapped to a multicast object taken
        to the object's own addresses."""

_MULTICAST_TAG = MULTICAST_BASE >> DEVICE_SHIFT
_OFFSET_MASK = np.uint64((1 << GLOBAL_SHIFT) - 1)

Copy = tuple[int, Memory, np.ndarray]
"""One copy of a multimem access: ``(device, memory to access, addresses there)``."""


class PeerWindow(Memory):
    """Another device's global memory as one launch sees it: that device's
    buffers under their own addresses; faults name the accessing thread
    and both devices.

    Args:
        owner: the launch's memory (its thread geometry and observers).
        accessor: the launch's device index.
        device: the device whose memory this is (a node's device).
    """

    def __init__(self, owner: Memory, accessor: int, device: Any) -> None:
        super().__init__(0, owner.ntid, 0, 0, 0, 0)
        self._owner = owner
        self._accessor = accessor
        self.globals, self.sizes = device._buffers, device._sizes
        self.first_slot = device._first_slot
        self.freed = frozenset(k for k, owner_ in enumerate(device._owners) if owner_ is None)
        self.names = {k: f"device {device.index}'s allocation at {(k + self.first_slot) << GLOBAL_SHIFT:#x}"
                      for k, owner_ in enumerate(device._owners) if owner_ is not None}

    @property
    def on_access(self) -> Any:
        """The launch's access hook: its observers hear what a window does."""
        return self._owner.on_access

    @on_access.setter
    def on_access(self, hook: Any) -> None:
        """A window has no observers of its own (see the getter)."""

    def _who(self, thread: int) -> str:
        return f"{self._owner._who(thread)} of device {self._accessor}"


class NodeLink:
    """The node's side of one launch's memory on device ``index``: sets the
    memory's ``elsewhere``, ``multicast`` and ``peer_globals`` seams.

    Args:
        system: the node.
        index: the launch's device.
        memory: the launch's memory.
    """

    def __init__(self, system: Node, index: int, memory: Memory) -> None:
        self.system = system
        self.index = index
        self.memory = memory
        self._windows: dict[int, Memory] = {}
        memory.elsewhere = self.elsewhere
        memory.multicast = self.multicast
        memory.peer_globals = self.peer_globals

    def _who(self, thread: Any) -> str:
        return f"{self.memory._who(int(thread))} of device {self.index}"

    def window(self, device: int) -> Memory:
        """The memory through which this launch reaches ``device``'s buffers
        (its own memory for its own device)."""
        if device == self.index:
            return self.memory
        found = self._windows.get(device)
        if found is None:
            found = self._windows[device] = PeerWindow(self.memory, self.index, self.system.devices[device])
        return found

    def elsewhere(self, addr: np.ndarray, pos: np.ndarray, threads: np.ndarray, width: int,
                  what: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Access groups for global addresses outside the launch's own
        buffers (``pos``: their positions in the access).

        Raises:
            SimFault: a multicast address, an address on no device (or in
                no buffer of this one), or a peer's address without peer access.
        """
        tags = (addr >> np.uint64(DEVICE_SHIFT)).astype(np.int64)
        groups = []
        for tag in np.unique(tags).tolist():
            sel = tags == tag
            first, who = int(addr[sel][0]), self._who(threads[pos[sel][0]])
            if tag == _MULTICAST_TAG:
                raise SimFault(f"{what}: address {first:#x} is a multicast address (System.multicast); only "
                               f"multimem instructions may access it ({who})")
            if tag == self.index or tag >= len(self.system.devices):
                raise SimFault(f"{what}: address {first:#x} is not in any global buffer of the node's "
                               f"{len(self.system.devices)} devices ({who})")
            if not self.system.peer_access:
                raise SimFault(f"{what}: device {self.index} accessed address {first:#x}, which is on device "
                               f"{tag}, without peer access; call System.enable_peer_access() first ({who})")
            groups.extend(self.window(tag)._global(addr[sel], pos[sel], threads, width, what))
        return groups

    def multicast(self, addr: np.ndarray, threads: np.ndarray, width: int,
                  what: str) -> list[tuple[np.ndarray, list[Copy]]]:
        """A multimem access of ``width`` bytes a thread: per multicast
        object it touches, the positions of its threads and, per member
        device in device order, the copy to access.

        Raises:
            SimFault: an address of no multicast object, past the end of
                its object, or of an object some member has not bound memory
                to, or that the launch's device is not a member of.
        """
        addr = self.system.multicast_address(self.index, np.asarray(addr).astype(np.uint64, copy=False))
        objects = self.system.multicasts
        j = (addr.astype(np.int64) - MULTICAST_BASE) >> GLOBAL_SHIFT
        bad = (addr < np.uint64(MULTICAST_BASE)) | (j < 1) | (j > len(objects))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise SimFault(f"{what}: address {int(addr[k]):#x} is not a multicast address; multimem instructions "
                           f"take the address of a System.multicast object (mc.address) ({self._who(threads[k])})")
        offsets = addr & _OFFSET_MASK
        out = []
        for index in np.unique(j).tolist():
            pos = np.flatnonzero(j == index)
            mc = objects[index - 1]
            who = self._who(threads[pos[0]])
            past = offsets[pos] + np.uint64(width) > np.uint64(mc.nbytes)
            if past.any():
                at = int(addr[pos[np.flatnonzero(past)[0]]])
                raise SimFault(f"{what}: {width} bytes at {at:#x} go past the end of the multicast object at "
                               f"{mc.address:#x} ({mc.nbytes} bytes) ({who})")
            if self.index not in mc.devices:
                raise SimFault(f"{what}: device {self.index} is not a member of the multicast object at "
                               f"{mc.address:#x} (members: devices {', '.join(map(str, mc.devices))}) ({who})")
            missing = [d for d in mc.devices if d not in mc.bound]
            if missing:
                raise SimFault(f"{what}: device{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(map(str, missing))} of the multicast object at {mc.address:#x} "
                               f"{'have' if len(missing) > 1 else 'has'} not bound memory to it (mc.bind) ({who})")
            copies = [(d, self.window(d), np.uint64(mc.bound[d]) + offsets[pos]) for d in mc.devices]
            out.append((pos, copies))
        return out

    def peer_globals(self) -> list[np.ndarray]:
        """Every other device's buffers (what other devices' threads, or
        this launch through peer and multicast addresses, may change)."""
        return [b for d in self.system.devices if d.index != self.index for b in d._buffers]

"""Multicast objects of a node: the memory ``multimem`` instructions use.

``mc = system.multicast(nbytes)`` is CUDA's ``cuMulticastCreate`` plus
``cuMulticastAddDevice`` for each member device (default: every device of
the node); ``mc.bind(device, address)`` is ``cuMulticastBindAddr``: offset
``o`` of the object is now byte ``address + o`` on that device. ``mc.address``
is the multicast address a kernel passes to ``multimem.ld_reduce``,
``multimem.st`` and ``multimem.red`` (PTX ISA, multimem: a multimem address
names one location on every device the object maps). A plain ``ld``/``st``
on it faults, as a ``multimem`` instruction on a plain address does; so does
a ``multimem`` instruction before every member has bound memory.
"""

from __future__ import annotations

from typing import Any

from .device_memory import is_int
from .errors import SimError
from .memory.spaces import GLOBAL_SHIFT, MULTICAST_BASE
from .node_memory import Node

__all__ = ["Multicast", "ALIGNMENT"]

ALIGNMENT = 16
"""Bytes a bound address must be aligned to (the widest multimem access)."""


class Multicast:
    """A multicast object: ``nbytes`` mapped onto a buffer of each member.

    Attributes:
        address: the multicast address of its first byte.
        nbytes: its size.
        devices: the member devices' indices, ascending (the order in
            which ``multimem.ld_reduce`` reduces and the others write).
        bound: member device → the device address bound to offset 0.
    """

    def __init__(self, system: Node, index: int, nbytes: int, devices: tuple[int, ...]) -> None:
        self._system = system
        self.address = MULTICAST_BASE + ((index + 1) << GLOBAL_SHIFT)
        self.nbytes = nbytes
        self.devices = devices
        self.bound: dict[int, int] = {}

    def bind(self, device: Any, address: int) -> None:
        """Bind ``nbytes`` of ``device``'s memory at ``address`` to the
        object (``cuMulticastBindAddr``).

        Args:
            device: a member, as its index or its :class:`jaxptx.sim.Device`.
            address: a device address of that device, 16-byte aligned, with
                ``nbytes`` of one live allocation from there.

        Raises:
            SimError: ``device`` is not a member, or has bound already; the
                address is not aligned, or not on that device, or the
                allocation is too short.
        """
        index = self._system.index_of(device, "Multicast.bind")
        if index not in self.devices:
            raise SimError(f"Multicast.bind: device {index} is not a member of the multicast object at "
                           f"{self.address:#x} (members: devices {', '.join(map(str, self.devices))})")
        if index in self.bound:
            raise SimError(f"Multicast.bind: device {index} has bound {self.bound[index]:#x} to the multicast "
                           f"object at {self.address:#x} already")
        if not is_int(address) or int(address) % ALIGNMENT:
            raise SimError(f"Multicast.bind: expected a {ALIGNMENT}-byte aligned device address, got {address!r}")
        self._system.devices[index]._locate(int(address), self.nbytes, "Multicast.bind")
        self.bound[index] = int(address)

    def __repr__(self) -> str:
        bound = ", ".join(f"{d}: {a:#x}" for d, a in sorted(self.bound.items()))
        return f"Multicast(address={self.address:#x}, nbytes={self.nbytes}, bound={{{bound}}})"

"""Captures of :meth:`jaxptx.sim.Device.launch` (``JAXPTX_CAPTURE_DIR``):
the device's memory before and after, as :mod:`jaxptx.capture` records it.

A device launch may reach any live allocation (addresses can be packed into
struct parameters and tensor maps), so the capture holds every allocation
the user made, at its address, and the module's global variables by name.
A ``.u64`` parameter whose value lies inside an allocation is recorded as a
pointer (buffer index and offset); every other parameter as its bytes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from .. import capture, ir
from ..emit import emit
from .memory.spaces import GLOBAL_SHIFT
from .memory.tensormap import maps_from_records

__all__ = ["Before", "TooLarge", "before", "place", "record"]

_OFFSET_MASK = (1 << GLOBAL_SHIFT) - 1


@dataclasses.dataclass
class Before:
    """The device's memory as a launch found it."""

    where: Path
    allocations: dict[int, bytes]           # slot -> bytes
    globals: dict[str, bytes]               # module variable -> bytes


def _slot_bytes(device: Any, k: int) -> bytes:
    return device._buffers[k][:device._sizes[k]].tobytes()


def before(device: Any, bases: dict[str, int], where: Path) -> Before:
    """Snapshot the user's allocations and the module's globals."""
    allocations = {k: _slot_bytes(device, k) for k, owner in enumerate(device._owners)
                   if owner == "alloc"}
    found = {name: _slot_bytes(device, (address >> GLOBAL_SHIFT) - 1)
             for name, address in bases.items()}
    total = sum(map(len, allocations.values())) + sum(map(len, found.values()))
    if not capture.fits(2 * total, "(device launch)"):
        raise TooLarge
    return Before(where, allocations, found)


class TooLarge(Exception):
    """Raised by :func:`before` after warning: the launch runs uncaptured."""


def record(device: Any, source: str | ir.Module, module: ir.Module, program: Any,
           bases: dict[str, int], raw_params: list[bytes], launch: Any, was: Before) -> Path | None:
    """Write the capture of a launch that has just run (``launch``: its
    :class:`jaxptx.launch.Launch`)."""
    slots = sorted(was.allocations)
    index = {k: i for i, k in enumerate(slots)}
    buffers = tuple(capture.Buffer(f"allocation {k}", was.allocations[k], _slot_bytes(device, k),
                                   address=(k + 1) << GLOBAL_SHIFT) for k in slots)
    params = []
    for p, raw in zip(program.params, raw_params):
        params.append(_param(p, raw, device, index))
    found = tuple((name, data, _slot_bytes(device, (bases[name] >> GLOBAL_SHIFT) - 1))
                  for name, data in was.globals.items())
    ptx = source if isinstance(source, str) else emit(module)
    return capture.record(capture.Capture(
        source="sim", ptx=ptx, entry=program.name, grid=launch.grid, block=launch.block,
        cluster=launch.cluster, smem=launch.smem, buffers=buffers, params=tuple(params), arch=device.arch, globals=found,
        meta=capture.meta()), was.where)


def _param(p: Any, raw: bytes, device: Any, index: dict[int, int]) -> tuple:
    if len(raw) == 8 and p.type in ("u64", "b64", "s64"):
        value = int.from_bytes(raw, "little")
        k = (value >> GLOBAL_SHIFT) - 1
        if k in index and (value & _OFFSET_MASK) < max(device._sizes[k], 1):
            return ("pointer", index[k], value & _OFFSET_MASK)
    return ("bytes", raw)


def place(device: Any, saved: capture.Capture) -> tuple[list[int], list[Any]]:
    """Put a capture's memory on a fresh ``device`` (its buffers' contents
    before the launch, at their recorded addresses when it has them, and
    its global variables) and return ``(buffer addresses, the launch's
    params)``: what a replay or an exploration launches with.

    Raises:
        CaptureError: a buffer cannot get its recorded address.
    """
    addresses = _place(device, saved)
    params = _params(saved, addresses)
    for name, data, _ in saved.globals:
        device.write(device.global_address(saved.ptx, name, saved.entry), data)
    return addresses, params


def _place(device: Any, saved: capture.Capture) -> list[int]:
    """Each buffer's contents on the device; at its recorded address when
    it has one (a device capture), else wherever the device puts it. A
    fresh device gives allocation k the address ``(k + 1) << GLOBAL_SHIFT``,
    so the slots below the highest recorded one that no buffer takes are
    filled with spacers, freed once every buffer is placed."""
    if not any(b.address is not None for b in saved.buffers):
        return [device.to_device(np.frombuffer(b.before, np.uint8)) for b in saved.buffers]
    wanted = {b.address: b for b in saved.buffers}
    spacers = []
    for k in range((max(wanted) >> GLOBAL_SHIFT)):
        address = (k + 1) << GLOBAL_SHIFT
        buffer = wanted.get(address)
        placed = device.alloc(1) if buffer is None else \
            device.to_device(np.frombuffer(buffer.before, np.uint8))
        if placed != address:
            raise capture.CaptureError(f"replay: cannot place buffer {buffer.name if buffer else k} at "
                                       f"{address:#x}: the device gave {placed:#x}")
        if buffer is None:
            spacers.append(placed)
    for address in spacers:
        device.free(address)
    return [b.address for b in saved.buffers]


def _params(saved: capture.Capture, addresses: list[int]) -> list[Any]:
    maps = maps_from_records(saved.tma) if saved.tma else ()
    pointers = [addresses[p[1]] + p[2] for p in saved.params if p[0] == "pointer"]
    out: list[Any] = []
    for p in saved.params:
        if p[0] == "pointer":
            out.append(addresses[p[1]] + p[2])
        elif p[0] == "bytes":
            out.append(p[1])
        else:
            m = maps[p[1]]
            out.append(m.encode(pointers[m.arg]))
    return out

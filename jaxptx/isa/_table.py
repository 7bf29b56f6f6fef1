"""The instruction table: every family's entries, indexed by opcode."""

from __future__ import annotations

import functools

from ._families import FAMILIES
from ._schema import Inst

__all__ = ["INSTRUCTIONS", "BY_OPCODE", "split_name"]

INSTRUCTIONS: tuple[Inst, ...] = tuple(e for fam in FAMILIES for e in fam.ENTRIES)

_by_opcode: dict[str, list[Inst]] = {}
for _inst in INSTRUCTIONS:
    _by_opcode.setdefault(_inst.opcode, []).append(_inst)
BY_OPCODE: dict[str, tuple[Inst, ...]] = {k: tuple(v) for k, v in _by_opcode.items()}
_MAX_OPCODE_PARTS = max(k.count(".") + 1 for k in BY_OPCODE)


@functools.lru_cache(maxsize=4096)
def split_name(parts: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """Split ``("cp", "async", "bulk", "tensor", "2d", ...)`` into the longest
    table opcode and the modifiers after it; ``None`` if no prefix is one."""
    for n in range(min(len(parts), _MAX_OPCODE_PARTS), 0, -1):
        opcode = ".".join(parts[:n])
        if opcode in BY_OPCODE:
            return opcode, parts[n:]
    return None

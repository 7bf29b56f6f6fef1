"""What each instruction is, for the instruction mix: its class, how its
memory accesses are counted, and the FLOPs it does.

Classes: ``integer``, ``fp32``, ``fp64``, ``fp16`` (scalar f16/bf16),
``fp16x2`` (packed f16x2/bf16x2), ``sfu`` (``.approx`` transcendentals),
``convert``, ``move``, ``tensor`` (``mma.sync``, ``wmma.mma``, ``wgmma``,
``tcgen05.mma``), ``memory.<space>`` (``ld``/``st``/atomics, ``ldmatrix``,
``cp.async``...), ``memory.tma`` (bulk copies), ``tensor_memory``
(``tcgen05`` moves and allocation), ``warp`` (shuffles, votes), ``sync``
(barriers, mbarriers, fences, async-group waits), ``control`` and
``other``.

CUDA-core FLOPs count as Nsight's ``flop_count_sp``: an add, sub or mul is
one per lane, an fma two; packed ``x2`` forms twice that. Tensor-core
FLOPs are ``2 * M * N * K`` per MMA (per warp for ``mma.sync``/``wmma``, per
warpgroup for ``wgmma``, per issuing thread for ``tcgen05.mma``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..isa import UNITS, Unit

__all__ = ["Kind", "kind_of", "CLASSES"]

CLASSES = ("integer", "fp32", "fp64", "fp16", "fp16x2", "sfu", "convert", "move", "tensor", "memory.global",
           "memory.shared", "memory.local", "memory.param", "memory.const", "memory.generic",
           "memory.async_copy", "memory.tma", "tensor_memory", "warp", "sync", "control", "other")
"""Every instruction class, in the order tables print them."""

_FLOP1 = {"add", "sub", "mul"}
_FLOP2 = {"fma"}
_SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared", "shared::cluster": "shared",
           "local": "local", "param": "param", "const": "const"}
# Input element types of tensor-core instructions, in the order they are
# looked for among the modifiers (the first one found names A's type).
_ELEMENTS = ("bf16", "tf32", "e4m3", "e5m2", "e2m1", "e2m3", "e3m2", "s8", "u8", "s4", "u4", "b1", "f64", "f16")
_SHAPE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")


@dataclasses.dataclass(frozen=True)
class Kind:
    """How the profiler sees one instruction.

    Attributes:
        name: the emulator's name for it (``ld``, ``wgmma_mma_async``...).
        cls: its class (:data:`CLASSES`).
        traffic: how its memory accesses count: ``"lsu"`` (warp-level
            requests: sectors, wavefronts), ``"tensor"`` (tensor-core operand
            reads through shared-memory descriptors), ``"tma"`` (bulk copies:
            bytes), ``"none"`` (mbarrier words, call frames: not counted).
        flops_per_lane: CUDA-core FLOPs per executing thread.
        flops_per_issue: tensor-core FLOPs per warp / warpgroup MMA (``None``
            for other instructions; 0 for ``tcgen05.mma``, read at run time).
        per_warpgroup: ``wgmma``: one MMA per warpgroup.
        element: A's element type of a tensor-core instruction.
        sync: ``"barrier"`` or ``"mbarrier"`` for the waits, ``"fence"``, else ``None``.
    """

    name: str
    cls: str
    traffic: str = "none"
    flops_per_lane: int = 0
    flops_per_issue: int | None = None
    per_warpgroup: bool = False
    element: str = ""
    sync: str | None = None


def _space(modifiers: tuple[str, ...]) -> str:
    for m in modifiers:
        if m in _SPACES:
            return _SPACES[m]
    return "generic"


def _first_type(r: Any) -> Any:
    for t in r.types:
        if t is not None and t.kind != "pred":
            return t
    return None


def kind_of(r: Any, ins: Any = None) -> Kind:
    """The :class:`Kind` of a resolved instruction (``None``: one the machine
    runs without the table, named by ``ins``)."""
    if r is None:
        name = ins.opcode if ins is not None else "?"
        return Kind(name, "control" if name in ("ret", "exit", "bra", "call") else "other")
    sim = r.inst.sim
    mods = tuple(r.values.values())
    unit = UNITS.get(sim)
    if unit is not None and unit.cls != "sfu":
        if unit.cls == "tensor":
            return _tensor(sim, unit, mods)
        cls = f"memory.{_space(mods)}" if unit.cls == "memory" else unit.cls
        return Kind(sim, cls, traffic=unit.traffic, sync=unit.wait)
    t = _first_type(r)
    if unit is not None and "approx" in mods:
        return Kind(sim, "sfu")
    if t is not None and t.kind == "f":
        lanes = t.lanes if t.lanes else 1
        if t.bits // lanes == 64:
            cls = "fp64"
        elif t.name in ("f16x2", "bf16x2"):
            cls = "fp16x2"
        elif t.name in ("f16", "bf16"):
            cls = "fp16"
        else:
            cls = "fp32"
        per = 1 if sim in _FLOP1 else 2 if sim in _FLOP2 else 0
        return Kind(sim, cls, flops_per_lane=per * lanes)
    return Kind(sim, "integer")


def _tensor(sim: str, unit: Unit, mods: tuple[str, ...]) -> Kind:
    element = next((e for e in _ELEMENTS if e in mods), "f16")
    if unit.async_reads == "tcgen05":   # the shape is in the instruction descriptor (sparse: the dense product)
        return Kind(sim, "tensor", traffic=unit.traffic, flops_per_issue=0, element=element)
    shape = next((_SHAPE.match(m) for m in mods if _SHAPE.match(m)), None)
    flops = 2 * int(shape[1]) * int(shape[2]) * int(shape[3]) if shape else 0
    return Kind(sim, "tensor", traffic=unit.traffic, flops_per_issue=flops,
                per_warpgroup=unit.async_reads == "wgmma", element=element)

"""Emulator semantics: cluster shared-memory addresses, ``mapa`` and
``getctarank`` (PTX ISA, "Distributed shared memory").

The emulator's ``shared::cluster`` address of a variable in CTA ``rank``'s
shared memory is ``rank << 24 | offset``, the same value as that CTA's own
``shared::cta`` address of it (:mod:`jaxptx.sim.memory.spaces`); its generic
form adds the shared window to it.
"""

from __future__ import annotations

import numpy as np

from ...types import TYPES
from ..core.step import Step
from ..errors import SimError
from ..memory.spaces import RANK_SHIFT, SHARED_OFFSET, SHARED_WINDOW
from .registry import semantics

__all__: list[str] = []

_U32 = TYPES["u32"]
_U64 = TYPES["u64"]
_WINDOW = 1 << 40          # the generic shared window's span
_SHIFT = np.uint64(RANK_SHIFT)
_OFFSET = np.uint64(SHARED_OFFSET)


def _state_space(s: Step, a: np.ndarray) -> np.ndarray:
    """Operand address ``a`` as a shared state-space address: a generic
    address (no ``.shared::cluster``) must lie in the shared window."""
    if s.mod("space") is not None:
        return a
    outside = (a < np.uint64(SHARED_WINDOW)) | (a >= np.uint64(SHARED_WINDOW + _WINDOW))
    if outside.any():
        raise SimError(f"{s.ins.name}: {int(a[outside][0]):#x} is not a generic shared-memory address")
    return a - np.uint64(SHARED_WINDOW)


@semantics('mapa')
def mapa(s: Step) -> None:
    """``mapa{.shared::cluster} d, a, rank``: the address of the variable at
    ``a`` in the shared memory of CTA ``rank`` of the cluster (PTX ISA, mapa):
    ``a`` with its rank bits replaced, ``rank << 24 | offset`` (the generic
    form in the shared window). Mapping an address to the executing CTA's
    own rank gives the address back."""
    a = s.src(1, _U64)
    rank = s.src(2, _U32).astype(np.uint64)
    size = int(np.prod(s.m.cluster))
    if (rank >= np.uint64(size)).any():
        raise SimError(f"{s.ins.name}: CTA rank {int(rank.max())} is not in the cluster of {size} CTAs")
    d = (rank << _SHIFT) | (_state_space(s, a) & _OFFSET)
    if s.mod("space") is None:
        d = d + np.uint64(SHARED_WINDOW)
    s.dst(0, d, _U64)


@semantics('getctarank')
def getctarank(s: Step) -> None:
    """``getctarank{.shared::cluster} d, a``: the cluster rank of the CTA
    whose shared memory holds ``a`` (PTX ISA, getctarank): the rank the
    address carries in bits 24 and up."""
    rank = _state_space(s, s.src(1, _U64)) >> _SHIFT
    size = int(np.prod(s.m.cluster))
    if (rank >= np.uint64(size)).any():
        bad = int(np.flatnonzero(rank >= np.uint64(size))[0])
        raise SimError(f"{s.ins.name}: {int(s.src(1, _U64)[bad]):#x} is not a shared address of the cluster of "
                       f"{size} CTAs (it names rank {int(rank[bad])})")
    s.dst(0, rank.astype(np.uint32), _U32)

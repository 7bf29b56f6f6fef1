"""Emulator semantics: cluster shared-memory addresses, ``mapa`` and
``getctarank`` (PTX ISA, "Distributed shared memory").

The emulator's ``shared::cluster`` address of a variable in CTA ``rank``'s
shared memory is ``CLUSTER_TAG | rank << 24 | offset``; its generic form
adds the shared window to it.
"""

from __future__ import annotations

import numpy as np

from ...types import TYPES
from ..core.step import Step
from ..errors import SimError
from ..memory.spaces import CLUSTER_TAG, SHARED_WINDOW
from .registry import semantics

__all__: list[str] = []

_U32 = TYPES["u32"]
_U64 = TYPES["u64"]
_WINDOW = 1 << 40          # the generic shared window's span


@semantics('mapa')
def mapa(s: Step) -> None:
    """``mapa{.shared::cluster} d, a, rank``: the address of the variable at
    ``a`` in the shared memory of CTA ``rank`` of the cluster (PTX ISA, mapa).
    The emulator's shared::cluster address: ``CLUSTER_TAG | rank << 24 |
    offset``; the generic form adds the shared window to it."""
    a = s.src(1, _U64)
    rank = s.src(2, _U32).astype(np.uint64)
    size = int(np.prod(s.m.cluster))
    if (rank >= np.uint64(size)).any():
        raise SimError(f"{s.ins.name}: CTA rank {int(rank.max())} is not in the cluster of {size} CTAs")
    generic = s.mod("space") is None
    if generic:
        outside = (a < np.uint64(SHARED_WINDOW)) | (a >= np.uint64(SHARED_WINDOW + _WINDOW))
        if outside.any():
            raise SimError(f"{s.ins.name}: {int(a[outside][0]):#x} is not a generic shared-memory address")
        a = a - np.uint64(SHARED_WINDOW)
    d = np.uint64(CLUSTER_TAG) | (rank << np.uint64(24)) | (a & np.uint64(0xFFFFFF))
    if generic:
        d = d + np.uint64(SHARED_WINDOW)
    s.dst(0, d, _U64)


@semantics('getctarank')
def getctarank(s: Step) -> None:
    """``getctarank{.shared::cluster} d, a``: the cluster rank of the CTA
    whose shared memory holds ``a`` (PTX ISA, getctarank): the rank a
    ``mapa`` address carries, else the executing CTA's own."""
    a = s.src(1, _U64)
    if s.mod("space") is None:
        outside = (a < np.uint64(SHARED_WINDOW)) | (a >= np.uint64(SHARED_WINDOW + _WINDOW))
        if outside.any():
            raise SimError(f"{s.ins.name}: {int(a[outside][0]):#x} is not a generic shared-memory address")
        a = a - np.uint64(SHARED_WINDOW)
    own = s.m.cluster_register("cluster_ctarank", 0, s.threads // s.m.ntid).astype(np.uint64)
    tagged = (a & np.uint64(CLUSTER_TAG)) != 0
    s.dst(0, np.where(tagged, (a >> np.uint64(24)) & np.uint64(0x7F), own).astype(np.uint32), _U32)

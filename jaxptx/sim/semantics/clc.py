"""Emulator semantics: cluster launch control (``clusterlaunchcontrol``).

PTX ISA, clusterlaunchcontrol.try_cancel: a request atomically cancels the
launch of a cluster that has not started running; no other request of the
grid gets that cluster. Here the clusters that have not started are those a
launch with ``max_resident_ctas`` keeps waiting for a resident slot
(:class:`jaxptx.sim.core.launch_state.Residency`), taken in launch order;
with every CTA resident (the default) nothing is left and every request
fails. The requests of one step are served in thread order.

The response is opaque in the ISA; the emulator writes it as four
little-endian ``.b32`` words::

    word 0, 1, 2   %ctaid.x, .y, .z of the canceled cluster's first CTA
                   (0xFFFFFFFF each when the request failed)
    word 3         1: canceled, 0: failed

through the async proxy, as a bulk copy writes (the sanitizer sees a
16-byte async write), then performs complete-tx of 16 bytes on ``[mbar]``,
at once, as the emulator's bulk copies do. With ``.multicast::cluster::all``
the same response goes to ``addr`` in every CTA of the issuing cluster and
each CTA's mbarrier at ``mbar``'s offset completes 16 bytes.

``query_cancel`` decodes a response from a ``.b128`` register. Reading the
first CTA of a failed response is undefined in the ISA; the emulator gives
0xFFFFFFFF, so a kernel that uses it indexes far out of bounds and faults
rather than quietly redoing tile 0.
"""

from __future__ import annotations

import numpy as np

from ...types import TYPES
from ..core.step import Step
from ..errors import SimError
from ..memory.spaces import SHARED_WINDOW
from ..numerics import b128
from ..core.deferred import later
from .bulk_copy import _aligned, _at_rank, _signal, _write
from .registry import semantics

__all__ = ["RESPONSE_BYTES", "response_words"]

RESPONSE_BYTES = 16
_NONE = 0xFFFF_FFFF
_WINDOW = 1 << 40          # the generic shared window's span
_U32 = TYPES["u32"]


def response_words(first_cta: np.ndarray, grid: tuple[int, int, int]) -> np.ndarray:
    """``(n, 4)`` uint32 response words for linear CTA indices (-1: failed)."""
    first = np.asarray(first_cta, dtype=np.int64)
    ok = first >= 0
    gx, gy, _ = grid
    c = np.where(ok, first, 0)
    xyz = np.stack((c % gx, (c // gx) % gy, c // (gx * gy)), axis=-1)
    words = np.where(ok[:, None], xyz, _NONE).astype(np.uint32)
    return np.concatenate((words, ok[:, None].astype(np.uint32)), axis=1)


def _shared(s: Step, k: int, what: str) -> np.ndarray:
    """Operand ``k`` as offsets in the executing CTA's shared memory (PTX
    ISA: without ``.shared::cta`` the address is generic, and must fall in
    the shared window)."""
    space, addr = s.address(k)
    if space != "shared":
        outside = (addr < np.uint64(SHARED_WINDOW)) | (addr >= np.uint64(SHARED_WINDOW + _WINDOW))
        if outside.any():
            raise SimError(f"{s.ins.name}: the {what} {int(addr[outside][0]):#x} is not a shared-memory "
                           "address of the executing CTA (PTX: undefined)")
        addr = addr - np.uint64(SHARED_WINDOW)
    return addr


@semantics("clusterlaunchcontrol_try_cancel")
def clusterlaunchcontrol_try_cancel(s: Step) -> None:
    """``clusterlaunchcontrol.try_cancel.async{.shared::cta}.mbarrier::complete_tx::bytes
    {.multicast::cluster::all}.b128 [addr], [mbar]``: cancel the next
    cluster waiting to start, write the response to ``[addr]`` (16-byte
    aligned) and complete 16 tx bytes on ``[mbar]``."""
    addr = _shared(s, 0, "response address")
    mbar = _shared(s, 1, "mbarrier address")
    _aligned(s, addr, RESPONSE_BYTES, "response address")
    words = response_words(s.m.cancel_clusters(s.n), s.m.grid)
    own = s.m.cluster_register("cluster_ctarank", 0, s.threads // s.m.ntid).astype(np.int64)
    ranks = range(int(np.prod(s.m.cluster))) if s.mod("multicast") else (None,)
    rep = np.repeat(np.arange(s.n), 4)
    step = np.tile(np.arange(0, RESPONSE_BYTES, 4, dtype=np.uint64), s.n)
    everyone = np.arange(s.n)

    def respond() -> None:
        for rank in ranks:
            at = own if rank is None else np.full(s.n, rank)
            _write(s, "shared", _at_rank(at, addr)[rep] + step, s.threads[rep], words.reshape(-1), 4,
                   RESPONSE_BYTES)
            _signal(s, everyone, _at_rank(at, mbar), np.full(s.n, RESPONSE_BYTES))
    later(s, respond, "mbarrier")       # the response arrives late under a random schedule


@semantics("clusterlaunchcontrol_query_cancel")
def clusterlaunchcontrol_query_cancel(s: Step) -> None:
    """``clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, r``,
    ``...get_first_ctaid::{x,y,z}.b32.b128 d, r`` and
    ``...get_first_ctaid.v4.b32.b128 {x, y, z, w}, r``: decode a
    try_cancel response (``w`` reads 0)."""
    words = b128.unpack(s.src(1), 4)
    query = s.mod("query")
    if query == "is_canceled":
        s.dst(0, (words[:, 3] & 1).astype(bool), TYPES["pred"])
    elif query == "get_first_ctaid":
        s.dst(0, np.concatenate((words[:, :3], np.zeros((s.n, 1), np.uint32)), axis=1), _U32)
    else:
        s.dst(0, words[:, "xyz".index(query[-1])], _U32)

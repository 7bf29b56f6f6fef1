"""Flag barriers between the devices of a mesh axis, for the collective kernels.

A collective kernel takes a ``flag`` peer tensor of u32 counters, zero when
the call starts (the wrapper passes a fresh ``jnp.zeros`` each call). Slot
``c`` belongs to CTA ``c`` of every device: the CTAs with one index on all
devices meet there, each side touching only the data that CTA index owns.

The counters only grow. Barrier number ``epoch`` (1, 2, ...) of a launch is
"every device's CTA ``c`` added 1 to my slot ``c`` for the ``epoch``-th
time": it waits for ``flag[c] >= epoch * world``. No counter is ever reset,
so a barrier cannot lose a peer's arrival to a reset racing with it. A
device already in barrier ``epoch + 1`` cannot let a slow one through
barrier ``epoch`` early: to get there it passed barrier ``epoch``, and the
first device to pass it saw every device's ``epoch`` arrivals (no device
had more yet), so a count of ``epoch * world`` always means everyone arrived.

Ordering (PTX ISA, "Memory Consistency Model"): ``bar.sync`` orders the
CTA's accesses before the arrival; the arrival is a ``.release.sys``
reduction (morally strong against the peer's ``.acquire.sys`` load, both at
system scope); the waiting thread's acquire is ordered before the rest of
the CTA by the closing ``bar.sync``. So everything a CTA did before barrier
``e`` on any device happens before what the same-index CTAs do after it on
every device.
"""

from __future__ import annotations

from typing import Any

from ..dsl import TensorArg, ptx

__all__ = ["arrive_and_wait", "wait_count"]


def wait_count(address: Any, target: Any) -> None:
    """Spin until the u32 at ``address`` is at least ``target``
    (``ld.acquire.sys``: what the arrivals released is visible after)."""
    for _ in ptx.while_(lambda: ptx.ld.acquire.sys.global_.u32(address) < target):
        pass


def arrive_and_wait(flag: TensorArg, slot: Any, epoch: int, world: int, *, multimem: bool = False) -> None:
    """Barrier ``epoch`` of CTA ``slot`` with the same CTA of every device.

    Every thread of the CTA calls it. ``multimem``: one ``multimem.red``
    arrives at every device's counter at once (the flag's multicast
    address); otherwise threads ``0..world-1`` each add to one device's.
    """
    tid = ptx.special.tid.x()
    offset = ptx.mul.wide.u32(slot, 4)
    ptx.bar.sync(0)
    if multimem:
        with ptx.if_(tid == 0):
            ptx.multimem.red.release.sys.global_.add.u32(flag.multimem_ptr + offset, 1)
    else:
        with ptx.if_(tid < world):
            ptx.red.release.sys.global_.add.u32(flag.peer_ptr(tid) + offset, 1)
    with ptx.if_(tid == 0):
        wait_count(flag.ptr + offset, epoch * world)
    ptx.bar.sync(0)

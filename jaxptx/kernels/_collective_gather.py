"""The all-gather matmul's communication: who pushes which rows where, and
the flags that say they arrived. Shared by the sm_80 and sm_90a kernels.

Each device holds ``x`` (R, K) (its rows of the gathered (M, K), M = W R)
and ``w`` (K, N) (its columns), and computes ``out`` (M, N) f32 =
``all_gather(x) @ w``. The kernel's grid is ``(NJ, RB)`` CTAs: ``NJ`` column
tiles of ``out`` times ``RB`` row blocks of ``BM`` rows of a shard. CTA
``(j, i)`` computes row block ``i`` of every shard ``s`` in column tile
``j``, in the order ``s = rank, rank + 1, ...`` (mod W): its own rows first,
read straight from ``x``, while the other devices' rows arrive in ``xg``,
the kernel's (M, K) peer buffer.

The flag tensor (u32, zero at the call) has ``NJ * RB`` *start* slots, one
per CTA, then ``W * RB`` *arrival* slots, ``(s, i)`` at ``NJ RB + s RB + i``:

1. start: each CTA meets its same-index CTA on every device
   (:func:`._collective_sync.arrive_and_wait`), so every device is inside
   the kernel (its ``xg`` no longer in use by what ran before) before anyone
   writes to it;
2. push: CTA ``(j, i)`` copies its ``1 / NJ`` share of row block ``i`` of
   ``x`` (16-byte chunks, strided over the ``NJ`` CTAs of the block) into
   rows ``rank R + i BM ...`` of every other device's ``xg``, then adds 1
   to arrival slot ``(rank, i)`` of each (``red.release.sys`` after
   ``bar.sync``);
3. wait: before computing block ``i`` of shard ``s != rank``, the CTA waits
   until slot ``(s, i)`` counts ``NJ`` (``ld.acquire.sys``): all of that
   block has arrived.

No device reads another's memory, and every write into a device's ``xg``
is followed by an arrival it waits for, so no end barrier is needed.

On a GPU every CTA of the grid waits for CTAs of other devices, so the grid
(``nj * rb`` CTAs) must be resident at once: shapes up to about one CTA per
SM (e.g. R = N = 1024 per device: 64 CTAs). A persistent tile loop would
lift this; the emulator runs every CTA at once and does not see it.
"""

from __future__ import annotations

from typing import Any

from ..dsl import TensorArg, ptx, reg
from ..types import b32, u32
from ._collective_sync import arrive_and_wait, wait_count

__all__ = ["GatherPlan", "push_rows", "start", "wait_rows"]


class GatherPlan:
    """The sizes of one call: shard rows ``R``, ``K``, local columns ``N``,
    the axis size ``W``, the tile ``(bm, bn)`` and the flag slots.

    Attributes:
        nj, rb: column tiles and row blocks of a shard (the grid).
        ctas: ``nj * rb``, the start slots.
        slots: all flag slots, ``ctas + W * rb``.
    """

    def __init__(self, R: int, K: int, N: int, W: int, bm: int, bn: int) -> None:
        self.R, self.K, self.N, self.W, self.bm, self.bn = R, K, N, W, bm, bn
        self.nj, self.rb = -(-N // bn), -(-R // bm)
        self.ctas = self.nj * self.rb
        self.slots = self.ctas + W * self.rb

    def arrival(self, shard: Any, block: Any) -> Any:
        """The flag slot of row block ``block`` of shard ``shard``."""
        return shard * self.rb + block + self.ctas


def start(flag: TensorArg, lay: GatherPlan, j: Any, i: Any) -> None:
    """Meet the same CTA of every device (start slot ``i * nj + j``)."""
    arrive_and_wait(flag, i * lay.nj + j, 1, lay.W)


def push_rows(x: TensorArg, xg: TensorArg, flag: TensorArg, lay: GatherPlan, j: Any, i: Any,
              threads: int, itemsize: int = 2) -> None:
    """Copy this CTA's share of row block ``i`` of ``x`` to every other
    device's ``xg`` and arrive on their slot ``(rank, i)``. Every thread of
    the CTA calls it."""
    W, R, K, bm = lay.W, lay.R, lay.K, lay.bm
    if W == 1:
        return
    tid, rank = ptx.special.tid.x(), ptx.rank()
    row_bytes = K * itemsize
    rows = ptx.min.u32(ptx.mov.u32(R) - i * bm, bm)
    chunks = rows * (row_bytes // 16)
    src = x.ptr + ptx.mul.wide.u32(i * bm, row_bytes)
    at = ptx.mul.wide.u32(rank * R + i * bm, row_bytes)
    v = reg.array(b32, 4)
    dst = [xg.peer_ptr(ptx.rem.u32(rank + step, W)) + at for step in range(1, W)]
    for c in ptx.range_(j * threads + tid, chunks, lay.nj * threads, dtype=u32):
        off = ptx.mul.wide.u32(c, 16)
        ptx.ld.global_.v4.b32(v, ptx.addr(src + off))
        for d in dst:
            ptx.st.global_.v4.b32(ptx.addr(d + off), v)
    ptx.bar.sync(0)
    slot = ptx.mul.wide.u32(lay.arrival(rank, i), 4)
    with ptx.if_(ptx.and_.pred(tid > 0, tid < W)):
        ptx.red.release.sys.global_.add.u32(flag.peer_ptr(ptx.rem.u32(rank + tid, W)) + slot, 1)


def wait_rows(flag: TensorArg, lay: GatherPlan, shard: Any, i: Any) -> None:
    """Spin (the calling thread) until row block ``i`` of ``shard`` has
    arrived from all ``nj`` CTAs that push it."""
    wait_count(flag.ptr + ptx.mul.wide.u32(lay.arrival(shard, i), 4), lay.nj)

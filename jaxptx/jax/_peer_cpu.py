"""Kernels with peers on the CPU: the shards of one call meet, and their
grids run together on one emulated node.

XLA runs the shards of a ``jax.shard_map`` concurrently, one host thread per
CPU device (checked on jax 0.10.2 with 2, 4 and 8 devices). The CPU handler
of each shard calls ``_cpu.run``, which hands this module the shard's fresh
buffers (:class:`PeerLaunch`). The shards of one call meet in a
:class:`_Meeting` keyed by the kernel id, the call site, the axis, its
size and the device's group along it (its position on the mesh's other
axes); a rank joins the oldest meeting of that key it is not yet part of, so a
call repeated (in a loop, or in the next execution of the program) meets
its own repetitions on the other devices. The last shard to arrive runs the
meeting: one :class:`jaxptx.sim.System` of ``axis_size`` devices with peer
access, device ``r`` holding rank ``r``'s buffers, a multicast object over
each peer tensor whose ``multimem_ptr`` the kernel takes, each device's
peer table (``jaxptx.dsl._peers``), and every grid launched together. The
others wait on a condition variable, which releases the GIL (the C++
handler holds it while it calls Python). Each shard then takes its own
buffers back.

A shard whose peers do not all arrive within ``$JAXPTX_PEER_TIMEOUT``
seconds (default 60) fails with :class:`PeerTimeoutError`, naming the axis
and the ranks that never came: a kernel called on some devices of the axis
only (under a ``lax.cond`` on the rank, say) is an error, not a hang.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from .. import capture, ir, sim
from ..launch import Launch
from ._peers import PeerCall

__all__ = ["PeerLaunch", "PeerTimeoutError", "TIMEOUT_ENV", "DEFAULT_TIMEOUT", "timeout",
           "split_rank"]

TIMEOUT_ENV = "JAXPTX_PEER_TIMEOUT"
DEFAULT_TIMEOUT = 60.0


class PeerTimeoutError(TimeoutError):
    """Not every device of a kernel's mesh axis called it in time."""


def timeout() -> float:
    """Seconds a shard waits for the others (``$JAXPTX_PEER_TIMEOUT``).

    Raises:
        ValueError: the variable is set to something other than a positive number.
    """
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    return value


def split_rank(call: PeerCall, inputs: Sequence[memoryview],
               input_types: Sequence[Any]) -> tuple[int, int, list[memoryview], list[Any]]:
    """The rank operand (the call's last input) read — this device's rank on
    the axis plus the axis size times its group, the devices that meet
    (one per position on the mesh's other axes) — and the other inputs:
    ``(rank, group, inputs, input types)``.

    Raises:
        ValueError: no 4-byte rank operand.
    """
    if not inputs or inputs[-1].nbytes != 4:
        raise ValueError(f"a call over mesh axis {call.axis_name!r} has its rank as a last "
                         f"4-byte input; got {len(inputs)} inputs")
    group, rank = divmod(int(np.frombuffer(inputs[-1], np.uint32)[0]), call.axis_size)
    return rank, group, list(inputs[:-1]), list(input_types[:-1])


class _Shard:
    """What one rank brings to a meeting, and takes away."""

    def __init__(self, buffers: list[np.ndarray], params: list[int]) -> None:
        self.buffers, self.params = buffers, params
        self.after: list[bytes] = []
        self.written: list[np.ndarray] = []


class _Meeting:
    """The shards of one call: filled by rank, run once all are there."""

    def __init__(self, size: int) -> None:
        self.shards: list[_Shard | None] = [None] * size
        self.full = self.done = self.failed = False
        self.error: BaseException | None = None

    def missing(self) -> list[int]:
        return [r for r, s in enumerate(self.shards) if s is None]


# The meetings not yet full, by key; the condition guards them and every
# meeting's state. Process-wide by nature: XLA's threads meet here.
_CONDITION = threading.Condition()
_OPEN: dict[tuple, list[_Meeting]] = {}


class PeerLaunch:
    """One shard's launch of a kernel with peers (``_cpu`` runs it as it
    runs any launch: :meth:`run` takes the shard's fresh buffers and gives
    back their bytes after the node ran)."""

    def __init__(self, module: ir.Module, entry: str, shape: Launch, scalars: list[bytes],
                 maps: Sequence[Any], call: PeerCall, rank: int, kernel_id: int, name: str,
                 lock: AbstractContextManager, group: int = 0) -> None:
        self.module, self.entry, self.shape = module, entry, shape
        self.scalars, self.maps = scalars, maps
        self.call, self.rank, self.kernel_id, self.name, self.lock = call, rank, kernel_id, name, lock
        self.group = group

    def run(self, buffers: list[np.ndarray], params: list[int]) -> tuple[list[bytes], list[np.ndarray]]:
        """Meet the other ranks, run (or wait for) the node, and return this
        rank's buffers' bytes and which of them the launch wrote.

        Raises:
            PeerTimeoutError: not every rank arrived in time.
            SimError, SanitizerError...: as the node's launch raised them.
        """
        shard = _Shard(buffers, params)
        meeting, runs = self._join(shard)
        if runs:
            try:
                self._run(meeting)
            except BaseException as e:   # noqa: BLE001 - every rank reports the node's failure
                meeting.error = e
            with _CONDITION:
                meeting.done = True
                _CONDITION.notify_all()
        else:
            self._wait(meeting)
        if meeting.error is not None:
            raise meeting.error
        return shard.after, shard.written

    def _join(self, shard: _Shard) -> tuple[_Meeting, bool]:
        c = self.call
        key = self._key()
        with _CONDITION:
            meetings = _OPEN.setdefault(key, [])
            meeting = next((m for m in meetings if m.shards[self.rank] is None), None)
            if meeting is None:
                meeting = _Meeting(c.axis_size)
                meetings.append(meeting)
            meeting.shards[self.rank] = shard
            if meeting.missing():
                return meeting, False
            meeting.full = True
            _close(key, meeting)
            return meeting, True

    def _key(self) -> tuple:
        """The meetings this launch may join: the kernel, its call site, the
        axis and this device's group along it."""
        c = self.call
        return (self.kernel_id, c.site, c.axis_name, c.axis_size, self.group)

    def _wait(self, meeting: _Meeting) -> None:
        """Wait (without the GIL) for every rank to arrive, then for the run."""
        c, limit = self.call, timeout()
        deadline = time.monotonic() + limit
        with _CONDITION:
            while not meeting.full and not meeting.failed:
                left = deadline - time.monotonic()
                if left <= 0:
                    meeting.failed = True
                    _close(self._key(), meeting)
                    _CONDITION.notify_all()
                    break
                _CONDITION.wait(left)
            if meeting.failed:
                raise PeerTimeoutError(
                    f"kernel {self.name}: rank {self.rank} of mesh axis {c.axis_name!r} (size "
                    f"{c.axis_size}) waited {limit:g} s for the other ranks; rank(s) "
                    f"{meeting.missing()} never called it. A kernel with peers runs only when "
                    f"every device of the axis calls it, as often (not under a lax.cond or "
                    f"loop that differs by device); ${TIMEOUT_ENV} sets the wait")
            while not meeting.done:
                _CONDITION.wait()

    def _run(self, meeting: _Meeting) -> None:
        """Run every rank's grid together on one node (this thread; the GIL held)."""
        c, n = self.call, self.call.axis_size
        shards: list[_Shard] = list(meeting.shards)   # type: ignore[arg-type]  (all arrived)
        node = sim.System(n)
        try:
            node.enable_peer_access()
            devices = node.devices
            addresses = [[d.to_device(b) for b in s.buffers] for d, s in zip(devices, shards)]
            for d in devices:
                d.track_stores()
            pointers = [[a[b] for b in s.params] for a, s in zip(addresses, shards)]
            table = self._tables(node, pointers, shards)
            items = [dict(device=r, source=self.module, kernel=self.entry, launch=self.shape,
                          params=[*pointers[r], *self.scalars,
                                  *(m.encode(pointers[r][m.arg]) for m in self.maps), r, table[r]])
                     for r in range(n)]
            check = sim.check_mode()      # explicit here: "all" raises below rather than returning
            with self.lock, capture.suppressed():
                findings = node.launch(items, check=check)
            found = [f for per_grid in findings if per_grid for f in per_grid]
            if found:
                raise sim.SanitizerError(f"{len(found)} sanitizer findings:\n" +
                                         "\n".join(f.message for f in found), found)
            for d, a, s in zip(devices, addresses, shards):
                s.after = [d.read(x, b.nbytes) for x, b in zip(a, s.buffers)]
                s.written = [d.written(x, b.nbytes) for x, b in zip(a, s.buffers)]
        finally:
            node.close()

    def _tables(self, node: Any, pointers: list[list[int]], shards: list[_Shard]) -> list[int]:
        """Each device's peer table (``jaxptx.dsl._peers``): the peer
        tensors' addresses on every device, then their multicast addresses."""
        c, n = self.call, self.call.axis_size
        multicast = []
        for k, t in enumerate(c.buffers):
            nbytes = shards[0].buffers[shards[0].params[t]].nbytes
            if not (c.multimem >> k) & 1 or not nbytes:
                multicast.append(0)
                continue
            mc = node.multicast(nbytes)
            for r in range(n):
                mc.bind(r, pointers[r][t])
            multicast.append(mc.address)
        rows = [pointers[r][t] for t in c.buffers for r in range(n)]
        table = np.array(rows + multicast, np.uint64)
        return [d.to_device(table) for d in node.devices]


def _close(key: tuple, meeting: _Meeting) -> None:
    """Take a meeting off the open list (full, or given up); the caller holds the condition."""
    meetings = _OPEN.get(key, [])
    if meeting in meetings:
        meetings.remove(meeting)
    if not meetings:
        _OPEN.pop(key, None)

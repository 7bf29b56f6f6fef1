"""A deadlock's picture: one record per stuck warp (:class:`StuckWarp`).

When no thread can make progress (:mod:`.hangs`), the launch raises a
:class:`jaxptx.sim.SimDeadlock` whose ``warps`` lists every warp with a
stuck lane: where it is (CTA, warp, lanes, PTX and Python line), how it
waits (at a CTA barrier, a cluster barrier, ``bar.warp.sync``, parked on an
mbarrier, or spinning in a loop that changes nothing) and on what, in
fields a tool can read (``detail``) and in words (``waits_on``);
:func:`table` prints them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ir
from .barriers import CLUSTER_BARRIER, EXITED, PARKED, RECONVERGE, SPINNING, WAITING, WARP_SYNC
from .naming import ranges
from .step import Step

if TYPE_CHECKING:
    from .view import MachineView

__all__ = ["StuckWarp", "Waiting", "loop_reads", "stuck_warps", "table"]


@dataclasses.dataclass(frozen=True)
class Waiting:
    """What a parked thread waits on: words for messages (``str()``) and
    fields for tools (an mbarrier's CTA, shared offset, phase, pending and
    expected arrivals, tx-count)."""

    text: str
    fields: dict[str, Any]

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class StuckWarp:
    """One warp with lanes that can never make progress.

    Attributes:
        device: the device of a node (``None`` for a one-device launch).
        cta: the CTA's index ``(x, y, z)``; warp: the warp's index in its CTA.
        lanes: the stuck lanes.
        pc: the instruction the lanes wait at (or the first of their loop).
        instruction: its PTX text; ptx_line, python_line: where it came
            from (``None`` when unknown).
        state: ``"barrier"``, ``"cluster barrier"``, ``"warp sync"``,
            ``"reconverge"`` (lanes at an ``.aligned`` barrier waiting for
            the rest of their warp), ``"mbarrier"``, ``"griddepcontrol.wait"`` or ``"spinning"``.
        waits_on: what it waits on, in words.
        detail: the same as fields: ``barrier``/``arrived``/``expected`` for
            a CTA barrier, the mbarrier's fields, or ``reads``: the
            ``(space, address, value)`` each load of a spin loop reads.
    """

    device: int | None
    cta: tuple[int, int, int]
    warp: int
    lanes: tuple[int, ...]
    pc: int
    instruction: str
    ptx_line: int | None
    python_line: ir.PythonLocation | None
    state: str
    waits_on: str
    detail: dict[str, Any]


def stuck_warps(m: "MachineView", device: int | None = None) -> list[StuckWarp]:
    """Every warp of ``m`` with a lane that waits or spins, by CTA and warp."""
    m.sync_pcs()
    out: list[StuckWarp] = []
    waiting = np.flatnonzero(m.state == WAITING)
    alive = np.bincount(np.flatnonzero(m.state != EXITED) // m.ntid, minlength=m.nctas)
    for threads in _by_warp(m, waiting):
        t = int(threads[0])
        ident = int(m.barrier[t])
        if ident == CLUSTER_BARRIER:
            head = int(m.cluster_first(np.array([t // m.ntid]))[0])
            state, words = "cluster barrier", f"its cluster's {int(m.cluster_arrivals[head])} arrivals to complete"
            detail: dict[str, Any] = {"arrived": int(m.cluster_arrivals[head])}
        elif ident == WARP_SYNC:
            state, words, detail = "warp sync", "the other lanes its member mask names", {}
        elif ident == RECONVERGE:
            state, words, detail = "reconverge", "the other live lanes of its warp to reach this .aligned barrier", {}
        else:
            cta = t // m.ntid
            count = int(m.barrier_count[t]) or int(alive[cta])
            arrived = int(np.count_nonzero((m.state[cta * m.ntid:(cta + 1) * m.ntid] == WAITING)
                                           & (m.barrier[cta * m.ntid:(cta + 1) * m.ntid] == ident)))
            arrived += int(m.arrived[cta * 16 + ident])
            state, words = "barrier", f"barrier {ident}: {arrived} of {count} arrivals"
            detail = {"barrier": ident, "arrived": arrived, "expected": count}
        out.append(_record(m, threads, int(m.pc[t]) - 1, state, words, detail, device))
    for word, (threads, _, describe) in sorted(m.parked.items()):
        why = describe(word)
        fields = dict(why.fields) if isinstance(why, Waiting) else {}
        state = fields.pop("state", "mbarrier")
        for ts in _by_warp(m, threads[m.state[threads] == PARKED]):
            out.append(_record(m, ts, int(m.pc[ts[0]]) - 1, state, str(why), fields, device))
    for threads, _, pcs in m.spinners.loops:
        reads = [read for _, read in loop_reads(m, pcs, threads) if read is not None]
        words = ", ".join(f"{space} {address:#x} = {value:#x}" for space, address, value in reads) or "nothing"
        for ts in _by_warp(m, threads[m.state[threads] == SPINNING]):
            out.append(_record(m, ts, min(pcs), "spinning", f"a loop reading {words}", {"reads": reads}, device))
    out.sort(key=lambda w: (w.device or 0, w.cta[2], w.cta[1], w.cta[0], w.warp))
    return out


def table(warps: list[StuckWarp]) -> str:
    """The records as a text table, one line per warp."""
    rows = [("device", "CTA", "warp", "lanes", "line", "state", "waits on")]
    for w in warps:
        lanes = ranges(w.lanes).replace(", ", ",")
        line = f"PTX {w.ptx_line}" if w.ptx_line else ""
        if w.python_line:
            line += (" " if line else "") + str(w.python_line)
        rows.append(("-" if w.device is None else str(w.device), "({}, {}, {})".format(*w.cta), str(w.warp), lanes,
                     line or "?", w.state, w.waits_on))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(n) for c, n in zip(r, widths)) + "  " + r[-1] for r in rows)


def _by_warp(m: "MachineView", threads: np.ndarray) -> list[np.ndarray]:
    """``threads`` (any order) split by warp, in warp order."""
    threads = np.sort(np.asarray(threads, dtype=np.int64))
    key = (threads // m.ntid) * m.warps_per_cta + (threads % m.ntid) // 32
    return [threads[key == k] for k in np.unique(key).tolist()]


def _record(m: "MachineView", threads: np.ndarray, pc: int, state: str, words: str, detail: dict,
            device: int | None) -> StuckWarp:
    t = int(threads[0])
    cta, tid = divmod(t, m.ntid)
    gx, gy, _ = m.grid
    ins = m.program.code[pc] if 0 <= pc < len(m.program.code) else None
    loc = ins.loc if ins is not None else None
    ptx_line = ir.ptx_line(loc)
    python = ir.python_location(loc)
    lanes = tuple(sorted({int(x) % m.ntid % 32 for x in threads}))
    return StuckWarp(device, (cta % gx, cta // gx % gy, cta // (gx * gy)), tid // 32, lanes, pc,
                     ins.name if ins is not None else "?", ptx_line, python, state, words, detail)


def loop_reads(m: "MachineView", pcs: frozenset[int], threads: np.ndarray) -> list[tuple[ir.Instruction, Any]]:
    """What each load (``ld``, ``atom``) of a spin loop reads for the first of
    ``threads``: ``(instruction, (space, address, value))``, or
    ``(instruction, None)`` when its address cannot be computed. Read without
    telling the observers: a report is not an access."""
    found: list[tuple[ir.Instruction, Any]] = []
    hook, m.memory.on_access = m.memory.on_access, None
    try:
        for pc in sorted(pcs):
            ins, r = m.program.code[pc], m.program.resolved[pc]
            if r is None or not r.inst.sim or not r.inst.sim.startswith(("ld", "atom")):
                continue
            k = next((i for i, op in enumerate(ins.operands) if isinstance(op, ir.Address)), None)
            if k is None:
                continue
            try:
                step = Step(m, ins, r, threads[:1])
                space, addr = step.address(k)
                width = min(max(step.type(0).nbytes, 1), 8)
                value = int(m.memory.load(space, addr, threads[:1], width, "hang report")[0])
                found.append((ins, (space, int(addr[0]), value)))
            except Exception:  # noqa: BLE001 - a report must not fail on a bad address
                found.append((ins, None))
    finally:
        m.memory.on_access = hook
    return found

"""The sanitizer's checks of synchronisation: barriers, mbarriers, warp syncs,
member masks, async groups and waits."""

from __future__ import annotations

import numpy as np

from .... import ir
from ....types import TYPES
from ...numerics.lanes import shfl_source_lanes
from ..barriers import EXITED, lanes_among, live_lanes
from .values import MASKED

__all__ = ["SyncChecks"]


class SyncChecks:
    """Mixed into :class:`Sanitizer`: synchronisation."""

    def after(self, sim: str, s) -> None:
        """The bookkeeping of synchronising and async instructions, after
        their semantics ran for the threads ``s.threads``."""
        th = s.threads
        if self._moving:
            self._quiet = self._moving = False
            if sim == "selp":
                self._select_definedness(s)
            else:
                self._move_definedness(s.ins, th)
            return
        if sim in MASKED:
            self.member_mask(s)
        if sim == "cp_async":
            return
        if sim == "cp_async_commit_group" or (sim == "cp_async_wait_group" and s.ins.opcode.endswith("all")):
            self.cp_open[th] += 1
        if sim == "cp_async_wait_group":
            n = 0 if "wait_all" in s.ins.name else int(s.src(0).astype(np.int64)[0])
            self.cp_done[th] = self.cp_open[th] - n
            self._complete_cp_async(th)
        elif sim == "wgmma_commit_group":
            self.wg_open[th] += 1
        elif sim == "wgmma_wait_group":
            n = int(s.src(0).astype(np.int64)[0])
            self.wg_done[th] = self.wg_open[th] - n
            self._resolve("wgmma", th, self.wg_done)
        elif sim == "tcgen05_ld":
            self.ld_open[th] += 1
        elif sim == "tcgen05_wait":
            if "ld" in "".join(s.ins.modifiers):
                self.ld_done[th] = self.ld_open[th]
        elif sim == "cp_async_bulk_commit_group":
            self.bulk_open[th] += 1
        elif sim == "cp_async_bulk_wait_group":
            n = int(s.src(0).astype(np.int64)[0])
            self.bulk_done[th] = self.bulk_open[th] - n
            self._resolve("bulk", th, self.bulk_done)
        elif sim == "wgmma_mma_async" and isinstance(s.ins.operands[1], ir.Vector):
            for op in s.ins.operands[1].items:       # A from registers: read until the wgmma completes
                if isinstance(op, ir.Register):
                    self._flying_operand(op.name, th)

    def barrier_arrive(self, threads: np.ndarray, keys: np.ndarray) -> None:
        """``bar.arrive``: a release into each barrier key (CTA * 16 + id)."""
        for key in np.unique(keys).tolist():
            self.clocks.barrier_release(threads[keys == key], key)

    def barrier_complete(self, threads: np.ndarray, keys: np.ndarray) -> None:
        """Barriers completed: each key's waiting threads synchronise."""
        for key in np.unique(keys).tolist():
            self.clocks.barrier_complete(threads[keys == key], key)

    def everyone_synchronised(self) -> None:
        """Every thread of every CTA passed one barrier."""
        self.clocks.join_ctas(self.m.nctas)

    def warp_sync(self, threads: np.ndarray, gone: np.ndarray | None = None,
                  pcs: np.ndarray | None = None) -> None:
        """``bar.warp.sync`` completed for ``threads``: the lanes of each warp
        released together synchronise. ``gone``: per thread, lanes its mask
        named that exited instead of arriving (a finding)."""
        for mine in self._warps(threads):
            self.clocks.join(mine)
        if gone is not None and gone.any():
            k = int(np.argmax(gone != 0))
            lane = int(gone[k]).bit_length() - 1
            self.report("divergence", f"{self.line(int(pcs[k]))} at {self.who(int(threads[k]))}: the member "
                        f"mask names lane {lane}, which exited without executing bar.warp.sync",
                        self.line(int(pcs[k])))

    def cluster_complete(self, threads: np.ndarray) -> None:
        """``barrier.cluster.wait`` completed for ``threads``: each CTA's part
        joins, and the cluster starts a new epoch for distributed shared memory."""
        for cta in np.unique(threads // self.ntid).tolist():
            self.clocks.join(threads[threads // self.ntid == cta])
        first = np.unique(self.m.cluster_first(np.unique(threads // self.ntid)))
        self.cluster_epoch[first] += 1

    def mbarrier_arrive(self, threads: np.ndarray, words: np.ndarray) -> None:
        """Arrive-on operations of ``threads`` on the mbarrier ``words``."""
        for w in np.unique(words).tolist():
            self._column(w)
        if self.sim in ("tcgen05_commit",):
            self._tie("tcgen05", threads, words)
        self.clocks.mbarrier_release(threads, words)

    def mbarrier_acquire(self, threads: np.ndarray, words: np.ndarray) -> None:
        """``threads`` observed a completed phase of ``words``."""
        self.clocks.mbarrier_acquire(threads, words)
        for w in np.unique(words).tolist():
            col = self._column(w)
            sel = threads[words == w]
            self.clocks.raise_column(sel, col, self.completions.get(w, 0))

    def mbarrier_phases(self, words: np.ndarray, completed: np.ndarray) -> None:
        """Phase completions (``completed``: how many, per word)."""
        for w, c in zip(np.asarray(words).tolist(), np.asarray(completed).tolist()):
            if c:
                self.completions[w] = self.completions.get(w, 0) + int(c)
                self.clocks.mbarrier_complete(w)

    def mbarrier_init(self, words: np.ndarray) -> None:
        """``mbarrier.init``/``inval``: a fresh object (its 8 bytes now hold a value)."""
        self.clocks.mbarrier_reset(words)
        words = np.asarray(words, dtype=np.int64)
        at = self.shared_cells(words * 8, 8)         # (first: it may split the cells, replacing the arrays)
        self.shadow.init[at] = True

    def _warps(self, threads: np.ndarray) -> list[np.ndarray]:
        """``threads`` grouped by warp (warps are CTA-local: 32 lanes from
        each CTA's thread 0)."""
        key = threads // self.ntid * 64 + threads % self.ntid // 32
        return [threads[key == k] for k in np.unique(key).tolist()]

    def aligned_barrier(self, threads: np.ndarray) -> None:
        """An ``.aligned`` barrier executed by ``threads``: every live lane of
        their warps must execute it together."""
        if len(threads) == self.m.nthreads:      # every thread is here: no warp can be split
            return
        ntid = self.ntid
        lane0 = threads // ntid * ntid + threads % ntid // 32 * 32
        first = np.unique(lane0)                                # each warp's lane 0
        lanes = first[:, None] + np.arange(32)
        real = lanes < (first // ntid * ntid + ntid)[:, None]
        lanes = np.where(real, lanes, first[:, None])
        here = np.zeros(self.m.nthreads, dtype=bool)
        here[threads] = True
        away = real & (self.m.state[lanes] != EXITED) & ~here[lanes]
        if away.any():
            w = int(np.argmax(away.any(axis=1)))
            t = int(threads[np.argmax(lane0 == first[w])])
            gone = int(lanes[w][np.argmax(away[w])])
            self.report("divergence", f"barrier divergence: {self.line(self.pc)} is .aligned, but "
                        f"{self.who(t)} reaches it without {self._thread_at(t, gone % ntid)} "
                        "of its warp (the whole warp must execute it together)", self.line(self.pc))

    def member_mask(self, s, waits: bool = False) -> None:
        """``shfl.sync``/``vote.sync``/``match.sync``/``redux.sync``/
        ``elect.sync``/``bar.warp.sync``: every lane the member mask names
        must execute the instruction with the thread, and the thread must be
        in its mask."""
        mask = s.src(len(s.ins.operands) - 1).astype(np.int64) & 0xFFFFFFFF
        th = s.threads
        if len(th) == self.m.nthreads and self.ntid % 32 == 0 and (mask == 0xFFFFFFFF).all():
            return      # every lane of every warp here, each naming all 32: nothing can be missing
        lane = th % self.ntid % 32
        if len(th) == self.m.nthreads and self.ntid % 32 == 0:
            missing = np.zeros(len(th), dtype=np.int64)     # every lane of every warp is here
        else:
            missing = mask & ~lanes_among(self.m, th)
            if waits:       # bar.warp.sync waits for its other lanes: only exited ones are missing
                missing &= ~live_lanes(self.m, th)
        outside = (mask >> lane) & 1 == 0
        bad = (missing != 0) | outside
        if bad.any():
            k = int(np.argmax(bad))
            if outside[k]:
                why = f"its own lane {int(lane[k])} is not in the member mask {int(mask[k]):#010x}"
            else:
                gone = int(missing[k]).bit_length() - 1
                why = (f"the member mask {int(mask[k]):#010x} names lane {gone}, which "
                       + ("has exited" if waits else "is not executing it (exited, or elsewhere in the program)"))
            self.report("divergence", f"{self.line(self.pc)} at {self.who(int(th[k]))}: {why}",
                        self.line(self.pc))
        if s.ins.opcode == "shfl.sync":
            self._shuffle_source(s, mask, lane)

    def _shuffle_source(self, s, mask: np.ndarray, lane: np.ndarray) -> None:
        """``shfl.sync``: the lane each thread reads from (PTX ISA, shfl.sync:
        from ``b``, the clamp and segment mask ``c`` and the mode) must be in
        the member mask, else the result is undefined."""
        mode = next((m for m in s.ins.modifiers if m in ("up", "down", "bfly", "idx")), "idx")
        u32 = TYPES["u32"]
        j, valid = shfl_source_lanes(s.src(2, u32).astype(np.int32), s.src(3, u32).astype(np.int32),
                                     lane.astype(np.int32), mode)
        j = np.where(valid, j, lane)
        bad = ((mask >> (j & 31)) & 1) == 0
        if bad.any():
            k = int(np.argmax(bad))
            self.report("divergence", f"{self.line(self.pc)} at {self.who(int(s.threads[k]))}: it reads lane "
                        f"{int(j[k])}, which is outside the member mask {int(mask[k]):#010x} (the value is "
                        "undefined)", self.line(self.pc))

"""Multi-stage shared-memory pipelines over full/empty mbarriers, and warp roles.

A :class:`Pipeline` of ``N`` stages is ``2 N`` mbarriers: ``full[s]``
(the producer arms it with the stage's byte count, TMA completes it) and
``empty[s]`` (every consumer arrives when it is done with the stage). Each
side walks the ring with a :class:`PipelineState`: the stage index and the
phase parity it waits for, kept in two u32 registers that the methods update
in place, so the same code works in a Python-unrolled loop and inside a
``ptx.range_`` / ``ptx.while_`` runtime loop (the registers are loop-carried).

The producer starts on parity 1 of ``empty``: waiting for the phase "before"
a fresh barrier's first one returns at once (PTX ISA, ``mbarrier.try_wait
.parity``), so the first lap does not wait for releases that never came.

Example (one producer thread, one consumer warpgroup, K loop at run time)::

    pipe = Pipeline(4, consumer_arrivals=128)
    with ptx.if_(tid == 0):
        pipe.init()
    ptx.bar.sync(0)
    with role(warpgroup=0, dec=40):
        with ptx.if_(tid == 0):
            for kb in ptx.range_(0, kblocks):
                s = pipe.wait_empty()                 # stage index (u32 register)
                full = pipe.arm(STAGE_BYTES)          # arrive.expect_tx on full[s]
                tma_load(tiles + s * STAGE_BYTES, ..., full)
                pipe.producer.advance()
    with role(warpgroup=1, inc=232):
        for kb in ptx.range_(0, kblocks):
            s = pipe.wait_full()
            ...                                       # wgmma from stage s
            pipe.release()                            # arrive on empty[s], next stage

Everything here emits plain PTX (``mbarrier.init`` / ``arrive`` /
``try_wait.parity``, ``add`` / ``setp`` / ``selp`` for the cursors, ``mapa``
for remote releases, ``setmaxnreg`` for roles) that ``kernel.ptx()`` shows.
``jaxptx/kernels/_matmul_sm90.py`` is a complete user: a persistent,
warp-specialised, cluster-multicast Hopper GEMM.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import TraceError
from ..types import u32
from . import ptx, reg, smem
from ._core import Reg
from ._values import Addr

__all__ = ["Pipeline", "PipelineState", "wait_parity", "warpgroup", "role"]

WARPGROUP = 128


def wait_parity(bar: Any, parity: Any) -> None:
    """Spin until the phase of ``parity`` (0/1, int or u32 register) of
    mbarrier ``bar`` has completed (``mbarrier.try_wait.parity`` loop).

    Example::

        wait_parity(bars[0], 0)     # the barrier's first phase is over
    """
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


class PipelineState:
    """One side's position in a ring of ``stages``: ``stage`` and ``phase``
    (u32 registers, updated in place by :meth:`advance`).

    Example::

        st = PipelineState(4, phase=0)
        st.advance()          # stage 1; after stage 3 back to 0 and phase ^= 1
    """

    def __init__(self, stages: int, phase: int) -> None:
        self.stages = stages
        self.stage: Reg = reg.scalar(u32, 0)
        self.phase: Reg = reg.scalar(u32, phase)

    def advance(self) -> None:
        """Go to the next stage, flipping the phase after the last one (branch-free)."""
        if self.stages == 1:
            ptx.xor.b32(self.phase, self.phase, 1)
            return
        ptx.add.u32(self.stage, self.stage, 1)
        wrap = self.stage == self.stages
        ptx.selp.u32(self.stage, 0, self.stage, wrap)
        ptx.xor.b32(self.phase, self.phase, ptx.selp.u32(1, 0, wrap))


class Pipeline:
    """``stages`` full/empty mbarrier pairs and the producer's and consumer's
    :class:`PipelineState` (created here, in the registers of every thread:
    build the pipeline before branching into roles).

    Args:
        stages: ring depth.
        producer_arrivals: arrivals that complete ``full[s]`` besides its
            transaction bytes (1: the thread that calls :meth:`arm`; 2 for
            two CTAs' producers arming the same barrier).
        consumer_arrivals: arrivals that complete ``empty[s]`` (e.g. 128
            per consumer warpgroup when every thread calls :meth:`release`,
            times the CTAs of a cluster that release remotely).

    Example::

        pipe = Pipeline(3, consumer_arrivals=256)
        with ptx.if_(tid == 0):
            pipe.init()
        ptx.bar.sync(0)
    """

    def __init__(self, stages: int, *, producer_arrivals: int = 1, consumer_arrivals: int = 1) -> None:
        for name, v in (("stages", stages), ("producer_arrivals", producer_arrivals),
                        ("consumer_arrivals", consumer_arrivals)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise TraceError(f"Pipeline {name}: expected a positive int, got {v!r}")
        self.stages = stages
        self.producer_arrivals = producer_arrivals
        self.consumer_arrivals = consumer_arrivals
        self.full = smem.mbarrier(stages)
        self.empty = smem.mbarrier(stages)
        self.producer = PipelineState(stages, phase=1)
        self.consumer = PipelineState(stages, phase=0)

    def init(self) -> None:
        """``mbarrier.init`` every barrier and fence the inits (one thread;
        follow with a CTA or cluster barrier)."""
        for s in range(self.stages):
            ptx.mbarrier.init.shared.b64(self.full[s], self.producer_arrivals)
            ptx.mbarrier.init.shared.b64(self.empty[s], self.consumer_arrivals)
        ptx.fence.mbarrier_init.release.cluster()

    # --- producer ----------------------------------------------------------------------------

    def wait_empty(self) -> Reg:
        """Producer: wait until the current stage is free; returns its index."""
        wait_parity(self.empty[self.producer.stage], self.producer.phase)
        return self.producer.stage

    def arm(self, tx_bytes: int | Reg) -> Addr:
        """Producer: ``mbarrier.arrive.expect_tx`` ``tx_bytes`` on the current
        stage's full barrier; returns that barrier's address (the TMA's
        completion operand). Does not advance: call ``producer.advance()``."""
        bar = self.full[self.producer.stage]
        ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar, tx_bytes)
        return bar

    def full_bar(self) -> Addr:
        """The producer's current full barrier (for copies issued by a
        thread that did not :meth:`arm`)."""
        return self.full[self.producer.stage]

    # --- consumer ----------------------------------------------------------------------------

    def wait_full(self) -> Reg:
        """Consumer: wait until the current stage's data has landed; returns its index."""
        wait_parity(self.full[self.consumer.stage], self.consumer.phase)
        return self.consumer.stage

    def release(self, *, advance: bool = True, cta: Reg | int | None = None,
                pred: Reg | None = None, state: PipelineState | None = None) -> None:
        """Consumer: arrive on the current stage's empty barrier, then (by
        default) advance to the next stage.

        ``cta`` arrives on the barrier at the same offset in that CTA of the
        cluster instead (``mapa`` + ``mbarrier.arrive.release.cluster
        .shared::cluster``), for a producer that fills several CTAs' stages;
        ``pred`` guards the arrival (e.g. one thread per warp). ``state``
        releases (and advances) another cursor's stage instead of
        ``consumer``'s: a release cursor that lags the wait cursor, for a
        consumer that keeps one stage's ``wgmma`` in flight::

            lag = PipelineState(pipe.stages, phase=0)
            ...                                  # per K block, after wait_group(1):
            pipe.release(state=lag)              # the stage before this one is free
        """
        state = self.consumer if state is None else state
        bar = self.empty[state.stage]
        if cta is None:
            ptx.mbarrier.arrive.shared.b64(ptx.SINK, bar, pred=pred)
        else:
            local = _address_reg(bar)
            remote = ptx.mapa.shared__cluster.u32(local, cta)
            ptx.mbarrier.arrive.release.cluster.shared__cluster.b64(ptx.SINK, ptx.addr(remote), pred=pred)
        if advance:
            state.advance()


def _address_reg(a: Addr) -> Reg:
    """The shared-window address ``a`` names, in a u32 register."""
    base = a.base if isinstance(a.base, Reg) else ptx.mov.u32(a.base)
    return base + int(a.offset) if a.offset else base


def warpgroup() -> Reg:
    """This thread's warpgroup index, ``%tid.x / 128`` (1-d blocks)."""
    return ptx.special.tid.x() >> 7


@contextmanager
def role(warpgroup: int | tuple[int, int], *, dec: int | None = None,
         inc: int | None = None) -> Iterator[None]:
    """Run the body on warpgroup ``warpgroup`` (or the half-open range
    ``(first, stop)``) only, after ``setmaxnreg.dec`` / ``.inc`` to ``dec`` /
    ``inc`` registers per thread (a multiple of 8 in 24..256; give at most
    one). A producer typically gives registers back (``dec=40``) and the
    consumers take them (``inc=232``).

    Example::

        with role(0, dec=40):
            with ptx.if_(ptx.special.tid.x() == 0):
                ...                      # TMA producer thread
        with role((1, 3), inc=232):
            ...                          # two consumer warpgroups
    """
    if dec is not None and inc is not None:
        raise TraceError("role: give dec= or inc=, not both")
    count = dec if dec is not None else inc
    if count is not None and (not isinstance(count, int) or count % 8 or not 24 <= count <= 256):
        raise TraceError(f"role: setmaxnreg takes a multiple of 8 in 24..256, got {count!r}")
    tid = ptx.special.tid.x()
    if isinstance(warpgroup, tuple):
        first, stop = warpgroup
        inside = (tid >= first * WARPGROUP) & (tid < stop * WARPGROUP)
    else:
        inside = (tid >> 7) == warpgroup
    with ptx.if_(inside):
        if dec is not None:
            ptx.setmaxnreg.dec.sync.aligned.u32(dec)
        elif inc is not None:
            ptx.setmaxnreg.inc.sync.aligned.u32(inc)
        yield

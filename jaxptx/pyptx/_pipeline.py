"""pyptx's ring-pipeline and 3-d TMA helpers: ``ptx.pipeline`` and
``ptx.tma.load_3d`` / ``load_3d_multicast`` / ``store_3d``.

The TMA helpers address a ``tma_rank=3`` descriptor (a 2-d ``(H, W)``
tensor described as ``(W / S, H, S)``, see :mod:`jaxptx.dsl._tma`): a
``(row, col)`` element position is the coordinate ``{0, row, col / S}``
with ``S = 64`` elements (the 128-byte span of a bf16 row, which is what
pyptx's helpers assume); ``coords=`` gives the three coordinates as they are.
"""

from __future__ import annotations

from typing import Any

from ..dsl import Reg as _CoreReg
from ..dsl import emit_instruction, new_reg
from ..types import u32
from ._emit import register
from ._hopper import _cluster_rank, _TensorCopy
from ._regs import adopt

__all__ = ["PipelineState", "pipeline", "tma"]

# pyptx's 3-d helpers divide the column by 64 (``col >> 6``).
_SPAN_SHIFT = 6


class PipelineState:
    """A ring of ``n_stages`` buffers walked in a loop: a stage cursor and a
    phase bit, both loop-carried registers (``cursor`` and ``phase`` given,
    or new ones starting at 0)."""

    def __init__(self, n_stages: int, *, cursor: Any = None, phase: Any = None) -> None:
        if not isinstance(n_stages, int) or n_stages < 1:
            raise ValueError(f"ptx.pipeline: n_stages must be a positive int, got {n_stages!r}")
        self.n_stages = n_stages
        self.cursor = adopt(cursor) if cursor is not None else _zero()
        self.phase = adopt(phase) if phase is not None else _zero()

    def advance(self) -> tuple[Any, Any]:
        """Take the next stage: when the cursor reaches ``n_stages`` it wraps
        to 0 and the phase flips. Returns ``(stage, phase)`` (``phase`` is
        the loop-carried register itself) and moves the cursor to ``stage + 1``."""
        wrap = self.cursor == self.n_stages
        flip = adopt(new_reg(u32))
        emit_instruction("selp", ("u32",), (flip, 1, 0, wrap))
        self.phase ^= flip
        stage = adopt(new_reg(u32))
        emit_instruction("selp", ("u32",), (stage, 0, self.cursor, wrap))
        emit_instruction("add", ("s32",), (self.cursor, stage, 1))
        return stage, self.phase


def _zero() -> Any:
    r = adopt(new_reg(u32))
    emit_instruction("mov", ("u32",), (r, 0))
    return r


@register("pipeline")
def pipeline(n_stages: int, *, cursor: Any = None, phase: Any = None) -> PipelineState:
    """A :class:`PipelineState` over ``n_stages`` buffers."""
    return PipelineState(n_stages, cursor=cursor, phase=phase)


def _coords(what: str, row: Any, col: Any, coords: Any) -> tuple[Any, ...]:
    if coords is not None:
        if len(coords) != 3:
            raise ValueError(f"ptx.tma.{what}: coords= needs 3 coordinates, got {coords!r}")
        return tuple(coords)
    if row is None or col is None:
        raise TypeError(f"ptx.tma.{what}: give row= and col=, or coords=(c0, c1, c2)")
    if isinstance(col, _CoreReg):
        col = adopt(emit_instruction("shr", ("u32",), (new_reg(u32), col, _SPAN_SHIFT)))
    elif isinstance(col, int):
        col >>= _SPAN_SHIFT
    return (0, row, col)


_COPY3 = _TensorCopy(3)


class _Tma:
    """``ptx.tma``: 3-d TMA copies of a ``tma_rank=3`` descriptor."""

    def load_3d(self, dst: Any, src: Any, row: Any = None, col: Any = None, mbar: Any = None,
                coords: Any = None, *, pred: Any = None) -> None:
        """``cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [dst], [src, {0, row, col/64}], [mbar]`` (or ``coords``)."""
        _COPY3(dst=dst, src=src, coord=_coords("load_3d", row, col, coords), mbar=mbar, pred=pred)

    def load_3d_multicast(self, dst: Any, src: Any, row: Any = None, col: Any = None, mbar: Any = None,
                          mask: Any = None, coords: Any = None, *, issuer: Any = None,
                          pred: Any = None) -> None:
        """:meth:`load_3d` with ``.multicast::cluster`` to the CTAs in the
        16-bit ``mask``; ``issuer`` (a cluster rank, or a predicate) picks the
        CTA that issues it (``pred`` otherwise, not both)."""
        if issuer is not None:
            if pred is not None:
                raise ValueError("ptx.tma.load_3d_multicast: give issuer= or pred=, not both")
            pred = _cluster_rank(issuer) if isinstance(issuer, int) else issuer
        if mask is None:
            raise TypeError("ptx.tma.load_3d_multicast: mask= (the CTAs to deliver to) is required")
        _COPY3(dst=dst, src=src, coord=_coords("load_3d_multicast", row, col, coords), mbar=mbar,
               multicast_mask=mask, pred=pred)

    def store_3d(self, dst: Any, src: Any, row: Any = None, col: Any = None, coords: Any = None, *,
                 pred: Any = None) -> None:
        """``cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
        [dst, {0, row, col/64}], [src]``: ``dst`` the descriptor, ``src`` shared."""
        _COPY3.store(dst=dst, src=src, coord=_coords("store_3d", row, col, coords), pred=pred)


tma = register("tma")(_Tma())

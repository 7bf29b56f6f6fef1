"""Which lane a ``shfl.sync`` reads, from its operands (PTX ISA, shfl.sync).

Shared by the semantics (:mod:`jaxptx.sim.semantics.warp`) and the
sanitizer's member-mask check, so it lives below both.
"""

from __future__ import annotations

import numpy as np

__all__ = ["shfl_source_lanes"]


def shfl_source_lanes(b: np.ndarray, c: np.ndarray, lane: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``(j, in range)`` for threads at ``lane`` of ``shfl.sync.mode`` with
    operands ``b`` (lane or offset) and ``c`` (clamp in bits 0-4, segment
    mask in bits 8-12), as int32 arrays; out of range, a thread reads its
    own lane."""
    b = b & 0x1F
    clamp, segmask = c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (clamp & ~segmask)
    if mode == "up":
        j = lane - b
        return j, j >= max_lane
    j = {"down": lane + b, "bfly": lane ^ b, "idx": (lane & segmask) | (b & ~segmask)}[mode]
    return j, j <= max_lane

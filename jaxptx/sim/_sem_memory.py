"""Emulator semantics: loads, stores, atomics (being written; scalar and
vector ``ld``/``st`` are the first)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._step import Step


def ld(s: Step) -> None:
    """``ld``: scalar or vector load from the instruction's state space."""
    space, addr = s.address(1)
    t = s.type(0)
    count = len(s.ins.operands[0].items) if hasattr(s.ins.operands[0], "items") else 1
    values = [s.load(space, addr + np.uint64(i * max(1, t.bits // 8)), t) for i in range(count)]
    s.dst(0, values[0] if count == 1 else np.stack(values, axis=-1))


def st(s: Step) -> None:
    """``st``: scalar or vector store."""
    space, addr = s.address(0)
    t = s.type(1)
    v = s.src(1)
    if v.ndim == 1 or (t.lanes > 1 and v.ndim == 2 and not hasattr(s.ins.operands[1], "items")):
        s.store(space, addr, v, t)
        return
    for i in range(v.shape[-1]):
        s.store(space, addr + np.uint64(i * max(1, t.bits // 8)), v[..., i], t)


SEMANTICS: dict[str, Callable] = {"ld": ld, "st": st}

"""Emulator semantics: integer and floating-point arithmetic, logic, moves
and conversions (being written; ``add`` is the first)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._step import Step


def add(s: Step) -> None:
    """``add``: wrapping integer add, float add (round to nearest)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s.dst(0, s.src(1) + s.src(2))


SEMANTICS: dict[str, Callable] = {"add": add}

"""Emulator semantics: moves, conversions, approximate math (being written)."""

from __future__ import annotations

from collections.abc import Callable

from ._step import Step


def mov(s: Step) -> None:
    """``mov``: copy (registers, immediates, special registers, addresses)."""
    s.dst(0, s.src(1))


SEMANTICS: dict[str, Callable] = {"mov": mov}

"""Emulator semantics: tensor family (being written)."""

from __future__ import annotations

from collections.abc import Callable

SEMANTICS: dict[str, Callable] = {}

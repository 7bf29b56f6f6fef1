"""Emulator semantics: Hopper asynchronous copies, mbarriers, clusters
(being written)."""

from __future__ import annotations

from collections.abc import Callable

SEMANTICS: dict[str, Callable] = {}

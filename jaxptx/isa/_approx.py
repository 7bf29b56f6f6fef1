"""Instruction table entries: approx family (being written)."""

from __future__ import annotations

from ._schema import Inst

ENTRIES: tuple[Inst, ...] = ()

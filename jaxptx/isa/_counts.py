"""Operand-count rules that depend on modifier values, by name.

Family modules export ``COUNTS: dict[str, CountRule]``; table entries name a
rule in ``Operand.count``. A rule maps the chosen slot values to a length.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import _families

__all__ = ["COUNTS", "CountRule"]

CountRule = Callable[[Mapping[str, str]], int]

COUNTS: dict[str, CountRule] = {}
for _family in _families.FAMILIES:
    COUNTS.update(getattr(_family, "COUNTS", {}))

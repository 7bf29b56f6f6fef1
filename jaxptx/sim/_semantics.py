"""The registry of semantics functions, by the names the ISA table's
``sim`` fields use. Each ``_sem_*`` module exports ``SEMANTICS``."""

from __future__ import annotations

from collections.abc import Callable

from . import (_sem_arith, _sem_compare, _sem_convert, _sem_float, _sem_hopper, _sem_hopper_2,
               _sem_logic, _sem_memory, _sem_tensor, _sem_tensor_2, _sem_video, _sem_warp)

__all__ = ["SEMANTICS"]

_MODULES = (_sem_arith, _sem_float, _sem_logic, _sem_compare, _sem_convert, _sem_memory, _sem_warp,
            _sem_tensor, _sem_tensor_2, _sem_hopper, _sem_hopper_2, _sem_video)
SEMANTICS: dict[str, Callable] = {}
for _module in _MODULES:
    SEMANTICS.update(_module.SEMANTICS)

"""Custom calls made by hand, as a deserialised export (or an edited one)
makes them: any FFI target, any attributes. ``jax.ffi.ffi_call`` cannot take
a dictionary attribute of arrays (the ``launch``), because its attributes
become jaxpr parameters, which must be hashable; here they stay in a table
and only a key travels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend as jex
import numpy as np
from jax.interpreters import mlir

__all__ = ["raw_call"]

_CALLS: list[tuple[str, dict[str, Any]]] = []
_PRIM = jex.core.Primitive("jaxptx_test_raw_call")
_PRIM.def_abstract_eval(lambda x, *, key, shape: jax.core.ShapedArray(shape, np.float32))


def _lower(ctx: Any, x: Any, *, key: int, shape: tuple) -> Sequence[Any]:
    target, attributes = _CALLS[key]
    return jax.ffi.ffi_lowering(target)(ctx, x, **attributes)


mlir.register_lowering(_PRIM, _lower)


def raw_call(target: str, attributes: dict[str, Any], shape: Sequence[int]) -> Callable:
    """A jitted ``f(x)`` that is one custom call of ``target`` with
    ``attributes`` (a dict value becomes a dictionary attribute), returning
    a float32 array of ``shape``."""
    _CALLS.append((target, dict(attributes)))
    key = len(_CALLS) - 1
    return jax.jit(lambda x: _PRIM.bind(x, key=key, shape=tuple(shape)))

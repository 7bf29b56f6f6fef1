"""Kernel parameters as the bytes a launch copies into the param space.

One item per ``.param`` of the entry, in order, as ``cuLaunchKernel``'s
``kernelParams`` gives them: ``bytes`` of exactly the parameter's size (a
packed struct such as CuTe's ``.param .align 8 .b8 args[24]`` with device
addresses inside, or a 128-byte tensor map), or a Python/numpy number for a
scalar parameter, checked as the JAX path checks raw params: an int that
fits an integer type (``.bN`` also takes negative values down to
``-2**(N-1)``), a real number for ``.f16``/``.bf16``/``.f32``/``.f64``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..types import TYPES, PtxType
from .core.program import Variable
from .errors import SimError

__all__ = ["param_bytes", "pack_params"]

_BYTES_LIKE = (bytes, bytearray, memoryview)


def _scalar_type(p: Variable) -> PtxType | None:
    """The type a number for ``p`` is written as, or None when ``p`` takes bytes only
    (an array, a packed vector type, a type without a numpy dtype)."""
    t = TYPES.get(p.type)
    if t is None or t.lanes != 1 or t.np_dtype is None or t.bits < 8 or p.size != t.bits // 8:
        return None
    if t.kind == "f" and t.name not in ("f16", "bf16", "f32", "f64"):
        return None
    return t


def param_bytes(p: Variable, value: Any, where: str) -> bytes:
    """The ``p.size`` bytes that ``value`` puts in parameter ``p``.

    Raises:
        SimError: bytes of another size, a number for a parameter that
            takes bytes, a number of the wrong kind or out of range.
    """
    what = f"{where} (.{p.type}, {p.size} bytes)"
    if isinstance(value, _BYTES_LIKE):
        raw = bytes(value)
        if len(raw) != p.size:
            raise SimError(f"{what}: expected exactly {p.size} bytes, got {len(raw)}")
        return raw
    t = _scalar_type(p)
    is_number = isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))
    if t is None:
        raise SimError(f"{what}: expected {p.size} bytes (bytes, bytearray or memoryview), "
                       f"got {_describe(value)}")
    if not is_number:
        kind = "a real number" if t.kind == "f" else "an int"
        raise SimError(f"{what}: expected {kind} or {p.size} bytes, got {_describe(value)}")
    if t.kind == "f":
        try:
            return np.array(float(value), dtype=t.np_dtype).tobytes()
        except OverflowError:
            raise SimError(f"{what}: {value} is too large for a float") from None
    if not isinstance(value, (int, np.integer)):
        raise SimError(f"{what}: expected an int, got {_describe(value)}")
    low = -(1 << (t.bits - 1)) if t.kind in ("s", "b") else 0
    high = (1 << (t.bits - 1)) - 1 if t.kind == "s" else (1 << t.bits) - 1
    v = int(value)
    if not low <= v <= high:
        raise SimError(f"{what}: {v} is outside {low}..{high}")
    return (v & ((1 << t.bits) - 1)).to_bytes(t.bits // 8, "little")


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape} (pass array.tobytes() for its bytes)"
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}"


def pack_params(kernel: str, params: Sequence[Variable], values: Sequence[Any]) -> list[bytes]:
    """The bytes of every parameter of ``kernel``, in order.

    Raises:
        SimError: a wrong number of values, or a bad value (see
            :func:`param_bytes`).
    """
    if isinstance(values, (str, *_BYTES_LIKE)) or not isinstance(values, Sequence):
        raise SimError(f"{kernel}: params must be a list with one item per .param, got {_describe(values)}")
    if len(values) != len(params):
        names = ", ".join(f".{p.type} {p.name}" for p in params) or "none"
        raise SimError(f"{kernel} takes {len(params)} parameters ({names}), got {len(values)}")
    return [v.to_bytes(8, "little") if type(v) is int and p.size == 8 and p.type in _UNSIGNED_64 and 0 <= v < _TWO_64
            else param_bytes(p, v, f"{kernel} parameter {i} ({p.name})")
            for i, (p, v) in enumerate(zip(params, values))]


# A pointer parameter's usual value, an int in range for .u64/.b64, is packed
# without param_bytes' checks (what it would find: nothing to refuse).
_UNSIGNED_64 = frozenset(("u64", "b64"))
_TWO_64 = 1 << 64

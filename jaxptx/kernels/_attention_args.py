"""The argument checks the TMA attention forwards share (sm_90a, sm_100a)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import SpecError

__all__ = ["forward_dtype"]

_NAMES = {"bfloat16": "bf16", "float16": "f16"}


def forward_dtype(op: str, q: Any, k: Any, v: Any, scale: float) -> str:
    """The PTX name (``"bf16"``/``"f16"``) of a forward's element type, after
    checking q (B, Sq, H, D), k and v (B, Skv, Hkv, D) with Hkv dividing H,
    D 64 or 128, and a positive finite ``scale``.

    Raises:
        SpecError: naming ``op`` and what was expected and what came.
    """
    dtype = _NAMES.get(str(q.dtype))
    if dtype is None or str(k.dtype) != str(q.dtype) or str(v.dtype) != str(q.dtype):
        raise SpecError(f"{op}: q, k, v must all be bf16 or all f16, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or (q.shape[0], q.shape[3]) != (
            k.shape[0], k.shape[3]) or k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise SpecError(f"{op}: expected q (B, Sq, H, D) and k, v (B, Skv, Hkv, D) with "
                        f"Hkv dividing H, got {q.shape}, {k.shape}, {v.shape}")
    if q.shape[3] not in (64, 128):
        raise SpecError(f"{op}: head dim must be 64 or 128, got {q.shape[3]}")
    if not (math.isfinite(scale) and scale > 0):
        raise SpecError(f"{op}: scale must be a positive finite number, got {scale!r}")
    return dtype

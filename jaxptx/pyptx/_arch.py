"""``pyptx.detect_arch``."""

from __future__ import annotations

from ..dsl import AUTO_FALLBACK_ARCH
from ..runtime import detect_arch as _detect

__all__ = ["detect_arch"]


def detect_arch() -> str:
    """The target of CUDA device 0 (``"sm_80"``, ``"sm_90a"``, ``"sm_100a"``...),
    else ``JAXPTX_ARCH``, else ``"sm_90a"``: what ``arch="auto"`` resolves to.

    pyptx raises without a GPU; here a CPU-only machine gets the same
    fallback as ``arch="auto"`` (kernels then run on the emulator).
    """
    return _detect() or AUTO_FALLBACK_ARCH

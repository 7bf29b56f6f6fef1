"""``pyptx.detect_arch``."""

from __future__ import annotations

from ..dsl._kernel import AUTO_FALLBACK_ARCH

__all__ = ["detect_arch"]


def detect_arch() -> str:
    """The target of CUDA device 0 (``"sm_80"``, ``"sm_90a"``, ``"sm_100a"``...),
    else ``JAXPTX_ARCH``, else ``"sm_90a"``: what ``arch="auto"`` resolves to.

    pyptx raises without a GPU; here a CPU-only machine gets the same
    fallback as ``arch="auto"`` (kernels then run on the emulator).
    """
    from ..runtime._toolchain import detect_arch as _detect
    return _detect() or AUTO_FALLBACK_ARCH

"""The emulator's error class, below every other module of ``jaxptx.sim``."""

from __future__ import annotations

from ..errors import PtxError

__all__ = ["SimError"]


class SimError(PtxError, RuntimeError):
    """The emulator cannot run this kernel (unsupported feature, bad launch,
    a fault such as an out-of-bounds or misaligned access)."""

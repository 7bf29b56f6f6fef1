"""The emulator's error class, below every other module of ``jaxptx.sim``."""

from __future__ import annotations

from ..errors import LaunchError, PtxError

__all__ = ["SimError", "SimLaunchError"]


class SimError(PtxError, RuntimeError):
    """The emulator cannot run this kernel (unsupported feature, bad launch,
    a fault such as an out-of-bounds or misaligned access)."""


class SimLaunchError(SimError, LaunchError):
    """A launch the emulator refuses: outside CUDA's limits for the target
    (a :class:`~jaxptx.errors.LaunchError`), or too large for this host's
    memory."""

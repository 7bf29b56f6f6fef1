"""The emulator's error classes, below every other module of ``jaxptx.sim``."""

from __future__ import annotations

from typing import Any

from ..errors import LaunchError, PtxError

__all__ = ["SimError", "SimLaunchError", "SimMemoryError", "SimFault", "SimDeadlock"]


class SimError(PtxError, RuntimeError):
    """The emulator cannot run this kernel (unsupported feature, bad launch,
    a fault such as an out-of-bounds or misaligned access)."""


class SimLaunchError(SimError, LaunchError):
    """A launch the emulator refuses: outside CUDA's limits for the target
    (a :class:`~jaxptx.errors.LaunchError`), or too large for this host's
    memory."""


class SimMemoryError(SimLaunchError, MemoryError):
    """A launch refused before anything is allocated: the host memory it
    would need (:func:`jaxptx.sim.estimate_memory`) is over the limit
    (``JAXPTX_SIM_MAX_MEMORY``, else 3/4 of the host's memory). The
    message states the estimate, the limit, the bytes per thread and per
    CTA, and what to do; ``estimate`` (a
    :class:`jaxptx.sim.MemoryEstimate`) and ``limit`` (bytes) hold them.
    A ``MemoryError`` too, so ``except MemoryError`` catches it."""

    def __init__(self, message: str, estimate: Any = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.estimate = estimate
        self.limit = limit


class SimFault(SimError):
    """A fault at one instruction, as a GPU would raise it: an access out of
    bounds, misaligned, into freed memory or writing constant memory; a
    barrier that part of a warp reaches, or with a thread count that is not
    whole warps; ``trap``.

    Raised out of a launch, the message names the kernel, the access and
    the buffer (the parameter that points into it), the CTA and thread, the
    PTX line with its text and, for a traced kernel, the Python line; the
    same parts are in ``fault`` (a :class:`jaxptx.sim.faults.Fault`).
    """

    def __init__(self, message: str, fault: Any = None) -> None:
        super().__init__(message)
        self.fault = fault


class SimDeadlock(SimError):
    """No thread of the launch can ever make progress.

    The message names each group of stuck threads and what it waits on,
    then prints ``warps``: one :class:`jaxptx.sim.core.forensics.StuckWarp`
    per stuck warp (CTA, warp, lanes, lines, state, what it waits on).
    ``capture`` is the path of the launch saved for replay when
    ``JAXPTX_CAPTURE_DIR`` is set (else ``None``).
    """

    def __init__(self, message: str, warps: Any = ()) -> None:
        super().__init__(message)
        self.warps = list(warps)
        self.capture: Any = None

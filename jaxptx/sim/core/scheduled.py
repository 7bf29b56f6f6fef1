"""Which ``sim`` names the scheduler runs itself, and which do nothing.

Kept apart from :mod:`.machine` so that the semantics registry, the
precheck and the fidelity roles can ask without importing the scheduler.
"""

from __future__ import annotations

__all__ = ["MACHINE", "NO_OPS"]

MACHINE = frozenset(["bra", "brx_idx", "call", "ret", "exit", "trap", "bar_sync", "bar_red", "bar_arrive",
                     "barrier_cluster_arrive", "barrier_cluster_wait", "bar_warp_sync"])
"""``sim`` names the machine executes itself: they change program counters or
thread states, so no semantics function can run them."""

NO_OPS = frozenset(["fence", "fence_proxy", "prefetch", "nanosleep", "pmevent", "setmaxnreg", "brkpt"])
"""``sim`` names with no effect on the emulator: it completes every memory
operation in program order, has no caches to prefetch into and no register
allocation to change."""

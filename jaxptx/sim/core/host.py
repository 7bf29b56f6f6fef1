"""Host allocator tuning for the emulator.

Each emulated instruction computes arrays with one element per thread of the
grid (hundreds of KiB) and frees the ones they replace. glibc's malloc
serves blocks that large with ``mmap``, or gives them back to the system as
soon as they are freed from the top of the heap, so nearly every instruction
touches fresh pages: page faults took about half of a launch's time (and a
GEMM launch faulted in 120 MiB). Raising malloc's mmap threshold to 32 MiB
(the ceiling glibc's own adaptive threshold reaches) and its trim threshold
to 128 MiB keeps freed blocks for reuse.

This is process-wide, so it is done once, on the first launch, and only with
glibc, and said once on the ``jaxptx.sim`` logger (INFO);
``JAXPTX_SIM_MALLOPT=0`` in the environment turns it off. It stays on by
default because the cost of going without is large: on a 2-core host,
``benchmarks/emulator_speed.py`` (three runs each) ran a (256, 1024) softmax
in 28-33 ms without it against 15-23 ms with it, the 256³ ``mma.sync`` GEMM
in 113-136 ms against 39-48 ms, and a busy grid at 7.7-8.9 ns per
thread-instruction against 2.8-3.1 ns.

:class:`ShapeCache` keeps arrays computed from a launch's shape (special
registers, shuffle sources) for later launches of that shape, within a
byte budget.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from typing import Any

import numpy as np

__all__ = ["tune_allocator", "ShapeCache"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # glibc <malloc.h>
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
LOGGER = logging.getLogger("jaxptx.sim")
_done = False


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process (see the
    module docstring), and say so once on the ``jaxptx.sim`` logger.

    Returns:
        Whether this call changed them: False after the first call, with
        ``JAXPTX_SIM_MALLOPT=0`` in the environment, and off glibc.
    """
    global _done
    if _done:
        return False
    _done = True
    if not sys.platform.startswith("linux") or os.environ.get("JAXPTX_SIM_MALLOPT", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):       # not glibc (musl has no mallopt)
        return False
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    LOGGER.info("jaxptx.sim: raised glibc malloc's mmap threshold to %d MiB and its trim threshold to %d MiB "
                "for this process (the emulator's per-instruction arrays would otherwise fault in fresh pages); "
                "JAXPTX_SIM_MALLOPT=0 turns this off", MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20)
    return True


class ShapeCache:
    """Read-only arrays by key (a launch shape and what they depend on), at
    most ``budget`` bytes in all: past that it starts over."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.budget = budget
        self.entries: dict[Any, Any] = {}
        self.nbytes = 0

    def get(self, key: Any) -> Any:
        """The value stored under ``key``, or ``None``."""
        return self.entries.get(key)

    def put(self, key: Any, value: Any) -> Any:
        """Store ``value`` (an array or a tuple holding arrays), made
        read-only, under ``key``; returns it."""
        arrays = [a for a in (value if isinstance(value, tuple) else (value,)) if isinstance(a, np.ndarray)]
        for a in arrays:
            a.flags.writeable = False
        size = sum(a.nbytes for a in arrays)
        if size <= self.budget:
            if self.nbytes + size > self.budget:
                self.entries.clear()
                self.nbytes = 0
            self.entries[key] = value
            self.nbytes += size
        return value

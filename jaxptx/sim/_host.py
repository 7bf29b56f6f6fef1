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
glibc; ``JAXPTX_SIM_MALLOPT=0`` in the environment turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["tune_allocator"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # glibc <malloc.h>
_done = False


def tune_allocator() -> None:
    """Raise glibc's mmap and trim thresholds once (see the module docstring)."""
    global _done
    if _done:
        return
    _done = True
    if not sys.platform.startswith("linux") or os.environ.get("JAXPTX_SIM_MALLOPT", "1") == "0":
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):       # not glibc (musl has no mallopt)
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)

"""One switch for the emulator's fast paths (issue 29).

A fast path computes what a general path computes, faster: a whole tile of
``wgmma`` for every warpgroup of a step at once, a straight run of plain
instructions without returning to the scheduler, a swizzled copy through a
precomputed index map. Each one asks :func:`on` before it takes over, so the
general path stays reachable and every fast path can be held to give the
same bytes (``tests/sim/test_fast_path_differential.py``).

``JAXPTX_SIM_FAST=0`` in the environment turns every fast path off for the
process; :func:`reference` does it for a block. The switch is process-wide,
not per thread: it is a testing tool, not a per-launch option.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FAST_ENV", "on", "reference"]

FAST_ENV = "JAXPTX_SIM_FAST"
"""The environment variable that turns the fast paths off when it is ``0``."""

_on = os.environ.get(FAST_ENV, "1").strip() != "0"


def on() -> bool:
    """Whether fast paths may take over (the default)."""
    return _on


@contextmanager
def reference() -> Iterator[None]:
    """Run the block on the general paths only, then restore the switch."""
    global _on
    before, _on = _on, False
    try:
        yield
    finally:
        _on = before

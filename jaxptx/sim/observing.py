"""``observing()``: tools that watch every launch while a block is open.

    with jaxptx.sim.observing(MyTool):   # MyTool(machine) -> a sim.Observer
        y = jax.jit(f)(x)                # every emulator launch is watched

``Device.launch(observers=...)`` gives one launch its tools; this is for
launches whose caller cannot pass them (the CPU path of ``jax.jit``). It
applies to launches from any thread while the block is open (XLA runs CPU
custom calls on its own threads); blocks nest, their tools joining each
launch in the order the blocks opened.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["observing", "open_observers"]

_LOCK = threading.Lock()
_OPEN: list[Callable[[Any], Any]] = []       # factories of every open block, in opening order


@contextlib.contextmanager
def observing(*factories: Callable[[Any], Any]) -> Iterator[None]:
    """Join a tool made by each factory (called with the prepared machine,
    a :class:`jaxptx.sim.MachineView`; returning a :class:`jaxptx.sim.Observer`)
    to every emulator launch inside the block.

    Raises:
        TypeError: a factory that is not callable.
    """
    for f in factories:
        if not callable(f):
            raise TypeError(f"observing: each tool must be a callable that takes the machine and returns a "
                            f"jaxptx.sim Observer, got {type(f).__name__}")
    with _LOCK:
        _OPEN.extend(factories)
    try:
        yield
    finally:
        with _LOCK:
            for f in factories:
                _OPEN.remove(f)


def open_observers() -> tuple[Callable[[Any], Any], ...]:
    """The factories of every open :func:`observing` block (empty: none)."""
    if not _OPEN:
        return ()
    with _LOCK:
        return tuple(_OPEN)

"""Wall-clock timing shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wall_times(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> list[float]:
    """Seconds taken by each of ``repeat`` calls of ``fn``, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times

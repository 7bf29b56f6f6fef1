"""Timing and tables of ``benchmarks/peers.py``: both sides timed in turn,
one markdown table a comparison with each ratio and its target, and the
output checks."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["SCALE", "Mismatch", "Row", "Timing", "check_close", "interleaved", "print_table", "rng_array",
           "timed"]


@dataclasses.dataclass
class Timing:
    """Best wall and best process CPU seconds of one side's timed calls."""

    wall: float = math.inf
    cpu: float = math.inf

    def add(self, wall: float, cpu: float) -> None:
        """Keep the best of the times so far and this call's."""
        self.wall, self.cpu = min(self.wall, wall), min(self.cpu, cpu)


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call of ``fn``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int, warmup: int = 1) -> dict[str, Timing]:
    """Best times of each of ``fns`` over ``repeat`` rounds; each round calls
    every function once in turn, so load from other jobs falls on all alike.

    A function may return its own (wall, cpu) pair (a call timed in another
    process); otherwise its call is timed here.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out = {name: Timing() for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            got = fn()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, float) for t in got):
                wall, cpu = got
            out[name].add(wall, cpu)
    return out


@dataclasses.dataclass
class Row:
    """One line of a comparison's table.

    ``ratio`` is ``ours / peer`` when ``higher_is_better`` is False (a
    slowdown; the target is a ceiling) and ``peer / ours`` otherwise (a
    speed-up; the target is a floor). ``target`` None: no ratio target.
    ``limit``: instead, an absolute target ``(what, value, ceiling)`` in
    seconds, met when ``value <= ceiling`` (the ratio is then informative).
    """

    workload: str
    ours: Timing
    peer: Timing | None
    target: float | None = None
    higher_is_better: bool = False
    unit: str = "ms"
    limit: tuple[str, float, float] | None = None

    def ratio(self, field: str = "wall") -> float | None:
        """The ratio of the two sides' ``field`` times, or None without a peer (or a time)."""
        if self.peer is None:
            return None
        ours, peer = getattr(self.ours, field), getattr(self.peer, field)
        r = peer / ours if self.higher_is_better else ours / peer
        return None if math.isnan(r) else r

    def target_text(self) -> str:
        """The target as the table shows it."""
        if self.limit is not None:
            what, _, ceiling = self.limit
            k = SCALE[self.unit]
            return f"{what} ≤ {ceiling * k:g} {self.unit}"
        if self.target is None:
            return "— (informative)"
        kind = "peer/jaxptx" if self.higher_is_better else "jaxptx/peer"
        return f"{kind} {'≥' if self.higher_is_better else '≤'} {self.target:g}×"

    def met(self) -> bool | None:
        """Whether the target is met (the wall-time ratio, or the limit); None: no target or no peer."""
        if self.limit is not None:
            return self.limit[1] <= self.limit[2]
        r = self.ratio()
        if r is None or self.target is None:
            return None
        return r >= self.target if self.higher_is_better else r <= self.target


SCALE = {"s": 1.0, "ms": 1e3, "µs": 1e6}


def print_table(title: str, peer: str, rows: Sequence[Row]) -> None:
    """A markdown table of ``rows``: both sides' wall and CPU times, the ratios, the target."""
    print(f"\n### {title}\n")
    print(f"| workload | jaxptx wall | {peer} wall | ratio | CPU ratio | target | met |")
    print("|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        k = SCALE[r.unit]
        peer_t = "skipped" if r.peer is None else f"{r.peer.wall * k:.4g} {r.unit}"
        ratio, cpu = r.ratio(), r.ratio("cpu")
        met = {None: "—", True: "**met**", False: "not met"}[r.met()]
        print(f"| {r.workload} | {r.ours.wall * k:.4g} {r.unit} | {peer_t} | "
              f"{'—' if ratio is None else f'{ratio:.3g}×'} | {'—' if cpu is None else f'{cpu:.3g}×'} | "
              f"{r.target_text()} | {met} |")


class Mismatch(AssertionError):
    """Two outputs of a comparison disagree."""


def check_close(name: str, got: Any, want: Any, tol: float) -> float:
    """max |got - want| / max(1, max |want|); raises :class:`Mismatch` over ``tol``."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise Mismatch(f"{name}: shape {got.shape}, expected {want.shape}")
    err = float(np.abs(got - want).max() / max(1.0, float(np.abs(want).max())))
    if not err <= tol:
        raise Mismatch(f"{name}: relative error {err:.3g} > {tol:g}")
    return err


def rng_array(shape: tuple[int, ...], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    """Standard-normal values of ``shape`` as ``dtype`` (a numpy dtype)."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)

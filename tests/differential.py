"""``pytest --sim-differential``: every emulator launch the suite makes runs
twice, on the general paths and then on the fast ones, and must give the
same bytes (issue 29: "a differential test runs every kernel the test suite
launches under the old and new paths").

:func:`install` wraps :meth:`jaxptx.sim.Device.launch` (which ``sim.launch``
and the JAX CPU path call): it copies the device's memory, runs the launch
inside :func:`jaxptx.sim.core.fastpaths.reference`, keeps what it wrote and
what it returned or raised, puts the memory back, runs the launch again as
usual and compares. A difference is a :class:`FastPathMismatch` naming the
kernel, the allocation and the first byte. Devices of a ``sim.System`` are
left alone: their launches write other devices' memory too.

It doubles the time of every launch, prints ``printf`` output twice and
lets an observer a test attaches itself hear both runs, so
it is a run of its own, not part of CI's line; ``tests/sim/test_fast_path_differential.py``
holds a chosen set of kernels to it in every run.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from jaxptx.sim.core import fastpaths
from jaxptx.sim.device import Device

__all__ = ["FastPathMismatch", "install", "differential_launch"]


class FastPathMismatch(AssertionError):
    """A launch gave different bytes, results or errors on the fast paths."""


def _outcome(device: Device, run: Any) -> tuple[Any, BaseException | None, list[np.ndarray]]:
    try:
        result, error = run(), None
    except Exception as e:                      # compared below, then re-raised from the fast run
        result, error = None, e
    return result, error, [b.copy() for b in device.buffers]


def _summary(result: Any) -> Any:
    """What of a launch's return value both runs must agree on."""
    if isinstance(result, list):
        return [getattr(f, "message", repr(f)) for f in result]
    return None if result is None else type(result).__name__


def differential_launch(run: Any, device: Device, /, *args: Any, **kwargs: Any) -> Any:
    """Run ``run(device, *args, **kwargs)`` on the general paths, then on
    the fast ones from the same memory; return (or raise) the fast run's
    outcome once both agree. (Positional-only: ``Device.launch`` has a
    ``launch=`` keyword.)"""
    if type(device) is not Device or not fastpaths.on():
        return run(device, *args, **kwargs)
    before = [b.copy() for b in device.buffers]
    with fastpaths.reference():
        ref = _outcome(device, lambda: run(device, *args, **kwargs))
    for buffer, saved in zip(device.buffers, before):
        buffer[...] = saved
    fast = _outcome(device, lambda: run(device, *args, **kwargs))
    name = kwargs.get("kernel") or (getattr(args[0], "name", None) if args else None) or "the kernel"
    (r_result, r_error, r_bytes), (f_result, f_error, f_bytes) = ref, fast
    if (r_error is None) != (f_error is None) or (r_error is not None and str(r_error) != str(f_error)):
        raise FastPathMismatch(f"{name}: the general paths gave {r_error!r}, the fast paths {f_error!r}")
    if _summary(r_result) != _summary(f_result):
        raise FastPathMismatch(f"{name}: the general paths returned {_summary(r_result)!r}, "
                               f"the fast paths {_summary(f_result)!r}")
    for slot, (a, b) in enumerate(zip(r_bytes, f_bytes)):
        if not np.array_equal(a, b):
            k = int(np.flatnonzero(a != b)[0])
            raise FastPathMismatch(f"{name}: allocation {slot} differs at byte {k}: general paths "
                                   f"{int(a[k]):#04x}, fast paths {int(b[k]):#04x}")
    if f_error is not None:
        raise f_error
    return f_result


def install() -> None:
    """Wrap :meth:`Device.launch` for the rest of the process."""
    launch = Device.launch
    if getattr(launch, "_differential", False):
        return

    @functools.wraps(launch)
    def wrapped(self: Device, *args: Any, **kwargs: Any) -> Any:
        return differential_launch(launch, self, *args, **kwargs)

    wrapped._differential = True             # type: ignore[attr-defined]
    Device.launch = wrapped                  # type: ignore[method-assign]

"""Output bytes a kernel never wrote: an error wherever a kernel runs.

On a GPU an output byte no thread writes holds whatever the memory held.
``jax.jit``'s CPU path (:mod:`jaxptx.jax._cpu`), ``sim.launch`` and
``jaxptx.profile`` check every output of a traced kernel after its launch
and raise :class:`UnwrittenOutputError`, naming the output and its first
unwritten index, with one message. A byte is unwritten when no store, bulk
or tensor copy or atomic of the launch reached it (the device records
them: :meth:`~.device.Device.written`) and it kept its value.

Padding a kernel leaves on purpose is declared with
:func:`jaxptx.jax.allow_unwritten` (``allow_unwritten=`` for ``sim.launch``
and ``jaxptx.profile``); an output that updates an input in place
(:func:`jaxptx.jax.in_place`) is not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..dsl import Kernel
from ..dsl.declarations import aliases_of, unwritten_mask
from .errors import SimError

__all__ = ["UnwrittenOutputError", "unwritten", "message", "exempt_outputs"]


class UnwrittenOutputError(SimError):
    """A kernel left bytes of an output unwritten (garbage on a GPU)."""


def unwritten(before: np.ndarray, after: np.ndarray, written: np.ndarray) -> np.ndarray:
    """Per byte of an output: whether the launch never wrote it.

    Args:
        before: the output's bytes (uint8) when the launch started.
        after: its bytes when the launch ended.
        written: per byte, whether a store, copy or atomic reached it
            (:meth:`Device.written`).
    """
    return ~written & (after == before)


def message(kernel: str, j: int, name: str | None, mask: np.ndarray, dtype: Any = None,
            shape: Sequence[int] | None = None) -> str:
    """``kernel K: output j 'y' (float32[200]) has 72 of 200 elements the
    kernel never wrote, the first at index (128,) ...``: the error for
    output ``j`` whose unwritten bytes are ``mask`` (dtype and shape, when
    known, give elements and an index; else bytes)."""
    first = int(np.flatnonzero(mask)[0])
    label = f"output {j}" + (f" {name!r}" if name else "")
    if dtype is not None and shape is not None:
        dtype, shape = np.dtype(dtype), tuple(int(d) for d in shape)
        element = first // dtype.itemsize
        index = f"index {tuple(int(i) for i in np.unravel_index(element, shape)) if shape else ()}"
        count = int(mask.reshape(-1, dtype.itemsize).any(axis=1).sum())
        what = f"{label} ({dtype}{list(shape)}) has {count} of {int(np.prod(shape))} elements"
    else:
        index = f"byte {first}"
        what = f"{label} has {int(mask.sum())} of {mask.size} bytes"
    return (f"kernel {kernel}: {what} the kernel never wrote, the first at {index} (garbage on a GPU): "
            "make the grid cover the whole output, or, if the kernel leaves padding on purpose, "
            "declare it with jaxptx.jax.allow_unwritten (sim.launch and jaxptx.profile: allow_unwritten=)")


def exempt_outputs(kernel: Kernel, allow: bool | Sequence[str] = False) -> set[int]:
    """The outputs of ``kernel`` not checked: those ``allow`` names (True:
    all), those declared with :func:`jaxptx.jax.allow_unwritten`, and those
    declared :func:`jaxptx.jax.in_place`.

    Raises:
        SimError: ``allow`` names something that is not an output.
    """
    n_in, n_out = len(kernel.in_specs), len(kernel.out_specs)
    names = list(kernel.tensors[n_in:n_in + n_out])
    if allow is True:
        return set(range(n_out))
    allowed = [allow] if isinstance(allow, str) else list(allow or ())
    for out in allowed:
        if out not in names:
            raise SimError(f"allow_unwritten: kernel {kernel.name} has no output {out!r} "
                           f"(outputs: {', '.join(names) or 'none'})")
    mask = unwritten_mask(kernel)
    return ({names.index(out) for out in allowed} | {j for j in range(n_out) if (mask >> j) & 1}
            | set(aliases_of(kernel).values()))

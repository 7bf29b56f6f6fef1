"""The CUDA handler's captures (``ffi/launch_capture.cc``): it reads a
launch's buffers back to the host and calls these with the bytes."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from .. import capture
from ..launch import TMA_RECORD
from ._cuda_calls import XLA_DTYPES

__all__ = ["wanted", "failed", "record_cuda"]

# XLA_FFI_DataType -> numpy dtype name.
_DTYPES = {code: name for name, code in XLA_DTYPES.items()}


def wanted(entry: str, nbytes: int) -> bool:
    """Whether to capture a launch of ``entry`` holding ``nbytes`` of memory."""
    return capture.directory() is not None and capture.fits(nbytes, entry)


def failed(entry: str, why: str) -> None:
    """A capture that could not be made: warn, the launch itself stands."""
    warnings.warn(f"jaxptx capture: kernel {entry}: not captured: {why}", capture.CaptureWarning,
                  stacklevel=2)


def record_cuda(kernel_id: int, ptx: bytes, entry: str, shape: tuple, n_in: int,
                buffer_of: Sequence[int], before: Sequence[bytes], after: Sequence[bytes],
                dtypes: Sequence[int], shapes: Sequence[Sequence[int]], scalars: Sequence[int],
                tma: Sequence[int]) -> None:
    """Write the capture of one CUDA launch (see ``launch_capture.h``):
    ``buffer_of[i]`` is the distinct buffer of pointer parameter i, whose
    dtype code and shape are ``dtypes[i]``, ``shapes[i]``; ``scalars`` the
    call's (bytes, bits) pairs."""
    if capture.directory() is None:
        return
    types = [(_DTYPES.get(int(d)), s) for d, s in zip(dtypes, shapes)]
    raw = [capture.scalar_bytes(n, bits) for n, bits in zip(scalars[::2], scalars[1::2])]
    capture.record_ffi("cuda", kernel_id, bytes(ptx).decode(), entry, shape, n_in, buffer_of,
                       before, after, types, raw, tma, len(tma) // TMA_RECORD)

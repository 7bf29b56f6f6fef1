"""The CUDA handler's captures (``ffi/launch_capture.cc``): it reads a
launch's buffers back to the host and calls these with the bytes."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from .. import capture

__all__ = ["wanted", "failed", "record_cuda"]

# XLA_FFI_DataType -> numpy dtype name (xla_data.proto's PrimitiveType).
_DTYPES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
           8: "uint32", 9: "uint64", 10: "float16", 11: "float32", 12: "float64", 16: "bfloat16",
           19: "float8_e5m2", 20: "float8_e4m3fn"}


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
    where = capture.directory()
    if where is None:
        return
    first = {b: i for i, b in reversed(list(enumerate(buffer_of)))}
    names = capture.buffer_names(n_in, buffer_of)
    buffers = tuple(capture.Buffer(names[b], bytes(before[b]), bytes(after[b]),
                                   _DTYPES.get(int(dtypes[first[b]])),
                                   tuple(int(d) for d in shapes[first[b]]))
                    for b in range(len(before)))
    raw = [(int(bits) & (2**64 - 1)).to_bytes(8, "little")[:int(nbytes)]
           for nbytes, bits in zip(scalars[::2], scalars[1::2])]
    from ..jax._tma import RECORD   # the tma attribute's record length (imports jax)

    grid, block, cluster, smem = shape
    n_maps = len(tma) // RECORD
    capture.record(capture.Capture(
        source="cuda", ptx=bytes(ptx).decode(), entry=entry, grid=tuple(grid), block=tuple(block),
        cluster=tuple(cluster), smem=int(smem), buffers=buffers,
        params=capture.ffi_params(len(buffer_of), buffer_of, raw, n_maps),
        tma=tuple(int(v) for v in tma), kernel_id=int(kernel_id), meta=capture.meta()), where)

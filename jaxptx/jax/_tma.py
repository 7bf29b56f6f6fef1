"""TMA descriptors in a custom call: the ``tma`` attribute.

A kernel's :class:`~jaxptx.dsl.TmaDescriptor` s are fixed at lowering but
for the address, which XLA gives only at run time. So the call carries each
one as a record of int64s, in the arguments of the CUDA driver's
``cuTensorMapEncodeTiled``; for each call the CUDA handler encodes the
records with the buffers' device addresses and passes the 128-byte maps by
value after the buffer pointers, and the CPU handler (:func:`sim_maps`) has
the emulator encode them with the addresses it gives the buffers.

One record, ``RECORD`` int64s (:data:`jaxptx.launch.TMA_RECORD`; the
per-dimension fields innermost first, the unused ones 0)::

    0       buffer index (inputs, then outputs)
    1       CUtensorMapDataType
    2       rank (1..5)
    3       CUtensorMapSwizzle (0 none, 1 32B, 2 64B, 3 128B)
    4..8    global dims (elements)
    9..12   global strides in bytes of dims 1..rank-1
    13..17  box dims
    18..22  element strides
    23      CUtensorMapInterleave (0)
    24      CUtensorMapL2promotion
    25      CUtensorMapFloatOOBfill (0: zeros)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import sim
from ..dsl import TmaDescriptor
from ..errors import SpecError
from ..isa.encodings import swizzle
from ..launch import TMA_RECORD as RECORD
from ..sim.memory.tensormap import maps_from_records
from ..types import TYPES

__all__ = ["RECORD", "records", "sim_maps"]

MAX_RANK = 5
# CU_TENSOR_MAP_L2_PROMOTION_L2_128B: fetch whole 128-byte lines into L2.
L2_PROMOTION_128B = 2
# CUtensorMapDataType: the float and signed types TMA knows by name; any
# other type copies as unsigned bits of its size.
_CU_DTYPE = {"s32": 3, "s64": 5, "f16": 6, "f32": 7, "f64": 8, "bf16": 9, "tf32": 11}
_CU_UNSIGNED = {1: 0, 2: 1, 4: 2, 8: 4}


def _padded(values: Sequence[int], width: int) -> list[int]:
    return [int(v) for v in values] + [0] * (width - len(values))


def record(d: TmaDescriptor) -> list[int]:
    """The ``RECORD`` int64s of one descriptor."""
    t = TYPES[d.dtype]
    dtype = _CU_DTYPE.get(d.dtype, _CU_UNSIGNED[t.bits // 8])
    rank = len(d.shape)
    return [d.tensor, dtype, rank, swizzle(d.swizzle).cu_tensor_map,
            *_padded(d.shape[::-1], MAX_RANK), *_padded(d.strides[::-1][1:], MAX_RANK - 1),
            *_padded(d.box[::-1], MAX_RANK), *_padded([1] * rank, MAX_RANK),
            0, L2_PROMOTION_128B, 0]


def records(descriptors: Sequence[TmaDescriptor], kernel: str,
            buffers: Sequence[tuple[tuple[int, ...], np.dtype]]) -> np.ndarray:
    """The ``tma`` attribute of a call: the records of ``descriptors``,
    each checked by encoding it as the emulator would (the driver's rules).

    Raises:
        SpecError: a descriptor the driver would refuse, or one whose shape
            does not cover its buffer.
    """
    out = []
    for d in descriptors:
        shape, dtype = buffers[d.tensor]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        covered = sum((n - 1) * stride for n, stride in zip(d.shape, d.strides)) + d.strides[-1]
        if covered > size:
            raise SpecError(f"kernel {kernel}: TMA descriptor {d.param} spans {covered} bytes "
                            f"but its buffer has {size}")
        rec = record(d)
        try:
            _sim_map(rec)
        except ValueError as e:
            raise SpecError(f"kernel {kernel}: TMA descriptor {d.param} (shape {d.shape}, box "
                            f"{d.box}, .{d.dtype}, swizzle {d.swizzle}): {e}") from None
        out.extend(rec)
    return np.array(out, np.int64)


def _sim_map(rec: Sequence[int]) -> sim.ArgTensorMap:
    return maps_from_records(rec)[0]


def sim_maps(tma: Sequence[int]) -> tuple[sim.ArgTensorMap, ...]:
    """The emulator's maps for a call's ``tma`` attribute
    (:func:`jaxptx.sim.memory.tensormap.maps_from_records`)."""
    return maps_from_records(tma)

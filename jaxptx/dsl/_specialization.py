"""What one trace of a kernel gives: :class:`Specialization`."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import ir, isa
from ..launch import Launch
from ._tma import TmaDescriptor

__all__ = ["Specialization"]


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One traced specialisation of a kernel.

    Attributes:
        module: the IR module; ``ptx`` its text.
        target, version: what it was traced for.
        launch: grid (resolved from the dims), block, cluster and dynamic
            shared memory, validated for ``target`` with the module's static
            shared memory (``grid``, ``block``, ``cluster`` and ``smem``
            read it).
        dims: the bound symbolic dims; template: the template values.
        tma: the TMA descriptors the runtime passes after the other
            parameters, in their order (see ``TensorArg.tma_desc``).
        multimem: the peer tensors whose multicast address the body takes
            (``x.multimem_ptr``), for a kernel with ``peers``.
    """

    module: ir.Module
    ptx: str
    target: isa.Target
    version: tuple[int, int]
    launch: Launch
    dims: tuple[tuple[str, int], ...]
    template: tuple[tuple[str, Any], ...]
    tma: tuple[TmaDescriptor, ...] = ()
    multimem: tuple[str, ...] = ()

    @property
    def grid(self) -> tuple[int, int, int]:
        """Blocks per grid (``launch.grid``)."""
        return self.launch.grid

    @property
    def block(self) -> tuple[int, int, int]:
        """Threads per block (``launch.block``)."""
        return self.launch.block

    @property
    def cluster(self) -> tuple[int, int, int]:
        """Blocks per cluster (``launch.cluster``)."""
        return self.launch.cluster

    @property
    def smem(self) -> int:
        """Dynamic shared memory bytes to launch with (``launch.smem``)."""
        return self.launch.smem

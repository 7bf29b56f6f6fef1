"""The argument markers of :func:`jaxptx.jax.ptx_call`: ``Output``, ``Scratch``, ``TensorMap``.

Plain values that say what a ``.param`` of a PTX entry receives when it is
not an input array or a number. Importing this module does not import jax.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from ..errors import SpecError
from ..isa.encodings import SWIZZLES as _ENCODED_SWIZZLES

__all__ = ["Output", "Scratch", "TensorMap", "SWIZZLES"]

# The shared-memory swizzle spans a tiled tensor map may have, in bytes
# (CUtensorMapSwizzle: none, 32B, 64B, 128B).
SWIZZLES = tuple(s.span for s in _ENCODED_SWIZZLES if s.atom == "16B")   # 0, 32, 64, 128 bytes


def _index(value: Any, what: str) -> int:
    try:
        index = operator.index(value)
    except TypeError:
        raise SpecError(f"{what}: expected an int, got {value!r}") from None
    return int(index)


@dataclasses.dataclass(frozen=True)
class Output:
    """Where output ``index`` of a :func:`~jaxptx.jax.ptx_call` goes in the entry's parameters.

    The parameter receives the output buffer's device pointer. ``index``
    counts the leaves of ``out_shape`` (``jax.tree.leaves`` order). When no
    argument is an ``Output``, the outputs' pointers follow all the
    arguments, in order.

    Attributes:
        index: the output's position among the leaves of ``out_shape``.

    Example:
        >>> Output(1)
        Output(index=1)
    """

    index: int

    def __post_init__(self) -> None:
        index = _index(self.index, "Output(index)")
        if index < 0:
            raise SpecError(f"Output(index): expected an output index >= 0, got {index}")
        object.__setattr__(self, "index", index)


@dataclasses.dataclass(frozen=True)
class Scratch:
    """A zero-filled global scratch buffer of ``nbytes`` bytes for one parameter.

    The parameter receives the buffer's device pointer. The buffer is a
    ``uint8`` output of the custom call that starts as zeros (an input of
    zeros aliased to it, on every platform) and that :func:`~jaxptx.jax.ptx_call`
    drops: the kernel may use it for partial results, counters or locks.
    Under ``jax.vmap`` each batch element has its own.

    Attributes:
        nbytes: the buffer's size in bytes (at least 1).

    Example:
        >>> Scratch(4096).nbytes
        4096
    """

    nbytes: int

    def __post_init__(self) -> None:
        nbytes = _index(self.nbytes, "Scratch(nbytes)")
        if nbytes < 1:
            raise SpecError(f"Scratch(nbytes): expected a byte count >= 1, got {nbytes}")
        object.__setattr__(self, "nbytes", nbytes)


@dataclasses.dataclass(frozen=True, eq=False)
class TensorMap:
    """A 128-byte ``CUtensorMap`` parameter, encoded for each call from a tensor's buffer.

    The map describes the whole tensor (its shape, dense row-major strides
    and element type) as a tiled TMA map: ``cuTensorMapEncodeTiled`` with
    the buffer's device address on a GPU, the emulator's encoding on the
    CPU. The parameter must be declared ``.param .align 64 .b8 name[128]``
    (passed by value, as ``const __grid_constant__ CUtensorMap`` and Triton
    declare it). The tensor's own pointer need not be another parameter.

    Attributes:
        tensor: an input array, or :class:`Output` ``(i)`` for a map of output i.
        box: the tile one copy moves, per dimension, outermost first (as the
            array's shape); each 1 to 256 elements.
        swizzle: the shared-memory swizzle span in bytes: 0 (none), 32, 64
            or 128; the box's innermost extent must fit in it.

    Example:
        >>> import numpy as np
        >>> TensorMap(np.zeros((64, 64), np.float16), box=(64, 64), swizzle=128).box
        (64, 64)
    """

    tensor: Any
    box: tuple[int, ...]
    swizzle: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.tensor, (Scratch, TensorMap)) or not (
                isinstance(self.tensor, Output) or hasattr(self.tensor, "shape")):
            raise SpecError(f"TensorMap: expected an input array or Output(i) as the tensor, "
                            f"got {type(self.tensor).__name__}")
        try:
            box = tuple(_index(b, "TensorMap(box)") for b in self.box)
        except TypeError:
            raise SpecError(f"TensorMap(box): expected a tuple of ints, got {self.box!r}") from None
        if not box:
            raise SpecError("TensorMap(box): expected one extent per tensor dimension, got ()")
        swizzle = _index(self.swizzle, "TensorMap(swizzle)")
        if swizzle not in SWIZZLES:
            raise SpecError(f"TensorMap(swizzle): expected a span in bytes, one of "
                            f"{', '.join(map(str, SWIZZLES))}, got {swizzle}")
        object.__setattr__(self, "box", box)
        object.__setattr__(self, "swizzle", swizzle)

    def __repr__(self) -> str:
        tensor = self.tensor if isinstance(self.tensor, Output) else \
            f"{getattr(self.tensor, 'dtype', '?')}{list(getattr(self.tensor, 'shape', ()))}"
        return f"TensorMap({tensor}, box={self.box}, swizzle={self.swizzle})"

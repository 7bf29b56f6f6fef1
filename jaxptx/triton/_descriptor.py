"""``TensorDescriptor`` (a host-side TMA descriptor argument) and ``strides_from_shape``.

As in jax-triton 0.4: a frozen dataclass, registered as a pytree whose only
leaf is ``base``, so it passes through ``jax.jit`` and ``jax.vmap``. A
kernel parameter receiving one has the type ``tensordesc<fp16[64,64]>``.

Triton passes it two ways, by the kernel's TMA metadata. With TMA (sm_90
and later) the kernel takes a 128-byte ``CUtensorMap`` by value, then the
shape (``i32`` each) and the strides (``i64`` each): the map is a
:class:`jaxptx.jax.TensorMap` of ``base`` with the block as its box and
Triton's swizzle. Without (sm_80), it takes the base pointer, the shape and
strides (``i64``), the padding and tf32 flags, then the shape and strides
again. :func:`expand` gives what fills those parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import SpecError
from ..isa.encodings import SWIZZLES
from ..jax import TensorMap
from ._specialize import TRITON_TYPES

__all__ = ["TensorDescriptor", "strides_from_shape", "descriptor_type", "expand"]

# Triton's TMA metadata names the swizzle as CUtensorMapSwizzle (0 none,
# 1 32B, 2 64B, 3 128B); TensorMap takes the span in bytes.
_SWIZZLE_BYTES = {s.cu_tensor_map: s.span for s in SWIZZLES if s.atom == "16B"}   # CUtensorMapSwizzle -> bytes


def strides_from_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The element strides of a dense row-major array of ``shape``.

    Args:
        shape: the array's shape.

    Returns:
        One stride per dimension, in elements; the last is 1.

    Example:
        >>> strides_from_shape((4, 8, 16))
        (128, 16, 1)
    """
    size = math.prod(shape)
    strides = []
    for extent in shape:
        size //= extent if extent else 1
        strides.append(size)
    return tuple(strides)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TensorDescriptor:
    """A host-side TMA tensor descriptor for a kernel parameter (jax-triton's ``TensorDescriptor``).

    Attributes:
        base: the array the descriptor reads or writes.
        shape: the tensor's shape (``base``'s, for the TMA form).
        strides: its element strides (``base``'s dense row-major ones).
        block_shape: the block one ``desc.load``/``desc.store`` moves.
        layout: Gluon's shared-memory layout (not supported: must be None).
        padding: what out-of-bounds reads give: ``"zero"`` (``"nan"`` is
            refused on the TMA form, which TensorMap cannot express).
        round_f32_to_tf32: round f32 to tf32 on load (refused on the TMA form).

    Example:
        >>> import numpy as np
        >>> d = TensorDescriptor.from_array(np.zeros((64, 32), np.float16), (16, 32))
        >>> d.strides, d.block_shape
        ((32, 1), (16, 32))
    """

    base: Any
    shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    strides: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    block_shape: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    layout: Any = dataclasses.field(default=None, metadata=dict(static=True))
    padding: str = dataclasses.field(default="zero", metadata=dict(static=True))
    round_f32_to_tf32: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self) -> None:
        if self.padding not in ("zero", "nan"):
            raise SpecError(f"TensorDescriptor: padding: expected 'zero' or 'nan', got "
                            f"{self.padding!r}")
        if not len(self.shape) == len(self.strides) == len(self.block_shape):
            raise SpecError(f"TensorDescriptor: expected shape, strides and block_shape of one "
                            f"length, got {len(self.shape)}, {len(self.strides)} and "
                            f"{len(self.block_shape)}")

    @classmethod
    def from_array(cls, array: Any, block_shape: Sequence[int], layout: Any = None,
                   padding: str = "zero", round_f32_to_tf32: bool = False) -> TensorDescriptor:
        """A descriptor of all of ``array`` (its shape, dense row-major strides).

        Args:
            array: the tensor.
            block_shape: the block one access moves, per dimension.
            layout, padding, round_f32_to_tf32: see the class.

        Returns:
            The descriptor.
        """
        shape = tuple(int(d) for d in array.shape)
        return cls(array, shape, strides_from_shape(shape), tuple(int(b) for b in block_shape),
                   layout, padding, round_f32_to_tf32)


def descriptor_type(desc: TensorDescriptor, where: str) -> str:
    """Triton's type of a descriptor argument: ``tensordesc<fp16[64,64]>``.

    Raises:
        SpecError: a Gluon layout, or a dtype Triton has no type for.
    """
    if desc.layout is not None:
        raise SpecError(f"{where}: TensorDescriptor(layout=...): Gluon shared-memory layouts are "
                        f"not supported by jaxptx.triton; expected layout=None")
    name = np.dtype(desc.base.dtype).name
    if name not in TRITON_TYPES:
        raise SpecError(f"{where}: TensorDescriptor of {name}: expected a type Triton knows")
    return f"tensordesc<{TRITON_TYPES[name]}[{','.join(map(str, desc.block_shape))}]>"


def expand(desc: TensorDescriptor, meta: Mapping[str, Any] | None, where: str) -> list[Any]:
    """What fills the kernel parameters of one descriptor (see the module doc).

    Args:
        desc: the descriptor.
        meta: Triton's TMA metadata for it, or None when the kernel has none.
        where: the call and parameter, for messages.

    Raises:
        SpecError: what a TensorMap cannot describe: a shape or strides other
            than ``base``'s dense row-major ones, ``padding="nan"``,
            ``round_f32_to_tf32``, an im2col or fp4-padded descriptor.
    """
    shape = [np.int32(d) for d in desc.shape]
    strides = [np.int64(s) for s in desc.strides]
    if meta is None:
        flags = [np.uint8(desc.padding == "nan"), np.uint8(desc.round_f32_to_tf32)]
        return [desc.base, *map(np.int64, desc.shape), *strides, *flags, *shape, *strides]
    base_shape = tuple(int(d) for d in desc.base.shape)
    if desc.shape != base_shape or desc.strides != strides_from_shape(base_shape):
        raise SpecError(f"{where}: TensorDescriptor shape {desc.shape} strides {desc.strides}: "
                        f"a TMA descriptor here describes its whole base array, expected shape "
                        f"{base_shape} and strides {strides_from_shape(base_shape)} "
                        f"(TensorDescriptor.from_array)")
    for flag, why in ((desc.padding == "nan", 'padding="nan"'),
                      (desc.round_f32_to_tf32, "round_f32_to_tf32=True"),
                      (meta.get("is_im2col", False), "an im2col descriptor"),
                      (meta.get("fp4_padded", False), "an fp4-padded descriptor")):
        if flag:
            raise SpecError(f"{where}: TensorDescriptor with {why} is not supported by "
                            f"jaxptx.triton (jaxptx.jax.TensorMap encodes tiled maps with "
                            f"zero fill only)")
    box = tuple(int(b) for b in meta.get("block_size", desc.block_shape))
    swizzle = _SWIZZLE_BYTES.get(int(meta.get("swizzle", 0)), 0)
    return [TensorMap(desc.base, box=box, swizzle=swizzle), *shape, *strides]

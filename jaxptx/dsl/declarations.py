"""What a kernel declares about its buffers, beside its specs: outputs that
update an input in place, and outputs it may leave partly unwritten.

Both are decorators applied to a kernel where it is defined (before its
first call: a compiled function keeps what was declared when it lowered).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ._kernel import Kernel
from ..errors import SpecError

__all__ = ["in_place", "allow_unwritten", "aliases_of", "unwritten_mask"]

_IN_PLACE: weakref.WeakKeyDictionary[Kernel, dict[str, str]] = weakref.WeakKeyDictionary()
_UNWRITTEN: weakref.WeakKeyDictionary[Kernel, frozenset[str]] = weakref.WeakKeyDictionary()


def _names(kernel: Kernel) -> tuple[list[str], list[str]]:
    n_in = len(kernel.in_specs)
    return list(kernel._tensors[:n_in]), list(kernel._tensors[n_in:n_in + len(kernel.out_specs)])


def _check_kernel(kernel: object, what: str) -> Kernel:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{what}: expected a jaxptx kernel (decorate the @kernel), "
                        f"got {type(kernel).__name__}")
    return kernel


def in_place(**outputs: str) -> Callable[[Kernel], Kernel]:
    """Declare outputs that are inputs updated in place: ``output=input``.

    The output's buffer is the input's (``input_output_aliases`` of the
    custom call): the kernel reads and writes one buffer through either
    pointer. JAX stays functional: the input array is unchanged unless it
    is donated (``jax.jit(..., donate_argnums=...)``), when no copy is made.
    Each pair must have the same shape and dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxptx import Tile, kernel, ptx
        >>> from jaxptx.types import f32
        >>> @in_place(y="x")
        ... @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        ...         grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1))
        ... def add_one(x, y):
        ...     off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
        ...     v = ptx.ld.global_.f32(y.ptr + off)
        ...     ptx.st.global_.f32(y.ptr + off, v + 1.0)
        >>> add_one(jnp.zeros(32, jnp.float32))[:3]
        Array([1., 1., 1.], dtype=float32)
    """
    def declare(kernel: Kernel) -> Kernel:
        kernel = _check_kernel(kernel, "in_place")
        ins, outs = _names(kernel)
        for out, inp in outputs.items():
            if out not in outs:
                raise SpecError(f"in_place: kernel {kernel.name} has no output {out!r} "
                                f"(outputs: {', '.join(outs) or 'none'})")
            if inp not in ins:
                raise SpecError(f"in_place: {out}={inp!r}: kernel {kernel.name} has no input "
                                f"{inp!r} (inputs: {', '.join(ins) or 'none'})")
        if len(set(outputs.values())) != len(outputs):
            raise SpecError(f"in_place: kernel {kernel.name}: each input may back one output, "
                            f"got {outputs}")
        _IN_PLACE[kernel] = dict(outputs)
        return kernel
    return declare


def allow_unwritten(*outputs: str) -> Callable[[Kernel], Kernel]:
    """Declare outputs the kernel may leave partly unwritten (padding).

    On the CPU every other output is checked after each launch: bytes the
    kernel never wrote are an error naming the output and the first
    unwritten index (on a GPU they would hold whatever the memory held).
    Declared outputs are not checked; on the CPU their unwritten bytes are
    zero, on a GPU they are undefined. With no names, every output.

    Example:
        >>> from jaxptx import Tile, kernel, ptx
        >>> from jaxptx.types import f32
        >>> @allow_unwritten("y")
        ... @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        ...         grid=(1, 1, 1), block=(32, 1, 1))
        ... def first_32(x, y):
        ...     off = ptx.mul.wide.u32(ptx.special.tid.x(), 4)
        ...     ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off))
        >>> import numpy as np
        >>> first_32(np.ones(40, np.float32))[30:34]
        Array([1., 1., 0., 0.], dtype=float32)
    """
    def declare(kernel: Kernel) -> Kernel:
        kernel = _check_kernel(kernel, "allow_unwritten")
        _, outs = _names(kernel)
        for out in outputs:
            if out not in outs:
                raise SpecError(f"allow_unwritten: kernel {kernel.name} has no output {out!r} "
                                f"(outputs: {', '.join(outs) or 'none'})")
        _UNWRITTEN[kernel] = frozenset(outputs or outs)
        return kernel
    return declare


def aliases_of(kernel: Kernel) -> dict[int, int]:
    """``{input index: output index}`` of the kernel's in-place outputs."""
    ins, outs = _names(kernel)
    return {ins.index(i): outs.index(o) for o, i in _IN_PLACE.get(kernel, {}).items()}


def unwritten_mask(kernel: Kernel) -> int:
    """Bit j set: output j may keep unwritten bytes."""
    _, outs = _names(kernel)
    allowed = _UNWRITTEN.get(kernel, frozenset())
    # An int64 attribute holds bits 0..62: outputs past them are always checked.
    return sum(1 << j for j, name in enumerate(outs[:63]) if name in allowed)

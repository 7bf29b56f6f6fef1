"""The ``reg`` namespace: allocate registers.

Example:
    >>> from jaxptx import kernel, reg, ptx
    >>> from jaxptx.types import f32, u32
    >>> @kernel(arch="sm_80")
    ... def k():
    ...     tid = reg.from_(ptx.special.tid.x(), u32)
    ...     acc = reg.scalar(f32, init=0.0)
    ...     frag = reg.array(f32, 4)
    ...     ptx.ret()
    >>> ".reg .f32 %f<6>;" in k.ptx()
    True
"""

from __future__ import annotations

from typing import Any

from ..errors import TraceError
from ..types import PtxType, from_dtype
from ..types import pred as PRED
from ._core import NegPred, Reg, RegArray, emit_instruction
from ._trace import current

__all__ = ["Reg", "RegArray", "NegPred", "scalar", "array", "from_", "pred"]


def _type(dtype: Any, what: str) -> PtxType:
    try:
        return from_dtype(dtype)
    except TypeError:
        raise TraceError(f"{what}: expected a PTX type such as jaxptx.types.f32, got {dtype!r}") from None


def scalar(dtype: Any, init: Any = None, *, name: str | None = None) -> Reg:
    """A new register of ``dtype``; ``init`` (register or number) is moved in.

    Args:
        dtype: its PTX type.
        init: optional initial value (emits one ``mov``).
        name: optional register name (``%name``) instead of a numbered one.
    """
    t = _type(dtype, "reg.scalar dtype")
    r = Reg(current().new_register(t, name)[0], t)
    if init is not None:
        r.set(init)
    return r


def array(dtype: Any, count: int, *, name: str | None = None) -> RegArray:
    """``count`` registers of ``dtype`` (declared as one ``%name<count>`` range
    when named)."""
    t = _type(dtype, "reg.array dtype")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise TraceError(f"reg.array count: expected a positive int, got {count!r}")
    names = current().new_register(t, name, count)
    return RegArray([Reg(n, t) for n in names])


def from_(src: Any, dtype: Any) -> Reg:
    """A new register of ``dtype`` holding ``src`` (one ``mov``)."""
    t = _type(dtype, "reg.from_ dtype")
    return emit_instruction("mov", (t.name,), (src,))


def pred(init: Any = None, *, name: str | None = None) -> Reg:
    """A new predicate register."""
    return scalar(PRED, init, name=name)

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

from .. import ir
from ..errors import TraceError
from ..types import PtxType, from_dtype
from ..types import pred as PRED
from ._core import Reg, emit_instruction
from ._trace import current
from ._values import NegPred, RegArray

__all__ = ["Reg", "RegArray", "NegPred", "scalar", "array", "from_", "pred", "declare"]


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
    trace = current()
    r = Reg(trace.new_register(t, name)[0], t, trace.scope)
    if init is not None:
        r.set(init)
    return r


def array(dtype: Any, count: int, *, name: str | None = None) -> RegArray:
    """``count`` registers of ``dtype`` (declared as one ``%name<count>`` range
    when named)."""
    t = _type(dtype, "reg.array dtype")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise TraceError(f"reg.array count: expected a positive int, got {count!r}")
    trace = current()
    return RegArray([Reg(n, t, trace.scope) for n in trace.new_register(t, name, count)])


def from_(src: Any, dtype: Any) -> Reg:
    """A new register of ``dtype`` holding ``src`` (one ``mov``)."""
    t = _type(dtype, "reg.from_ dtype")
    return emit_instruction("mov", (t.name,), (src,))


def declare(dtype: Any, *names: str | tuple[str, int], vector: int | None = None) -> Any:
    """Declare registers exactly as PTX writes them, here in the body.

    ``reg.declare(b32, ("%r", 5), "%x")`` emits ``.reg .b32 %r<5>, %x;`` and
    returns ``[RegArray(%r0..%r4), Reg(%x)]`` (one value for one name).
    Numbered registers of a declared prefix are then ``r[3]``.
    """
    t = _type(dtype, "reg.declare dtype")
    if not names:
        raise TraceError("reg.declare: expected at least one register name")
    decl_names = tuple(ir.RegName(n, None) if isinstance(n, str) else ir.RegName(n[0], n[1])
                       for n in names)
    trace = current()
    trace.declare_registers(ir.RegDecl(t.name, decl_names, vector), t)
    out: list[Any] = []
    for n in decl_names:
        if n.count is None:
            out.append(Reg(n.name, t, trace.scope))
        else:
            out.append(RegArray([Reg(f"{n.name}{i}", t, trace.scope) for i in range(n.count)]))
    return out[0] if len(out) == 1 else out


def pred(init: Any = None, *, name: str | None = None) -> Reg:
    """A new predicate register."""
    return scalar(PRED, init, name=name)

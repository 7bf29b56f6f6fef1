"""``pyptx.reg``: register allocation, on jaxptx's ``reg`` namespace.

Registers come back as :class:`jaxptx.pyptx.reg.Reg` (a jaxptx register
with pyptx's operator rules, see :mod:`jaxptx.pyptx._regs`). Names: pyptx
lets ``name=`` spell any register (``"%r"``); jaxptx keeps its own
numbered classes (``%r1``...), so a name that would collide with them is
given a fresh numbered register instead (the PTX is the same program).
"""

from __future__ import annotations

from typing import Any

from ..dsl import reg as _reg
from ..errors import TraceError
from ..types import PtxType
from ..types import pred as _PRED
from ._regs import NegPred, PipeRef, PRegArray, Reg, adopt

__all__ = ["Reg", "RegArray", "NegPred", "PipeRef", "scalar", "array", "from_", "wgmma_frag", "alloc",
           "alloc_array", "pred"]

RegArray = PRegArray


def _name(name: str | None) -> str | None:
    return None if name is None else name.lstrip("%")


def scalar(dtype: PtxType, init: Any = None, name: str | None = None) -> Reg:
    """A new register of ``dtype``; ``init`` (a number or register) is moved in.

    Python floats for float types become PTX's exact hex immediates.
    """
    try:
        return adopt(_reg.scalar(dtype, init, name=_name(name)))
    except TraceError:
        if name is None:
            raise
        return adopt(_reg.scalar(dtype, init))


def array(dtype: PtxType, count: int, name: str | None = None) -> PRegArray:
    """``count`` registers of ``dtype`` (``arr[i]`` is one ``Reg``)."""
    try:
        return adopt(_reg.array(dtype, count, name=_name(name)))
    except TraceError:
        if name is None:
            raise
        return adopt(_reg.array(dtype, count))


def from_(src: Any, dtype: PtxType) -> Reg:
    """A new register of ``dtype`` holding ``src`` (a register, number, or
    symbol name such as a shared array's): one ``mov``."""
    return adopt(_reg.from_(src, dtype))


def wgmma_frag(*, m: int, n: int, dtype: PtxType, name: str | None = None) -> PRegArray:
    """The ``m * n / 128`` accumulator registers of a dense wgmma ``m x n`` tile.

    Raises:
        ValueError: ``m * n`` is not a positive multiple of 128.
    """
    count = (m * n) // 128
    if count <= 0 or (m * n) % 128:
        raise ValueError(f"wgmma_frag: m*n must be a positive multiple of 128, got m={m} n={n}")
    return array(dtype, count, name=name)


def alloc(dtype: PtxType) -> Reg:
    """A new register of ``dtype`` (no initial value)."""
    return scalar(dtype)


def alloc_array(dtype: PtxType, count: int) -> PRegArray:
    """``count`` new registers of ``dtype``."""
    return array(dtype, count)


def pred(init: Any = None) -> Reg:
    """A new predicate register."""
    return scalar(_PRED, init)

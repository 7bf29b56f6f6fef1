"""``ptx.special``: special registers read into fresh registers.

``ptx.special.tid.x()`` emits ``mov.u32 %r1, %tid.x;`` and returns ``%r1``;
``ptx.special.laneid()`` does the same for a scalar special register. The
names and types come from ``isa.SPECIAL_REGS``.
"""

from __future__ import annotations

from .. import isa
from ..errors import PtxError
from ..types import TYPES
from ._core import Reg, emit_instruction
from ._trace import current, user_location, with_location

__all__ = ["special"]


class _SpecialReg:
    __slots__ = ("_reg",)

    def __init__(self, reg: isa.SpecialReg) -> None:
        self._reg = reg

    def _read(self, component: str | None) -> Reg:
        name = f"%{self._reg.name}" + (f".{component}" if component else "")
        trace = current()
        try:
            self._reg.requires.check(name, trace.target, trace.version)
        except PtxError as e:
            raise with_location(e, user_location()) from None
        return emit_instruction("mov", (self._reg.type,), (name,))

    def __call__(self) -> Reg:
        if self._reg.components:
            raise AttributeError(
                f"%{self._reg.name} has components {', '.join(self._reg.components)}; "
                f"use ptx.special.{self._reg.name}.x()")
        return self._read(None)

    def __getattr__(self, component: str) -> "_Component":
        if component not in self._reg.components:
            raise AttributeError(
                f"%{self._reg.name} has no component {component!r}; "
                f"expected one of {self._reg.components or '(none: call it directly)'}")
        return _Component(self, component)

    @property
    def type(self):
        """The register's PTX type."""
        return TYPES[self._reg.type]


class _Component:
    __slots__ = ("_reg", "_component")

    def __init__(self, reg: _SpecialReg, component: str) -> None:
        self._reg = reg
        self._component = component

    def __call__(self) -> Reg:
        return self._reg._read(self._component)


class _Special:
    """Namespace of special registers (``tid``, ``ctaid``, ``laneid``...)."""

    def __getattr__(self, name: str) -> _SpecialReg:
        reg = isa.SPECIAL_REGS.get(name)
        if reg is None:
            raise AttributeError(
                f"no special register %{name}; expected one of {', '.join(isa.SPECIAL_REGS)}")
        return _SpecialReg(reg)

    def __dir__(self) -> list[str]:
        return list(isa.SPECIAL_REGS)


special = _Special()

"""The operand values a kernel body passes besides registers: negated
predicates (``~p``), register arrays, addresses, labels and the sink ``_``.

:mod:`._core` turns each into its IR operand (``to_operand``); they emit
nothing themselves, except :meth:`Label.place`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .. import ir
from ..errors import PtxTypeError, TraceError
from ..types import PtxType
from ._trace import current, user_location, with_location

if TYPE_CHECKING:   # annotations only: _core builds on these values
    from ._core import Reg

__all__ = ["NegPred", "RegisterIndexError", "RegArray", "Addr", "Label", "SINK"]


class NegPred:
    """A negated predicate ``!p``: a guard (``pred=~p``) or a ``!``-operand."""

    __slots__ = ("reg",)

    def __init__(self, reg: Reg) -> None:
        self.reg = reg

    def __invert__(self) -> Reg:
        return self.reg

    def __repr__(self) -> str:
        return f"NegPred({self.reg.name})"


class RegisterIndexError(TraceError, IndexError):
    """An index outside a register array (an ``IndexError`` too, so a
    ``for`` over the array and ``except IndexError`` work as for a list)."""


class RegArray(Sequence["Reg"]):
    """A fixed-size array of registers of one type (``reg.array(f32, 32)``)."""

    def __init__(self, regs: list[Reg]) -> None:
        self._regs = regs

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return RegArray(self._regs[i])
        return self._regs[self._index(i)]

    def _index(self, i: Any) -> int:
        """``i`` as a position, or a clear error: a register array is indexed
        at trace time by Python ints, ``-len <= i < len``."""
        try:
            k = operator.index(i) if not isinstance(i, bool) else None
        except TypeError:
            k = None
        if k is None:
            raise with_location(PtxTypeError(
                f"register array {self._describe()}: expected an int index, got {i!r} "
                f"({type(i).__name__}); registers are indexed at trace time (PTX has no runtime "
                "index into registers: use shared or local memory for that)"), user_location())
        n = len(self._regs)
        if not -n <= k < n:
            raise with_location(RegisterIndexError(
                f"register array {self._describe()}: index {k} is out of range; it has {n} "
                f"register(s), indices 0..{n - 1} (or -{n}..-1)"), user_location())
        return k

    def _describe(self) -> str:
        """``%f3..%f6 (4 x .f32)``: the array's registers and type."""
        if not self._regs:
            return "(empty)"
        names = self._regs[0].name if len(self._regs) == 1 else f"{self._regs[0].name}..{self._regs[-1].name}"
        return f"{names} ({len(self._regs)} x .{self.type.name})"

    def __setitem__(self, i: int, value: Any) -> None:
        # `frag[i] += x` updates frag[i] in place, then assigns it back: allow
        # exactly that; anything else would silently rebind a Python name.
        if value is not self._regs[self._index(i)]:
            raise with_location(TraceError(
                f"register array element {i}: assigning {value!r} would replace the register, "
                f"not write it; use arr[{i}].set(value) to move a value into it"), user_location())

    def __len__(self) -> int:
        return len(self._regs)

    def __iter__(self) -> Iterator[Reg]:
        return iter(self._regs)

    @property
    def type(self) -> PtxType:
        """The element type."""
        return self._regs[0].type

    def __repr__(self) -> str:
        return f"RegArray({len(self)} x .{self.type.name})"


class Addr:
    """A memory operand: ``[base+offset]``; base is a register, symbol name or
    ``None``; ``coords`` makes a tensor address ``[tmap, {c0, c1}]``."""

    __slots__ = ("base", "offset", "coords", "minus")

    def __init__(self, base: Reg | str | None, offset: "int | ir.Immediate | None" = None,
                 coords: tuple[Any, ...] = (), minus: bool = False) -> None:
        self.base = base
        self.offset = offset
        self.coords = coords
        self.minus = minus

    def __add__(self, offset: int) -> "Addr":
        return Addr(self.base, (self.offset or 0) + offset, self.coords)

    def __repr__(self) -> str:
        return f"Addr({self.base!r}, {self.offset})"


class Label:
    """A branch target created by ``ptx.label()``; place it with ``.place()``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def place(self) -> "Label":
        """Emit ``name:`` at the current point."""
        current().append(ir.Label(self.name))
        return self

    def __repr__(self) -> str:
        return f"Label({self.name})"


class _SinkType:
    """The type of :data:`SINK`."""

    def __repr__(self) -> str:
        return "SINK"


#: The sink destination ``_`` (a result that is not kept).
SINK = _SinkType()

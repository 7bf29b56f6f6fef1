"""pyptx's register arithmetic on top of jaxptx registers.

:class:`Reg` is a jaxptx :class:`~jaxptx.dsl.Reg` whose integer
operators follow what pyptx 0.1.1 *emits* (one or two instructions each,
all through :func:`jaxptx.dsl.emit_instruction`, so the table
validates them):

* 64-bit left operand (a pointer): ``p + x`` / ``p - x`` / ``p * x`` /
  ``& | ^`` are written ``add.s64`` / ``sub.s64`` / ``mul.lo.u64`` /
  ``and.b64``...; a 32-bit register on the right is first zero-extended
  with ``cvt.u64.u32`` (pyptx widens with ``cvt.u64.u32`` even for
  ``s32``, so a negative ``s32`` offset is *not* sign-extended: we do the
  same and document it).
* 32-bit left with a 64-bit register right: the left is widened, then
  ``add.s64``.
* 32-bit ``x * int`` is ``mul.lo.s32``; ``x * reg`` is ``mul.lo.u32``;
  ``-`` is ``sub.s32``; ``>>`` is always the logical ``shr.u32`` /
  ``shr.u64``; ``<<`` is ``shl.b32`` / ``shl.b64``.
* ``max`` is ``max.u32`` (``max.s32`` for ``s32``).

Float and 16-bit registers keep jaxptx's operators (pyptx refuses them;
here they are a superset). jaxptx's own ``Reg`` never widens: this is
the pyptx surface only. :func:`adopt` switches a jaxptx register handed
to pyptx code to this class in place (same slots), so every register a
pyptx kernel sees has these rules.
"""

from __future__ import annotations

from typing import Any

from ..dsl import NegPred, RegArray, emit_instruction, new_reg
from ..dsl import Reg as _CoreReg
from ..errors import TraceError
from ..types import PtxType, u64

__all__ = ["Reg", "RegArray", "NegPred", "adopt", "PRegArray", "PipeRef"]


def _bits(r: Any) -> int | None:
    """32 or 64 for an integer/bit register, else None."""
    if isinstance(r, _CoreReg) and r.type.kind in "bus" and r.type.bits in (32, 64):
        return r.type.bits
    return None


def _widen(value: Any) -> Any:
    """A right operand for a 64-bit instruction: 32-bit registers are
    zero-extended (``cvt.u64.u32``), as pyptx does."""
    if isinstance(value, _CoreReg) and _bits(value) == 32:
        return adopt(emit_instruction("cvt", ("u64", "u32"), (new_reg(u64), value)))
    return value


class PipeRef(tuple):
    """The two-destination operand ``left|right`` (``setp ... p|q``,
    ``elect.sync r|p``): what ``p | q`` gives when either side is a
    predicate register. A 2-tuple, which jaxptx's table takes as a pair."""

    __slots__ = ()

    def __new__(cls, left: Any, right: Any) -> "PipeRef":
        return super().__new__(cls, (left, right))

    @property
    def left(self) -> Any:
        """The first destination."""
        return self[0]

    @property
    def right(self) -> Any:
        """The second destination (the predicate)."""
        return self[1]

    def __repr__(self) -> str:
        return f"PipeRef({self[0]!r} | {self[1]!r})"


# jaxptx's operator for an opcode pyptx has no rule for: (plain, in place).
_OPERATORS = {"shl": ("__lshift__", "__ilshift__"), "shr": ("__rshift__", "__irshift__"),
              "and": ("__and__", "__iand__"), "or": ("__or__", "__ior__"),
              "xor": ("__xor__", "__ixor__")}


def _is_pred(value: Any) -> bool:
    return isinstance(value, _CoreReg) and value.type.kind == "pred"


class Reg(_CoreReg):
    """A register with pyptx's operator semantics (see the module docstring).

    ``dtype`` is pyptx's name for the register's type.
    """

    __slots__ = ()

    @property
    def dtype(self) -> PtxType:
        """The register's PTX type (pyptx spelling of ``type``)."""
        return self.type

    def _int(self, opcode: str, other: Any, dst: "Reg | None", mods32: tuple[str, ...],
             mods64: tuple[str, ...], widen_left: bool = True) -> "Reg | None":
        """Emit one pyptx-style integer op; None when pyptx has no rule for it."""
        bits = _bits(self)
        if bits == 64:
            out = dst if dst is not None else new_reg(self.type)
            emit_instruction(opcode, mods64, (out, self, _widen(other)))
            return adopt(out)
        if bits == 32:
            if widen_left and _bits(other) == 64 and dst is None:
                wide = _widen(self)
                out = new_reg(u64)
                emit_instruction(opcode, mods64, (out, wide, other))
                return adopt(out)
            out = dst if dst is not None else new_reg(self.type)
            emit_instruction(opcode, mods32, (out, self, other))
            return adopt(out)
        return None

    def _add(self, o: Any, dst: "Reg | None" = None) -> Any:
        signed = "s32" if self.type.name == "s32" else "u32"
        r = self._int("add", o, dst, (signed,), ("s64",))
        if r is not None:
            return r
        return adopt(super().__iadd__(o) if dst is not None else super().__add__(o))

    def __add__(self, o: Any) -> Any: return self._add(o)
    def __radd__(self, o: Any) -> Any: return self._add(o)
    def __iadd__(self, o: Any) -> Any: return self._add(o, self)

    def _sub(self, o: Any, dst: "Reg | None" = None) -> Any:
        r = self._int("sub", o, dst, ("s32",), ("s64",), widen_left=False)
        if r is not None:
            return r
        return adopt(super().__isub__(o) if dst is not None else super().__sub__(o))

    def __sub__(self, o: Any) -> Any: return self._sub(o)
    def __isub__(self, o: Any) -> Any: return self._sub(o, self)

    def _mul(self, o: Any, dst: "Reg | None" = None) -> Any:
        kind = ("lo", "s32") if isinstance(o, int) else ("lo", "u32")
        r = self._int("mul", o, dst, kind, ("lo", "u64"), widen_left=False)
        if r is not None:
            return r
        return adopt(super().__imul__(o) if dst is not None else super().__mul__(o))

    def __mul__(self, o: Any) -> Any: return self._mul(o)
    def __rmul__(self, o: Any) -> Any: return self._mul(o)
    def __imul__(self, o: Any) -> Any: return self._mul(o, self)

    def _shift_by(self, amount: Any, opcode: str, dst: Any = None) -> Any:
        bits = _bits(self)
        if bits is None:   # jaxptx's operator (``<<``, ``>>=``...)
            return adopt(getattr(super(), _OPERATORS[opcode][dst is not None])(amount))
        ty = f"b{bits}" if opcode == "shl" else f"u{bits}"
        out = dst if dst is not None else new_reg(self.type)
        emit_instruction(opcode, (ty,), (out, self, amount))
        return adopt(out)

    def __lshift__(self, o: Any) -> Any: return self._shift_by(o, "shl")
    def __rshift__(self, o: Any) -> Any: return self._shift_by(o, "shr")
    def __ilshift__(self, o: Any) -> Any: return self._shift_by(o, "shl", self)
    def __irshift__(self, o: Any) -> Any: return self._shift_by(o, "shr", self)

    def _bitop(self, opcode: str, o: Any, dst: "Reg | None" = None) -> Any:
        bits = _bits(self)
        if bits is None:   # jaxptx's operator (``&``, ``|=``...)
            return adopt(getattr(super(), _OPERATORS[opcode][dst is not None])(o))
        out = dst if dst is not None else new_reg(self.type)
        emit_instruction(opcode, (f"b{bits}",), (out, self, _widen(o) if bits == 64 else o))
        return adopt(out)

    def __and__(self, o: Any) -> Any: return self._bitop("and", o)
    def __rand__(self, o: Any) -> Any: return self._bitop("and", o)
    def __iand__(self, o: Any) -> Any: return self._bitop("and", o, self)
    def __or__(self, o: Any) -> Any:
        """``or.bN``; with a predicate on either side, the pair operand
        :class:`PipeRef` (``p|q``), as pyptx."""
        return PipeRef(self, o) if _is_pred(self) or _is_pred(o) else self._bitop("or", o)

    def __ror__(self, o: Any) -> Any:
        return PipeRef(o, self) if _is_pred(self) or _is_pred(o) else self._bitop("or", o)
    def __ior__(self, o: Any) -> Any: return self._bitop("or", o, self)
    def __xor__(self, o: Any) -> Any: return self._bitop("xor", o)
    def __rxor__(self, o: Any) -> Any: return self._bitop("xor", o)
    def __ixor__(self, o: Any) -> Any: return self._bitop("xor", o, self)

    def max(self, other: Any) -> Any:
        """Integer ``max`` (``max.u32``, or ``max.s32`` for ``s32``)."""
        if _bits(self) == 32:
            ty = "s32" if self.type.name == "s32" else "u32"
            return adopt(emit_instruction("max", (ty,), (new_reg(self.type), self, other)))
        return adopt(super().max(other))

    def min(self, other: Any) -> Any:
        """``min`` of this register and ``other``."""
        return adopt(super().min(other))

    def __lt__(self, o: Any) -> Any: return adopt(super().__lt__(o))
    def __le__(self, o: Any) -> Any: return adopt(super().__le__(o))
    def __gt__(self, o: Any) -> Any: return adopt(super().__gt__(o))
    def __ge__(self, o: Any) -> Any: return adopt(super().__ge__(o))
    def __eq__(self, o: Any) -> Any: return adopt(super().__eq__(o))  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return adopt(super().__ne__(o))  # type: ignore[override]
    __hash__ = _CoreReg.__hash__

    def __invert__(self) -> Any:
        return adopt(super().__invert__())

    def __neg__(self) -> Any:
        return adopt(super().__neg__())

    def __truediv__(self, o: Any) -> Any: return adopt(super().__truediv__(o))
    def __floordiv__(self, o: Any) -> Any: return adopt(super().__floordiv__(o))
    def __mod__(self, o: Any) -> Any: return adopt(super().__mod__(o))


class PRegArray(RegArray):
    """``reg.array(...)``: registers of one type, pyptx's helpers added.

    ``arr[i] = value`` moves ``value`` into ``arr[i]`` (one ``mov``; pyptx
    rewrites the destination of the instruction that made ``value``
    instead, which gives the same result one instruction shorter).
    """

    def __setitem__(self, i: int, value: Any) -> None:
        target = self[i]
        if value is target:
            return
        emit_instruction("mov", (target.type.name,), (target, value))

    @property
    def count(self) -> int:
        """Number of registers."""
        return len(self)

    @property
    def dtype(self) -> PtxType:
        """Element type (pyptx spelling)."""
        return self.type

    def regs(self) -> list[Reg]:
        """The registers as a list."""
        return list(self)

    def hw_order(self, *, reverse: bool = False) -> list[Reg]:
        """The registers in declaration order, or reversed."""
        return list(reversed(self.regs())) if reverse else self.regs()


def adopt(value: Any) -> Any:
    """Give jaxptx registers (alone, in arrays, lists or tuples) pyptx's
    operator semantics; other values pass through."""
    if type(value) is _CoreReg:
        value.__class__ = Reg
    elif isinstance(value, RegArray):
        for r in value:
            adopt(r)
        if type(value) is RegArray:
            value.__class__ = PRegArray
    elif isinstance(value, (list, tuple)):
        for v in value:
            adopt(v)
    return value


def require_reg(value: Any, what: str) -> _CoreReg:
    """``value`` as a register, or a TraceError naming ``what``."""
    if not isinstance(value, _CoreReg):
        raise TraceError(f"{what}: expected a register, got {value!r}")
    return value

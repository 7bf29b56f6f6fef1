"""Constant operands: Python numbers as PTX immediates of the type the
instruction expects, refused when they do not fit it, and constant integer
divisors of zero."""

from __future__ import annotations

import math
import struct
from typing import Any

from .. import ir
from ..errors import PtxOperandError
from ..types import PtxType

__all__ = ["to_immediate", "check_divisor", "INTEGER_DIVISION"]


def to_immediate(value: int | float, want: PtxType | None, where: Any) -> ir.Immediate:
    """The immediate the DSL writes for a Python number where ``want`` is expected."""
    if isinstance(value, bool):
        raise PtxOperandError(f"{where}: expected a register or number, got {value!r}")
    if want is not None and want.name in ("f32", "f64") or (want is None and isinstance(value, float)):
        form = "f64" if want is not None and want.name == "f64" else "f32"
        try:
            number = float(value)
            if form == "f32":
                struct.pack("<f", number)   # raises for finite values past the f32 range
        except OverflowError:
            largest = "3.4028235e+38" if form == "f32" else "1.7976931348623157e+308"
            raise PtxOperandError(f"{where}: immediate {_short(value)} does not fit .{form} (largest "
                                  f"finite .{form}: {largest})") from None
        return ir.Immediate(number, form)
    if want is not None and want.is_float:
        raise PtxOperandError(
            f"{where}: PTX has no .{want.name} immediates; mov the bits into a register first")
    if isinstance(value, float):
        if not value.is_integer() or not math.isfinite(value):
            raise PtxOperandError(f"{where}: expected an integer immediate for .{want.name}, got {value!r}")
        value = int(value)
    if want is not None and want.kind in "bus" and want.bits <= 64:
        lo = -(1 << (want.bits - 1))
        hi = (1 << want.bits) - 1 if want.kind in "bu" else (1 << (want.bits - 1)) - 1
        if not lo <= value <= hi:
            raise PtxOperandError(f"{where}: immediate {_short(value)} does not fit .{want.name}")
    if want is None and not -(1 << 63) <= value < (1 << 64):
        raise PtxOperandError(f"{where}: immediate {_short(value)} does not fit 64 bits")
    if want is not None and want.kind == "b" and value >= 256:
        return ir.Immediate(int(value), "hex")  # bit patterns read better in hex
    return ir.Immediate(int(value))


def _short(value: int | float) -> str:
    """A number for a message: huge integers in scientific notation."""
    if isinstance(value, int) and abs(value) >= 10**20:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:6]}e+{len(digits) - 1}"
    return repr(value)


# PTX ISA, "div", "rem": an integer divisor of zero gives an unspecified
# value, so a constant zero divisor is always a bug (a float one is IEEE's inf).
INTEGER_DIVISION = frozenset({"div", "rem"})


def check_divisor(operands: list[ir.Operand], types: tuple[PtxType | None, ...], where: Any) -> None:
    """Refuse a constant zero as the divisor (the last operand) of an
    integer ``div``/``rem``; ``where`` is the message prefix (its
    ``operand`` is set to ``b``)."""
    divisor, want = operands[-1], types[len(operands) - 1] if len(types) >= len(operands) else None
    if isinstance(divisor, ir.Immediate) and divisor.value == 0 and want is not None and want.kind != "f":
        where.operand = "b"
        raise PtxOperandError(f"{where}: division by the constant 0 (the result is unspecified)")

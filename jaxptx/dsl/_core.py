"""Registers, addresses and the one path by which every instruction is emitted.

:func:`emit_instruction` takes an opcode and modifiers (from the ``ptx``
namespace or a ``Reg`` operator), resolves the form in the ISA table,
converts the Python arguments to IR operands using the types the form
expects, allocates the destination when the caller left it out, validates,
and appends. Nothing here branches on an opcode name.
"""

from __future__ import annotations

from typing import Any, get_args

from .. import ir, isa
from ..errors import PtxError, PtxOperandError, PtxTypeError, TraceError
from ..types import TYPES, PtxType, pred
from ._immediates import INTEGER_DIVISION, check_divisor
from ._immediates import to_immediate as to_immediate
from ._trace import REGISTER_FORMS_MAX, current, user_location, with_location
from ._values import SINK, Addr, Label, NegPred, RegArray

__all__ = ["Reg", "emit_instruction", "new_reg", "to_operand", "to_immediate"]


class Reg:
    """A PTX register with a logical type; operators emit one instruction each.

    ``a + b`` emits ``add``, ``a < b`` emits ``setp`` and gives a predicate,
    every augmented operator (``acc += x``, ``r <<= 1``, ``m ^= k`` ...)
    updates the register in place (loop-carried state), ``~p`` on a
    predicate negates it for guards and branches. Arithmetic on an untyped
    ``.bN`` register (a descriptor, a tensor-memory address) is written as
    ``.uN`` (PTX has no ``add.b64``); its result keeps the ``.bN`` type.

    Attributes:
        name: the PTX register name (``%r3``).
        type: its logical type.
        owner: the trace (or, in a module kernel, the function) it belongs
            to; using it anywhere else is an error. ``None``: not checked.
    """

    __slots__ = ("name", "type", "owner")

    def __init__(self, name: str, type: PtxType, owner: Any = None) -> None:
        self.name = name
        self.type = type
        self.owner = owner

    def __repr__(self) -> str:
        return f"Reg({self.name}: .{self.type.name})"

    def __bool__(self) -> bool:
        raise TraceError(
            f"register {self.name} has no Python truth value at trace time; "
            "use `with ptx.if_(p):` or `pred=p` for a runtime condition")

    def __index__(self) -> int:
        raise TraceError(f"register {self.name} is a runtime value, not a Python int")

    __hash__ = object.__hash__

    def set(self, value: Any) -> "Reg":
        """``mov`` ``value`` into this register; returns self."""
        emit_instruction("mov", (self.type.name,), (self, value))
        return self

    # arithmetic ---------------------------------------------------------
    def _bin(self, other: Any, opcode: str, int_mods: tuple[str, ...] = (),
             float_mods: tuple[str, ...] = (), dst: "Reg | None" = None,
             reverse: bool = False) -> "Reg":
        _check_same_type(self, other, opcode)
        t = _arith_type(self.type)
        mods = int_mods if t.is_int else float_mods if t.is_float else ()
        a, b = (other, self) if reverse else (self, other)
        if dst is None and t is not self.type:
            dst = new_reg(self.type)   # b64 + 1 is a b64, computed as u64
        args = (a, b) if dst is None else (dst, a, b)
        return emit_instruction(opcode, (*mods, t.name), args)

    def __add__(self, o: Any) -> "Reg": return self._bin(o, "add")
    def __radd__(self, o: Any) -> "Reg": return self._bin(o, "add", reverse=True)
    def __sub__(self, o: Any) -> "Reg": return self._bin(o, "sub")
    def __rsub__(self, o: Any) -> "Reg": return self._bin(o, "sub", reverse=True)
    def __mul__(self, o: Any) -> "Reg": return self._bin(o, "mul", ("lo",))
    def __rmul__(self, o: Any) -> "Reg": return self._bin(o, "mul", ("lo",), reverse=True)
    def __truediv__(self, o: Any) -> "Reg": return self._bin(o, "div", (), ("rn",))
    def __floordiv__(self, o: Any) -> "Reg": return self._bin(o, "div")
    def __mod__(self, o: Any) -> "Reg": return self._bin(o, "rem")
    def __rtruediv__(self, o: Any) -> "Reg": return self._bin(o, "div", (), ("rn",), reverse=True)
    def __rfloordiv__(self, o: Any) -> "Reg": return self._bin(o, "div", reverse=True)
    def __rmod__(self, o: Any) -> "Reg": return self._bin(o, "rem", reverse=True)
    # In place: one instruction whose destination is this register.
    def __iadd__(self, o: Any) -> "Reg": return self._bin(o, "add", dst=self)
    def __isub__(self, o: Any) -> "Reg": return self._bin(o, "sub", dst=self)
    def __imul__(self, o: Any) -> "Reg": return self._bin(o, "mul", ("lo",), dst=self)
    def __itruediv__(self, o: Any) -> "Reg": return self._bin(o, "div", (), ("rn",), dst=self)
    def __ifloordiv__(self, o: Any) -> "Reg": return self._bin(o, "div", dst=self)
    def __imod__(self, o: Any) -> "Reg": return self._bin(o, "rem", dst=self)

    def _bits(self, other: Any, opcode: str, dst: "Reg | None" = None) -> "Reg":
        _check_same_type(self, other, opcode)
        ty = "pred" if self.type.kind == "pred" else f"b{self.type.bits}"
        # The result keeps this register's type (u32 & 3 is a u32, not a b32).
        return emit_instruction(opcode, (ty,), (new_reg(self.type) if dst is None else dst, self, other))

    def __and__(self, o: Any) -> "Reg": return self._bits(o, "and")
    def __or__(self, o: Any) -> "Reg": return self._bits(o, "or")
    def __xor__(self, o: Any) -> "Reg": return self._bits(o, "xor")
    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    def __iand__(self, o: Any) -> "Reg": return self._bits(o, "and", self)
    def __ior__(self, o: Any) -> "Reg": return self._bits(o, "or", self)
    def __ixor__(self, o: Any) -> "Reg": return self._bits(o, "xor", self)

    def _shift(self, amount: Any, opcode: str, dst: "Reg | None" = None) -> "Reg":
        # shl is written on bits; shr on the register's type (.s: arithmetic, .u/.b: logical).
        ty = f"b{self.type.bits}" if opcode == "shl" else self.type.name
        return emit_instruction(opcode, (ty,), (new_reg(self.type) if dst is None else dst, self, amount))

    def __lshift__(self, o: Any) -> "Reg": return self._shift(o, "shl")
    def __rshift__(self, o: Any) -> "Reg": return self._shift(o, "shr")
    def __ilshift__(self, o: Any) -> "Reg": return self._shift(o, "shl", self)
    def __irshift__(self, o: Any) -> "Reg": return self._shift(o, "shr", self)

    def __neg__(self) -> "Reg":
        t = self.type
        if t.kind in "bu" and f"s{t.bits}" in TYPES:   # two's complement: neg.s gives the same bits
            return emit_instruction("neg", (f"s{t.bits}",), (new_reg(t), self))
        return emit_instruction("neg", (t.name,), (self,))

    def __invert__(self) -> "Reg | NegPred":
        if self.type.kind == "pred":
            return NegPred(self)
        return emit_instruction("not", (f"b{self.type.bits}",), (new_reg(self.type), self))

    def max(self, other: Any) -> "Reg":
        """``max`` of this register and ``other`` into a new register."""
        return self._bin(other, "max")

    def min(self, other: Any) -> "Reg":
        """``min`` of this register and ``other`` into a new register."""
        return self._bin(other, "min")

    # comparisons --------------------------------------------------------
    def _cmp(self, other: Any, op: str) -> "Reg":
        _check_same_type(self, other, "setp")
        return emit_instruction("setp", (op, _arith_type(self.type).name), (self, other))

    def __lt__(self, o: Any) -> "Reg": return self._cmp(o, "lt")
    def __le__(self, o: Any) -> "Reg": return self._cmp(o, "le")
    def __gt__(self, o: Any) -> "Reg": return self._cmp(o, "gt")
    def __ge__(self, o: Any) -> "Reg": return self._cmp(o, "ge")
    def __eq__(self, o: Any) -> "Reg": return self._cmp(o, "eq")  # type: ignore[override]
    def __ne__(self, o: Any) -> "Reg": return self._cmp(o, "ne")  # type: ignore[override]


def _arith_type(t: PtxType) -> PtxType:
    """The type arithmetic and ordered comparisons on ``t`` are written with:
    an untyped ``.bN`` computes as ``.uN`` (PTX ISA has no ``add.b32``)."""
    if t.kind == "b":
        return TYPES.get(f"u{t.bits}", t)
    return t


def _check_same_type(a: Reg, b: Any, opcode: str) -> None:
    if isinstance(b, Reg) and not isa.compatible(a.type, b.type):
        raise with_location(PtxTypeError(
            f"{opcode}: operands must have one type, got {a.name} (.{a.type.name}) and "
            f"{b.name} (.{b.type.name}); convert one with ptx.cvt"), user_location())


_IR_OPERANDS = get_args(ir.Operand)       # every IR operand, initialiser items included


def new_reg(ptype: PtxType, name: str | None = None) -> Reg:
    """Allocate a fresh register of ``ptype`` in the active trace."""
    trace = current()
    return Reg(trace.new_register(ptype, name)[0], ptype, trace.scope)


def _owned(r: Reg) -> ir.Register:
    """``r`` as an operand, refusing a register of another trace or function."""
    if r.owner is not None:
        scope = current().scope
        if r.owner is not scope:
            if isinstance(scope, ir.Function):
                rule = "a register belongs to the function that made it"
            else:
                rule = "registers cannot cross traces (each kernel, and each specialisation of one, is its own trace)"
            raise TraceError(f"register {r.name} belongs to {_scope_name(r.owner, scope)}, not to "
                             f"{_scope_name(scope)}; {rule}: make the value here")
    return ir.Register(r.name)


def _scope_name(scope: Any, other: Any = None) -> str:
    kind = "function" if isinstance(scope, ir.Function) else "kernel"
    same = other is not None and getattr(other, "name", None) == scope.name
    return f"{'another trace of ' if same else ''}{kind} {scope.name}"


def to_operand(value: Any, o: isa.Operand | None, want: PtxType | None, where: Any) -> ir.Operand:
    """Convert a Python argument to an IR operand for table operand ``o``."""
    kinds = o.kinds if o is not None else ()
    if type(value) is Reg and kinds != ("mem",) and ("reg" in kinds or "vec" not in kinds):
        return _owned(value)    # the common case first: a register where a register goes
    if isinstance(value, _IR_OPERANDS):
        return value        # an IR operand built by hand passes through unchanged
    if isinstance(value, ir.VarDecl):
        value = value.name  # a declared variable or parameter stands for its name
    if isinstance(value, Reg):
        if kinds == ("mem",):
            return ir.Address(_owned(value))
        if "vec" in kinds and "reg" not in kinds and value.name not in current().vectors:
            return ir.Vector((_owned(value),))   # a scalar register as a one-element vector, {%r1}
        return _owned(value)
    if isinstance(value, NegPred):
        return ir.Negated(_owned(value.reg))
    if isinstance(value, Addr):
        return _address(value, where)
    if isinstance(value, Label):
        return ir.Symbol(value.name)
    if value is SINK:
        return ir.Sink()
    if isinstance(value, str):
        if value.startswith("%") or _declared(value):
            return ir.Register(value)
        return ir.Address(ir.Symbol(value)) if kinds == ("mem",) else ir.Symbol(value)
    if isinstance(value, (int, float)):
        return to_immediate(value, want, where)
    if isinstance(value, (tuple, list, RegArray)):
        if "pair" in kinds and len(value) == 2 and "vec" not in kinds:
            return ir.Pair(to_operand(value[0], None, want, where), to_operand(value[1], None, pred, where))
        return ir.Vector(tuple(to_operand(v, None, want, where) for v in value))
    symbol = getattr(value, "__ptx_symbol__", None)
    if symbol is not None:
        return to_operand(symbol(), o, want, where)
    raise PtxOperandError(f"{where}: expected a register, number, address or label, got {value!r}")


def _declared(name: str) -> bool:
    # PTX registers need no `%`: a name declared by reg.declare is one.
    regs = current().reg_types
    return name in regs or name.rsplit(".", 1)[0] in regs


def _address(a: Addr, where: Any) -> ir.Address:
    base: ir.Register | ir.Symbol | None
    if isinstance(a.base, Reg):
        base = _owned(a.base)
    elif isinstance(a.base, ir.VarDecl):
        base = ir.Symbol(a.base.name)
    elif isinstance(a.base, str):
        base = ir.Register(a.base) if a.base.startswith("%") or _declared(a.base) else ir.Symbol(a.base)
    else:
        base = None
    extra = None
    if a.coords:
        extra = ir.Vector(tuple(to_operand(c, None, TYPES["s32"], where) for c in a.coords))
    return ir.Address(base, a.offset, extra, a.minus)


def _split_type(args: tuple[Any, ...], mods: tuple[str, ...]) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    # pyptx-style calls put the type first: ptx.add(f32, d, a, b).
    if args and isinstance(args[0], PtxType):
        return args[1:], (*mods, args[0].name)
    return args, mods


def emit_instruction(opcode: str, mods: tuple[str, ...], args: tuple[Any, ...],
                     pred: Reg | NegPred | None = None) -> Any:
    """Emit one instruction; returns its destination (allocated if omitted).

    Raises:
        PtxError: any table, operand or type error, pointing at the user's line.
    """
    loc = user_location()
    trace = current()
    forms = trace.register_forms
    key = None
    if forms is not None:
        call = _register_call(trace, opcode, mods, args, pred)
        if call is not None:
            key, registers = call
            returns = forms.get(key)
            if returns is not None:         # this signature was resolved and checked before
                return _append_registers(trace, opcode, mods, registers, args, pred, loc, returns)
    args, mods = _split_type(args, mods)
    if not trace.validate:
        return _emit_unchecked(trace, opcode, mods, args, pred, loc)
    try:
        r = isa.resolve(opcode, mods, len(args), tuple(_kind(a) for a in args))
        operands, types = r.operands, r.types
        lo, hi = r.bounds
        if len(args) == lo - 1 and operands and operands[0].out:
            args = (_allocate(operands[0], r),) + args
        converted = []
        where = _Where(opcode, mods)
        for i, value in enumerate(args):
            o = operands[i] if i < len(operands) else None
            where.operand = o.name if o is not None else str(i)
            converted.append(to_operand(value, o, types[i] if o is not None else None, where))
        if opcode in INTEGER_DIVISION:
            check_divisor(converted, types, where)
        guard = _guard(pred)
    except PtxError as e:
        raise with_location(e, loc) from None
    ins = ir.Instruction(opcode, mods, tuple(converted), guard, None, loc)
    trace.emit(ins)
    returns = bool(operands and operands[0].out)
    if key is not None and len(converted) == len(key) - 3 and len(forms) < REGISTER_FORMS_MAX \
            and all(type(c) is ir.Register for c in converted):
        forms[key] = returns
    return args[0] if returns else None


def _register_call(trace: Any, opcode: str, mods: tuple[str, ...], args: tuple[Any, ...],
                   pred: Any) -> tuple[tuple, list[ir.Register]] | None:
    """When every argument is a register of this trace (not a vector
    register) of the type the trace declared it with: the key of
    :attr:`Trace.register_forms` and the arguments as operands; else None."""
    scope, declared, operands = trace.scope, trace.reg_types, trace.operands
    key = [opcode, mods, pred is None]
    ops = []
    for a in args:
        if type(a) is not Reg:
            return None
        t, name = a.type, a.name
        if declared.get(name) is not t or (a.owner is not scope and a.owner is not None):
            return None
        key.append(t.name)
        op = operands.get(name)
        if op is None:
            op = operands[name] = ir.Register(name)
        ops.append(op)
    vectors = trace.vectors
    if vectors and any(a.name in vectors for a in args):
        return None
    return tuple(key), ops


def _append_registers(trace: Any, opcode: str, mods: tuple[str, ...], operands: list[ir.Register],
                      args: tuple[Reg, ...], pred: Any, loc: Any, returns: bool) -> Reg | None:
    """Append an instruction of a signature checked before (``operands``:
    the registers ``args``, as :func:`_register_call` found them)."""
    if trace.module_mode and trace.function is None:
        trace.require_function()            # raises
    guard = None
    if pred is not None:
        try:
            guard = _guard(pred)
        except PtxError as e:
            raise with_location(e, loc) from None
    trace.append(ir.Instruction(opcode, mods, tuple(operands), guard, None, loc))
    return args[0] if returns else None


def _kind(value: Any) -> str:
    """The table kind a Python argument will become (for choosing the form)."""
    if isinstance(value, Reg):
        return "pred" if value.type.kind == "pred" else "reg"
    if isinstance(value, (NegPred, ir.Negated)):
        return "pred"
    if isinstance(value, (int, float, ir.Immediate)):
        return "imm"
    if isinstance(value, (Addr, ir.Address)):
        return "mem"
    if isinstance(value, (tuple, list, RegArray, ir.Vector)):
        return "vec"
    if isinstance(value, ir.Parens):
        return "list"
    if isinstance(value, ir.Pair):
        return "pair"
    if value is SINK or isinstance(value, ir.Sink):
        return "sink"
    if isinstance(value, str) and value.startswith("%") or isinstance(value, ir.Register):
        return "reg"
    return "sym"


def _guard(pred: "Reg | NegPred | str | None") -> ir.Guard | None:
    if pred is None:
        return None
    if isinstance(pred, str):
        return ir.Guard(ir.Register(pred.lstrip("!")), pred.startswith("!"))
    reg = pred.reg if isinstance(pred, NegPred) else pred
    return ir.Guard(_owned(reg), isinstance(pred, NegPred))


def _emit_unchecked(trace: Any, opcode: str, mods: tuple[str, ...], args: tuple[Any, ...],
                    pred: Any, loc: Any) -> Any:
    # A kernel traced with validate=False (transpiled PTX that ptxas or the
    # table would refuse): operands are converted without the table's types.
    trace.require_function()
    ops = tuple(to_operand(v, None, None, _Where(opcode, mods)) for v in args)
    trace.append(ir.Instruction(opcode, mods, ops, _guard(pred), loc=loc))
    return args[0] if args else None


class _Where:
    """``add.f32 operand b`` for messages, built only when one is raised."""

    __slots__ = ("opcode", "mods", "operand")

    def __init__(self, opcode: str, mods: tuple[str, ...]) -> None:
        self.opcode, self.mods, self.operand = opcode, mods, ""

    def __str__(self) -> str:
        return f"{'.'.join((self.opcode, *self.mods))} operand {self.operand}"



def _allocate(o: isa.Operand, r: isa.Resolved) -> Any:
    want = isa.expected_type(o, r.values) or TYPES["b32"]
    if "vec" in o.kinds and "reg" not in o.kinds:
        n = isa.vector_count(o, r.values) or 1
        return RegArray([new_reg(want) for _ in range(n)])
    if "pair" in o.kinds and "reg" not in o.kinds:
        return new_reg(want)
    return new_reg(pred if "pred" in o.kinds and "reg" not in o.kinds else want)

"""Checking IR instructions against the ISA table: modifiers, target,
operand kinds, types and vector lengths.

The DSL calls :func:`check_instruction` on every traced instruction; the
parser's checker calls it on parsed ones. Both pass ``type_of``, which gives
a register's type (the DSL gives the register's logical type, the checker
the declared one).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping

from . import ir
from .emit import operand_text
from .errors import PtxOperandError, PtxTypeError
from .isa import Operand, Resolved, Target, compatible, resolve
from .types import PtxType

__all__ = ["check_instruction", "operand_kind", "normalize", "TypeOf", "PREDEFINED"]

TypeOf = Callable[[str], "PtxType | None"]
# Names every PTX module may use (PTX ISA, "Predefined Identifiers").
PREDEFINED = {"WARP_SZ": 32}


def _as_register(op: ir.Operand, regs: Container[str], vectors: Mapping[str, int],
                 keep_offsets: bool = False) -> ir.Operand:
    """Normalise register operands for checking: a name declared by ``.reg``
    is a register even without ``%``; a ``.v4`` register is a vector of its
    components; ``{%r1}`` is ``%r1``."""
    if isinstance(op, ir.Symbol) and op.name in PREDEFINED:
        return ir.Immediate(PREDEFINED[op.name])
    if isinstance(op, ir.Symbol) and op.offset is not None and op.name in regs and not keep_offsets:
        return ir.Register(op.name)   # `temp+1`: ptxas reads a register plus an offset
    if isinstance(op, (ir.Symbol, ir.Register)) and getattr(op, "offset", None) is None:
        if op.name in vectors:
            return ir.Vector(tuple(ir.Register(f"{op.name}.{c}") for c in "xyzw"[:vectors[op.name]]))
        if op.name in regs or op.name.rsplit(".", 1)[0] in regs:
            return ir.Register(op.name)
        return op
    if isinstance(op, ir.Address) and isinstance(op.base, ir.Symbol) and op.base.name in regs:
        return ir.Address(ir.Register(op.base.name), op.offset, op.extra, op.minus)
    if isinstance(op, (ir.Vector, ir.Parens)):
        items = tuple(_as_register(x, regs, vectors, keep_offsets) for x in op.items)
        if isinstance(op, ir.Vector) and len(items) == 1 and isinstance(items[0], ir.Register):
            return items[0]
        return type(op)(items)
    if isinstance(op, ir.Pair):
        return ir.Pair(_as_register(op.first, regs, vectors, keep_offsets), _as_register(op.second, regs, vectors, keep_offsets))
    if isinstance(op, ir.Negated):
        return ir.Negated(_as_register(op.operand, regs, vectors, keep_offsets))
    return op


def normalize(ins: ir.Instruction, regs: Container[str], vectors: Mapping[str, int],
              keep_offsets: bool = False) -> ir.Instruction:
    """The instruction as the table sees it: declared registers named without
    ``%`` are registers, ``.v4`` registers are vectors of their components,
    ``{%r1}`` is ``%r1``, ``WARP_SZ`` is 32. (Only for checking; what is
    emitted keeps the operands as written.) ``keep_offsets`` leaves
    ``reg+4`` operands alone (the emulator adds the offset)."""
    ops = tuple(_as_register(op, regs, vectors, keep_offsets) for op in ins.operands)
    if ops == ins.operands:
        return ins
    return ir.Instruction(ins.opcode, ins.modifiers, ops, ins.guard, loc=ins.loc)




def operand_kind(x: ir.Operand, type_of: TypeOf) -> str:
    """The table kind of an IR operand (``reg``, ``pred``, ``imm``...)."""
    if type(x) is ir.Register:
        t = type_of(x.name)
        return "pred" if t is not None and t.kind == "pred" else "reg"
    return _KINDS[type(x)]


_KINDS = {ir.Immediate: "imm", ir.Address: "mem", ir.Vector: "vec", ir.Symbol: "sym",
          ir.Sink: "sink", ir.Pair: "pair", ir.Negated: "pred", ir.Parens: "list",
          ir.Generic: "init", ir.Field: "init"}     # initialiser items: no instruction takes one


def _describe(x: ir.Operand, type_of: TypeOf) -> str:
    text = operand_text(x)
    if isinstance(x, ir.Register):
        t = type_of(x.name)
        return f"{text} (.{t.name})" if t is not None else f"{text} (undeclared)"
    return text


def _kinds_text(o: Operand, want: PtxType | None) -> str:
    ty = f".{want.name} " if want is not None else ""
    words = {"reg": f"{ty}register", "pred": "predicate", "imm": "immediate", "mem": "[address]",
             "vec": "{vector}", "sym": "name", "sink": "_", "pair": "d|p pair", "list": "(list)"}
    return " or ".join(words[k] for k in o.kinds)


def _check_operand(ins: ir.Instruction, o: Operand, want: PtxType | None, count: int | None,
                   x: ir.Operand, kind: str, type_of: TypeOf) -> None:
    if kind == "pred" and "pred" not in o.kinds and isinstance(x, ir.Register) and "reg" in o.kinds:
        kind = "reg"  # a predicate where a typed register goes: a type error below
    if kind == "reg" and count == 1 and "vec" in o.kinds and "reg" not in o.kinds:
        x, kind = ir.Vector((x,)), "vec"  # `{%r1}` (normalize unwrapped it): a one-element vector
    if kind not in o.kinds or (isinstance(x, ir.Negated) and not o.neg):
        raise PtxOperandError(
            f"{_where(ins, o)}: expected {_kinds_text(o, want)}, got {_describe(x, type_of)}")
    if o.multiple is not None and isinstance(x, ir.Immediate) and isinstance(x.value, int) \
            and x.value % o.multiple[0]:
        raise PtxOperandError(f"{_where(ins, o)}: expected a multiple of {o.multiple[0]} "
                              f"({o.multiple[1]}), got {operand_text(x)}")
    if isinstance(x, ir.Address) and x.base is None and x.extra is None and "local" not in ins.modifiers:
        # ptxas: "Immediate addresses allowed only for .local state space"
        raise PtxOperandError(f"{_where(ins, o)}: an absolute address {operand_text(x)} is only "
                              "allowed in the .local state space (ptxas: \"Immediate addresses "
                              "allowed only for .local state space\"); address through a register "
                              "or a variable's name")
    if kind == "reg" and want is not None:
        got = type_of(x.name)  # type: ignore[union-attr]
        if got is not None and not compatible(want, got, o.widen):
            raise PtxTypeError(
                f"{_where(ins, o)}: expected {_kinds_text(o, want)}, got {_describe(x, type_of)}")
    if kind == "vec":
        items = x.items  # type: ignore[union-attr]
        if count is not None and len(items) != count:
            raise PtxOperandError(f"{_where(ins, o)}: expected a vector of {count} elements, got {len(items)}")
        for k, item in enumerate(items):
            if isinstance(item, ir.Register) and want is not None:
                got = type_of(item.name)
                if got is not None and not compatible(want, got, o.widen):
                    raise PtxTypeError(f"{_where(ins, o)}[{k}]: expected .{want.name} register, "
                                       f"got {_describe(item, type_of)}")


def _where(ins: ir.Instruction, o: Operand) -> str:
    return f"{ins.name} operand {o.name}"


def check_instruction(ins: ir.Instruction, *, target: Target, version: tuple[int, int],
                      type_of: TypeOf) -> Resolved:
    """Validate one instruction; returns the resolved form.

    Raises:
        PtxModifierError, PtxTargetError, PtxVersionError, PtxOperandError,
        PtxTypeError: each naming the instruction, the operand and what was
        expected.
    """
    kinds = tuple(operand_kind(x, type_of) for x in ins.operands)
    r = resolve(ins.opcode, ins.modifiers, len(ins.operands), kinds)
    operands, types, counts, (lo, hi), requirements = r.derived
    if requirements or not r.inst.requires.allows(target, version):
        r.check_target(ins.name, target, version)
    if ins.guard is not None and not r.inst.predicable:
        raise PtxOperandError(f"{ins.name}: cannot be guarded by a predicate")
    if not lo <= len(ins.operands) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        names = ", ".join(o.name for o in operands)
        raise PtxOperandError(
            f"{ins.name}: expected {want} operands ({names}), got {len(ins.operands)}")
    for o, want, count, x, kind in zip(operands, types, counts, ins.operands, kinds):
        _check_operand(ins, o, want, count, x, kind, type_of)
    return r

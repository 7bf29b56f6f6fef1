"""Checking IR instructions against the ISA table: modifiers, target,
operand kinds, types and vector lengths.

The DSL calls :func:`check_instruction` on every traced instruction; the
parser's checker calls it on parsed ones. Both pass ``type_of``, which gives
a register's type (the DSL gives the register's logical type, the checker
the declared one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import ir
from .emit import operand_text
from .errors import PtxOperandError, PtxTypeError
from .isa import Operand, Resolved, Target, active_operands, arity, compatible
from .isa import expected_type, resolve, vector_count
from .types import PtxType

__all__ = ["check_instruction", "operand_kind", "TypeOf"]

TypeOf = Callable[[str], "PtxType | None"]


def operand_kind(x: ir.Operand, type_of: TypeOf) -> str:
    """The table kind of an IR operand (``reg``, ``pred``, ``imm``...)."""
    if isinstance(x, ir.Register):
        t = type_of(x.name)
        return "pred" if t is not None and t.kind == "pred" else "reg"
    return {ir.Immediate: "imm", ir.Address: "mem", ir.Vector: "vec", ir.Symbol: "sym",
            ir.Sink: "sink", ir.Pair: "pair", ir.Negated: "pred"}[type(x)]


def _describe(x: ir.Operand, type_of: TypeOf) -> str:
    text = operand_text(x)
    if isinstance(x, ir.Register):
        t = type_of(x.name)
        return f"{text} (.{t.name})" if t is not None else f"{text} (undeclared)"
    return text


def _kinds_text(o: Operand, want: PtxType | None) -> str:
    ty = f".{want.name} " if want is not None else ""
    words = {"reg": f"{ty}register", "pred": "predicate", "imm": "immediate", "mem": "[address]",
             "vec": "{vector}", "sym": "name", "sink": "_", "pair": "d|p pair"}
    return " or ".join(words[k] for k in o.kinds)


def _check_operand(where: str, o: Operand, x: ir.Operand, values: Mapping[str, str],
                   type_of: TypeOf) -> None:
    want = expected_type(o, values)
    kind = operand_kind(x, type_of)
    if kind == "pred" and "pred" not in o.kinds and isinstance(x, ir.Register) and "reg" in o.kinds:
        kind = "reg"  # a predicate where a typed register goes: a type error below
    if kind not in o.kinds or (isinstance(x, ir.Negated) and not o.neg):
        raise PtxOperandError(
            f"{where}: expected {_kinds_text(o, want)}, got {_describe(x, type_of)}")
    if kind == "reg" and want is not None:
        got = type_of(x.name)  # type: ignore[union-attr]
        if got is not None and not compatible(want, got, o.widen):
            raise PtxTypeError(
                f"{where}: expected {_kinds_text(o, want)}, got {_describe(x, type_of)}")
    if kind == "vec":
        n = vector_count(o, values)
        items = x.items  # type: ignore[union-attr]
        if n is not None and len(items) != n:
            raise PtxOperandError(f"{where}: expected a vector of {n} elements, got {len(items)}")
        for k, item in enumerate(items):
            if isinstance(item, ir.Register) and want is not None:
                got = type_of(item.name)
                if got is not None and not compatible(want, got, o.widen):
                    raise PtxTypeError(
                        f"{where}[{k}]: expected .{want.name} register, got {_describe(item, type_of)}")


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
    name = ins.name
    r.inst.requires.check(name, target, version)
    for s in r.inst.slots:
        v = r.values.get(s.name)
        req = s.requirement(v) if v is not None else None
        if req is not None:
            req.check(f"{name} (.{v})", target, version)
    if ins.guard is not None and not r.inst.predicable:
        raise PtxOperandError(f"{name}: cannot be guarded by a predicate")
    ops = active_operands(r)
    lo, hi = arity(r)
    if not lo <= len(ins.operands) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        names = ", ".join(o.name for o in ops)
        raise PtxOperandError(
            f"{name}: expected {want} operands ({names}), got {len(ins.operands)}")
    for o, x in zip(ops, ins.operands):
        _check_operand(f"{name} operand {o.name}", o, x, r.values, type_of)
    return r

"""Every table form refuses a register of the wrong type in each typed
operand position, with a message naming the instruction, the operand, what
was expected and what came — derived from the table, not hand-written."""

from __future__ import annotations

import pytest

from jaxptx import ir, isa
from jaxptx.errors import PtxModifierError, PtxOperandError, PtxTypeError
from jaxptx.isa._examples import _value_choices, example_target
from jaxptx.types import TYPES
from jaxptx.validate import check_instruction


def _good_operand(o: isa.Operand, r: isa.Resolved, types: dict[str, str], k: int) -> ir.Operand:
    want = isa.expected_type(o, r.values)
    if "vec" in o.kinds:
        n = isa.vector_count(o, r.values) or 1
        items = []
        for j in range(n):
            types[f"%v{k}_{j}"] = want.name if want else "b32"
            items.append(ir.Register(f"%v{k}_{j}"))
        return ir.Vector(tuple(items))
    if "reg" in o.kinds:
        types[f"%o{k}"] = want.name if want else "b32"
        return ir.Register(f"%o{k}")
    if "pred" in o.kinds:
        types[f"%o{k}"] = "pred"
        return ir.Register(f"%o{k}")
    if "mem" in o.kinds:
        types[f"%o{k}"] = "u64"
        return ir.Address(ir.Register(f"%o{k}"))
    if "imm" in o.kinds:
        return ir.Immediate(1)
    if "sym" in o.kinds:
        return ir.Symbol("$L")
    if "list" in o.kinds:
        return ir.Parens(())
    if "pair" in o.kinds:
        types[f"%o{k}"], types[f"%q{k}"] = (want.name if want else "b32"), "pred"
        return ir.Pair(ir.Register(f"%o{k}"), ir.Register(f"%q{k}"))
    return ir.Sink()


def _cases():
    for inst in isa.INSTRUCTIONS:
        values = next(_value_choices(inst), None)
        if values is None:
            continue
        r = isa.Resolved(inst, values)
        for k, o in enumerate(isa.active_operands(r)):
            want = isa.expected_type(o, values)
            if "reg" in o.kinds and want is not None and want.kind != "pred" and "vec" not in o.kinds:
                yield pytest.param(inst, values, k, id=f"{inst.opcode}-{k}-{'.'.join(values.values())}"[:80])
                break


def _build(inst, values):
    r = isa.Resolved(inst, values)
    types: dict[str, str] = {}
    ops = [_good_operand(o, r, types, k) for k, o in enumerate(isa.active_operands(r))]
    mods = tuple(values[s.name] for s in inst.slots if s.name in values)
    return r, ops, mods, types


@pytest.mark.parametrize("inst, values, k", list(_cases()))
def test_wrong_register_type_is_refused(inst, values, k) -> None:
    r, ops, mods, types = _build(inst, values)
    target, version = example_target(inst, values)
    type_of = lambda n: TYPES.get(types.get(n, ""))  # noqa: E731
    good = ir.Instruction(inst.opcode, mods, tuple(ops))
    check_instruction(good, target=target, version=version, type_of=type_of)
    o = isa.active_operands(r)[k]
    want = isa.expected_type(o, values)
    types["%bad"] = "f32" if want.bits >= 64 else "f64"
    ops[k] = ir.Register("%bad")
    bad = ir.Instruction(inst.opcode, mods, tuple(ops))
    with pytest.raises(PtxTypeError, match=rf"operand {o.name}: expected .*\.{want.name} register.*got %bad \(\.{types['%bad']}\)"):
        check_instruction(bad, target=target, version=version, type_of=type_of)


def test_operand_count_is_checked() -> None:
    ins = ir.Instruction("add", ("s32",), (ir.Register("%r1"), ir.Register("%r2")))
    with pytest.raises(PtxOperandError, match=r"add.s32: expected 3 operands \(d, a, b\), got 2"):
        check_instruction(ins, target=isa.parse_target("sm_80"), version=(8, 5),
                          type_of=lambda n: TYPES["s32"])


def test_unknown_modifier_names_the_near_miss() -> None:
    ins = ir.Instruction("add", ("f33",), ())
    with pytest.raises(PtxModifierError, match=r"add.f33: unknown modifier .f33 \(did you mean .f32\?\)"):
        check_instruction(ins, target=isa.parse_target("sm_80"), version=(8, 5), type_of=lambda n: None)


def test_immediate_where_register_required() -> None:
    ins = ir.Instruction("add", ("f32",), (ir.Immediate(1), ir.Register("%f1"), ir.Register("%f2")))
    with pytest.raises(PtxOperandError, match=r"add.f32 operand d: expected .f32 register, got 1"):
        check_instruction(ins, target=isa.parse_target("sm_80"), version=(8, 5),
                          type_of=lambda n: TYPES["f32"])

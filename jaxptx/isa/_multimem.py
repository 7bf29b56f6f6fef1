"""Instruction table entries: multimem loads, stores and reductions.

PTX ISA sections "Parallel Synchronization and Communication Instructions:
multimem.ld_reduce, multimem.st, multimem.red" and "Data Movement and
Conversion Instructions: multimem.cp.async.bulk / multimem.cp.reduce.async.bulk".
A multimem address names one location on every GPU its multicast object
maps; these forms read, write or reduce all of them at once.

Each syntax line becomes a scalar form (register operand) and a vector form
(``{...}`` operand), as ``ld``/``st`` do. The floating-point vector forms
hold 32, 64 or 128 bits in all (PTX ISA, multimem: ``.vec`` with the type);
``.f64`` takes no vector, 16-bit types need one. The fp8 forms (``.e5m2``,
``.e4m3`` and their ``x2``/``x4`` packings) and ``.acc::f16`` exist only on
the sm_100/sm_110/sm_120 arch-specific targets and the sm_100/103/110
families (ptxas 13.5 refuses them on sm_120f and sm_121f); ``.e5m2x4`` and
``.e4m3x4`` are 32-bit packings held in ``.b32`` registers.

The orderings pair up: ``.relaxed``/``.acquire``/``.release`` need a scope
and a scope needs one of them; ``.weak`` takes no scope (ptxas: "Modifier
'.relaxed' requires scope", "'.weak' cannot be combined with modifier
'.gpu'").
"""

from __future__ import annotations

from ._schema import Inst, Operand, Rule, Slot, op, slot
from ._targets import Requires

SCOPES = "cta cluster gpu sys"
INT_TYPES = "b32 b64 u32 u64 s32 s64"
# The integer operation/type table, as for atom and red.
INT_RULES = (
    Rule("op", "type", ("and", "or", "xor"), ("b32", "b64")),
    Rule("op", "type", ("add",), ("u32", "s32", "u64")),
    Rule("op", "type", ("min", "max"), ("u32", "s32", "u64", "s64")),
)
HALVES = ("f16", "bf16", "f16x2", "bf16x2")
FP8_TARGETS = ("sm_100a", "sm_101a", "sm_103a", "sm_110a", "sm_120a", "sm_121a",
               "sm_100f", "sm_101f", "sm_103f", "sm_110f")

SM90_PTX81 = Requires(sm=90, ptx=(8, 1))
FP8 = Requires(sm=100, ptx=(8, 6), only=FP8_TARGETS)
# .acc::f32 arrived a version after multimem itself (ptxas: "Modifier
# '.acc::f32' requires PTX ISA .version 8.2 or later").
ACC_F32 = Requires(sm=90, ptx=(8, 2))
BULK = Requires(sm=90, ptx=(9, 1))
# Explicit orderings of the bulk forms arrived with PTX ISA 9.3.
BULK_ORDER = Requires(sm=90, ptx=(9, 3))

_SEC = ("9.7.13 Parallel Synchronization and Communication Instructions: "
        "multimem.ld_reduce, multimem.st, multimem.red")
_CP_SEC = "9.7.9 Data Movement and Conversion Instructions: multimem.cp.async.bulk"
_CP_RED_SEC = "9.7.9 Data Movement and Conversion Instructions: multimem.cp.reduce.async.bulk"

ADDR = op("a", "mem")
_VERB = {"multimem.ld_reduce": "load and reduce", "multimem.st": "store",
         "multimem.red": "reduce into"}
_SIM = {"multimem.ld_reduce": "multimem_ld_reduce", "multimem.st": "multimem_st",
        "multimem.red": "multimem_red"}


def _head(sems: str) -> tuple[Slot, ...]:
    """The ordering, scope and state space in front of every form."""
    return (slot("sem", sems, optional=True), slot("scope", SCOPES, optional=True),
            slot("space", "global", optional=True))


def _order_rules(sems: str) -> tuple[Rule, ...]:
    """A strong ordering needs a scope; a scope needs a strong ordering."""
    strong = tuple(s for s in sems.split() if s != "weak")
    return (Rule("sem", "scope", strong), Rule("scope", "sem", (), strong))


def _value(opcode: str, type_: str | None, vector: bool) -> Operand:
    """The loaded result (``d``) or the stored/reduced source (``b``)."""
    type_ = type_ or "$type"
    count = "$vec" if vector else None
    if opcode == "multimem.ld_reduce":
        return op("d", "vec" if vector else "reg", type_, out=True, count=count)
    return op("b", "vec" if vector else "reg imm", type_, count=count)


def _form(opcode: str, sems: str, mid: tuple[Slot, ...], types: str, *, vec: str | None = None,
          reg: str | None = None, rules: tuple[Rule, ...] = (), requires: Requires = SM90_PTX81,
          what: str, example: str | None = None) -> Inst:
    """One form: ``opcode{.sem}{.scope}{.global}<mid>{.vec}.type``."""
    tail = ((slot("vec", vec),) if vec else ()) + (slot("type", types),)
    value = _value(opcode, reg, vec is not None)
    operands = (value, ADDR) if opcode == "multimem.ld_reduce" else (ADDR, value)
    return Inst(opcode, (*_head(sems), *mid, *tail), operands, requires=requires,
                rules=_order_rules(sems) + rules, section=_SEC, sim=_SIM[opcode],
                summary=f"{_VERB[opcode]} every copy of a multimem location: {what}",
                example=example)


def _fp8_bytes_example(opcode: str) -> str:
    # Single fp8 elements live in .b8 registers, which the example generator
    # declares as .b16 (ptxas: "Arguments mismatch"); this form declares its own.
    regs = ", ".join(f"%mmb{i}" for i in range(4))
    head = ".reg .b8 %mmb<4>; "
    if opcode == "multimem.ld_reduce":
        return head + f"multimem.ld_reduce.add.acc::f16.v4.e4m3 {{{regs}}}, [%{{u64}}];"
    return head + f"multimem.st.relaxed.gpu.global.v4.e5m2 [%{{u64}}], {{{regs}}};"


def _float_ops(opcode: str, acc: str | None) -> tuple[tuple[Slot, ...], tuple[Rule, ...]]:
    """The operation (and accumulation precision) slots of a float form."""
    if opcode == "multimem.st":
        return (), ()
    if opcode == "multimem.red":
        return (slot("op", "add"),), ()
    ops = (slot("op", "add min max"),)
    if acc is None:
        return ops, ()
    reqs = {"acc::f32": ACC_F32} if acc == "acc::f32" else {}
    return ops + (slot("acc", acc, optional=True, requires=reqs),), (Rule("acc", "op", (), ("add",)),)


def _family(opcode: str, sems: str) -> tuple[Inst, ...]:
    """Every form of ``multimem.ld_reduce``, ``multimem.st`` or ``multimem.red``."""
    load = opcode == "multimem.ld_reduce"
    int_mid = () if opcode == "multimem.st" else (slot("op", "min max add and or xor"),)
    half_ops, half_rules = _float_ops(opcode, "acc::f32")
    if load:      # min and max take only the 16-bit types; .acc::f32 only those too
        half_rules += (Rule("op", "type", ("min", "max"), HALVES),
                       Rule("acc", "type", (), HALVES))
    forms = [
        _form(opcode, sems, int_mid, INT_TYPES, rules=INT_RULES if int_mid else (),
              what="integer"),
        _form(opcode, sems, half_ops, "f16x2 bf16x2 f32 f64", rules=half_rules,
              what="floating point"),
        _form(opcode, sems, half_ops, "f16 bf16 f16x2 bf16x2 f32", vec="v2 v4 v8",
              rules=half_rules + (Rule("vec", "type", ("v8",), ("f16", "bf16")),),
              what="floating-point vector of 32 to 128 bits"),
    ]
    if opcode == "multimem.red":      # .redtype has no fp8 types
        return tuple(forms)
    fp8_ops, fp8_rules = _float_ops(opcode, "acc::f16")
    forms += [
        _form(opcode, sems, fp8_ops, "e5m2x4 e4m3x4", reg="b32", rules=fp8_rules,
              requires=FP8, what="four packed fp8 values"),
        _form(opcode, sems, fp8_ops, "e5m2x4 e4m3x4", vec="v2 v4", reg="b32", rules=fp8_rules,
              requires=FP8, what="vector of four-packed fp8 values"),
        _form(opcode, sems, fp8_ops, "e5m2x2 e4m3x2", vec="v2 v4 v8", rules=fp8_rules,
              requires=FP8, what="vector of two-packed fp8 values"),
        _form(opcode, sems, fp8_ops, "e5m2 e4m3", vec="v4 v8", rules=fp8_rules,
              requires=FP8, what="vector of fp8 values", example=_fp8_bytes_example(opcode)),
    ]
    return tuple(forms)


# --- bulk copies to multimem ---------------------------------------------------

_BULK_PATH = (slot("dst", "global"), slot("src", "shared::cta"), slot("completion", "bulk_group"))
_DST, _SRC, _SIZE = op("dst", "mem"), op("src", "mem"), op("size", "reg imm", "u32")
_ORDER = {"weak": BULK_ORDER, "relaxed": BULK_ORDER, **{s: BULK_ORDER for s in SCOPES.split()}}


def _bulk_head(sems: str) -> tuple[Slot, ...]:
    return (slot("sem", sems, optional=True, requires=_ORDER),
            slot("scope", SCOPES, optional=True, requires=_ORDER))


_BULK_RED_TYPES = "b32 b64 u32 s32 u64 s64 f32 f64 f16 bf16"
_BULK_RED_RULES = (
    Rule("op", "type", ("and", "or", "xor"), ("b32", "b64")),
    Rule("op", "type", ("add",), ("u32", "s32", "u64", "f32", "f64")),
    Rule("op", "type", ("inc", "dec"), ("u32",)),
    Rule("op", "type", ("min", "max"), ("u32", "s32", "u64", "s64", "f16", "bf16")),
)
_BULK = (
    Inst("multimem.cp.async.bulk",
         (*_bulk_head("weak relaxed"), *_BULK_PATH,
          slot("cp_mask", "cp_mask", optional=True,
               requires={"cp_mask": Requires(sm=100, ptx=(9, 1))}),
          slot("type", "b128", optional=True, requires={"b128": BULK_ORDER})),
         (_DST, _SRC, _SIZE, op("byte_mask", "reg imm", "b16", when="cp_mask")),
         requires=BULK, section=_CP_SEC, sim="multimem_cp_async_bulk",
         # ptxas: "requires '.b128' type with '.relaxed' modifier"; .weak
         # refuses .b128.
         rules=_order_rules("relaxed") + (Rule("sem", "type", ("relaxed",), ("b128",)),
                                          Rule("sem", "type", ("weak",), absent=True)),
         summary="asynchronous bulk copy from shared memory to every copy of a multimem range"),
    # Half-precision adds must say .noftz (ptxas: "Modifier '.noftz' required");
    # listed first so that its message is the one a bare .add.f16 gets.
    Inst("multimem.cp.reduce.async.bulk",
         (*_bulk_head("relaxed"), *_BULK_PATH, slot("op", "add"), slot("noftz", "noftz"),
          slot("type", "f16 bf16")),
         (_DST, _SRC, _SIZE), requires=BULK, rules=_order_rules("relaxed"), section=_CP_RED_SEC,
         sim="multimem_cp_reduce_async_bulk",
         summary="asynchronous bulk half-precision add into every copy of a multimem range"),
    Inst("multimem.cp.reduce.async.bulk",
         (*_bulk_head("relaxed"), *_BULK_PATH, slot("op", "and or xor add inc dec min max"),
          slot("type", _BULK_RED_TYPES)),
         (_DST, _SRC, _SIZE), requires=BULK, rules=_order_rules("relaxed") + _BULK_RED_RULES,
         section=_CP_RED_SEC, sim="multimem_cp_reduce_async_bulk",
         summary="asynchronous bulk reduction into every copy of a multimem range"),
)

ENTRIES: tuple[Inst, ...] = (
    *_family("multimem.ld_reduce", "weak relaxed acquire"),
    *_family("multimem.st", "weak relaxed release"),
    *_family("multimem.red", "relaxed release"),
    *_BULK,
)

"""Instruction table entries: logic, bit manipulation, comparison and selection.

PTX ISA sections "Logic and Shift Instructions", the bit-manipulation
instructions of "Integer Arithmetic Instructions" (popc, clz, bfind, fns,
brev, bfe, bfi, szext, bmsk), "Comparison and Selection Instructions" and
the half-precision comparisons. Data movement and conversion (mov, cvt,
cvta) live in :mod:`._convert`.
"""

from __future__ import annotations

from ._schema import Inst, Rule, op, slot
from ._targets import Requires
from ._common import D, A, B, C, SM53_F16

BITS = "b16 b32 b64"
INT = "u16 u32 u64 s16 s32 s64"
UINT = ("u16", "u32", "u64")
INT_CMP = "eq ne lt le gt ge lo ls hi hs"
FLT_CMP = "eq ne lt le gt ge equ neu ltu leu gtu geu num nan"
BOOLOP = "and or xor"
SET_DTYPES = "u32 s32 f32 f16 bf16"
SM90_BF16 = Requires(sm=90, ptx=(7, 8))
SM70_PTX76 = Requires(sm=70, ptx=(7, 6))

D_U32 = op("d", "reg", "u32", out=True)
SHAMT = op("b", "reg imm", "u32")
PD = op("d", "pred", out=True)
PA = op("a", "pred", neg=True)
PB = op("b", "pred", neg=True)
# setp / set: the optional BoolOp combines the comparison with predicate c.
P_OUT = op("p", "pred pair", "pred", out=True)
P_PAIR = op("p", "pair", "pred", out=True)
C_BOOL = op("c", "pred", neg=True, when="boolop")
# Bit types compare only for (in)equality; lo/ls/hi/hs are unsigned-only.
INT_CMP_RULES = (
    Rule("type", "cmp", ("b16", "b32", "b64"), ("eq", "ne")),
    Rule("cmp", "type", ("lo", "ls", "hi", "hs"), UINT),
)
SET_INT_RULES = (
    Rule("stype", "cmp", ("b16", "b32", "b64"), ("eq", "ne")),
    Rule("cmp", "stype", ("lo", "ls", "hi", "hs"), UINT),
)

_LOGIC_SEC = "9.7.8 Logic and Shift Instructions"
_INT_SEC = "9.7.1 Integer Arithmetic Instructions"
_CMP_SEC = "9.7.6 Comparison and Selection Instructions"
_HALF_CMP_SEC = "9.7.7 Half Precision Comparison Instructions"


def _logic_binary(opcode: str, summary: str) -> tuple[Inst, ...]:
    return (
        Inst(opcode, (slot("type", "pred"),), (PD, PA, PB), section=f"{_LOGIC_SEC}: {opcode}",
             sim=f"logic_{opcode}", summary=summary + " of predicates"),
        Inst(opcode, (slot("type", BITS),), (D, A, B), section=f"{_LOGIC_SEC}: {opcode}",
             sim=f"logic_{opcode}", summary=summary),
    )


def _setp_float(types: str, ftz: bool, pair: bool, requires: Requires, section: str) -> Inst:
    slots = (slot("cmp", FLT_CMP), slot("boolop", BOOLOP, optional=True),
             *((slot("ftz", "ftz", optional=True),) if ftz else ()), slot("type", types))
    return Inst("setp", slots, (P_PAIR if pair else P_OUT, A, B, C_BOOL), requires=requires,
                section=section, sim="setp",
                summary="compare, write predicates" + (" per half" if pair else ""))


def _set(cmp: str, dtypes: str, stype: str, ftz: bool, requires: Requires,
         section: str) -> Inst:
    """set.CmpOp{.BoolOp}{.ftz}.dtype.stype d, a, b{, {!}c}; ``f16``/``bf16``
    destinations hold 1.0 or 0.0 and need sm_53 / sm_90; ``.ftz`` never goes
    with a bf16 destination."""
    no_bf16 = tuple(t for t in dtypes.split() if t != "bf16")
    slots = (slot("cmp", cmp), slot("boolop", BOOLOP, optional=True),
             *((slot("ftz", "ftz", optional=True),) if ftz else ()),
             slot("dtype", dtypes, requires={"f16": SM53_F16, "bf16": SM90_BF16}),
             slot("stype", stype))
    rules = ((Rule("ftz", "dtype", (), no_bf16),) if ftz and "bf16" in dtypes.split() else ()) \
        + (SET_INT_RULES if cmp == INT_CMP else ())
    return Inst("set", slots,
                (op("d", "reg", "$dtype", out=True), op("a", "reg imm", "$stype"),
                 op("b", "reg imm", "$stype"), C_BOOL),
                requires=requires, rules=rules, section=section, sim="set",
                summary="compare, write all-ones (1.0 for float destinations) or zero")


ENTRIES: tuple[Inst, ...] = (
    # --- logic and shift ---------------------------------------------------
    *_logic_binary("and", "bitwise AND"),
    *_logic_binary("or", "bitwise OR"),
    *_logic_binary("xor", "bitwise exclusive OR"),
    Inst("not", (slot("type", "pred"),), (PD, PA), section=f"{_LOGIC_SEC}: not",
         sim="logic_not", summary="negate a predicate"),
    Inst("not", (slot("type", BITS),), (D, A), section=f"{_LOGIC_SEC}: not",
         sim="logic_not", summary="bitwise complement"),
    Inst("cnot", (slot("type", BITS),), (D, A), section=f"{_LOGIC_SEC}: cnot",
         sim="logic_cnot", summary="C logical not: 1 if a is zero, else 0"),
    Inst("lop3", (slot("type", "b32"),), (D, A, B, C, op("immLut", "imm", example="0xf8")),
         requires=Requires(sm=50, ptx=(4, 3)), section=f"{_LOGIC_SEC}: lop3",
         sim="lop3", summary="arbitrary three-input logic function given by a truth table"),
    Inst("lop3", (slot("boolop", "or and"), slot("type", "b32")),
         (op("d", "pair", "$type", out=True), A, B, C, op("immLut", "imm", example="0xf8"),
          op("q", "pred", neg=True)),
         requires=Requires(sm=70, ptx=(8, 2)), section=f"{_LOGIC_SEC}: lop3",
         sim="lop3", summary="three-input logic, also writing (d != 0) BoolOp q to a predicate"),
    Inst("shf", (slot("dir", "l r"), slot("mode", "clamp wrap"), slot("type", "b32")),
         (D, A, B, op("c", "reg imm", "u32")), requires=Requires(sm=32, ptx=(3, 1)),
         section=f"{_LOGIC_SEC}: shf", sim="shf", summary="funnel shift of the pair b:a"),
    Inst("shl", (slot("type", BITS),), (D, A, SHAMT), section=f"{_LOGIC_SEC}: shl",
         sim="shl", summary="shift left, zero-fill"),
    Inst("shr", (slot("type", BITS + " " + INT),), (D, A, SHAMT), section=f"{_LOGIC_SEC}: shr",
         sim="shr", summary="shift right; sign-fill for signed types, else zero-fill"),
    # --- bit manipulation --------------------------------------------------
    Inst("popc", (slot("type", "b32 b64"),), (D_U32, A), section=f"{_INT_SEC}: popc",
         sim="popc", summary="population count"),
    Inst("clz", (slot("type", "b32 b64"),), (D_U32, A), section=f"{_INT_SEC}: clz",
         sim="clz", summary="count leading zeros"),
    Inst("brev", (slot("type", "b32 b64"),), (D, A), section=f"{_INT_SEC}: brev",
         sim="brev", summary="bit reverse"),
    Inst("bfind", (slot("shiftamt", "shiftamt", optional=True), slot("type", "u32 u64 s32 s64")),
         (D_U32, A), section=f"{_INT_SEC}: bfind", sim="bfind",
         summary="position of the most significant non-sign bit (0xffffffff if none)"),
    Inst("fns", (slot("type", "b32"),),
         (D, op("mask", "reg imm", "b32"), op("base", "reg imm", "u32"),
          op("offset", "reg imm", "s32")),
         requires=Requires(sm=30, ptx=(6, 0)), section=f"{_INT_SEC}: fns", sim="fns",
         summary="find the n-th set bit of mask from base"),
    Inst("bfe", (slot("type", "u32 u64 s32 s64"),),
         (D, A, op("b", "reg imm", "u32"), op("c", "reg imm", "u32")),
         section=f"{_INT_SEC}: bfe", sim="bfe", summary="bit field extract (pos b, len c)"),
    Inst("bfi", (slot("type", "b32 b64"),),
         (op("f", "reg", "$type", out=True), A, B, op("c", "reg imm", "u32"),
          op("d", "reg imm", "u32")),
         section=f"{_INT_SEC}: bfi", sim="bfi", summary="bit field insert a into b (pos c, len d)"),
    Inst("szext", (slot("mode", "clamp wrap"), slot("type", "u32 s32")),
         (D, A, op("b", "reg imm", "u32")), requires=SM70_PTX76, section=f"{_INT_SEC}: szext",
         sim="szext", summary="sign- or zero-extend from bit width b"),
    Inst("bmsk", (slot("mode", "clamp wrap"), slot("type", "b32")),
         (D, op("a", "reg imm", "u32"), op("b", "reg imm", "u32")), requires=SM70_PTX76,
         section=f"{_INT_SEC}: bmsk", sim="bmsk", summary="bit mask of b bits from position a"),
    Inst("prmt", (slot("type", "b32"), slot("mode", "f4e b4e rc8 ecl ecr rc16", optional=True)),
         (D, A, B, C), section="9.7.9 Data Movement and Conversion Instructions: prmt",
         sim="prmt", summary="permute bytes of the pair b:a"),
    # --- comparison and selection ------------------------------------------
    Inst("setp", (slot("cmp", INT_CMP), slot("boolop", BOOLOP, optional=True),
                  slot("type", BITS + " " + INT)),
         (P_OUT, A, B, C_BOOL), rules=INT_CMP_RULES, section=f"{_CMP_SEC}: setp",
         sim="setp", summary="compare integers, write predicates"),
    _setp_float("f32", True, False, Requires(), f"{_CMP_SEC}: setp"),
    _setp_float("f64", False, False, Requires(), f"{_CMP_SEC}: setp"),
    _setp_float("f16", True, False, SM53_F16, f"{_HALF_CMP_SEC}: setp"),
    _setp_float("f16x2", True, True, SM53_F16, f"{_HALF_CMP_SEC}: setp"),
    _setp_float("bf16", False, False, SM90_BF16, f"{_HALF_CMP_SEC}: setp"),
    _setp_float("bf16x2", False, True, SM90_BF16, f"{_HALF_CMP_SEC}: setp"),
    _set(INT_CMP, SET_DTYPES, BITS + " " + INT, False, Requires(), f"{_CMP_SEC}: set"),
    _set(FLT_CMP, SET_DTYPES, "f32", True, Requires(), f"{_CMP_SEC}: set"),
    _set(FLT_CMP, SET_DTYPES, "f64", False, Requires(), f"{_CMP_SEC}: set"),
    _set(FLT_CMP, "f16 bf16 u16 s16 u32 s32", "f16", True, SM53_F16, f"{_HALF_CMP_SEC}: set"),
    _set(FLT_CMP, "f16x2 u32 s32", "f16x2", True, SM53_F16, f"{_HALF_CMP_SEC}: set"),
    _set(FLT_CMP, "bf16 u16 s16 u32 s32", "bf16", False, SM90_BF16, f"{_HALF_CMP_SEC}: set"),
    _set(FLT_CMP, "bf16x2 u32 s32", "bf16x2", False, SM90_BF16, f"{_HALF_CMP_SEC}: set"),
    Inst("selp", (slot("type", BITS + " " + INT + " f32 f64"),),
         (D, A, B, op("c", "pred imm", neg=True)), section=f"{_CMP_SEC}: selp", sim="selp",
         summary="select a if predicate c, else b"),
    Inst("slct", (slot("dtype", BITS + " " + INT + " f32 f64"), slot("ctype", "s32")),
         (op("d", "reg", "$dtype", out=True), op("a", "reg imm", "$dtype"),
          op("b", "reg imm", "$dtype"), op("c", "reg imm", "s32")),
         section=f"{_CMP_SEC}: slct", sim="slct", summary="select a if c >= 0, else b"),
    Inst("slct", (slot("ftz", "ftz", optional=True),
                  slot("dtype", BITS + " " + INT + " f32 f64"), slot("ctype", "f32")),
         (op("d", "reg", "$dtype", out=True), op("a", "reg imm", "$dtype"),
          op("b", "reg imm", "$dtype"), op("c", "reg imm", "f32")),
         section=f"{_CMP_SEC}: slct", sim="slct", summary="select a if c >= 0.0, else b"),
)

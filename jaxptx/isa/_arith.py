"""Instruction table entries: integer and floating-point arithmetic.

PTX ISA sections "Integer Arithmetic Instructions", "Extended-Precision
Integer Arithmetic Instructions", "Floating-Point Instructions", "Half
Precision Floating-Point Instructions".
"""

from __future__ import annotations

from ._schema import Inst, Rule, op, slot
from ._targets import Requires
from ._common import D, A, B, C, SM53_F16, SM80, SM90_PTX78
from ._fidelity import approx, ulp

INT = "u16 u32 u64 s16 s32 s64"
SINT = "s16 s32 s64"
RND = "rn rz rm rp"

D_WIDE = op("d", "reg", "$type:wide", out=True)
NARROW = "u16 u32 s16 s32"
ABC2 = (D, A, B)
ABC3 = (D, A, B, C)
XORSIGN = (Rule("xorsign", "abs"), Rule("abs", "xorsign"))
X2_INT = {"u16x2": SM90_PTX78, "s16x2": SM90_PTX78}
SM86_PTX72 = Requires(sm=86, ptx=(7, 2))
SM100_PTX86 = Requires(sm=100, ptx=(8, 6))     # packed .f32x2 arithmetic
SM100_PTX88 = Requires(sm=100, ptx=(8, 8))     # three-input min / max

_INT_SEC = "9.7.1 Integer Arithmetic Instructions"
_EXT_SEC = "9.7.2 Extended-Precision Integer Arithmetic Instructions"
_FLT_SEC = "9.7.3 Floating-Point Instructions"
_HALF_SEC = "9.7.4 Half Precision Floating-Point Instructions"


def _int_binary(opcode: str, sim: str, summary: str, types: str) -> tuple[Inst, ...]:
    return (
        Inst(opcode, (slot("type", types, requires=X2_INT),), ABC2,
             section=_INT_SEC, sim=sim, summary=summary),
        Inst(opcode, (slot("sat", "sat"), slot("type", "s32")), ABC2,
             section=_INT_SEC, sim=sim, summary=summary + ", saturating"),
    )


def _float_binary(opcode: str, sim: str, summary: str) -> tuple[Inst, ...]:
    return (
        Inst(opcode, (slot("rnd", RND, optional=True), slot("ftz", "ftz", optional=True),
                      slot("sat", "sat", optional=True), slot("type", "f32")),
             ABC2, section=_FLT_SEC, sim=sim, summary=summary),
        Inst(opcode, (slot("rnd", RND, optional=True), slot("type", "f64")),
             ABC2, section=_FLT_SEC, sim=sim, summary=summary),
        Inst(opcode, (slot("rnd", RND, optional=True), slot("ftz", "ftz", optional=True),
                      slot("type", "f32x2")),
             ABC2, requires=SM100_PTX86, section=_FLT_SEC, sim=sim, summary=summary + ", two f32 at once"),
        Inst(opcode, (slot("rnd", "rn", optional=True), slot("ftz", "ftz", optional=True),
                      slot("sat", "sat", optional=True), slot("type", "f16 f16x2")),
             ABC2, requires=SM53_F16, section=_HALF_SEC, sim=sim, summary=summary),
        Inst(opcode, (slot("rnd", "rn", optional=True), slot("type", "bf16 bf16x2")),
             ABC2, requires=Requires(sm=90, ptx=(7, 8)), section=_HALF_SEC, sim=sim,
             summary=summary),
    )


def _fma_like(opcode: str, sim: str) -> tuple[Inst, ...]:
    return (
        Inst(opcode, (slot("rnd", RND), slot("ftz", "ftz", optional=True),
                      slot("sat", "sat", optional=True), slot("type", "f32")),
             ABC3, section=_FLT_SEC, sim=sim, summary="fused multiply-add"),
        Inst(opcode, (slot("rnd", RND), slot("type", "f64")),
             ABC3, section=_FLT_SEC, sim=sim, summary="fused multiply-add"),
        Inst(opcode, (slot("rnd", RND), slot("ftz", "ftz", optional=True), slot("type", "f32x2")),
             ABC3, requires=SM100_PTX86, section=_FLT_SEC, sim=sim,
             summary="fused multiply-add, two f32 at once"),
        Inst(opcode, (slot("rnd", "rn"), slot("ftz", "ftz", optional=True),
                      slot("sat", "sat relu", optional=True, requires={"relu": SM80}),
                      slot("type", "f16 f16x2")),
             ABC3, requires=SM53_F16, section=_HALF_SEC, sim=sim, summary="fused multiply-add"),
        Inst(opcode, (slot("rnd", "rn"), slot("relu", "relu", optional=True),
                      slot("type", "bf16 bf16x2")),
             ABC3, requires=SM80, section=_HALF_SEC, sim=sim, summary="fused multiply-add"),
    )


_DOT_SEC = "9.7.1.23 Integer Arithmetic Instructions: dp4a / dp2a"
_DOT_TYPES = (slot("atype", "u32 s32"), slot("btype", "u32 s32"))
_DOT_OPS = (op("d", "reg", "b32", out=True), op("a", "reg imm", "$atype"),
            op("b", "reg imm", "$btype"), op("c", "reg imm", "b32"))
_DOT = (
    Inst("dp4a", _DOT_TYPES, _DOT_OPS, requires=Requires(sm=61, ptx=(5, 0)), section=_DOT_SEC,
         sim="dp4a", summary="four-way byte dot product accumulated into 32 bits"),
    Inst("dp2a", (slot("mode", "lo hi"), *_DOT_TYPES), _DOT_OPS,
         requires=Requires(sm=61, ptx=(5, 0)), section=_DOT_SEC, sim="dp2a",
         summary="two-way 16x8-bit dot product accumulated into 32 bits"),
)

ENTRIES: tuple[Inst, ...] = (
    *_DOT,
    *_int_binary("add", "add", "integer add", INT + " u16x2 s16x2"),
    *_int_binary("sub", "sub", "integer subtract", INT),
    *_float_binary("add", "add", "floating-point add"),
    *_float_binary("sub", "sub", "floating-point subtract"),
    *_float_binary("mul", "mul", "floating-point multiply"),
    Inst("mul", (slot("mode", "hi lo"), slot("type", INT)), ABC2,
         section=_INT_SEC, sim="mul_int", summary="integer multiply, high or low half"),
    Inst("mul", (slot("mode", "wide"), slot("type", NARROW)), (D_WIDE, A, B),
         section=_INT_SEC, sim="mul_int", summary="integer multiply, double-width result"),
    Inst("mad", (slot("mode", "hi lo"), slot("type", INT)), ABC3,
         section=_INT_SEC, sim="mad_int", summary="integer multiply-add"),
    Inst("mad", (slot("mode", "wide"), slot("type", NARROW)),
         (D_WIDE, A, B, op("c", "reg imm", "$type:wide")),
         section=_INT_SEC, sim="mad_int", summary="integer multiply-add, double-width"),
    Inst("mad", (slot("mode", "hi"), slot("sat", "sat"), slot("type", "s32")), ABC3,
         section=_INT_SEC, sim="mad_int", summary="integer multiply-add, saturating"),
    *_fma_like("fma", "fma"),
    Inst("mad", (slot("rnd", RND), slot("ftz", "ftz", optional=True),
                 slot("sat", "sat", optional=True), slot("type", "f32")),
         ABC3, section=_FLT_SEC, sim="fma", summary="floating-point multiply-add (fused)"),
    Inst("mad", (slot("rnd", RND), slot("type", "f64")),
         ABC3, section=_FLT_SEC, sim="fma", summary="floating-point multiply-add (fused)"),
    Inst("mul24", (slot("mode", "hi lo"), slot("type", "u32 s32")), ABC2,
         section=_INT_SEC, sim="mul24", summary="24-bit integer multiply"),
    Inst("mad24", (slot("mode", "hi lo"), slot("type", "u32 s32")), ABC3,
         section=_INT_SEC, sim="mad24", summary="24-bit integer multiply-add"),
    Inst("sad", (slot("type", INT),), ABC3, section=_INT_SEC, sim="sad",
         summary="sum of absolute differences"),
    Inst("div", (slot("type", INT),), ABC2, section=_INT_SEC, sim="div_int",
         summary="integer divide"),
    Inst("rem", (slot("type", INT),), ABC2, section=_INT_SEC, sim="rem",
         summary="integer remainder"),
    Inst("div", (slot("mode", "approx full"), slot("ftz", "ftz", optional=True),
                 slot("type", "f32")),
         ABC2, section=_FLT_SEC, sim="div_float", summary="approximate f32 divide",
         fidelity=(approx(ulp(2, "|b| in [2^-126, 2^126]"), when={"mode": "approx"}),
                   approx(ulp(2), when={"mode": "full"}))),
    Inst("div", (slot("rnd", RND), slot("ftz", "ftz", optional=True), slot("type", "f32")),
         ABC2, section=_FLT_SEC, sim="div_float", summary="IEEE f32 divide"),
    Inst("div", (slot("rnd", RND), slot("type", "f64")),
         ABC2, section=_FLT_SEC, sim="div_float", summary="IEEE f64 divide"),
    Inst("abs", (slot("type", SINT),), (D, A), section=_INT_SEC, sim="abs",
         summary="integer absolute value"),
    Inst("neg", (slot("type", SINT),), (D, A), section=_INT_SEC, sim="neg",
         summary="integer negate"),
    Inst("abs", (slot("ftz", "ftz", optional=True), slot("type", "f32")), (D, A),
         section=_FLT_SEC, sim="abs", summary="absolute value"),
    Inst("neg", (slot("ftz", "ftz", optional=True), slot("type", "f32")), (D, A),
         section=_FLT_SEC, sim="neg", summary="negate"),
    Inst("abs", (slot("type", "f64"),), (D, A), section=_FLT_SEC, sim="abs",
         summary="absolute value"),
    Inst("neg", (slot("type", "f64"),), (D, A), section=_FLT_SEC, sim="neg",
         summary="negate"),
    Inst("abs", (slot("ftz", "ftz", optional=True), slot("type", "f16 f16x2")), (D, A),
         requires=Requires(sm=53, ptx=(6, 5)), section=_HALF_SEC, sim="abs",
         summary="absolute value"),
    Inst("neg", (slot("ftz", "ftz", optional=True), slot("type", "f16 f16x2")), (D, A),
         requires=Requires(sm=53, ptx=(6, 0)), section=_HALF_SEC, sim="neg",
         summary="negate"),
    Inst("abs", (slot("type", "bf16 bf16x2"),), (D, A), requires=SM80,
         section=_HALF_SEC, sim="abs", summary="absolute value"),
    Inst("neg", (slot("type", "bf16 bf16x2"),), (D, A), requires=SM80,
         section=_HALF_SEC, sim="neg", summary="negate"),
    Inst("min", (slot("relu", "relu", optional=True, requires={"relu": SM90_PTX78}),
                 slot("type", INT + " u16x2 s16x2", requires=X2_INT)),
         ABC2, rules=(Rule("relu", "type", (), ("s32", "s16x2")),),
         section=_INT_SEC, sim="min", summary="integer minimum"),
    Inst("max", (slot("relu", "relu", optional=True, requires={"relu": SM90_PTX78}),
                 slot("type", INT + " u16x2 s16x2", requires=X2_INT)),
         ABC2, rules=(Rule("relu", "type", (), ("s32", "s16x2")),),
         section=_INT_SEC, sim="max", summary="integer maximum"),
    Inst("min", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("xorsign", "xorsign", optional=True, requires={"xorsign": SM86_PTX72}),
                 slot("abs", "abs", optional=True), slot("type", "f32")),
         ABC2, rules=XORSIGN, requires=Requires(ptx=(4, 0)), section=_FLT_SEC, sim="min",
         summary="floating-point minimum"),
    Inst("max", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("xorsign", "xorsign", optional=True, requires={"xorsign": SM86_PTX72}),
                 slot("abs", "abs", optional=True), slot("type", "f32")),
         ABC2, rules=XORSIGN, requires=Requires(ptx=(4, 0)), section=_FLT_SEC, sim="max",
         summary="floating-point maximum"),
    Inst("min", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("abs", "abs", optional=True), slot("type", "f32")),
         ABC3, requires=SM100_PTX88, section=_FLT_SEC, sim="min",
         summary="floating-point minimum of three values"),
    Inst("max", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("abs", "abs", optional=True), slot("type", "f32")),
         ABC3, requires=SM100_PTX88, section=_FLT_SEC, sim="max",
         summary="floating-point maximum of three values"),
    Inst("min", (slot("type", "f64"),), ABC2, section=_FLT_SEC, sim="min",
         summary="floating-point minimum"),
    Inst("max", (slot("type", "f64"),), ABC2, section=_FLT_SEC, sim="max",
         summary="floating-point maximum"),
    Inst("min", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("type", "f16 f16x2 bf16 bf16x2")),
         ABC2, requires=SM80, section=_HALF_SEC, sim="min", summary="half minimum"),
    Inst("max", (slot("ftz", "ftz", optional=True), slot("nan", "NaN", optional=True),
                 slot("type", "f16 f16x2 bf16 bf16x2")),
         ABC2, requires=SM80, section=_HALF_SEC, sim="max", summary="half maximum"),
    Inst("copysign", (slot("type", "f32 f64"),), ABC2, section=_FLT_SEC, sim="copysign",
         summary="copy the sign of a onto b"),
    Inst("add.cc", (slot("type", "u32 s32 u64 s64"),), ABC2, section=_EXT_SEC, sim="add_cc",
         summary="add, writing the carry-out", carry=True),
    Inst("addc", (slot("cc", "cc", optional=True), slot("type", "u32 s32 u64 s64")), ABC2,
         section=_EXT_SEC, sim="addc", summary="add with carry-in", carry=True),
    Inst("sub.cc", (slot("type", "u32 s32 u64 s64"),), ABC2, section=_EXT_SEC, sim="sub_cc",
         summary="subtract, writing the borrow-out", carry=True),
    Inst("subc", (slot("cc", "cc", optional=True), slot("type", "u32 s32 u64 s64")), ABC2,
         section=_EXT_SEC, sim="subc", summary="subtract with borrow-in", carry=True),
    Inst("mad", (slot("mode", "hi lo"), slot("cc", "cc"), slot("type", "u32 s32 u64 s64")), ABC3,
         section=_EXT_SEC, sim="mad_cc", summary="multiply-add, writing the carry-out", carry=True),
    Inst("madc", (slot("mode", "hi lo"), slot("cc", "cc", optional=True),
                  slot("type", "u32 s32 u64 s64")),
         ABC3, section=_EXT_SEC, sim="madc", summary="multiply-add with carry-in", carry=True),
)

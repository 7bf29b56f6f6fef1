"""Instruction table entries: data movement between registers and conversion.

PTX ISA section "Data Movement and Conversion Instructions": mov (register,
immediate, special-register and symbol-address forms, and the vector
pack/unpack forms), cvt (integer, floating-point, packed half, tf32, fp8,
fp6, fp4 and ue8m0 conversions), cvt.pack and cvta.

Which rounding and saturation modifiers a cvt accepts depends on the pair of
types; each form below covers one kind of pair so that every modifier
combination the table accepts is one ptxas accepts.
"""

from __future__ import annotations

from ._schema import Inst, Operand, Rule, Slot, op, slot
from ._targets import SM100_FAMILY, Requires
from ._common import D, A, SM80, SM90_PTX78
from ._fidelity import reading

INT = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64")
IRND = "rni rzi rmi rpi"
FRND = "rn rz rm rp"
SM80_PTX71 = Requires(sm=80, ptx=(7, 1))
# ptxas wants PTX 8.1 for these on sm_89 but takes 7.8 on sm_90; a single
# requirement cannot say both, so it says the lenient one (never a false error).
SM89_FP8 = Requires(sm=89, ptx=(7, 8))
SATFINITE = {"satfinite": Requires(ptx=(8, 1))}
# fp6 / fp4 / ue8m0 conversions: the sm_100 and sm_120 arch- and
# family-specific targets.
FP6_TARGETS = SM100_FAMILY + ("sm_120a", "sm_121a", "sm_120f", "sm_121f")
BLACKWELL_CVT = Requires(ptx=(8, 6), only=FP6_TARGETS)
# Stochastic rounding (.rs) exists on sm_100a / sm_103a only.
CVT_RS = Requires(ptx=(8, 7), only=("sm_100a", "sm_103a"))

DD = op("d", "reg", "$dtype", out=True, widen=True)
DA = op("a", "reg imm", "$atype", widen=True)
PACK_AB = (op("d", "reg", "$dtype", out=True), op("a", "reg", "$atype"),
           op("b", "reg", "$atype"))
UNPACK_A = (op("d", "reg", "$dtype", out=True), op("a", "reg", "$atype"))

_SEC = "9.7.9 Data Movement and Conversion Instructions"
_MOV, _CVT, _CVTA = f"{_SEC}: mov", f"{_SEC}: cvt", f"{_SEC}: cvta"


def _bits(t: str) -> int:
    return int(t[1:])


def _fits(src: str, dst: str) -> bool:
    """Every value of integer type ``src`` is representable in ``dst``."""
    if src[0] == dst[0]:
        return _bits(src) <= _bits(dst)
    if src[0] == "u":                       # unsigned into signed
        return _bits(src) < _bits(dst)
    return False                            # negative values never fit unsigned


def _sat_rules() -> tuple[Rule, ...]:
    """``cvt.sat`` between integers: only where the value may not fit."""
    return tuple(Rule("dtype", "atype", (d,), tuple(a for a in INT if not _fits(a, d)))
                 for d in INT)


def _cvt(slots: tuple[Slot, ...], operands: tuple[Operand, ...], summary: str,
         requires: Requires = Requires(), rules: tuple[Rule, ...] = (),
         example: str | None = None, fidelity: tuple = ()) -> Inst:
    return Inst("cvt", slots, operands, requires=requires, rules=rules, section=_CVT,
                sim="cvt", summary=summary, example=example, fidelity=fidelity)


def _cvt_float(dtype: str, atype: str, rnd: str | None, *, rnd_optional: bool = False,
               ftz: bool = False, sat: bool = False, requires: Requires = Requires(),
               ftz_requires: Requires | None = None) -> Inst:
    """One float-to-float pair: cvt{.rnd}{.ftz}{.sat}.dtype.atype d, a."""
    slots = ((slot("rnd", rnd, optional=rnd_optional),) if rnd else ()) + \
        ((slot("ftz", "ftz", optional=True,
               requires={"ftz": ftz_requires} if ftz_requires else None),) if ftz else ()) + \
        ((slot("sat", "sat", optional=True),) if sat else ()) + \
        (slot("dtype", dtype), slot("atype", atype))
    return _cvt(slots, (DD, DA), f"convert {atype} to {dtype}", requires)


def _relu_satfinite(dtype: str, atype: str, rnd: str, operands: tuple[Operand, ...],
                    requires: Requires, summary: str,
                    relu_requires: Requires | None = None) -> Inst:
    """cvt.rnd{.relu}{.satfinite}.dtype.atype (packed-half and tf32 forms)."""
    return _cvt((slot("rnd", rnd),
                 slot("relu", "relu", optional=True,
                      requires={"relu": relu_requires} if relu_requires else None),
                 slot("satfinite", "satfinite", optional=True, requires=SATFINITE),
                 slot("dtype", dtype), slot("atype", atype)),
                operands, summary, requires)


def _narrow_fp(dtype: str, atype: str, operands: tuple[Operand, ...], requires: Requires,
               summary: str, rnd: str = "rn") -> Inst:
    """cvt.rn.satfinite{.relu}.dtype.atype: into fp8 / fp6 / fp4 pairs."""
    return _cvt((slot("rnd", rnd), slot("satfinite", "satfinite"),
                 slot("relu", "relu", optional=True), slot("dtype", dtype),
                 slot("atype", atype)), operands, summary, requires)


def _widen_fp(dtype: str, atype: str, requires: Requires, summary: str) -> Inst:
    """cvt.rn{.relu}.dtype.atype: out of fp8 / fp6 pairs into f16x2."""
    return _cvt((slot("rnd", "rn"), slot("relu", "relu", optional=True),
                 slot("dtype", dtype), slot("atype", atype)), UNPACK_A, summary, requires)


# The ISA's text splits rbits into 16-bit halves for the four-value forms;
# how a pair of values shares its half is only in figures ("Random bits layout").
RS_SPLIT = reading("the PTX ISA gives operands a, b the upper 16 random bits of rbits and e, f the lower 16 "
                   "(.e2m1x4: the upper and lower byte of each half) but shows how a pair shares them only in "
                   "a figure; the emulator gives each value 8 bits, the first of a pair the more significant")


def _cvt_rs(dtype: str, d_type: str, satfinite_optional: bool) -> Inst:
    """cvt.rs{.relu}{.satfinite}.dtype.f32: stochastic rounding with rbits
    (the four-value forms follow :data:`RS_SPLIT`)."""
    vec = dtype.endswith("x4")
    srcs = ((op("a", "vec", "f32", count=4),) if vec
            else (op("a", "reg", "f32"), op("b", "reg", "f32")))
    return _cvt((slot("rnd", "rs"), slot("relu", "relu", optional=True),
                 slot("satfinite", "satfinite", optional=satfinite_optional),
                 slot("dtype", dtype), slot("atype", "f32")),
                (op("d", "reg", d_type, out=True), *srcs, op("rbits", "reg", "b32")),
                f"convert f32 to {dtype} with stochastic rounding from rbits", CVT_RS,
                fidelity=(RS_SPLIT,) if vec else ())


def _mov_vec(type_: str, elem: str, pack: bool) -> Inst:
    """mov.bN d, {a, b} (pack) or mov.bN {a, b}, d (unpack)."""
    vec = op("a" if pack else "d", "vec", elem, out=not pack, count=2)
    reg = op("d", "reg", "$type", out=True) if pack else op("a", "reg", "$type")
    req = Requires(sm=70, ptx=(8, 3)) if type_ == "b128" else Requires()
    return Inst("mov", (slot("type", type_),), (reg, vec) if pack else (vec, reg),
                requires=req, section=_MOV, sim="mov",
                summary=f"{'pack' if pack else 'unpack'} two {elem} halves "
                        f"{'into' if pack else 'of'} a {type_}")


# The fp4 pair e2m1x2 lives in an 8-bit register, which ``%{type}``
# placeholders cannot declare (they declare at least 16 bits); these forms
# declare their .b8 register inline.
_E2M1_PACK = ".reg .b8 %e2m1; cvt.rn.satfinite.relu.e2m1x2.f32 %e2m1, %{f32}, %{f32};"
_E2M1_UNPACK = ".reg .b8 %e2m1; cvt.rn.relu.f16x2.e2m1x2 %{f16x2}, %e2m1;"

ENTRIES: tuple[Inst, ...] = (
    # --- mov ---------------------------------------------------------------
    Inst("mov", (slot("type", "pred"),), (op("d", "pred", out=True), op("a", "pred imm")),
         section=_MOV, sim="mov", summary="copy a predicate"),
    Inst("mov", (slot("type", "b16 u16 s16 f32 f64"),), (D, A),
         section=_MOV, sim="mov", summary="copy a register or immediate"),
    # 32-bit symbol addresses: .shared variables (the shared window) and
    # functions; .global addresses need the 64-bit types.
    Inst("mov", (slot("type", "b32 u32 s32 b64 u64 s64"),), (D, op("a", "reg imm sym", "$type")),
         section=_MOV, sim="mov",
         summary="copy a register, immediate or special register, or take the address "
                 "of a variable or function"),
    Inst("mov", (slot("type", "b128"),), (D, op("a", "reg", "$type")),
         requires=Requires(sm=70, ptx=(8, 3)), section=_MOV, sim="mov",
         summary="copy a 128-bit register"),
    _mov_vec("b32", "b16", True),
    _mov_vec("b64", "b32", True),
    # A vector register (.reg .v4 .u16 v) moves as a whole.
    Inst("mov", (slot("vec", "v2 v4"), slot("type", "b16 u16 s16 b32 u32 s32 f32 b64 u64 s64 f64")),
         (op("d", "vec", "$type", out=True, count="$vec"), op("a", "vec", "$type", count="$vec")),
         section=_MOV, sim="mov", summary="copy a vector register"),
    _mov_vec("b128", "b64", True),
    _mov_vec("b32", "b16", False),
    _mov_vec("b64", "b32", False),
    _mov_vec("b128", "b64", False),
    # --- cvt: integers -----------------------------------------------------
    _cvt((slot("dtype", " ".join(INT)), slot("atype", " ".join(INT))), (DD, DA),
         "convert between integer types (truncate or extend)"),
    _cvt((slot("sat", "sat"), slot("dtype", " ".join(INT)), slot("atype", " ".join(INT))),
         (DD, DA), "convert between integer types, clamping to the destination range",
         rules=_sat_rules()),
    _cvt((slot("irnd", IRND), slot("ftz", "ftz", optional=True), slot("sat", "sat", optional=True),
          slot("dtype", " ".join(INT)), slot("atype", "f16 f32 f64")), (DD, DA),
         "convert float to integer with integer rounding",
         rules=(Rule("ftz", "atype", (), ("f32",)),)),
    _cvt((slot("irnd", IRND), slot("dtype", "u16 u32 u64 s16 s32 s64"), slot("atype", "bf16")),
         (DD, DA), "convert bf16 to integer with integer rounding", SM90_PTX78),
    _cvt((slot("frnd", FRND), slot("ftz", "ftz", optional=True), slot("sat", "sat", optional=True),
          slot("dtype", "f16 f32 f64"), slot("atype", " ".join(INT))), (DD, DA),
         "convert integer to float with rounding",
         rules=(Rule("ftz", "dtype", (), ("f32",)),)),
    _cvt((slot("frnd", FRND), slot("dtype", "bf16"), slot("atype", "u16 u32 u64 s16 s32 s64")),
         (DD, DA), "convert integer to bf16 with rounding", SM90_PTX78),
    # --- cvt: floating point -----------------------------------------------
    _cvt_float("f32", "f32", IRND, rnd_optional=True, ftz=True, sat=True),
    _cvt_float("f64", "f64", IRND, rnd_optional=True, sat=True),
    _cvt_float("f16", "f16", IRND, rnd_optional=True, sat=True),
    _cvt_float("bf16", "bf16", IRND, rnd_optional=True, requires=SM90_PTX78),
    _cvt_float("f32", "f16", None, ftz=True, sat=True),
    _cvt_float("f64", "f16", None, sat=True),
    _cvt_float("f64", "f32", None, ftz=True, sat=True),
    _cvt_float("f32", "bf16", FRND, rnd_optional=True, ftz=True, requires=SM80_PTX71,
               ftz_requires=SM90_PTX78),
    _cvt_float("f64", "bf16", FRND, rnd_optional=True, requires=SM90_PTX78),
    _cvt_float("f32", "f64", FRND, ftz=True, sat=True),
    _cvt_float("f16", "f32", FRND, ftz=True, sat=True),
    _cvt_float("f16", "f64", FRND, sat=True),
    _cvt_float("bf16", "f32", FRND, ftz=True, requires=SM80),
    _cvt_float("bf16", "f64", FRND, requires=SM90_PTX78),
    _cvt_float("bf16", "f16", FRND, rnd_optional=True, requires=SM90_PTX78),
    _cvt_float("f16", "bf16", FRND, rnd_optional=True, requires=SM90_PTX78),
    _relu_satfinite("f16", "f32", "rn rz", (DD, DA), Requires(sm=53, ptx=(4, 2)),
                    "convert f32 to f16, optionally clamping negatives and saturating",
                    relu_requires=SM80),
    _relu_satfinite("bf16", "f32", "rn rz", (DD, DA), SM80,
                    "convert f32 to bf16, optionally clamping negatives and saturating"),
    _relu_satfinite("f16x2 bf16x2", "f32", "rn rz", PACK_AB, SM80,
                    "convert two f32 into a packed pair (a in the upper half)"),
    # --- cvt: tf32 ---------------------------------------------------------
    _cvt((slot("rnd", "rna"), slot("satfinite", "satfinite", optional=True, requires=SATFINITE),
          slot("dtype", "tf32"), slot("atype", "f32")),
         (op("d", "reg", "$dtype", out=True), op("a", "reg", "$atype")),
         "round f32 to tf32 (nearest, ties away from zero)", SM80),
    _cvt((slot("rnd", "rn rz"), slot("relu", "relu", optional=True),
          slot("satfinite", "satfinite", optional=True,
               requires={"satfinite": Requires(sm=100, ptx=(8, 6))}),
          slot("dtype", "tf32"), slot("atype", "f32")),
         (op("d", "reg", "$dtype", out=True), op("a", "reg", "$atype")),
         "round f32 to tf32", SM90_PTX78),
    # --- cvt: fp8 ----------------------------------------------------------
    _narrow_fp("e4m3x2 e5m2x2", "f32", PACK_AB, SM89_FP8,
               "convert two f32 into a packed fp8 pair (a in the upper byte)"),
    _narrow_fp("e4m3x2 e5m2x2", "f16x2", UNPACK_A, SM89_FP8,
               "convert a packed f16 pair into a packed fp8 pair"),
    _widen_fp("f16x2", "e4m3x2 e5m2x2", SM89_FP8, "convert a packed fp8 pair to f16x2"),
    # --- cvt: fp6, fp4, ue8m0 (sm_100 / sm_120 families) -------------------
    _narrow_fp("e2m3x2 e3m2x2", "f32", PACK_AB, BLACKWELL_CVT,
               "convert two f32 into a packed fp6 pair"),
    _widen_fp("f16x2", "e2m3x2 e3m2x2", BLACKWELL_CVT, "convert a packed fp6 pair to f16x2"),
    _cvt((slot("rnd", "rn"), slot("satfinite", "satfinite"), slot("relu", "relu", optional=True),
          slot("dtype", "e2m1x2"), slot("atype", "f32")), PACK_AB,
         "convert two f32 into a packed fp4 pair (one byte)", BLACKWELL_CVT,
         example=_E2M1_PACK),
    _cvt((slot("rnd", "rn"), slot("relu", "relu", optional=True), slot("dtype", "f16x2"),
          slot("atype", "e2m1x2")), UNPACK_A, "convert a packed fp4 pair to f16x2",
         BLACKWELL_CVT, example=_E2M1_UNPACK),
    _cvt((slot("rnd", "rz rp"), slot("satfinite", "satfinite", optional=True),
          slot("dtype", "ue8m0x2"), slot("atype", "f32")), PACK_AB,
         "convert two f32 into a packed ue8m0 (scale factor) pair", BLACKWELL_CVT),
    _cvt((slot("rnd", "rz rp"), slot("satfinite", "satfinite", optional=True),
          slot("dtype", "ue8m0x2"), slot("atype", "bf16x2")), UNPACK_A,
         "convert a packed bf16 pair into a packed ue8m0 pair", BLACKWELL_CVT),
    _cvt((slot("rnd", "rn"), slot("dtype", "bf16x2"), slot("atype", "ue8m0x2")), UNPACK_A,
         "convert a packed ue8m0 pair to bf16x2", BLACKWELL_CVT),
    _cvt_rs("f16x2 bf16x2", "$dtype", True),
    _cvt_rs("e4m3x4 e5m2x4 e2m3x4 e3m2x4", "b32", False),
    _cvt_rs("e2m1x4", "b16", False),
    # --- cvt.pack ----------------------------------------------------------
    Inst("cvt.pack", (slot("sat", "sat"), slot("dtype", "u16 s16"), slot("atype", "s32")),
         (op("d", "reg", "b32", out=True), op("a", "reg imm", "s32"), op("b", "reg imm", "s32")),
         requires=Requires(sm=72, ptx=(6, 5)), section=f"{_SEC}: cvt.pack", sim="cvt_pack",
         summary="saturate two s32 to 16 bits and pack them (a in the upper half)"),
    Inst("cvt.pack", (slot("sat", "sat"), slot("dtype", "u2 s2 u4 s4 u8 s8"),
                      slot("atype", "s32"), slot("ctype", "b32")),
         (op("d", "reg", "b32", out=True), op("a", "reg imm", "s32"), op("b", "reg imm", "s32"),
          op("c", "reg imm", "b32")),
         requires=Requires(sm=72, ptx=(6, 5)), section=f"{_SEC}: cvt.pack", sim="cvt_pack",
         summary="saturate two s32 to narrow integers and pack them above the low bits of c"),
    # --- cvta --------------------------------------------------------------
    Inst("cvta", (slot("to", "to", optional=True),
                  slot("space", "global shared shared::cta shared::cluster local const param "
                                "param::entry",
                       requires={"shared::cta": Requires(ptx=(7, 8)),
                                 "shared::cluster": SM90_PTX78,
                                 "param": Requires(ptx=(7, 7)),
                                 "param::entry": Requires(ptx=(8, 3))}),
                  slot("size", "u64")),
         (op("d", "reg", "$size", out=True), op("a", "reg sym", "$size")),
         section=_CVTA, sim="cvta",
         summary="convert between a state-space address and a generic address"),
)

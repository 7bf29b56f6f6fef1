"""Instruction table entries: the video instructions.

PTX ISA sections "Scalar Video Instructions" (vadd, vsub, vabsdiff, vmin,
vmax, vshl, vshr, vmad, vset) and "SIMD Video Instructions" (the two-way
half-word forms vadd2 ... vset2 and the four-way byte forms vadd4 ... vset4).

The byte/half-word selectors of these instructions are written on the
operands, not the opcode (``vadd.s32.u32.s32 %r1.h0, %r2.b3, %r3, %r4``): the
parser reads ``%r2.b3`` as a register of ``%r2``'s type, so the table types
operands as plain 32-bit registers and the emulator reads the selector from
the operand. A destination selector makes the scalar forms merge into ``c``
(and needs the fourth operand); on the SIMD forms it is the lane mask.
"""

from __future__ import annotations

from ._schema import Inst, Rule, op, slot
from ._targets import Requires

TYPES32 = "u32 s32"
SECOP = "add min max"
VIDEO_CMP = "eq ne lt le gt ge"
SCALAR_OPS = ("vadd", "vsub", "vabsdiff", "vmin", "vmax")
SIMD_OPS = ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax")
# PTX ISA 2.0 / sm_20 for the scalar forms, 3.0 / sm_30 for the SIMD ones.
SCALAR_REQ = Requires(sm=20, ptx=(2, 0))
SIMD_REQ = Requires(sm=30, ptx=(3, 0))

_SCALAR_SEC = "9.7.18.1 Scalar Video Instructions"
_SIMD_SEC = "9.7.18.2 SIMD Video Instructions"

D = op("d", "reg", "$dtype", out=True)
D_U32 = op("d", "reg", "u32", out=True)
A = op("a", "reg imm", "$atype")
B = op("b", "reg imm", "$btype")
C = op("c", "reg imm", "$dtype")
C_U32 = op("c", "reg imm", "u32")
# SIMD sources must be registers: ptxas rejects an immediate ("Incorrect
# video selector for operand N").
A_REG = op("a", "reg", "$atype")
B_REG = op("b", "reg", "$btype")
C_REG = op("c", "reg", "$dtype")
C_REG_U32 = op("c", "reg", "u32")


def _scalar(opcode: str, sim: str, summary: str, *, mode: bool = False) -> tuple[Inst, ...]:
    """``vop.dtype.atype.btype{.sat}{.mode}`` with an optional merge
    (``d.dsel, a, b, c``) and, as a second form, the secondary operation
    ``.add/.min/.max`` (``d, a, b, c``). Shifts take a ``.u32`` shift amount
    and a ``.clamp``/``.wrap`` mode."""
    btype = slot("btype", "u32") if mode else slot("btype", TYPES32)
    head = (slot("dtype", TYPES32), slot("atype", TYPES32), btype, slot("sat", "sat", optional=True),
            *((slot("mode", "clamp wrap"),) if mode else ()))
    section = f"{_SCALAR_SEC}: {opcode}"
    return (
        Inst(opcode, head, (D, A, B, op("c", "reg imm", "$dtype", optional=True)),
             requires=SCALAR_REQ, section=section, sim=sim,
             summary=summary + "; with d.dsel, merge the byte/half-word result into c"),
        Inst(opcode, (*head, slot("secop", SECOP)), (D, A, B, C), requires=SCALAR_REQ,
             section=section, sim=sim, summary=summary + ", then .add/.min/.max with c"),
    )


def _simd(opcode: str, lanes: int, sim: str, summary: str) -> Inst:
    """``vop2``/``vop4``: per-lane op with ``.sat`` and a merge into ``c``, or
    ``.add`` accumulating the lanes into ``c`` (``.sat`` and ``.add`` exclude
    each other)."""
    slots = (slot("dtype", TYPES32), slot("atype", TYPES32), slot("btype", TYPES32),
             slot("sat", "sat", optional=True), slot("add", "add", optional=True))
    return Inst(opcode, slots, (D, A_REG, B_REG, C_REG), requires=SIMD_REQ,
                rules=(Rule("sat", "add", absent=True),), section=f"{_SIMD_SEC}: {opcode}",
                sim=sim, summary=f"{lanes}-way SIMD {summary}, merged into c or accumulated (.add)")


def _simd_set(opcode: str, lanes: int) -> Inst:
    slots = (slot("atype", TYPES32), slot("btype", TYPES32), slot("cmp", VIDEO_CMP),
             slot("add", "add", optional=True))
    return Inst(opcode, slots, (D_U32, A_REG, B_REG, C_REG_U32), requires=SIMD_REQ,
                section=f"{_SIMD_SEC}: {opcode}", sim=f"video{lanes}_set",
                summary=f"{lanes}-way SIMD compare (1 or 0 per lane), merged into c or accumulated (.add)")


_SCALAR_SUMMARY = {"vadd": "a + b", "vsub": "a - b", "vabsdiff": "|a - b|", "vmin": "min(a, b)",
                   "vmax": "max(a, b)"}
_SIMD_SUMMARY = {"vadd": "a + b", "vsub": "a - b", "vavrg": "rounded average of a and b",
                 "vabsdiff": "|a - b|", "vmin": "min(a, b)", "vmax": "max(a, b)"}

ENTRIES: tuple[Inst, ...] = (
    *(e for name in SCALAR_OPS
      for e in _scalar(name, f"video_{name[1:]}",
                       f"{_SCALAR_SUMMARY[name]} of selected bytes/half-words, optional .sat")),
    *_scalar("vshl", "video_shl", "a << b (amount .clamp'ed to 32 or .wrap'ped mod 32)", mode=True),
    *_scalar("vshr", "video_shr", "a >> b (amount .clamp'ed to 32 or .wrap'ped mod 32)", mode=True),
    Inst("vmad", (slot("dtype", TYPES32), slot("atype", TYPES32), slot("btype", TYPES32),
                  slot("po", "po", optional=True), slot("sat", "sat", optional=True),
                  slot("scale", "shr7 shr15", optional=True)),
         (D, A, B, C), requires=SCALAR_REQ, section=f"{_SCALAR_SEC}: vmad", sim="video_mad",
         summary="a * b + c (+1 with .po), optionally shifted right 7/15 and saturated"),
    Inst("vset", (slot("atype", TYPES32), slot("btype", TYPES32), slot("cmp", VIDEO_CMP)),
         (D_U32, A, B, op("c", "reg imm", "u32", optional=True)), requires=SCALAR_REQ,
         section=f"{_SCALAR_SEC}: vset", sim="video_set",
         summary="compare selected bytes/half-words, 1 or 0; with d.dsel, merge into c"),
    Inst("vset", (slot("atype", TYPES32), slot("btype", TYPES32), slot("cmp", VIDEO_CMP),
                  slot("secop", SECOP)),
         (D_U32, A, B, C_U32), requires=SCALAR_REQ, section=f"{_SCALAR_SEC}: vset",
         sim="video_set", summary="compare, 1 or 0, then .add/.min/.max with c"),
    *(_simd(f"{name}{n}", n, f"video{n}_{name[1:]}", _SIMD_SUMMARY[name])
      for n in (2, 4) for name in SIMD_OPS),
    _simd_set("vset2", 2),
    _simd_set("vset4", 4),
)

"""Instruction table entries: Ampere-era warp-level data movement and MMA.

PTX ISA sections "Data Movement and Conversion Instructions: cp.async",
"cp.async.commit_group", "cp.async.wait_group / cp.async.wait_all",
"Parallel Synchronization and Communication Instructions:
cp.async.mbarrier.arrive", "Warp Level Matrix Multiply-Accumulate
Instructions: ldmatrix / stmatrix / mma".

``mma`` fragment sizes follow "Matrix Fragments for mma.m*n*k*": every thread
of the warp holds ``M*K/32`` elements of A, ``K*N/32`` of B and ``M*N/32`` of
C/D (the ``m8n8k4`` f16 shape is computed by quad-pairs of 8 threads), packed
into 32-bit registers (64-bit for ``.f64``). A and B fragments are ``.b32``
registers; C/D are ``.f32``, ``.f16x2``, ``.s32`` or ``.f64`` registers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..types import TYPES
from ._schema import Inst, Slot, op, slot
from ._targets import SM100_FAMILY, Requires
from ._common import SM80, SM90_PTX78
from ._fidelity import F64_MMA, FLOAT_MMA, reading

SM75 = Requires(sm=75, ptx=(6, 5))
SM89_PTX84 = Requires(sm=89, ptx=(8, 4))
SM89_PTX87 = Requires(sm=89, ptx=(8, 7))
PTX78 = Requires(ptx=(7, 8))
# ldmatrix.m16n16 / m8n16 and stmatrix.m16n8 (8-bit and packed 6/4-bit).
NARROW_MATRIX = Requires(sm=100, ptx=(8, 6), only=(*SM100_FAMILY, "sm_120a", "sm_121a",
                                                   "sm_120f", "sm_121f"))

# Section titles carry the chapter number only (9.7.9 data movement, 9.7.13
# parallel synchronization, 9.7.14 warp-level matrix instructions).
_CP_SEC = "9.7.9 Data Movement and Conversion Instructions: cp.async"
_CP_GROUP_SEC = "9.7.9 Data Movement and Conversion Instructions: cp.async.commit_group"
_CP_WAIT_SEC = ("9.7.9 Data Movement and Conversion Instructions: "
                "cp.async.wait_group / cp.async.wait_all")
_CP_MBAR_SEC = ("9.7.13 Parallel Synchronization and Communication Instructions: "
                "cp.async.mbarrier.arrive")
_LDM_SEC = "9.7.14 Warp Level Matrix Multiply-Accumulate Instructions: ldmatrix"
_STM_SEC = "9.7.14 Warp Level Matrix Multiply-Accumulate Instructions: stmatrix"
_MMA_SEC = "9.7.14 Warp Level Matrix Multiply-Accumulate Instructions: mma"

SYNC = (slot("sync", "sync"), slot("aligned", "aligned"))
SHARED_CTA = {"shared::cta": PTX78}

# --- vector-length rules ---------------------------------------------------

_SHAPE_RE = re.compile(r"^m(\d+)n(\d+)k(\d+)$")


def _mma_dims(values: Mapping[str, str]) -> tuple[int, int, int, int]:
    """(M, N, K, threads sharing one matrix) of an mma shape."""
    m = _SHAPE_RE.match(values["shape"])
    assert m is not None, values["shape"]
    dims = tuple(int(g) for g in m.groups())
    threads = 8 if values["shape"] == "m8n8k4" and values.get("atype") == "f16" else 32
    return dims[0], dims[1], dims[2], threads


def _regs(elements: int, type_name: str) -> int:
    """32-bit registers (64-bit for f64) that hold ``elements`` of a type."""
    if type_name == "f64":
        return elements
    return max(1, elements * TYPES[type_name].bits // 32)


def mma_a(values: Mapping[str, str]) -> int:
    """Registers in the A fragment of ``mma``."""
    m, _, k, threads = _mma_dims(values)
    return _regs(m * k // threads, values["atype"])


def mma_b(values: Mapping[str, str]) -> int:
    """Registers in the B fragment of ``mma``."""
    _, n, k, threads = _mma_dims(values)
    return _regs(k * n // threads, values["btype"])


def mma_c(values: Mapping[str, str]) -> int:
    """Registers in the C fragment of ``mma`` (f16 accumulators pack in pairs)."""
    m, n, _, threads = _mma_dims(values)
    return _regs(m * n // threads, values["ctype"])


def mma_d(values: Mapping[str, str]) -> int:
    """Registers in the D fragment of ``mma``."""
    m, n, _, threads = _mma_dims(values)
    return _regs(m * n // threads, values["dtype"])


_MATRICES = {"x1": 1, "x2": 2, "x4": 4}


def ldmatrix_regs(values: Mapping[str, str]) -> int:
    """Registers of ``ldmatrix``/``stmatrix``: one per 8x8 b16 matrix; the
    16x16 b8 matrices of ``m16n16`` take two each."""
    per = 2 if values["shape"] == "m16n16" else 1
    return _MATRICES[values["num"]] * per


COUNTS = {
    "mma_a": mma_a, "mma_b": mma_b, "mma_c": mma_c, "mma_d": mma_d,
    "ldmatrix_regs": ldmatrix_regs,
}

# --- cp.async ----------------------------------------------------------------

_CP_SLOTS = (slot("cache", "ca cg"), slot("space", "shared shared::cta", requires=SHARED_CTA),
             slot("src", "global"),
             slot("hint", "L2::cache_hint", optional=True,
                  requires={"L2::cache_hint": Requires(ptx=(7, 4))}),
             slot("prefetch", "L2::64B L2::128B L2::256B", optional=True,
                  requires={v: Requires(ptx=(7, 4)) for v in ("L2::64B", "L2::128B", "L2::256B")}))
_DST = op("dst", "mem")
_SRC = op("src", "mem")
# .ca copies 4, 8 or 16 bytes; .cg only 16.
_CP_SIZE = op("cp_size", "imm", "u32", example="16")
_POLICY = op("cache_policy", "reg", "b64", when="hint")

# --- ldmatrix / stmatrix -----------------------------------------------------

_LDM_P = op("p", "mem")
_SS = slot("ss", "shared shared::cta", optional=True, requires=SHARED_CTA)
_LDM_SUMMARY = "load matrices from shared memory into warp fragments"
_STM_SUMMARY = "store warp fragments as matrices to shared memory"


def _ldmatrix(shape: str, num: str, trans: str, types: tuple[tuple[str, str], ...],
              requires: Requires) -> Inst:
    """``trans``: "optional", "required" or "none"."""
    trans_slot = () if trans == "none" else (slot("trans", "trans", optional=trans == "optional"),)
    type_slots = tuple(slot(name, values) for name, values in types)
    return Inst("ldmatrix", (*SYNC, slot("shape", shape), slot("num", num), *trans_slot, _SS,
                             *type_slots),
                (op("d", "vec", "b32", out=True, count="ldmatrix_regs"), _LDM_P),
                requires=requires, section=_LDM_SEC, sim="ldmatrix", summary=_LDM_SUMMARY)


def _stmatrix(shape: str, type_: str, requires: Requires, trans_required: bool) -> Inst:
    return Inst("stmatrix", (*SYNC, slot("shape", shape), slot("num", "x1 x2 x4"),
                             slot("trans", "trans", optional=not trans_required), _SS,
                             slot("type", type_)),
                (_LDM_P, op("r", "vec", "b32", count="ldmatrix_regs")), requires=requires,
                section=_STM_SEC, sim="stmatrix", summary=_STM_SUMMARY)


_UNPACK = (("dst_fmt", "b8x16"), ("src_fmt", "b6x16_p32 b4x16_p64"))
_LDMATRIX = (
    _ldmatrix("m8n8", "x1 x2 x4", "optional", (("type", "b16"),), SM75),
    # 16x16 bytes per matrix, transposed on load; two registers per matrix.
    _ldmatrix("m16n16", "x1 x2", "required", (("type", "b8"),), NARROW_MATRIX),
    _ldmatrix("m16n16", "x1 x2", "required", _UNPACK, NARROW_MATRIX),
    # 6- and 4-bit elements unpacked to one byte each.
    _ldmatrix("m8n16", "x1 x2 x4", "none", _UNPACK, NARROW_MATRIX),
)

# --- mma -----------------------------------------------------------------------


# Accumulator register type per C/D type: f16 accumulators pack in pairs.
_ACC = {"f32": "f32", "f16": "f16x2", "s32": "s32", "f64": "f64"}


def _age(req: Requires) -> tuple[int, tuple[int, int]]:
    return req.sm, req.ptx


def _mma(shapes: dict[str, Requires], dtype: str, atypes: str, btypes: str, ctype: str,
         *, ab: str = "b32", layouts: tuple[str, str] = ("row", "col"),
         extra: tuple[Slot, ...] = (), tail: tuple[Slot, ...] = (),
         summary: str = "warp-level matrix multiply-accumulate") -> Inst:
    """One mma form; the form-wide requirement is that of its oldest shape."""
    lowest = sorted(shapes.values(), key=_age)[0]
    return Inst(
        "mma",
        (*SYNC, slot("shape", " ".join(shapes), requires=shapes),
         slot("alayout", layouts[0]), slot("blayout", layouts[1]), *extra,
         slot("dtype", dtype), slot("atype", atypes), slot("btype", btypes),
         slot("ctype", ctype), *tail),
        (op("d", "vec", _ACC[dtype], out=True, count="mma_d"), op("a", "vec", ab, count="mma_a"),
         op("b", "vec", ab, count="mma_b"), op("c", "vec", _ACC[ctype], count="mma_c")),
        requires=lowest, section=_MMA_SEC, sim="mma_sync", summary=summary, fidelity=MMA_FIDELITY)


# Floating-point D: the sums' order and precision are the emulator's reading.
MMA_FIDELITY = (reading(FLOAT_MMA, when={"dtype": "f32 f16"}), reading(F64_MMA, when={"dtype": "f64"}))
_F16_SHAPES = {"m16n8k8": SM75, "m16n8k16": SM80}
_I8_SHAPES = {"m8n8k16": SM75, "m16n8k16": SM80, "m16n8k32": SM80}
_I4_SHAPES = {"m8n8k32": SM75, "m16n8k32": SM80, "m16n8k64": SM80}
_B1_SHAPES = {"m8n8k128": Requires(sm=75, ptx=(7, 0)), "m16n8k128": SM80, "m16n8k256": SM80}
_F8_SHAPES = {"m16n8k16": SM89_PTX87, "m16n8k32": SM89_PTX84}
_F8_F16_SHAPES = {"m16n8k16": SM89_PTX87, "m16n8k32": SM89_PTX87}
_F64_SHAPES = {"m8n8k4": SM80, "m16n8k4": SM90_PTX78, "m16n8k8": SM90_PTX78,
               "m16n8k16": SM90_PTX78}
_SATFINITE = (slot("satfinite", "satfinite", optional=True),)
_BITOP = (slot("bitop", "xor and", requires={"and": Requires(sm=80, ptx=(7, 1))}),
          slot("popc", "popc"))
_INT_SUMMARY = "warp-level integer matrix multiply-accumulate"
_F8_SUMMARY = "warp-level fp8 matrix multiply-accumulate"

_MMA = (
    # C and D have the same type for these shapes (ptxas: ".dtype must be
    # '.f16' when .ctype is '.f16'").
    _mma(_F16_SHAPES, "f32", "f16", "f16", "f32"),
    _mma(_F16_SHAPES, "f16", "f16", "f16", "f16"),
    _mma({"m16n8k8": SM80, "m16n8k16": SM80}, "f32", "bf16", "bf16", "f32"),
    _mma({"m16n8k4": SM80, "m16n8k8": SM80}, "f32", "tf32", "tf32", "f32"),
    _mma(_I8_SHAPES, "s32", "s8 u8", "s8 u8", "s32", extra=_SATFINITE, summary=_INT_SUMMARY),
    _mma(_I4_SHAPES, "s32", "s4 u4", "s4 u4", "s32", extra=_SATFINITE, summary=_INT_SUMMARY),
    _mma(_B1_SHAPES, "s32", "b1", "b1", "s32", tail=_BITOP,
         summary="warp-level single-bit matrix multiply-accumulate (popcount of AND/XOR)"),
    _mma(_F8_SHAPES, "f32", "e4m3 e5m2", "e4m3 e5m2", "f32", summary=_F8_SUMMARY),
    _mma(_F8_F16_SHAPES, "f16", "e4m3 e5m2", "e4m3 e5m2", "f16", summary=_F8_SUMMARY),
    _mma(_F64_SHAPES, "f64", "f64", "f64", "f64", ab="f64",
         summary="warp-level f64 matrix multiply-accumulate"),
    # m8n8k4 (quad-pairs; any layouts; f32 D may take f16 C, not the reverse).
    *(_mma({"m8n8k4": Requires(sm=70, ptx=(6, 4))}, d, "f16", "f16", c,
           layouts=("row col", "row col"), summary="quad-pair f16 matrix multiply-accumulate")
      for d, c in (("f32", "f32"), ("f32", "f16"), ("f16", "f16"))),
)


ENTRIES: tuple[Inst, ...] = (
    Inst("cp.async", _CP_SLOTS, (_DST, _SRC, _CP_SIZE, _POLICY), requires=SM80,
         section=_CP_SEC, sim="cp_async",
         summary="asynchronous global to shared copy of 4, 8 or 16 bytes"),
    # The fourth operand is src-size (bytes actually read, rest zero-filled)
    # or, as a predicate, ignore-src (PTX 7.5: copy zeros when true).
    Inst("cp.async", _CP_SLOTS,
         (_DST, _SRC, _CP_SIZE, op("src_size", "reg imm pred", "u32", neg=True), _POLICY),
         requires=SM80, section=_CP_SEC, sim="cp_async",
         summary="asynchronous global to shared copy, partially zero-filled"),
    Inst("cp.async.commit_group", requires=SM80, section=_CP_GROUP_SEC,
         sim="cp_async_commit_group", summary="commit pending cp.async operations as a group"),
    Inst("cp.async.wait_group", (), (op("n", "imm", "u32", example="0"),), requires=SM80,
         section=_CP_WAIT_SEC, sim="cp_async_wait_group",
         summary="wait until at most n cp.async groups are pending"),
    Inst("cp.async.wait_all", requires=SM80, section=_CP_WAIT_SEC, sim="cp_async_wait_group",
         summary="wait for all cp.async operations"),
    Inst("cp.async.mbarrier.arrive",
         (slot("noinc", "noinc", optional=True),
          slot("space", "shared shared::cta", optional=True, requires=SHARED_CTA),
          slot("type", "b64")),
         (op("addr", "mem"),), requires=SM80, section=_CP_MBAR_SEC,
         sim="cp_async_mbarrier_arrive",
         summary="arrive on an mbarrier when this thread's cp.async operations complete"),
    *_LDMATRIX,
    _stmatrix("m8n8", "b16", SM90_PTX78, trans_required=False),
    _stmatrix("m16n8", "b8", NARROW_MATRIX, trans_required=True),
    *_MMA,
)

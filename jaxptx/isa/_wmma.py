"""Instruction table entries: the warp-level matrix instructions ``wmma.load``,
``wmma.store`` and ``wmma.mma`` (PTX ISA 9.7.14.4 "Matrix Shape", "Matrix
Data-types", "Matrix Fragments for WMMA", "wmma.load", "wmma.store",
"wmma.mma").

Each thread of the warp holds ``rows * cols / 32`` elements of a fragment,
packed into 32-bit registers (``.f64``: one per register) — except the ``.f16``
A and B fragments, which always hold 16 elements (8 ``.f16x2`` registers),
so that small shapes are replicated across the warp. A and B fragments are
``.b32`` registers (``.f64`` for f64); C and D are ``.f16x2``, ``.f32``,
``.s32`` or ``.f64``. Which element a register holds is left unspecified by
PTX; the emulator's choice is documented in :mod:`jaxptx.sim.semantics.wmma`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..types import TYPES
from ._ampere import MMA_FIDELITY, SHARED_CTA, SYNC
from ._schema import Inst, op, slot
from ._targets import Requires

__all__ = ["ENTRIES", "COUNTS", "fragment_elements", "matrix_dims"]

_SEC = "9.7.14.4 Warp Level Matrix Multiply-Accumulate Instructions: wmma.{}"
_DIMS = {"m16n16k16": (16, 16, 16), "m8n32k16": (8, 32, 16), "m32n8k16": (32, 8, 16),
         "m16n16k8": (16, 16, 8), "m8n8k4": (8, 8, 4), "m8n8k32": (8, 8, 32), "m8n8k128": (8, 8, 128)}

_F16 = Requires(sm=70, ptx=(6, 0))
_F16_WIDE = Requires(sm=70, ptx=(6, 1))         # m8n32k16, m32n8k16
_INT8 = Requires(sm=72, ptx=(6, 3))
_SUBBYTE = Requires(sm=75, ptx=(6, 3))          # s4 / u4 / b1 (experimental in the ISA)
_AMPERE = Requires(sm=80, ptx=(7, 0))           # bf16, tf32, f64
_THREE_SHAPES = "m16n16k16 m8n32k16 m32n8k16"
_SHAPE_REQ = {"m8n32k16": _F16_WIDE, "m32n8k16": _F16_WIDE}


def matrix_dims(shape: str, frag: str) -> tuple[int, int]:
    """(rows, cols) of fragment ``frag`` (``a``, ``b``, ``c`` or ``d``) of ``shape``."""
    m, n, k = _DIMS[shape]
    return {"a": (m, k), "b": (k, n)}.get(frag, (m, n))


def fragment_elements(shape: str, frag: str, type_name: str) -> int:
    """Elements of ``frag`` each thread holds."""
    if type_name == "f16" and frag in ("a", "b"):
        return 16
    rows, cols = matrix_dims(shape, frag)
    return rows * cols // 32


def _registers(shape: str, frag: str, type_name: str) -> int:
    elements = fragment_elements(shape, frag, type_name)
    return elements if type_name == "f64" else max(1, elements * TYPES[type_name].bits // 32)


def wmma_regs(values: Mapping[str, str]) -> int:
    """Registers of a ``wmma.load`` / ``wmma.store`` fragment."""
    return _registers(values["shape"], values.get("frag", "d"), values["type"])


def _rule(frag: str, key: str) -> Callable[[Mapping[str, str]], int]:
    def count(values: Mapping[str, str]) -> int:
        # The f16 forms name only dtype and ctype: A and B are f16.
        return _registers(values["shape"], frag, values.get(key, "f16"))
    count.__doc__ = f"Registers of the {frag.upper()} fragment of ``wmma.mma``."
    return count


COUNTS = {"wmma_regs": wmma_regs, "wmma_a": _rule("a", "atype"), "wmma_b": _rule("b", "btype"),
          "wmma_c": _rule("c", "ctype"), "wmma_d": _rule("d", "dtype")}

_SS = slot("ss", "global shared shared::cta", optional=True, requires=SHARED_CTA)
_P = op("p", "mem")
_STRIDE = op("stride", "reg imm", "u32", optional=True)
# Register type of a fragment's registers, by element type.
_REG = {"f16": "f16x2", "f32": "f32", "s32": "s32", "f64": "f64"}


def _load(frag: str, shapes: str, types: str, reg: str, requires: Requires,
          layout: str = "row col") -> Inst:
    return Inst("wmma.load", (slot("frag", frag), *SYNC, slot("layout", layout),
                              slot("shape", shapes, requires=_SHAPE_REQ), _SS, slot("type", types)),
                (op("r", "vec", reg, out=True, count="wmma_regs"), _P, _STRIDE),
                requires=requires, section=_SEC.format("load"), sim="wmma_load",
                summary=f"load the {frag.upper()} fragment of a warp-level matrix multiply")


def _store(shapes: str, types: str, requires: Requires) -> Inst:
    return Inst("wmma.store", (slot("frag", "d"), *SYNC, slot("layout", "row col"),
                               slot("shape", shapes, requires=_SHAPE_REQ), _SS, slot("type", types)),
                (_P, op("r", "vec", _REG[types.split()[0]], count="wmma_regs"), _STRIDE),
                requires=requires, section=_SEC.format("store"), sim="wmma_store",
                summary="store the D fragment of a warp-level matrix multiply")


def _mma(shapes: str, slots: tuple, ab: str, cd: tuple[str, str], requires: Requires,
         layouts: tuple[str, str] = ("row col", "row col"), head: tuple = ()) -> Inst:
    d_reg, c_reg = cd
    return Inst("wmma.mma", (*head, *SYNC, slot("alayout", layouts[0]), slot("blayout", layouts[1]),
                             slot("shape", shapes, requires=_SHAPE_REQ), *slots),
                (op("d", "vec", d_reg, out=True, count="wmma_d"), op("a", "vec", ab, count="wmma_a"),
                 op("b", "vec", ab, count="wmma_b"), op("c", "vec", c_reg, count="wmma_c")),
                requires=requires, section=_SEC.format("mma"), sim="wmma_mma",
                summary="warp-level matrix multiply-accumulate", fidelity=MMA_FIDELITY)


_SATFINITE = slot("satfinite", "satfinite", optional=True)
_ROW, _COL = "row", "col"

ENTRIES: tuple[Inst, ...] = (
    # f16 (C / D in f16 or f32)
    _load("a b", _THREE_SHAPES, "f16", "b32", _F16),
    _load("c", _THREE_SHAPES, "f16", "f16x2", _F16),
    _load("c", _THREE_SHAPES, "f32", "f32", _F16),
    _store(_THREE_SHAPES, "f16", _F16),
    _store(_THREE_SHAPES, "f32", _F16),
    *(_mma(_THREE_SHAPES, (slot("dtype", d), slot("ctype", c)), "b32", (_REG[d], _REG[c]), _F16)
      for d in ("f16", "f32") for c in ("f16", "f32")),
    # 8-bit integers (C / D in s32; A and B of the same type)
    _load("a b", _THREE_SHAPES, "s8 u8", "b32", _INT8),
    _load("c", _THREE_SHAPES, "s32", "s32", _INT8),
    _store(_THREE_SHAPES, "s32", _INT8),
    *(_mma(_THREE_SHAPES, (slot("dtype", "s32"), slot("atype", t), slot("btype", t), slot("ctype", "s32"),
                           _SATFINITE), "b32", ("s32", "s32"), _INT8) for t in ("s8", "u8")),
    # bf16 and tf32 (C / D in f32)
    _load("a b", _THREE_SHAPES, "bf16", "b32", _AMPERE),
    _mma(_THREE_SHAPES, (slot("dtype", "f32"), slot("atype", "bf16"), slot("btype", "bf16"),
                         slot("ctype", "f32")), "b32", ("f32", "f32"), _AMPERE),
    _load("a b", "m16n16k8", "tf32", "b32", _AMPERE),
    _load("c", "m16n16k8", "f32", "f32", _AMPERE),
    _store("m16n16k8", "f32", _AMPERE),
    _mma("m16n16k8", (slot("dtype", "f32"), slot("atype", "tf32"), slot("btype", "tf32"),
                      slot("ctype", "f32")), "b32", ("f32", "f32"), _AMPERE),
    # f64
    _load("a b c", "m8n8k4", "f64", "f64", _AMPERE),
    _store("m8n8k4", "f64", _AMPERE),
    _mma("m8n8k4", (slot("rnd", "rn rz rm rp", optional=True), slot("dtype", "f64"), slot("atype", "f64"),
                    slot("btype", "f64"), slot("ctype", "f64")), "f64", ("f64", "f64"), _AMPERE),
    # sub-byte integers and single bits: A row-major, B column-major only
    _load("a", "m8n8k32", "s4 u4", "b32", _SUBBYTE, layout=_ROW),
    _load("b", "m8n8k32", "s4 u4", "b32", _SUBBYTE, layout=_COL),
    _load("a", "m8n8k128", "b1", "b32", _SUBBYTE, layout=_ROW),
    _load("b", "m8n8k128", "b1", "b32", _SUBBYTE, layout=_COL),
    _load("c", "m8n8k32 m8n8k128", "s32", "s32", _SUBBYTE),
    _store("m8n8k32 m8n8k128", "s32", _SUBBYTE),
    *(_mma("m8n8k32", (slot("dtype", "s32"), slot("atype", t), slot("btype", t), slot("ctype", "s32"),
                       _SATFINITE), "b32", ("s32", "s32"), _SUBBYTE, layouts=(_ROW, _COL))
      for t in ("s4", "u4")),
    _mma("m8n8k128", (slot("dtype", "s32"), slot("atype", "b1"), slot("btype", "b1"), slot("ctype", "s32")),
         "b32", ("s32", "s32"), _SUBBYTE, layouts=(_ROW, _COL),
         head=(slot("bitop", "xor and", requires={"and": Requires(sm=80, ptx=(7, 1))}), slot("popc", "popc"))),
)

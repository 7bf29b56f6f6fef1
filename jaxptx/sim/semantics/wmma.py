"""Emulator semantics: ``wmma.load``, ``wmma.store`` and ``wmma.mma`` (PTX ISA
9.7.14.4, "Warp Level Matrix Multiply-Accumulate Instructions").

PTX leaves the fragment layout — which thread's register holds which matrix
element — unspecified: a program may only load a fragment, compute on its
elements independently (scale, convert, add), feed it to ``wmma.mma`` and
store it. The emulator uses one fixed layout for every shape and type:
element ``e`` of lane ``l`` holds the element at row-major position
``(l * E + e) mod (rows * cols)`` of the fragment's matrix, ``E`` elements per
thread (see :func:`jaxptx.isa._wmma.fragment_elements`; the 16-element
``.f16`` A and B fragments of the smaller matrices repeat across the warp).
A program that depends on a particular layout is not portable PTX, and gets
this layout here.

Memory: element (i, j) of a ``.row`` matrix is at ``p + (i * stride + j)``
elements, of a ``.col`` matrix at ``p + (j * stride + i)``; ``stride``
defaults to the matrix's leading dimension (its columns for ``.row``, its
rows for ``.col``). As CUDA's ``load_matrix_sync`` documents, ``p`` must be
256-bit aligned and the stride a multiple of 16 bytes; the emulator faults
otherwise. Arithmetic is that of ``mma.sync`` (:func:`.mma.mma_sync`): exact
products summed in float64 then rounded once, exact integers, f64 a chain of
fused multiply-adds in K order in the instruction's rounding mode.
"""

from __future__ import annotations

import numpy as np

from ...isa import fragment_elements, matrix_dims
from ...isa import fragments as layouts
from ...types import TYPES
from ..core.step import Step
from ..errors import SimError
from ..numerics.arith import arith
from ..numerics.formats import FORMATS
from .fragments import ELEMENT_BITS, gather, groups, scatter
from .mma import decode, pack, registers, unpack, write_accumulator, write_registers
from .registry import semantics

__all__ = ["wmma_layout"]


def wmma_layout(shape: str, frag: str, type_name: str) -> tuple[np.ndarray, ...]:
    """``(group, row, col)`` of each (lane, element) of a fragment, as arrays
    ``(32, elements)`` (the form :func:`.fragments.gather` takes): the cells
    of :func:`jaxptx.isa.fragments.wmma`."""
    rows, cols = matrix_dims(shape, frag)
    return layouts.wmma(rows, cols, fragment_elements(shape, frag, type_name), type_name).flat


def _addresses(s: Step, k: int, frag: str, type_name: str) -> tuple[str, np.ndarray, np.ndarray]:
    """``(space, byte addresses (n, E), bit offsets (n, E))`` of each thread's
    fragment elements, for the address in operand ``k`` and the optional
    stride (operand 2)."""
    shape, layout = s.mod("shape"), s.mod("layout")
    rows, cols = matrix_dims(shape, frag)
    bits = ELEMENT_BITS[type_name]
    space, base = s.address(k)
    if len(s.ins.operands) > 2:                 # the stride is the third operand of both
        stride = s.src(2, TYPES["u32"]).astype(np.int64)[:, None]
    else:
        stride = np.full((s.n, 1), cols if layout == "row" else rows, dtype=np.int64)
    misaligned = (base % np.uint64(32)) != 0
    if misaligned.any():
        raise SimError(f"{s.ins.name}: address {int(base[misaligned][0]):#x} is not 256-bit aligned")
    if ((stride * bits) % 128 != 0).any():
        raise SimError(f"{s.ins.name}: stride {int(stride[(stride * bits) % 128 != 0][0])} elements is "
                       "not a multiple of 16 bytes")
    _, row, col = wmma_layout(shape, frag, type_name)
    lane = s.lanes
    r, c = row[lane], col[lane]
    offset = (r * stride + c if layout == "row" else c * stride + r) * bits
    return space, base[:, None] + (offset // 8).astype(np.uint64), offset % 8


@semantics("wmma_load")
def wmma_load(s: Step) -> None:
    """``wmma.load.{a,b,c}.sync.aligned.layout.shape{.ss}.type r, [p]{, stride}``:
    every lane of the warp loads its fragment elements."""
    groups(s)                                   # the whole warp, or a fault
    frag, type_name = s.mod("frag"), s.mod("type")
    bits = ELEMENT_BITS[type_name]
    space, addr, shift = _addresses(s, 1, frag, type_name)
    width = max(1, bits // 8)
    elements = np.empty(addr.shape, dtype=np.uint64 if bits == 64 else np.uint32)
    for e in range(addr.shape[1]):
        raw = s.m.memory.load(space, np.ascontiguousarray(addr[:, e]), s.threads, width, s.ins.name)
        if bits < 8:
            raw = (raw.astype(np.uint32) >> shift[:, e].astype(np.uint32)) & np.uint32((1 << bits) - 1)
        elements[:, e] = raw
    if bits == 64:
        write_registers(s, 0, elements, TYPES["b64"])
    else:
        write_registers(s, 0, pack(elements, bits) if bits < 32 else elements)


@semantics("wmma_store")
def wmma_store(s: Step) -> None:
    """``wmma.store.d.sync.aligned.layout.shape{.ss}.type [p], r{, stride}``:
    every lane of the warp stores its D fragment elements."""
    groups(s)
    type_name = s.mod("type")
    bits = ELEMENT_BITS[type_name]
    space, addr, _ = _addresses(s, 0, "d", type_name)
    regs = registers(s, 1, bits == 64)
    elements = regs if bits >= 32 else unpack(regs, bits)
    for e in range(addr.shape[1]):
        s.m.memory.store(space, np.ascontiguousarray(addr[:, e]), s.threads, elements[:, e], bits // 8,
                         s.ins.name)


def _values(s: Step, k: int, type_name: str) -> np.ndarray:
    """Fragment elements of vector operand ``k`` as float64 / int64 values."""
    if type_name == "f64":
        return decode(registers(s, k, True), "f64")
    return decode(unpack(registers(s, k), ELEMENT_BITS[type_name]), type_name)


@semantics("wmma_mma")
def wmma_mma(s: Step) -> None:
    """``wmma.mma``: D = A * B + C for each warp, in the emulator's fragment
    layout (see the module docstring for the arithmetic)."""
    shape = s.mod("shape")
    atype = s.mod("atype", "f16")
    btype, ctype, dtype = s.mod("btype", atype), s.mod("ctype"), s.mod("dtype")
    m, k = matrix_dims(shape, "a")
    n = matrix_dims(shape, "b")[1]
    slot, rank, count = groups(s)
    la, lb = wmma_layout(shape, "a", atype), wmma_layout(shape, "b", btype)
    lc, ld = wmma_layout(shape, "c", ctype), wmma_layout(shape, "d", dtype)
    A = gather(_values(s, 1, atype), slot, rank, count, la, (1, m, k))
    B = gather(_values(s, 2, btype), slot, rank, count, lb, (1, k, n))
    C = gather(_values(s, 3, ctype), slot, rank, count, lc, (1, m, n))
    if atype == "f64":
        D = C
        for kk in range(k):
            a, b = np.broadcast_arrays(A[..., :, kk, None], B[..., None, kk, :])
            D = arith("fma", [a, b, D], FORMATS["f64"], s.mod("rnd", "rn"))
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            AB = A @ B
            if atype == "b1" and s.mod("bitop") == "xor":
                AB = A.sum(-1)[..., :, None] + B.sum(-2)[..., None, :] - 2 * AB
            D = C + AB
    write_accumulator(s, 0, scatter(D, slot, rank, ld), dtype, s.mod("satfinite") is not None)

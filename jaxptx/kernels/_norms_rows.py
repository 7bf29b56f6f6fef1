"""Row access for the norm kernels: how a row is split over a CTA, and the
vectorised loads and stores that turn f32, bf16 or f16 elements into f32
registers and back.

A row of ``n`` elements is read in *chunks* of ``vec`` elements, one
``ld.global.v4.b32`` (16 bytes) where the row length allows it. Rows follow
one another in memory, so a 16-byte chunk stays aligned in every row only
when ``n`` is a multiple of ``16 / itemsize``; otherwise ``vec`` is the
largest power of two dividing ``n`` (8 or 4 bytes: ``v2``/scalar ``b32``,
down to one element for odd ``n``), so no access is ever misaligned. Thread
``t`` takes chunks ``t, t + threads, ...``; the last round is masked (a
predicate guards its loads, stores and accumulations) when ``threads`` does
not divide the chunk count.

Rows short enough for one warp (at most 16 values a lane) go one warp per
row, ``ROWS_PER_CTA`` rows per CTA, reduced with shuffles alone; longer
rows get a CTA each, reduced across warps through shared memory.

Up to 32 values per thread stay in registers between the statistics pass
and the output pass (``cached``); longer rows loop at run time and read the
row again (from L2) in each pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..dsl import Reg, emit_instruction, new_reg, ptx, reg
from ..types import PtxType, b16, b32, f32, u32

__all__ = ["Plan", "plan", "chunks", "load", "store", "ITEMSIZE"]

ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2}
MAX_THREADS = 1024
# Values per thread held in registers across passes (more: a runtime loop).
MAX_CACHED = 32
# Values per thread the block size aims for (fewer threads for short rows).
TARGET_VALUES = 16
# Rows per CTA when one warp takes a row (rows of up to 16 values a lane).
ROWS_PER_CTA = 4


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one row is read: ``vec`` elements per access, ``threads`` per CTA.

    Attributes:
        n: elements per row.
        dtype: ``"f32"``, ``"bf16"`` or ``"f16"``.
        vec: elements per access (a power of two, at most 16 bytes).
        threads: threads per row (a power of two, 32 to 1024).
        cached: whether the row stays in registers (``rounds`` chunks per
            thread, unrolled) or is looped over at run time.
    """

    n: int
    dtype: str
    vec: int
    threads: int
    cached: bool

    @property
    def rows(self) -> int:
        """Rows per CTA: one warp per row, several warps per CTA, when a warp
        covers the row; else one CTA per row."""
        return ROWS_PER_CTA if self.threads == 32 else 1

    @property
    def block(self) -> int:
        """Threads per CTA."""
        return self.threads * self.rows

    @property
    def nchunks(self) -> int:
        """Accesses per row."""
        return self.n // self.vec

    @property
    def rounds(self) -> int:
        """Chunks per thread (the unrolled count when ``cached``)."""
        return -(-self.nchunks // self.threads)

    @property
    def warps(self) -> int:
        """Warps per row."""
        return self.threads // 32

    @property
    def chunk_bytes(self) -> int:
        """Bytes per access."""
        return self.vec * ITEMSIZE[self.dtype]


def plan(n: int, dtype: str, *, max_cached: int = MAX_CACHED) -> Plan:
    """The access plan for rows of ``n`` elements of ``dtype`` (see the module doc)."""
    itemsize = ITEMSIZE[dtype]
    vec = 16 // itemsize
    while n % vec:
        vec //= 2
    nchunks = n // vec
    target = max(1, TARGET_VALUES // vec)
    threads = 32
    while threads < MAX_THREADS and threads * target < nchunks:
        threads *= 2
    cached = -(-nchunks // threads) * vec <= max_cached
    return Plan(n, dtype, vec, threads, cached)


def chunks(p: Plan, tid: Reg) -> Iterator[tuple[int | None, Reg, Reg | None]]:
    """The chunks thread ``tid`` handles: ``(round, chunk index, mask)``.

    Cached plans unroll at trace time (``round`` is 0, 1, ...; ``mask`` is a
    predicate for the last round when it is partial, else None). Otherwise
    one runtime loop: the body is traced once, with ``round`` None.
    """
    if p.cached:
        for k in range(p.rounds):
            index = tid if k == 0 else tid + k * p.threads
            partial = (k + 1) * p.threads > p.nchunks
            yield k, index, (index < p.nchunks) if partial else None
    else:
        for index in ptx.range_(tid, p.nchunks, p.threads, dtype=u32):
            yield None, index, None


def _ld(space: tuple[str, ...], ty: PtxType, count: int, address: Reg, mask: Reg | None) -> list[Reg]:
    """``count`` registers of ``ty`` from ``address``; zero where masked off."""
    regs = [reg.scalar(ty, 0) if mask is not None else new_reg(ty) for _ in range(count)]
    vector = () if count == 1 else (f"v{count}",)
    dst = regs[0] if count == 1 else regs
    emit_instruction("ld", (*space, *vector, ty.name), (dst, ptx.addr(address)), pred=mask)
    return regs


def load(p: Plan, base: Reg, index: Reg, mask: Reg | None = None, *, nc: bool = False) -> list[Reg]:
    """Chunk ``index`` of the row at ``base`` as ``vec`` f32 registers.

    ``nc`` reads through the non-coherent (read-only) cache: for tensors no
    thread of the kernel writes.
    """
    address = base + ptx.mul.wide.u32(index, p.chunk_bytes)
    space = ("global", "nc") if nc else ("global",)
    if p.dtype == "f32":
        return _ld(space, f32, p.vec, address, mask)
    if p.vec == 1:
        (half,) = _ld(space, b16, 1, address, mask)
        return [_widen(p.dtype, half)]
    words = _ld(space, b32, p.vec // 2, address, mask)
    return [v for w in words for v in _unpack(p.dtype, w)]


def store(p: Plan, base: Reg, index: Reg, values: list[Reg], mask: Reg | None = None) -> None:
    """Write ``vec`` f32 values (rounded to the plan's dtype) to chunk ``index``."""
    address = base + ptx.mul.wide.u32(index, p.chunk_bytes)
    if p.dtype == "f32":
        regs, ty = values, f32
    elif p.vec == 1:
        regs, ty = [emit_instruction("cvt", ("rn", p.dtype, "f32"), (new_reg(b16), values[0]))], b16
    else:
        # PTX ISA, cvt (packed): d = {cvt(a), cvt(b)}, a in the upper half.
        regs, ty = [emit_instruction("cvt", ("rn", f"{p.dtype}x2", "f32"), (values[i + 1], values[i]))
                    for i in range(0, len(values), 2)], b32
    vector = () if len(regs) == 1 else (f"v{len(regs)}",)
    emit_instruction("st", ("global", *vector, ty.name),
                     (ptx.addr(address), regs[0] if len(regs) == 1 else regs), pred=mask)


def _widen(dtype: str, half: Reg) -> Reg:
    return emit_instruction("cvt", ("f32", dtype), (new_reg(f32), half))


def _unpack(dtype: str, word: Reg) -> tuple[Reg, Reg]:
    """The two 16-bit values of a b32 word (element 0 in the low half) as f32."""
    if dtype == "bf16":
        # A bf16 is the upper half of the f32 with the same value.
        lo = emit_instruction("shl", ("b32",), (new_reg(f32), word, 16))
        hi = emit_instruction("and", ("b32",), (new_reg(f32), word, 0xFFFF0000))
        return lo, hi
    halves = [new_reg(b16), new_reg(b16)]
    emit_instruction("mov", ("b32",), (halves, word))
    return _widen(dtype, halves[0]), _widen(dtype, halves[1])

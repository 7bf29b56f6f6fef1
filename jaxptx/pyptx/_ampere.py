"""pyptx's Ampere wrappers: ``ptx.mma.sync``, ``ptx.ldmatrix``,
``ptx.stmatrix``, ``ptx.cp.async_.cg/ca/commit_group/wait_group``."""

from __future__ import annotations

from typing import Any

from ..dsl import emit_instruction, new_reg
from ..types import PtxType, b16, b32
from ._emit import emit, register
from ._regs import adopt

__all__ = ["stmatrix_x4_trans_f32_bf16"]


def _regs(x: Any) -> list[Any]:
    return list(x) if not isinstance(x, list) else x


@register("mma", "sync")
def _mma_sync(*, shape: tuple[int, int, int], dtype_d: PtxType, dtype_a: PtxType, dtype_b: PtxType,
              dtype_c: PtxType, d: Any, a: Any, b: Any, c: Any, a_layout: str = "row",
              b_layout: str = "col", pred: Any = None) -> None:
    """``mma.sync.aligned.m{M}n{N}k{K}.{a_layout}.{b_layout}.{d}.{a}.{b}.{c} d, a, b, c``."""
    if a_layout not in ("row", "col") or b_layout not in ("row", "col"):
        raise ValueError(f"mma.sync layouts must be 'row' or 'col', got {a_layout!r}, {b_layout!r}")
    m, n, k = shape
    emit(f"mma.sync.aligned.m{m}n{n}k{k}.{a_layout}.{b_layout}.{dtype_d.name}.{dtype_a.name}."
         f"{dtype_b.name}.{dtype_c.name}", _regs(d), _regs(a), _regs(b), _regs(c), pred=pred)


@register("ldmatrix")
def _ldmatrix(*, dst: Any, src: Any, layout: str = "x4", trans: bool = False, pred: Any = None) -> None:
    """``ldmatrix.sync.aligned[.m8n8].{layout}[.trans].shared.b16 {dst}, [src]``."""
    parts = [p for p in layout.split(".") if p]
    if not any(p.startswith("m") for p in parts):
        parts.insert(0, "m8n8")
    emit("ldmatrix.sync.aligned." + ".".join(parts) + (".trans" if trans else "") + ".shared.b16",
         _regs(dst), src, pred=pred)


@register("stmatrix")
def _stmatrix(*, smem: Any, regs: Any, layout: str = "x4", trans: bool = False, shape: str = "m8n8",
              pred: Any = None) -> None:
    """``stmatrix.sync.aligned.{shape}.{layout}[.trans].shared::cta.b16 [smem], {regs}``
    (``layout`` may be ``"x4.trans"``)."""
    count, *rest = layout.split(".")
    trans = trans or "trans" in rest
    emit(f"stmatrix.sync.aligned.{shape}.{count}{'.trans' if trans else ''}.shared::cta.b16",
         smem, _regs(regs), pred=pred)


def stmatrix_x4_trans_f32_bf16(*, frag: Any, smem_base: Any, lane: Any, row_stride: int,
                               tmp_bf16: list[Any] | None = None, tmp_pack: list[Any] | None = None) -> None:
    """Convert an f32 fragment to bf16 pairs and store each group of 8 with
    ``stmatrix.x4.trans`` at ``smem_base`` (rows ``row_stride`` elements apart)."""
    regs = _regs(frag)
    if len(regs) % 8:
        raise ValueError("stmatrix_x4_trans_f32_bf16: len(frag) must be a multiple of 8")
    halves = tmp_bf16 or [new_reg(b16) for _ in range(8)]
    packs = tmp_pack or [new_reg(b32) for _ in range(4)]
    lane = adopt(lane)
    lane32 = lane & 31
    off = emit_instruction("mul", ("lo", "u32"), (lane >> 5, 16))
    emit_instruction("mad", ("lo", "u32"), (off, lane32 & 7, row_stride, off))
    emit_instruction("mad", ("lo", "u32"), (off, lane32 >> 4, row_stride * 8, off))
    emit_instruction("add", ("u32",), (off, off, lane32 & 8))
    base = adopt(smem_base) + (adopt(off) << 1)
    for g in range(len(regs) // 8):
        for k in range(8):
            emit_instruction("cvt", ("rn", "bf16", "f32"), (halves[k], regs[g * 8 + k]))
        for k in range(4):
            emit_instruction("mov", ("b32",), (packs[k], [halves[2 * k], halves[2 * k + 1]]))
        _stmatrix(smem=base + g * row_stride * 32, regs=packs, layout="x4.trans")


@register("cp", "async_", "cg")
def _cp_async_cg(smem_dst: Any, global_src: Any, byte_count: int, *, pred: Any = None) -> None:
    """``cp.async.cg.shared.global [dst], [src], bytes`` (L2 only)."""
    emit("cp.async.cg.shared.global", smem_dst, global_src, int(byte_count), pred=pred)


@register("cp", "async_", "ca")
def _cp_async_ca(smem_dst: Any, global_src: Any, byte_count: int, *, pred: Any = None) -> None:
    """``cp.async.ca.shared.global [dst], [src], bytes`` (L1 and L2)."""
    emit("cp.async.ca.shared.global", smem_dst, global_src, int(byte_count), pred=pred)


@register("cp", "async_", "commit_group")
def _cp_async_commit(*, pred: Any = None) -> None:
    """``cp.async.commit_group``."""
    emit("cp.async.commit_group", pred=pred)


@register("cp", "async_", "wait_group")
def _cp_async_wait(n: int, *, pred: Any = None) -> None:
    """``cp.async.wait_group n``."""
    emit("cp.async.wait_group", int(n), pred=pred)


@register("cp", "async_", "wait_all")
def _cp_async_wait_all(*, pred: Any = None) -> None:
    """``cp.async.wait_all``."""
    emit("cp.async.wait_all", pred=pred)


"""pyptx's Blackwell ``ptx.tcgen05`` wrappers, through jaxptx's table.

The instruction descriptor of the dense f16/bf16/tf32 -> f32 kinds and
the sm_100 shared-memory descriptor (PTX ISA 9.7.16.4) are packed by
:mod:`jaxptx.isa.encodings` (``InstrDesc``, ``SmemDescriptor``), where their
layouts are written down. Where pyptx writes a constant ``enable_input_d`` as ``mov`` +
``setp``, we do the same (a predicate operand).
"""

from __future__ import annotations

from typing import Any

from ..dsl import Reg as _CoreReg
from ..dsl import emit_instruction, new_reg
from ..isa.encodings import SWIZZLES, InstrDesc, SmemDescriptor
from ..types import b64, pred as PRED
from ._emit import emit, register
from ._hopper import smem_address
from ._regs import adopt

__all__ = ["instr_desc_f16bf16_f32", "B128_MASKED_DESC"]

B128_MASKED_DESC = 0x4000404000010000
# pyptx's layout names ("NONE", "128B_BASE32B", "128B", "64B", "32B") -> the mode's name.
_LAYOUT = {s.name.upper(): s.name for s in SWIZZLES if s.tcgen05 is not None}
_MAJOR = ("K", "MN")


def instr_desc_f16bf16_f32(*, m: int = 128, n: int = 256, ab_dtype: str = "bf16", a_major: str = "K",
                           b_major: str = "K", scale_a: int = 1, scale_b: int = 1, saturate: bool = False,
                           sparse: bool = False, max_shift: int = 0) -> int:
    """The 32-bit ``tcgen05.mma`` instruction descriptor, kind::f16, f32 accumulator.

    Raises:
        ValueError: an M, N, dtype, major, scale or shift the form does not take.
    """
    if m not in (64, 128, 256) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"tcgen05 instr desc: m in (64, 128, 256), n a multiple of 8 in 8..256; got {m}, {n}")
    if ab_dtype not in ("f16", "bf16", "tf32") or a_major not in _MAJOR or b_major not in _MAJOR:
        raise ValueError(f"tcgen05 instr desc: bad dtype/major {ab_dtype!r}, {a_major!r}, {b_major!r}")
    if scale_a not in (1, -1) or scale_b not in (1, -1) or not 0 <= max_shift <= 3:
        raise ValueError("tcgen05 instr desc: scales are 1 or -1, max_shift 0..3")
    kind = "tf32" if ab_dtype == "tf32" else "f16"
    return InstrDesc(kind, m, n, ab_dtype, ab_dtype, "f32", negate_a=scale_a < 0, negate_b=scale_b < 0,
                     mn_major_a=a_major == "MN", mn_major_b=b_major == "MN", saturate=saturate, sparse=sparse,
                     max_shift=(0, 8, 16, 32)[max_shift]).encode()


register("tcgen05", "make_instr_desc_f16bf16_f32")(instr_desc_f16bf16_f32)


@register("tcgen05", "alloc")
def _alloc(tmem_addr: Any, ncols: Any, *, cta_group: int = 1, pred: Any = None) -> None:
    """``tcgen05.alloc.cta_group::N.sync.aligned.shared::cta.b32 [slot], ncols``."""
    emit(f"tcgen05.alloc.cta_group::{cta_group}.sync.aligned.shared::cta.b32", tmem_addr, ncols, pred=pred)


@register("tcgen05", "dealloc")
def _dealloc(taddr: Any, ncols: Any, *, cta_group: int = 1, pred: Any = None) -> None:
    """``tcgen05.dealloc.cta_group::N.sync.aligned.b32 taddr, ncols``."""
    emit(f"tcgen05.dealloc.cta_group::{cta_group}.sync.aligned.b32", taddr, ncols, pred=pred)


@register("tcgen05", "relinquish_alloc_permit")
def _relinquish(*, cta_group: int = 1, pred: Any = None) -> None:
    """``tcgen05.relinquish_alloc_permit.cta_group::N.sync.aligned``."""
    emit(f"tcgen05.relinquish_alloc_permit.cta_group::{cta_group}.sync.aligned", pred=pred)


def _predicate(value: Any) -> Any:
    """A predicate register from a predicate, a 32-bit word (``!= 0``) or a constant."""
    if isinstance(value, _CoreReg) and value.type.kind == "pred":
        return value
    p = new_reg(PRED)
    word = value if isinstance(value, _CoreReg) else emit_instruction("mov", ("u32",), (int(bool(value)),))
    emit_instruction("setp", ("ne", "b32"), (p, word, 0))
    return adopt(p)


@register("tcgen05", "mma")
def _mma(d_tmem: Any, a_desc: Any, b_desc: Any, idesc: Any, *, cta_group: int = 1, kind: str = "f16",
         enable_input_d: Any = True, scale_d: Any = None, sparse: bool = False, ashift: bool = False,
         collector_a: str | None = None, a_is_tmem: bool = False, sparse_metadata: Any = None,
         pred_operand: Any = None, scale_c: int | None = None, pred: Any = None) -> None:
    """``tcgen05.mma[.sp].cta_group::N.kind::K [d], a, b, idesc, p``: ``p`` (from
    ``pred_operand``, else ``scale_d``, else ``enable_input_d``) selects
    ``D += A*B`` (true) or ``D = A*B``."""
    name = "tcgen05.mma" + (".sp" if sparse else "") + f".cta_group::{cta_group}.kind::{kind}" \
        + (".ashift" if ashift else "") + (f".collector::a::{collector_a}" if collector_a else "")
    args: list[Any] = [d_tmem, a_desc, b_desc]
    if sparse_metadata is not None:
        args.append(sparse_metadata)
    args.append(idesc)
    source = pred_operand if pred_operand is not None else scale_d if scale_d is not None else enable_input_d
    args.append(_predicate(source))
    if scale_c is not None:
        args.append(int(scale_c))
    emit(name, *args, pred=pred)


@register("tcgen05", "fence_before_thread_sync")
def _fence_before(*, pred: Any = None) -> None:
    """``tcgen05.fence::before_thread_sync``."""
    emit("tcgen05.fence::before_thread_sync", pred=pred)


@register("tcgen05", "fence_after_thread_sync")
def _fence_after(*, pred: Any = None) -> None:
    """``tcgen05.fence::after_thread_sync``."""
    emit("tcgen05.fence::after_thread_sync", pred=pred)


@register("tcgen05", "commit")
def _commit(mbar: Any, *, cta_group: int = 1, multicast: bool = False, multicast_mask: Any = None,
            space: str = "cluster", pred: Any = None) -> None:
    """``tcgen05.commit.cta_group::N.mbarrier::arrive::one[.multicast::cluster].shared::{space}.b64``."""
    if space not in ("cta", "cluster"):
        raise ValueError(f"tcgen05.commit space: 'cta' or 'cluster', got {space!r}")
    multicast = multicast or multicast_mask is not None
    name = f"tcgen05.commit.cta_group::{cta_group}.mbarrier::arrive::one" \
        + (".multicast::cluster" if multicast else "") + f".shared::{space}.b64"
    emit(name, mbar, *([multicast_mask] if multicast and multicast_mask is not None else []), pred=pred)


@register("tcgen05", "wait_ld")
def _wait_ld(*, pred: Any = None) -> None:
    """``tcgen05.wait::ld.sync.aligned``."""
    emit("tcgen05.wait::ld.sync.aligned", pred=pred)


@register("tcgen05", "wait_st")
def _wait_st(*, pred: Any = None) -> None:
    """``tcgen05.wait::st.sync.aligned``."""
    emit("tcgen05.wait::st.sync.aligned", pred=pred)


@register("tcgen05", "ld")
def _ld(dst_regs: Any, taddr: Any, *, shape: str = "16x128b", count: int = 1, dtype: str = "b32",
        pack: bool = False, pred: Any = None) -> None:
    """``tcgen05.ld.sync.aligned.{shape}.x{count}[.pack::16b].{dtype} {dst}, [taddr]``."""
    emit(f"tcgen05.ld.sync.aligned.{shape}.x{count}{'.pack::16b' if pack else ''}.{dtype}",
         list(dst_regs), taddr, pred=pred)


@register("tcgen05", "st")
def _st(taddr: Any, src_regs: Any, *, shape: str = "16x128b", count: int = 1, dtype: str = "b32",
        unpack: bool = False, pred: Any = None) -> None:
    """``tcgen05.st.sync.aligned.{shape}.x{count}[.unpack::16b].{dtype} [taddr], {src}``."""
    emit(f"tcgen05.st.sync.aligned.{shape}.x{count}{'.unpack::16b' if unpack else ''}.{dtype}",
         taddr, list(src_regs), pred=pred)


@register("tcgen05", "cp")
def _cp(taddr: Any, src: Any, *, cta_group: int = 1, size: str = "128x256b", src_is_addr: Any = None,
        pred: Any = None) -> None:
    """``tcgen05.cp.cta_group::N.{size} [taddr], sdesc``."""
    emit(f"tcgen05.cp.cta_group::{cta_group}.{size}", taddr, src, pred=pred)


@register("tcgen05", "shift")
def _shift(taddr: Any, *, cta_group: int = 1, pred: Any = None) -> None:
    """``tcgen05.shift.cta_group::N.down [taddr]``."""
    emit(f"tcgen05.shift.cta_group::{cta_group}.down", taddr, pred=pred)


def _masked(smem_addr: Any, byte_offset: int, mask: int, const_bits: int) -> Any:
    base = smem_address(smem_addr, byte_offset)
    idx = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (base, mask)), 4))
    wide = emit_instruction("cvt", ("u64", "u32"), (idx,))
    return adopt(emit_instruction("or", ("b64",), (new_reg(b64), wide, const_bits)))


@register("tcgen05", "descriptor")
def _descriptor(smem_addr: Any, *, byte_offset: int = 0, stride_bytes: int, leading_bytes: int = 16,
                swizzle: str = "128B", version: int = 1, base_offset: int = 0, lbo_mode: int = 0) -> Any:
    """The sm_100 shared-memory matrix descriptor of the tile at ``smem_addr``.

    Raises:
        ValueError: a swizzle name or field value the format cannot hold.
    """
    if swizzle not in _LAYOUT or stride_bytes % 16 or leading_bytes % 16:
        raise ValueError(f"tcgen05.descriptor: swizzle in {tuple(_LAYOUT)}, strides multiples of 16")
    if version != 1:
        raise ValueError(f"tcgen05.descriptor: version must be 1 (bits 46-48 of sm_100 descriptors), got {version}")
    const = SmemDescriptor(0, leading_bytes, stride_bytes, base_offset, _LAYOUT[swizzle], lbo_mode).encode()
    return _masked(smem_addr, byte_offset, 0x3FFF0, const)


@register("tcgen05", "masked_descriptor")
def _masked_descriptor(smem_addr: Any, *, byte_offset: int = 0, mask: int = 0x3FFF0,
                       const_bits: int = B128_MASKED_DESC) -> Any:
    """``cvt.u64.u32(((addr + byte_offset) & mask) >> 4) | const_bits``."""
    return _masked(smem_addr, byte_offset, mask, const_bits)

"""pyptx's Hopper wrappers: ``ptx.wgmma``, ``ptx.mbarrier``, ``ptx.fence``,
TMA (``ptx.cp.async_.bulk.tensor_Nd``), ``ptx.cluster``.

Each emits the instructions pyptx documents, through jaxptx's table.
Where we emit differently (same meaning): a constant ``scale_d`` is the
immediate ``0``/``1`` (pyptx: ``mov`` + ``setp`` into a predicate); a
wgmma descriptor from a shared tile is ``and``/``shr``/``cvt``/``or`` on
the tile's u32 shared address (pyptx: the same on a u64 ``mov`` of the
symbol).
"""

from __future__ import annotations

from typing import Any

from ..dsl import ptx as _ptx
from ..dsl import Addr, RegArray, current, emit_instruction
from ..dsl import Reg as _CoreReg
from ..errors import TraceError
from ..isa.encodings import MatrixDescriptor, swizzle_from_code
from ..types import PtxType
from ._emit import emit, register
from ._regs import adopt
from .smem import SharedAlloc, SharedSlice, gmma_layout

__all__ = ["arrive_remote", "descriptor_from", "smem_address"]

_HALF = ("f16", "bf16")


def smem_address(value: Any, offset: int = 0) -> Any:
    """A u32 register holding the shared address of ``value`` (a register,
    shared allocation, slice or mbarrier) plus ``offset`` bytes. A symbol's
    address is read once per kernel (at its start)."""
    if isinstance(value, _CoreReg):
        base = value
    else:
        sym = value.__ptx_symbol__()
        if not isinstance(sym, Addr):
            raise TraceError(f"expected a shared-memory object, got {value!r}")
        offset += sym.offset or 0
        if isinstance(sym.base, _CoreReg):
            base = sym.base
        else:
            name = str(sym.base)
            base = current().materialise(("pyptx_shared_base", name),
                                         lambda: emit_instruction("mov", ("u32",), (name,)))
    return adopt(emit_instruction("add", ("u32",), (base, offset))) if offset else adopt(base)


def _descriptor_bits(lbo: int, sbo: int, swizzle_code: int, base_offset: int = 0) -> int:
    """The constant part (start 0) of a wgmma descriptor (:class:`MatrixDescriptor`).

    Raises:
        ValueError: a field the descriptor cannot hold.
    """
    mode = swizzle_from_code("wgmma", swizzle_code).name
    return MatrixDescriptor(0, lbo, sbo, base_offset, mode).encode()


def _descriptor(address: Any, const: int) -> Any:
    start = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (address, 0x3FFFF)), 4))
    wide = emit_instruction("cvt", ("u64", "u32"), (start,))
    return adopt(emit_instruction("or", ("b64",), (wide, const)))


def descriptor_from(value: Any, k_offset: int = 0) -> Any:
    """The wgmma descriptor of a ``smem.wgmma_tile`` tile (or a slice of one),
    its start moved by ``k_offset`` bytes; anything else (a descriptor
    register, A's registers) passes through."""
    if not isinstance(value, (SharedAlloc, SharedSlice)):
        return list(value) if isinstance(value, (RegArray, list, tuple)) else value
    alloc = value.alloc if isinstance(value, SharedSlice) else value
    if alloc.gmma is None:
        raise TraceError(f"wgmma operand {value!r}: a shared operand must come from smem.wgmma_tile(...) "
                         "(or pass a descriptor register)")
    g = alloc.gmma
    return _descriptor(smem_address(value, k_offset), _descriptor_bits(g.lbo, g.sbo, g.swizzle_code))


# wgmma ---------------------------------------------------------------------------
@register("wgmma", "mma_async")
def _mma_async(*, shape: tuple[int, int, int], dtype_d: PtxType, dtype_a: PtxType, dtype_b: PtxType,
               d: Any, a: Any, b: Any, scale_d: Any = False, scale_a: int = 1, scale_b: int = 1,
               trans_a: int = 0, trans_b: int = 0, a_k_offset: int = 0, b_k_offset: int = 0,
               pred: Any = None) -> None:
    """``wgmma.mma_async.sync.aligned.m{M}n{N}k{K}.{d}.{a}.{b}``: A and B are
    descriptor registers or ``smem.wgmma_tile`` tiles (descriptors built
    here, ``a_k_offset``/``b_k_offset`` bytes into the tile); ``scale_d``
    False computes ``D = A*B``, True (or a predicate) ``D += A*B``."""
    m, n, k = shape
    da, db = descriptor_from(a, a_k_offset), descriptor_from(b, b_k_offset)
    scale = scale_d if isinstance(scale_d, _CoreReg) else int(bool(scale_d))
    args: list[Any] = [list(d), da, db, scale]
    if dtype_a.kind == "f":             # integer forms take no imm-scale-a/b
        args += [scale_a, scale_b]
    if dtype_a.name in _HALF:
        args += [trans_b] if isinstance(da, list) else [trans_a, trans_b]
    emit(f"wgmma.mma_async.sync.aligned.m{m}n{n}k{k}.{dtype_d.name}.{dtype_a.name}.{dtype_b.name}",
         *args, pred=pred)


@register("wgmma", "fence")
def _wgmma_fence(*, pred: Any = None) -> None:
    """``wgmma.fence.sync.aligned``."""
    emit("wgmma.fence.sync.aligned", pred=pred)


@register("wgmma", "commit_group")
def _wgmma_commit(*, pred: Any = None) -> None:
    """``wgmma.commit_group.sync.aligned``."""
    emit("wgmma.commit_group.sync.aligned", pred=pred)


@register("wgmma", "wait_group")
def _wgmma_wait(n: int, *, pred: Any = None) -> None:
    """``wgmma.wait_group.sync.aligned n``."""
    emit("wgmma.wait_group.sync.aligned", n, pred=pred)


@register("wgmma", "make_descriptor")
def _make_descriptor(smem_base: Any, *, leading_byte_offset: int, stride_byte_offset: int,
                     swizzle: int = 0, base_offset: int = 0, addr_byte_offset: int = 0) -> Any:
    """A wgmma descriptor for the tile at ``smem_base`` with explicit LBO,
    SBO (bytes) and swizzle code (0 none, 1 128B, 2 64B, 3 32B)."""
    if not 0 <= swizzle <= 3 or not 0 <= base_offset <= 7:
        raise ValueError(f"make_descriptor: swizzle 0..3 and base_offset 0..7, got {swizzle}, {base_offset}")
    if isinstance(smem_base, _CoreReg) and smem_base.type.bits == 64:
        smem_base = emit_instruction("cvt", ("u32", "u64"), (smem_base,))
    return _descriptor(smem_address(smem_base, addr_byte_offset),
                       _descriptor_bits(leading_byte_offset, stride_byte_offset, swizzle, base_offset))


@register("wgmma", "auto_descriptor")
def _auto_descriptor(smem_base: Any, *, dtype: PtxType, shape: tuple[int, int], major: str) -> Any:
    """A descriptor for a canonical ``(M, K)`` K-major or ``(K, N)`` MN-major tile."""
    g = gmma_layout(dtype, shape, "K" if str(major).upper() in ("K", "0") else "MN")
    return _descriptor(smem_address(smem_base), _descriptor_bits(g.lbo, g.sbo, g.swizzle_code))


@register("wgmma", "masked_descriptor")
def _masked_descriptor(smem_addr: Any, *, byte_offset: int = 0, mask: int = 0x3FF80,
                       const_bits: int = 0x4000004000010000) -> Any:
    """``cvt.u64.u32(((addr + byte_offset) & mask) >> 4) | const_bits``."""
    base = smem_address(smem_addr, byte_offset)
    idx = emit_instruction("shr", ("u32",), (emit_instruction("and", ("b32",), (base, mask)), 4))
    wide = emit_instruction("cvt", ("u64", "u32"), (idx,))
    return adopt(emit_instruction("or", ("b64",), (wide, const_bits)))


# mbarrier ---------------------------------------------------------------------------
@register("mbarrier", "init")
def _mbar_init(mbar: Any, count: Any, *, pred: Any = None) -> None:
    """``mbarrier.init.shared::cta.b64 [mbar], count``."""
    emit("mbarrier.init.shared::cta.b64", mbar, count, pred=pred)


@register("mbarrier", "inval")
def _mbar_inval(mbar: Any, *, pred: Any = None) -> None:
    """``mbarrier.inval.shared.b64 [mbar]``."""
    emit("mbarrier.inval.shared.b64", mbar, pred=pred)


@register("mbarrier", "arrive")
def _mbar_arrive(mbar: Any, *, pred: Any = None) -> Any:
    """``mbarrier.arrive.shared.b64 state, [mbar]``; returns the state register."""
    return emit("mbarrier.arrive.shared.b64", mbar, pred=pred)


@register("mbarrier", "arrive_expect_tx")
def _mbar_arrive_expect_tx(mbar: Any, tx_count: Any, *, pred: Any = None) -> Any:
    """``mbarrier.arrive.expect_tx.shared::cta.b64 state, [mbar], tx_count``."""
    return emit("mbarrier.arrive.expect_tx.shared::cta.b64", mbar, tx_count, pred=pred)


@register("mbarrier", "expect_tx")
def _mbar_expect_tx(mbar: Any, tx_count: Any, *, pred: Any = None) -> None:
    """``mbarrier.expect_tx.shared.b64 [mbar], tx_count``."""
    emit("mbarrier.expect_tx.shared.b64", mbar, tx_count, pred=pred)


@register("mbarrier", "try_wait")
def _mbar_try_wait(mbar: Any, phase: Any, *, parity: bool = True, pred: Any = None) -> Any:
    """``mbarrier.try_wait[.parity].shared.b64 p, [mbar], phase``; returns ``p``."""
    return emit(f"mbarrier.try_wait{'.parity' if parity else ''}.shared.b64", mbar, phase, pred=pred)


@register("mbarrier", "wait")
def _mbar_wait(mbar: Any, phase: Any, *, pred: Any = None) -> None:
    """Spin until phase ``phase`` of ``mbar`` completes: ``L: try_wait.parity
    p; @!p bra L``."""
    top = _ptx.label()
    p = _mbar_try_wait(mbar, phase, pred=pred)
    emit_instruction("bra", (), (top,), pred=~p)


class _BarrierSlot:
    """Barrier ``i`` of a :class:`_BarrierArray` (a shared address)."""

    def __init__(self, base: Any, offset: Any) -> None:
        self.base, self.offset = base, offset

    def __ptx_symbol__(self) -> Addr:
        if isinstance(self.offset, _CoreReg):
            return Addr(emit_instruction("add", ("u32",), (self.base, self.offset)), None)
        if isinstance(self.base, _CoreReg):
            return Addr(self.base, self.offset or None)
        return Addr(str(self.base), self.offset or None)

    def init(self, count: int, *, pred: Any = None) -> None:
        """``mbarrier.init`` of this barrier."""
        _mbar_init(self, count, pred=pred)

    def wait(self, phase: Any, *, pred: Any = None) -> None:
        """Spin on this barrier's ``phase``."""
        _mbar_wait(self, phase, pred=pred)

    def arrive(self, *, pred: Any = None) -> Any:
        """``mbarrier.arrive`` on this barrier."""
        return _mbar_arrive(self, pred=pred)

    def arrive_expect_tx(self, tx_count: Any, *, pred: Any = None) -> Any:
        """``mbarrier.arrive.expect_tx`` on this barrier."""
        return _mbar_arrive_expect_tx(self, tx_count, pred=pred)

    def arrive_remote(self, cta_id: Any, count: Any = 1, *, pred: Any = None) -> None:
        """Arrive ``count`` times on this barrier in cluster CTA ``cta_id``."""
        arrive_remote(self, cta_id, count, pred=pred)


class _BarrierArray:
    """``count`` mbarriers at ``base + byte_offset`` (``ptx.mbarrier.array``)."""

    def __init__(self, base: Any, byte_offset: int, count: int) -> None:
        self.base, self.byte_offset, self.count = base, byte_offset, count

    def __getitem__(self, i: int) -> _BarrierSlot:
        if not 0 <= i < self.count:
            raise IndexError(f"mbarrier array index {i} outside 0..{self.count - 1}")
        return _BarrierSlot(self.base, self.byte_offset + 8 * i)

    def at(self, stage: Any) -> _BarrierSlot:
        """The barrier of a register-valued ``stage``."""
        off = emit_instruction("mad", ("lo", "u32"), (stage, 8, self.byte_offset))
        return _BarrierSlot(self.base, off)

    def init_all(self, count: int, *, pred: Any = None) -> None:
        """``mbarrier.init`` every barrier with ``count``."""
        for i in range(self.count):
            self[i].init(count, pred=pred)

    def arrive_remote_all(self, cta_id: Any, count: Any = 1, *, pred: Any = None) -> None:
        """The same remote arrive on every barrier of the array."""
        for i in range(self.count):
            self[i].arrive_remote(cta_id, count, pred=pred)


@register("mbarrier", "array")
def _mbar_array(base: Any, byte_offset: int, count: int) -> _BarrierArray:
    """``count`` mbarriers at ``base + byte_offset`` (base: a u32 shared
    address register or a symbol)."""
    return _BarrierArray(base, byte_offset, count)


# fences ---------------------------------------------------------------------------
@register("fence", "proxy_async")
def _fence_proxy_async(*, pred: Any = None) -> None:
    """``fence.proxy.async``."""
    emit("fence.proxy.async", pred=pred)


@register("fence", "proxy_async_shared_cta")
def _fence_proxy_async_shared_cta(*, pred: Any = None) -> None:
    """``fence.proxy.async.shared::cta``: make generic-proxy shared writes
    (an ``mbarrier.init``) visible to the async proxy (TMA)."""
    emit("fence.proxy.async.shared::cta", pred=pred)


@register("fence", "mbarrier_init")
def _fence_mbarrier_init(*, pred: Any = None) -> None:
    """``fence.mbarrier_init.release.cluster``."""
    emit("fence.mbarrier_init.release.cluster", pred=pred)


# TMA -------------------------------------------------------------------------------
class _TensorCopy:
    """``ptx.cp.async_.bulk.tensor_{N}d``: TMA loads (call) and stores (``.store``)."""

    def __init__(self, ndim: int) -> None:
        self.ndim = ndim

    def _coords(self, coord: Any) -> tuple[Any, ...]:
        if coord is None or len(coord) != self.ndim:
            raise ValueError(f"cp.async.bulk.tensor.{self.ndim}d: expected coord= with {self.ndim} "
                             f"coordinates, got {coord!r}")
        return tuple(coord)

    def __call__(self, *, dst: Any, src: Any, coord: Any = None, mbar: Any = None, cta_group: int = 1,
                 multicast_mask: Any = None, cache_hint: Any = None, pred: Any = None) -> None:
        """``cp.async.bulk.tensor.{N}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [dst], [src, {coord}], [mbar]``: ``src`` is ``T.tma_desc()``; ``coord``
        innermost first (column, then row)."""
        if cta_group not in (1, 2):
            raise ValueError(f"cta_group must be 1 or 2, got {cta_group}")
        name = f"cp.async.bulk.tensor.{self.ndim}d" + (".cta_group::2" if cta_group == 2 else "") \
            + ".shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        args: list[Any] = [dst, _ptx.addr(src, coords=self._coords(coord)), mbar]
        if multicast_mask is not None:
            name += ".multicast::cluster"
            args.append(multicast_mask)
        if cache_hint is not None:
            name += ".L2::cache_hint"
            args.append(cache_hint)
        emit(name, *args, pred=pred)

    def store(self, *, dst: Any, src: Any, coord: Any = None, pred: Any = None) -> None:
        """``cp.async.bulk.tensor.{N}d.global.shared::cta.tile.bulk_group [dst, {coord}], [src]``."""
        emit(f"cp.async.bulk.tensor.{self.ndim}d.global.shared::cta.tile.bulk_group",
             _ptx.addr(dst, coords=self._coords(coord)), src, pred=pred)

    def shared_cta_global_tile(self, *, dst: Any, src: Any, coord: Any = None, mbar: Any,
                               cta_group: int = 1, pred: Any = None) -> None:
        """The ``.shared::cta`` destination form of the load."""
        name = f"cp.async.bulk.tensor.{self.ndim}d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
        if cta_group == 2:
            name += ".cta_group::2"
        emit(name, dst, _ptx.addr(src, coords=self._coords(coord)), mbar, pred=pred)


for _n in range(1, 6):
    _copy = _TensorCopy(_n)
    register("cp", "async_", "bulk", f"tensor_{_n}d")(_copy)
    register("cp", "async_", "bulk", "tensor", f"tile_{_n}d")(_copy)
    register("cp", "async_", "bulk", f"store_{_n}d")(_copy.store)
    register("cp", "async_", "bulk", "tensor", f"store_{_n}d")(_copy.store)


@register("cp", "async_", "bulk", "commit_group")
def _bulk_commit(*, pred: Any = None) -> None:
    """``cp.async.bulk.commit_group``."""
    emit("cp.async.bulk.commit_group", pred=pred)


@register("cp", "async_", "bulk", "wait_group")
def _bulk_wait(n: int = 0, *, read: bool = False, pred: Any = None) -> None:
    """``cp.async.bulk.wait_group[.read] n``."""
    emit(f"cp.async.bulk.wait_group{'.read' if read else ''}", n, pred=pred)


# clusters -------------------------------------------------------------------------
@register("cluster", "sync")
def _cluster_sync(*, aligned: bool = False, pred: Any = None) -> None:
    """``barrier.cluster.arrive`` then ``barrier.cluster.wait``."""
    _cluster_arrive(aligned=aligned, pred=pred)
    _cluster_wait(aligned=aligned, pred=pred)


@register("cluster", "arrive")
def _cluster_arrive(*, aligned: bool = False, pred: Any = None) -> None:
    """``barrier.cluster.arrive[.aligned]``."""
    emit(f"barrier.cluster.arrive{'.aligned' if aligned else ''}", pred=pred)


@register("cluster", "wait")
def _cluster_wait(*, aligned: bool = False, pred: Any = None) -> None:
    """``barrier.cluster.wait[.aligned]``."""
    emit(f"barrier.cluster.wait{'.aligned' if aligned else ''}", pred=pred)


@register("cluster", "arrive_remote")
def arrive_remote(bar_addr: Any, cta_id: Any, count: Any = 1, *, pred: Any = None) -> None:
    """Arrive on the barrier at ``bar_addr`` in cluster CTA ``cta_id``:
    ``mapa.shared::cluster.u32`` then ``mbarrier.arrive.shared::cluster.b64 _, [remote], count``."""
    remote = emit("mapa.shared::cluster.u32", smem_address(bar_addr), cta_id, pred=pred)
    emit("mbarrier.arrive.shared::cluster.b64", _ptx.SINK, _ptx.addr(remote), count, pred=pred)


@register("cluster", "rank")
def _cluster_rank(cta_rank: Any) -> Any:
    """A predicate: ``%cluster_ctarank == cta_rank``."""
    return adopt(_ptx.special.cluster_ctarank()) == cta_rank


@register("cluster", "map_shared_u32")
def _map_shared(addr: Any, cta_rank: Any) -> Any:
    """``mapa.shared::cluster.u32``: the address of ``addr`` in CTA ``cta_rank``."""
    return emit("mapa.shared::cluster.u32", smem_address(addr), cta_rank)

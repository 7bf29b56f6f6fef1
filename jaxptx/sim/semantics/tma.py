"""Emulator semantics: tensor copies (``cp.async.bulk.tensor``, TMA) and the
tensor-map instructions (``tensormap.replace``, ``tensormap.cp_fenceproxy``);
they move bytes as bulk copies do (:mod:`.bulk_copy`).

Tensor maps use jaxptx's own 128-byte encoding (:mod:`..memory.tensormap`). A box
is laid out in shared memory densely, innermost dimension first, with
``ceil(box / element stride)`` elements per dimension. Swizzling permutes
16-byte chunks by shared-memory address bits (PTX ISA, "Tensor Swizzling
Modes": the 128-byte mode XORs the chunk index, address bits 4-6, with the
128-byte line index within a 1024-byte span, bits 7-9; the 64-byte mode bits
4-5 with bits 7-8; the 32-byte mode bit 4 with bit 7; the 128-byte mode's
coarser swizzle atomicities are in :func:`swizzle`), computed on the
shared-memory offset of each byte, so a box whose destination is not aligned
to the pattern starts at the matching base offset, as the ISA's "swizzle
base offset" formula says. Out-of-bounds box elements read as zero or, in
OOB-NaN fill mode, as the canonical NaN of the element type; stores skip
them. An im2col copy lays its pixels out the same way, densely, one pixel's
channels after another. ``.tf32`` elements are rounded from f32 to nearest even (10 mantissa
bits); the ``.ftz`` types also flush subnormals to zero.
"""

from __future__ import annotations

import numpy as np

from ... import ir
from ...types import TYPES
from ..errors import SimError
from ..memory.tensormap import FIELDS, IM2COL, MAGIC, SIZE, VERSION, TensorMap, decode, im2col_elements
from ..core import fastpaths
from ..core.deferred import later
from ..core.observers import LOAD, UPDATE
from ..core.host import ShapeCache
from ..core.step import SPACES, Step
from ..memory.spaces import GLOBAL_SHIFT, PARAM_WINDOW, RANK_SHIFT, SHARED_OFFSET
from .bulk_copy import _U32, _UINT, _aligned, _mbar, _read, _signal, _targets, _write
from .memory import check_cta_window
from .mbarrier import present
from .registry import semantics

__all__ = ["tma_box_addresses", "swizzle"]

_NAN = {2: 0x7FFF, 4: 0x7FFF_FFFF, 8: 0x7FFF_FFFF_FFFF_FFFF}     # the canonical NaN of each width
_U64 = TYPES["u64"]
_CTA_OFFSET, _RANK = np.uint64(SHARED_OFFSET), np.uint64(RANK_SHIFT)    # a shared address's parts
_PARAM_FIRST, _PARAM_END = np.uint64(PARAM_WINDOW), np.uint64(PARAM_WINDOW + (1 << 40))   # the generic .param window


def _tensor_maps(s: Step, k: int) -> np.ndarray:
    """The 128 bytes of each thread's tensor map, ``(n, 128)`` uint8.

    The tensor-map operand is a .param/.const/.global variable, or a register
    with a generic address; a register value below every global buffer is
    taken as a .param offset (what ``mov.u64 %rd, param_name`` gives)."""
    op = s.ins.operands[k]
    base = op.base
    if isinstance(base, ir.Symbol) and base.name in s.m.program.variables:
        space = s.m.program.variables[base.name].space
        if base.name in s.m.program.thread_params:
            space = "local"           # a .func's own .param: per-thread storage
        addr = np.full(s.n, s.symbol_address(base), dtype=np.uint64)
        if space == "shared":      # a tensor map in the executing CTA's shared memory
            addr = s.m.memory.shared_address(addr, s.threads)
    elif isinstance(base, ir.Register):
        addr = s.m.read_register(base.name, s.threads).astype(np.uint64)
        space = "generic"
        if (addr < np.uint64(1 << GLOBAL_SHIFT)).all():
            space = "param"
        elif fastpaths.on() and ((addr >= _PARAM_FIRST) & (addr < _PARAM_END)).all():
            # A generic address in the .param window (``cvta.param``): the
            # same window the generic resolution picks, the same accesses
            # (observers hear the same buffer, offsets and threads).
            addr, space = addr - _PARAM_FIRST, "param"
    else:
        raise SimError(f"{s.ins.name}: cannot read the tensor map operand {op!r}")
    if op.offset is not None:
        off = op.offset if isinstance(op.offset, int) else int(op.offset.value)
        addr = addr + np.uint64((-off if op.minus else off) & 0xFFFF_FFFF_FFFF_FFFF)
    _aligned(s, addr, 64, "tensor map address")
    if fastpaths.on() and not s.m.memory.hears(LOAD):    # one access for the 16 words (nobody hears loads)
        every = (addr[:, None] + np.arange(0, SIZE, 8, dtype=np.uint64)).reshape(-1)
        words = s.m.memory.load(space, every, np.repeat(s.threads, SIZE // 8), 8, s.ins.name).reshape(s.n, -1)
    else:
        words = np.stack([s.m.memory.load(space, addr + np.uint64(8 * j), s.threads, 8, s.ins.name)
                          for j in range(SIZE // 8)], axis=1)
    return np.ascontiguousarray(words).view(np.uint8).reshape(s.n, SIZE)


def _decoded(raw: np.ndarray) -> TensorMap:
    """:func:`decode` of a map's 128 bytes, remembered per bytes on the fast path."""
    if not fastpaths.on():
        return decode(raw)
    key = ("map", raw.tobytes())
    hit = _TABLES.get(key)
    if hit is None:
        hit = _TABLES.put(key, decode(raw))
    return hit


def _coords(s: Step, k: int, rank: int) -> np.ndarray:
    extra = s.ins.operands[k].extra
    items = extra.items if isinstance(extra, ir.Vector) else (extra,)
    if len(items) != rank:
        raise SimError(f"{s.ins.name}: {len(items)} coordinates for a {rank}-d copy")
    return np.stack([s.value(item, TYPES["s32"]).astype(np.int64) for item in items], axis=1)


def tma_box_addresses(tm: TensorMap, coords: np.ndarray, offsets: np.ndarray | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """Global byte addresses ``(n, E)`` and in-bounds mask of each box
    element, box elements in shared-memory order (innermost fastest); an
    im2col map walks its pixels instead (:func:`im2col_elements`)."""
    if fastpaths.on() and tm.mode != IM2COL and _inside(tm, coords):
        # Every box wholly inside the tensor: a fixed offset per box element
        # (the same sums as below, regrouped exactly in int64).
        steps = np.asarray((tm.elem_bytes, *tm.strides), dtype=np.int64)
        first = np.uint64(tm.address) + (coords * steps).sum(axis=-1).astype(np.uint64)
        return first[:, None] + _box_offsets(tm)[None, :], np.ones((len(coords), len(_box_offsets(tm))), bool)
    if tm.mode == IM2COL:
        g = im2col_elements(tm, coords, offsets if offsets is not None else np.zeros_like(coords[:, 2:]))
    else:
        counts = tm.counts
        pos = np.stack(np.unravel_index(np.arange(int(np.prod(counts))), counts[::-1])[::-1], axis=1)
        g = coords[:, None, :] + pos[None] * np.asarray(tm.element_strides, dtype=np.int64)
    inb = ((g >= 0) & (g < np.asarray(tm.dims, dtype=np.int64))).all(axis=-1)
    g = np.where(inb[..., None], g, 0)
    steps = np.asarray((tm.elem_bytes, *tm.strides), dtype=np.int64)
    return (np.uint64(tm.address) + (g * steps).sum(axis=-1).astype(np.uint64)), inb


_TABLES = ShapeCache(16 << 20)


def _inside(tm: TensorMap, coords: np.ndarray) -> bool:
    """Whether every box at ``coords`` ``(n, rank)`` lies wholly in the tensor."""
    last = coords + (np.asarray(tm.counts, dtype=np.int64) - 1) * np.asarray(tm.element_strides, dtype=np.int64)
    return bool((coords >= 0).all() and (last < np.asarray(tm.dims, dtype=np.int64)).all())


def _box_offsets(tm: TensorMap) -> np.ndarray:
    """Byte offset (uint64) of each box element from the box's first, in
    shared-memory order (a tiled map; cached per box shape and strides)."""
    key = ("box", tm.counts, tm.element_strides, tm.elem_bytes, tm.strides)
    hit = _TABLES.get(key)
    if hit is None:
        counts = tm.counts
        pos = np.stack(np.unravel_index(np.arange(int(np.prod(counts))), counts[::-1])[::-1], axis=1)
        steps = np.asarray((tm.elem_bytes, *tm.strides), dtype=np.int64)
        hit = _TABLES.put(key, ((pos * np.asarray(tm.element_strides, dtype=np.int64)) * steps).sum(axis=-1)
                          .astype(np.uint64))
    return hit


def swizzled_box(starts: np.ndarray, e: int, w: int, span: int, atomicity: int) -> np.ndarray:
    """``swizzle(starts[:, None] + arange(e) * w, span, atomicity)`` for
    128-byte aligned ``starts``: the swizzle reads address bits 7-9 and
    changes bits 3-6 only, so each start's bits from 10 up pass through and
    the rest is one of eight cached rows."""
    if not fastpaths.on() or not span:
        return swizzle(starts[:, None] + np.arange(e, dtype=np.uint64) * np.uint64(w), span, atomicity)
    key = ("swizzle", e, w, span, atomicity)
    table = _TABLES.get(key)
    if table is None:
        lin = np.arange(e, dtype=np.uint64) * np.uint64(w)
        table = _TABLES.put(key, swizzle((np.arange(8, dtype=np.uint64) * np.uint64(128))[:, None] + lin,
                                         span, atomicity))
    starts = np.asarray(starts, dtype=np.uint64)
    return (starts & ~np.uint64(1023))[:, None] + table[((starts >> np.uint64(7)) & np.uint64(7)).astype(np.intp)]


def swizzle(addr: np.ndarray, span: int, atomicity: int = 0) -> np.ndarray:
    """Shared-memory address of each byte under a ``span``-byte swizzle:
    address bits [4, 4+b) XOR bits [7, 7+b), b = log2(span / 16).

    ``atomicity`` is the tensor map's swizzle atomicity code (128-byte
    swizzle only; CUDA driver ``CU_TENSOR_MAP_SWIZZLE_128B_ATOM_*``): 0
    swaps 16-byte chunks as above; 1 swaps 32-byte chunks (bits [5, 7) XOR
    bits [7, 9)); 2 does that and also swaps the two 8-byte halves of each
    16-byte chunk on odd 128-byte rows (bit 3 XOR bit 7); 3 swaps 64-byte
    chunks (bit 6 XOR bit 7)."""
    if not span:
        return addr
    if atomicity == 0:
        mask = np.uint64(span // 16 - 1)
        return addr ^ (((addr >> np.uint64(7)) & mask) << np.uint64(4))
    row = addr >> np.uint64(7)
    if atomicity == 3:
        return addr ^ ((row & np.uint64(1)) << np.uint64(6))
    out = addr ^ ((row & np.uint64(3)) << np.uint64(5))
    if atomicity == 2:
        out = out ^ ((row & np.uint64(1)) << np.uint64(3))
    return out


def _convert(tm: TensorMap, values: np.ndarray) -> np.ndarray:
    """Element conversion on load: f32 → tf32 (round to nearest even), and
    subnormal flushing for the .ftz element types."""
    if tm.elemtype in (8, 12):
        sub = (values & np.uint32(0x7F80_0000)) == 0
        values = np.where(sub, values & np.uint32(0x8000_0000), values)
    if tm.elemtype in (11, 12):
        finite = (values & np.uint32(0x7F80_0000)) != np.uint32(0x7F80_0000)
        wide = values.astype(np.uint64)
        up = wide + np.uint64(0xFFF) + ((wide >> np.uint64(13)) & np.uint64(1))   # ties to even
        values = np.where(finite, (up & np.uint64(0xFFFF_E000)).astype(np.uint32), values)
    return values


def _run(tm: TensorMap, starts: np.ndarray, e: int) -> int:
    """The runs of bytes a box of ``e`` elements at shared ``starts`` comes
    in unbroken by the swizzle (for the sanitizer): 16-byte chunks (8-byte
    halves with the 128-byte mode's atomicity 2), when the box and its
    starts are aligned to them; else single elements."""
    run = 8 if tm.atomicity == 2 else 16
    ok = (e * tm.elem_bytes) % run == 0 and not (starts.astype(np.int64) % run).any()
    return max(run, tm.elem_bytes) if ok else tm.elem_bytes


def _tensor_load(s: Step, tm: TensorMap, sel: np.ndarray, coords: np.ndarray, dst: np.ndarray,
                 mbar: np.ndarray, offsets: np.ndarray | None) -> None:
    w = tm.elem_bytes
    gaddr, inb = tma_box_addresses(tm, coords, offsets)
    n, e = gaddr.shape
    threads = np.repeat(s.threads[sel], e)
    whole = fastpaths.on() and tm.mode != IM2COL and _inside(tm, coords)
    sub = Step(s.m, s.ins, s.r, s.threads[sel])
    targets = _targets(sub, dst, mbar)          # operands are read at issue (..core.deferred)

    def copy() -> None:
        if whole:                       # every element in bounds (a fast path's answer)
            values = s.m.memory.load("global", gaddr.ravel(), threads, w, s.ins.name).astype(_UINT[w], copy=False)
        else:
            values = np.full(n * e, _NAN[w] if tm.fill else 0, dtype=_UINT[w])
            flat = inb.ravel()
            if flat.any():
                values[flat] = s.m.memory.load("global", gaddr.ravel()[flat], threads[flat], w, s.ins.name)
        values = _convert(tm, values).reshape(n, e)
        for pos, d, mb in targets:          # d, mb: already those of the threads at pos
            if _box_write(sub, tm, pos, d, values, e):
                _signal(sub, pos, mb, np.full(len(pos), tm.box_bytes))
                continue
            addr = swizzled_box(d, e, w, tm.swizzle, tm.atomicity).ravel()
            _write(sub, "shared", addr, np.repeat(sub.threads[pos], e), values[pos].ravel(), w,
                   _run(tm, d, e))
            _signal(sub, pos, mb, np.full(len(pos), tm.box_bytes))
    later(sub, copy, "mbarrier")


def _box_index(s: Step, tm: TensorMap, threads: np.ndarray, dst: np.ndarray, e: int,
               hook: str) -> np.ndarray | None:
    """The fast path's shared-memory side of whole-box copies: the byte
    offsets in the shared buffer ``(len(dst) * e,)`` of each box element at
    the 128-byte aligned shared::cluster addresses ``dst`` (the cached
    swizzled offsets of the box, :func:`swizzled_box`, plus each
    destination CTA's window), the access hook told the event
    :meth:`Memory.locations` gives it. ``None`` (nothing told) unless fast
    paths are on, no observer hears ``hook`` (the async-proxy events),
    every address names a CTA of the cluster and every byte lies within the
    shared window, so the general path could not fault."""
    memory, w = s.m.memory, tm.elem_bytes
    if not fastpaths.on() or s.m.observers.hook(hook) is not None or not len(dst) or memory.shared_size % w:
        return None
    offsets = dst & _CTA_OFFSET
    span = -(-e * w // 128) * 128          # the swizzle stays within each 128-byte row
    if int(offsets.max()) + span > memory.shared_limit:
        return None
    cta = threads // s.m.ntid
    if memory.cta_ranks is None:
        if (dst >> _RANK).any():
            return None
        owner = cta
    else:
        rank = (dst >> _RANK).astype(np.int64)
        if (rank >= memory.cluster_size).any():
            return None
        own = memory.cta_ranks[cta]
        owner = cta if (rank == own).all() else np.asarray(memory.cluster_cta(cta, rank), dtype=np.int64)
    where = (swizzled_box(offsets, e, w, tm.swizzle, tm.atomicity).view(np.int64)
             + (owner * memory.shared_size)[:, None]).ravel()
    if memory.on_access is not None:        # the event of Memory.locations (one group)
        memory.on_access(memory.shared, where, np.repeat(threads, e), w, UPDATE)
    return where // w if w > 1 else where


def _box_write(s: Step, tm: TensorMap, pos: np.ndarray, dst: np.ndarray, values: np.ndarray, e: int) -> bool:
    """Write whole boxes ``values[pos]`` ``(len(pos), e)`` at ``dst`` with one
    scatter (:func:`_box_index`); ``False`` (nothing written) when the fast
    path does not apply. Several boxes on one byte: the later thread wins,
    as in the general path."""
    index = _box_index(s, tm, s.threads[pos], dst, e, "copy_write")
    if index is None:
        return False
    s.m.memory.shared.view(_UINT[tm.elem_bytes])[index] = values[pos].ravel()
    return True


def _tensor_store(s: Step, tm: TensorMap, sel: np.ndarray, coords: np.ndarray, src: np.ndarray) -> None:
    w = tm.elem_bytes
    gaddr, inb = tma_box_addresses(tm, coords)
    n, e = gaddr.shape
    threads = np.repeat(s.threads[sel], e)
    sub = Step(s.m, s.ins, s.r, s.threads[sel])

    def copy() -> None:
        index = _box_index(sub, tm, sub.threads, src, e, "copy_read")
        if index is not None:           # whole boxes, one gather
            values = s.m.memory.shared.view(_UINT[w]).take(index)
        else:
            values = _read(s, "shared", swizzled_box(src, e, w, tm.swizzle, tm.atomicity).ravel(), threads, w,
                           _run(tm, src, e))
        flat = inb.ravel()
        if flat.any():
            s.m.memory.store("global", gaddr.ravel()[flat], threads[flat], values[flat], w, s.ins.name)
    later(sub, copy, "bulk")


@semantics('cp_async_bulk_tensor')
def cp_async_bulk_tensor(s: Step) -> None:
    """``cp.async.bulk.tensor.Nd``: a box of the tensor described by the
    tensor map, at signed element coordinates ``{c0, ...}`` (c0 innermost),
    global → shared (complete-tx of the box's bytes on ``[mbar]``;
    ``.multicast::cluster``: into each CTA of ``ctaMask`` at the same
    offsets, signalling the mbarrier at the same offset in each, or with
    ``.cta_group::2`` in the CTA of each one's pair that has the parity of
    ``[mbar]``'s CTA; unicast ``.cta_group::2`` may signal the peer CTA's
    mbarrier, ``.cta_group::1`` only the destination CTA's) or
    shared::cta → global (bulk_group; out-of-bounds elements are not
    written). ``.tile`` copies need a tiled map; ``.im2col`` loads (with the
    ``im2colOffsets`` operand) and ``.im2col_no_offs`` stores (offsets 0)
    need an im2col map and move its pixels-per-column × channels-per-pixel
    elements. The shared address must be 128-byte aligned (PTX ISA,
    cp.async.bulk.tensor; "Tensors": "Tiled mode", "im2col mode"; "Tensor
    Swizzling Modes"; "Out of Boundary Access")."""
    mode = s.mod("load_mode", "tile")
    load = s.mod("dst") != "global"
    k = present(s, "tensor")
    rank = int(s.mod("dim")[0])
    coords = _coords(s, k, rank)
    j = present(s, "im2col_offsets")
    offsets = None if j is None else s.src(j, TYPES["u16"]).astype(np.int64).reshape(s.n, rank - 2)
    raw = _tensor_maps(s, k)
    _, smem = s.address(0 if load else present(s, "src"))
    _aligned(s, smem, 128, "shared-memory address")
    if not load and s.mod("src") == "shared::cta":
        check_cta_window(s, smem, "source")
    mbar = _mbar(s)
    if fastpaths.on() and (raw == raw[:1]).all():       # one map for every thread (the usual case)
        maps, inverse = raw[:1], np.zeros(s.n, dtype=np.intp)
    else:
        maps, inverse = np.unique(raw, axis=0, return_inverse=True)
    for g in range(len(maps)):
        tm = _decoded(maps[g])
        if tm.rank != rank:
            raise SimError(f"{s.ins.name}: a {rank}-d copy with a rank-{tm.rank} tensor map")
        if (tm.mode == IM2COL) != (mode != "tile"):
            kind = "an im2col" if tm.mode == IM2COL else "a tiled"
            raise SimError(f"{s.ins.name}: a .{mode} copy with {kind} tensor map")
        sel = np.nonzero(inverse.ravel() == g)[0]
        if load:
            _tensor_load(s, tm, sel, coords[sel], smem[sel], mbar[sel],
                         None if offsets is None else offsets[sel])
        else:
            _tensor_store(s, tm, sel, coords[sel], smem[sel])


# --- tensor maps ------------------------------------------------------------------------------------


def _map_space(s: Step) -> str:
    mod = s.mod("space")
    return SPACES[mod] if mod else "generic"


@semantics('tensormap_replace')
def tensormap_replace(s: Step) -> None:
    """``tensormap.replace.tile.field{.space}.b1024.type [addr], {ord,} new_val``:
    rewrite one field of the tensor map at ``addr`` in jaxptx's layout (PTX
    ISA, tensormap.replace: ``.rank`` takes rank - 1; enumerated fields take
    the ISA's codes). The magic and version are written too, so a map can be
    built field by field in zeroed memory."""
    field = s.mod("field")
    offset, width, step = FIELDS[field]
    _, base = s.address(0)
    space = _map_space(s)
    addr = base + np.uint64(offset)
    k = present(s, "ord")
    if k is not None:
        ordinal = s.src(k, _U32).astype(np.int64)
        if (ordinal >= (4 if field == "global_stride" else 5)).any():
            raise SimError(f"{s.ins.name}: ordinal {int(ordinal.max())} out of range for .{field}")
        addr = addr + (ordinal * step).astype(np.uint64)
    value = s.src(present(s, "new_val"), _U64).astype(_UINT[width])
    s.m.memory.store(space, addr, s.threads, value, width, s.ins.name)
    old = s.m.memory.load(space, base, s.threads, 8, s.ins.name)
    header = np.uint64(MAGIC | VERSION << 32)
    s.m.memory.store(space, base, s.threads, (old & np.uint64(0xFFFF_FF00_0000_0000)) | header, 8,
                     s.ins.name)


@semantics('tensormap_cp_fenceproxy')
def tensormap_cp_fenceproxy(s: Step) -> None:
    """``tensormap.cp_fenceproxy.global.shared::cta... [dst], [src], size``:
    copy a ``size``-byte (128) tensor map from shared to global memory; the
    proxy fence has nothing to order here (PTX ISA, tensormap.cp_fenceproxy)."""
    _, dst = s.address(0)
    _, src = s.address(1)
    size = int(s.src(2, _U32)[0])
    for j in range(0, size, 8):
        data = s.m.memory.load("shared", src + np.uint64(j), s.threads, 8, s.ins.name)
        s.m.memory.store("global", dst + np.uint64(j), s.threads, data, 8, s.ins.name)

"""Emulator semantics: loads, stores, asynchronous copies and cache hints.

``ld``/``ldu``/``ld.global.nc`` and ``st`` in every state space, scalar
(``.b8`` to ``.b128``: a 16-byte access moves :mod:`..numerics.b128` records) and
``.v2``/``.v4``/``.v8`` vectors, ``cp.async`` (Ampere global → shared
copies) and ``createpolicy``. Caching, eviction and ordering qualifiers
(``.ca``, ``.L2::evict_last``, ``.volatile``, ``.relaxed.gpu`` ...) change
nothing here: the emulator has no caches and runs one instruction at a time,
so every access is immediately visible to all threads (``prefetch`` has
nothing to do; the machine skips it). The atomics live in
:mod:`.atomics`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ... import ir, isa
from ...types import TYPES
from ..errors import SimError, SimFault
from ..memory.spaces import RANK_SHIFT
from ..numerics.values import UINT, from_bits, to_bits, value_dtype
from ..core.deferred import deferred_of, later
from ..core.step import Step
from .registry import semantics

__all__ = ["operand_index", "check_alignment", "check_cta_window"]


def operand_index(s: Step, name: str) -> int | None:
    """Position of the table operand called ``name`` in this instruction, or
    ``None`` when the chosen form does not have it."""
    if s.r is None:
        return None
    names = [o.name for o in isa.active_operands(s.r)]
    return names.index(name) if name in names else None


def check_alignment(s: Step, addr: np.ndarray, size: int, what: str) -> None:
    """PTX ISA, "Vectors" / ``ld``: a vector access must be aligned to the
    size of the whole vector (``ld.v4.f32`` to 16 bytes). The memory checks
    each element; this checks the vector."""
    # A power-of-two size (every vector's): a mask, several times cheaper than uint64 %.
    bad = ((addr & np.uint64(size - 1)) if size & (size - 1) == 0 else (addr % np.uint64(size))) != 0
    if bad.any():
        m = s.m
        cta, tid = divmod(int(s.threads[bad][0]), m.ntid)
        (bx, by, _), (gx, gy, _) = m.block, m.grid
        at = int(addr[bad][0])
        raise SimFault(f"{s.ins.name}: misaligned {size}-byte {what} at {at:#x}{m.memory.describe(at)} by CTA "
                       f"({cta % gx}, {cta // gx % gy}, {cta // (gx * gy)}) thread "
                       f"({tid % bx}, {tid // bx % by}, {tid // (bx * by)})")


def check_cta_window(s: Step, addr: np.ndarray, what: str, used: np.ndarray | None = None) -> None:
    """A ``.shared::cta`` operand (and ``.shared``, which means it) must name
    the executing CTA's shared memory; an address carrying another CTA's
    cluster rank is undefined behaviour (PTX ISA, cvta and "Shared State
    Space": the address must belong to the ``::cta`` window), so it raises.
    ``used``: which threads' addresses count (default all). Nothing to check
    outside clusters."""
    threads = s.threads
    if used is not None:
        addr, threads = addr[used], threads[used]
    k = s.m.memory.foreign(addr, threads)
    if k is not None:
        rank = int(np.asarray(addr, dtype=np.uint64)[k] >> np.uint64(RANK_SHIFT))
        own = int(s.m.cluster_register("cluster_ctarank", 0, threads[k:k + 1] // s.m.ntid)[0])
        raise SimError(f"{s.ins.name}: the {what} {int(addr[k]):#x} names the shared memory of cluster rank {rank}, "
                       f"not the executing CTA's (rank {own}); a .shared::cta operand must be in the executing "
                       "CTA, another CTA's needs .shared::cluster (PTX: undefined behaviour)")


def _cta_only(s: Step, space: str) -> bool:
    """A ``.shared`` / ``.shared::cta`` access in a launch with clusters."""
    return space == "shared" and s.m.memory.cta_ranks is not None and "shared::cluster" not in s.ins.modifiers


def _added(base: np.ndarray, off: int) -> np.ndarray:
    """``base + off`` as :meth:`Step.address` adds them (uint64, wrapping)."""
    return base + np.uint64(off & 0xFFFF_FFFF_FFFF_FFFF) if off else base


def _elements(op: ir.Operand) -> int:
    return len(op.items) if isinstance(op, ir.Vector) else 1


@semantics('ld')
def ld(s: Step) -> None:
    """``ld``, ``ldu``, ``ld.global.nc``: load a scalar or a vector.

    PTX ISA, ld: vector elements are consecutive in memory; the destination
    register may be wider than the type, and then the value is sign-extended
    for signed types and zero-extended for the others (``s.dst`` does this).
    ``ld.param`` of an entry's parameter reads the param space, where
    ``launch`` put the arguments. ``ldu`` reads like ``ld`` (all threads see
    the same memory)."""
    t = s.type(0)
    count = _elements(s.ins.operands[0])
    space, base, off = s.address_parts(1)
    if not _cta_only(s, space) and t.bits == 8 * t.nbytes:
        # One gather of whole elements or vectors, the offset folded in, when
        # the access takes the memory's fast path (nobody hears loads; in
        # bounds and aligned, so nothing to report).
        got = s.m.memory.gather(space, base, s.threads, t.nbytes, count, scratch=count > 1, offset=off)
        if got is not None:
            if count == 1:
                s.dst(0, from_bits(t, got))
                return
            for i, item in enumerate(s.ins.operands[0].items):
                s.write(item, from_bits(t, got[:, i].copy()), t)
            return
    addr = _added(base, off)
    if _cta_only(s, space):
        check_cta_window(s, addr, "address")
    if count == 1:
        s.dst(0, s.load(space, addr, t))
        return
    check_alignment(s, addr, count * t.nbytes, "vector load")
    values = [s.load(space, addr + np.uint64(i * t.nbytes), t) for i in range(count)]
    # Each element to its register as loaded (contiguous: adopted without a
    # copy), in the order Step.write of the stacked vector writes them.
    for item, value in zip(s.ins.operands[0].items, values):
        s.write(item, value, t)


@semantics('st')
def st(s: Step) -> None:
    """``st``: store a scalar or a vector.

    PTX ISA, st: vector elements go to consecutive addresses; a source
    register wider than the type stores its low bits. When several threads
    store to one address the highest thread index wins (some serial order)."""
    t = s.type(1)
    space, base, off = s.address_parts(0)
    count = _elements(s.ins.operands[1])
    values = s.src(1)
    width = t.nbytes
    if not _cta_only(s, space) and t.lanes == 1 and t.bits == 8 * width:
        # One scatter of whole elements or vectors (Memory.gather's fast path).
        if count == 1:
            bits = to_bits(t, values, 8 * width)
            if bits.shape == (s.n,) and s.m.memory.scatter(space, base, s.threads, bits, width, 1, off):
                return
        elif values.ndim == 2 and values.dtype == value_dtype(t) and values.flags.c_contiguous and \
                s.m.memory.scatter(space, base, s.threads, values.view(UINT[8 * width]), width, count, off):
            return
    addr = _added(base, off)
    if _cta_only(s, space):
        check_cta_window(s, addr, "address")
    if count == 1:
        s.store(space, addr, values, t)
        return
    check_alignment(s, addr, count * t.nbytes, "vector store")
    for i in range(count):
        s.store(space, addr + np.uint64(i * t.nbytes), values[..., i], t)


def _src_size(s: Step, cp_size: int) -> np.ndarray | None:
    """Bytes to read per thread: the ``src-size`` operand, or 0 where the
    ``ignore-src`` predicate is true; ``None`` when the copy is whole."""
    k = operand_index(s, "src_size")
    if k is None:
        return None
    op = s.ins.operands[k]
    inner = op.operand if isinstance(op, ir.Negated) else op
    is_pred = isinstance(op, ir.Negated) or (
        isinstance(inner, ir.Register) and s.m.program.registers.get(inner.name, TYPES["b32"]).kind == "pred")
    if is_pred:
        return np.where(s.pred(k), 0, cp_size).astype(np.int64)
    size = s.src(k, TYPES["u32"]).astype(np.int64)
    if (size > cp_size).any():
        raise SimError(f"{s.ins.name}: src-size {int(size.max())} is larger than cp-size {cp_size}")
    return size


@semantics('cp_async')
def cp_async(s: Step) -> None:
    """``cp.async.ca/cg.shared.global [dst], [src], cp-size{, src-size | ignore-src}``.

    PTX ISA, cp.async: copies cp-size (4, 8, 16) bytes from global to shared
    memory; only the first src-size bytes are read and the rest of the
    destination is zero-filled; with the ``ignore-src`` predicate true the
    whole destination is zero-filled. The emulator copies at once, so the copy
    is complete before the next instruction — except under
    ``schedule="random"``, where it completes later, by the
    ``cp.async.wait_group`` that waits for its group at the latest
    (:mod:`..core.deferred`)."""
    cp_size = int(s.src(2, TYPES["u32"])[0]) if s.n else 0
    if cp_size not in (4, 8, 16):
        raise SimError(f"{s.ins.name}: cp-size must be 4, 8 or 16, got {cp_size}")
    dst, src = s.address(0)[1].copy(), s.address(1)[1].copy()     # kept past the step (..core.deferred)
    check_cta_window(s, dst, "destination")
    check_alignment(s, dst, cp_size, "cp.async destination")
    check_alignment(s, src, cp_size, "cp.async source")
    size = _src_size(s, cp_size)
    mem = s.m.memory
    word = min(cp_size, 8)

    def copy() -> None:
        data = np.zeros((s.n, cp_size), dtype=np.uint8)
        if size is None or (size == cp_size).all():
            for i in range(0, cp_size, word):
                bits = mem.load("global", src + np.uint64(i), s.threads, word, s.ins.name)
                data[:, i:i + word] = bits.reshape(-1, 1).view(np.uint8)
        else:
            for i in range(cp_size):
                live = size > i
                if live.any():
                    data[live, i] = mem.load("global", src[live] + np.uint64(i), s.threads[live], 1, s.ins.name)
        words = data.view({4: np.uint32, 8: np.uint64}[word])
        for j in range(cp_size // word):
            mem.store("shared", dst + np.uint64(j * word), s.threads, words[:, j], word, s.ins.name)
    later(s, copy, "cp_async")


@semantics('cp_async_commit_group', 'cp_async_wait_group')
def cp_async_group(s: Step) -> None:
    """``cp.async.commit_group``, ``cp.async.wait_group n``, ``cp.async.wait_all``
    (PTX ISA: wait_group waits until at most n of the thread's most recent
    groups are pending; wait_all is commit_group then wait_group 0). Nothing
    is pending on the default schedule (copies complete at issue); under a
    random one the copies of the older groups complete here."""
    d = deferred_of(s)
    if d is None:
        return
    if s.ins.opcode == "cp.async.commit_group":
        d.commit(s.threads)
    elif s.ins.opcode.endswith("all"):
        d.cp_async_wait(s.threads, None)
    else:
        d.cp_async_wait(s.threads, int(s.src(0, TYPES["u32"])[0]) if s.n else 0)


@semantics('createpolicy')
def createpolicy(s: Step) -> None:
    """``createpolicy``: an opaque 64-bit cache policy (PTX ISA, createpolicy).

    Only ``.L2::cache_hint`` operands consume it and the emulator has no
    cache, so any value is right; this one is deterministic: the primary
    and secondary priorities and the fraction's bits for ``.fractional``,
    the input for ``.cvt``."""
    if s.ins.opcode == "createpolicy.cvt":
        s.dst(0, s.src(1, TYPES["b64"]), TYPES["b64"])
        return
    primaries = ["L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged"]
    primary = primaries.index(s.mod("primary", "L2::evict_normal"))
    secondary = primaries.index(s.mod("secondary", "L2::evict_unchanged"))
    value = np.uint64(0x8000_0000_0000_0000 | primary << 48 | secondary << 44)
    if s.mod("mode") == "fractional":
        k = operand_index(s, "fraction")
        frac = s.src(k, TYPES["f32"]) if k is not None and k < len(s.ins.operands) else np.ones(s.n, np.float32)
        bits = np.asarray(frac, dtype=np.float32).view(np.uint32).astype(np.uint64)
        s.dst(0, value | bits, TYPES["b64"])
    else:
        s.dst(0, np.full(s.n, value | np.uint64(1 << 40), dtype=np.uint64), TYPES["b64"])

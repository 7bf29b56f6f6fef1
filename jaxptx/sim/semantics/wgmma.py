"""Emulator semantics: Hopper warpgroup MMA (``wgmma.mma_async`` and its
fence / commit / wait instructions).

On the default schedule every ``wgmma.mma_async`` completes when the
warpgroup executes it: D holds the result at once, so ``wgmma.fence``,
``wgmma.commit_group`` and ``wgmma.wait_group`` have nothing to order or
wait for. (A program that reads D before ``wait_group`` is racy on a GPU but
reads the finished result there; the sanitizer's ``async_results`` check
reports it.) Under ``schedule="random"`` the multiply completes later
(:mod:`..core.deferred`): its operands are read at completion — the
shared-memory tiles through the descriptors, A's registers, D's input — and
D written then, as the async proxy does on hardware, at a seeded step or at
the ``wgmma.wait_group`` that waits for its group (``commit_group`` counts
the groups per thread). So a kernel that overwrites an operand tile, or
reads D, before that wait gets a result that depends on the seed. The
descriptors, predicates and immediates are read at issue.

Operands in shared memory are read through 64-bit matrix descriptors (PTX
ISA "Matrix Descriptor Format") in the canonical layouts of "Shared Memory
Matrix Layout": K-major or MN-major, no swizzle or 32/64/128-byte swizzle.
"""

from __future__ import annotations

import sys

import numpy as np

from ... import ir
from ...isa import fragments as layouts
from ...isa.encodings import wgmma_fields
from ...types import TYPES
from ..errors import SimError
from .fragments import ELEMENT_BITS as _BITS
from .fragments import dims_of as _dims
from .fragments import cta_blocks, gather, groups, ordered, scatter
from .mma import decode, encode, plain_vector, registers, unpack, write_accumulator
from ..core import fastpaths
from ..core.deferred import deferred_of, later
from ..core.host import ShapeCache
from ..core.observers import LOAD
from ..core.step import Step
from .registry import semantics

__all__ = ["descriptor_fields", "smem_matrix_addresses"]

_FLOATS = ("f16", "bf16", "tf32", "e4m3", "e5m2")


# --- descriptors and shared-memory layouts -----------------------------------------------------

def descriptor_fields(desc: np.ndarray) -> dict[str, np.ndarray]:
    """The fields of matrix descriptors (uint64 array), as
    :func:`jaxptx.isa.encodings.wgmma_fields` reads them: ``start``,
    ``lbo``, ``sbo`` (bytes), ``base_offset``, ``swizzle`` (the code) and
    ``atom_bytes`` (the swizzle atom's row bytes)."""
    return wgmma_fields(desc)


def smem_matrix_addresses(desc: np.ndarray, mn: int, k: int, bits: int, mn_major: np.ndarray) -> np.ndarray:
    """Shared-memory byte addresses ``(count, mn, k)`` of every element
    ``[x, y]`` (x along M or N, y along K) of the matrices that descriptors
    ``desc`` ``(count,)`` describe, K-major or MN-major per ``mn_major``.

    With ``T = 16 bytes / element size`` elements per 16-byte chunk and
    ``W`` the swizzle atom's row bytes (16 without swizzle), the canonical
    layouts of PTX ISA "Canonical Layouts" are, in bytes:

    - K-major: x = (r, i) with r = x % 8, i = x / 8; y = (t, c) with t = y % T,
      c = y / T: ``r * W + i * SBO + t * size + c * (16 if swizzled else LBO)``
      (no swizzle: 8x16-byte core matrices, ``LBO`` between them along K);
    - MN-major: x = (t, c, i) with t = x % T, c = (x / T) % (W / 16),
      i = x / (T * W / 16); y = (r, j) with r = y % 8, j = y / 8:
      ``t * size + c * 16 + r * W + i * (LBO if swizzled else SBO) +
      j * (SBO if swizzled else LBO)``.

    Swizzling (CuTe ``Swizzle<b, 4, 3>``, b = log2(W / 16)) then XORs address
    bits [4, 4+b) with bits [7, 7+b) of the absolute shared address; the
    descriptor's base offset is subtracted from bits [7, 10) first (it says
    where the 1024/512/256-byte repeating pattern starts).
    """
    f = {name: v[:, None, None] for name, v in descriptor_fields(desc).items()}
    size = bits // 8
    per = 16 // size
    width = f["atom_bytes"]
    chunks = width // 16
    swizzled = f["swizzle"] != 0
    x = np.arange(mn)[None, :, None]
    y = np.arange(k)[None, None, :]
    major = np.asarray(mn_major, dtype=bool).reshape(-1, 1, 1)
    kmaj = ((x % 8) * width + (x // 8) * f["sbo"] + (y % per) * size
            + (y // per) * np.where(swizzled, 16, f["lbo"]))
    mnmaj = ((x % per) * size + ((x // per) % chunks) * 16 + (y % 8) * width
             + (x // (per * chunks)) * np.where(swizzled, f["lbo"], f["sbo"])
             + (y // 8) * np.where(swizzled, f["sbo"], f["lbo"]))
    addr = f["start"] + np.where(major, mnmaj, kmaj)
    phase = ((addr >> 7) - f["base_offset"]) & (chunks - 1)
    return addr ^ (phase << 4)


def _smem_matrix(s: Step, desc: np.ndarray, leader: np.ndarray, mn: int, k: int, type_name: str,
                 mn_major: np.ndarray) -> np.ndarray:
    """Element values ``(count, mn, k)`` read from each warpgroup's CTA shared
    memory (``leader``: one thread of each warpgroup) through ``desc``."""
    bits = _BITS[type_name]
    if bits == 1:       # .b1: 8 elements a byte, the lowest K index in the lowest bit
        raw = _smem_matrix(s, desc, leader, mn, k // 8, "u8", mn_major).astype(np.uint8)
        return np.unpackbits(raw[..., None], axis=-1, bitorder="little").reshape(raw.shape[:2] + (k,))
    raw = _gather_chunks(s, desc, leader, mn, k, bits // 8, np.asarray(mn_major, dtype=bool))
    if raw is not None:
        return decode(raw.reshape(-1), type_name).reshape(raw.shape)
    addr = _addresses(desc, mn, k, bits, mn_major)
    raw = _load_chunks(s, addr, leader, bits // 8, np.asarray(mn_major, dtype=bool))
    if raw is None:
        threads = np.broadcast_to(leader[:, None, None], addr.shape).reshape(-1)
        raw = s.m.memory.load("shared", s.m.memory.shared_address(addr.reshape(-1), threads), threads, bits // 8,
                               s.ins.name)
    return decode(raw.reshape(-1), type_name).reshape(addr.shape)


_ADDRESSES = ShapeCache(32 << 20)


def _addresses(desc: np.ndarray, mn: int, k: int, bits: int, mn_major: np.ndarray) -> np.ndarray:
    """:func:`smem_matrix_addresses`; on the fast path computed once per
    distinct descriptor (a GEMM cycles through a few: descriptors hold
    CTA-relative offsets, so every CTA's are the same) and cached."""
    if not fastpaths.on():
        return smem_matrix_addresses(desc, mn, k, bits, mn_major)
    major = np.asarray(mn_major, dtype=bool).reshape(-1)
    if (major != major[0]).any():
        return smem_matrix_addresses(desc, mn, k, bits, mn_major)
    mj = bool(major[0])
    uniq, inverse = np.unique(desc.astype(np.uint64), return_inverse=True)
    rows = []
    for word in uniq:
        key = (int(word), mj, mn, k, bits)
        hit = _ADDRESSES.get(key)
        if hit is None:
            hit = _ADDRESSES.put(key, smem_matrix_addresses(np.array([word], dtype=np.uint64), mn, k, bits,
                                                            np.array([bool(mj)]))[0])
        rows.append(hit)
    return np.stack(rows)[inverse.reshape(-1)]


def _gather_chunks(s: Step, desc: np.ndarray, leader: np.ndarray, mn: int, k: int, size: int,
                   mn_major: np.ndarray) -> np.ndarray | None:
    """The fast path's operand read: the raw ``size``-byte elements
    ``(count, mn, k)`` of the matrices ``desc`` describes, as one gather of
    the 16-byte chunks of the canonical layouts straight from the shared
    buffer, through a per-descriptor map of chunk offsets (cached with the
    addresses). Taken only when nobody hears loads and every chunk lies in
    bounds in its warpgroup's own CTA window (so the general path could not
    fault); ``None`` otherwise."""
    memory = s.m.memory
    hears = getattr(memory, "hears", None)
    listening = memory.on_access is not None if hears is None else hears(LOAD)
    per = 16 // size
    major = mn_major.reshape(-1)
    along = mn if major[0] else k
    if not fastpaths.on() or listening or per == 1 or along % per or (major != major[0]).any():
        return None
    count = len(desc)
    starts = _chunk_starts(desc, mn, k, size * 8, bool(major[0]))
    lo, hi = int(starts.min()), int(starts.max())
    if lo < 0 or hi + 16 > memory.shared_limit or (starts & 15).any() or memory.shared_size % 16:
        return None
    buf = memory.shared
    units = buf[:len(buf) // 16 * 16].view("V16")
    owner = (leader // s.m.ntid) * (memory.shared_size // 16)
    index = owner.reshape(-1, *(1,) * (starts.ndim - 1)) + (starts >> 4)
    chunks = units.take(index, mode="clip")
    elements = chunks.view(f"<u{size}").reshape(index.shape + (per,))
    if major[0]:                        # (count, mn / per, k, per) -> (count, mn, k)
        elements = elements.transpose(0, 1, 3, 2)
    return elements.reshape(count, mn, k)


def _chunk_starts(desc: np.ndarray, mn: int, k: int, bits: int, mn_major: bool) -> np.ndarray:
    """CTA-relative byte offsets (int64) of the 16-byte chunks of
    :func:`smem_matrix_addresses`: ``(count, mn / per, k)`` MN-major or
    ``(count, mn, k / per)`` K-major; cached per distinct descriptor."""
    per = 128 // bits
    uniq, inverse = np.unique(desc.astype(np.uint64), return_inverse=True)
    rows = []
    for word in uniq:
        key = ("chunks", int(word), mn_major, mn, k, bits)
        hit = _ADDRESSES.get(key)
        if hit is None:
            addr = smem_matrix_addresses(np.array([word], dtype=np.uint64), mn, k, bits,
                                         np.array([mn_major]))[0]
            hit = _ADDRESSES.put(key, np.ascontiguousarray(
                addr[::per, :] if mn_major else addr[:, ::per]).astype(np.int64))
        rows.append(hit)
    if len(rows) == 1:
        return rows[0][None]
    return np.stack(rows)[inverse.reshape(-1)]


def _load_chunks(s: Step, addr: np.ndarray, leader: np.ndarray, size: int, mn_major: np.ndarray) -> np.ndarray | None:
    """The ``size``-byte elements at ``addr`` ``(count, mn, k)``, loaded as
    the 16-byte chunks of the canonical layouts (``16 / size`` consecutive
    elements along K, or along M/N when ``mn_major``): one access per chunk
    rather than per element. None when the operands mix majors or the
    extents are not whole chunks."""
    count, mn, k = addr.shape
    per = 16 // size
    mn_major = mn_major.reshape(-1)
    along = mn if mn_major[0] else k
    if per == 1 or along % per or (mn_major != mn_major[0]).any():
        return None
    starts = addr[:, ::per, :] if mn_major[0] else addr[:, :, ::per]
    threads = np.broadcast_to(leader[:, None, None], starts.shape).reshape(-1)
    chunks = s.m.memory.load("shared", s.m.memory.shared_address(starts.reshape(-1), threads), threads, 16, s.ins.name)
    elements = chunks.view(f"<u{size}").reshape(starts.shape + (per,))
    if mn_major[0]:                     # (count, mn / per, k, per) -> (count, mn, k)
        elements = elements.transpose(0, 1, 3, 2)
    return elements.reshape(count, mn, k)


# --- register fragments ---------------------------------------------------------------------------

def wgmma_a_layout(k: int, type_name: str) -> tuple[np.ndarray, ...]:
    """``(group, row, col)`` ``(128, elements)`` of A of ``wgmma.m64nNk<k>``
    in registers: :func:`jaxptx.isa.fragments.wgmma_a`."""
    return layouts.wgmma_a(k, type_name).flat


def wgmma_d_layout(n: int) -> tuple[np.ndarray, ...]:
    """``(group, row, col)`` ``(128, n / 2)`` of the D elements of
    ``wgmma.m64n<n>``: :func:`jaxptx.isa.fragments.wgmma_d`."""
    return layouts.wgmma_d(n).flat


def _per_group(s: Step, values: np.ndarray, slot: np.ndarray, count: int, what: str) -> np.ndarray:
    """One value per warpgroup; raises when a warpgroup's threads disagree."""
    out = np.zeros(count, dtype=values.dtype)
    out[slot] = values
    if (out[slot] != values).any():
        raise SimError(f"{s.ins.name}: the threads of a warpgroup give different {what} "
                       "(it must be warpgroup-uniform)")
    return out


# --- wgmma.mma_async ------------------------------------------------------------------------------

@semantics('wgmma_mma_async')
def wgmma_mma_async(s: Step) -> None:
    """``wgmma.mma_async``: D = A * B (+ D when ``scale-d``) for each warpgroup
    (PTX ISA "wgmma.mma_async"); A from registers or a shared-memory matrix
    descriptor, B from a descriptor; ``imm-scale-a``/``imm-scale-b`` of -1
    negate A/B; ``imm-trans-a``/``imm-trans-b`` of 1 select the M-/N-major
    layout (K-major otherwise). Completes at issue, or later under a random
    schedule (see the module).

    Arithmetic as for ``mma.sync``: floating inputs multiplied exactly and
    summed in float64, rounded once into ``.f32``/``.f16`` (the GPU's
    accumulation order and truncation are unspecified, so the last bit may
    differ); integers exact with ``.s32`` wrap-around or ``.satfinite``
    clamping; ``.b1`` adds the population count of AND.
    """
    shape = s.mod("shape")
    _, n, k = _dims(shape)
    atype, btype, dtype = s.mod("atype"), s.mod("btype"), s.mod("dtype")
    slot, rank, count = groups(s, 128)
    ops = s.ins.operands
    leader = np.zeros(count, dtype=np.int64)
    leader[slot] = s.threads
    a_in_regs = isinstance(ops[1], ir.Vector)
    floats = atype in _FLOATS
    halves = atype in ("f16", "bf16")
    trans_a = trans_b = 0
    if halves:
        trans_b = int(s.src(len(ops) - 1, TYPES["u32"])[0])
        trans_a = 0 if a_in_regs else int(s.src(len(ops) - 2, TYPES["u32"])[0])
    adesc = None if a_in_regs else _per_group(s, s.src(1, TYPES["u64"]), slot, count, "A descriptors")
    bdesc = _per_group(s, s.src(2, TYPES["u64"]), slot, count, "B descriptors")
    scales = (int(s.src(4, TYPES["s32"])[0]), int(s.src(5, TYPES["s32"])[0])) if floats else (1, 1)
    scale_d = _per_group(s, s.pred(3), slot, count, "scale-d predicates")

    def multiply() -> None:             # the async proxy's part: at issue, or later (module docstring)
        if a_in_regs:
            frag = decode(unpack(registers(s, 1), _BITS[atype]), atype)
            A = gather(frag, slot, rank, count, wgmma_a_layout(k, atype), (1, 64, k))[:, 0]
        else:
            A = _smem_matrix(s, adesc, leader, 64, k, atype, np.full(count, trans_a == 1))
        B = _smem_matrix(s, bdesc, leader, n, k, btype, np.full(count, trans_b == 1)).transpose(0, 2, 1)
        fast = fastpaths.on()
        if floats:                      # (x * 1 is x, bit for bit: the fast path skips it)
            A = A if fast and scales[0] == 1 else A * scales[0]
            B = B if fast and scales[1] == 1 else B * scales[1]
        dl = wgmma_d_layout(n)
        if floats:
            with np.errstate(over="ignore", invalid="ignore"):
                AB = A @ B
        else:                           # integers, and .b1 AND + popc as 0/1 products
            AB = A.astype(np.int64) @ B.astype(np.int64)
        ignored = not scale_d.any()
        if fast and _register_major(s, AB, slot, rank, count, n, dtype, scale_d, ignored):
            return
        if ignored:
            s.m.observers.ignore_reads(True)        # scale-d false: D's input is not read
        try:
            old = _accumulator(s, dtype, n)
        finally:
            if ignored:
                s.m.observers.ignore_reads(False)
        if fast:
            # The same element-wise sums in the threads' fragment layout:
            # scatter A*B once instead of gathering D and scattering it back.
            d = scatter(AB[:, None], slot, rank, dl)
            with np.errstate(over="ignore", invalid="ignore"):
                if scale_d.all():
                    d = d + old
                elif not ignored:
                    d = np.where(scale_d[slot][:, None], d + old, d)
        else:
            C = gather(old, slot, rank, count, dl, (1, 64, n))[:, 0]
            with np.errstate(over="ignore", invalid="ignore"):
                D = np.where(scale_d[:, None, None], AB + C, AB)
            d = scatter(D[:, None], slot, rank, dl)
        write_accumulator(s, 0, d, dtype, s.mod("satfinite") is not None)
    later(s, multiply, "wgmma")


def _register_major(s: Step, AB: np.ndarray, slot: np.ndarray, rank: np.ndarray, count: int, n: int,
                    dtype: str, scale_d: np.ndarray, ignored: bool) -> bool:
    """The fast path's accumulator update for ``.f32``/``.f16`` D in distinct
    declared registers, whole warpgroups in thread order, executing threads
    in per-CTA blocks (:func:`.fragments.cta_blocks`) and no register
    observer: each D register is summed and rounded in place, in a view of
    the executing threads' slice of it, from a view of A*B in that
    register's order (a reshape and a transpose, no index map). The sums are
    those of the general path (A*B + D in float64, rounded once by the same
    float64 → float32/float16 cast, NaN made canonical), so are the bits.
    ``False`` (nothing done) when the step is not such a step."""
    if dtype not in ("f32", "f16") or sys.byteorder != "little" or s.m.on_register_read is not None or s.m.on_register_write is not None:
        return False
    per = 2 if dtype == "f32" else 4                # elements of a thread per register pair / register
    regs = plain_vector(s, 0, np.uint32, None)
    names = [item.name for item in s.ins.operands[0].items]
    if regs is None or len(regs) != n // per or len(set(names)) != len(names) \
            or not ordered(slot, rank, count, 128):
        return False
    blocks = cta_blocks(s.threads, s.m.ntid, s.m.nthreads)
    if blocks is None or blocks[3] % 128:
        return False
    c0, c1, lo, hi = blocks
    for arr in regs:
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            return False
    # A*B (count, 64, n) as (register, warpgroup, warp, group, lane in group[, half]): PTX ISA
    # "wgmma D fragment": row 16w + 8h + group, column 8c + 2q + e; element 4c + 2h + e.
    # One reorder (a copy, contiguous per register): register 4c + 2h + e of .f32 D, 2c + h
    # (halves e) of .f16 D.
    ab = AB.reshape(count, 4, 2, 8, n // 8, 4, 2)
    ab = ab.transpose(4, 2, 6, 0, 1, 3, 5) if dtype == "f32" else ab.transpose(4, 2, 0, 1, 3, 5, 6)
    ftype = np.float32 if dtype == "f32" else np.float16
    blocks_shape = (c1 - c0, (hi - lo) // 128, 4, 8, 4) + ((2,) if dtype == "f16" else ())
    ab = np.ascontiguousarray(ab).reshape((len(regs),) + blocks_shape)
    keep = None                         # warpgroups whose D input is not added (scale-d false)
    if not ignored and not scale_d.all():
        keep = (~scale_d).reshape(blocks_shape[:2] + (1,) * (len(blocks_shape) - 2))
    ntid = s.m.ntid
    canonical = np.uint32(0x7FFFFFFF) if dtype == "f32" else np.uint16(0x7FFF)
    with np.errstate(over="ignore", invalid="ignore"):
        for i, arr in enumerate(regs):
            out = arr.reshape(-1, ntid)[c0:c1, lo:hi].view(ftype).reshape(blocks_shape)
            src = ab[i]
            if ignored:
                np.copyto(out, src, casting="unsafe")
            elif keep is None:
                np.add(src, out, out=out, dtype=np.float64, casting="unsafe")
            else:
                d = src + out.astype(np.float64)
                np.copyto(d, src, where=keep)
                np.copyto(out, d, casting="unsafe")
            nan = np.isnan(out)
            if nan.any():
                out.view(canonical.dtype)[nan] = canonical
    return True


def _accumulator(s: Step, dtype: str, n: int) -> np.ndarray:
    """The current D elements ``(n_threads, N/2)`` (its input value)."""
    regs = registers(s, 0)
    if dtype == "f16":
        return decode(unpack(regs, 16), "f16")
    return decode(regs, dtype)


@semantics('wgmma_fence')
def wgmma_fence(s: Step) -> None:
    """``wgmma.fence``: a no-op; the emulator's ``wgmma.mma_async`` reads its
    registers and shared memory when it completes (module docstring), and
    the machine orders every access by one thread."""


@semantics('wgmma_commit_group')
def wgmma_commit_group(s: Step) -> None:
    """``wgmma.commit_group``: the executing threads' pending
    ``wgmma.mma_async`` operations form a group (only under a random
    schedule; on the default one every MMA is already complete)."""
    d = deferred_of(s)
    if d is not None:
        d.commit(s.threads, "wgmma")


@semantics('wgmma_wait_group')
def wgmma_wait_group(s: Step) -> None:
    """``wgmma.wait_group N``: the executing threads' warpgroups' MMAs in
    groups older than their ``N`` most recent complete (nothing is pending
    on the default schedule)."""
    d = deferred_of(s)
    if d is not None:
        d.wgmma_wait(s.threads, int(s.src(0, TYPES["u32"])[0]) if s.n else 0)

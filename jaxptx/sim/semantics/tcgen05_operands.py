"""Operands of ``tcgen05.mma`` (see :mod:`.tcgen05_mma`): where D lives in
tensor memory (PTX ISA 9.7.16.10.5 "Data Path Layout Organization"), A and
B values from shared memory or tensor memory (9.7.16.10.4 "Packing
formats"), and block-scale factors from tensor memory (9.7.16.10.7 "Block
Scaling for tcgen05.mma").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from ..core import fastpaths
from ..core.host import ShapeCache
from ..core.step import Step
from ..errors import SimError
from ..memory import tmem
from ..numerics.formats import FORMATS
from ..numerics.formats import decode as decode_float
from .mma import decode as decode_bits
from .tcgen05_idesc import InstrDesc, element_bits
from .tcgen05_smem import decode_smem_desc, read_matrix

__all__ = ["d_layout", "smem_operand", "on_behalf_of", "tmem_a", "shift_tmem_a", "scale_blocks", "scales",
           "scaled", "sparse_metadata", "expand_sparse"]


# --- where D lives in tensor memory ------------------------------------------------------------

def d_layout(m: int, n: int, cta_group: int, ws: bool) -> tuple[str, int, np.ndarray, np.ndarray]:
    """PTX ISA "Data Path Layout Organization" for one CTA's part of D.

    Returns ``(layout name, rows R of this CTA, lane offsets (R, N), column
    offsets (R, N))``, relative to the ``d-tmem`` address (read-only arrays,
    computed once per shape on the fast path).
    """
    if not fastpaths.on():
        return _d_layout(m, n, cta_group, ws)
    key = (m, n, cta_group, ws)
    hit = _LAYOUTS.get(key)
    if hit is None:
        hit = _LAYOUTS.put(key, _d_layout(m, n, cta_group, ws))
    return hit


_LAYOUTS = ShapeCache(16 << 20)


def _d_layout(m: int, n: int, cta_group: int, ws: bool) -> tuple[str, int, np.ndarray, np.ndarray]:
    rows = m // cta_group
    i = np.arange(rows)[:, None]
    j = np.arange(n)[None, :]
    if not ws and cta_group == 1 and m == 64:
        lanes = (i % 16) + 32 * (i // 16) + 0 * j
        return "F", rows, lanes, j + 0 * i
    fold = {("ws", 32): 4, ("ws", 64): 2, ("ws", 128): 1, (1, 128): 1, (2, 128): 2, (2, 256): 1}[
        ("ws" if ws else cta_group, m)]
    name = {True: {4: "G", 2: "E", 1: "D"}, False: {2: "B", 1: "A" if cta_group == 2 else "D"}}[ws][fold]
    width = n // fold
    return name, rows, np.ascontiguousarray(i + rows * (j // width)), np.ascontiguousarray(j % width + 0 * i)


# --- operand values --------------------------------------------------------------------------

def _values(raw: np.ndarray, type_name: str) -> np.ndarray:
    """Element bits as float64 (floats) or int64 (s8/u8) values."""
    if type_name in ("e2m1", "e2m3", "e3m2"):
        return decode_float(raw.astype(np.uint8), FORMATS[type_name])
    return decode_bits(raw, type_name)


def _smem_layout(kind: str, type_name: str) -> tuple[int, int]:
    """(bits of an element in shared memory, elements a 16-byte chunk holds)."""
    bits = element_bits(type_name)
    if kind in ("kind::mxf4", "kind::mxf4nvf4"):
        return 4, 32
    return bits, 128 // max(bits, 8)


@contextlib.contextmanager
def on_behalf_of(s: Step, issuer: int | None) -> Iterator[None]:
    """Shared-memory reads in the block are the issuing thread's for the
    observers (they resolve through another CTA's first thread)."""
    if issuer is None:
        yield
        return
    s.m.observers.on_behalf_of(issuer)
    try:
        yield
    finally:
        s.m.observers.on_behalf_of(None)


def smem_operand(s: Step, desc_word: int, cta: int, mn: int, d: InstrDesc, type_name: str,
                  mn_major: bool, which: str, issuer: int | None = None) -> np.ndarray:
    """Values ``(mn, K)`` of operand ``which`` from CTA ``cta``'s shared
    memory, read on behalf of thread ``issuer`` (the sanitizer's reader;
    default: the CTA's first thread)."""
    what = f"{s.ins.name} {which}"
    sd = decode_smem_desc(desc_word, what)
    bits, per_chunk = _smem_layout(d.kind, type_name)
    if mn_major and bits < 8:
        raise SimError(f"{what}: a transposed (MN-major) {type_name} operand is not allowed; only 8-, 16- and "
                       "32-bit types may be MN-major (PTX ISA Table 54)")
    if mn_major and (sd.swizzle == "128B_base32B") != (type_name == "tf32"):
        need = "needs" if type_name == "tf32" else "cannot use"
        raise SimError(f"{what}: a transposed (MN-major) {type_name} operand {need} 128B swizzling with "
                       f"32B atomicity; the descriptor gives {sd.mode.title} (PTX ISA Table 54)")
    if not mn_major and sd.swizzle == "128B_base32B":
        raise SimError(f"{what}: 128B swizzling with 32B atomicity is for MN-major operands only; this "
                       "operand is K-major (PTX ISA Table 55)")
    thread = np.array([cta * s.m.ntid])        # descriptor offsets are in CTA ``cta``'s window

    def load(addr: np.ndarray) -> np.ndarray:
        threads = np.repeat(thread, len(addr))
        chunks = s.m.memory.load("shared", s.m.memory.shared_address(addr, threads), threads, 16, what)
        return chunks.view(np.uint8)
    with on_behalf_of(s, issuer):
        raw = read_matrix(load, sd, mn, d.k, bits, per_chunk, mn_major)
    return _values(raw, type_name)


def _a_bits(d: InstrDesc) -> tuple[bool, int]:
    """(fp4 packed two a byte, bits an element of A takes in tensor memory)."""
    packed = d.kind in ("kind::mxf4", "kind::mxf4nvf4")
    return packed, 4 if packed else max(8, element_bits(d.atype))


def tmem_a(s: Step, cta: int, addr: int, lanes: np.ndarray, d: InstrDesc) -> np.ndarray:
    """Values ``(rows, K)`` of A from tensor memory: row ``r`` in lane
    ``lanes[r]`` (relative to the address's lane)."""
    packed, bits = _a_bits(d)
    per_word = 32 // bits
    ncols = d.k // per_word
    lane = (addr >> 16) + lanes[:, None]
    col = (addr & 0xFFFF) + np.arange(ncols)[None, :]
    words = tmem.read(s, cta, np.broadcast_to(lane, (len(lanes), ncols)),
                      np.broadcast_to(col, (len(lanes), ncols)), f"{s.ins.name} [a-tmem]")
    shifts = (np.arange(per_word) * bits).astype(np.uint64)
    raw = ((words.astype(np.uint64)[:, :, None] >> shifts) & np.uint64((1 << bits) - 1)).reshape(len(lanes), -1)
    raw = raw.astype(np.int64)
    if not packed and d.atype == "e2m1":          # 4-bit in an 8-bit container: bits 2-5
        raw = (raw >> 2) & 0xF
    elif not packed and d.atype in ("e2m3", "e3m2"):   # 6-bit: the low 6 bits
        raw = raw & 0x3F
    return _values(raw, d.atype)


def shift_tmem_a(s: Step, cta: int, addr: int, lanes: np.ndarray, d: InstrDesc) -> None:
    """``.ashift``: A's rows in CTA ``cta``'s tensor memory move down one
    row: the ``K`` elements' words of row ``r`` (lane ``lanes[r]``, relative
    to the address's lane) go to row ``r + 1`` for ``r = 0 .. R-2``; row 0
    keeps its words, and the last row's old words are overwritten (it is the
    row not shifted; see :mod:`.tcgen05_mma`)."""
    _, bits = _a_bits(d)
    ncols = d.k // (32 // bits)
    what = f"{s.ins.name} [a-tmem] (.ashift)"
    col = (addr & 0xFFFF) + np.arange(ncols)[None, :]
    src = np.broadcast_to((addr >> 16) + lanes[:-1, None], (len(lanes) - 1, ncols))
    dst = np.broadcast_to((addr >> 16) + lanes[1:, None], (len(lanes) - 1, ncols))
    cols = np.broadcast_to(col, src.shape)
    words = tmem.read(s, cta, src, cols, what)
    tmem.write(s, cta, dst, cols, words, what)


# --- block scaling ---------------------------------------------------------------------------

def scale_blocks(s: Step, d: InstrDesc) -> int:
    """Scale factors along K per row of A / column of B (PTX ISA Table 56)."""
    vec = s.mod("scale", "block32")
    if vec == "block32":
        return 1 if d.kind == "kind::mxf8f6f4" else 2
    if vec == "block16":
        return 4
    return int(vec[len("scale_vec::")])


def _scale_values(raw: np.ndarray, scale_type: str) -> np.ndarray:
    """ue8m0 bytes (2^(e-127), 0xFF NaN) or ue4m3 bytes as float64."""
    if scale_type == "ue8m0":
        with np.errstate(over="ignore"):
            return np.where(raw == 0xFF, np.nan, np.ldexp(1.0, raw.astype(np.int64) - 127))
    return decode_bits(raw & 0x7F, "e4m3")


def scales(s: Step, cta: int, addr: int, lanes: np.ndarray, index: np.ndarray, sf_id: int, blocks: int,
            d: InstrDesc, which: str) -> np.ndarray:
    """Scale factors ``(count, blocks)`` from tensor memory (PTX ISA
    9.7.16.10.7 "Block Scaling"): the factors of row (A) or column (B)
    ``index[r]`` are bytes ``sf_id .. sf_id+blocks-1`` of the word at column
    ``index[r] / 32`` (from the address's column), read in lane ``lanes[r]``
    of the data path that uses them — the ISA has the factors duplicated in
    all four 32-lane partitions, row/column ``x`` at lane ``x % 32`` of each."""
    what = f"{s.ins.name} [scale-{which}-tmem]"
    if sf_id + blocks > 4 or sf_id % blocks:
        raise SimError(f"{what}: scale factor {which} ID {sf_id} (instruction descriptor) does not select "
                       f"{blocks} aligned byte(s) of a 32-bit word; expected one of "
                       f"{', '.join(str(v) for v in range(0, 4, blocks))}")
    words = tmem.read(s, cta, (addr >> 16) + lanes, (addr & 0xFFFF) + index // 32, what)
    shifts = (8 * (sf_id + np.arange(blocks))).astype(np.uint64)
    raw = (words.astype(np.uint64)[:, None] >> shifts) & np.uint64(0xFF)
    return _scale_values(raw.astype(np.int64), d.scale_type)


def scaled(values: np.ndarray, factors: np.ndarray, axis_k: int) -> np.ndarray:
    """Multiply each block of K elements by its factor (``axis_k``: K's axis)."""
    blocks = factors.shape[1]
    if axis_k == 1:                    # values (rows, K), factors (rows, blocks)
        return values * np.repeat(factors, values.shape[1] // blocks, axis=1)
    return values * np.repeat(factors.T, values.shape[0] // blocks, axis=0)    # (K, cols)


# --- sparse A (tcgen05.mma.sp) ---------------------------------------------------------------

# PTX ISA 9.7.16.10.8.1-3: the meaningful 4-bit metadata codes (two 2-bit
# indices, the first in bits 0-1) per granularity; the rest are undefined.
_PAIR_CODES = (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b0110, 0b1110)
_TF32_CODES = (0b0100, 0b1110)


def sparse_metadata(s: Step, cta: int, addr: int, rows: int, copy: int, d: InstrDesc) -> np.ndarray:
    """The 4-bit metadata codes ``(rows, chunks)`` of sparse A for one data
    path block of CTA ``cta`` (``copy``: which of the ``.ws`` shapes'
    duplicated copies, at lanes ``+ rows * copy``).

    The ISA draws the layout of the metadata in tensor memory only in
    figures (9.7.16.10.8.4); this follows the layout CUTLASS's sm_100
    sparse kernels put there (``cute::UMMA::tmem_e_frg``), with each row's
    metadata a little-endian bit string, chunk ``j``'s code at bits
    ``4j..4j+3``:

    - ``.kind::f16`` / ``tf32`` (32 bits a row): half ``b`` (chunks
      ``4b..4b+3``) of row ``r`` is at lane ``r%8 + 8b + 16*(r/16)``, bits
      ``16*((r/8)%2)`` on, of column ``address + sparsity selector``
      (selector 0 or 1; CUTLASS sets it to the metadata column's parity);
    - 8-bit and 4-bit kinds (64 bits a row): row ``r`` in lane ``r``,
      columns ``address`` and ``address + 1``; the selector must be 0.
    """
    what = f"{s.ins.name} [sp-meta-tmem]"
    lane0, col0 = (addr >> 16) + rows * copy, addr & 0xFFFF
    r = np.arange(rows)
    if d.kind in ("kind::f16", "kind::tf32"):
        sel = d.sparsity_selector
        if sel > 1:
            raise SimError(f"{what}: sparsity selector {sel} (instruction descriptor bits 0-1) is not emulated: "
                           "the ISA gives its sub-columns only in a figure; selectors 0 and 1 run")
        halves = [tmem.read(s, cta, lane0 + r % 8 + 8 * b + 16 * (r // 16), np.full(rows, col0 + sel), what)
                  >> (16 * ((r // 8) % 2)).astype(np.uint32) & np.uint32(0xFFFF) for b in (0, 1)]
        stream = halves[0].astype(np.uint64) | halves[1].astype(np.uint64) << np.uint64(16)
        chunks = 8
    else:
        if d.sparsity_selector:
            raise SimError(f"{what}: the sparsity selector (instruction descriptor bits 0-1) must be 0 for "
                           f".{d.kind}, got {d.sparsity_selector} (PTX ISA 'Sparsity selector')")
        lo = tmem.read(s, cta, lane0 + r, np.full(rows, col0), what).astype(np.uint64)
        hi = tmem.read(s, cta, lane0 + r, np.full(rows, col0 + 1), what).astype(np.uint64)
        stream = lo | hi << np.uint64(32)
        chunks = 16
    codes = (stream[:, None] >> (4 * np.arange(chunks)).astype(np.uint64)) & np.uint64(0xF)
    codes = codes.astype(np.int64)
    valid = _TF32_CODES if d.kind == "kind::tf32" else _PAIR_CODES
    bad = ~np.isin(codes, valid)
    if bad.any():
        row, chunk = (int(v[0]) for v in np.nonzero(bad))
        raise SimError(f"{what}: row {row} of A, chunk {chunk}: metadata code {int(codes[row, chunk]):#06b} is "
                       f"not one the ISA defines for .{d.kind} ({', '.join(f'{c:#06b}' for c in valid)}); the "
                       "result would be undefined (PTX ISA 'Sparse Matrices')")
    return codes


def expand_sparse(packed: np.ndarray, codes: np.ndarray, d: InstrDesc) -> np.ndarray:
    """Sparse A ``(rows, K/2)`` stored values → the ``(rows, K)`` matrix
    (PTX ISA 9.7.16.10.8): ``tf32`` keeps one element of each two
    (position ``index0 / 2``); 8- and 16-bit kinds two of each four (the
    first stored at ``index0``, the second at ``index1``); ``mxf4`` kinds
    two 2-element pairs of each eight (at pairs ``index0`` and ``index1``)."""
    rows, half = packed.shape
    out = np.zeros((rows, 2 * half), dtype=packed.dtype)
    i = np.arange(rows)[:, None]
    lo, hi = codes & 3, codes >> 2
    if d.kind == "kind::tf32":
        out[i, 2 * np.arange(half)[None, :] + lo // 2] = packed
        return out
    width = 2 if d.kind in ("kind::mxf4", "kind::mxf4nvf4") else 1
    chunk = np.arange(codes.shape[1])[None, :] * 4 * width
    for t, index in enumerate((lo, hi)):
        for e in range(width):
            src = (np.arange(codes.shape[1]) * 2 + t) * width + e
            out[i, chunk + index * width + e] = packed[:, src]
    return out

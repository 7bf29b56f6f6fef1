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

from ..core.step import Step
from ..errors import SimError
from ..memory import tmem
from ..numerics.formats import FORMATS
from ..numerics.formats import decode as decode_float
from .mma import decode as decode_bits
from .tcgen05_idesc import InstrDesc, element_bits
from .tcgen05_smem import decode_smem_desc, read_matrix

__all__ = ["d_layout", "smem_operand", "on_behalf_of", "tmem_a", "scale_blocks", "scales", "scaled"]


# --- where D lives in tensor memory ------------------------------------------------------------

def d_layout(m: int, n: int, cta_group: int, ws: bool) -> tuple[str, int, np.ndarray, np.ndarray]:
    """PTX ISA "Data Path Layout Organization" for one CTA's part of D.

    Returns ``(layout name, rows R of this CTA, lane offsets (R, N), column
    offsets (R, N))``, relative to the ``d-tmem`` address.
    """
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
    return name, rows, i + rows * (j // width), j % width + 0 * i


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
    sanitizer (they resolve through another CTA's first thread)."""
    san = s.m.sanitizer
    if san is None or issuer is None:
        yield
        return
    san.reader = issuer
    try:
        yield
    finally:
        san.reader = None


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
    if mn_major and (sd.swizzle == 1) != (type_name == "tf32"):
        need = "needs" if type_name == "tf32" else "cannot use"
        raise SimError(f"{what}: a transposed (MN-major) {type_name} operand {need} 128B swizzling with "
                       f"32B atomicity; the descriptor gives {sd.swizzle_name} (PTX ISA Table 54)")
    if not mn_major and sd.swizzle == 1:
        raise SimError(f"{what}: 128B swizzling with 32B atomicity is for MN-major operands only; this "
                       "operand is K-major (PTX ISA Table 55)")
    thread = np.array([cta * s.m.ntid])        # resolves addresses in CTA ``cta``'s window

    def load(addr: np.ndarray) -> np.ndarray:
        return s.m.memory.load("shared", addr.astype(np.uint64), np.repeat(thread, len(addr)), 1, what)
    with on_behalf_of(s, issuer):
        raw = read_matrix(load, sd, mn, d.k, bits, per_chunk, mn_major)
    return _values(raw, type_name)


def tmem_a(s: Step, cta: int, addr: int, lanes: np.ndarray, d: InstrDesc) -> np.ndarray:
    """Values ``(rows, K)`` of A from tensor memory: row ``r`` in lane
    ``lanes[r]`` (relative to the address's lane)."""
    packed = d.kind in ("kind::mxf4", "kind::mxf4nvf4")
    bits = 4 if packed else max(8, element_bits(d.atype))
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

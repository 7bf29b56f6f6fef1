"""Emulator semantics: the warp-level matrix multiply ``mma.sync`` and the
register-element helpers the other matrix families share (``ldmatrix`` /
``stmatrix`` are in :mod:`.matrix_ldst`).

These are collective: one instruction computes with the registers of all 32
lanes of a warp. Each semantics function gathers every executing warp's
fragments into whole matrices (:mod:`.fragments`: per-lane index
maps), computes, and scatters the results back into each lane's registers.
The index maps are those of PTX ISA "Matrix Fragments for mma.m*n*k*".

A warp that executes one of these with fewer than 32 lanes (a divergent or
partial warp) is undefined behaviour in PTX; the emulator raises.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from ... import ir
from ...types import TYPES
from ..core import fastpaths
from .fragments import ELEMENT_BITS as _BITS
from .fragments import dims_of as _dims
from .fragments import gather, groups, mma_layout, ordered, scatter
from ..core.host import ShapeCache
from ..errors import SimError
from ..core.step import Step
from .registry import semantics

__all__ = ["groups", "fma_f64", "mma_layout", "gather", "scatter", "registers",
           "write_registers", "write_accumulator", "plain_vector", "unpack", "pack", "decode", "encode"]

B32, B64 = TYPES["b32"], TYPES["b64"]


# --- register elements ----------------------------------------------------------------------

def unpack(regs: np.ndarray, bits: int) -> np.ndarray:
    """Sub-word elements of 32-bit registers ``(n, r)``, lowest bits first:
    ``(n, r * 32 // bits)`` raw element bits (uint32)."""
    if bits >= 32:
        return regs
    if bits in (8, 16) and sys.byteorder == "little":     # the low element is the first in memory
        sub = np.ascontiguousarray(regs, dtype=np.uint32).view(np.uint8 if bits == 8 else np.uint16)
        return sub.reshape(len(regs), -1).astype(np.uint32)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))
    out = (regs.astype(np.uint32)[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)
    return out.reshape(len(regs), -1)


def pack(elems: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of :func:`unpack` for 16-bit elements: ``(n, 2r)`` → ``(n, r)``."""
    e = elems.astype(np.uint32).reshape(len(elems), -1, 32 // bits)
    shifts = np.arange(32 // bits, dtype=np.uint32) * np.uint32(bits)
    return np.bitwise_or.reduce(e << shifts, axis=-1).astype(np.uint32)


def decode(raw: np.ndarray, type_name: str) -> np.ndarray:
    """Element bits as values: float64 for floating types, int64 for integer
    and single-bit types. ``.tf32`` ignores the low 13 mantissa bits of its
    32-bit container (PTX ISA "Alternate Floating-Point Data Formats")."""
    if type_name == "f16":
        return raw.astype(np.uint16).view(np.float16).astype(np.float64)
    if type_name == "bf16":
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if type_name == "tf32":
        return (raw.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if type_name == "f32":
        return raw.astype(np.uint32).view(np.float32).astype(np.float64)
    if type_name == "f64":
        return raw.astype(np.uint64).view(np.float64)
    if type_name == "e4m3":
        return raw.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    if type_name == "e5m2":
        return raw.astype(np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float64)
    if type_name in ("s8", "s4", "s32"):
        bits = _BITS[type_name]
        v = raw.astype(np.int64) & ((1 << bits) - 1)
        return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return raw.astype(np.int64)       # u8, u4, b1


def encode(values: np.ndarray, type_name: str, satfinite: bool = False) -> np.ndarray:
    """Values (float64 / int64) as raw bits of the accumulator type: uint32
    elements for ``f32``/``s32``, uint16 for ``f16``, uint64 for ``f64``.
    Floats round to nearest even; NaN results are the canonical NaN
    (``0x7fffffff`` / ``0x7fff``); ``s32`` wraps, or clamps with ``satfinite``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if type_name in ("f32", "f16"):
            f32 = type_name == "f32"
            bits = values.astype(np.float32 if f32 else np.float16).view(np.uint32 if f32 else np.uint16)
            nan = np.isnan(values)
            if not nan.any():
                return bits
            return np.where(nan, np.uint32(0x7FFFFFFF) if f32 else np.uint16(0x7FFF), bits)
        if type_name == "f64":
            return values.astype(np.float64).view(np.uint64)
    v = values.astype(np.int64)
    if satfinite:
        v = np.clip(v, -(1 << 31), (1 << 31) - 1)
    return (v & 0xFFFFFFFF).astype(np.uint32)


# --- exact f64 fused multiply-add ---------------------------------------------------------

def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = 134217729.0 * a                   # 2**27 + 1 (Veltkamp)
    hi = c - (c - a)
    return hi, a - hi


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once to nearest (float64), vectorised.

    Error-free transformations (Dekker's TwoProduct, Knuth's TwoSum) and a
    round-to-odd addition (Boldo and Melquiond, "Emulation of FMA and
    correctly rounded sums: proved algorithms using rounding to odd", 2008).
    Exact unless an intermediate underflows into the subnormal range or
    overflows (|a|, |b| ≳ 2**996); non-finite cases use ``a * b + c``.
    """
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.asarray(c, np.float64))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        uh = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
        th, tl = _two_sum(c, uh)
        v, ve = _two_sum(ul, tl)
        even = (v.view(np.uint64) & np.uint64(1)) == 0
        nudge = (ve != 0) & even
        v = np.where(nudge, np.nextafter(v, np.where(ve > 0, np.inf, -np.inf)), v)
        r = th + v
        plain = uh + c
        simple = ~np.isfinite(r) | ~np.isfinite(ul) | (uh == 0) | (c == 0)
        return np.where(simple, plain, r)


# --- mma.sync -------------------------------------------------------------------------------

def registers(s: Step, k: int, wide: bool = False) -> np.ndarray:
    """Raw bits ``(n, count)`` of vector operand ``k`` (``{r}`` may arrive as
    a plain register): uint32, or uint64 when ``wide``."""
    arrays = plain_vector(s, k, np.uint64 if wide else np.uint32, s.m.on_register_read)
    if arrays is not None:              # one stack, one gather of the executing threads
        whole = np.stack(arrays)
        return (whole if s.n == s.m.nthreads else whole[:, s.threads]).T
    return s.src(k, B64 if wide else B32).reshape(s.n, -1)


def write_registers(s: Step, k: int, values: np.ndarray, t=B32) -> None:
    """Write ``(n, count)`` values to vector operand ``k`` (or to the plain
    register a one-element vector arrives as)."""
    if t in (B32, B64) and values.dtype == (np.uint32 if t is B32 else np.uint64) and \
            plain_vector(s, k, values.dtype, s.m.on_register_write) is not None:
        rows = np.ascontiguousarray(values.T)       # one transpose; each register a contiguous row
        regs = s.m.regs
        for name, row in zip((r.name for r in s.ins.operands[k].items), rows):
            if s.n == s.m.nthreads:
                regs.replace(name, row)
            else:
                regs.get(name)[s.threads] = row
        return
    if not isinstance(s.ins.operands[k], ir.Vector):
        values = values[:, 0]
    s.dst(k, values, t)


def plain_vector(s: Step, k: int, dtype: type, hook: object) -> list[np.ndarray] | None:
    """The register arrays of vector operand ``k`` when the fast path may
    move them whole: every item a declared register of ``dtype`` bits, no
    observer watching register events. ``None`` otherwise."""
    op = s.ins.operands[k]
    if hook is not None or not fastpaths.on() or type(op) is not ir.Vector:
        return None
    arrays = []
    for item in op.items:
        if type(item) is not ir.Register:
            return None
        arr = s.m.regs.get(item.name)
        if arr is None or arr.dtype != dtype:
            return None
        arrays.append(arr)
    return arrays


def _fragment(s: Step, k: int, type_name: str) -> np.ndarray:
    """Elements of vector operand ``k`` (values of ``type_name``)."""
    if type_name == "f64":
        return decode(registers(s, k, True), "f64")
    if type_name in _VIEWS and sys.byteorder == "little":
        # Elements are consecutive in each register, the lowest bits first:
        # a view of the registers' memory gives the values decode gives.
        regs = np.ascontiguousarray(registers(s, k), dtype=np.uint32)
        return regs.view(_VIEWS[type_name]).reshape(s.n, -1).astype(np.float64)
    return decode(unpack(registers(s, k), _BITS[type_name]), type_name)


_VIEWS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def write_accumulator(s: Step, k: int, values: np.ndarray, type_name: str, satfinite: bool = False) -> None:
    """Round ``(n, elements)`` values into the accumulator type and write
    them to vector operand ``k`` (``.f16`` pairs packed low half first)."""
    raw = encode(values, type_name, satfinite)
    if type_name == "f64":
        write_registers(s, k, raw, B64)
    elif type_name == "f16":
        write_registers(s, k, pack(raw, 16))
    else:
        write_registers(s, k, raw)


@semantics('mma_sync')
def mma_sync(s: Step) -> None:
    """``mma.sync.aligned``: D = A * B + C for each warp (PTX ISA "mma").

    Floating types: the products are exact in float64 (``.f16``, ``.bf16``,
    ``.tf32``, ``.e4m3``, ``.e5m2`` have at most 11 significant bits) and
    summed with C in float64, then rounded once to nearest into ``.f32`` /
    ``.f16``; the PTX ISA leaves accumulation order, intermediate rounding
    and subnormal handling unspecified, and tensor cores truncate
    intermediate sums, so the last bit of a result can differ from a GPU.
    NaN results are the canonical NaN. ``.f64``: a chain of correctly
    rounded fused multiply-adds in K order starting from C (PTX: "identical
    to .f64 fused multiply-add"; the order is an assumption). Integer types:
    exact, ``.s32`` wraps, or clamps with ``.satfinite``. ``.b1``: C plus the
    population count of the AND / XOR of each row of A with each column of B.
    """
    shape = s.mod("shape")
    atype, btype, ctype, dtype = s.mod("atype"), s.mod("btype"), s.mod("ctype"), s.mod("dtype")
    m, n, k = _dims(shape)
    slot, rank, count = groups(s)
    quads = shape == "m8n8k4" and atype == "f16"
    g = 4 if quads else 1
    if quads:
        m, n = 8, 8
    la = mma_layout(shape, "a", atype, s.mod("alayout", "row"))
    lb = mma_layout(shape, "b", btype, s.mod("blayout", "col"))
    lc = mma_layout(shape, "c", ctype)
    ld = mma_layout(shape, "c", dtype)
    if not quads and lc is ld and _register_major(s, (la, lb, lc), (atype, btype, ctype, dtype), slot, rank, count,
                                                   (m, n, k)):
        return
    a = _checked(s, 1, atype, la)
    b = _checked(s, 2, btype, lb)
    c = _checked(s, 3, ctype, lc)
    A = gather(a, slot, rank, count, la, (g, m, k))
    B = gather(b, slot, rank, count, lb, (g, k, n))
    if atype == "f64":
        D = gather(c, slot, rank, count, lc, (g, m, n))
        for kk in range(k):
            D = fma_f64(A[..., :, kk, None], B[..., None, kk, :], D)
        d = scatter(D, slot, rank, ld)
    else:
        # D = C + A*B element by element: added in C's fragment layout when
        # D shares it (the same sums, without gathering C).
        with np.errstate(over="ignore", invalid="ignore"):
            AB = A @ B
            if atype == "b1" and s.mod("bitop") == "xor":
                AB = A.sum(-1)[..., :, None] + B.sum(-2)[..., None, :] - 2 * AB
            if lc is ld:
                d = c + scatter(AB, slot, rank, ld)
            else:
                d = scatter(gather(c, slot, rank, count, lc, (g, m, n)) + AB, slot, rank, ld)
    write_accumulator(s, 0, d, dtype, s.mod("satfinite") is not None)


def _checked(s: Step, k: int, type_name: str, layout: tuple[np.ndarray, ...]) -> np.ndarray:
    elems = _fragment(s, k, type_name)
    if elems.shape[1] != layout[0].shape[1]:
        raise SimError(f"{s.ins.name}: operand {k} holds {elems.shape[1]} elements of .{type_name}; "
                       f"the fragment has {layout[0].shape[1]}")
    return elems


# --- mma.sync on registers as they lie: one take per operand (the fast path) -------------------

def _register_major(s: Step, lays: tuple, types: tuple[str, ...], slot: np.ndarray, rank: np.ndarray,
                    count: int, dims: tuple[int, int, int]) -> bool:
    """``mma.sync`` with 16-bit float A and B and ``.f32`` C and D, for
    whole warps in thread order with no register observer: A and B are one
    ``np.take`` each from the operand's registers stacked as they lie
    (register-major, no transpose), C is read and D written a register at a
    time. The values and the sums are :func:`mma_sync`'s (the same A @ B
    and C + AB element by element), so are the bits. ``False`` (nothing
    done) when the step is not such a step."""
    atype, btype, ctype, dtype = types
    m, n, k = dims
    if not fastpaths.on() or atype not in _HALVES or btype not in _HALVES or ctype != "f32" \
            or dtype != "f32" or s.n != s.m.nthreads or not ordered(slot, rank, count, 32):
        return False
    read, write = s.m.on_register_read, s.m.on_register_write
    stacks = [plain_vector(s, op, np.uint32, hook) for op, hook in ((1, read), (2, read), (3, read), (0, write))]
    elems = [lays[i][0].shape[1] for i in (0, 1, 2, 2)]
    if any(regs is None or len(regs) * per != e for regs, e, per in zip(stacks, elems, (2, 2, 1, 1))):
        return False       # an observer, an odd register, or a fragment of the wrong size: the general path
    maps = [_register_take(lay, d, count, s.n, per) for lay, d, per in
            ((lays[0], (1, m, k), 2), (lays[1], (1, k, n), 2), (lays[2], (1, m, n), 1))]
    if any(x is None for x in maps):
        return False
    A = np.take(np.stack(stacks[0]).view(_HALVES[atype]).reshape(-1), maps[0][0]).astype(np.float64)
    B = np.take(np.stack(stacks[1]).view(_HALVES[btype]).reshape(-1), maps[1][0]).astype(np.float64)
    c = np.stack(stacks[2]).view(np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        AB = A.reshape(count, 1, m, k) @ B.reshape(count, 1, k, n)
        d = c + np.take(AB.reshape(-1), maps[2][1])
    raw = encode(d, "f32")
    regs = s.m.regs
    for item, row in zip(s.ins.operands[0].items, raw):
        regs.replace(item.name, row)
    return True


_HALVES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _register_take(layout: tuple[np.ndarray, ...], dims: tuple[int, int, int], count: int, n: int,
                   per: int) -> tuple[np.ndarray, np.ndarray] | None:
    """For ``count`` warps in thread order (``n`` threads), their fragments'
    registers stacked ``(registers, n)`` and seen as ``per`` elements each:
    the flat element index of each matrix element ``(count, elements of a
    matrix)``, and the flat matrix index of each (register's element,
    thread) ``(elements of a lane, n)``. ``None`` when the layout does not
    hold each matrix element once."""
    grp, row, col = layout
    key = (grp.shape, grp.tobytes(), row.tobytes(), col.tobytes(), dims, count, n, per)
    hit = _TAKES.get(key)
    if hit is not None:
        return hit if len(hit) else None
    size = dims[0] * dims[1] * dims[2]
    flat = ((grp * dims[1] + row) * dims[2] + col).astype(np.intp)       # (32, elements)
    if flat.size != size or not np.array_equal(np.sort(flat.reshape(-1)), np.arange(size)):
        _TAKES.put(key, ())
        return None
    lanes, elems = flat.shape
    lane = np.arange(lanes)[:, None]
    i = np.arange(elems)[None, :]
    # Element i of lane l of warp w: register i // per, part i % per, thread w * 32 + l.
    source = np.empty(size, np.intp)
    source[flat.reshape(-1)] = ((i // per) * (n * per) + lane * per + i % per).reshape(-1)
    gather_at = (np.arange(count)[:, None] * (lanes * per) + source[None, :])
    scatter_at = (np.arange(count)[None, :, None] * size + flat.T[:, None, :]).reshape(elems, n)
    return _TAKES.put(key, (gather_at, scatter_at))


_TAKES = ShapeCache()

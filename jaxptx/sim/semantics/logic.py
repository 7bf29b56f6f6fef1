"""Emulator semantics: logic and shift instructions (PTX ISA 9.7.8) and the
bit-manipulation instructions of 9.7.1 (popc, clz, brev, bfind, fns, bfe,
bfi, bmsk, szext) plus ``prmt`` (9.7.9).

Bit fields are computed in uint64 with shift counts clamped below 64, so
no numpy shift ever sees a count at or beyond its width.
"""

from __future__ import annotations

import functools


import numpy as np

from ...types import TYPES
from ..core.step import Step
from .registry import register, semantics
from ..numerics.values import UINT

__all__ = ["bit_length"]

_PRED = TYPES["pred"]
_U32 = TYPES["u32"]
_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def _u64(x: np.ndarray) -> np.ndarray:
    """Values as uint64 bits of their own width (zero-extended)."""
    if x.dtype.kind == "i":
        x = x.view(UINT[x.dtype.itemsize * 8])
    return x.astype(np.uint64)


def _out(bits: np.ndarray, s: Step, k: int = 0) -> np.ndarray:
    """uint64 bits truncated to operand ``k``'s width, as its value dtype."""
    t = s.type(k)
    u = bits.astype(UINT[t.bits])
    return u.view(np.dtype(f"int{t.bits}")) if t.kind == "s" else u


def _low_mask(n: np.ndarray) -> np.ndarray:
    """``(1 << n) - 1`` in uint64 for 0 <= n <= 64."""
    n = np.asarray(n, dtype=np.int64)
    m = (np.uint64(1) << np.minimum(n, 63).astype(np.uint64)) - np.uint64(1)
    return np.where(n >= 64, _ONES, m)


def bit_length(u: np.ndarray) -> np.ndarray:
    """Number of significant bits of uint64 values (0 for 0)."""
    u = u.astype(np.uint64)
    n = np.zeros(u.shape, np.int64)
    for sh in (32, 16, 8, 4, 2, 1):
        t = u >> np.uint64(sh)
        nz = t != 0
        n += np.where(nz, sh, 0)
        u = np.where(nz, t, u)
    return n + (u != 0)


# logic ---------------------------------------------------------------------------
def logic(op: str, s: Step) -> None:
    """``and``/``or``/``xor``/``not`` on predicates (``!p`` operands allowed)
    or bits, and ``cnot`` (1 if a is zero, else 0) (PTX ISA 9.7.8); ``op``
    comes from the table's ``sim`` name (``logic_and`` ...)."""
    if s.mod("type") == "pred":
        a = s.pred(1)
        r = ~a if op == "not" else {"and": np.logical_and, "or": np.logical_or,
                                    "xor": np.logical_xor}[op](a, s.pred(2))
        s.dst(0, r, _PRED)
        return
    a = s.src(1)
    if op == "not":
        r = ~a
    elif op == "cnot":
        r = (a == 0).astype(a.dtype)
    else:
        r = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](a, s.src(2))
    s.dst(0, r)


@semantics('lop3')
def lop3(s: Step) -> None:
    """``lop3``: bit i of d is bit ``(a_i << 2) | (b_i << 1) | c_i`` of immLut
    (PTX ISA, lop3: immLut = F(0xF0, 0xCC, 0xAA)). The ``.or``/``.and`` form
    also writes ``(d != 0) BoolOp q`` to the predicate of ``d|p``."""
    a, b, c = (_u64(s.src(k)) for k in (1, 2, 3))
    lut = int(s.src(4, _U32)[0])
    r = np.zeros(a.shape, np.uint64)
    for i in range(8):
        if lut >> i & 1:
            r |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    d = r.astype(np.uint32)
    s.dst(0, d)
    if s.mod("boolop") is not None:
        q = s.pred(5)
        s.dst_pred_of_pair(0, (d != 0) & q if s.mod("boolop") == "and" else (d != 0) | q)


# shifts ----------------------------------------------------------------------------
@semantics('shl')
def shl(s: Step) -> None:
    """``shl``: shift left, zero fill; amounts beyond the width give 0 (PTX ISA,
    shl: "shift amounts greater than the register width N are clamped to N")."""
    a, n = s.src(1), s.src(2, _U32).astype(np.int64)
    bits = a.dtype.itemsize * 8
    r = _u64(a) << np.minimum(n, 63).astype(np.uint64)
    s.dst(0, _out(np.where(n >= bits, np.uint64(0), r), s))


@semantics('shr')
def shr(s: Step) -> None:
    """``shr``: shift right; signed types fill with the sign bit, others with
    zeros; amounts beyond the width are clamped to the width (PTX ISA, shr)."""
    a, n = s.src(1), s.src(2, _U32).astype(np.int64)
    bits = a.dtype.itemsize * 8
    if a.dtype.kind == "i":
        s.dst(0, (a.astype(np.int64) >> np.minimum(n, bits - 1)).astype(a.dtype))
        return
    r = _u64(a) >> np.minimum(n, 63).astype(np.uint64)
    s.dst(0, _out(np.where(n >= bits, np.uint64(0), r), s))


@semantics('shf')
def shf(s: Step) -> None:
    """``shf.l/.r``: funnel shift of the 64-bit pair b:a; the amount is
    ``min(c, 32)`` (``.clamp``) or ``c & 31`` (``.wrap``); ``.l`` gives the
    upper 32 bits of the pair shifted left, ``.r`` the lower 32 bits of it
    shifted right (PTX ISA, shf)."""
    a, b = _u64(s.src(1)), _u64(s.src(2))
    c = s.src(3, _U32).astype(np.int64)
    n = (np.minimum(c, 32) if s.mod("mode") == "clamp" else c & 31).astype(np.uint64)
    pair = (b << np.uint64(32)) | a
    r = (pair << n) >> np.uint64(32) if s.mod("dir") == "l" else pair >> n
    s.dst(0, (r & np.uint64(0xFFFF_FFFF)).astype(np.uint32))


# bit manipulation -----------------------------------------------------------------------
@semantics('popc')
def popc(s: Step) -> None:
    """``popc``: number of set bits (PTX ISA, popc)."""
    s.dst(0, np.bitwise_count(_u64(s.src(1))).astype(np.uint32))


@semantics('clz')
def clz(s: Step) -> None:
    """``clz``: leading zeros, counted from the type's most significant bit."""
    a = s.src(1)
    s.dst(0, (a.dtype.itemsize * 8 - bit_length(_u64(a))).astype(np.uint32))


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)


@semantics('brev')
def brev(s: Step) -> None:
    """``brev``: reverse the order of the bits (PTX ISA, brev)."""
    a = np.ascontiguousarray(s.src(1))
    nb = a.dtype.itemsize
    rev = _REV8[a.view(np.uint8).reshape(len(a), nb)[:, ::-1]]
    s.dst(0, np.ascontiguousarray(rev).view(a.dtype).reshape(len(a)))


@semantics('bfind')
def bfind(s: Step) -> None:
    """``bfind``: position of the most significant non-sign bit (for signed
    types: of the first bit that differs from the sign), 0xFFFFFFFF if none;
    ``.shiftamt`` returns the left shift that moves it to the top instead
    (PTX ISA, bfind)."""
    a = s.src(1)
    bits = a.dtype.itemsize * 8
    u = _u64(a)
    if a.dtype.kind == "i":
        u = np.where(a < 0, ~u & _low_mask(np.full(u.shape, bits)), u)
    pos = bit_length(u) - 1
    if s.mod("shiftamt") is not None:
        pos = np.where(pos < 0, -1, bits - 1 - pos)
    s.dst(0, pos.astype(np.int64).astype(np.uint32))


@semantics('fns')
def fns(s: Step) -> None:
    """``fns``: position of the n-th set bit of mask, counting from bit
    ``base`` (inclusive) upward for positive ``offset`` and downward for
    negative; offset 0 tests bit ``base`` itself; 0xFFFFFFFF when there is no
    such bit (PTX ISA, fns)."""
    mask = s.src(1, _U32).astype(np.uint64)
    base = s.src(2, _U32).astype(np.int64)[:, None]
    off = s.src(3, TYPES["s32"]).astype(np.int64)[:, None]
    idx = np.arange(32)[None, :]
    bit = ((mask[:, None] >> idx.astype(np.uint64)) & np.uint64(1)) != 0
    up = bit & (idx >= base)
    down = bit & (idx <= base)
    hit_up = up & (np.cumsum(up, axis=1) == off)
    hit_down = down & (np.cumsum(down[:, ::-1], axis=1)[:, ::-1] == -off)
    hit = np.where(off > 0, hit_up, np.where(off < 0, hit_down, bit & (idx == base)))
    d = np.where(hit.any(axis=1) & (base[:, 0] < 32), hit.argmax(axis=1), -1)
    s.dst(0, d.astype(np.int64).astype(np.uint32))


@semantics('bfe')
def bfe(s: Step) -> None:
    """``bfe``: extract ``len = c & 0xff`` bits from ``pos = b & 0xff``; bits
    beyond the field (or beyond the msb) are 0 for unsigned types and copies
    of bit ``min(pos + len - 1, msb)`` for signed ones (0 when len is 0)
    (PTX ISA, bfe)."""
    a = s.src(1)
    width = a.dtype.itemsize * 8
    u = _u64(a)
    pos = s.src(2, _U32).astype(np.int64) & 0xFF
    ln = s.src(3, _U32).astype(np.int64) & 0xFF
    shifted = np.where(pos >= width, np.uint64(0), u >> np.minimum(pos, 63).astype(np.uint64))
    mask = _low_mask(np.clip(np.minimum(ln, width - pos), 0, width))
    r = shifted & mask
    if a.dtype.kind == "i":
        top = np.minimum(pos + ln - 1, width - 1)
        sbit = (ln > 0) & (((u >> np.maximum(top, 0).astype(np.uint64)) & np.uint64(1)) != 0)
        r = np.where(sbit, r | ~mask, r)
    s.dst(0, _out(r, s))


@semantics('bfi')
def bfi(s: Step) -> None:
    """``bfi``: insert the low ``len = d & 0xff`` bits of a into b at
    ``pos = c & 0xff`` (bits past the msb are dropped) (PTX ISA, bfi)."""
    a, b = _u64(s.src(1)), _u64(s.src(2))
    width = s.type(0).bits
    pos = s.src(3, _U32).astype(np.int64) & 0xFF
    ln = s.src(4, _U32).astype(np.int64) & 0xFF
    le = np.clip(np.minimum(ln, width - pos), 0, width)
    sh = np.minimum(pos, 63).astype(np.uint64)
    mask = np.where(le == 0, np.uint64(0), _low_mask(le) << sh)
    s.dst(0, _out((b & ~mask) | ((a << sh) & mask), s))


@semantics('bmsk')
def bmsk(s: Step) -> None:
    """``bmsk``: a mask of ``b`` one-bits starting at bit ``a``; ``.clamp``
    limits a and b to 32, ``.wrap`` takes them modulo 32 (PTX ISA, bmsk)."""
    a, b = (s.src(k, _U32).astype(np.int64) for k in (1, 2))
    if s.mod("mode") == "clamp":
        a, b = np.minimum(a, 32), np.minimum(b, 32)
    else:
        a, b = a & 31, b & 31
    top = np.minimum(a + b, 32)
    s.dst(0, (_low_mask(top) & ~_low_mask(a)).astype(np.uint32))


@semantics('szext')
def szext(s: Step) -> None:
    """``szext``: sign- (``.s32``) or zero- (``.u32``) extend the low ``b``
    bits of a; b is limited to 32 (``.clamp``) or taken modulo 32 (``.wrap``);
    b = 0 gives 0 (PTX ISA, szext)."""
    a = _u64(s.src(1))
    b = s.src(2, _U32).astype(np.int64)
    b = np.minimum(b, 32) if s.mod("mode") == "clamp" else b & 31
    mask = _low_mask(b)
    r = a & mask
    if s.type(0).kind == "s":
        sign = (b > 0) & (((a >> np.maximum(b - 1, 0).astype(np.uint64)) & np.uint64(1)) != 0)
        r = np.where(sign, r | ~mask, r)
    s.dst(0, _out(r, s))


# prmt: which of the 8 bytes of b:a each result byte takes, per mode and c & 3
_PRMT_MODES = {
    "f4e": ((0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)),
    "b4e": ((0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)),
    "rc8": ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)),
    "ecl": ((0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)),
    "ecr": ((0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)),
    "rc16": ((0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)),
}


@semantics('prmt')
def prmt(s: Step) -> None:
    """``prmt``: pick four bytes of the pair b:a (bytes 0-3 from a, 4-7 from
    b). Default mode: nibble i of c selects result byte i, and a set bit 3 of
    the nibble replicates the selected byte's sign bit; the ``.f4e .b4e .rc8
    .ecl .ecr .rc16`` modes use c & 3 with PTX's selection table (PTX ISA,
    prmt)."""
    a, b = (np.ascontiguousarray(_u64(s.src(k)).astype(np.uint32)) for k in (1, 2))
    c = s.src(3, _U32).astype(np.int64)
    n = len(a)
    src = np.concatenate([a.view(np.uint8).reshape(n, 4), b.view(np.uint8).reshape(n, 4)], axis=1)
    mode = s.mod("mode")
    if mode is None:
        sel = (c[:, None] >> (4 * np.arange(4))[None, :]) & 0xF
        picked = np.take_along_axis(src, sel & 7, axis=1)
        sign = np.where(picked >= 0x80, np.uint8(0xFF), np.uint8(0))
        out = np.where(sel >= 8, sign, picked)
    else:
        sel = np.array(_PRMT_MODES[mode])[c & 3]
        out = np.take_along_axis(src, sel, axis=1)
    s.dst(0, np.ascontiguousarray(out.astype(np.uint8)).view(np.uint32).reshape(n))


for _op in ("and", "or", "xor", "not", "cnot"):
    register(f"logic_{_op}", functools.partial(logic, _op))

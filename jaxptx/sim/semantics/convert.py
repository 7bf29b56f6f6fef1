"""Emulator semantics: ``mov``, ``cvt``, ``cvt.pack``, ``cvta`` (PTX ISA
"Data Movement and Conversion Instructions").

Conversions are exact: integers convert with numpy's wrapping casts after an
explicit clamp, floats go through :mod:`..numerics.convert`, which rounds float64 values to
any format with any PTX rounding mode. NaN results are the destination
format's canonical NaN (PTX leaves most NaN payloads unspecified; hardware
may keep payload bits where this writes the canonical pattern).
"""

from __future__ import annotations

import struct

import numpy as np

from ... import ir
from ...types import TYPES, PtxType
from ..numerics import b128 as _b128
from ..numerics.convert import convert, int_to_float64
from ..numerics.formats import FORMATS, decode
from ..numerics.formats import flush_f64 as flush
from ..memory.spaces import CONST_WINDOW, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from ..errors import SimError
from ..core.step import Step
from .registry import semantics
from ..numerics.values import value_dtype

_INT = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64")
_IRND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_UTYPE = {8: TYPES["u8"], 16: TYPES["u16"], 32: TYPES["u32"], 64: TYPES["u64"]}
# Generic-address windows of the state spaces (global generic == global).
_WINDOW = {"global": 0, "shared": SHARED_WINDOW, "shared::cta": SHARED_WINDOW,
           "shared::cluster": SHARED_WINDOW, "local": LOCAL_WINDOW, "const": CONST_WINDOW,
           "param": PARAM_WINDOW, "param::entry": PARAM_WINDOW}
# Packed destinations: element format, bits per field.
_PAIR_DST = {"f16x2": ("f16", 16), "bf16x2": ("bf16", 16), "e4m3x2": ("e4m3", 8),
             "e5m2x2": ("e5m2", 8), "e2m3x2": ("e2m3", 8), "e3m2x2": ("e3m2", 8),
             "e2m1x2": ("e2m1", 4), "ue8m0x2": ("ue8m0", 8)}
_PAIR_SRC = {"e4m3x2": ("e4m3", 8), "e5m2x2": ("e5m2", 8), "e2m3x2": ("e2m3", 8),
             "e3m2x2": ("e3m2", 8), "e2m1x2": ("e2m1", 4), "ue8m0x2": ("ue8m0", 8)}


# mov ---------------------------------------------------------------------------
@semantics('mov')
def mov(s: Step) -> None:
    """``mov``: copy a register, immediate, special register or the address
    of a variable in its own state space; ``mov.b32 d, {a, b}`` packs (a in
    the low half), ``mov.b64 {a, b}, d`` unpacks, and ``mov.b128`` does both
    with 64-bit halves; vector registers copy element by element (PTX ISA,
    mov)."""
    d, a = s.ins.operands[0], s.ins.operands[1]
    if s.mod("type") == "pred":
        s.dst(0, s.pred(1), TYPES["pred"])
        return
    dvec, avec = isinstance(d, ir.Vector), isinstance(a, ir.Vector)
    if dvec == avec:
        s.dst(0, _mov_source(s))
        return
    whole, half = (s.type(1), s.type(0)) if dvec else (s.type(0), s.type(1))
    if whole.bits == 128:
        _mov_b128(s, dvec, half)
        return
    w, u = _UTYPE[whole.bits].np_dtype.type, _UTYPE[half.bits]
    mask = w((1 << half.bits) - 1)
    if avec:        # pack: element 0 in the low bits
        parts = s.src(1, u).astype(w)
        out = parts[:, 0]
        for i in range(1, parts.shape[1]):
            out = out | (parts[:, i] << w(i * half.bits))
        s.dst(0, out, _UTYPE[whole.bits])
        return
    bits = s.src(1, _UTYPE[whole.bits])
    fields = [(bits >> w(i * half.bits)) & mask for i in range(len(d.items))]
    s.dst(0, np.stack(fields, axis=-1).astype(u.np_dtype), u)


def _mov_b128(s: Step, unpack: bool, half: PtxType) -> None:
    """``mov.b128 d, {a, b}`` packs two 64-bit halves, a in bits 0-63;
    ``mov.b128 {a, b}, d`` unpacks (PTX ISA 8.3, mov)."""
    u = _UTYPE[half.bits]
    if unpack:
        s.dst(0, _b128.unpack(s.src(1, TYPES["b128"]), len(s.ins.operands[0].items)), u)
    else:
        s.dst(0, _b128.pack(s.src(1, u)), TYPES["b128"])


def _mov_source(s: Step) -> np.ndarray:
    """``mov``'s source, taking the bit pattern of a ``0f``/``0d`` float
    literal moved into an integer or bit-size register."""
    a, t = s.ins.operands[1], s.type(1)
    if isinstance(a, ir.Immediate) and a.form in ("f32", "f64") and t.kind != "f":
        pat = "<f" if a.form == "f32" else "<d"
        code = "<I" if a.form == "f32" else "<Q"
        bits = struct.unpack(code, struct.pack(pat, a.value))[0]
        raw = np.full(s.n, bits & ((1 << t.bits) - 1), dtype=_UTYPE[max(8, t.bits)].np_dtype)
        return raw.view(value_dtype(t))
    return s.src(1)


# cvta ----------------------------------------------------------------------------
@semantics('cvta')
def cvta(s: Step) -> None:
    """``cvta``: state-space address → generic (add the space's window
    base), ``cvta.to``: generic → state-space (subtract it); global
    addresses are generic addresses (PTX ISA, cvta)."""
    t = s.type(0)
    base = _WINDOW[s.mod("space")]
    a = s.src(1, _UTYPE[64])
    w = np.uint64(base)
    out = a - w if s.mod("to") else a + w
    s.dst(0, out & np.uint64((1 << t.bits) - 1), _UTYPE[64] if t.bits == 64 else _UTYPE[32])


# cvt.pack --------------------------------------------------------------------------
@semantics('cvt_pack')
def cvt_pack(s: Step) -> None:
    """``cvt.pack.sat``: clamp two s32 to the narrow type and pack them, a
    above b; the narrow forms put them above the low bits of c (PTX ISA,
    cvt.pack: d = c << 2n | sat(a) << n | sat(b))."""
    name = s.mod("dtype")
    n = int(name[1:])
    lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if name[0] == "s" else (0, (1 << n) - 1)
    mask = np.uint32((1 << n) - 1)
    ta = np.clip(s.src(1, TYPES["s32"]).astype(np.int64), lo, hi).astype(np.uint32) & mask
    tb = np.clip(s.src(2, TYPES["s32"]).astype(np.int64), lo, hi).astype(np.uint32) & mask
    out = (ta << np.uint32(n)) | tb
    if len(s.ins.operands) > 3 and n < 16:
        out = out | (s.src(3, TYPES["u32"]) << np.uint32(2 * n))
    s.dst(0, out, TYPES["u32"])


# cvt -----------------------------------------------------------------------------
@semantics('cvt')
def cvt(s: Step) -> None:
    """``cvt``: convert between integer and floating-point types (PTX ISA,
    cvt): integer truncation/extension and ``.sat``; float→int rounding
    with saturation and the ISA's NaN results; int→float and float→float
    rounding in every mode with ``.ftz``, ``.sat``, ``.relu``,
    ``.satfinite``; packed f16x2/bf16x2/fp8/fp6/fp4/ue8m0 pairs (the value
    from ``a`` goes to the upper field); tf32."""
    dname, aname = s.mod("dtype"), s.mod("atype")
    rnd = s.mod("rnd") or s.mod("irnd") or s.mod("frnd")
    if rnd == "rs":
        _cvt_rs(s, dname)
    elif dname in _INT and aname in _INT:
        _int_to_int(s, dname, aname)
    elif dname in _INT:
        _float_to_int(s, dname, aname, rnd)
    elif aname in _INT:
        _int_to_float(s, dname, rnd or "rn")
    elif aname in _PAIR_SRC:
        _from_pair(s, dname, aname)
    elif dname in _PAIR_DST:
        _to_pair(s, dname, aname, rnd or "rn")
    else:
        _float_to_float(s, dname, aname, rnd)


def _int_to_int(s: Step, dname: str, aname: str) -> None:
    """Truncate (chop) or sign/zero-extend by the source type; ``.sat``
    clamps to the destination's range first."""
    v = s.src(1, TYPES[aname])
    if s.mod("sat"):
        bits = int(dname[1:])
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dname[0] == "s" else (0, (1 << bits) - 1)
        if aname[0] == "s":
            v = v.astype(np.int64)
            v = np.minimum(np.maximum(v, lo), min(hi, 2**63 - 1))
        else:
            v = np.minimum(v.astype(np.uint64), np.uint64(hi))
    s.dst(0, v.astype(TYPES[dname].np_dtype), TYPES[dname])


def _float_in(s: Step, k: int, aname: str) -> np.ndarray:
    """Operand ``k`` of float type ``aname`` as float64; ``.ftz`` flushes
    f32 subnormal inputs (only f32 inputs are flushed)."""
    with np.errstate(invalid="ignore"):
        x = s.src(k, TYPES[aname]).astype(np.float64)
    if s.mod("ftz") and aname == "f32":
        x = flush(x, FORMATS["f32"])
    return x


def _float_to_int(s: Step, dname: str, aname: str, rnd: str) -> None:
    """Round with ``.rni/.rzi/.rmi/.rpi`` and clamp to the destination range
    (float→int saturates by default). NaN gives 0, or ``1 << (bits-1)`` when
    the source is f64 or the destination is 64-bit (PTX ISA, cvt)."""
    x = _float_in(s, 1, aname)
    bits = int(dname[1:])
    signed = dname[0] == "s"
    with np.errstate(invalid="ignore"):
        r = _IRND[rnd](x)
        nan = np.isnan(r)
        if signed:
            lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
            big, small = r >= hi, r < lo
            safe = np.where(big | small | nan, 0.0, r).astype(np.int64)
            out = np.where(big, (1 << (bits - 1)) - 1, np.where(small, -(1 << (bits - 1)), safe))
            out = out.astype(np.int64)
        else:
            big, small = r >= 2.0**bits, r < 0
            safe = np.where(big | small | nan, 0.0, r).astype(np.uint64)
            out = np.where(big, np.uint64((1 << bits) - 1), np.where(small, np.uint64(0), safe))
    if nan.any():
        # 1 << (bits-1): MININT for signed, (MAXINT >> 1) + 1 for unsigned.
        special = aname == "f64" or bits == 64
        value = (-(1 << (bits - 1)) if signed else 1 << (bits - 1)) if special else 0
        out = np.where(nan, np.asarray(value, dtype=out.dtype), out)
    s.dst(0, out.astype(TYPES[dname].np_dtype), TYPES[dname])


def _int_to_float(s: Step, dname: str, rnd: str) -> None:
    """Round the exact integer to the float type in the ``.rn/.rz/.rm/.rp``
    direction (64-bit integers via round-to-odd at 53 bits, which keeps the
    final rounding exact); ``.sat`` clamps to [0, 1]."""
    aname = s.mod("atype")
    v = s.src(1, TYPES[aname])
    fmt = FORMATS[dname]
    if dname == "f64":
        x, mode = int_to_float64(v, rnd), "rn"
    else:
        x, mode = int_to_float64(v, "odd"), rnd
    bits = convert(x, fmt, mode, sat=bool(s.mod("sat")), ftz=bool(s.mod("ftz")) and dname == "f32")
    s.dst(0, bits, _UTYPE[fmt.bits])


def _float_to_float(s: Step, dname: str, aname: str, rnd: str | None) -> None:
    """Float→float: with an integer rounding mode, round to an integral value
    in the same type; else round to the destination format (exact when
    widening). ``.ftz`` flushes f32 inputs and f32 results."""
    x = _float_in(s, 1, aname)
    fmt = FORMATS[dname]
    mode = rnd or "rn"
    if rnd in _IRND:
        with np.errstate(invalid="ignore"):
            x = _IRND[rnd](x)
        mode = "rn"
    bits = convert(x, fmt, mode, ftz=bool(s.mod("ftz")) and dname == "f32", sat=bool(s.mod("sat")),
                   relu=bool(s.mod("relu")), satfinite=bool(s.mod("satfinite")))
    s.dst(0, bits, _UTYPE[fmt.bits])


def _narrow(x: np.ndarray, elem: str, mode: str, s: Step) -> np.ndarray:
    """One field of a packed destination as unsigned bits."""
    relu, satfinite = bool(s.mod("relu")), bool(s.mod("satfinite"))
    if elem == "ue8m0":
        return _to_ue8m0(x, mode, satfinite)
    return convert(x, FORMATS[elem], mode, relu=relu, satfinite=satfinite).astype(np.uint32)


def _to_pair(s: Step, dname: str, aname: str, mode: str) -> None:
    """Two values into one packed register: ``a`` (or the upper half of a
    packed source) in the upper field, ``b`` (the lower half) in the lower
    field; fp6 fields are bytes with the two top bits zero."""
    elem, width = _PAIR_DST[dname]
    if aname == "f32":
        hi, lo = _float_in(s, 1, "f32"), _float_in(s, 2, "f32")
    else:           # f16x2 / bf16x2: element 0 is the low half
        with np.errstate(invalid="ignore"):
            pair = s.src(1, TYPES[aname]).astype(np.float64)
        lo, hi = pair[:, 0], pair[:, 1]
    out = (_narrow(hi, elem, mode, s) << np.uint32(width)) | _narrow(lo, elem, mode, s)
    s.dst(0, out, _UTYPE[max(8, 2 * width)])


def _from_pair(s: Step, dname: str, aname: str) -> None:
    """A packed fp8/fp6/fp4 pair → f16x2, or ue8m0x2 → bf16x2, upper field to
    the upper half (exact; ``.relu`` clamps negatives to +0)."""
    elem, width = _PAIR_SRC[aname]
    a = s.src(1, _UTYPE[max(8, 2 * width)]).astype(np.uint32)
    fields = [(a >> np.uint32(i * width)) & np.uint32((1 << width) - 1) for i in (0, 1)]
    out_fmt = FORMATS["bf16" if dname == "bf16x2" else "f16"]
    halves = []
    for f in fields:
        x = _ue8m0_value(f) if elem == "ue8m0" else decode(f, FORMATS[elem])
        halves.append(convert(x, out_fmt, "rn", relu=bool(s.mod("relu"))).astype(np.uint32))
    s.dst(0, (halves[1] << np.uint32(16)) | halves[0], TYPES["u32"])


def _to_ue8m0(x: np.ndarray, mode: str, satfinite: bool) -> np.ndarray:
    """f32/bf16 → ue8m0 (a power of two, 2**(code-127)): rz keeps the
    exponent field, rp rounds up when any mantissa bit is set; NaN, and
    without ``.satfinite`` overflow and infinity, give 0xFF (NaN); with it
    they give 254 (NaN stays NaN). The sign is ignored (ue8m0 has none)."""
    with np.errstate(invalid="ignore"):
        ax = np.abs(x)
        nan, inf = np.isnan(ax), np.isinf(ax)
        m, e = np.frexp(np.where(nan | inf, 1.0, ax))
        code = np.where(ax == 0, 0, np.maximum(e.astype(np.int64) - 1 + 127, 0))
        exact = (m == 0.5) | (ax == 0) | (ax < 2.0**-127)
        if mode == "rp":
            code = code + (~exact & (ax >= 2.0**-127)).astype(np.int64)
        over = inf | (code > 254)
        code = np.where(over, 254 if satfinite else 255, code)
        code = np.where(nan, 255, code)
    return code.astype(np.uint32)


def _ue8m0_value(code: np.ndarray) -> np.ndarray:
    """ue8m0 codes → float64 (255 is NaN)."""
    c = code.astype(np.int64)
    return np.where(c == 255, np.nan, np.ldexp(1.0, c - 127))


# Stochastic rounding (.rs, sm_100a/sm_103a): the random bits each value uses.
_RS_PAIR = {"f16x2": ("f16", 13), "bf16x2": ("bf16", 16)}
# Four-value forms: (element, bits a field, random-bit field of a, b, e, f as (shift, width)).
_RS_QUAD = {name: (name[:4], 8, ((24, 8), (16, 8), (8, 8), (0, 8)))
            for name in ("e4m3x4", "e5m2x4", "e2m3x4", "e3m2x4")}
_RS_QUAD["e2m1x4"] = ("e2m1", 4, ((24, 8), (8, 8), (16, 8), (0, 8)))


def _cvt_rs(s: Step, dname: str) -> None:
    """``cvt.rs``: round toward zero, then away if adding the random bits to
    the same number of top discarded mantissa bits carries out (PTX ISA,
    cvt ``.rs``; for results subnormal in the target the discarded bits are
    those below its subnormal quantum).

    - ``f16x2`` / ``bf16x2``: ``a`` (upper half of ``d``) uses the 13 / 16
      low bits of rbits' upper half, ``b`` those of its lower half.
    - four-value forms ``d, {a, b, e, f}, rbits`` (``a`` in the top field of
      ``d``, PTX ISA cvt "Semantics"): the ISA gives ``a, b`` the upper 16
      bits of rbits and ``e, f`` the lower 16 (``e2m1x4``: ``a, b`` the upper
      byte of each half, ``e, f`` the lower byte) without saying how a pair
      splits its bits; the emulator reads them as 8 random bits a value,
      the first operand of a pair taking the more significant byte:
      ``a = rbits[31:24], b = [23:16], e = [15:8], f = [7:0]``, and for
      ``e2m1x4`` ``a = [31:24], b = [15:8], e = [23:16], f = [7:0]``.
    """
    r = s.src(len(s.ins.operands) - 1, TYPES["u32"])
    relu, satfinite = bool(s.mod("relu")), bool(s.mod("satfinite"))
    if dname in _RS_PAIR:
        elem, w = _RS_PAIR[dname]
        rmask = np.uint32((1 << w) - 1)
        fields = []
        for k, rb in ((1, (r >> np.uint32(16)) & rmask), (2, r & rmask)):
            x = _float_in(s, k, "f32")
            fields.append(convert(x, FORMATS[elem], "rs", relu=relu, satfinite=satfinite, rbits=rb,
                                  rwidth=w).astype(np.uint32))
        s.dst(0, (fields[0] << np.uint32(16)) | fields[1], TYPES["u32"])
        return
    if dname not in _RS_QUAD:
        raise SimError(f"{s.ins.name}: no stochastic-rounding form converts to .{dname}")
    elem, field, rfields = _RS_QUAD[dname]
    with np.errstate(invalid="ignore"):
        x = s.src(1, TYPES["f32"]).astype(np.float64).reshape(s.n, 4)
    out = np.zeros(s.n, dtype=np.uint32)
    for k, (shift, width) in enumerate(rfields):
        rb = (r >> np.uint32(shift)) & np.uint32((1 << width) - 1)
        bits = convert(x[:, k], FORMATS[elem], "rs", relu=relu, satfinite=satfinite, rbits=rb, rwidth=width)
        out |= bits.astype(np.uint32) << np.uint32(field * (3 - k))
    s.dst(0, out, TYPES["u32" if field == 8 else "u16"])

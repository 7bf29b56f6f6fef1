"""Emulator semantics of mov, cvt, cvt.pack and cvta against independent
references: Python integers, and exact rounding with ``fractions.Fraction``
(PTX ISA "Data Movement and Conversion Instructions")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from golden_harness import cases, run

from jaxptx.sim import launch
from jaxptx.sim.memory.spaces import LOCAL_WINDOW, SHARED_WINDOW

RNG = np.random.default_rng(1234)
BLOCK = 256
_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


# a kernel that runs one instruction per element ------------------------------------
def _size(t: str) -> int:
    return _BYTES[t.lstrip("bfsu")] if t != "pred" else 1


def elementwise(ins: str, srcs: Sequence[tuple[str, np.ndarray]], dst: str, *, decl: str = "") -> np.ndarray:
    """Run ``ins`` once per element: ``%a %b %c`` hold the sources (loaded
    with their register types), ``%d`` (of type ``dst``) is stored. Returns
    the stored values as unsigned bits."""
    n = len(srcs[0][1])
    pad = -n % BLOCK
    names = "abc"
    params = ", ".join([".param .u64 pd"] + [f".param .u64 p{k}" for k in range(len(srcs))])
    lines = [".version 8.7", ".target sm_100a", ".address_size 64", f".visible .entry k({params})", "{",
             " .reg .u32 %tx, %cx;", " .reg .u64 %i, %ci, %o, %ad, %pd;",
             *[f" .reg .u64 %p{k}; .reg .{t} %{names[k]};" for k, (t, _) in enumerate(srcs)],
             f" .reg .{dst} %d;", decl,
             " mov.u32 %tx, %tid.x; mov.u32 %cx, %ctaid.x;",
             " cvt.u64.u32 %i, %tx; cvt.u64.u32 %ci, %cx;",
             *[" add.u64 %ci, %ci, %ci;"] * int(math.log2(BLOCK)), " add.u64 %i, %i, %ci;",
             " ld.param.u64 %pd, [pd];"]

    def address(base: str, size: int) -> list[str]:
        out = [" mov.u64 %o, %i;"] + [" add.u64 %o, %o, %o;"] * int(math.log2(size))
        return out + [f" add.u64 %ad, {base}, %o;"]
    arrays = []
    for k, (t, values) in enumerate(srcs):
        lines += [f" ld.param.u64 %p{k}, [p{k}];", *address(f"%p{k}", _size(t)),
                  f" ld.global.{t} %{names[k]}, [%ad];"]
        arrays.append(np.ascontiguousarray(np.concatenate([values, np.zeros(pad, values.dtype)])))
    lines += [" " + ins, *address("%pd", _size(dst)), f" st.global.{dst} [%ad], %d;", " ret;", "}"]
    out = np.zeros(n + pad, dtype=f"u{_size(dst)}")
    launch("\n".join(lines), out, *arrays, grid=((n + pad) // BLOCK, 1, 1), block=(BLOCK, 1, 1))
    return out[:n]


# exact references -------------------------------------------------------------------
# name: (precision with hidden bit, min normal exponent, max finite, has inf, has NaN, host dtype)
FMT = {
    "f64": (53, -1022, float(np.finfo(np.float64).max), True, True, np.float64),
    "f32": (24, -126, float(np.finfo(np.float32).max), True, True, np.float32),
    "tf32": (11, -126, (2 - 2**-10) * 2.0**127, True, True, np.float32),
    "f16": (11, -14, 65504.0, True, True, np.float16),
    "bf16": (8, -126, (2 - 2**-7) * 2.0**127, True, True, ml_dtypes.bfloat16),
    "e4m3": (4, -6, 448.0, False, True, ml_dtypes.float8_e4m3fn),
    "e5m2": (3, -14, 57344.0, True, True, ml_dtypes.float8_e5m2),
    "e2m3": (4, 0, 7.5, False, False, ml_dtypes.float6_e2m3fn),
    "e3m2": (3, -2, 28.0, False, False, ml_dtypes.float6_e3m2fn),
    "e2m1": (2, 0, 6.0, False, False, ml_dtypes.float4_e2m1fn),
}
NAN = {"f64": 0x7FFF_FFFF_FFFF_FFFF, "f32": 0x7FFF_FFFF, "tf32": 0x7FFF_FFFF, "f16": 0x7FFF, "bf16": 0x7FFF,
       "e4m3": 0x7F, "e5m2": 0x7F}


def ref_round(v: Fraction, fmt: str, mode: str) -> float:
    """Exact rounding of a nonzero rational to ``fmt`` (IEEE overflow rules)."""
    p, emin, top = FMT[fmt][:3]
    s = -1 if v < 0 else 1
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = Fraction(2) ** (max(e, emin) - p + 1)
    y = a / q
    n = math.floor(y)
    frac = y - n
    up = {"rn": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and n % 2 == 1),
          "rna": frac >= Fraction(1, 2), "rz": False,
          "rm": s < 0 and frac > 0, "rp": s > 0 and frac > 0}[mode]
    r = (n + up) * q
    if r > Fraction(top):
        away = mode in ("rn", "rna") or (mode == "rp" and s > 0) or (mode == "rm" and s < 0)
        return s * (math.inf if away else top)
    return s * float(r)


def ref_convert(x: float | int, fmt: str, mode: str = "rn", *, ftz_in: bool = False, ftz_out: bool = False,
                sat: bool = False, relu: bool = False, satfinite: bool = False) -> float:
    """The value PTX cvt produces (NaN as math.nan)."""
    if isinstance(x, float) and math.isnan(x):
        r = math.nan
    else:
        if ftz_in and 0 < abs(x) < 2.0**-126:
            x = math.copysign(0.0, x)
        if isinstance(x, float) and (math.isinf(x) or x == 0):
            r = x
        else:
            r = ref_round(Fraction(x), fmt, mode)
            if r == 0:
                r = math.copysign(0.0, x)
    if ftz_out and r != 0 and abs(r) < 2.0**-126:
        r = math.copysign(0.0, r)
    if sat:
        r = 0.0 if math.isnan(r) or r <= 0 else min(r, 1.0)
    if relu and not math.isnan(r) and math.copysign(1, r) < 0:
        r = 0.0
    top, has_inf, has_nan = FMT[fmt][2:5]
    if satfinite:
        if math.isinf(r):
            r = math.copysign(top, r)
        if math.isnan(r) and not has_nan:
            r = top
    elif math.isinf(r) and not has_inf:
        r = math.nan
    return r


def bits_of(values: Sequence[float], fmt: str) -> np.ndarray:
    """Bits of exactly representable values (NaN → the canonical NaN)."""
    dtype = FMT[fmt][5]
    width = {"f64": np.uint64, "f32": np.uint32, "tf32": np.uint32, "f16": np.uint16, "bf16": np.uint16}.get(
        fmt, np.uint8)
    v = np.array(values, dtype=np.float64)
    nan = np.isnan(v)
    out = np.where(nan, 0, v).astype(dtype).view(width if width != np.uint8 else np.uint8).astype(width)
    return np.where(nan, width(NAN.get(fmt, 0)), out)


# test inputs --------------------------------------------------------------------------
def f32_inputs(n: int = 3000) -> np.ndarray:
    """Specials, random bit patterns, and f16/bf16 rounding boundaries."""
    with np.errstate(all="ignore"):
        return _f32_inputs(n)


def _f32_inputs(n: int) -> np.ndarray:
    specials = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 65504.0, 65519.0, 65520.0, 65536.0, 448.0, 464.0,
                         480.0, 1e-45, -1e-45, 1e-40, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-126, 2.0**-127,
                         np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 6.0, 7.0, 7.5, 8.0, 28.0, 30.0], dtype=np.float32)
    rand = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    half = RNG.integers(0, 0x7C00, n // 2, dtype=np.uint16).view(np.float16).astype(np.float32)
    ties = half + np.float32(2.0**-11) * np.abs(half) * RNG.choice([-1, 0, 1], n // 2).astype(np.float32)
    small = (RNG.standard_normal(n // 2) * 4).astype(np.float32)
    return np.concatenate([specials, rand, half, ties, small]).astype(np.float32)


INT_RANGE = {t: ((-(1 << (int(t[1:]) - 1)), (1 << (int(t[1:]) - 1)) - 1) if t[0] == "s" else (0, (1 << int(t[1:])) - 1))
             for t in ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64")}
NP_INT = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
          "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64}


def int_inputs(t: str, n: int = 400) -> list[int]:
    lo, hi = INT_RANGE[t]
    edge = [lo, hi, 0, 1, -1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
            2**53 + 1, 2**53 + 3, 2**24 + 1, 2**24 + 3, 2**63 - 1, -(2**31), -(2**63), 2049, 4097, 70000]
    bits = int(t[1:])
    rand = [int(v) for v in RNG.integers(0, 2**bits, n, dtype=np.uint64)]
    rand = [v - (1 << bits) if t[0] == "s" and v >= 1 << (bits - 1) else v for v in rand]
    return [v for v in edge if lo <= v <= hi] + rand


def as_np(values: list[int], t: str) -> np.ndarray:
    return np.array(values, dtype=object).astype(NP_INT[t])


# integer ↔ integer -------------------------------------------------------------------------
INTS = list(INT_RANGE)


def _fits(a: str, d: str) -> bool:
    return INT_RANGE[d][0] <= INT_RANGE[a][0] and INT_RANGE[a][1] <= INT_RANGE[d][1]


# .sat is illegal where every value fits, so those pairs are not generated.
@pytest.mark.parametrize("dtype, atype, sat", [(d, a, sat) for d in INTS for a in INTS
                                               for sat in (False, True) if not (sat and _fits(a, d))])
def test_int_to_int(dtype: str, atype: str, sat: bool) -> None:
    """Chop or extend by the source's signedness; .sat clamps (PTX ISA cvt,
    Integer Notes)."""
    values = int_inputs(atype)
    got = elementwise(f"cvt{'.sat' if sat else ''}.{dtype}.{atype} %d, %a;", [(atype, as_np(values, atype))], dtype)
    lo, hi = INT_RANGE[dtype]
    bits = int(dtype[1:])
    want = [min(max(v, lo), hi) & ((1 << bits) - 1) if sat else v & ((1 << bits) - 1) for v in values]
    np.testing.assert_array_equal(got, np.array(want, dtype=object).astype(got.dtype))


# float → integer ----------------------------------------------------------------------
def _float_src(atype: str) -> tuple[str, np.ndarray, list[float]]:
    with np.errstate(all="ignore"):
        return _float_src_values(atype)


def _float_src_values(atype: str) -> tuple[str, np.ndarray, list[float]]:
    x = f32_inputs(600)
    x = np.concatenate([x, np.float32([2.0**31, -2.0**31, 2.0**32, 2.0**63, 2.0**64, -2.0**63, 65535.5,
                                       255.5, -128.5, -0.5, 0.49999997, 4294967040.0])])
    if atype == "f64":
        v = np.concatenate([x.astype(np.float64), [2.0**63 - 1024, 2.0**64 - 2048, -(2.0**63) - 2048, 1e300]])
        return "f64", v, [float(t) for t in v]
    if atype == "f32":
        return "f32", x, [float(t) for t in x]
    h = x.astype(FMT[atype][5])
    return "b16", h.view(np.uint16), [float(t) for t in h.astype(np.float64)]


IRND = {"rni": lambda v: float(round(Fraction(v))), "rzi": lambda v: float(math.trunc(v)),
        "rmi": lambda v: float(math.floor(v)), "rpi": lambda v: float(math.ceil(v))}


# PTX has no cvt.irnd.{u8,s8}.bf16, so those pairs are not generated.
@pytest.mark.parametrize("dtype, atype, irnd", [(d, a, r) for d in INTS for a in ("f16", "f32", "f64", "bf16")
                                                for r in IRND if not (a == "bf16" and d in ("u8", "s8"))])
def test_float_to_int(dtype: str, atype: str, irnd: str) -> None:
    """Integer rounding, clamping to the destination range; NaN → 0, or
    1 << (bits-1) for an f64 source or a 64-bit destination (PTX ISA cvt)."""
    reg, arr, values = _float_src(atype)
    got = elementwise(f"cvt.{irnd}.{dtype}.{atype} %d, %a;", [(reg, arr)], dtype)
    lo, hi = INT_RANGE[dtype]
    bits = int(dtype[1:])
    want = []
    for v in values:
        if math.isnan(v):
            r = (1 << (bits - 1)) if atype == "f64" or bits == 64 else 0
        elif math.isinf(v):
            r = hi if v > 0 else lo
        else:
            r = int(min(max(Fraction(IRND[irnd](v)), lo), hi))
        want.append(r & ((1 << bits) - 1))
    np.testing.assert_array_equal(got, np.array(want, dtype=object).astype(got.dtype))


def test_float_to_int_ftz() -> None:
    """.ftz flushes f32 subnormal inputs: rpi of the smallest subnormal is 1
    without it and 0 with it."""
    x = np.float32([1e-45, -1e-45, 1e-39, 1.5])
    plain = elementwise("cvt.rpi.s32.f32 %d, %a;", [("f32", x)], "s32")
    ftz = elementwise("cvt.rpi.ftz.s32.f32 %d, %a;", [("f32", x)], "s32")
    np.testing.assert_array_equal(plain.view(np.int32), [1, 0, 1, 2])
    np.testing.assert_array_equal(ftz.view(np.int32), [0, 0, 0, 2])


# integer → float -------------------------------------------------------------------------
# PTX has no cvt.frnd.bf16.{u8,s8}, so those pairs are not generated.
@pytest.mark.parametrize("atype, dtype, frnd", [(a, d, r) for a in INTS for d in ("f16", "f32", "f64", "bf16")
                                                for r in ("rn", "rz", "rm", "rp")
                                                if not (d == "bf16" and a in ("u8", "s8"))])
def test_int_to_float(atype: str, dtype: str, frnd: str) -> None:
    """Exact integers rounded in each direction, overflow per IEEE (PTX ISA
    cvt, Floating Point Notes)."""
    values = int_inputs(atype, 300)
    reg = {"f16": "b16", "bf16": "b16", "f32": "f32", "f64": "f64"}[dtype]
    got = elementwise(f"cvt.{frnd}.{dtype}.{atype} %d, %a;", [(atype, as_np(values, atype))], reg)
    want = bits_of([ref_convert(v, dtype, frnd) if v else 0.0 for v in values], dtype)
    np.testing.assert_array_equal(got, want)


def test_int_to_float_sat() -> None:
    """.sat clamps int→float results to [0, 1]."""
    got = elementwise("cvt.rn.sat.f32.s32 %d, %a;", [("s32", np.int32([-5, 0, 1, 7]))], "f32")
    np.testing.assert_array_equal(got.view(np.float32), [0.0, 0.0, 1.0, 1.0])


# float → float ------------------------------------------------------------------------------
def _src(atype: str) -> tuple[str, np.ndarray, list[float]]:
    with np.errstate(all="ignore"):
        return _src_values(atype)


def _src_values(atype: str) -> tuple[str, np.ndarray, list[float]]:
    x = f32_inputs()
    if atype == "f32":
        return "f32", x, [float(v) for v in x]
    if atype == "f64":
        extra = RNG.integers(0, 2**64, 2000, dtype=np.uint64).view(np.float64)
        near = x.astype(np.float64) * (1 + RNG.choice([-1, 1], len(x)) * 2.0**-30)
        v = np.concatenate([x.astype(np.float64), extra, near, [2.0**-1074, 1e-310]])
        return "f64", v, [float(t) for t in v]
    h = x.astype(np.float64).astype(FMT[atype][5]) if atype == "f16" else x.astype(ml_dtypes.bfloat16)
    h = np.concatenate([h, RNG.integers(0, 2**16, 2000, dtype=np.uint64).astype(np.uint16).view(FMT[atype][5])])
    return "b16", h.view(np.uint16), [float(t) for t in h.astype(np.float64)]


FLOAT_PAIRS = [  # (dtype, atype, modes, modifiers that may be added)
    ("f16", "f32", ["rn", "rz", "rm", "rp"], ["ftz", "sat"]),
    ("bf16", "f32", ["rn", "rz", "rm", "rp"], ["ftz"]),
    ("f32", "f64", ["rn", "rz", "rm", "rp"], ["ftz", "sat"]),
    ("f16", "f64", ["rn", "rz", "rm", "rp"], ["sat"]),
    ("bf16", "f64", ["rn", "rz", "rm", "rp"], []),
    ("bf16", "f16", ["rn", "rz", "rm", "rp"], []),
    ("f16", "bf16", ["rn", "rz", "rm", "rp"], []),
    ("f32", "f16", [None], ["ftz", "sat"]),
    ("f64", "f16", [None], ["sat"]),
    ("f64", "f32", [None], ["ftz", "sat"]),
    ("f32", "bf16", [None, "rz"], ["ftz"]),
    ("f64", "bf16", [None], []),
]


def _float_case(dtype: str, atype: str, mode: str | None, mods: Sequence[str]) -> None:
    reg, arr, values = _src(atype)
    dreg = {"f16": "b16", "bf16": "b16", "f32": "f32", "f64": "f64", "tf32": "b32"}[dtype]
    spelled = "".join(f".{m}" for m in ([mode] if mode else []) + list(mods))
    got = elementwise(f"cvt{spelled}.{dtype}.{atype} %d, %a;", [(reg, arr)], dreg)
    want = bits_of([ref_convert(v, dtype, mode or "rn", ftz_in="ftz" in mods and atype == "f32",
                                ftz_out="ftz" in mods and dtype == "f32", sat="sat" in mods,
                                relu="relu" in mods, satfinite="satfinite" in mods) for v in values], dtype)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(values[i], hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def _modifier_sets(extra: list[str]) -> list[tuple[str, ...]]:
    return [()] + [(x,) for x in extra] + ([tuple(extra)] if len(extra) > 1 else [])


@pytest.mark.parametrize("case", [pytest.param((d, a, m, mods), id=f"{d}.{a}.{m}.{'.'.join(mods)}")
                                  for d, a, modes, extra in FLOAT_PAIRS for m in modes
                                  for mods in _modifier_sets(extra)])
def test_float_to_float(case) -> None:
    """Narrowing rounds exactly in each mode (overflow → inf or max per
    mode); widening is exact; .ftz flushes f32 inputs and results; .sat
    clamps to [0, 1] with NaN → +0; NaN → canonical NaN."""
    _float_case(*case)


def test_round_to_nearest_matches_numpy() -> None:
    """A second, independent reference: numpy's f32→f16 and f64→f32 and
    ml_dtypes' f32→bf16/e4m3/e5m2 conversions round to nearest even."""
    with np.errstate(all="ignore"):
        x = f32_inputs()
        x = x[~np.isnan(x)]
        np.testing.assert_array_equal(elementwise("cvt.rn.f16.f32 %d, %a;", [("f32", x)], "b16"),
                                      x.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(elementwise("cvt.rn.bf16.f32 %d, %a;", [("f32", x)], "b16"),
                                      x.astype(ml_dtypes.bfloat16).view(np.uint16))
        d = RNG.integers(0, 2**64, 3000, dtype=np.uint64).view(np.float64)
        d = d[~np.isnan(d)]
        np.testing.assert_array_equal(elementwise("cvt.rn.f32.f64 %d, %a;", [("f64", d)], "f32"),
                                      d.astype(np.float32).view(np.uint32))
        for name, dtype in (("e4m3x2", ml_dtypes.float8_e4m3fn), ("e5m2x2", ml_dtypes.float8_e5m2)):
            small = x[np.abs(x) <= float(ml_dtypes.finfo(dtype).max)]
            got = elementwise(f"cvt.rn.satfinite.{name}.f32 %d, %a, %b;", [("f32", small), ("f32", small)], "b16")
            np.testing.assert_array_equal(got & np.uint16(0xFF), small.astype(dtype).view(np.uint8))


@pytest.mark.parametrize("mods", [(), ("relu",), ("satfinite",), ("relu", "satfinite")])
@pytest.mark.parametrize("mode", ["rn", "rz"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_relu_satfinite(dtype: str, mode: str, mods: tuple[str, ...]) -> None:
    """.relu clamps negatives (and -0) to +0, NaN stays NaN; .satfinite turns
    ±inf and overflow into ±max (PTX ISA cvt)."""
    _float_case(dtype, "f32", mode, mods)


@pytest.mark.parametrize("case", [("rna", ()), ("rna", ("satfinite",)), ("rn", ()), ("rz", ("relu",)),
                                  ("rn", ("relu", "satfinite")), ("rz", ("satfinite",))])
def test_tf32(case) -> None:
    """f32 → tf32: 10 mantissa bits in a 32-bit register, rna = ties away."""
    mode, mods = case
    _float_case("tf32", "f32", mode, mods)


@pytest.mark.parametrize("case", [(t, irnd, mods) for t in ("f32", "f64", "f16", "bf16") for irnd in IRND
                                  for mods in ((), ("sat",), ("ftz",))
                                  if not (mods == ("ftz",) and t != "f32") and not (mods == ("sat",) and t == "bf16")])
def test_round_to_integral(case) -> None:
    """cvt.rni.f32.f32 and friends round to an integral value in the same
    type; .ftz flushes f32 subnormals; .sat clamps to [0, 1]."""
    t, irnd, mods = case
    reg, arr, values = _src(t)
    spelled = "".join(f".{m}" for m in mods)
    got = elementwise(f"cvt.{irnd}{spelled}.{t}.{t} %d, %a;", [(reg, arr)], reg)
    want = []
    for v in values:
        if "ftz" in mods and 0 < abs(v) < 2.0**-126:
            v = math.copysign(0.0, v)
        r = v if math.isnan(v) or math.isinf(v) or v == 0 else math.copysign(IRND[irnd](v), v)
        if "sat" in mods:
            r = 0.0 if math.isnan(r) or r <= 0 else min(r, 1.0)
        want.append(r)
    np.testing.assert_array_equal(got, bits_of(want, t))


def test_cvt_f32_f32_ftz_sat() -> None:
    """cvt.ftz.f32.f32 flushes subnormals; cvt.sat.f32.f32 clamps, NaN → 0."""
    x = np.float32([1e-40, -1e-40, 0.5, 2.0, -3.0, np.nan])
    ftz = elementwise("cvt.ftz.f32.f32 %d, %a;", [("f32", x)], "f32").view(np.float32)
    sat = elementwise("cvt.sat.f32.f32 %d, %a;", [("f32", x)], "f32").view(np.float32)
    np.testing.assert_array_equal(ftz[:5], [0.0, -0.0, 0.5, 2.0, -3.0])
    assert np.signbit(ftz[1]) and np.isnan(ftz[5])
    np.testing.assert_array_equal(sat, np.float32([1e-40, 0, 0.5, 1, 0, 0]))


# packed pairs -------------------------------------------------------------------------------
PAIRS_F32 = [("f16x2", "f16", 16, ["rn", "rz"], [(), ("relu",), ("satfinite",), ("relu", "satfinite")]),
             ("bf16x2", "bf16", 16, ["rn", "rz"], [(), ("relu",), ("satfinite",)]),
             ("e4m3x2", "e4m3", 8, ["rn"], [("satfinite",), ("satfinite", "relu")]),
             ("e5m2x2", "e5m2", 8, ["rn"], [("satfinite",), ("satfinite", "relu")]),
             ("e2m3x2", "e2m3", 8, ["rn"], [("satfinite",), ("satfinite", "relu")]),
             ("e3m2x2", "e3m2", 8, ["rn"], [("satfinite",), ("satfinite", "relu")]),
             ("e2m1x2", "e2m1", 4, ["rn"], [("satfinite",), ("satfinite", "relu")])]


@pytest.mark.parametrize("case", [pytest.param((d, e, w, m, mods), id=f"{d}.{m}.{'.'.join(mods)}")
                                  for d, e, w, modes, modsets in PAIRS_F32 for m in modes for mods in modsets])
def test_pack_from_f32(case) -> None:
    """Two f32 → a packed pair: a in the upper field, b in the lower; fp6
    fields are bytes with the top two bits zero; e2m1 pairs are one byte
    (PTX ISA cvt, Semantics)."""
    dname, elem, width, mode, mods = case
    x = f32_inputs(800)
    a, b = x, RNG.permutation(x)
    dreg = {16: "b32", 8: "b16", 4: "b8"}[width]
    spelled = "".join(f".{m}" for m in [mode, *mods])
    got = elementwise(f"cvt{spelled}.{dname}.f32 %d, %a, %b;", [("f32", a), ("f32", b)], dreg).astype(np.uint64)

    def field(v: np.ndarray) -> np.ndarray:
        return bits_of([ref_convert(float(t), elem, mode, relu="relu" in mods, satfinite="satfinite" in mods)
                        for t in v], elem).astype(np.uint64)
    want = (field(a) << np.uint64(width)) | field(b)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mods", [(), ("relu",)])
@pytest.mark.parametrize("dname", ["e4m3x2", "e5m2x2"])
def test_fp8_from_f16x2(dname: str, mods: tuple[str, ...]) -> None:
    """f16x2 → fp8 pair: the upper half converts into the upper byte."""
    h = RNG.integers(0, 2**16, (1500, 2), dtype=np.uint64).astype(np.uint16)
    packed = (h[:, 0].astype(np.uint32) | (h[:, 1].astype(np.uint32) << 16))
    spelled = "".join(f".{m}" for m in mods)
    got = elementwise(f"cvt.rn.satfinite{spelled}.{dname}.f16x2 %d, %a;", [("b32", packed)], "b16")
    elem = dname[:-2]

    def field(v: np.ndarray) -> np.ndarray:
        vals = v.view(np.float16).astype(np.float64)
        return bits_of([ref_convert(float(t), elem, "rn", relu="relu" in mods, satfinite=True) for t in vals],
                       elem).astype(np.uint16)
    np.testing.assert_array_equal(got, (field(h[:, 1]) << np.uint16(8)) | field(h[:, 0]))


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("aname", ["e4m3x2", "e5m2x2", "e2m3x2", "e3m2x2", "e2m1x2"])
def test_unpack_to_f16x2(aname: str, relu: bool) -> None:
    """fp8/fp6/fp4 pair → f16x2, exactly; the upper field to the upper half."""
    elem = aname[:-2]
    width = 4 if elem == "e2m1" else 8
    codes = np.arange(1 << (4 if elem == "e2m1" else 6 if elem in ("e2m3", "e3m2") else 8), dtype=np.uint32)
    hi = codes
    lo = codes[::-1].copy()
    packed = (hi << np.uint32(width)) | lo
    reg = "b8" if width == 4 else "b16"
    got = elementwise(f"cvt.rn{'.relu' if relu else ''}.f16x2.{aname} %d, %a;",
                      [(reg, packed.astype(np.uint8 if width == 4 else np.uint16))], "b32")

    def field(c: np.ndarray) -> np.ndarray:
        vals = c.astype(np.uint8).view(FMT[elem][5]).astype(np.float64)
        if relu:
            vals = np.where(np.signbit(vals) & ~np.isnan(vals), 0.0, vals)
        return bits_of(vals, "f16").astype(np.uint32)
    np.testing.assert_array_equal(got, (field(hi) << np.uint32(16)) | field(lo))


def _ue8m0_ref(v: float, mode: str, satfinite: bool) -> int:
    if math.isnan(v):
        return 0xFF
    a = abs(v)
    if math.isinf(a):
        return 0xFE if satfinite else 0xFF
    if a == 0:
        return 0
    e = math.frexp(a)[1] - 1                      # 2**e <= a < 2**(e+1)
    if mode == "rp" and a != 2.0**e:
        e += 1
    code = max(e + 127, 0)
    return (0xFE if satfinite else 0xFF) if code > 254 else code


@pytest.mark.parametrize("satfinite", [False, True])
@pytest.mark.parametrize("mode", ["rz", "rp"])
def test_ue8m0(mode: str, satfinite: bool) -> None:
    """f32 and bf16 pairs → ue8m0 (power-of-two scale factors): rz keeps the
    exponent, rp rounds up inexact values; overflow and inf → NaN (0xFF), or
    254 with .satfinite. ue8m0x2 → bf16x2 is exact."""
    x = np.abs(f32_inputs(600))
    x = x[(x >= 2.0**-127) | (x == 0) | np.isnan(x)]
    a, b = x, RNG.permutation(x)
    sf = ".satfinite" if satfinite else ""
    got = elementwise(f"cvt.{mode}{sf}.ue8m0x2.f32 %d, %a, %b;", [("f32", a), ("f32", b)], "b16")
    want = [(_ue8m0_ref(float(p), mode, satfinite) << 8) | _ue8m0_ref(float(q), mode, satfinite)
            for p, q in zip(a, b)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint16))
    with np.errstate(invalid="ignore"):
        hb = np.stack([a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)], 1)
    packed = hb[:, 1].view(np.uint16).astype(np.uint32) | (hb[:, 0].view(np.uint16).astype(np.uint32) << 16)
    got = elementwise(f"cvt.{mode}{sf}.ue8m0x2.bf16x2 %d, %a;", [("b32", packed)], "b16")
    want = [(_ue8m0_ref(float(p), mode, satfinite) << 8) | _ue8m0_ref(float(q), mode, satfinite)
            for p, q in zip(hb[:, 0].astype(np.float64), hb[:, 1].astype(np.float64))]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint16))


def test_ue8m0_to_bf16x2() -> None:
    codes = np.arange(256, dtype=np.uint16)
    got = elementwise("cvt.rn.bf16x2.ue8m0x2 %d, %a;", [("b16", (codes << np.uint16(8)) | codes[::-1])], "b32")
    vals = [math.nan if c == 255 else 2.0 ** (int(c) - 127) for c in codes]
    field = bits_of(vals, "bf16").astype(np.uint32)
    np.testing.assert_array_equal(got, (field << np.uint32(16)) | field[::-1])


@pytest.mark.parametrize("dname", ["f16x2", "bf16x2"])
def test_stochastic_rounding(dname: str) -> None:
    """cvt.rs: round toward zero, then away if the random bits (13 per f16,
    16 per bf16; a takes the upper half of rbits) plus the discarded bits
    carry out. Checked on values normal in the destination, where the
    discarded bits are exactly the f32 mantissa's low bits."""
    x = (RNG.standard_normal(2000) * 100).astype(np.float32)
    a, b = x, RNG.permutation(x)
    w = 13 if dname == "f16x2" else 16
    r = RNG.integers(0, 2**32, len(x), dtype=np.uint64).astype(np.uint32) & np.uint32(((1 << w) - 1) * 0x10001)
    got = elementwise(f"cvt.rs.{dname}.f32 %d, %a, %b, %c;", [("f32", a), ("f32", b), ("b32", r)], "b32")
    elem = dname[:-2]

    def field(v: np.ndarray, rb: np.ndarray) -> np.ndarray:
        out = []
        for t, rr in zip(v, rb):
            trunc = ref_convert(float(t), elem, "rz")
            low = int(np.float32(t).view(np.uint32)) & ((1 << w) - 1)
            away = ref_convert(float(t), elem, "rp" if t > 0 else "rm")
            out.append(away if low + int(rr) >= 1 << w else trunc)
        return bits_of(out, elem).astype(np.uint32)
    mask = np.uint32((1 << w) - 1)
    want = (field(a, r >> np.uint32(16)) << np.uint32(16)) | field(b, r & mask)
    def normal(v: np.ndarray) -> np.ndarray:
        return (np.abs(v) >= 2.0**-14) & (np.abs(v) < 65504)
    keep = normal(a) & normal(b)
    np.testing.assert_array_equal(got[keep], want[keep])


# cvt.pack, cvta, mov ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["u16", "s16", "u8", "s8", "u4", "s4", "u2", "s2"])
def test_cvt_pack(dtype: str) -> None:
    """cvt.pack.sat: d = c << 2n | sat(a) << n | sat(b) (PTX ISA cvt.pack)."""
    vals = [0, 1, -1, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 7, 8, -8, -9, 2**31 - 1, -(2**31)]
    n = 300
    a = np.array(vals + list(RNG.integers(-(2**31), 2**31, n)), dtype=np.int32)
    b = RNG.permutation(a)
    c = RNG.integers(0, 2**32, len(a), dtype=np.uint64).astype(np.uint32)
    bits = int(dtype[1:])
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype[0] == "s" else (0, (1 << bits) - 1)
    m = (1 << bits) - 1
    if bits == 16:
        got = elementwise(f"cvt.pack.sat.{dtype}.s32 %d, %a, %b;", [("s32", a), ("s32", b)], "b32")
        want = [((min(max(int(x), lo), hi) & m) << 16) | (min(max(int(y), lo), hi) & m) for x, y in zip(a, b)]
    else:
        got = elementwise(f"cvt.pack.sat.{dtype}.s32.b32 %d, %a, %b, %c;", [("s32", a), ("s32", b), ("b32", c)],
                          "b32")
        want = [((int(z) << 2 * bits) | ((min(max(int(x), lo), hi) & m) << bits) | (min(max(int(y), lo), hi) & m))
                & 0xFFFF_FFFF for x, y, z in zip(a, b, c)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint32))


def _single(body: str, out: np.ndarray, decl: str = "", block: int = 1) -> np.ndarray:
    text = "\n".join([".version 8.7", ".target sm_90", ".address_size 64",
                      ".visible .entry k(.param .u64 po)", "{", " .reg .u64 %po, %rd<8>;", " .reg .u32 %r<8>;",
                      " .reg .b16 %h<4>;", " .reg .pred %p<3>;", decl, " ld.param.u64 %po, [po];", body, " ret;", "}"])
    launch(text, out, block=(block, 1, 1))
    return out


def test_cvta() -> None:
    """cvta adds the space's generic window base, cvta.to subtracts it;
    global addresses are generic (the emulator's windows, _memory.py)."""
    out = np.zeros(6, np.uint64)
    _single("""
 cvta.shared.u64 %rd1, sh; st.u64 [%po], %rd1;
 mov.u64 %rd2, 42; st.shared.u64 [sh+8], %rd2;
 add.u64 %rd3, %rd1, 8; ld.u64 %rd4, [%rd3]; st.u64 [%po+8], %rd4;
 cvta.to.shared.u64 %rd5, %rd1; st.u64 [%po+16], %rd5;
 cvta.to.global.u64 %rd6, %po; cvta.global.u64 %rd6, %rd6; st.u64 [%po+24], %rd6;
 cvta.local.u64 %rd7, loc; st.u64 [%po+32], %rd7;
 mov.u64 %rd7, sh2; st.u64 [%po+40], %rd7;
""", out, " .shared .align 8 .b8 sh[16]; .shared .align 8 .b8 sh2[8]; .local .align 8 .b8 loc[8];")
    assert out[0] == SHARED_WINDOW and out[1] == 42 and out[2] == 0
    assert out[3] == 1 << 36                     # the first global buffer's address
    assert out[4] == LOCAL_WINDOW and out[5] == 16


def test_mov_forms() -> None:
    """mov: pack (a in the low half), unpack, float literal bits in a b32,
    special registers, predicates, vector registers."""
    out = np.zeros(8, np.uint32)
    _single("""
 mov.b16 %h1, 0x1234; mov.b16 %h2, 0xABCD;
 mov.b32 %r1, {%h1, %h2}; st.u32 [%po], %r1;
 mov.b64 %rd1, 0x1122334455667788; mov.b64 {%r2, %r3}, %rd1; st.u32 [%po+4], %r2; st.u32 [%po+8], %r3;
 mov.b64 %rd2, {%r3, %r2}; mov.b32 {%h3, _}, %r1; cvt.u32.u16 %r4, %h3; st.u32 [%po+12], %r4;
 st.u64 [%po+16], %rd2;
 mov.b32 %r5, 0f3F800000; st.u32 [%po+24], %r5;
 mov.u32 %r7, 9; mov.pred %p1, 1; @%p1 mov.u32 %r7, %tid.x; st.u32 [%po+28], %r7;
""", out)
    assert out[0] == 0xABCD1234 and out[1] == 0x55667788 and out[2] == 0x11223344 and out[3] == 0x1234
    assert int(out[4]) | (int(out[5]) << 32) == 0x5566778811223344
    assert out[6] == 0x3F800000 and out[7] == 0


def test_mov_vector_register() -> None:
    out = np.zeros(2, np.uint32)
    _single("""
 mov.u32 %v1.x, 5; mov.u32 %v1.y, 6; mov.v2.u32 %v0, %v1; st.v2.u32 [%po], %v0;
""", out, " .reg .v2 .u32 %v<2>;")
    np.testing.assert_array_equal(out, [5, 6])


# GPU-checked ZLUDA vectors of this family ------------------------------------------------------
GOLDEN = [c for c in cases() if c["name"].startswith(("cvt", "mov", "rcp", "sqrt", "rsqrt"))
          or c["name"] in ("sin", "cos", "lg2", "ex2", "tanh", "b64tof64", "sign_extend",
                           "uint_to_fp_bf16", "cvta")]


@pytest.mark.skipif(not GOLDEN, reason="golden vectors not found at ../shared/golden/zluda")
@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c["name"])
def test_golden(case) -> None:
    """ZLUDA's per-instruction vectors for mov, cvt, cvt.pack, cvta and the
    approximate functions: every one runs on the emulator, bit for bit."""
    got, want = run(case)
    np.testing.assert_array_equal(got, want)

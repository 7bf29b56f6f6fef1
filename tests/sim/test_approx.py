"""Emulator semantics of rcp, sqrt, rsqrt, sin, cos, lg2, ex2, tanh (PTX ISA
"Floating-Point Instructions" and the half-precision ex2/tanh).

IEEE forms are checked bit for bit against exact rational references;
``.approx`` forms against float64 within the error bounds the PTX ISA
documents for each, and against its tables of special values."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from test_convert import RNG, bits_of, elementwise, f32_inputs, ref_round

MODES = ["rn", "rz", "rm", "rp"]
F32_MAX = float(np.finfo(np.float32).max)


def f64_inputs(n: int = 3000) -> np.ndarray:
    """Specials, random bit patterns, subnormals, and the extremes where
    1/x is subnormal or overflows."""
    specials = [0.0, -0.0, 1.0, -1.0, 3.0, 0.1, np.inf, -np.inf, np.nan, 2.0**-1074, -(2.0**-1074), 2.0**-1022,
                2.0**-1023, 2.0**-1024 * 3, 2.0**1023, 1.5 * 2.0**1022, -(2.0**1023) * 1.9, 2.0**1022 * 1.3, 4.0,
                0.25, 2.0**-1070 * 3]
    rand = RNG.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    mid = RNG.uniform(0.5, 8.0, n // 2) * RNG.choice([-1, 1], n // 2)
    return np.concatenate([specials, rand, mid])


def _flush(v: float) -> float:
    return math.copysign(0.0, v) if 0 < abs(v) < 2.0**-126 else v


def _expect(values, fn, fmt: str, mode: str, ftz: bool) -> np.ndarray:
    out = []
    for x in values:
        x = float(x)
        if ftz:
            x = _flush(x)
        r = fn(x, fmt, mode)
        if ftz and not math.isnan(r):
            r = _flush(r)
        out.append(r)
    return bits_of(out, fmt)


def ref_rcp(x: float, fmt: str, mode: str) -> float:
    """Correctly rounded 1/x (IEEE special cases)."""
    if math.isnan(x):
        return math.nan
    if x == 0:
        return math.copysign(math.inf, x)
    if math.isinf(x):
        return math.copysign(0.0, x)
    r = ref_round(1 / Fraction(x), fmt, mode)
    return math.copysign(0.0, x) if r == 0 else r


def ref_sqrt(x: float, fmt: str, mode: str) -> float:
    """Correctly rounded sqrt(x): an integer square root with a sticky half
    unit below the rounding precision stands in for the irrational root."""
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0 or math.isinf(x):
        return x
    f = Fraction(x)
    k = 2 * 1100                                   # x * 4**1100 is an integer
    n = f.numerator * 4**1100 // f.denominator
    assert Fraction(n, 4**1100) == f
    j = 120
    s = math.isqrt(n * 4**j)
    inexact = s * s != n * 4**j
    root = (Fraction(s) + (Fraction(1, 2) if inexact else 0)) / 2 ** (j + k // 2)
    return ref_round(root, fmt, mode)


@pytest.mark.parametrize("ftz", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_rcp_f32(mode: str, ftz: bool) -> None:
    """rcp.rnd.f32: IEEE 754 correctly rounded; .ftz flushes subnormal
    inputs and results."""
    x = f32_inputs(1500)
    got = elementwise(f"rcp.{mode}{'.ftz' if ftz else ''}.f32 %d, %a;", [("f32", x)], "f32")
    np.testing.assert_array_equal(got, _expect(x, ref_rcp, "f32", mode, ftz))


@pytest.mark.parametrize("mode", MODES)
def test_rcp_f64(mode: str) -> None:
    """rcp.rnd.f64: IEEE 754 correctly rounded, subnormal results and
    overflow included."""
    x = f64_inputs()
    got = elementwise(f"rcp.{mode}.f64 %d, %a;", [("f64", x)], "f64")
    want = _expect(x, ref_rcp, "f64", mode, False)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(x[i], hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


@pytest.mark.parametrize("ftz", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_sqrt_f32(mode: str, ftz: bool) -> None:
    """sqrt.rnd.f32: IEEE 754 correctly rounded; sqrt(-0) = -0; negative → NaN."""
    x = f32_inputs(1500)
    got = elementwise(f"sqrt.{mode}{'.ftz' if ftz else ''}.f32 %d, %a;", [("f32", x)], "f32")
    np.testing.assert_array_equal(got, _expect(x, ref_sqrt, "f32", mode, ftz))


@pytest.mark.parametrize("mode", MODES)
def test_sqrt_f64(mode: str) -> None:
    """sqrt.rnd.f64: IEEE 754 correctly rounded, subnormal inputs included."""
    x = np.abs(f64_inputs(1500))
    x = np.concatenate([x, -x[:50], np.square(RNG.uniform(1, 2**26, 500).round())])   # exact squares
    got = elementwise(f"sqrt.{mode}.f64 %d, %a;", [("f64", x)], "f64")
    np.testing.assert_array_equal(got, _expect(x, ref_sqrt, "f64", mode, False))


# .approx ---------------------------------------------------------------------------------
def _run_f32(ins: str, x: np.ndarray) -> np.ndarray:
    return elementwise(ins, [("f32", x.astype(np.float32))], "f32").view(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in f32 ulps at the reference value."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


# (instruction, float64 reference, input range, error kind, bound) -- PTX ISA notes of each.
APPROX = [
    ("sin", np.sin, (-2 * np.pi, 2 * np.pi), "abs", 2**-20.5),
    ("cos", np.cos, (-2 * np.pi, 2 * np.pi), "abs", 2**-20.5),
    ("sin", np.sin, (-100 * np.pi, 100 * np.pi), "abs", 2**-14.7),
    ("lg2", np.log2, (0.5, 2.0), "abs", 2**-22),
    ("lg2", np.log2, (2.0, 1e30), "rel", 2**-22),
    ("ex2", np.exp2, (-120.0, 120.0), "ulp", 2),
    ("rsqrt", lambda v: 1 / np.sqrt(v), (1e-30, 1e30), "rel", 2**-22.9),
    ("sqrt", np.sqrt, (1e-30, 1e30), "rel", 2**-23),
    ("rcp", lambda v: 1 / v, (-1e30, 1e30), "ulp", 1),
    ("tanh", np.tanh, (-10.0, 10.0), "rel", 2**-11),
]


# tanh.approx.f32 has no .ftz, so that pair is not generated.
@pytest.mark.parametrize("case, ftz", [(c, f) for c in APPROX for f in (False, True) if not (c[0] == "tanh" and f)],
                         ids=lambda c: f"{c[0]}{c[2]}" if isinstance(c, tuple) else str(c))
def test_approx_f32_error(case, ftz: bool) -> None:
    """Within the PTX ISA's documented error (the emulator is the float64
    result rounded to nearest, so hardware may differ in the last bits)."""
    op, fn, (lo, hi), kind, bound = case
    x = np.float32(RNG.uniform(lo, hi, 2000))
    got = _run_f32(f"{op}.approx{'.ftz' if ftz else ''}.f32 %d, %a;", x)
    want = fn(x.astype(np.float64))
    err = {"abs": lambda: np.abs(got - want), "rel": lambda: np.abs(got - want) / np.abs(want),
           "ulp": lambda: _ulps(got, want)}[kind]()
    assert err.max() <= bound


SPECIAL = {  # PTX ISA tables of results for special inputs: (input, result) pairs
    "sin": [(-np.inf, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.nan), (np.nan, np.nan)],
    "cos": [(-np.inf, np.nan), (-0.0, 1.0), (0.0, 1.0), (np.inf, np.nan), (np.nan, np.nan)],
    "lg2": [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -np.inf), (0.0, -np.inf), (np.inf, np.inf), (np.nan, np.nan)],
    "ex2": [(-np.inf, 0.0), (-0.0, 1.0), (0.0, 1.0), (np.inf, np.inf), (np.nan, np.nan)],
    "rsqrt": [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -np.inf), (0.0, np.inf), (np.inf, 0.0), (np.nan, np.nan)],
    "sqrt": [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.inf), (np.nan, np.nan)],
    "rcp": [(-np.inf, -0.0), (-0.0, -np.inf), (0.0, np.inf), (np.inf, 0.0), (np.nan, np.nan)],
    "tanh": [(-np.inf, -1.0), (-0.0, -0.0), (0.0, 0.0), (np.inf, 1.0), (np.nan, np.nan)],
}


@pytest.mark.parametrize("op", list(SPECIAL))
def test_approx_f32_special(op: str) -> None:
    x = np.array([i for i, _ in SPECIAL[op]], dtype=np.float32)
    got = _run_f32(f"{op}.approx.f32 %d, %a;", x)
    want = np.array([r for _, r in SPECIAL[op]], dtype=np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), bits_of(want, "f32"))   # NaN: canonical 0x7fffffff


def test_approx_ftz_subnormals() -> None:
    """.ftz flushes subnormal inputs (ex2(±tiny) = 1, lg2(tiny) = -inf) and
    results (ex2(-140) is subnormal without .ftz, +0 with it)."""
    x = np.float32([1e-40, -1e-40, -140.0])
    plain = _run_f32("ex2.approx.f32 %d, %a;", x)
    ftz = _run_f32("ex2.approx.ftz.f32 %d, %a;", x)
    assert plain[2] == np.float32(2.0**-140) and ftz[2] == 0
    np.testing.assert_array_equal(ftz[:2], [1, 1])
    lg = _run_f32("lg2.approx.ftz.f32 %d, %a;", np.float32([1e-40]))
    assert lg[0] == -np.inf
    assert _run_f32("lg2.approx.f32 %d, %a;", np.float32([2.0**-140]))[0] == -140


def _half_pairs(t: str, n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    dtype = ml_dtypes.bfloat16 if t.startswith("bf16") else np.float16
    v = RNG.uniform(lo, hi, (n, 2)).astype(dtype)
    bits = v.view(np.uint16).astype(np.uint32)
    return v.astype(np.float64), bits[:, 0] | (bits[:, 1] << np.uint32(16))


# (instruction, reference, range, error kind, bound): PTX ISA, half precision ex2 / tanh.
HALF = [("ex2.approx.f16x2", np.exp2, (-14.0, 15.0), "rel", 2**-9.9),
        ("ex2.approx.ftz.bf16x2", np.exp2, (-100.0, 100.0), "rel", 2**-7),
        ("tanh.approx.f16x2", np.tanh, (-5.0, 5.0), "abs", 2**-10.987),
        ("tanh.approx.bf16x2", np.tanh, (-5.0, 5.0), "abs", 2**-8)]


@pytest.mark.parametrize("case", HALF, ids=lambda c: c[0])
def test_approx_half_pairs(case) -> None:
    """Packed halves: each half computed independently (element 0 = low)."""
    ins, fn, (lo, hi), kind, bound = case
    x, packed = _half_pairs(ins.split(".")[-1], 1000, lo, hi)
    got = elementwise(f"{ins} %d, %a;", [("b32", packed)], "b32")
    dtype = ml_dtypes.bfloat16 if "bf16" in ins else np.float16
    halves = np.stack([got & np.uint32(0xFFFF), got >> np.uint32(16)], 1).astype(np.uint16).view(dtype)
    want = fn(x)
    err = np.abs(halves.astype(np.float64) - want)
    assert (err / np.abs(want) if kind == "rel" else err).max() <= bound


@pytest.mark.parametrize("ins", ["ex2.approx.f16", "tanh.approx.f16", "ex2.approx.ftz.bf16", "tanh.approx.bf16"])
def test_approx_half_scalar(ins: str) -> None:
    dtype = ml_dtypes.bfloat16 if ins.endswith("bf16") else np.float16
    x = np.array([-np.inf, -0.0, 0.0, np.inf, np.nan, 1.0, -2.0], dtype=dtype)
    got = elementwise(f"{ins} %d, %a;", [("b16", x.view(np.uint16))], "b16")
    fn = np.exp2 if ins.startswith("ex2") else np.tanh
    with np.errstate(invalid="ignore"):
        want = fn(x.astype(np.float64))
    np.testing.assert_array_equal(got, bits_of(want, "f16" if dtype == np.float16 else "bf16"))


@pytest.mark.parametrize("op", ["rcp", "rsqrt"])
def test_upper_word_f64(op: str) -> None:
    """rcp.approx.ftz.f64 / rsqrt.approx.ftz.f64: computed from the upper 32
    bits, the low 32 result bits zero; subnormal in → ±inf; NaN →
    0x7fffffff00000000 (PTX ISA)."""
    x = np.concatenate([RNG.uniform(1e-300, 1e300, 500), [1e-310, -1e-310, np.inf, np.nan, 4.0]])
    if op == "rcp":
        x[:250] = -x[:250]
    got = elementwise(f"{op}.approx.ftz.f64 %d, %a;", [("f64", x)], "f64")
    assert not (got & np.uint64(0xFFFF_FFFF)).any()
    val = got.view(np.float64)
    fn = (lambda v: 1 / v) if op == "rcp" else (lambda v: 1 / np.sqrt(v))
    want = fn(x[:500])
    assert (np.abs(val[:500] - want) / np.abs(want)).max() <= 2**-19
    assert val[500] == np.inf and val[501] == (-np.inf if op == "rcp" else -np.inf)
    assert val[502] == 0 and got[503] == 0x7FFF_FFFF_0000_0000
    assert val[504] == (0.25 if op == "rcp" else 0.5)


def test_rsqrt_f64() -> None:
    """rsqrt.approx.f64 (emulated in software on GPUs): near-exact here."""
    x = np.concatenate([RNG.uniform(1e-300, 1e300, 500), [0.25, 2.0**-1074]])
    got = elementwise("rsqrt.approx.f64 %d, %a;", [("f64", x)], "f64").view(np.float64)
    want = 1 / np.sqrt(x)
    assert (np.abs(got - want) / want).max() <= 2**-51
    assert got[500] == 2.0

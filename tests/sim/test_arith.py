"""Emulator semantics of the arithmetic family (jaxptx/sim/_sem_arith.py,
_sem_float.py, _float.py): integer arithmetic against Python integers,
floating point bit-exactly against exact rationals rounded by a brute-force
reference, in every rounding mode, with the edge cases (overflow, carries,
NaN, infinities, -0, subnormals with .ftz)."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim

from elementwise import HEAD, ew

BF16 = np.dtype(ml_dtypes.bfloat16)


def bits_of(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(f"u{x.dtype.itemsize}")


# --- a brute-force reference rounding of exact rationals ----------------------------------

def _step(x, dt, up: bool):
    """The neighbour of scalar ``x`` of dtype ``dt`` (via its bits)."""
    u = np.array([x], dt).view(f"u{dt.itemsize}")[0].item()
    w = dt.itemsize * 8
    sign = u >> (w - 1)
    mag = u & ((1 << (w - 1)) - 1)
    if mag == 0:
        u = 1 if up else (1 << (w - 1)) | 1
    elif (sign == 0) == up:
        u += 1
    else:
        u -= 1
    return np.array([u], f"u{dt.itemsize}").view(dt)[0]


def ref_round(q: Fraction, dt, mode: str):
    """``q`` rounded to ``dt`` in ``mode`` by walking neighbours (independent of
    the emulator's error-free transformations)."""
    dt = np.dtype(dt)
    info = ml_dtypes.finfo(dt)
    big = Fraction(float(info.max))
    if q == 0:
        return dt.type(0)
    if abs(q) > big:
        half = Fraction(float(info.max)) + Fraction(2) ** (int(math.log2(float(info.max))) - info.nmant) / 2
        neg = q < 0
        inf = (mode == "rn" and abs(q) >= half) or mode == ("rm" if neg else "rp")
        v = math.inf if inf else float(info.max)
        return dt.type(-v if neg else v)
    r = np.array([float(q)], np.float64).astype(np.float32).astype(dt)[0] if dt == BF16 \
        else dt.type(float(q))
    while np.isinf(float(r)) or Fraction(float(r)) > q:
        r = _step(r, dt, False)
    while not np.isinf(float(_step(r, dt, True))) and Fraction(float(_step(r, dt, True))) <= q:
        r = _step(r, dt, True)
    lo = r
    if Fraction(float(lo)) == q:
        return lo
    hi = _step(lo, dt, True)
    if mode == "rz":
        return lo if q > 0 else hi
    if mode == "rm":
        return lo
    if mode == "rp":
        return hi
    dlo, dhi = q - Fraction(float(lo)), Fraction(float(hi)) - q
    if dlo != dhi:
        return lo if dlo < dhi else hi
    return lo if np.array([lo], dt).view(f"u{dt.itemsize}")[0] % 2 == 0 else hi


CANON = {np.dtype(np.float32): 0x7FFFFFFF, np.dtype(np.float64): 0x7FFFFFFFFFFFFFFF,
         np.dtype(np.float16): 0x7FFF, BF16: 0x7FFF}


def ref_float(op: str, args: list, dt, mode: str, ftz: bool = False):
    """Reference result bits of one float operation on scalars."""
    dt = np.dtype(dt)
    tiny = float(ml_dtypes.finfo(dt).smallest_normal)
    vals = [float(v) for v in args]
    if ftz:
        vals = [math.copysign(0.0, v) if 0 < abs(v) < tiny else v for v in vals]
    with np.errstate(all="ignore"):
        w = [np.float64(v) for v in vals]
        rough = {"add": lambda: w[0] + w[1], "sub": lambda: w[0] - w[1], "mul": lambda: w[0] * w[1],
                 "div": lambda: w[0] / w[1], "fma": lambda: w[0] * w[1] + w[2]}[op]()
    if not all(math.isfinite(v) for v in vals) or (op == "div" and vals[1] == 0):
        r = dt.type(rough)
    else:
        q = [Fraction(v) for v in vals]
        exact = {"add": lambda: q[0] + q[1], "sub": lambda: q[0] - q[1], "mul": lambda: q[0] * q[1],
                 "div": lambda: q[0] / q[1], "fma": lambda: q[0] * q[1] + q[2]}[op]()
        r = ref_round(exact, dt, mode)
        if exact == 0:       # IEEE signed-zero rules
            if op in ("mul", "div"):
                neg = (math.copysign(1, vals[0]) * math.copysign(1, vals[1])) < 0
            else:
                u = vals[0] * vals[1] if op == "fma" else vals[0]
                v = vals[2] if op == "fma" else (-vals[1] if op == "sub" else vals[1])
                if u == 0 and v == 0 and math.copysign(1, u) == math.copysign(1, v):
                    neg = math.copysign(1, u) < 0
                else:
                    neg = mode == "rm"
            r = dt.type(-0.0 if neg else 0.0)
    if ftz and 0 < abs(float(r)) < tiny:
        r = dt.type(math.copysign(0.0, float(r)))
    b = int(np.array([r], dt).view(f"u{dt.itemsize}")[0])
    return CANON[dt] if math.isnan(float(r)) else b


def special_values(dt) -> np.ndarray:
    info = ml_dtypes.finfo(dt)
    sub = float(info.smallest_subnormal)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -7.25, math.inf, -math.inf, math.nan, float(info.max),
            -float(info.max), float(info.smallest_normal), sub, -sub, 3 * sub, 1 + float(info.eps),
            1 - float(info.epsneg), float(info.max) / 2, 2.0 ** 10, 1.0 / 3.0]
    return np.array(vals, dtype=np.float64).astype(dt)


def random_values(dt, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    normal = (rng.standard_normal(n) * 2.0 ** rng.integers(-8, 8, n)).astype(dt)
    ubits = rng.integers(0, 2 ** (np.dtype(dt).itemsize * 8), n, dtype=np.uint64)
    raw = ubits.astype(f"u{np.dtype(dt).itemsize}").view(dt)
    return np.where(rng.random(n) < 0.7, normal, raw).astype(dt)


def operands(dt, nargs: int, seed: int = 0) -> list[np.ndarray]:
    """Every pair of special values (third operand random) plus random ones."""
    sp = special_values(dt)
    grid = np.array(np.meshgrid(*[np.arange(len(sp))] * min(nargs, 2))).reshape(min(nargs, 2), -1)
    cols = [sp[g] for g in grid]
    r = [random_values(dt, 600, seed + i) for i in range(nargs)]
    cols = [np.concatenate([c, x]) for c, x in zip(cols, r)]
    if nargs == 3:
        cols.append(np.concatenate([random_values(dt, len(cols[0]) - 600, seed + 9), r[2]]))
    return cols


def check_float(ins: str, op: str, dt, mode: str, ftz: bool = False, nargs: int = 2, seed: int = 0) -> None:
    args = operands(dt, nargs, seed)
    got = bits_of(ew(ins, dt, *args))
    want = np.array([ref_float(op, [a[i] for a in args], dt, mode, ftz) for i in range(len(args[0]))],
                    dtype=got.dtype)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(ins, [a[i] for a in args], hex(got[i]), hex(want[i])) for i in bad[:5]]


# --- floating point ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "fma"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_float_ops_in_every_rounding_mode(op: str, mode: str, dt) -> None:
    t = "f32" if dt == np.float32 else "f64"
    check_float(f"{op}.{mode}.{t}", op, dt, mode, nargs=3 if op == "fma" else 2)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("op", ["add", "mul", "div", "fma"])
def test_f32_ftz_flushes_inputs_and_results(op: str, mode: str) -> None:
    check_float(f"{op}.{mode}.ftz.f32", op, np.float32, mode, ftz=True, nargs=3 if op == "fma" else 2, seed=5)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma"])
@pytest.mark.parametrize("t,dt", [("f16", np.float16), ("bf16", BF16)])
def test_half_ops_round_to_nearest(op: str, t: str, dt) -> None:
    check_float(f"{op}.rn.{t}", op, dt, "rn", nargs=3 if op == "fma" else 2, seed=3)


def test_f16_ftz() -> None:
    check_float("mul.ftz.f16", "mul", np.float16, "rn", ftz=True, seed=11)
    check_float("fma.rn.ftz.f16", "fma", np.float16, "rn", ftz=True, nargs=3, seed=12)


def test_mad_f32_is_fused() -> None:
    check_float("mad.rn.f32", "fma", np.float32, "rn", nargs=3, seed=21)


def test_no_rounding_modifier_means_nearest() -> None:
    check_float("add.f32", "add", np.float32, "rn", seed=7)
    check_float("mul.f64", "mul", np.float64, "rn", seed=8)


def test_fma_double_rounding_traps() -> None:
    # a*a lies exactly on a float32 midpoint; c nudges it by far less than an
    # ulp, so rounding a*a + c to float64 first would land on the tie
    e = 2.0 ** -12
    a = np.array([1 + e, 1 + e, 1 + e, -(1 + e), 1 + 2 * e], np.float32)
    b = np.array([1 + e, 1 + e, 1 + e, 1 + e, 1 + 2 * e], np.float32)
    c = np.array([-(2.0 ** -60), 2.0 ** -60, 0.0, 2.0 ** -60, -(2.0 ** -70)], np.float32)
    for t, dt in (("f32", np.float32), ("f16", np.float16), ("bf16", BF16)):
        args = [x.astype(dt) for x in (a, b, c)]
        got = bits_of(ew(f"fma.rn.{t}", dt, *args))
        want = [ref_float("fma", [x[i] for x in args], dt, "rn") for i in range(len(a))]
        np.testing.assert_array_equal(got, np.array(want, got.dtype), err_msg=t)


def test_f64_extreme_ranges_take_the_exact_path() -> None:
    big, small = 2.0 ** 1000, 2.0 ** -1000
    a = np.array([big, small, 2.0 ** -537, 3.0 * 2.0 ** 511, 1.0 + 2.0 ** -52, 2.0 ** -1070])
    b = np.array([2.0 ** 30, small * 3, 2.0 ** -537 * 1.5, 2.0 ** 511, 1.0 - 2.0 ** -53, 0.75])
    c = np.array([-1.0, 2.0 ** -1074, -(2.0 ** -1074), -1.5 * 2.0 ** 1023, -1.0, 2.0 ** -1074])
    for mode in ("rn", "rz", "rm", "rp"):
        for op, args in (("mul", (a, b)), ("fma", (a, b, c)), ("div", (a, b))):
            got = bits_of(ew(f"{op}.{mode}.f64", np.float64, *args))
            want = [ref_float(op, [x[i] for x in args], np.float64, mode) for i in range(len(a))]
            np.testing.assert_array_equal(got, np.array(want, np.uint64), err_msg=f"{op}.{mode}")


def test_exact_zero_sums_are_negative_only_when_rounding_down() -> None:
    a = np.array([1.0, 0.0, -0.0, 0.0, -0.0], np.float32)
    b = np.array([-1.0, 0.0, -0.0, -0.0, 0.0], np.float32)
    for mode, want in (("rn", [0, 0, 1, 0, 0]), ("rm", [1, 0, 1, 1, 1]), ("rz", [0, 0, 1, 0, 0])):
        got = ew(f"add.{mode}.f32", np.float32, a, b)
        np.testing.assert_array_equal(np.signbit(got), np.array(want, bool), err_msg=mode)


def test_overflow_saturates_to_max_when_rounding_toward_zero() -> None:
    m = np.float32(np.finfo(np.float32).max)
    a = np.array([m, -m], np.float32)
    np.testing.assert_array_equal(ew("add.rz.f32", np.float32, a, a), [m, -m])
    np.testing.assert_array_equal(ew("add.rn.f32", np.float32, a, a), [np.inf, -np.inf])
    np.testing.assert_array_equal(ew("add.rp.f32", np.float32, a, a), [np.inf, -m])
    np.testing.assert_array_equal(ew("add.rm.f32", np.float32, a, a), [m, -np.inf])


def test_sat_clamps_to_unit_interval_and_nan_to_zero() -> None:
    a = np.array([2.0, -3.0, 0.25, np.nan, -0.0, np.inf], np.float32)
    got = ew("add.sat.f32", np.float32, a, np.zeros(6, np.float32))
    np.testing.assert_array_equal(bits_of(got), bits_of(np.array([1, 0, 0.25, 0, 0, 1], np.float32)))
    h = np.array([2.0, -3.0, 0.5, np.nan], np.float16)
    got = ew("fma.rn.sat.f16", np.float16, h, np.ones(4, np.float16), np.zeros(4, np.float16))
    np.testing.assert_array_equal(bits_of(got), bits_of(np.array([1, 0, 0.5, 0], np.float16)))


def test_nan_results_are_canonical() -> None:
    a = np.array([np.inf, 0.0, np.nan], np.float32)
    b = np.array([-np.inf, np.inf, 1.0], np.float32)
    got = bits_of(ew("add.rn.f32", np.float32, a, b))
    assert got[0] == got[2] == 0x7FFFFFFF
    got = bits_of(ew("mul.rn.f32", np.float32, a, b))
    assert got[1] == 0x7FFFFFFF


def pack(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.stack([lo, hi], axis=-1).copy().view(np.uint32).reshape(len(lo))


@pytest.mark.parametrize("t,dt", [("f16x2", np.float16), ("bf16x2", BF16)])
def test_packed_half_ops_work_per_half(t: str, dt) -> None:
    a, b, c = (random_values(dt, 200, s) for s in (1, 2, 3))
    a2, b2, c2 = (random_values(dt, 200, s) for s in (4, 5, 6))
    got = ew(f"fma.rn.{t}", np.uint32, pack(a, a2), pack(b, b2), pack(c, c2))
    lo = [ref_float("fma", [a[i], b[i], c[i]], dt, "rn") for i in range(200)]
    hi = [ref_float("fma", [a2[i], b2[i], c2[i]], dt, "rn") for i in range(200)]
    np.testing.assert_array_equal(got, np.array(lo, np.uint32) | (np.array(hi, np.uint32) << 16))
    got = ew(f"add.rn.{t}", np.uint32, pack(a, a2), pack(b, b2))
    lo = [ref_float("add", [a[i], b[i]], dt, "rn") for i in range(200)]
    np.testing.assert_array_equal(got & 0xFFFF, np.array(lo, np.uint32))


def test_fma_relu_clamps_negatives_and_keeps_nan() -> None:
    a = np.array([-2.0, 3.0, np.nan, -0.0], np.float16)
    one = np.ones(4, np.float16)
    got = bits_of(ew("fma.rn.relu.f16", np.float16, a, one, np.zeros(4, np.float16)))
    np.testing.assert_array_equal(got, [0, 0x4200, 0x7FFF, 0])
    b = np.array([-2.0, 3.0, -0.5, 1.5], BF16)
    got = bits_of(ew("fma.rn.relu.bf16", BF16, b, np.ones(4, BF16), np.zeros(4, BF16)))
    np.testing.assert_array_equal(got, bits_of(np.array([0, 3.0, 0, 1.5], BF16)))


def test_div_approx_and_full() -> None:
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(300) * 100).astype(np.float32)
    b = (rng.standard_normal(300) * 10).astype(np.float32)
    exact = a.astype(np.float64) / b.astype(np.float64)
    for ins in ("div.approx.f32", "div.full.f32", "div.approx.ftz.f32"):
        got = ew(ins, np.float32, a, b).astype(np.float64)
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got - exact) <= 2 * ulp), ins     # PTX: max 2 ulp
    # PTX: for 2**126 < |b| < 2**128, div.approx gives 0 (NaN for infinite a)
    got = ew("div.approx.f32", np.float32, np.array([1.0, np.inf], np.float32),
             np.array([2.0 ** 127, 2.0 ** 127], np.float32))
    assert got[0] == 0 and np.isnan(got[1])


def test_float_min_max() -> None:
    nan = np.float32(np.nan)
    a = np.array([1.0, nan, nan, 0.0, -0.0, -3.0, 1e-45, 2.0], np.float32)
    b = np.array([2.0, 5.0, nan, -0.0, 0.0, -4.0, -1.0, -5.0], np.float32)
    np.testing.assert_array_equal(bits_of(ew("min.f32", np.float32, a, b)),
                                  bits_of(np.array([1, 5, 0, -0.0, -0.0, -4, -1, -5], np.float32))
                                  | np.array([0, 0, 0x7FFFFFFF, 0, 0, 0, 0, 0], np.uint32))
    np.testing.assert_array_equal(bits_of(ew("max.f32", np.float32, a, b))[[0, 1, 3, 4, 5, 7]],
                                  bits_of(np.array([2, 5, 0.0, 0.0, -3, 2], np.float32)))
    got = bits_of(ew("max.NaN.f32", np.float32, a, b))
    assert got[1] == got[2] == 0x7FFFFFFF
    got = ew("min.ftz.f32", np.float32, a, b)
    assert got[6] == -1.0
    got = ew("max.ftz.f32", np.float32, np.array([1e-45], np.float32), np.array([-0.0], np.float32))
    assert bits_of(got)[0] == 0   # the flushed +0 beats -0
    # xorsign.abs: the larger magnitude, with the XOR of the signs
    got = ew("max.xorsign.abs.f32", np.float32, np.array([-3.0, 2.0, -1.0], np.float32),
             np.array([2.0, -5.0, -0.5], np.float32))
    np.testing.assert_array_equal(got, [-3.0, -5.0, 1.0])
    got = ew("min.xorsign.abs.f32", np.float32, np.array([-3.0, 2.0], np.float32), np.array([2.0, -5.0], np.float32))
    np.testing.assert_array_equal(got, [-2.0, -2.0])
    h = ew("max.f16x2", np.uint32, pack(np.array([1, np.nan], np.float16), np.array([-2, 3], np.float16)),
           pack(np.array([2, 4], np.float16), np.array([-1, np.nan], np.float16)))
    np.testing.assert_array_equal(h.view(np.float16).reshape(2, 2), [[2, -1], [4, 3]])
    d = ew("min.f64", np.float64, np.array([1.0, np.nan]), np.array([-1.0, 2.0]))
    np.testing.assert_array_equal(d, [-1.0, 2.0])


def test_abs_neg_copysign_on_floats() -> None:
    a = np.array([1.5, -2.0, -0.0, np.inf, 1e-45], np.float32)
    np.testing.assert_array_equal(bits_of(ew("abs.f32", np.float32, a)), bits_of(np.abs(a)))
    np.testing.assert_array_equal(bits_of(ew("neg.f32", np.float32, a)), bits_of(-a))
    np.testing.assert_array_equal(bits_of(ew("abs.ftz.f32", np.float32, a))[4], 0)
    assert bits_of(ew("neg.ftz.f32", np.float32, a))[4] == 0x80000000
    d = np.array([1.5, -2.0, -0.0])
    np.testing.assert_array_equal(bits_of(ew("neg.f64", np.float64, d)), bits_of(-d))
    h = np.array([1.5, -2.0], np.float16)
    np.testing.assert_array_equal(ew("abs.f16", np.float16, h), [1.5, 2.0])
    np.testing.assert_array_equal(ew("neg.bf16", BF16, h.astype(BF16)).astype(np.float32), [-1.5, 2.0])
    got = ew("neg.f16x2", np.uint32, pack(h, -h)).view(np.float16).reshape(2, 2)
    np.testing.assert_array_equal(got, [[-1.5, 1.5], [2.0, -2.0]])
    s = np.array([-1.0, 1.0, -0.0, 2.0], np.float32)
    m = np.array([3.0, -3.0, 5.0, np.inf], np.float32)
    np.testing.assert_array_equal(ew("copysign.f32", np.float32, s, m), np.copysign(m, s))
    np.testing.assert_array_equal(ew("copysign.f64", np.float64, s.astype(np.float64), m.astype(np.float64)),
                                  np.copysign(m, s))


# --- integers ---------------------------------------------------------------------------------

INT_TYPES = {"u16": np.uint16, "s16": np.int16, "u32": np.uint32, "s32": np.int32, "u64": np.uint64,
             "s64": np.int64}


def ints(t: str, n: int = 300, seed: int = 0) -> np.ndarray:
    dt = np.dtype(INT_TYPES[t])
    rng = np.random.default_rng(seed)
    w = dt.itemsize * 8
    edge = [0, 1, 2, (1 << w) - 1, 1 << (w - 1), (1 << (w - 1)) - 1, (1 << (w - 1)) + 1, 3, 1 << (w // 2)]
    raw = rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    vals = np.concatenate([np.array(edge, dtype=np.uint64), raw]).astype(f"u{dt.itemsize}")
    return vals.view(dt)


def wrap(v: int, t: str) -> int:
    w = int(t[1:])
    v &= (1 << w) - 1
    return v - (1 << w) if t[0] == "s" and v >> (w - 1) else v


def check_int(ins: str, t_out: str, fn, *args: np.ndarray) -> None:
    got = ew(ins, INT_TYPES[t_out], *args)
    want = np.array([wrap(fn(*[int(a[i]) for a in args]), t_out) for i in range(len(args[0]))],
                    dtype=INT_TYPES[t_out])
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(ins, [int(a[i]) for a in args], int(got[i]), int(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("t", list(INT_TYPES))
def test_integer_add_sub_mul_mad(t: str) -> None:
    a, b, c = ints(t, seed=1), ints(t, seed=2)[::-1].copy(), ints(t, seed=3)
    w = int(t[1:])
    check_int(f"add.{t}", t, lambda x, y: x + y, a, b)
    check_int(f"sub.{t}", t, lambda x, y: x - y, a, b)
    check_int(f"mul.lo.{t}", t, lambda x, y: x * y, a, b)
    check_int(f"mul.hi.{t}", t, lambda x, y: (x * y) >> w, a, b)
    check_int(f"mad.lo.{t}", t, lambda x, y, z: x * y + z, a, b, c)
    check_int(f"mad.hi.{t}", t, lambda x, y, z: ((x * y) >> w) + z, a, b, c)
    check_int(f"sad.{t}", t, lambda x, y, z: z + abs(x - y), a, b, c)
    check_int(f"min.{t}", t, min, a, b)
    check_int(f"max.{t}", t, max, a, b)
    check_int(f"div.{t}", t, lambda x, y: -1 if y == 0 else
              (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1), a, b)
    check_int(f"rem.{t}", t, lambda x, y: x if y == 0 else
              (abs(x) % abs(y)) * (1 if x >= 0 else -1), a, b)
    if w < 64:
        wide = t[0] + str(2 * w)
        check_int(f"mul.wide.{t}", wide, lambda x, y: x * y, a, b)
        check_int(f"mad.wide.{t}", wide, lambda x, y, z: x * y + z, a, b, ints(wide, seed=4)[:len(a)])
    if t[0] == "s":
        check_int(f"abs.{t}", t, abs, a)
        check_int(f"neg.{t}", t, lambda x: -x, a)


def test_saturating_s32() -> None:
    a, b, c = ints("s32", seed=5), ints("s32", seed=6)[::-1].copy(), ints("s32", seed=7)
    sat = lambda v: max(-2**31, min(2**31 - 1, v))    # noqa: E731
    check_int("add.sat.s32", "s32", lambda x, y: sat(x + y), a, b)
    check_int("sub.sat.s32", "s32", lambda x, y: sat(x - y), a, b)
    check_int("mad.hi.sat.s32", "s32", lambda x, y, z: sat(((x * y) >> 32) + z), a, b, c)


def test_mul24_mad24() -> None:
    a, b, c = ints("u32", seed=8), ints("u32", seed=9)[::-1].copy(), ints("u32", seed=10)

    def s24(v: int) -> int:
        v &= 0xFFFFFF
        return v - (1 << 24) if v >> 23 else v
    check_int("mul24.lo.u32", "u32", lambda x, y: (x & 0xFFFFFF) * (y & 0xFFFFFF), a, b)
    check_int("mul24.hi.u32", "u32", lambda x, y: ((x & 0xFFFFFF) * (y & 0xFFFFFF)) >> 16, a, b)
    sa, sb = a.view(np.int32), b.view(np.int32)
    check_int("mul24.lo.s32", "s32", lambda x, y: s24(x) * s24(y), sa, sb)
    check_int("mul24.hi.s32", "s32", lambda x, y: (s24(x) * s24(y)) >> 16, sa, sb)
    check_int("mad24.lo.u32", "u32", lambda x, y, z: (x & 0xFFFFFF) * (y & 0xFFFFFF) + z, a, b, c)
    check_int("mad24.hi.s32", "s32", lambda x, y, z: ((s24(x) * s24(y)) >> 16) + z, sa, sb, c.view(np.int32))


def test_packed_integer_halves_and_relu() -> None:
    a = np.array([0x7FFF0001, 0x8000FFFF, 0x00050003], np.uint32)
    b = np.array([0x00010002, 0xFFFF0001, 0x0007FFFE], np.uint32)
    np.testing.assert_array_equal(ew("add.u16x2", np.uint32, a, b), [0x80000003, 0x7FFF0000, 0x000C0001])
    got = ew("min.s16x2", np.uint32, a, b)
    np.testing.assert_array_equal(got, [0x00010001, 0x8000FFFF, 0x0005FFFE])
    got = ew("max.relu.s16x2", np.uint32, np.array([0x8000FFFE], np.uint32), np.array([0xFFF00003], np.uint32))
    np.testing.assert_array_equal(got, [0x00000003])
    np.testing.assert_array_equal(ew("max.u16x2", np.uint32, a, b), [0x7FFF0002, 0xFFFFFFFF, 0x0007FFFE])
    got = ew("min.relu.s32", np.int32, np.array([-5, 7], np.int32), np.array([3, 9], np.int32))
    np.testing.assert_array_equal(got, [0, 7])


def test_carry_chains_128_bit_add_sub_and_mad() -> None:
    rng = np.random.default_rng(12)
    x = [int(v) for v in rng.integers(0, 2**63, 64, dtype=np.uint64)] + [2**64 - 1, 0]
    y = [int(v) * 3 for v in rng.integers(0, 2**62, 64, dtype=np.uint64)] + [1, 1]
    n = len(x)
    lo = lambda v: np.array([u & (2**64 - 1) for u in v], np.uint64)  # noqa: E731
    a = np.stack([lo(x), lo([u << 3 for u in x])], axis=1).reshape(-1)
    b = np.stack([lo(y), lo([u * 5 for u in y])], axis=1).reshape(-1)
    body = """
    .reg .b64 %a<2>; .reg .b64 %b<2>; .reg .b64 %s<2>; .reg .b64 %q<2>; .reg .b32 %c;
    ld.param.u64 %rd1, [p0]; ld.param.u64 %rd2, [p1]; ld.param.u64 %rd3, [out];
    mul.wide.u32 %rd4, %t0, 16;
    add.s64 %rd1, %rd1, %rd4; add.s64 %rd2, %rd2, %rd4; add.s64 %rd3, %rd3, %rd4;
    ld.global.v2.u64 {%a0, %a1}, [%rd1]; ld.global.v2.u64 {%b0, %b1}, [%rd2];
    add.cc.u64 %s0, %a0, %b0; addc.u64 %s1, %a1, %b1;
    sub.cc.u64 %q0, %a0, %b0; subc.u64 %q1, %a1, %b1;
    st.global.v2.u64 [%rd3], {%s0, %s1};
    ld.param.u64 %rd5, [p2]; add.s64 %rd5, %rd5, %rd4;
    st.global.v2.u64 [%rd5], {%q0, %q1};
    """
    out = np.zeros(2 * n, np.uint64)
    dif = np.zeros(2 * n, np.uint64)
    text = HEAD + (".visible .entry k(.param .u64 out, .param .u64 p0, .param .u64 p1, .param .u64 p2)\n{\n"
                   "    .reg .b64 %rd<8>; .reg .b32 %t<2>;\n    mov.u32 %t0, %tid.x;\n" + body + "    ret;\n}\n")
    sim.launch(text, out, a, b, dif, block=(n, 1, 1))
    for i in range(n):
        A = int(a[2 * i]) | int(a[2 * i + 1]) << 64
        B = int(b[2 * i]) | int(b[2 * i + 1]) << 64
        assert int(out[2 * i]) | int(out[2 * i + 1]) << 64 == (A + B) % 2**128
        assert int(dif[2 * i]) | int(dif[2 * i + 1]) << 64 == (A - B) % 2**128


def test_carry_flag_reads_and_madc() -> None:
    # addc with 0, 0 reads CC.CF; sub.cc stores the carry of a + ~b + 1 (NOT borrow)
    a = np.array([0xFFFFFFFF, 5, 3, 0x80000000], np.uint32)
    b = np.array([1, 3, 5, 0x80000000], np.uint32)
    wide = a.astype(np.uint64) + b
    add_cf = ew("addc.u32", np.uint32, a, b, pre="    add.cc.u32 %t3, %x0, %x1;")
    np.testing.assert_array_equal(add_cf, (wide + (wide >> np.uint64(32))) % 2**32)
    cf = ew("addc.u32", np.uint32, a, b, pre="    add.cc.u32 %t3, %x0, %x1; mov.u32 %x0, 0; mov.u32 %x1, 0;")
    np.testing.assert_array_equal(cf, [1, 0, 0, 1])
    cf = ew("addc.u32", np.uint32, a, b, pre="    sub.cc.u32 %t3, %x0, %x1; mov.u32 %x0, 0; mov.u32 %x1, 0;")
    np.testing.assert_array_equal(cf, [1, 1, 0, 1])
    # 64-bit product of 32-bit limbs: mad.lo.cc + madc.hi
    x = np.array([0xFFFFFFFF, 0x12345678, 7], np.uint32)
    y = np.array([0xFFFFFFFF, 0x9ABCDEF0, 9], np.uint32)
    z = np.array([0xFFFFFFFF, 0xFFFFFFFF, 1], np.uint32)
    hi = ew("madc.hi.u32", np.uint32, x, y, z, pre="    mad.lo.cc.u32 %t3, %x0, %x1, %x2; mov.u32 %x2, 0;")
    want = [((int(p) * int(q) + int(r)) >> 32) & 0xFFFFFFFF for p, q, r in zip(x, y, z)]
    np.testing.assert_array_equal(hi, want)
    s = ew("addc.cc.s32", np.int32, np.array([-1], np.int32), np.array([0], np.int32),
           pre="    add.cc.u32 %t3, 0xFFFFFFFF, 1;")
    assert s[0] == 0


def test_dp4a_dp2a() -> None:
    rng = np.random.default_rng(13)
    a, b, c = (rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32) for _ in range(3))

    def parts(v: int, width: int, signed: bool) -> list[int]:
        out = [(v >> (width * i)) & ((1 << width) - 1) for i in range(32 // width)]
        return [p - (1 << width) if signed and p >> (width - 1) else p for p in out]
    for at in ("u32", "s32"):
        for bt in ("u32", "s32"):
            sa, sb = at == "s32", bt == "s32"
            check_int(f"dp4a.{at}.{bt}", "u32", lambda x, y, z: z + sum(
                p * q for p, q in zip(parts(x, 8, sa), parts(y, 8, sb))), a, b, c)
            for mode, k in (("lo", 0), ("hi", 2)):
                check_int(f"dp2a.{mode}.{at}.{bt}", "u32", lambda x, y, z: z + sum(
                    p * q for p, q in zip(parts(x, 16, sa), parts(y, 8, sb)[k:k + 2])), a, b, c)

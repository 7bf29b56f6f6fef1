"""``cvt.rs.satfinite{.relu}.<f8|f6|f4>x4.f32 d, {a, b, e, f}, rbits``:
four f32 values to packed fp8/fp6/fp4 with stochastic rounding (sm_100a),
against a numpy reference built from each format's value table.

PTX ISA, cvt: ``a`` lands in the most significant field of ``d`` (8-bit
fields, fp6 values with two zero MSBs; 4-bit fields for ``e2m1x4`` in a
``.b16``); ``.rs`` rounds toward zero and then away from zero when the
random bits added to the discarded bits carry out. The ISA gives ``a, b``
the upper 16 random bits and ``e, f`` the lower 16 (``e2m1x4``: the upper
and lower byte of each half) without saying how a pair splits them; the
emulator gives each value 8 bits, the first of a pair the more significant
byte (``jaxptx.sim.semantics.convert._cvt_rs``). Tests marked "any split"
hold whatever the split is (rbits all zero, or equal bytes with values
whose discarded bits lie in the top 8); the others pin the emulator's.
Kernels are assembled by ptxas for sm_100a.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas

HEAD = ".version 8.8\n.target sm_100a\n.address_size 64\n"
DTYPES = {"e4m3x4": ml_dtypes.float8_e4m3fn, "e5m2x4": ml_dtypes.float8_e5m2, "e2m3x4": ml_dtypes.float6_e2m3fn,
          "e3m2x4": ml_dtypes.float6_e3m2fn, "e2m1x4": ml_dtypes.float4_e2m1fn}
# The emulator's random byte of operand a, b, e, f (its shift in rbits).
SHIFTS = {name: (24, 16, 8, 0) for name in DTYPES}
SHIFTS["e2m1x4"] = (24, 8, 16, 0)
RNG = np.random.default_rng(77)


def _kernel(name: str, relu: bool) -> str:
    dreg = "b16" if name == "e2m1x4" else "b32"
    width = 2 if dreg == "b16" else 4
    text = HEAD + f""".visible .entry k(.param .u64 out, .param .u64 x, .param .u64 r)
{{
    .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .{dreg} %d;
    mov.u32 %r1, %tid.x;
    ld.param.u64 %rd1, [x];
    mul.wide.u32 %rd2, %r1, 16;
    add.u64 %rd1, %rd1, %rd2;
    ld.global.v4.f32 {{%f0, %f1, %f2, %f3}}, [%rd1];
    ld.param.u64 %rd3, [r];
    mul.wide.u32 %rd4, %r1, 4;
    add.u64 %rd3, %rd3, %rd4;
    ld.global.b32 %r2, [%rd3];
    cvt.rs{'.relu' if relu else ''}.satfinite.{name}.f32 %d, {{%f0, %f1, %f2, %f3}}, %r2;
    ld.param.u64 %rd5, [out];
    mul.wide.u32 %rd6, %r1, {width};
    add.u64 %rd5, %rd5, %rd6;
    st.global.{dreg} [%rd5], %d;
    ret;
}}
"""
    ptxas(text, "sm_100a")
    return text


def run(name: str, x: np.ndarray, rbits: np.ndarray, relu: bool = False) -> np.ndarray:
    """``x`` (n, 4) f32 values ``{a, b, e, f}``, ``rbits`` (n,) → d (n,)."""
    n = len(x)
    out = np.zeros(n, np.uint16 if name == "e2m1x4" else np.uint32)
    sim.launch(_kernel(name, relu), out, np.ascontiguousarray(x, np.float32), rbits.astype(np.uint32),
               block=(n, 1, 1))
    return out


def _table(name: str) -> np.ndarray:
    """Every finite non-negative value of the format, ascending."""
    bits = 4 if name == "e2m1x4" else 6 if name in ("e2m3x4", "e3m2x4") else 8
    v = np.arange(1 << bits, dtype=np.uint8).view(DTYPES[name]).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def reference(name: str, x: np.ndarray, rbyte: np.ndarray, relu: bool = False) -> np.ndarray:
    """Stochastic rounding with 8 random bits: toward zero, then away when
    the top 8 discarded bits plus ``rbyte`` reach 256; beyond the largest
    finite value ``.satfinite`` gives ±max. Returns the element bits."""
    table = _table(name)
    ax = np.abs(x.astype(np.float64))
    i = np.clip(np.searchsorted(table, ax, side="right") - 1, 0, len(table) - 1)
    low = table[i]
    high = np.where(i + 1 < len(table), table[np.minimum(i + 1, len(table) - 1)], table[-1])
    gap = high - low
    top = np.floor(np.where(gap > 0, (ax - low) / np.where(gap > 0, gap, 1), 0) * 256)
    mag = np.where(top + rbyte >= 256, high, low)
    mag = np.where(ax >= table[-1], table[-1], mag)
    val = np.copysign(mag, x)
    if relu:
        val = np.where(x < 0, 0.0, val)
    raw = val.astype(DTYPES[name]).view(np.uint8).astype(np.uint32)
    mask = 0xF if name == "e2m1x4" else 0x3F if name in ("e2m3x4", "e3m2x4") else 0xFF
    return raw & mask


def pack(name: str, fields: list[np.ndarray]) -> np.ndarray:
    w = 4 if name == "e2m1x4" else 8
    return sum(f.astype(np.uint32) << np.uint32(w * (3 - k)) for k, f in enumerate(fields))


def _inputs(name: str, n: int) -> np.ndarray:
    top = _table(name)[-1]
    x = RNG.uniform(-1.2 * top, 1.2 * top, (n, 4))
    x[:, 3] = RNG.uniform(-2, 2, n) * _table(name)[1]          # near zero: subnormal results
    return x.astype(np.float32)


@pytest.mark.parametrize("name", list(DTYPES))
def test_rbits_zero_truncates_any_split(name: str) -> None:
    x = _inputs(name, 32)
    got = run(name, x, np.zeros(32, np.uint32))
    want = pack(name, [reference(name, x[:, k], np.zeros(32)) for k in range(4)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(DTYPES))
def test_random_bits_per_value(name: str) -> None:
    x = _inputs(name, 64)
    rbits = RNG.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    got = run(name, x, rbits)
    fields = [reference(name, x[:, k], (rbits >> np.uint32(SHIFTS[name][k])) & 0xFF) for k in range(4)]
    np.testing.assert_array_equal(got, pack(name, fields))


@pytest.mark.parametrize("name", ["e4m3x4", "e2m1x4"])
def test_relu_and_field_order(name: str) -> None:
    x = np.float32([[1.0, -1.0, 2.0, -3.0], [0.5, 4.0, -0.5, 6.0]])
    got = run(name, x, np.zeros(2, np.uint32), relu=True)
    want = pack(name, [reference(name, x[:, k], np.zeros(2), relu=True) for k in range(4)])
    np.testing.assert_array_equal(got, want)
    # a in the top field: 1.0 in the top, -1.0 → +0 (relu) next.
    one = int(np.float64(1.0).astype(DTYPES[name]).view(np.uint8)) & (0xF if name == "e2m1x4" else 0xFF)
    assert int(got[0]) >> (12 if name == "e2m1x4" else 24) == one


@pytest.mark.parametrize("name", list(DTYPES))
def test_equal_bytes_round_the_same_any_split(name: str) -> None:
    """Values one quantum-fraction k/256 above a representable value (their
    discarded bits all in the top 8) round away iff k + byte >= 256,
    whichever byte a value takes when all four bytes are equal."""
    table = _table(name)
    base = table[len(table) // 2]
    gap = table[len(table) // 2 + 1] - base
    k = np.array([1, 64, 128, 255])
    x = np.tile((base + gap * k / 256).astype(np.float32), (3, 1))
    rbits = np.array([0x00000000, 0x80808080, 0xFFFFFFFF], np.uint32)
    got = run(name, x, rbits)
    for row, byte in enumerate((0, 0x80, 0xFF)):
        want = pack(name, [reference(name, x[row, j:j + 1], np.array([byte]))[0:1] for j in range(4)])
        np.testing.assert_array_equal(got[row:row + 1], want)

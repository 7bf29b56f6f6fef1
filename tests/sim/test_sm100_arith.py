"""sm_100 arithmetic forms on the emulator: packed ``.f32x2`` add/sub/mul/fma
(two f32 lanes of a .b64 register, low half first) and the three-input
``min.f32`` / ``max.f32``. Every form is assembled by ptxas for sm_100a."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxptx.runtime import ptxas

from elementwise import HEAD_SM100, ew

_N = 256


def _f32(rng: np.random.Generator, n: int = _N) -> np.ndarray:
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.0]
    return x


def _pairs(x: np.ndarray) -> np.ndarray:
    """f32 values as .b64 words of two lanes (element 2i in the low half)."""
    return x.view(np.uint64)


def _scalar(ins: str, *args: np.ndarray) -> np.ndarray:
    return ew(ins, np.float32, *args, head=HEAD_SM100)


def _packed(ins: str, *args: np.ndarray) -> np.ndarray:
    return ew(ins, np.uint64, *(_pairs(a) for a in args), head=HEAD_SM100).view(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("rnd", ["", ".rn", ".rz", ".rm", ".rp"])
@pytest.mark.parametrize("ftz", ["", ".ftz"])
def test_f32x2_binary_is_the_f32_instruction_on_each_lane(op, rnd, ftz):
    rng = np.random.default_rng(len(op + rnd + ftz))
    a, b = _f32(rng), _f32(rng)
    ins = f"{op}{rnd}{ftz}"
    got = _packed(f"{ins}.f32x2", a, b)
    _same(got, _scalar(f"{ins}.f32", a, b))
    if not rnd and not ftz:
        with np.errstate(all="ignore"):
            ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a, b)
        _same(got[~np.isnan(ref)], ref[~np.isnan(ref)])


@pytest.mark.parametrize("rnd", [".rn", ".rz", ".rm", ".rp"])
def test_f32x2_fma_is_the_f32_fma_on_each_lane(rnd):
    rng = np.random.default_rng(7)
    a, b, c = _f32(rng), _f32(rng), _f32(rng)
    _same(_packed(f"fma{rnd}.f32x2", a, b, c), _scalar(f"fma{rnd}.f32", a, b, c))


def test_f32x2_fma_rn_is_correctly_rounded():
    rng = np.random.default_rng(8)
    a, b, c = (rng.standard_normal(_N).astype(np.float32) for _ in range(3))
    exact = [math.fsum([float(x) * float(y), float(z)]) for x, y, z in zip(a, b, c)]
    _same(_packed("fma.rn.f32x2", a, b, c), np.array(exact).astype(np.float32))


def _min3_reference(a, b, c, is_max: bool, nan_wins: bool, absolute: bool) -> np.ndarray:
    out = []
    for xs in zip(a, b, c):
        xs = [abs(x) if absolute else x for x in map(float, xs)]
        nans = [math.isnan(x) for x in xs]
        if all(nans) or (nan_wins and any(nans)):
            out.append(np.float32(np.nan))
            continue
        keep = [x for x in xs if not math.isnan(x)]
        # -0 < +0: order by (value, sign bit clear)
        key = lambda x: (x, math.copysign(1, x) > 0)
        out.append(np.float32(max(keep, key=key) if is_max else min(keep, key=key)))
    return np.array(out, np.float32)


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("mods", ["", ".NaN", ".abs", ".NaN.abs", ".ftz"])
def test_three_input_min_max_uses_every_operand(op, mods):
    rng = np.random.default_rng(3)
    a, b, c = _f32(rng), _f32(rng), _f32(rng)
    a[:4], b[:4], c[:4] = [1, np.nan, -0.0, np.nan], [2, np.nan, 0.0, 7], [5, np.nan, -0.0, np.nan]
    got = _scalar(f"{op}{mods}.f32", a, b, c)
    if ".ftz" in mods:
        a, b, c = (np.where(np.abs(x) < 2.0**-126, np.copysign(0, x), x).astype(np.float32) for x in (a, b, c))
    want = _min3_reference(a, b, c, op == "max", ".NaN" in mods, ".abs" in mods)
    _same(got, want)
    if op == "max" and not mods:
        assert got[0] == 5.0            # the case: max(1, 2, 5), not max(1, 2)
        assert got[3] == 7.0


def test_every_form_assembles_for_sm100a():
    body = """.visible .entry k()
{
  .reg .b64 %rd<5>; .reg .f32 %f<5>;
  add.rn.ftz.f32x2 %rd1, %rd2, %rd3; sub.rz.f32x2 %rd1, %rd2, %rd3;
  mul.rm.f32x2 %rd1, %rd2, %rd3; fma.rp.ftz.f32x2 %rd1, %rd2, %rd3, %rd4;
  min.NaN.abs.f32 %f1, %f2, %f3, %f4; max.ftz.f32 %f1, %f2, %f3, %f4;
  ret;
}
"""
    ptxas(HEAD_SM100 + body, "sm_100a")


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("mods", ["", ".abs", ".NaN", ".abs.NaN"])
def test_redux_sync_f32_reduces_each_warp(op, mods):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(128).astype(np.float32)
    x[5], x[40], x[41] = np.nan, -0.0, 0.0             # warp 0 has a NaN
    x[64:96] = -np.abs(x[64:96])                        # warp 2: all negative
    got = ew("", np.float32, x, head=HEAD_SM100,
             body=f"    redux.sync.{op}{mods}.f32 %d, %x0, 0xffffffff;")
    for w in range(4):
        lanes = x[32 * w:32 * w + 32].astype(np.float64)
        if ".abs" in mods:
            lanes = np.abs(lanes)
        if np.isnan(lanes).any() and ".NaN" in mods:
            assert np.isnan(got[32 * w:32 * w + 32]).all()
            continue
        want = np.float32((np.nanmax if op == "max" else np.nanmin)(lanes))
        assert (got[32 * w:32 * w + 32] == want).all()

"""``jaxptx.kernels.scaled_matmul`` and ``scaled_grouped_matmul`` verified
three ways: on the emulator against a float64 dequantise-and-multiply
written here (shapes off the 128 x 128 tile, K loops that lap the ring),
ptxas with no spills for every variant, the CUDA lowering's custom call;
plus the sanitizer, bad arguments, and (``gpu``) the sm_90a kernel on a GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.kernels import (
    _scaled_sm90,
    _scaled_sm100,
    block_quantize,
    scaled_grouped_matmul,
    scaled_matmul,
)

RNG = np.random.default_rng(28)
QUANT = {"mxfp8": "mxfp8_e4m3", "mxfp8_e5m2": "mxfp8_e5m2", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}


def _operand(shape: tuple[int, ...], fmt: str):
    """Random normal values quantised to ``fmt``, with scales spread over 2^-4..2^4."""
    x = RNG.standard_normal(shape) * np.exp2(RNG.integers(-4, 5, shape[:-1] + (1,)))
    return block_quantize(jnp.asarray(x, jnp.float32), QUANT[fmt])


def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _dequant(v, s) -> np.ndarray:
    v, s = _f64(v), _f64(s)
    return v * np.repeat(s, v.shape[-1] // s.shape[-1], axis=-1)


def _check(got, want: np.ndarray, size: np.ndarray) -> None:
    """``got`` against the float64 product, to f32 accumulation's error
    (relative to the sum of |products| per element)."""
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.abs(got - want) > 1e-5 * size + 1e-30
    assert not bad.any(), f"{bad.sum()} wrong of {bad.size}; first at {np.argwhere(bad)[0]}"


def _batched(b: int, m: int, n: int, k: int, lfmt: str, rfmt: str | None = None):
    a, sa = _operand((b, m, k), lfmt)
    w, sw = _operand((b, n, k), rfmt or lfmt)
    A, W = _dequant(a, sa), _dequant(w, sw)
    return (a, w, sa, sw), np.einsum("bmk,bnk->bmn", A, W), np.einsum("bmk,bnk->bmn", np.abs(A), np.abs(W))


# --- the emulator against float64 ------------------------------------------------------------------

@pytest.mark.parametrize("arch, b, m, n, k, lfmt, rfmt", [
    ("sm_100a", 2, 130, 72, 96, "mxfp8", "mxfp8"),             # M, N off the tile, K < a stage
    pytest.param("sm_100a", 1, 72, 36, 160, "mxfp8_e5m2", "mxfp8", marks=pytest.mark.slow),   # e5m2 x e4m3
    ("sm_100a", 1, 136, 40, 272, "nvfp4", "nvfp4"),           # K = 17 blocks of 16: padded rows
    ("sm_100a", 1, 40, 136, 288, "mxfp4", "mxfp4"),
    ("sm_90a", 1, 130, 72, 288, "mxfp8", "mxfp8"),            # 3 stages, a partial last one
    ("sm_90a", 2, 40, 20, 64, "mxfp8", "mxfp8_e5m2"),
])
def test_emulator_matches_float64_off_the_tile(arch, b, m, n, k, lfmt, rfmt) -> None:
    args, want, size = _batched(b, m, n, k, lfmt, rfmt)
    _check(jax.jit(lambda *a: scaled_matmul(*a, arch=arch))(*args), want, size)


@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_a_k_loop_that_laps_the_ring(arch) -> None:
    """K of 5 stages with a ring of 4: stages and scale columns are reused."""
    args, want, size = _batched(1, 64, 24, 5 * 128, "mxfp8")
    _check(scaled_matmul(*args, arch=arch), want, size)


@pytest.mark.slow
@pytest.mark.parametrize("arch, fmt", [("sm_100a", "nvfp4"), ("sm_100a", "mxfp8"), ("sm_90a", "mxfp8")])
def test_several_tiles_and_a_long_k(arch, fmt) -> None:
    args, want, size = _batched(2, 260, 200, 9 * 128 + 32, fmt)
    _check(scaled_matmul(*args, arch=arch), want, size)


def test_preferred_element_type_rounds_the_f32_result() -> None:
    args, want, _ = _batched(1, 40, 24, 64, "nvfp4")
    got = scaled_matmul(*args, preferred_element_type=jnp.bfloat16, arch="sm_100a")
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32).astype(jnp.bfloat16))


def test_grouped_matches_float64_per_group_with_traced_sizes() -> None:
    sizes = [100, 0, 150, 20]                                 # an empty group, rows past the groups
    m, n, k = 300, 40, 64
    a, sa = _operand((m, k), "mxfp8")
    w, sw = _operand((len(sizes), n, k), "mxfp8_e5m2")
    A, W = _dequant(a, sa), _dequant(w, sw)
    want, size, start = np.zeros((m, n)), np.zeros((m, n)), 0
    for g, rows in enumerate(sizes):
        want[start:start + rows] = A[start:start + rows] @ W[g].T
        size[start:start + rows] = np.abs(A[start:start + rows]) @ np.abs(W[g]).T
        start += rows
    f = jax.jit(lambda *x: scaled_grouped_matmul(*x, arch="sm_100a"))
    got = f(a, w, sa, sw, jnp.array(sizes, jnp.int32))
    _check(got, want, size)
    assert not np.asarray(got)[start:].any()


# --- ptxas, the PTX, the lowering -----------------------------------------------------------------

SM100_BUILDS = [("mxfp8", "e4m3", "e4m3", False), ("mxfp8", "e5m2", "e4m3", False),
                ("nvfp4", "e2m1", "e2m1", False), ("mxfp4", "e2m1", "e2m1", False),
                ("mxfp8", "e4m3", "e4m3", True), ("nvfp4", "e2m1", "e2m1", True)]
SIZES = {"G": 1, "GB": 4, "M": 4096, "N": 4096, "KB": 4096, "MT": 32, "NT": 32, "KS": 32}


@pytest.mark.parametrize("fmt, at, bt, grouped", SM100_BUILDS)
def test_ptxas_accepts_sm100_with_no_spills(fmt, at, bt, grouped) -> None:
    f = _scaled_sm100.FORMATS[fmt]
    res = _scaled_sm100.build(fmt, at, bt, grouped).resources(**SIZES, S=f.chunks * 512)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res


@pytest.mark.parametrize("at, bt", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_ptxas_accepts_sm90_with_no_spills(at, bt) -> None:
    res = _scaled_sm90.build(at, bt).resources(G=1, M=4096, N=4096, K=4096, MT=32, NT=32, KS=32)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res


@pytest.mark.parametrize("fmt, needle", [
    ("mxfp8", "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X"),
    ("nvfp4", "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X"),
    ("mxfp4", "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::2X")])
def test_sm100_ptx_stages_scales_with_tcgen05_cp(fmt, needle) -> None:
    at = "e4m3" if fmt == "mxfp8" else "e2m1"
    f = _scaled_sm100.FORMATS[fmt]
    text = _scaled_sm100.build(fmt, at, at).ptx(**SIZES, S=f.chunks * 512)
    assert text.count(needle) == 4                       # one per 32 bytes of K in a stage
    assert text.count("tcgen05.cp.cta_group::1.32x128b.warpx4") == 2 * f.chunks
    for other in ("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                  "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                  "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.commit.cta_group::1"):
        assert other in text, other


def test_sm90_ptx_runs_one_fp8_wgmma_per_scale_block() -> None:
    text = _scaled_sm90.build("e4m3", "e5m2").ptx(G=1, M=4096, N=4096, K=4096, MT=32, NT=32, KS=32)
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e5m2 \{[^}]*\}, "
                          r"%rd\d+, %rd\d+, 0, 1, 1;", text)) == _scaled_sm90.BLOCKS
    assert "wgmma.wait_group.sync.aligned 1" in text and "setmaxnreg.inc.sync.aligned.u32 232" in text


@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_one_kernel_and_the_cuda_lowering_shows_the_custom_call(arch) -> None:
    args, _, _ = _batched(2, 256, 128, 256, "mxfp8")
    f = jax.jit(lambda *a: scaled_matmul(*a, arch=arch))
    jaxpr = jax.make_jaxpr(f)(*args)
    assert str(jaxpr).count(f"scaled_matmul_sm{arch[3:-1]}") == 1, jaxpr
    text = f.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text
    assert len(re.findall(r"stablehlo\.custom_call", text)) == 1


@pytest.mark.parametrize("arch", ["sm_100a", "sm_90a"])
def test_clean_under_the_sanitizer(arch) -> None:
    args, want, size = _batched(1, 40, 24, 160, "mxfp8")
    with sim.checking("all"):
        got = jax.block_until_ready(scaled_matmul(*args, arch=arch))
    _check(got, want, size)


# --- bad arguments ------------------------------------------------------------------------------

def _args(fmt: str = "mxfp8", b: int = 1, m: int = 8, n: int = 8, k: int = 64):
    a, sa = _operand((b, m, k), fmt)
    w, sw = _operand((b, n, k), fmt)
    return a, w, sa, sw


def _bad(**change):
    a, w, sa, sw = _args()
    d = {"lhs": a, "rhs": w, "lhs_scales": sa, "rhs_scales": sw, "arch": "sm_100a"}
    d.update(change)
    return lambda: scaled_matmul(**d)


@pytest.mark.parametrize("call, match", [
    (_bad(lhs=jnp.zeros((1, 8, 64), jnp.bfloat16)),
     "scaled_matmul lhs: expected float8_e4m3fn, float8_e5m2 or float4_e2m1fn, got bfloat16"),
    (_bad(rhs=jnp.zeros((1, 8, 64), jnp.float4_e2m1fn)), "lhs and rhs must both be FP8 or both FP4"),
    (_bad(lhs_scales=jnp.ones((1, 8, 2), jnp.float32), rhs_scales=jnp.ones((1, 8, 2), jnp.float32)),
     "scaled_matmul lhs_scales: expected float8_e8m0fnu for FP8 values, got float32"),
    (_bad(rhs_scales=jnp.ones((1, 8, 2), jnp.float8_e4m3fn)), "must have one dtype"),
    (_bad(lhs_scales=jnp.ones((1, 8, 4), jnp.float8_e8m0fnu), rhs_scales=jnp.ones((1, 8, 4), jnp.float8_e8m0fnu)),
     "mxfp8 takes blocks of 32 values .* got a block of 16"),
    (_bad(lhs=jnp.zeros((8, 64), jnp.float8_e4m3fn)), r"scaled_matmul lhs: expected a 3-d array, got shape \(8, 64\)"),
    (_bad(rhs=jnp.zeros((1, 8, 96), jnp.float8_e4m3fn)), r"expected lhs \(B, M, K\) and rhs \(B, N, K\)"),
    (_bad(rhs_scales=jnp.ones((1, 9, 2), jnp.float8_e8m0fnu)),
     r"scaled_matmul rhs_scales: expected shape \(1, 8, K / block\), got \(1, 9, 2\)"),
    (_bad(preferred_element_type=jnp.int8), "preferred_element_type: expected float32, bfloat16 or float16"),
    (_bad(arch="sm_80"), "arch='sm_80' is not a variant of scaled_matmul"),
])
def test_bad_arguments_name_what_was_expected(call, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        call()


def test_sm90_takes_mxfp8_only() -> None:
    a, w, sa, sw = _args("nvfp4", k=32)
    with pytest.raises(SpecError, match="arch='sm_90a' runs mxfp8 only .FP8 wgmma., got nvfp4"):
        scaled_matmul(a, w, sa, sw, arch="sm_90a")


def test_nvfp4_block_must_be_16() -> None:
    a, w, sa, sw = _args("nvfp4", k=64)
    with pytest.raises(SpecError, match="nvfp4 takes blocks of 16 values .* got a block of 32"):
        scaled_matmul(a, w, sa[:, :, :2], sw[:, :, :2], arch="sm_100a")


@pytest.mark.parametrize("sizes, match", [
    ([4, -1], r"group_sizes: expected sizes >= 0, got group_sizes\[1\] = -1"),
    ([6, 6], "group_sizes: expected a sum of at most M = 8"),
    ([4, 4, 0], r"group_sizes: expected shape \(2,\), got \(3,\)"),
    (np.array([4.0, 4.0]), "group_sizes: expected an integer dtype"),
])
def test_grouped_bad_sizes(sizes, match: str) -> None:
    a, sa = _operand((8, 64), "mxfp8")
    w, sw = _operand((2, 8, 64), "mxfp8")
    with pytest.raises(SpecError, match=match):
        scaled_grouped_matmul(a, w, sa, sw, sizes, arch="sm_100a")


def test_grouped_needs_sm100() -> None:
    a, sa = _operand((8, 64), "mxfp8")
    w, sw = _operand((2, 8, 64), "mxfp8")
    with pytest.raises(SpecError, match="arch='sm_90a' is not a variant of scaled_grouped_matmul"):
        scaled_grouped_matmul(a, w, sa, sw, [4, 4], arch="sm_90a")


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_sm90_mxfp8_on_a_gpu_matches_float64() -> None:
    from jaxptx.kernels._arch import target_of
    t = target_of("auto")
    if (t.sm, t.suffix) != (90, "a"):
        pytest.skip(f"the sm_90a kernel needs an sm_90a GPU; this one is {t.name}")
    args, want, size = _batched(2, 1000, 776, 1056, "mxfp8", "mxfp8_e5m2")
    dev = jax.devices("gpu")[0]
    got = jax.jit(lambda *a: scaled_matmul(*a, arch="sm_90a"))(*(jax.device_put(x, dev) for x in args))
    _check(got, want, size)
    assert ml_dtypes.float8_e8m0fnu == args[2].dtype

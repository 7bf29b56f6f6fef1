"""The block-scaled packing helpers (``jaxptx.kernels._fp_pack``) against
``ml_dtypes``: FP4 packing, FP8 bit casts, and OCP MX / NVFP4 quantisation
(scales from the exponent rule written here with numpy, values rounded by
ml_dtypes)."""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx.errors import SpecError
from jaxptx.kernels import (
    block_dequantize,
    block_quantize,
    fp8_from_bits,
    fp8_to_bits,
    pack_fp4,
    unpack_fp4,
)

RNG = np.random.default_rng(7)
ALL_FP4 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)   # every E2M1 code


def test_pack_fp4_puts_the_even_element_in_the_low_nibble() -> None:
    codes = RNG.integers(0, 16, (3, 10)).astype(np.uint8)
    values = codes.view(ml_dtypes.float4_e2m1fn)
    packed = np.asarray(pack_fp4(jnp.asarray(values)))
    assert packed.dtype == np.uint8 and packed.shape == (3, 5)
    np.testing.assert_array_equal(packed, codes[:, 0::2] | (codes[:, 1::2] << 4))


def test_unpack_fp4_inverts_pack_for_every_code() -> None:
    values = np.stack([np.repeat(ALL_FP4, 16), np.tile(ALL_FP4, 16)], axis=-1).reshape(16, 32)
    back = np.asarray(unpack_fp4(pack_fp4(jnp.asarray(values))))
    assert back.dtype == ml_dtypes.float4_e2m1fn
    np.testing.assert_array_equal(back.view(np.uint8), values.view(np.uint8))
    np.testing.assert_array_equal(back.astype(np.float32)[0, 1::2], ALL_FP4.astype(np.float32))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu])
def test_fp8_bits_round_trip(dtype) -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(dtype)
    bits = np.asarray(fp8_to_bits(jnp.asarray(values)))
    np.testing.assert_array_equal(bits, codes)
    np.testing.assert_array_equal(np.asarray(fp8_from_bits(jnp.asarray(codes), dtype)).view(np.uint8), codes)


@pytest.mark.parametrize("fmt, dtype, emax", [("mxfp8_e4m3", ml_dtypes.float8_e4m3fn, 8),
                                              ("mxfp8_e5m2", ml_dtypes.float8_e5m2, 15),
                                              ("mxfp4", ml_dtypes.float4_e2m1fn, 2)])
def test_mx_quantize_follows_the_ocp_rule(fmt: str, dtype, emax: int) -> None:
    x = (RNG.standard_normal((4, 96)) * np.exp2(RNG.integers(-20, 20, (4, 1)))).astype(np.float32)
    x[1, 32:64] = 0.0                                       # an all-zero block: scale 1
    values, scales = block_quantize(jnp.asarray(x), fmt)
    assert values.dtype == dtype and scales.dtype == ml_dtypes.float8_e8m0fnu and scales.shape == (4, 3)
    blocks = x.reshape(4, 3, 32).astype(np.float64)
    amax = np.abs(blocks).max(-1)
    want_exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - emax, 0)
    np.testing.assert_array_equal(np.log2(np.asarray(scales).astype(np.float64)), want_exp)
    top = float(ml_dtypes.finfo(dtype).max)
    want = np.clip(blocks / np.exp2(want_exp)[..., None], -top, top).astype(np.float32).astype(dtype)
    np.testing.assert_array_equal(np.asarray(values).view(np.uint8), want.reshape(4, 96).view(np.uint8))


def test_nvfp4_quantize_scales_by_amax_over_six_in_e4m3() -> None:
    x = RNG.standard_normal((2, 64)).astype(np.float32) * 3
    values, scales = block_quantize(jnp.asarray(x), "nvfp4")
    assert values.dtype == ml_dtypes.float4_e2m1fn and scales.dtype == ml_dtypes.float8_e4m3fn
    amax = np.abs(x.reshape(2, 4, 16)).max(-1)
    want_s = (amax / 6).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(np.asarray(scales).view(np.uint8), want_s.view(np.uint8))
    want_v = np.clip(x.reshape(2, 4, 16) / want_s.astype(np.float32)[..., None], -6, 6)
    np.testing.assert_array_equal(np.asarray(values).view(np.uint8),
                                  want_v.astype(ml_dtypes.float4_e2m1fn).reshape(2, 64).view(np.uint8))


def test_dequantize_is_values_times_repeated_scales_and_close_to_the_input() -> None:
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    values, scales = block_quantize(jnp.asarray(x), "mxfp8_e4m3")
    got = np.asarray(block_dequantize(values, scales))
    want = np.asarray(values).astype(np.float32) * np.repeat(np.asarray(scales).astype(np.float32), 32, -1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, x, rtol=2 ** -3, atol=1e-6)       # e4m3: 3 mantissa bits


@pytest.mark.parametrize("call, match", [
    (lambda: pack_fp4(jnp.zeros((4,), jnp.float32)), "pack_fp4 values: expected float4_e2m1fn, got float32"),
    (lambda: pack_fp4(jnp.zeros((3,), jnp.float4_e2m1fn)), "pack_fp4 values: expected an even last dimension"),
    (lambda: unpack_fp4(jnp.zeros((3,), jnp.int32)), "unpack_fp4 packed: expected uint8, got int32"),
    (lambda: fp8_to_bits(jnp.zeros((3,), jnp.bfloat16)), "fp8_to_bits values: expected one of .*got bfloat16"),
    (lambda: fp8_from_bits(jnp.zeros((3,), jnp.uint8), jnp.float16), "fp8_from_bits dtype: expected one of"),
    (lambda: block_quantize(jnp.zeros((2, 48)), "mxfp8_e4m3"), "multiple of 32 .mxfp8_e4m3 blocks., got shape"),
    (lambda: block_quantize(jnp.zeros((2, 32)), "fp8"), "block_quantize fmt: expected one of mxfp8_e4m3"),
    (lambda: block_quantize(jnp.zeros((2, 32), jnp.int32), "nvfp4"), "expected a float array, got int32"),
    (lambda: block_dequantize(jnp.zeros((2, 32)), jnp.zeros((3, 1))), "block_dequantize: values .2, 32."),
])
def test_bad_arguments_name_what_was_expected(call, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        call()


@pytest.mark.parametrize("dtype", [ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn])
def test_pack_fp6_puts_four_values_in_three_bytes_and_unpacks_every_code(dtype) -> None:
    from jaxptx.kernels import pack_fp6, unpack_fp6
    codes = np.concatenate([np.arange(64, dtype=np.uint8), RNG.integers(0, 64, 64).astype(np.uint8)])
    values = codes.reshape(2, 64).view(dtype)
    packed = pack_fp6(values)
    assert packed.dtype == np.uint8 and packed.shape == (2, 48)
    # the bit layout, read back with Python ints: element i of a group at bits 6i..6i+5
    for row in range(2):
        for g in range(16):
            word = int.from_bytes(packed[row, 3 * g:3 * g + 3].tobytes(), "little")
            assert [(word >> (6 * i)) & 0x3F for i in range(4)] == codes.reshape(2, 64)[row, 4 * g:4 * g + 4].tolist()
    back = unpack_fp6(packed, dtype)
    assert back.dtype == dtype
    np.testing.assert_array_equal(back.view(np.uint8), values.view(np.uint8))
    np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))


def test_fp6_helpers_refuse_what_they_cannot_pack() -> None:
    from jaxptx.kernels import pack_fp6, unpack_fp6
    with pytest.raises(SpecError, match=r"pack_fp6 values: expected a numpy array of float6_e2m3fn or "
                                        r"float6_e3m2fn, got float32"):
        pack_fp6(np.zeros(4, np.float32))
    with pytest.raises(SpecError, match=r"pack_fp6 values: expected a last dimension that is a multiple of 4"):
        pack_fp6(np.zeros(6, ml_dtypes.float6_e2m3fn))
    with pytest.raises(SpecError, match=r"unpack_fp6 dtype: expected float6_e2m3fn or float6_e3m2fn, got uint8"):
        unpack_fp6(np.zeros(3, np.uint8), np.uint8)
    with pytest.raises(SpecError, match=r"unpack_fp6 packed: expected uint8 with a last dimension that is a "
                                        r"multiple of 3"):
        unpack_fp6(np.zeros(4, np.uint8), ml_dtypes.float6_e3m2fn)

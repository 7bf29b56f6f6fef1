"""Low-precision values as bytes, and block-scaled quantisation.

* :func:`pack_fp4` / :func:`unpack_fp4`: ``float4_e2m1fn`` values two a
  byte, the even element in the low nibble (the order ``tcgen05.mma``'s
  4-bit kinds read in shared memory, and jax's ``bitcast_convert_type``).
* :func:`pack_fp6` / :func:`unpack_fp6`: ``float6_e2m3fn`` / ``float6_e3m2fn``
  values four in three bytes, element ``i`` of a group in bits ``6i`` to
  ``6i + 5`` of the group's little-endian 24 bits. These take and give
  numpy arrays of ml_dtypes' FP6 types: XLA (jax 0.10 and 0.11 on the CPU)
  refuses FP6 arrays ("Invalid XLA PrimitiveType ... F6E2M3FN").
* :func:`fp8_to_bits` / :func:`fp8_from_bits`: FP8 (values or scales) as
  ``uint8`` and back, a bit cast.
* :func:`block_quantize` / :func:`block_dequantize`: a float array's last axis in blocks,
  one scale per block:

  - ``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp4`` (OCP Microscaling Formats
    v1.0, section 6.3): blocks of 32 share an E8M0 scale
    ``X = 2^(floor(log2(amax)) - emax_elem)`` (``emax_elem`` 8, 15 and 2:
    the element type's largest exponent), each value ``x / X`` rounded to
    nearest even, saturating at the element type's largest finite value;
  - ``nvfp4`` (NVIDIA's format, not OCP): blocks of 16 share an E4M3 scale
    ``amax / 6`` rounded to E4M3 (so the block's largest value lands near
    E2M1's largest, 6), the values ``x / scale`` rounded to E2M1.

  An all-zero block gets scale 1 (OCP leaves it free).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ..errors import SpecError

__all__ = [
    "MX_FORMATS",
    "MxFormat",
    "block_dequantize",
    "block_quantize",
    "fp8_from_bits",
    "fp8_to_bits",
    "pack_fp4",
    "pack_fp6",
    "unpack_fp4",
    "unpack_fp6",
]

_FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")


@dataclasses.dataclass(frozen=True)
class MxFormat:
    """A block-scaled format: element and scale dtypes, block size, and the
    element type's largest exponent (``emax_elem`` of the OCP MX spec)."""

    name: str
    dtype: Any
    scale_dtype: Any
    block: int
    emax_elem: int


MX_FORMATS = {
    "mxfp8_e4m3": MxFormat("mxfp8_e4m3", jnp.float8_e4m3fn, jnp.float8_e8m0fnu, 32, 8),
    "mxfp8_e5m2": MxFormat("mxfp8_e5m2", jnp.float8_e5m2, jnp.float8_e8m0fnu, 32, 15),
    "mxfp4": MxFormat("mxfp4", jnp.float4_e2m1fn, jnp.float8_e8m0fnu, 32, 2),
    "nvfp4": MxFormat("nvfp4", jnp.float4_e2m1fn, jnp.float8_e4m3fn, 16, 2),
}
"""The formats :func:`block_quantize` makes, by name."""


def _dtype_name(x: Any) -> str:
    return jnp.dtype(getattr(x, "dtype", type(x))).name


def pack_fp4(values: Any) -> jax.Array:
    """``float4_e2m1fn`` values (..., K), K even, as (..., K/2) ``uint8``:
    element ``2i`` in the low nibble of byte ``i``, ``2i + 1`` in the high one.

    Raises:
        SpecError: ``values`` not float4_e2m1fn, or an odd last dimension.

    Example:
        >>> import jax.numpy as jnp
        >>> pack_fp4(jnp.array([0.5, -1.0], jnp.float4_e2m1fn)).tolist()
        [161]
    """
    name = _dtype_name(values)
    if name != "float4_e2m1fn":
        raise SpecError(f"pack_fp4 values: expected float4_e2m1fn, got {name}")
    if values.ndim == 0 or values.shape[-1] % 2:
        raise SpecError(f"pack_fp4 values: expected an even last dimension, got shape {tuple(values.shape)}")
    nibbles = jax.lax.bitcast_convert_type(jnp.asarray(values), jnp.uint4).astype(jnp.uint8)
    pairs = nibbles.reshape(*values.shape[:-1], values.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_fp4(packed: Any) -> jax.Array:
    """The inverse of :func:`pack_fp4`: (..., K/2) ``uint8`` -> (..., K) ``float4_e2m1fn``.

    Raises:
        SpecError: ``packed`` not uint8.
    """
    name = _dtype_name(packed)
    if name != "uint8":
        raise SpecError(f"unpack_fp4 packed: expected uint8, got {name}")
    packed = jnp.asarray(packed)
    nibbles = jnp.stack([packed & 0xF, packed >> 4], axis=-1).astype(jnp.uint4)
    return jax.lax.bitcast_convert_type(nibbles.reshape(*packed.shape[:-1], -1), jnp.float4_e2m1fn)


_FP6 = {"float6_e2m3fn": ml_dtypes.float6_e2m3fn, "float6_e3m2fn": ml_dtypes.float6_e3m2fn}


def pack_fp6(values: Any) -> np.ndarray:
    """FP6 values (..., K), K a multiple of 4, as (..., 3K/4) ``uint8``: each
    group of four in three bytes, element ``i`` in bits ``6i .. 6i+5`` of the
    group's little-endian 24 bits.

    Args:
        values: a numpy array of ``ml_dtypes.float6_e2m3fn`` or ``float6_e3m2fn``.

    Raises:
        SpecError: another dtype, or a last dimension not a multiple of 4.

    Example:
        >>> import ml_dtypes, numpy as np
        >>> pack_fp6(np.array([1.0, 0, 0, -1.0], ml_dtypes.float6_e2m3fn)).tolist()
        [8, 0, 160]
    """
    values = np.asarray(values)
    if values.dtype.name not in _FP6:
        raise SpecError(f"pack_fp6 values: expected a numpy array of {' or '.join(_FP6)}, got {values.dtype.name}")
    if values.ndim == 0 or values.shape[-1] % 4:
        raise SpecError(f"pack_fp6 values: expected a last dimension that is a multiple of 4, "
                        f"got shape {values.shape}")
    codes = (values.view(np.uint8) & 0x3F).astype(np.uint32).reshape(*values.shape[:-1], -1, 4)
    word = codes[..., 0] | codes[..., 1] << 6 | codes[..., 2] << 12 | codes[..., 3] << 18
    out = np.stack([word & 0xFF, word >> 8 & 0xFF, word >> 16 & 0xFF], axis=-1).astype(np.uint8)
    return out.reshape(*values.shape[:-1], -1)


def unpack_fp6(packed: Any, dtype: Any) -> np.ndarray:
    """The inverse of :func:`pack_fp6`: (..., 3K/4) ``uint8`` -> (..., K) of ``dtype``.

    Raises:
        SpecError: ``packed`` not uint8 with a last dimension a multiple of 3,
            or ``dtype`` not an FP6 type.
    """
    packed = np.asarray(packed)
    name = np.dtype(dtype).name
    if name not in _FP6:
        raise SpecError(f"unpack_fp6 dtype: expected {' or '.join(_FP6)}, got {name}")
    if packed.dtype != np.uint8 or packed.ndim == 0 or packed.shape[-1] % 3:
        raise SpecError(f"unpack_fp6 packed: expected uint8 with a last dimension that is a multiple of 3, "
                        f"got {packed.dtype} {packed.shape}")
    b = packed.astype(np.uint32).reshape(*packed.shape[:-1], -1, 3)
    word = b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16
    codes = np.stack([word >> (6 * i) & 0x3F for i in range(4)], axis=-1).astype(np.uint8)
    return codes.reshape(*packed.shape[:-1], -1).view(_FP6[name])


def fp8_to_bits(values: Any) -> jax.Array:
    """FP8 values (``float8_e4m3fn``, ``float8_e5m2`` or ``float8_e8m0fnu``) as ``uint8`` bits.

    Raises:
        SpecError: another dtype.
    """
    name = _dtype_name(values)
    if name not in _FP8:
        raise SpecError(f"fp8_to_bits values: expected one of {', '.join(_FP8)}, got {name}")
    return jax.lax.bitcast_convert_type(jnp.asarray(values), jnp.uint8)


def fp8_from_bits(bits: Any, dtype: Any) -> jax.Array:
    """``uint8`` bits as FP8 values of ``dtype`` (a bit cast).

    Raises:
        SpecError: ``bits`` not uint8, or ``dtype`` not an FP8 type.
    """
    if _dtype_name(bits) != "uint8":
        raise SpecError(f"fp8_from_bits bits: expected uint8, got {_dtype_name(bits)}")
    if jnp.dtype(dtype).name not in _FP8:
        raise SpecError(f"fp8_from_bits dtype: expected one of {', '.join(_FP8)}, got {jnp.dtype(dtype).name}")
    return jax.lax.bitcast_convert_type(jnp.asarray(bits), dtype)


def _format(fmt: str) -> MxFormat:
    if fmt not in MX_FORMATS:
        raise SpecError(f"block_quantize fmt: expected one of {', '.join(MX_FORMATS)}, got {fmt!r}")
    return MX_FORMATS[fmt]


def block_quantize(x: Any, fmt: str) -> tuple[jax.Array, jax.Array]:
    """``x`` (..., K) in blocks of the format's size along K: ``(values,
    scales)`` with ``values`` (..., K) of the element dtype and ``scales``
    (..., K / block) of the scale dtype (module docstring for the rules),
    so that ``block_dequantize(values, scales)`` approximates ``x``.

    Args:
        x: a float array; K a multiple of the block (32, or 16 for nvfp4).
        fmt: a key of :data:`MX_FORMATS`.

    Raises:
        SpecError: an unknown format, a non-float ``x`` or a K the block does not divide.

    Example:
        >>> import jax.numpy as jnp
        >>> v, s = block_quantize(jnp.full((1, 32), 3.0), "mxfp8_e4m3")
        >>> float(s[0, 0]), float(v[0, 0])       # 2^(floor(log2 3) - 8), 3 / 2^-7
        (0.0078125, 384.0)
    """
    f = _format(fmt)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise SpecError(f"block_quantize x: expected a float array, got {x.dtype}")
    if x.ndim == 0 or x.shape[-1] % f.block:
        raise SpecError(f"block_quantize x: expected a last dimension that is a multiple of {f.block} "
                        f"({fmt} blocks), got shape {tuple(x.shape)}")
    blocks = x.astype(jnp.float32).reshape(*x.shape[:-1], x.shape[-1] // f.block, f.block)
    amax = jnp.max(jnp.abs(blocks), axis=-1)
    big = float(ml_dtypes.finfo(f.dtype).max)
    if f.scale_dtype == jnp.float8_e8m0fnu:
        # floor(log2(amax)) exactly, from the exponent field (frexp: amax = m 2^e, m in [0.5, 1)).
        _, e = jnp.frexp(amax)
        exp = jnp.where(amax > 0, e - 1 - f.emax_elem, 0)
        exp = jnp.clip(exp, -127, 127)
        scale = jnp.ldexp(jnp.ones_like(amax), exp)
    else:
        top = float(ml_dtypes.finfo(f.scale_dtype).max)
        scale = jnp.minimum(amax / big, top).astype(f.scale_dtype).astype(jnp.float32)
        scale = jnp.where(scale > 0, scale, 1.0)
    scaled = jnp.clip(blocks / scale[..., None], -big, big)
    values = scaled.astype(f.dtype).reshape(x.shape)
    return values, scale.astype(f.scale_dtype)


def block_dequantize(values: Any, scales: Any, dtype: Any = jnp.float32) -> jax.Array:
    """``values * repeat(scales, block)`` along the last axis, in ``dtype``
    (the block is ``values.shape[-1] // scales.shape[-1]``).

    Raises:
        SpecError: shapes whose leading dims differ or whose last dims do not divide.
    """
    values, scales = jnp.asarray(values), jnp.asarray(scales)
    if values.shape[:-1] != scales.shape[:-1] or scales.shape[-1] == 0 \
            or values.shape[-1] % scales.shape[-1]:
        raise SpecError(f"block_dequantize: values {tuple(values.shape)} and scales {tuple(scales.shape)} "
                        f"must agree but in the last dim, which the scales' must divide")
    block = values.shape[-1] // scales.shape[-1]
    return values.astype(dtype) * jnp.repeat(scales.astype(dtype), block, axis=-1)

"""The floating-point formats of PTX, for every numeric module of the emulator.

One :class:`Format` per PTX float type, f64 down to the 4-bit e2m1: its
width and host dtype come from :data:`jaxptx.types.TYPES`; its precision,
exponent range, largest value, infinities and canonical NaN are the IEEE /
OCP facts below (PTX ISA "Floating-Point Data Types" and "Alternate
Floating-Point Data Formats").

Values live in two domains, and the helpers say which they take:

* *native*: numpy arrays of the format's own dtype (``float16`` for f16),
  as the arithmetic semantics compute them — :func:`flush`,
  :func:`canonical`, :func:`sign_bit`, :func:`with_sign`, :func:`next_up`;
* *float64*: values widened to float64, as conversions and the
  transcendentals compute them — :func:`flush_f64`, :func:`encode`,
  :func:`decode`.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...types import TYPES

__all__ = ["Format", "FORMATS", "canonical_nan", "flush", "flush_f64", "canonical", "sign_bit", "with_sign",
           "next_up", "next_down", "encode", "decode", "two_prod"]

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@dataclasses.dataclass(frozen=True)
class Format:
    """One binary floating-point format.

    Attributes:
        name: PTX type name (``f16``, ``e4m3``...).
        p: significand precision in bits, the hidden bit included.
        emin: exponent of the smallest normal value.
        emax: exponent of the largest finite value.
        max: the largest finite value.
        inf: whether the format has infinities.
        nan: the canonical NaN bits (positive, every payload bit set), or
            ``None`` where the format has no NaN.
        storage: the PTX type whose bits and host dtype hold the values
            (``name`` itself unless given: a rounding-only format such as a
            float64 cut to fewer bits of precision sets ``"f64"``).
    """

    name: str
    p: int
    emin: int
    emax: int
    max: float
    inf: bool
    nan: int | None
    storage: str | None = None

    @functools.cached_property
    def bits(self) -> int:
        """Width of one value in a register (from :data:`jaxptx.types.TYPES`)."""
        return TYPES[self.storage or self.name].bits

    @functools.cached_property
    def dtype(self) -> np.dtype:
        """A numpy / ml_dtypes dtype that holds every value exactly."""
        return TYPES[self.storage or self.name].np_dtype

    @functools.cached_property
    def uint(self) -> type:
        """The unsigned integer type that stores this format's bits (a whole
        byte for the 4- and 6-bit formats)."""
        return _UINT[max(8, self.bits)]

    @functools.cached_property
    def udtype(self) -> np.dtype:
        """:attr:`uint` as a dtype."""
        return np.dtype(self.uint)

    @functools.cached_property
    def sign(self) -> int:
        """The sign bit's mask."""
        return 1 << (self.bits - 1)

    @functools.cached_property
    def exp_mask(self) -> int:
        """The exponent field's mask."""
        return ((1 << (self.bits - self.p)) - 1) << (self.p - 1)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("f64", 53, -1022, 1023, float(np.finfo(np.float64).max), True, 0x7FFF_FFFF_FFFF_FFFF),
    Format("f32", 24, -126, 127, float(np.finfo(np.float32).max), True, 0x7FFF_FFFF),
    # tf32: f32 range, 10 explicit mantissa bits, stored as f32 bits whose low
    # 13 bits are zero.
    Format("tf32", 11, -126, 127, (2 - 2.0**-10) * 2.0**127, True, 0x7FFF_FFFF),
    Format("f16", 11, -14, 15, 65504.0, True, 0x7FFF),
    Format("bf16", 8, -126, 127, (2 - 2.0**-7) * 2.0**127, True, 0x7FFF),
    Format("e4m3", 4, -6, 8, 448.0, False, 0x7F),
    Format("e5m2", 3, -14, 15, 57344.0, True, 0x7F),
    Format("e2m3", 4, 0, 2, 7.5, False, None),
    Format("e3m2", 3, -2, 4, 28.0, False, None),
    Format("e2m1", 2, 0, 2, 6.0, False, None),
)}


def canonical_nan(fmt: Format) -> int:
    """The NaN bits the emulator writes for ``fmt``.

    Raises:
        ValueError: the format has no NaN.
    """
    if fmt.nan is None:
        raise ValueError(f"{fmt.name} has no NaN")
    return fmt.nan


# native values --------------------------------------------------------------------
def _bits(x: np.ndarray, f: Format) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=f.dtype)).view(f.udtype)


def _value(b: np.ndarray, f: Format) -> np.ndarray:
    return np.ascontiguousarray(b.astype(f.udtype, copy=False)).view(f.dtype)


def sign_bit(x: np.ndarray, f: Format) -> np.ndarray:
    """True where the sign bit of native ``x`` is set (NaNs included)."""
    return (_bits(x, f) & f.udtype.type(f.sign)) != 0


def with_sign(x: np.ndarray, negative: np.ndarray, f: Format) -> np.ndarray:
    """Native ``x`` with its sign bit set to ``negative``."""
    b = _bits(x, f) & f.udtype.type(f.sign - 1)
    return _value(np.where(negative, b | f.udtype.type(f.sign), b), f)


def flush(x: np.ndarray, f: Format) -> np.ndarray:
    """``.ftz`` on native values: subnormals become zero of the same sign."""
    b = _bits(x, f)
    sub = (b & f.udtype.type(f.exp_mask)) == 0
    return _value(np.where(sub, b & f.udtype.type(f.sign), b), f)


def canonical(x: np.ndarray, f: Format) -> np.ndarray:
    """Native ``x`` with NaNs replaced by the format's canonical NaN."""
    if x.dtype.kind == "f" and x.size and not np.isnan(np.minimum.reduce(x, axis=None)):
        return x            # numpy's own floats: a NaN anywhere makes the minimum NaN (one pass, no copy)
    nan = np.isnan(x.astype(np.float64) if f.name == "bf16" else x)
    if not nan.any():
        return x
    return _value(np.where(nan, f.udtype.type(f.nan), _bits(x, f)), f)


def next_up(x: np.ndarray, f: Format) -> np.ndarray:
    """The next representable value above native ``x`` (``+inf`` and NaN stay)."""
    b = _bits(x, f)
    one = f.udtype.type(1)
    mag = b & f.udtype.type(f.sign - 1)
    neg = (b & f.udtype.type(f.sign)) != 0
    special = mag >= f.udtype.type(f.exp_mask)          # inf or NaN
    out = np.where(mag == 0, one, np.where(neg, b - one, b + one))
    out = np.where(special & ~neg, b, out)
    out = np.where(special & neg & (mag > f.udtype.type(f.exp_mask)), b, out)   # -NaN
    out = np.where(special & neg & (mag == f.udtype.type(f.exp_mask)),          # -inf → -max
                   b - one, out)
    return _value(out, f)


def next_down(x: np.ndarray, f: Format) -> np.ndarray:
    """The next representable value below native ``x``."""
    flip = f.udtype.type(f.sign)
    return _value(_bits(next_up(_value(_bits(x, f) ^ flip, f), f), f) ^ flip, f)


# float64 values -------------------------------------------------------------------
def flush_f64(x: np.ndarray, fmt: Format) -> np.ndarray:
    """``.ftz`` on float64 values: those subnormal in ``fmt`` become zero of
    the same sign."""
    tiny = (x != 0) & (np.abs(x) < 2.0**fmt.emin)
    return np.where(tiny, np.copysign(0.0, x), x) if tiny.any() else x


def encode(v: np.ndarray, fmt: Format) -> np.ndarray:
    """Bits of float64 values exactly representable in ``fmt`` (NaN →
    canonical NaN; infinities only where the format has them)."""
    v = np.asarray(v, dtype=np.float64)
    nan = np.isnan(v)
    bits = np.where(nan, 0.0, v).astype(fmt.dtype).view(fmt.uint)
    if nan.any():
        bits = np.where(nan, fmt.uint(canonical_nan(fmt)), bits)
    return bits


def decode(bits: np.ndarray, fmt: Format) -> np.ndarray:
    """Float64 values of ``fmt`` bits (the low ``fmt.bits`` bits are used)."""
    b = np.asarray(bits).astype(fmt.uint)
    if fmt.bits < 8:
        b = b & fmt.uint((1 << fmt.bits) - 1)
    with np.errstate(invalid="ignore"):
        return b.view(fmt.dtype).astype(np.float64)


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's TwoProduct with Veltkamp splitting: ``a*b == p + e`` exactly,
    while nothing overflows or underflows (see ``arith._prod_safe``)."""
    p = a * b

    def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = 134217729.0 * x                  # 2**27 + 1
        hi = c - (c - x)
        return hi, x - hi
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl

"""PTX types: widths, kinds, packed lanes and host dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import types as T


@pytest.mark.parametrize("t, bits, kind, np_dtype", [
    (T.pred, 1, "pred", np.bool_), (T.b8, 8, "b", np.uint8), (T.b128, 128, "b", None),
    (T.u16, 16, "u", np.uint16), (T.s64, 64, "s", np.int64), (T.f16, 16, "f", np.float16),
    (T.bf16, 16, "f", ml_dtypes.bfloat16), (T.f16x2, 32, "f", np.float16),
    (T.bf16x2, 32, "f", ml_dtypes.bfloat16), (T.tf32, 32, "f", np.float32),
    (T.f64, 64, "f", np.float64), (T.e4m3, 8, "f", ml_dtypes.float8_e4m3fn),
    (T.e5m2, 8, "f", ml_dtypes.float8_e5m2), (T.e2m1, 4, "f", ml_dtypes.float4_e2m1fn),
    (T.e2m3, 6, "f", ml_dtypes.float6_e2m3fn), (T.e3m2, 6, "f", ml_dtypes.float6_e3m2fn),
    (T.ue8m0, 8, "f", ml_dtypes.float8_e8m0fnu), (T.s4, 4, "s", ml_dtypes.int4),
])
def test_type_facts(t, bits, kind, np_dtype) -> None:
    assert (t.bits, t.kind) == (bits, kind)
    assert t.np_dtype == (None if np_dtype is None else np.dtype(np_dtype))
    assert T.by_name(t.ptx) is t and T.by_name(t.name) is t


def test_packed_types() -> None:
    assert (T.f16x2.lanes, T.f16x2.element, T.f16x2.nbytes) == (2, "f16", 4)
    assert (T.e4m3x2.lanes, T.e4m3x2.bits) == (2, 16)


def test_from_dtype() -> None:
    assert T.from_dtype("float32") is T.f32
    assert T.from_dtype(np.int8) is T.s8
    assert T.from_dtype(ml_dtypes.bfloat16) is T.bf16
    assert T.from_dtype(T.u32) is T.u32
    with pytest.raises(TypeError, match=r"dtype complex64 has no PTX equivalent"):
        T.from_dtype(np.complex64)
    with pytest.raises(TypeError, match=r"expected a PtxType or a numpy dtype, got 'nonsense'"):
        T.from_dtype("nonsense")


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown PTX type '.f33'; expected one of: pred, b1, b8"):
        T.by_name(".f33")

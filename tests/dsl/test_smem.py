"""Shared memory: layouts, descriptors, mbarriers, errors."""

from __future__ import annotations

import pytest

from jaxptx import kernel, ptx, smem
from jaxptx.dsl.smem import matrix_descriptor_bits
from jaxptx.errors import TraceError
from jaxptx.types import bf16, f32, u32


def test_descriptor_bit_fields() -> None:
    # PTX ISA "Matrix Descriptor Format": start>>4 bits 0-13, LBO>>4 16-29,
    # SBO>>4 32-45, base offset 49-51, swizzle 62-63.
    d = matrix_descriptor_bits(0x400, 16, 1024, 128, base_offset=3)
    assert d & 0x3FFF == 0x40
    assert (d >> 16) & 0x3FFF == 1
    assert (d >> 32) & 0x3FFF == 64
    assert (d >> 49) & 0x7 == 3
    assert d >> 62 == 1
    assert matrix_descriptor_bits(0, 0, 0, 64) >> 62 == 2
    assert matrix_descriptor_bits(0, 0, 0, 32) >> 62 == 3
    assert matrix_descriptor_bits(0, 0, 0, 0) == 0
    with pytest.raises(TraceError, match=r"swizzle: expected 0, 32, 64 or 128, got 16"):
        matrix_descriptor_bits(0, 0, 0, 16)


def test_wgmma_tile_swizzle_and_descriptor() -> None:
    seen = {}

    @kernel(arch="sm_90a")
    def k():
        a = smem.wgmma_tile(bf16, (64, 64))      # 128-byte rows -> 128B swizzle
        b = smem.wgmma_tile(bf16, (64, 16))      # 32-byte rows -> 32B swizzle
        seen.update(a=(a.swizzle, a.nbytes, a.layout.value), b=(b.swizzle, b.layout.value))
        a.desc()
    text = k.ptx()
    assert seen == {"a": (128, 8192, "tma_128b"), "b": (32, "tma_32b")}
    assert ".shared .align 1024 .b8 wgmma_tile_0[8192];" in text
    const = matrix_descriptor_bits(0, 16, 1024, 128)
    assert f"or.b64 %rd2, %rd1, 0x{const:X};" in text


def test_descriptor_needs_explicit_strides_for_mn_major() -> None:
    @kernel(arch="sm_90a")
    def k():
        smem.wgmma_tile(bf16, (16, 64), major="MN").desc()
    with pytest.raises(TraceError, match=r"desc\(\): pass lbo= and sbo= for a MN-major, swizzle=128 tile"):
        k.ptx()


def test_mbarrier_array_addresses() -> None:
    @kernel(arch="sm_90a")
    def k():
        bars = smem.mbarrier(3)
        ptx.mbarrier.init.shared.b64(bars[2], 1)
    assert "mbarrier.init.shared.b64 [mbar_0+16], 1;" in k.ptx()


@pytest.mark.parametrize("call, message", [
    (lambda: smem.alloc(f32, (0, 4)), r"shape: expected positive ints, got \(0, 4\)"),
    (lambda: smem.alloc(f32, 4, align=3), r"align: expected a power of two, got 3"),
    (lambda: smem.wgmma_tile(bf16, (64, 64), major="X"), r"major: expected 'K' or 'MN', got 'X'"),
    (lambda: smem.mbarrier(0), r"count: expected a positive int, got 0"),
    (lambda: smem.alloc(f32, (4, 4))[1], r"expected 2 indices, got 1"),
    (lambda: smem.alloc(f32, 4)[1.5], r"index: expected int or u32 register, got 1.5"),
])
def test_bad_smem_requests(call, message) -> None:
    @kernel(arch="sm_90a")
    def k():
        call()
    with pytest.raises(TraceError, match=message):
        k.ptx()


def test_named_arrays_and_duplicates() -> None:
    @kernel(arch="sm_80")
    def k():
        smem.alloc(u32, 4, name="buf")
        smem.alloc(u32, 4, name="buf")
    with pytest.raises(TraceError, match=r"name 'buf' is already used in kernel k"):
        k.ptx()



"""The pure parts of the ``tcgen05.mma`` emulation against the PTX ISA's own
tables and worked examples: instruction-descriptor fields, sm_100
shared-memory descriptors and canonical-layout addresses, data path layouts,
the zero-column mask."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx.sim import SimError
from jaxptx.sim.semantics.tcgen05_idesc import decode_idesc
from jaxptx.sim.semantics.tcgen05_mma import zero_column_mask
from jaxptx.sim.semantics.tcgen05_operands import d_layout
from jaxptx.sim.semantics.tcgen05_smem import chunk_addresses, decode_smem_desc
from tcgen05_mma_harness import canonical, cute_offset, desc, idesc, idesc_scaled, swizzle


def test_idesc_fields_of_every_kind() -> None:
    d = decode_idesc(idesc(1, 1, 1, 128, 256, neg_a=1, mn_b=1), "kind::f16", cta_group=1, ws=False, what="t")
    assert (d.atype, d.btype, d.dtype, d.m, d.n, d.k, d.negate_a, d.negate_b, d.mn_major_a, d.mn_major_b) == \
        ("bf16", "bf16", "f32", 128, 256, 16, True, False, False, True)
    d = decode_idesc(idesc(5, 3, 0, 64, 8), "kind::f8f6f4", cta_group=1, ws=False, what="t")
    assert (d.atype, d.btype, d.dtype, d.k) == ("e2m1", "e2m3", "f16", 32)
    d = decode_idesc(idesc(1, 0, 2, 256, 64, sat=1), "kind::i8", cta_group=2, ws=False, what="t")
    assert (d.atype, d.btype, d.dtype, d.saturate) == ("s8", "u8", "s32", True)
    d = decode_idesc(idesc(2, 2, 1, 32, 64) | 3 << 30, "kind::tf32", cta_group=1, ws=True, what="t")
    assert (d.m, d.n, d.k, d.max_shift) == (32, 64, 8, 32)
    d = decode_idesc(idesc_scaled(1, 1, 128, 64, ue8m0=0, sfa=2, sfb=2), "kind::mxf4nvf4", cta_group=1,
                     ws=False, what="t")
    assert (d.scale_type, d.sfa_id, d.sfb_id, d.m, d.k) == ("ue4m3", 2, 2, 128, 64)


@pytest.mark.parametrize("word,kind,group,ws,message", [
    (idesc(0, 0, 1, 64, 32), "kind::f16", 2, False, r"M .* must be one of 128, 256 for \.kind::f16 with \.cta_group::2 .*got 64"),
    (idesc(0, 0, 1, 128, 24), "kind::f16", 2, False, "N .* must be a multiple of 16 .*got 24"),
    (idesc(1, 1, 2, 128, 40), "kind::i8", 1, False, "N .* must be 8, 16, 24, 32 or a multiple of 16 .*got 40"),
    (idesc(1, 1, 2, 128, 32, neg_a=1), "kind::i8", 1, False, "negate A/B"),
    (idesc(0, 0, 1, 128, 8, mn_b=1), "kind::f8f6f4", 1, False, "transposed 8-bit B"),
    (idesc(0, 0, 1, 128, 32), "kind::f16", 1, True, "N .* must be 64/128/256 .*got 32"),
    (idesc(0, 0, 1, 128, 64) | 1 << 30, "kind::f16", 1, False, "maximum shift .* without .ws"),
    (idesc_scaled(1, 1, 128, 64, ue8m0=0), "kind::mxf4", 1, False, "scale type \\(bit 23\\) must be 1 \\(ue8m0\\)"),
    (idesc_scaled(1, 1, 128, 64) | 1 << 31, "kind::mxf4", 1, False, "K = 96"),
    (idesc_scaled(0, 0, 128, 64, mn_a=1), "kind::mxf4", 1, False, "atype"),
    (idesc_scaled(0, 0, 256, 64), "kind::mxf8f6f4", 1, False, r"M .* must be one of 128 for \.kind::mxf8f6f4 .*got 256"),
])
def test_idesc_values_the_isa_does_not_define_are_refused(word, kind, group, ws, message) -> None:
    with pytest.raises(SimError, match=message):
        decode_idesc(word, kind, cta_group=group, ws=ws, what="tcgen05.mma")


def test_smem_descriptor_fields() -> None:
    d = decode_smem_desc(desc(0x3FFF0, 0x1230, 0x4560, 4, base=5), "t")
    assert (d.start, d.lbo, d.sbo, d.base_offset, d.mode.tcgen05, d.swizzle) == (0x3FFF0, 0x1230, 0x4560, 5, 4, "64B")
    with pytest.raises(SimError, match="sm_103a"):
        decode_smem_desc(desc(0, 16, 16, 2) | 1 << 52, "t")
    with pytest.raises(SimError, match="got 5"):
        decode_smem_desc(desc(0, 16, 16, 0) | 5 << 61, "t")


# The ISA's canonical-layout examples (9.7.16.3.3): exact CuTe layouts, in elements.
ISA_EXAMPLES = [
    ("K", 0, 4, (((8, 2), (4, 4)), ((4, 32), (1, 64))), 64, 32),
    ("K", 6, 4, (((8, 2), (4, 4)), ((8, 64), (1, 4))), 1, 64),
    ("MN", 0, 8, (((8, 1, 2), (8, 2)), ((1, 8, 64), (8, 128))), 128, 64),
    ("MN", 6, 8, (((8, 2, 2), (8, 2)), ((1, 8, 128), (16, 256))), 128, 256),
    ("MN", 4, 8, (((8, 4, 2), (8, 2)), ((1, 8, 256), (32, 512))), 256, 512),
]


@pytest.mark.parametrize("major,mode,T,exact,lbo,sbo", ISA_EXAMPLES)
def test_chunk_addresses_match_the_isa_examples(major, mode, T, exact, lbo, sbo) -> None:
    (sx, sy), (tx, ty) = exact
    mn, k = int(np.prod(sx)), int(np.prod(sy))
    size = 16 // T
    d = decode_smem_desc(desc(4096, lbo * size if lbo > 1 else 16, sbo * size, mode), "t")
    got = chunk_addresses(d, mn, k, T, major == "MN")
    want = np.array([[swizzle(mode, 4096 + ((cute_offset(sx, tx, x) + cute_offset(sy, ty, y)) // T) * 16)
                      for y in range(k)] for x in range(mn)])
    np.testing.assert_array_equal(got, want)


def test_base_offset_shifts_the_swizzle_phase() -> None:
    """A 128B-swizzled K-major tile starting 256 bytes into a 1024-byte
    pattern: base offset (256 >> 7) & 7 = 2 gives the pattern of the tile at 0."""
    _, _, sbo = canonical("K", 2, 8, 16, 16)
    at0 = chunk_addresses(decode_smem_desc(desc(0, 16, sbo * 2, 2), "t"), 16, 16, 8, False)
    at256 = chunk_addresses(decode_smem_desc(desc(256, 16, sbo * 2, 2, base=2), "t"), 16, 16, 8, False)
    np.testing.assert_array_equal(at256 - 256, at0)


def test_data_path_layouts() -> None:
    name, rows, lanes, cols = d_layout(64, 16, 1, False)
    assert name == "F" and rows == 64
    assert list(lanes[[0, 15, 16, 31, 32, 63], 0]) == [0, 15, 32, 47, 64, 111] and (cols[0] == np.arange(16)).all()
    name, rows, lanes, cols = d_layout(32, 64, 1, True)
    assert name == "G" and (lanes[5, [0, 15, 16, 63]] == [5, 5, 37, 101]).all()
    assert (cols[5, [0, 15, 16, 63]] == [0, 15, 0, 15]).all()
    name, rows, lanes, cols = d_layout(128, 64, 2, False)
    assert name == "B" and rows == 64 and (lanes[3, [0, 31, 32]] == [3, 3, 67]).all()
    assert [d_layout(*a)[0] for a in ((256, 64, 2, False), (128, 64, 1, False), (64, 64, 1, True))] == \
        ["A", "D", "E"]


def _mask_bits(mask: np.ndarray) -> str:
    """The mask written as the ISA does: most significant column first."""
    return "".join("1" if b else "0" for b in mask[::-1])


def test_zero_column_mask_isa_examples() -> None:
    """PTX ISA 9.7.16.4.3, examples 1-4."""
    mask, shift = zero_column_mask(0 | 4 << 40 | 3 << 48, 128, 64)
    assert not mask.any() and shift == 0
    mask, _ = zero_column_mask(1 << 39 | 2 << 40 | 3 << 48, 128, 14)
    assert _mask_bits(mask) == "11100001110000"
    mask, _ = zero_column_mask(1 << 32 | 1 << 39 | 2 << 40 | 3 << 48, 64, 34)
    assert _mask_bits(mask[:17]) == "11100001110000111"
    assert _mask_bits(mask[17:]).endswith("11100001110000")
    word = 0 | 1 << 8 | 2 << 16 | 1 << 24 | 0b0011 << 32 | 1 << 39 | 2 << 40 | 3 << 48 | 2 << 56
    mask, shift = zero_column_mask(word, 32, 64)
    assert shift == 2
    shown = ["00001110000111", "0000111000011", "111000011100", "1110000111000"]   # the ISA's "..." tails
    for p, tail in enumerate(shown):
        assert _mask_bits(mask[16 * p:16 * (p + 1)]).endswith(tail), p

"""The bit-level encodings of :mod:`jaxptx.isa.encodings`: every valid value
survives a round trip (``decode(encode(x)) == x``), every valid word too
(``encode(decode(w)) == w``), descriptors taken from real compilers' PTX
decode to the fields they mean (so a field at a wrong bit fails), and bad
fields are refused with messages that name them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxptx.isa.encodings import (
    AB_TYPES,
    BLOCK_SCALED,
    D_TYPES,
    ELEMTYPES,
    KINDS,
    SWIZZLES,
    EncodingError,
    InstrDesc,
    MatrixDescriptor,
    SmemDescriptor,
    TensorMap,
    idesc_fields,
    swizzle,
    swizzle_from_code,
)
from jaxptx.types import TYPES

# ---------------------------------------------------------------- the swizzle table


def test_each_encoding_gives_each_mode_its_own_code() -> None:
    for encoding in ("wgmma", "tcgen05", "cu_tensor_map"):
        used = [getattr(s, encoding) for s in SWIZZLES if getattr(s, encoding) is not None]
        assert len(used) == len(set(used)), encoding
    assert [swizzle(b).name for b in (0, 32, 64, 128)] == ["none", "32B", "64B", "128B"]
    # PTX ISA "Matrix Descriptor Format" / "Shared memory descriptor" (bits 62-63 / 61-63).
    assert {s.name: s.wgmma for s in SWIZZLES if s.wgmma is not None} == {"none": 0, "128B": 1, "64B": 2, "32B": 3}
    assert {s.name: s.tcgen05 for s in SWIZZLES if s.tcgen05 is not None} == \
        {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}


def test_cu_tensor_map_codes_match_the_driver_enum() -> None:
    driver = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    for s in SWIZZLES:
        want = "CU_TENSOR_MAP_SWIZZLE_" + {"none": "NONE", "128B_base32B": "128B_ATOM_32B",
                                            "128B_atom32B_flip8B": "128B_ATOM_32B_FLIP_8B",
                                            "128B_atom64B": "128B_ATOM_64B"}.get(s.name, s.name)
        assert int(getattr(driver.CUtensorMapSwizzle, want)) == s.cu_tensor_map, s.name


def test_unknown_modes_and_codes_are_refused() -> None:
    with pytest.raises(EncodingError, match=r"swizzle must be one of \['none', '32B'.* got 16"):
        swizzle(16)
    with pytest.raises(EncodingError, match=r"tcgen05 swizzle code must be one of 0, 1, 2, 4, 6, got 3"):
        swizzle_from_code("tcgen05", 3)


# ---------------------------------------------------------------- matrix descriptors

_OFFSETS = st.integers(0, (1 << 14) - 1).map(lambda x: x << 4)


@given(_OFFSETS, _OFFSETS, _OFFSETS, st.integers(0, 7), st.sampled_from(["none", "32B", "64B", "128B"]))
def test_wgmma_descriptor_round_trips(start: int, lbo: int, sbo: int, base: int, mode: str) -> None:
    d = MatrixDescriptor(start, lbo, sbo, base, mode)
    word = d.encode()
    assert MatrixDescriptor.decode(word) == d
    assert MatrixDescriptor.decode(word).encode() == word


@given(st.integers(0, (1 << 64) - 1))
def test_every_wgmma_word_without_unused_bits_round_trips(word: int) -> None:
    word &= 0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 7 << 49 | 3 << 62
    assert MatrixDescriptor.decode(word).encode() == word


@given(_OFFSETS, _OFFSETS, _OFFSETS, st.integers(0, 7),
       st.sampled_from(["none", "128B_base32B", "128B", "64B", "32B"]), st.integers(0, 1))
def test_tcgen05_descriptor_round_trips(start: int, lbo: int, sbo: int, base: int, mode: str, lbo_mode: int) -> None:
    d = SmemDescriptor(start, lbo, sbo, base, mode, lbo_mode)
    assert SmemDescriptor.decode(d.encode()) == d


@given(st.integers(0, (1 << 64) - 1), st.sampled_from([0, 1, 2, 4, 6]))
def test_every_tcgen05_word_without_unused_bits_round_trips(word: int, code: int) -> None:
    word = word & (0x3FFF | 0x3FFF << 16 | 0x3FFF << 32 | 7 << 49 | 1 << 52) | 1 << 46 | code << 61
    assert SmemDescriptor.decode(word).encode() == word


def test_descriptors_from_compiled_kernels() -> None:
    # Triton 3.9, tl.dot matmul for sm_90a (BM=128, BN=64, BK=64, f16): `or.b64 %rd, %rd, 4611686293305294848`.
    assert MatrixDescriptor.decode(4611686293305294848) == MatrixDescriptor(0, 0, 1024, 0, "128B")
    # Triton (../shared/corpus/pyptx/external/triton/matmul_wgmma_v32_sm90a.ptx): A and B operands.
    assert MatrixDescriptor.decode(4611686293372403712) == MatrixDescriptor(0, 16384, 1024, 0, "128B")
    assert MatrixDescriptor.decode(4611686293338849280) == MatrixDescriptor(0, 8192, 1024, 0, "128B")
    # Triton 3.9 for sm_100a: the descriptor's high word `mov.b32 %r237, 1073758272` over a start-only low word.
    assert SmemDescriptor.decode(1073758272 << 32 | 0x40) == SmemDescriptor(0x400, 0, 1024, 0, "128B")
    # pyptx's B128_MASKED_DESC (its 128B K-major operand descriptor, start OR-ed in).
    assert SmemDescriptor.decode(0x4000404000010000) == SmemDescriptor(0, 16, 1024, 0, "128B")


@pytest.mark.parametrize("make, message", [
    (lambda: MatrixDescriptor(lbo=8).encode(), r"LBO must be a multiple of 16 bytes in \[0, 262144\), got 8"),
    (lambda: MatrixDescriptor(sbo=1 << 18).encode(), r"SBO must be a multiple of 16 bytes .* got 262144"),
    (lambda: MatrixDescriptor(base_offset=8).encode(), r"base_offset \(bits 49-51\) must be an int in \[0, 8\)"),
    (lambda: MatrixDescriptor(swizzle="128B_base32B").encode(), r"swizzle must be a mode of this descriptor"),
    (lambda: MatrixDescriptor.decode(1 << 14), r"bit 14 \(unused\) must be 0, got 0x0000000000004000"),
    (lambda: SmemDescriptor.decode(0), r"bits 46-48 must be the fixed value 0b001 .* got 0b000"),
    (lambda: SmemDescriptor.decode(1 << 46 | 3 << 61), r"swizzle mode \(bits 61-63\) must be 0, 1, 2, 4 or 6, got 3"),
    (lambda: SmemDescriptor.decode(1 << 46 | 1 << 55), r"bit 55 \(unused\) must be 0"),
    (lambda: SmemDescriptor(lbo_mode=2).encode(), r"lbo_mode \(bit 52\) must be an int in \[0, 2\), got 2"),
])
def test_bad_descriptor_fields_are_refused(make, message) -> None:
    with pytest.raises(EncodingError, match=message):
        make()


# ---------------------------------------------------------------- instruction descriptors

@st.composite
def instr_descs(draw) -> InstrDesc:
    kind = draw(st.sampled_from(KINDS))
    types = list(AB_TYPES[kind].values())
    a = draw(st.sampled_from(types))
    b = a if kind == "kind::f16" else draw(st.sampled_from(types))
    fp4 = kind in ("kind::mxf4", "kind::mxf4nvf4")
    common = {"kind": kind, "n": 8 * draw(st.integers(0, 63)), "atype": a, "btype": b,
              "negate_a": kind != "kind::i8" and draw(st.booleans()),
              "negate_b": kind != "kind::i8" and draw(st.booleans()),
              "mn_major_a": not fp4 and draw(st.booleans()), "mn_major_b": not fp4 and draw(st.booleans()),
              "sparse": draw(st.booleans())}
    if kind in BLOCK_SCALED:
        scales = ["ue8m0", "ue4m3"] if kind == "kind::mxf4nvf4" else ["ue8m0"]
        return InstrDesc(m=128 * draw(st.integers(0, 3)), dtype="f32", scale_type=draw(st.sampled_from(scales)),
                         sfa_id=draw(st.integers(0, 3)), sfb_id=draw(st.integers(0, 3)), **common)
    return InstrDesc(m=16 * draw(st.integers(0, 31)), dtype=draw(st.sampled_from(list(D_TYPES[kind].values()))),
                     saturate=kind == "kind::i8" and draw(st.booleans()),
                     sparsity_selector=draw(st.integers(0, 3)), max_shift=draw(st.sampled_from([0, 8, 16, 32])),
                     **common)


@given(instr_descs())
def test_instruction_descriptor_round_trips(d: InstrDesc) -> None:
    word = d.encode()
    assert 0 <= word < 1 << 32
    assert InstrDesc.decode(word, d.kind) == d


@st.composite
def instr_words(draw) -> tuple[str, int]:
    """A kind and a word it defines: random bits in the kind's fields, then
    each field the ISA restricts set to a value it allows."""
    kind = draw(st.sampled_from(KINDS))
    f = idesc_fields(kind)
    word = draw(st.integers(0, (1 << 32) - 1)) & sum(x.mask for x in f.values())

    def put(name: str, value: int) -> None:
        nonlocal word
        word = word & ~f[name].mask | value << f[name].lo
    a = draw(st.sampled_from(list(AB_TYPES[kind])))
    put("atype", a)
    put("btype", a if kind == "kind::f16" else draw(st.sampled_from(list(AB_TYPES[kind]))))
    if kind == "kind::i8":
        put("negate_a", 0)
        put("negate_b", 0)
    if kind in ("kind::mxf4", "kind::mxf4nvf4"):
        put("mn_major_a", 0)
        put("mn_major_b", 0)
    if kind in BLOCK_SCALED:
        put("scale_type", draw(st.integers(0, 1)) if kind == "kind::mxf4nvf4" else 1)
    else:
        put("dtype", draw(st.sampled_from(list(D_TYPES[kind]))))
        put("saturate", draw(st.integers(0, 1)) if kind == "kind::i8" else 0)
    return kind, word


@settings(max_examples=300)
@given(instr_words())
def test_every_valid_instruction_word_round_trips(case: tuple[str, int]) -> None:
    kind, word = case
    assert InstrDesc.decode(word, kind).encode() == word


def test_instruction_descriptor_from_a_compiled_kernel() -> None:
    # Triton 3.9, tl.dot matmul for sm_100a (BM=128, BN=64, f16 in, f32 out, B MN-major):
    # `mov.b32 %r231, 135331856` feeding tcgen05.mma.cta_group::1.kind::f16.
    d = InstrDesc.decode(135331856, "kind::f16")
    assert d == InstrDesc("f16", 128, 64, "f16", "f16", "f32", mn_major_b=True)
    assert (d.k, d.encode()) == (16, 135331856)
    d.check_shape(cta_group=1, ws=False)


@pytest.mark.parametrize("make, message", [
    (lambda: InstrDesc("f16", 128, 64, "f16", "bf16").encode(), r"atype and btype must be one type for \.kind::f16"),
    (lambda: InstrDesc("f16", 128, 64, "e4m3", "e4m3").encode(), r"atype must be one of \['f16', 'bf16'\] .*'e4m3'"),
    (lambda: InstrDesc("i8", 128, 64, "s8", "s8", "s32", negate_a=True).encode(),
     r"negate_a and negate_b must be False"),
    (lambda: InstrDesc("f16", 128, 64, "f16", "f16", saturate=True).encode(),
     r"saturate must be False for \.kind::f16"),
    (lambda: InstrDesc("mxf4", 128, 64, "e2m1", "e2m1", mn_major_a=True).encode(), r"no transpose for 4-bit"),
    (lambda: InstrDesc("f16", 128, 64, "f16", "f16", max_shift=4).encode(), r"max_shift must be 0, 8, 16 or 32, got 4"),
    (lambda: InstrDesc("f16", 8, 64, "f16", "f16").encode(), r"m must be a multiple of 16, got 8"),
    (lambda: InstrDesc("fp8", 128, 64, "e4m3", "e4m3"), r"kind must be one of \['f16', 'tf32'"),
    (lambda: InstrDesc.decode(1 << 6 | 1 << 4, "kind::f16"), r"bit 6 \(reserved\) must be 0 for \.kind::f16, got 1"),
    (lambda: InstrDesc.decode(1 << 31 | 1 << 23 | 1 << 7 | 1 << 10, "kind::mxf4"), r"K = 96"),
    (lambda: InstrDesc.decode(1 << 7 | 1 << 10 | 1 << 27, "kind::mxf4"), r"scale type \(bit 23\) must be 1"),
    (lambda: InstrDesc("f16", 48, 64, "f16", "f16").check_shape(1, False), r"M \(bits 24-28\) must be one of 64, 128"),
    (lambda: InstrDesc("f16", 128, 64, "f16", "f16", max_shift=8).check_shape(1, False), r"0 without \.ws"),
])
def test_bad_instruction_descriptors_are_refused(make, message) -> None:
    with pytest.raises(EncodingError, match=message):
        make()


# ---------------------------------------------------------------- tensor maps

@st.composite
def tensor_maps(draw) -> TensorMap:
    elemtype = draw(st.sampled_from(list(ELEMTYPES)))
    size = ELEMTYPES[elemtype][1]
    span = draw(st.sampled_from([0, 32, 64, 128]))
    im2col = draw(st.booleans())
    rank = draw(st.integers(3 if im2col else 1, 5))
    inner = 16 * draw(st.integers(1, min(span or 4096, 256 * size) // 16))     # the inner box row, bytes
    dims = tuple(draw(st.integers(1, (1 << 32) - 1)) for _ in range(rank))
    estr = tuple(draw(st.integers(1, 8)) for _ in range(rank))
    strides = tuple(16 * draw(st.integers(0, (1 << 36) - 1)) for _ in range(rank - 1))
    address = 16 * draw(st.integers(0, (1 << 60) - 1))
    floating = TYPES[ELEMTYPES[elemtype][0].split(".")[0]].is_float
    extra: dict = {"swizzle": span, "atomicity": draw(st.integers(0, 3)) if span == 128 else 0,
                   "fill": draw(st.integers(0, 1)) if floating else 0}
    if im2col:
        bits = {3: 16, 4: 8, 5: 5}[rank]
        corner = st.integers(-(1 << bits - 1), (1 << bits - 1) - 1)
        extra.update(mode=1, channels=inner // size, pixels=draw(st.integers(1, 1024)),
                     lower=tuple(draw(corner) for _ in range(rank - 2)),
                     upper=tuple(draw(corner) for _ in range(rank - 2)))
        box = (0,) * rank
    else:
        box = (inner // size,) + tuple(draw(st.integers(1, 256)) for _ in range(rank - 1))
    return TensorMap(address, elemtype, dims, box, strides, estr, **extra)


@given(tensor_maps())
def test_tensor_map_round_trips(tm: TensorMap) -> None:
    raw = tm.encode()
    assert len(raw) == 128
    assert TensorMap.decode(raw) == tm
    assert TensorMap.decode(raw).encode() == raw


def test_tensor_map_bytes_sit_where_the_layout_says() -> None:
    """The module docstring's table, packed here by hand."""
    tm = TensorMap(0x7000_0000_0010, TensorMap.elemtype_of("bf16"), (64, 1024), (64, 128), (2048,), (1, 1),
                   swizzle=128, atomicity=1)
    want = bytearray(128)
    struct.pack_into("<IBBBBBBBBHH", want, 0, 0x4D54504A, 1, 1, 10, 3, 0, 0, 1, 0, 0, 0)
    struct.pack_into("<Q", want, 16, 0x7000_0000_0010)
    struct.pack_into("<2I", want, 24, 64, 1024)
    struct.pack_into("<2I", want, 44, 64, 128)
    struct.pack_into("<Q", want, 64, 2048)
    struct.pack_into("<2I", want, 96, 1, 1)
    assert tm.encode() == bytes(want)


@pytest.mark.parametrize("make, message", [
    (lambda: TensorMap.decode(bytes(128)), r"magic and version must be 0x4d54504a and 1"),
    (lambda: TensorMap(0, 7, (64,), (16,), (), (1,), swizzle=64, atomicity=3).encode(),
     r"swizzle atomicity must be 16B \(code 0\) without the 128-byte swizzle, got 64B \(code 3\)"),
    (lambda: TensorMap(0, 7, (64,), (64,), (), (1,), swizzle=32).encode(),
     r"the inner box dimension must be at most the 32-byte swizzle span, got 256 bytes"),
    (lambda: TensorMap(8, 7, (64,), (4,), (), (1,)).encode(), r"global address must be 16-byte aligned, got 0x8"),
    (lambda: TensorMap(0, 2, (64,), (4,), (), (1,), fill=1).encode(), r"OOB-NaN fill map must be a floating-point"),
    (lambda: TensorMap(0, 7, (64,), (4,), (), (1,), swizzle=16).encode(), r"swizzle must be 0, 32, 64 or 128"),
    (lambda: TensorMap.elemtype_of("f8"), r"element type must be one of \['u8'"),
])
def test_bad_tensor_maps_are_refused(make, message) -> None:
    with pytest.raises(EncodingError, match=message):
        make()

"""The sm_100a helpers of ``jaxptx.dsl.tcgen05``: descriptors decoded by the
emulator's own decoders, and one ``tcgen05.mma`` per layout run on the
emulator from shared-memory images built here (independently of the helpers)
and checked against numpy."""

from __future__ import annotations

import doctest

import ml_dtypes
import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, reg, sim, smem
from jaxptx.dsl import tcgen05
from jaxptx.errors import TraceError
from jaxptx.runtime import ptxas
from jaxptx.sim.semantics.tcgen05_idesc import decode_idesc
from jaxptx.sim.semantics.tcgen05_smem import decode_smem_desc
from jaxptx.types import b32, f32, u32

RNG = np.random.default_rng(11)
SPAN = {"128B": 128, "64B": 64, "32B": 32}


def test_module_doctests() -> None:
    result = doctest.testmod(tcgen05, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("swizzle, code", [("none", 0), ("128B_base32B", 1), ("128B", 2), ("64B", 4),
                                           ("32B", 6), (128, 2), (64, 4), (32, 6), (0, 0)])
def test_smem_descriptor_fields_decode_as_the_emulator_reads_them(swizzle, code) -> None:
    word = tcgen05.smem_desc_bits(start=0x1230, lbo=4096, sbo=1024, swizzle=swizzle, base_offset=3)
    d = decode_smem_desc(word, "test")
    assert (d.start, d.lbo, d.sbo, d.base_offset, d.mode.tcgen05) == (0x1230, 4096, 1024, 3, code)
    assert (word >> 46) & 7 == 1 and (word >> 52) & 0xFF == 0


@pytest.mark.parametrize("bad, message", [
    (dict(lbo=8), r"shared memory descriptor: LBO must be a multiple of 16 bytes in \[0, 262144\), got 8\b"),
    (dict(sbo=1 << 18), (r"shared memory descriptor: SBO must be a multiple of 16 bytes in \[0, 262144\), "
                         r"got 262144\b")),
    (dict(swizzle="16B"), (r"tcgen05 swizzle: expected one of \['none', '128B_base32B', '128B', '64B', '32B'\] "
                           r"or 0/32/64/128 bytes, got '16B'")),
    (dict(base_offset=8), r"shared memory descriptor: base_offset \(bits 49-51\) must be an int in \[0, 8\), got 8\b"),
])
def test_smem_descriptor_refuses_bad_fields(bad, message) -> None:
    args = dict(lbo=16, sbo=1024, swizzle="128B") | bad
    with pytest.raises(TraceError, match=message + r", at test_tcgen05_helpers\.py:\d+"):
        tcgen05.smem_desc_bits(**args)


@pytest.mark.parametrize("kind, a, b, d, m, n, extra", [
    ("f16", "bf16", "bf16", "f32", 128, 256, dict(b_major="MN")),
    ("f16", "f16", "f16", "f16", 64, 8, dict(a_major="MN", negate_a=True)),
    ("f16", "bf16", "bf16", "f32", 256, 256, dict(cta_group=2, negate_b=True)),
    ("tf32", "tf32", "tf32", "f32", 128, 64, {}),
    ("f8f6f4", "e4m3", "e2m1", "f32", 128, 128, {}),
    ("i8", "s8", "u8", "s32", 128, 32, dict(saturate=True)),
])
def test_instruction_descriptor_decodes_as_the_emulator_reads_it(kind, a, b, d, m, n, extra) -> None:
    word = tcgen05.instr_desc(kind=kind, a=a, b=b, d=d, m=m, n=n, **extra)
    got = decode_idesc(word, f"kind::{kind}", cta_group=extra.get("cta_group", 1), ws=False, what="t")
    assert (got.atype, got.btype, got.dtype, got.m, got.n) == (a, b, d, m, n)
    assert got.mn_major_a == (extra.get("a_major") == "MN")
    assert got.mn_major_b == (extra.get("b_major") == "MN")
    assert (got.negate_a, got.negate_b) == (extra.get("negate_a", False), extra.get("negate_b", False))
    assert got.saturate == extra.get("saturate", False) and not got.sparse


@pytest.mark.parametrize("bad, message", [
    (dict(a="f16", b="bf16"), r"atype and btype must be one type for \.kind::f16, got f16 and bf16"),
    (dict(kind="f16", a="e4m3"), r"atype must be one of \['f16', 'bf16'\] for \.kind::f16, got 'e4m3'"),
    (dict(m=256), (r"M \(bits 24-28\) must be one of 64, 128 for \.kind::f16 with \.cta_group::1 \(PTX ISA "
                   r"Table 39\), got 256")),
    (dict(n=260), r"n must be a multiple of 8, got 260"),
    (dict(n=264), (r"N \(bits 17-22\) must be a multiple of 8 in \[8, 256\] for \.kind::f16 with "
                   r"\.cta_group::1 \(PTX ISA Table 39\), got 264")),
    (dict(cta_group=2, m=64), (r"M \(bits 24-28\) must be one of 128, 256 for \.kind::f16 with "
                               r"\.cta_group::2 \(PTX ISA Table 39\), got 64")),
    (dict(kind="i8", a="s8", n=40), (r"N \(bits 17-22\) must be 8, 16, 24, 32 or a multiple of 16 in \[8, 256\] "
                                     r"for \.kind::i8 with \.cta_group::1 \(PTX ISA Table 39\), got 40")),
    (dict(d="s32"), r"dtype must be one of \['f16', 'f32'\] for \.kind::f16, got 's32'"),
    (dict(kind="i8", a="s8", negate_a=True), r"negate_a and negate_b must be False for \.kind::i8, got True and False"),
    (dict(b_major="T"), r"b_major must be 'K' or 'MN', got 'T'"),
])
def test_instruction_descriptor_refuses_what_the_kind_lacks(bad, message) -> None:
    where = r", at test_tcgen05_helpers\.py:\d+"
    with pytest.raises(TraceError, match=r"^tcgen05\.instr_desc: " + message + where):
        tcgen05.instr_desc(**bad)


def test_tensor_memory_columns_must_be_a_power_of_two_from_32() -> None:
    for ncols in (16, 48, 1024):
        @kernel(arch="sm_100a")
        def k(*, n=ncols):
            tcgen05.TensorMemory(n)
        with pytest.raises(TraceError, match="power of two"):
            k.ptx()


def test_k_offsets() -> None:
    kw = dict(dtype="bf16", swizzle="128B")
    assert tcgen05.k_offset(48, major="K", shape=(128, 64), **kw) == 96
    assert tcgen05.k_offset(64, major="K", shape=(128, 128), **kw) == 128 * 128   # the next span block
    assert tcgen05.k_offset(24, major="MN", shape=(64, 128), **kw) == 3 * 1024
    assert tcgen05.k_offset(16, major="K", dtype="f16", swizzle="none", shape=(128, 64), lbo=128) == 256
    with pytest.raises(TraceError, match=r"tcgen05\.k_offset: K-major k=4 is not a whole 16-byte chunk"):
        tcgen05.k_offset(4, major="K", shape=(128, 64), **kw)
    with pytest.raises(TraceError, match=r"tcgen05\.k_offset: MN-major k=4 is not a multiple of 8 rows"):
        tcgen05.k_offset(4, major="MN", shape=(64, 128), **kw)


# ----------------------------------------------------------------- one MMA on the emulator

def _swizzled(addr: np.ndarray, span: int) -> np.ndarray:
    """TMA's swizzle of byte addresses in a 1024-aligned tile: the 16-byte
    chunk index (bits 4..) XOR the row index within the pattern (bits 7..)."""
    bits = {128: 3, 64: 2, 32: 1}[span]
    mask = (1 << bits) - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def _image(x: np.ndarray, major: str, span: int) -> np.ndarray:
    """Bytes of bf16 tile ``x`` as TMA lays it out: ``x`` is (MN, K) for
    K-major, (K, MN) for MN-major (rows by contiguous columns); boxes one span
    wide, one after another, each swizzled."""
    rows, cols = x.shape
    per = span // 2
    raw = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    addr = (c // per) * (rows * span) + r * span + (c % per) * 2
    addr = _swizzled(addr, span)
    out = np.zeros(rows * cols * 2, np.uint8)
    out[addr] = raw & 0xFF
    out[addr + 1] = raw >> 8
    return out


def _mma_kernel(a_major: str, b_major: str, swizzle: str, m: int, n: int, k: int):
    span = SPAN[swizzle]
    a_shape = (m, k) if a_major == "K" else (k, m)
    b_shape = (n, k) if b_major == "K" else (k, n)
    nbytes = (m + n) * k * 2

    @kernel(in_specs=(Tile(nbytes // 4, u32),), out_specs=(Tile(m, n, f32),), block=(128, 1, 1),
            arch="sm_100a", extern_smem=True)
    def mma_once(img, out):
        tid = ptx.special.tid.x()
        tiles = smem.alloc(u32, (nbytes // 4,), align=1024)
        for i in ptx.range_(tid, nbytes // 4, 128, dtype=u32):
            v = ptx.ld.global_.u32(img.ptr + ptx.mul.wide.u32(i, 4))
            ptx.st.shared.u32(ptx.addr(tiles.base + i * 4), v)
        ptx.fence.proxy.async_.shared__cta()
        bar = smem.mbarrier(1)
        tm = tcgen05.TensorMemory(max(32, n))
        warp = tid // 32
        with ptx.if_(warp == 0):
            tm.alloc()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init.shared.b64(bar[0], 1)
            ptx.fence.mbarrier_init.release.cluster()
        tm.sync_after_alloc()
        taddr = tm.address()
        with ptx.if_(tid == 0):
            ka, kb = dict(major=a_major, swizzle=swizzle, dtype="bf16", shape=a_shape), \
                dict(major=b_major, swizzle=swizzle, dtype="bf16", shape=b_shape)
            lbo_a, sbo_a = tcgen05.canonical_strides(a_major, swizzle, "bf16", a_shape)
            lbo_b, sbo_b = tcgen05.canonical_strides(b_major, swizzle, "bf16", b_shape)
            da = tcgen05.smem_desc(tiles.base, swizzle=swizzle, lbo=lbo_a, sbo=sbo_a)
            db = tcgen05.smem_desc(tiles.base, swizzle=swizzle, lbo=lbo_b, sbo=sbo_b, offset=m * k * 2)
            idesc = reg.scalar(u32, tcgen05.instr_desc(a="bf16", m=m, n=n, a_major=a_major,
                                                       b_major=b_major))
            for kk in range(k // 16):
                acc = reg.pred(init=int(kk > 0))
                ptx.tcgen05.mma.cta_group__1.kind__f16(
                    ptx.addr(taddr), tcgen05.advance(da, tcgen05.k_offset(16 * kk, **ka)),
                    tcgen05.advance(db, tcgen05.k_offset(16 * kk, **kb)), idesc, acc)
            ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(bar[0])
        ok = reg.pred(init=0)
        for _ in ptx.while_(lambda: ~ok):
            ptx.mbarrier.try_wait.parity.shared.b64(ok, bar[0], 0)
        ptx.tcgen05.fence__after_thread_sync()
        row = out.ptr + ptx.mul.wide.u32(tid, n * 4)
        for c in range(0, n, 8):
            vals = reg.array(b32, 8)
            ptx.tcgen05.ld.sync.aligned._32x32b.x8.b32(vals, ptx.addr(taddr + ((warp * 32) << 16) + c))
            ptx.tcgen05.wait__ld.sync.aligned()
            for j in range(8):
                ptx.st.global_.b32(row + (c + j) * 4, vals[j])
        ptx.tcgen05.fence__before_thread_sync()
        ptx.bar.sync(0)
        with ptx.if_(warp == 0):
            tm.dealloc(taddr)
            tm.relinquish()

    return mma_once


@pytest.mark.parametrize("a_major, b_major, swizzle, n, k", [
    ("K", "MN", "128B", 128, 128),     # the GEMM's layouts; K past one span for A
    ("K", "K", "64B", 64, 64),
    ("MN", "MN", "32B", 32, 32),
    ("MN", "K", "128B", 64, 64),
])
def test_one_mma_through_the_helpers_matches_numpy(a_major, b_major, swizzle, n, k) -> None:
    m = 128
    a = RNG.integers(-8, 9, size=(m, k)) / 4      # exact in bf16, sums exact in f32
    b = RNG.integers(-8, 9, size=(k, n)) / 4
    span = SPAN[swizzle]
    img = np.concatenate([_image(a if a_major == "K" else a.T, a_major, span),
                          _image(b.T if b_major == "K" else b, b_major, span)]).view(np.uint32)
    k_ = _mma_kernel(a_major, b_major, swizzle, m, n, k)
    ptxas(k_.ptx(), "sm_100a")
    out = np.zeros((m, n), np.float32)
    sim.launch(k_, img, out)
    np.testing.assert_array_equal(out, (a @ b).astype(np.float32))

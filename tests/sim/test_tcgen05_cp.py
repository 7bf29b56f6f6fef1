"""``tcgen05.cp`` (shared memory -> tensor memory by matrix descriptor) and
``tcgen05.shift.down`` on the emulator, against a numpy model written here
from the PTX ISA; every kernel is assembled by ptxas for sm_100a.

The model:

- Source (PTX ISA 9.7.16.4.1 "Shared memory descriptor", 9.7.16.3 canonical
  K-major layouts): a matrix of ``R`` rows of 128 or 256 bits, in 16-byte
  chunks. Without swizzling, 8-row core matrices of 8 x 16 contiguous bytes;
  core matrices ``SBO`` apart along the rows, chunks ``LBO`` apart.
  With a swizzle of ``W``-byte rows (32, 64, 128 B), row ``r`` at
  ``(r % 8) * W`` in its 8-row group (groups ``SBO`` apart), chunk ``c`` at
  ``16 c`` in the row, then the address is swizzled like CuTe's
  ``Swizzle<B, M, S>`` (bits ``[M+S, M+S+B)`` XORed into ``[M, M+B)``):
  ``<3,4,3>``, ``<2,4,3>``, ``<1,4,3>`` for 128/64/32 B, ``<2,5,2>`` for the
  128-byte swizzle with 32-byte atoms.
- Destination (PTX ISA 9.7.16.9.2 tcgen05.cp; the "Data Movement Shape"
  table): row ``r`` goes to lane ``r`` (``.128x256b``, ``.128x128b``), to lane
  ``32 r`` (``.4x256b``), to lanes ``r + 32 k``, k = 0..3 (``.32x128b.warpx4``:
  all four warps receive the data), to lanes ``r`` and ``r + 64``
  (``.64x128b.warpx2::02_13``: warps 0 and 2 hold rows 0-31, warps 1 and 3
  rows 32-63) or to lanes ``i + 64 h`` and ``i + 64 h + 32`` for
  ``r = i + 32 h`` (``.warpx2::01_23``: warps 0, 1 rows 0-31, warps 2, 3
  rows 32-63); the bytes of a row fill 4 or 8 consecutive 32-bit columns
  from ``taddr``'s column, little-endian.
- Decompression (PTX ISA "Optional Decompression"): a source chunk holds 16
  elements of 6 bits (``.b6x16_p32``: 12 bytes, then 4 of padding) or 4 bits
  (``.b4x16_p64``: 8 bytes, then 8 of padding), element ``e`` at bit ``6e``
  or ``4e``; the destination chunk holds 16 bytes, element ``e`` in byte
  ``e`` (a 6-bit value in bits 0-5, a 4-bit value in bits 2-5).
- ``tcgen05.shift.down`` (PTX ISA 9.7.16.9.3): the 32-byte (8-column) rows
  of lanes ``L .. L+30`` move one lane down; lane ``L`` (a multiple of 32)
  keeps its value.
- ``.cta_group::2``: one thread's instruction acts in both CTAs of the pair,
  each CTA copying from its own shared memory into its own tensor memory.

Each kernel (128 threads a CTA) copies an image into shared memory,
allocates 32 columns, fills them with a background ``0xB0000000 | lane << 8
| column`` (so cells the copy must not touch are checked too), lets thread 0
issue the copy or shift and ``tcgen05.commit`` to an mbarrier, waits on it,
reads all 128 x 32 cells back with ``tcgen05.ld.32x32b.x32`` and frees the
columns.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"
RNG = np.random.default_rng(1005)
SMEM = 17 * 1024                   # a 1 KiB lead-in plus 128 rows of 128 bytes
COLS = 32                          # columns allocated and read back

# Descriptor swizzle field -> (row bytes W, CuTe Swizzle B, M, S).
SWIZZLE = {0: (16, 0, 4, 3), 1: (128, 2, 5, 2), 2: (128, 3, 4, 3), 4: (64, 2, 4, 3), 6: (32, 1, 4, 3)}


# --- the numpy model ------------------------------------------------------------------------

def descriptor(start: int, lbo: int, sbo: int, swizzle: int) -> int:
    """An sm_100 shared-memory descriptor (PTX ISA "Shared memory descriptor"):
    start, LBO, SBO >> 4 in bits 0-13, 16-29, 32-45; 0b001 in bits 46-48;
    base offset 0; the swizzle mode in bits 61-63."""
    return ((start >> 4) & 0x3FFF) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | 1 << 46 | swizzle << 61


def chunk_address(r: int, c: int, start: int, lbo: int, sbo: int, swizzle: int) -> int:
    """Byte address of chunk ``c`` of row ``r`` (module docstring)."""
    width, b, m, s = SWIZZLE[swizzle]
    if swizzle == 0:
        return start + (r // 8) * sbo + (r % 8) * 16 + c * lbo
    addr = start + (r // 8) * sbo + (r % 8) * width + 16 * c
    high = ((1 << b) - 1) << (m + s)
    return addr ^ ((addr & high) >> s)


def decompress(chunk: np.ndarray, fmt: str) -> np.ndarray:
    """16 source bytes -> 16 destination bytes (module docstring)."""
    if not fmt:
        return chunk
    bits = 6 if fmt.endswith("b6x16_p32") else 4
    stream = int.from_bytes(chunk.tobytes(), "little")
    out = [(stream >> (bits * e)) & ((1 << bits) - 1) for e in range(16)]
    return np.array([v if bits == 6 else v << 2 for v in out], dtype=np.uint8)


def destination_lanes(shape: str, r: int) -> list[int]:
    """The lanes (from taddr's lane) row ``r`` is copied to."""
    if shape.startswith("128x"):
        return [r]
    if shape == "4x256b":
        return [32 * r]
    if shape == "32x128b.warpx4":
        return [r + 32 * k for k in range(4)]
    if shape == "64x128b.warpx2::02_13":
        return [r, r + 64]
    half, i = divmod(r, 32)            # 64x128b.warpx2::01_23
    return [i + 64 * half, i + 64 * half + 32]


def background() -> np.ndarray:
    """The cells every kernel writes before the copy or shift."""
    lanes = np.arange(128, dtype=np.uint32)[:, None]
    cols = np.arange(COLS, dtype=np.uint32)[None, :]
    return np.uint32(0xB0000000) | (lanes << np.uint32(8)) | cols


def copied(shape: str, fmt: str, image: np.ndarray, col: int, start: int, lbo: int, sbo: int,
           swizzle: int) -> np.ndarray:
    """The 128 x 32 cells after ``tcgen05.cp.<shape><fmt> [taddr + col]``."""
    cells = background()
    rows = int(shape.split("x")[0])
    chunks = 2 if "256b" in shape else 1
    for r in range(rows):
        data = np.concatenate([decompress(image[a:a + 16], fmt) for a in
                               (chunk_address(r, c, start, lbo, sbo, swizzle) for c in range(chunks))])
        words = data.view("<u4")
        for lane in destination_lanes(shape, r):
            cells[lane, col:col + len(words)] = words
    return cells


def shifted(lane: int, col: int) -> np.ndarray:
    """The 128 x 32 cells after ``tcgen05.shift.down [taddr + (lane << 16) + col]``."""
    cells = background()
    old = cells.copy()
    cells[lane + 1:lane + 32, col:col + 8] = old[lane:lane + 31, col:col + 8]
    return cells


# --- the kernel ---------------------------------------------------------------------------------

def _regs(first: int, n: int) -> str:
    """A brace-enclosed vector of n registers from %r<first>."""
    return "{" + ", ".join(f"%r{first + i}" for i in range(n)) + "}"


@functools.lru_cache(maxsize=None)
def kernel(op: str, ctas: int = 1) -> str:
    """The test kernel (module docstring), assembled by ptxas. ``op`` runs in
    thread 0 of the CTA of cluster rank 0 with ``%r12`` = the allocated
    address and ``%rd5`` = the ``desc`` parameter; ``{G}`` in ``op`` is the
    ``.cta_group``."""
    group = f"cta_group::{ctas}"
    sync = ("barrier.cluster.arrive.release.aligned;\n    barrier.cluster.wait.acquire.aligned;"
            if ctas == 2 else "bar.sync 0;")
    commit = (f"tcgen05.commit.{group}.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [bar], %rs1;"
              if ctas == 2 else f"tcgen05.commit.{group}.mbarrier::arrive::one.shared::cluster.b64 [bar];")
    fill = "\n    ".join(f"or.b32 %r{16 + c}, %r11, {c};" for c in range(COLS))
    dump = "\n    ".join(f"st.global.u32 [%rd7+{4 * c}], %r{16 + c};" for c in range(COLS))
    text = HEAD + f""".visible .entry k(.param .u64 img, .param .u64 out, .param .u64 desc)
{{
    .shared .align 1024 .b8 smem[{SMEM}];
    .shared .align 8 .b64 bar;
    .shared .align 4 .b32 slot;
    .reg .pred %p<8>;
    .reg .b16 %rs<4>;
    .reg .b32 %r<{16 + COLS}>;
    .reg .b64 %rd<12>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r13, %cluster_ctarank;
    mov.u16 %rs1, 3;
    ld.param.u64 %rd1, [img];
    mul.wide.u32 %rd2, %r2, {SMEM};
    add.u64 %rd1, %rd1, %rd2;
    mov.u32 %r3, %r1;
COPY:
    setp.ge.u32 %p1, %r3, {SMEM // 4};
    @%p1 bra COPIED;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r4, [%rd4];
    shl.b32 %r5, %r3, 2;
    mov.u32 %r6, smem;
    add.u32 %r6, %r6, %r5;
    st.shared.u32 [%r6], %r4;
    add.u32 %r3, %r3, 128;
    bra COPY;
COPIED:
    setp.lt.u32 %p2, %r1, 32;
    setp.eq.u32 %p3, %r1, 0;
    setp.eq.and.u32 %p4, %r13, 0, %p3;
    @%p2 tcgen05.alloc.{group}.sync.aligned.shared::cta.b32 [slot], {COLS};
    @%p3 mbarrier.init.shared::cta.b64 [bar], 1;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
    tcgen05.fence::before_thread_sync;
    {sync}
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r7, [slot];
    shr.u32 %r8, %r1, 5;
    shl.b32 %r9, %r8, 21;
    add.u32 %r10, %r7, %r9;
    shl.b32 %r11, %r1, 8;
    or.b32 %r11, %r11, 0xB0000000;
    {fill}
    tcgen05.st.sync.aligned.32x32b.x{COLS}.b32 [%r10], {_regs(16, COLS)};
    tcgen05.wait::st.sync.aligned;
    tcgen05.fence::before_thread_sync;
    {sync}
    tcgen05.fence::after_thread_sync;
    ld.param.u64 %rd5, [desc];
    mov.u32 %r12, %r7;
    @%p4 {op.format(G=group)}
    @%p4 {commit}
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [bar], 0;
    @!%p5 bra WAIT;
    tcgen05.fence::after_thread_sync;
    tcgen05.ld.sync.aligned.32x32b.x{COLS}.b32 {_regs(16, COLS)}, [%r10];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd6, [out];
    mad.lo.u32 %r14, %r2, 128, %r1;
    mul.wide.u32 %rd8, %r14, {4 * COLS};
    add.u64 %rd7, %rd6, %rd8;
    {dump}
    tcgen05.fence::before_thread_sync;
    {sync}
    tcgen05.fence::after_thread_sync;
    @%p2 tcgen05.dealloc.{group}.sync.aligned.b32 %r7, {COLS};
    @%p2 tcgen05.relinquish_alloc_permit.{group}.sync.aligned;
    ret;
}}
"""
    ptxas(text, "sm_100a")
    return text


def run(op: str, images: np.ndarray, desc: int, ctas: int = 1) -> np.ndarray:
    """Launch :func:`kernel`; the ``(ctas, 128, 32)`` cells read back."""
    out = np.zeros((ctas, 128, COLS), dtype=np.uint32)
    sim.launch(kernel(op, ctas), images.reshape(-1), out, np.uint64(desc), grid=(ctas, 1, 1), block=(128, 1, 1),
               cluster=(ctas, 1, 1), max_steps=200_000)
    return out


def image(ctas: int = 1) -> np.ndarray:
    """Random shared-memory images, one per CTA."""
    return RNG.integers(0, 256, size=(ctas, SMEM), dtype=np.uint8)


# --- tcgen05.cp ---------------------------------------------------------------------------------

SHAPES = ("128x256b", "128x128b", "4x256b", "64x128b.warpx2::02_13", "64x128b.warpx2::01_23", "32x128b.warpx4")
# (start, LBO, SBO, swizzle) with every swizzle mode; the unswizzled ones interleave core matrices.
LAYOUTS = [(1024 + 48, 128, 256, 0), (1024, 16 * 128, 128, 0), (1024, 16, 1024, 2), (0, 16, 1024, 1),
           (1024, 16, 512, 4), (1024, 16, 256, 6)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda v: f"start{v[0]}-lbo{v[1]}-sbo{v[2]}-sw{v[3]}")
def test_cp_copies_rows_to_the_isa_lanes(shape: str, layout: tuple[int, int, int, int]) -> None:
    start, lbo, sbo, swizzle = layout
    img = image()
    got = run(f"tcgen05.cp.{{G}}.{shape} [%r12+8], %rd5;", img, descriptor(start, lbo, sbo, swizzle))
    np.testing.assert_array_equal(got[0], copied(shape, "", img[0], 8, start, lbo, sbo, swizzle))


@pytest.mark.parametrize("shape", ["128x128b", "128x256b", "32x128b.warpx4", "64x128b.warpx2::01_23"])
@pytest.mark.parametrize("fmt", [".b8x16.b6x16_p32", ".b8x16.b4x16_p64"])
def test_cp_decompresses_6_and_4_bit_elements(shape: str, fmt: str) -> None:
    start, lbo, sbo, swizzle = 1024, 16, 1024, 2
    img = image()
    got = run(f"tcgen05.cp.{{G}}.{shape}{fmt} [%r12+4], %rd5;", img, descriptor(start, lbo, sbo, swizzle))
    np.testing.assert_array_equal(got[0], copied(shape, fmt, img[0], 4, start, lbo, sbo, swizzle))


def test_cp_cta_group_2_copies_in_both_ctas_of_the_pair_from_their_own_shared_memory() -> None:
    start, lbo, sbo, swizzle = 1024, 16, 512, 4
    img = image(2)
    got = run("tcgen05.cp.{G}.128x256b [%r12+16], %rd5;", img, descriptor(start, lbo, sbo, swizzle), ctas=2)
    for cta in range(2):
        np.testing.assert_array_equal(got[cta], copied("128x256b", "", img[cta], 16, start, lbo, sbo, swizzle))


def test_cp_into_columns_not_allocated_is_an_error() -> None:
    with pytest.raises(SimError, match=r"tcgen05\.cp.*PTX line \d+.*column 3[2-9] .*of CTA 0 is not allocated"):
        run("tcgen05.cp.{G}.128x256b [%r12+28], %rd5;", image(), descriptor(1024, 16, 1024, 2))


def test_cp_refuses_a_descriptor_without_the_sm100_fixed_bits() -> None:
    hopper_style = descriptor(1024, 16, 1024, 2) & ~(7 << 46)
    with pytest.raises(SimError, match=r"tcgen05\.cp.*bits 46-48"):
        run("tcgen05.cp.{G}.128x256b [%r12], %rd5;", image(), hopper_style)


# --- tcgen05.shift ------------------------------------------------------------------------------

@pytest.mark.parametrize("lane,col", [(0, 0), (32, 8), (96, 24)])
def test_shift_down_moves_31_rows_of_8_columns_one_lane_down(lane: int, col: int) -> None:
    got = run(f"add.u32 %r12, %r12, {(lane << 16) + col};\n    @%p4 tcgen05.shift.{{G}}.down [%r12];",
              image(), 0)
    np.testing.assert_array_equal(got[0], shifted(lane, col))


def test_shift_cta_group_2_shifts_in_both_ctas() -> None:
    got = run(f"add.u32 %r12, %r12, {(64 << 16) + 4};\n    @%p4 tcgen05.shift.{{G}}.down [%r12];",
              image(2), 0, ctas=2)
    for cta in range(2):
        np.testing.assert_array_equal(got[cta], shifted(64, 4))


def test_shift_lane_must_be_a_multiple_of_32() -> None:
    with pytest.raises(SimError, match=r"tcgen05\.shift.*lane 16.*multiple of 32"):
        run(f"add.u32 %r12, %r12, {16 << 16};\n    @%p4 tcgen05.shift.{{G}}.down [%r12];", image(), 0)

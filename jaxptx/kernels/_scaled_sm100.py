"""The Blackwell (sm_100a) block-scaled GEMM: ``C[g] = (A[g] * sa) @ (B[g] * sb)ᵀ``.

A is (G, M, K) and B is (G, N, K), both K-major, as bytes: FP8 values one a
byte (``mxfp8``), FP4 values two a byte, low nibble first (``nvfp4``,
``mxfp4``). C is (G, M, N) float32. One CTA of 128 threads (4 warps) computes
a 128 x 128 tile of C, the structure of :mod:`jaxptx.kernels._matmul_sm100`:

* **Loads** (thread 0): per K stage of 128 bytes a row (128 FP8 or 256 FP4
  values), A's and B's 128 x 128-byte boxes by TMA (128-byte swizzle,
  out-of-bounds parts zero-filled) and the stage's scale factors for both
  operands by a bulk copy, all completing on the stage's ``full`` barrier,
  into a ring of ``STAGES`` stages freed by ``tcgen05.commit`` on ``empty``.
* **Scales** (thread 32): the host lays each operand's scale factors out as
  the ``tcgen05.cp.32x128b.warpx4`` source (``scale_image``): per stage,
  ``chunks`` images of 32 rows x 16 bytes, byte ``j`` of word ``c`` of row
  ``l`` holding the scale of tile row ``32c + l`` for block ``4 * chunk + j``
  of the stage. The copy puts row ``l`` in lanes ``l + 32q`` (all four lane
  quarters), which is the scale-factor layout ``tcgen05.mma`` reads (PTX ISA
  9.7.16.10.7 "Block Scaling": row ``x`` at lane ``x % 32`` of each quarter,
  column ``x / 32``, the byte chosen by the scale-factor ID).
* **MMA** (thread 32): per stage, four ``tcgen05.mma.kind::mxf8f6f4``
  (``scale_vec::1X``: K = 32 FP8, one block, scale-factor IDs 0..3 walk the
  bytes of one chunk) or ``kind::mxf4nvf4`` (K = 64 FP4; ``scale_vec::4X``:
  four 16-wide blocks, a chunk each; ``scale_vec::2X``: two 32-wide blocks,
  IDs 0 and 2) into an f32 accumulator in tensor memory. The scale columns
  are a ring too (one set per stage), so a stage's copy never overwrites
  scales an MMA in flight still reads: the producer refills a stage only
  after its ``empty`` commit, which the issuer waits for through ``full``.
* **Epilogue**: ``_matmul_sm100``'s (``tcgen05.ld`` per warp, swizzled
  staging, TMA store clipping rows and columns past M and N).

Grouped (``grouped=True``, ragged MoE groups): A and C are (1, Mp, ·) with
each group's rows starting at a multiple of 128 (the host pads), and a
``tile_group`` table (Mp / 128,) int32 gives the group (B's index) of each
row tile, ``-1`` for a tile no group owns (the CTA does nothing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.dsl import Kernel, tcgen05
from jaxptx.dsl.declarations import allow_unwritten
from jaxptx.isa.encodings import InstrDesc
from jaxptx.types import f32, s32, u8, u32

from ._matmul_sm100 import _epilogue, _wait

__all__ = ["BM", "BN", "CHUNK", "FORMATS", "SPAN", "STAGES", "Format", "build"]

BM, BN = 128, 128          # a CTA's tile of C
SPAN = 128                 # bytes of K a row per stage: one 128-byte swizzle span
STAGES = 4
THREADS = 128
TILE_BYTES = BM * SPAN     # one operand's stage (BN == BM)
CHUNK = 512                # one tcgen05.cp.32x128b source: 32 rows x 16 bytes
MMA_BYTES = 32             # K bytes one MMA reads (32 FP8 or 64 FP4 values)
ACC_COLS = BN
TMEM_COLS = 256


@dataclasses.dataclass(frozen=True)
class Format:
    """One block-scaled format as the MMA sees it.

    Attributes:
        name: ``"mxfp8"``, ``"nvfp4"`` or ``"mxfp4"``.
        kind: the ``tcgen05.mma`` kind.
        scale_vec: the ``.scale_vec`` modifier (blocks a row per MMA).
        block: values per scale factor.
        per_byte: values per byte (1 for FP8, 2 for packed FP4).
        scale_type: ``ue8m0`` or ``ue4m3`` (the instruction descriptor's bit 23).
    """

    name: str
    kind: str
    scale_vec: str
    block: int
    per_byte: int
    scale_type: str

    @property
    def blocks_per_stage(self) -> int:
        """Scale blocks along K in one stage (``SPAN`` bytes a row)."""
        return SPAN * self.per_byte // self.block

    @property
    def chunks(self) -> int:
        """``tcgen05.cp`` source images per operand per stage (4 blocks each)."""
        return self.blocks_per_stage // 4

    @property
    def blocks_per_mma(self) -> int:
        """Scale blocks one MMA consumes (the ``scale_vec`` multiplier)."""
        return MMA_BYTES * self.per_byte // self.block


FORMATS = {
    "mxfp8": Format("mxfp8", "mxf8f6f4", "1X", 32, 1, "ue8m0"),
    "nvfp4": Format("nvfp4", "mxf4nvf4", "4X", 16, 2, "ue4m3"),
    "mxfp4": Format("mxfp4", "mxf4nvf4", "2X", 32, 2, "ue8m0"),
}
"""The formats the kernel runs, by name."""


def _scale_cols(f: Format) -> int:
    """Tensor-memory columns of one stage's scales (A's, then B's)."""
    return 2 * 4 * f.chunks


def _produce(A, B, SA, SB, a_ring, b_ring, s_ring, full, empty, m0, n0, ga, gb, mt, nt, kblocks,
             f: Format) -> None:
    """Thread 0: per stage, wait for it to be free, arm ``full`` and issue
    the TMA loads of A and B and the bulk copies of both operands' scales."""
    sbytes = f.chunks * CHUNK
    _, MT, KS, _ = SA.shape
    NT = SB.shape[1]
    sa_row = SA.ptr + ptx.mul.wide.u32((ga * MT + mt) * KS, sbytes)
    sb_row = SB.ptr + ptx.mul.wide.u32((gb * NT + nt) * KS, sbytes)
    stage = reg.scalar(u32, 0)
    phase = reg.scalar(u32, 0)
    load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
    copy = ptx.cp.async_.bulk.shared__cluster.global_.mbarrier__complete_tx__bytes
    for kb in ptx.range_(0, kblocks, dtype=u32):
        with ptx.if_(kb >= STAGES):
            _wait(ptx.addr(empty.base + stage * 8), phase ^ 1)
        bar = full.base + stage * 8
        ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, ptx.addr(bar), 2 * TILE_BYTES + 2 * sbytes)
        k0 = kb * SPAN
        load(ptx.addr(a_ring.base + stage * TILE_BYTES), ptx.addr(A.tma_desc(), coords=(k0, m0, ga)),
             ptx.addr(bar))
        load(ptx.addr(b_ring.base + stage * TILE_BYTES), ptx.addr(B.tma_desc(), coords=(k0, n0, gb)),
             ptx.addr(bar))
        at = s_ring.base + stage * (2 * sbytes)
        step = ptx.mul.wide.u32(kb, sbytes)
        copy(ptx.addr(at), ptx.addr(sa_row + step), sbytes, ptx.addr(bar))
        copy(ptx.addr(at + sbytes), ptx.addr(sb_row + step), sbytes, ptx.addr(bar))
        stage += 1
        with ptx.if_(stage == STAGES):
            stage.set(0)
            phase ^= 1


def _issue(a_ring, b_ring, s_ring, full, empty, done, taddr, idescs: tuple[int, ...], kblocks,
           f: Format) -> None:
    """Thread 32: per stage, wait for its data, copy its scales into tensor
    memory (``tcgen05.cp``), issue the four MMAs, commit the stage to ``empty``."""
    lbo, sbo = tcgen05.canonical_strides("K", "128B", u8, (BM, SPAN))
    da0 = tcgen05.smem_desc(a_ring.base, swizzle="128B", lbo=lbo, sbo=sbo)
    db0 = tcgen05.smem_desc(b_ring.base, swizzle="128B", lbo=lbo, sbo=sbo)
    # A scale image: 32 rows of 16 bytes, one after another (no swizzle: 8-row groups 128 bytes apart).
    ds0 = tcgen05.smem_desc(s_ring.base, swizzle="none", lbo=16, sbo=128)
    id_regs = [reg.scalar(u32, w) for w in idescs]
    always = reg.pred(init=1)
    stage = reg.scalar(u32, 0)
    phase = reg.scalar(u32, 0)
    sbytes = f.chunks * CHUNK
    cols = _scale_cols(f)
    mma = getattr(getattr(ptx.tcgen05.mma.cta_group__1, f"kind__{f.kind}").block_scale,
                  f"scale_vec__{f.scale_vec}")
    cp = ptx.tcgen05.cp.cta_group__1._32x128b.warpx4
    for kb in ptx.range_(0, kblocks, dtype=u32):
        _wait(ptx.addr(full.base + stage * 8), phase)
        ptx.tcgen05.fence__after_thread_sync()
        step = ptx.cvt.u64.u32(stage)
        da = da0 + ptx.mul.lo.u64(step, TILE_BYTES >> 4)
        db = db0 + ptx.mul.lo.u64(step, TILE_BYTES >> 4)
        ds = ds0 + ptx.mul.lo.u64(step, (2 * sbytes) >> 4)
        sf = taddr + ACC_COLS + stage * cols        # this stage's scale columns: A's, then B's
        for op in range(2):
            for c in range(f.chunks):
                cp(ptx.addr(sf + 4 * (op * f.chunks + c)),
                   tcgen05.advance(ds, (op * f.chunks + c) * CHUNK))
        first = kb != 0
        for kk in range(SPAN // MMA_BYTES):
            block = kk * f.blocks_per_mma
            chunk = block // 4
            mma(ptx.addr(taddr), tcgen05.advance(da, MMA_BYTES * kk), tcgen05.advance(db, MMA_BYTES * kk),
                id_regs[kk], ptx.addr(sf + 4 * chunk), ptx.addr(sf + 4 * (f.chunks + chunk)),
                first if kk == 0 else always)
        ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(
            ptx.addr(empty.base + stage * 8))
        stage += 1
        with ptx.if_(stage == STAGES):
            stage.set(0)
            phase ^= 1
    ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(ptx.addr(done.base))


def instr_descs(f: Format, a_type: str, b_type: str) -> tuple[int, ...]:
    """The instruction descriptor of each of a stage's four MMAs (they differ
    in the scale-factor IDs: which byte of a scale column each block reads)."""
    words = []
    for kk in range(SPAN // MMA_BYTES):
        sf_id = (kk * f.blocks_per_mma) % 4
        words.append(InstrDesc(f.kind, BM, BN, a_type, b_type, "f32", scale_type=f.scale_type,
                               sfa_id=sf_id, sfb_id=sf_id).encode())
    return tuple(words)


def _gemm_body(A, B, SA, SB, C, tile_group, *, f: Format, idescs: tuple[int, ...]) -> None:
    kblocks = -(-A.shape[2] // SPAN)
    a_ring = smem.alloc(u8, (STAGES, TILE_BYTES), align=1024)
    b_ring = smem.alloc(u8, (STAGES, TILE_BYTES), align=1024)
    s_ring = smem.alloc(u8, (STAGES, 2 * f.chunks * CHUNK), align=128)
    staging = smem.alloc(f32, (4, 2, 32 * 32), align=1024)
    full, empty, done = smem.mbarrier(STAGES), smem.mbarrier(STAGES), smem.mbarrier(1)
    tm = tcgen05.TensorMemory(TMEM_COLS)
    tid = ptx.special.tid.x()
    mt, nt = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    m0, n0 = mt * BM, nt * BN
    if tile_group is None:
        ga = gb = ptx.special.ctaid.z()
        guard = contextlib.nullcontext()
    else:
        ga = reg.scalar(u32, 0)
        group = ptx.ld.global_.s32(tile_group.ptr + ptx.mul.wide.u32(mt, 4))
        gb = ptx.cvt.u32.s32(ptx.max.s32(group, 0))
        guard = ptx.if_(group >= 0)          # the same for every thread of the CTA
    with guard:
        with ptx.if_(tid // 32 == 0):
            tm.alloc()
            tm.relinquish()
        with ptx.if_(tid == 0):
            for s in range(STAGES):
                ptx.mbarrier.init.shared.b64(full[s], 1)
                ptx.mbarrier.init.shared.b64(empty[s], 1)
            ptx.mbarrier.init.shared.b64(done[0], 1)
            ptx.fence.mbarrier_init.release.cluster()
        tm.sync_after_alloc()
        taddr = tm.address()
        with ptx.if_(tid == 0):
            _produce(A, B, SA, SB, a_ring, b_ring, s_ring, full, empty, m0, n0, ga, gb, mt, nt, kblocks, f)
        with ptx.if_(tid == 32):
            _issue(a_ring, b_ring, s_ring, full, empty, done, taddr, idescs, kblocks, f)
        _wait(ptx.addr(done.base), 0)
        ptx.tcgen05.fence__after_thread_sync()
        ptx.bar.warp.sync(0xFFFFFFFF)
        _epilogue(C, taddr, staging, m0, n0, ga, BN)
        ptx.tcgen05.fence__before_thread_sync()
        ptx.bar.sync(0)
        with ptx.if_(tid // 32 == 0):
            tm.dealloc(taddr)


def _grid(G: int, M: int, N: int) -> tuple[int, int, int]:
    return (-(-M // BM), -(-N // BN), G)


@functools.cache
def build(fmt: str, a_type: str, b_type: str, grouped: bool = False) -> Kernel:
    """The kernel for format ``fmt`` (a key of :data:`FORMATS`) with A and B
    element types ``a_type`` / ``b_type`` (``e4m3``, ``e5m2``; ``e2m1`` for
    FP4), batched or grouped (module docstring), built once.

    Inputs: A (G, M, KB) and B (G, N, KB) uint8 (KB bytes of K a row, a
    multiple of 16), the scale images SA (G, MT, KS, S) and SB (G, NT, KS, S)
    uint8 (:func:`jaxptx.kernels.scaled_matmul.scale_image`), and for
    ``grouped`` the (MT,) int32 tile table; output C (G, M, N) float32.
    """
    f = FORMATS[fmt]
    idescs = instr_descs(f, a_type, b_type)
    data = {"layout": Layout.TMA_128B, "tma_box": (1, BM, SPAN)}
    in_specs = [Tile("G", "M", "KB", u8, **data), Tile("GB", "N", "KB", u8, **data),
                Tile("G", "MT", "KS", "S", u8), Tile("GB", "NT", "KS", "S", u8)]
    if grouped:
        in_specs.append(Tile("MT", s32))

        def body(A, B, SA, SB, T, C):
            _gemm_body(A, B, SA, SB, C, T, f=f, idescs=idescs)
    else:
        def body(A, B, SA, SB, C):
            _gemm_body(A, B, SA, SB, C, None, f=f, idescs=idescs)

    mode = "grouped" if grouped else "batched"
    body.__doc__ = f"Block-scaled tcgen05 GEMM, {fmt} {a_type} x {b_type}, {mode} (jaxptx.kernels._scaled_sm100)."
    # PTX 8.7: the first version with .kind::mxf4nvf4.
    k = kernel(body, name=f"scaled_matmul_sm100_{fmt}_{a_type}_{b_type}_{mode}", grid=_grid,
               block=(THREADS, 1, 1), arch="sm_100a", version=(8, 7), extern_smem=True,
               in_specs=tuple(in_specs),
               out_specs=(Tile("G", "M", "N", f32, Layout.TMA_128B, tma_box=(1, 32, 32)),))
    # Grouped: tiles no group owns are never written (the host gathers only the groups' rows).
    return allow_unwritten("C")(k) if grouped else k

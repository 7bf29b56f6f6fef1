"""The Ampere GEMM: ``cp.async`` ring, swizzled ``ldmatrix``, ``mma.sync``.

``matmul_sm80(a, b)``: a (G, M, K) @ b (G, K, N), bf16 or f16 in, f32 out,
one launch (grid z is the group). Design, per CTA of 256 threads (8 warps,
2 along M x 4 along N, each warp a 64 x 32 tile of the 128 x 128 CTA tile):

* a 4-stage ring of (A 128x32, B 32x128) shared tiles filled with 16-byte
  ``cp.async.cg``; edges past M, N or K are zero-filled through the
  src-size operand (``K % 8 == N % 8 == 0``: a 16-byte chunk is all in or
  all out). ``commit_group`` per tile, ``wait_group 2`` before a tile is read.
* shared layouts are XOR-swizzled (:func:`jaxptx.dsl.fragments.swizzle`) so
  that ``ldmatrix`` reads 8 rows of one 16-byte column without bank
  conflicts: A rows are 64 bytes (64B swizzle); B is stored as two 64-column
  panels of 128-byte rows (128B swizzle)::

        A stage (8 KiB)            B stage (8 KiB)
        row m: 4 chunks of 8 k     panel 0 (n 0..63)   panel 1 (n 64..127)
        chunk c at c ^ (m/2)%4     row k: chunk c at c ^ k%8

* per 16-wide k step a warp loads A with four ``ldmatrix.x4`` and B with two
  ``ldmatrix.x4.trans`` (B is K x N row-major; ``.trans`` gives the
  column-major fragment ``mma`` wants) and issues 16
  ``mma.sync.aligned.m16n8k16.row.col.f32``; fragments are double-buffered:
  step s+1's ``ldmatrix`` is issued before step s's ``mma``.
* the K loop is a runtime loop over groups of 4 tiles (stage numbers are
  then constants) followed by an unrolled tail that holds the last tile.
* the epilogue stores each accumulator pair as ``st.global.v2.f32`` at the
  (row, col) :func:`jaxptx.dsl.fragments.mma_base` gives, guarded by row < M
  and col < N.

:func:`mainloop` and :func:`epilogue` are shared with the grouped GEMM
(``jaxptx.kernels.grouped``), whose A rows are masked to one group at a time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ptx, reg, smem
from ..dsl import Tile, kernel
from ..dsl.fragments import mma_base, mma_offset, swizzle
from ..errors import SpecError
from ..types import b32, bf16, f16, f32, u32

__all__ = ["matmul_sm80", "gemm_kernel", "BM", "BN", "BK", "STAGES", "THREADS", "SMEM_BYTES",
           "Operands", "mainloop", "epilogue", "new_accumulators", "check_operands", "cdiv"]

BM, BN, BK, STAGES = 128, 128, 32, 4
WARPS_M, WARPS_N = 2, 4
WM, WN = BM // WARPS_M, BN // WARPS_N            # 64 x 32 per warp
MT, NT = WM // 16, WN // 8                         # 4 x 4 mma tiles per warp
KSTEPS = BK // 16
THREADS = 32 * WARPS_M * WARPS_N
A_BYTES = BM * BK * 2                              # 8 KiB
B_BYTES = BK * BN * 2                              # 8 KiB, two 64-column panels
PANEL = BK * 128
STAGE_BYTES = A_BYTES + B_BYTES
SMEM_BYTES = STAGES * STAGE_BYTES

_PTX_TYPE = {"bfloat16": bf16, "float16": f16}


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


@dataclass
class Operands:
    """What :func:`mainloop` reads, for one CTA tile.

    Attributes:
        a: u64 address of A's row 0 (M x K row-major, ``dtype``).
        b: u64 address of B's row 0 (K x N row-major).
        m0, n0: the tile's first row / column (u32 registers).
        M, N, K: static sizes.
        row_lo, row_hi: u32 registers: only A rows in [row_lo, row_hi) are
            read, the others are zero (None: all rows below M).
        dtype: ``"bf16"`` or ``"f16"``.
    """

    a: Any
    b: Any
    m0: Any
    n0: Any
    M: int
    N: int
    K: int
    dtype: str
    row_lo: Any = None
    row_hi: Any = None


def new_accumulators() -> list:
    """The warp's 64 x 32 f32 accumulator: ``acc[i][j]`` is the 4-register
    m16n8 tile (i along M, j along N), zeroed."""
    acc = [[reg.array(f32, 4) for _ in range(NT)] for _ in range(MT)]
    for row in acc:
        for tile in row:
            for r in tile:
                r.set(0.0)
    return acc


class _Producer:
    """The cp.async side of the ring: each thread copies two 16-byte A chunks
    (rows r and r + 64) and two B chunks (k rows r and r + 16) per tile."""

    def __init__(self, ops: Operands, smem_base: Any, tid: Any) -> None:
        M, N, K = ops.M, ops.N, ops.K
        self.N, self.K, self.tiles = N, K, cdiv(K, BK)
        self.kc, row = tid & 3, tid >> 2
        self.a_dst = smem_base + swizzle(row, self.kc << 4, bytes=64)
        rows = (ops.m0 + row, ops.m0 + row + 64)
        # Out-of-range rows read row M - 1's address with src-size 0: nothing is read.
        self.a_src = [ops.a + ptx.mul.wide.u32(r.min(M - 1), K * 2) + ptx.cvt.u64.u32(self.kc << 4)
                      for r in rows]
        self.a_size = []
        for r in rows:
            ok = r < M
            if ops.row_lo is not None:
                ok = ptx.and_.pred(ok, ptx.and_.pred(r >= ops.row_lo, r < ops.row_hi))
            self.a_size.append(ptx.selp.u32(16, 0, ok))
        self.k, nc = tid >> 4, tid & 15
        self.b_dst = smem_base + A_BYTES + (nc >> 3) * PANEL + swizzle(self.k, (nc & 7) << 4, bytes=128)
        col = ops.n0 + (nc << 3)
        self.b_size = ptx.selp.u32(16, 0, col < N)
        self.b_src = ops.b + ptx.mul.wide.u32(self.k * N + col.min(N - 8), 2)

    def _sizes(self, tile: int | None) -> tuple[Any, Any, Any, Any]:
        """src-size of the four chunks; the last tile of a K that is not a
        multiple of BK also drops chunks past K."""
        if tile is None or tile != self.tiles - 1 or not self.K % BK:
            return self.a_size[0], self.a_size[1], self.b_size, self.b_size
        left = self.K - tile * BK
        kin = (self.kc << 3) < left
        b1 = ptx.selp.u32(self.b_size, 0, self.k < left - 16) if left > 16 else ptx.mov.u32(0)
        return (ptx.selp.u32(self.a_size[0], 0, kin), ptx.selp.u32(self.a_size[1], 0, kin),
                ptx.selp.u32(self.b_size, 0, self.k < left), b1)

    def issue(self, tile: int | None, stage: int) -> None:
        """Copy tile ``tile`` (None: a tile inside K met in the runtime loop)
        into ``stage``, advance the sources and commit a group (an empty
        group past the last tile keeps the wait_group arithmetic)."""
        if tile is None or tile < self.tiles:
            sa0, sa1, sb0, sb1 = self._sizes(tile)
            off = stage * STAGE_BYTES
            cp = ptx.cp.async_.cg.shared.global_
            cp(ptx.addr(self.a_dst, off), ptx.addr(self.a_src[0]), 16, sa0)
            cp(ptx.addr(self.a_dst, off + 64 * 64), ptx.addr(self.a_src[1]), 16, sa1)
            cp(ptx.addr(self.b_dst, off), ptx.addr(self.b_src), 16, sb0)
            cp(ptx.addr(self.b_dst, off + 16 * 128), ptx.addr(self.b_src, 16 * self.N * 2), 16, sb1)
            if tile is None or tile + 1 < self.tiles:
                for src in self.a_src:
                    ptx.add.u64(src, src, BK * 2)
                ptx.add.u64(self.b_src, self.b_src, BK * self.N * 2)
        ptx.cp.async_.commit_group()


class _Consumer:
    """The ldmatrix + mma side: double-buffered fragments of one warp's
    64 x 32 tile (4 A fragments, 4 B fragments from 2 ``.x4.trans`` loads)."""

    def __init__(self, smem_base: Any, tid: Any, dtype: str) -> None:
        lane, warp = tid & 31, tid >> 5
        wm, wn = warp >> 2, warp & 3
        l15, l16 = lane & 15, lane >> 4
        # ldmatrix: lane l gives row l % 16 of the 16 x 16 block, chunk l // 16.
        a_row = (wm << 6) + l15
        self.lda = [smem_base + swizzle(a_row, (l16 + 2 * kk) << 4, bytes=64) for kk in range(KSTEPS)]
        panel = smem_base + A_BYTES + (wn >> 1) * PANEL
        self.ldb = [panel + swizzle(l15, (((wn & 1) << 2) + 2 * j + l16) << 4, bytes=128)
                    for j in range(NT // 2)]
        self.fa = [[reg.array(b32, 4) for _ in range(MT)] for _ in range(2)]
        self.fb = [[reg.array(b32, 4) for _ in range(NT // 2)] for _ in range(2)]
        self.mma = ptx.Instr(("mma", "sync", "aligned", "m16n8k16", "row", "col", "f32", dtype, dtype, "f32"))

    def load(self, buf: int, stage: int, kk: int) -> None:
        """Fragments of k step ``kk`` of ``stage`` into buffer ``buf``."""
        off = stage * STAGE_BYTES
        for i in range(MT):
            ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(self.fa[buf][i], ptx.addr(self.lda[kk], off + i * 16 * 64))
        for j in range(NT // 2):
            ptx.ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16(
                self.fb[buf][j], ptx.addr(self.ldb[j], off + kk * 16 * 128))

    def compute(self, acc: list, buf: int) -> None:
        """The 16 mma.sync of one k step from buffer ``buf``."""
        for i in range(MT):
            for j in range(NT):
                b = self.fb[buf][j // 2]
                self.mma(acc[i][j], self.fa[buf][i], (b[0], b[1]) if j % 2 == 0 else (b[2], b[3]), acc[i][j])


def mainloop(ops: Operands, acc: list, smem_base: Any, *, reuse: bool = False) -> None:
    """Accumulate A[m0:m0+128, :] @ B[:, n0:n0+128] into ``acc``.

    Every thread of the CTA must call it (it synchronises with ``bar.sync``).
    ``reuse``: a ``bar.sync`` first, for a second call over the same shared
    memory. Ends with no ``cp.async`` pending.
    """
    tid = ptx.special.tid.x()
    if reuse:
        ptx.bar.sync(0)
    prod = _Producer(ops, smem_base, tid)
    cons = _Consumer(smem_base, tid, ops.dtype)
    tiles = prod.tiles

    def tile_body(kt: int | None, stage: int, last: bool) -> None:
        # k step kk computes from buffer kk % 2 while step kk + 1's fragments
        # load (the next tile's first step, after its wait + barrier, at the
        # last kk). Its first step refills the stage the previous tile freed.
        for kk in range(KSTEPS):
            if kk < KSTEPS - 1:
                cons.load((kk + 1) % 2, stage, kk + 1)
            elif not last:
                ptx.cp.async_.wait_group(STAGES - 2)
                ptx.bar.sync(0)
                cons.load((kk + 1) % 2, (stage + 1) % STAGES, 0)
            if kk == 0:
                prod.issue(None if kt is None else kt + STAGES - 1, (stage + STAGES - 1) % STAGES)
            cons.compute(acc, kk % 2)

    for t in range(STAGES - 1):
        prod.issue(t, t)
    ptx.cp.async_.wait_group(STAGES - 2)
    ptx.bar.sync(0)
    cons.load(0, 0, 0)
    # A runtime loop over groups of STAGES tiles (stage numbers constant)
    # while every tile it loads is a full one; the rest, with the last tile,
    # unrolled.
    groups = max(0, (ops.K // BK - STAGES + 1) // STAGES)
    if groups:
        for _ in ptx.range_(0, groups):
            for s in range(STAGES):
                tile_body(None, s, False)
    for kt in range(groups * STAGES, tiles):
        tile_body(kt, kt % STAGES, kt == tiles - 1)
    ptx.cp.async_.wait_all()


def epilogue(acc: list, c: Any, m0: Any, n0: Any, M: int, N: int) -> None:
    """Store ``acc`` to the M x N f32 matrix at ``c`` (u64), rows < M and
    columns < N only, two columns per ``st.global.v2.f32``."""
    tid = ptx.special.tid.x()
    warp = tid >> 5
    row, col = mma_base("m16n8k16", tid & 31)
    row = row + m0 + ((warp >> 2) << 6)
    col = col + n0 + ((warp & 3) << 5)
    base = c + ptx.mul.wide.u32(row * N + col.min(N - 2), 4)
    # Offsets no CTA can store at (M - dr <= 0, N - 8j <= 0) are left out at trace time.
    col_ok = [col < N - j * 8 if N > j * 8 else None for j in range(NT)]
    for i in range(MT):
        for h in range(2):
            dr = i * 16 + mma_offset("m16n8k16", 2 * h)[0]
            if M <= dr:
                continue
            row_ok = row < M - dr
            for j in range(NT):
                if col_ok[j] is None:
                    continue
                ok = ptx.and_.pred(row_ok, col_ok[j])
                ptx.st.global_.v2.f32(ptx.addr(base, (dr * N + j * 8) * 4),
                                      (acc[i][j][2 * h], acc[i][j][2 * h + 1]), pred=ok)


@functools.cache
def gemm_kernel(dtype: str, arch: str = "sm_80") -> Any:
    """The batched GEMM kernel for ``dtype`` ("bf16" or "f16") traced for ``arch``."""
    t = {"bf16": bf16, "f16": f16}[dtype]

    @kernel(in_specs=(Tile("G", "M", "K", t), Tile("G", "K", "N", t)),
            out_specs=(Tile("G", "M", "N", f32),),
            grid=lambda G, M, N: (cdiv(N, BN), cdiv(M, BM), G), block=(THREADS, 1, 1),
            arch=arch, extern_smem=True, name=f"matmul_sm80_{dtype}")
    def matmul_sm80_kernel(a, b, c):
        """c[g] = a[g] @ b[g] (module docstring)."""
        G, M, K = a.shape
        N = b.shape[2]
        buf = smem.alloc(u32, (SMEM_BYTES // 4,), align=1024)
        z = ptx.special.ctaid.z()
        m0 = ptx.special.ctaid.y() * BM
        n0 = ptx.special.ctaid.x() * BN
        ops = Operands(a=a.ptr + ptx.mul.wide.u32(z, M * K * 2), b=b.ptr + ptx.mul.wide.u32(z, K * N * 2),
                       m0=m0, n0=n0, M=M, N=N, K=K, dtype=dtype)
        acc = new_accumulators()
        mainloop(ops, acc, buf.base)
        epilogue(acc, c.ptr + ptx.mul.wide.u32(z, M * N * 4), m0, n0, M, N)

    return matmul_sm80_kernel


def check_operands(a: Any, b: Any, what: str = "matmul_sm80") -> str:
    """The PTX type name of ``a``/``b`` ("bf16" or "f16"), after checking
    their dtypes agree and K, N are multiples of 8.

    Raises:
        SpecError: mixed or unsupported dtypes, or K / N not multiples of 8.
    """
    da, db = np.dtype(a.dtype).name, np.dtype(b.dtype).name
    if da != db or da not in _PTX_TYPE:
        raise SpecError(f"{what}: expected both operands bfloat16 or both float16, got {da} and {db}")
    k, n = a.shape[-1], b.shape[-1]
    if k % 8 or n % 8:
        raise SpecError(f"{what}: K ({k}) and N ({n}) must be multiples of 8 (16-byte rows); pad them")
    return "bf16" if da == "bfloat16" else "f16"


def matmul_sm80(a: Any, b: Any) -> Any:
    """``a @ b`` per group on Ampere tensor cores: a (G, M, K), b (G, K, N),
    both bf16 or both f16; returns (G, M, N) float32 in one launch.

    K and N must be multiples of 8; M, N, K need not be multiples of the
    128 x 128 x 32 tile (edges are masked). Runs on the CPU emulator where
    there is no GPU.

    Raises:
        SpecError: bad dtypes or shapes.
    """
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise SpecError(f"matmul_sm80: expected a (G, M, K) and b (G, K, N), got {a.shape} and {b.shape}")
    return gemm_kernel(check_operands(a, b))(a, b)


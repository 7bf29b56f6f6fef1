"""The Blackwell (sm_100a) batched GEMM: ``C[g] = A[g] @ B[g]`` in one launch.

A is (G, M, K), B is (G, K, N) row-major, both bf16 or both f16; C is
(G, M, N) float32. Each CTA of 128 threads (4 warps) computes a 128-row
tile of C:

* **TMA loads** (thread 0): per K block of 64, A's 128 x 64 box (K-major,
  128-byte rows) and B's 64 x 128 block as two 64 x 64 boxes (N contiguous:
  MN-major), all 128-byte swizzled, into a ring of ``STAGES`` stages guarded
  by ``full`` (TMA bytes arrived) and ``empty`` (MMAs done reading)
  mbarriers. Out-of-bounds parts of a box are zero-filled, so M, N and K
  need not be multiples of the tile.
* **MMA** (thread 32): four ``tcgen05.mma.kind::f16`` of K = 16 per stage
  into an f32 accumulator in tensor memory; B's transpose bit in the
  instruction descriptor reads it MN-major (no host transpose); a
  ``tcgen05.commit`` per stage arrives on the stage's ``empty`` barrier,
  a last one on ``done``.
* **Epilogue** (all four warps): warp ``w`` owns tensor-memory lanes
  ``32w..32w+31`` (rows of the tile); per 32 columns, ``tcgen05.ld.32x32b.x32``
  into registers, ``st.shared.v4`` into a 128-byte-swizzled 32 x 32 staging
  tile (two per warp, alternating), and lane 0 stores it with a TMA tensor
  store, which clips rows and columns past M and N.

``cta_group=2``: a cluster of two CTAs (ranks 0 and 1 along grid x)
computes a 256 x 256 tile with ``tcgen05.mma.cta_group::2`` (M = 256,
N = 256): each CTA loads its 128 rows of A and its 128 columns of B; both
CTAs' TMA loads complete on the even CTA's ``full`` barrier
(``cp.async.bulk.tensor...cta_group::2``), the even CTA's thread 32 issues
the MMA for the pair, and its commits multicast to both CTAs' ``empty`` and
``done`` barriers. Each CTA holds its own 128 rows of D (all 256 columns).

Groups index the third TMA coordinate (3-D tensor maps over (G, rows,
cols)), so G needs no host reshape; grid z is the group.
"""

from __future__ import annotations

import functools

import numpy as np

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.dsl import Kernel, tcgen05
from jaxptx.errors import SpecError
from jaxptx.types import b16, b32, bf16, f16, f32, u32

__all__ = ["matmul_sm100", "build", "BM", "BN", "BK", "STAGES"]

BM, BN, BK, STAGES = 128, 128, 64, 4   # per CTA: rows of A, columns of B, K block, ring depth
SPAN = 64                              # 16-bit elements in a 128-byte swizzle span (one B box)
EPI = 32                               # columns per epilogue store
THREADS = 128
A_BYTES = BM * BK * 2
B_BYTES = BK * BN * 2
BOX_B = BK * SPAN * 2                  # one B box: 64 K rows of 128 bytes
STAGE_BYTES = A_BYTES + B_BYTES
STAGING = EPI * EPI * 4                # one 32 x 32 f32 staging tile
_DTYPES = {"bfloat16": bf16, "float16": f16}


def _wait(bar, parity) -> None:
    """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` completes."""
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


def _cluster_sync() -> None:
    ptx.barrier.cluster.arrive.release.aligned()
    ptx.barrier.cluster.wait.acquire.aligned()


def _produce(A, B, a_ring, b_ring, full, empty, m0, nb0, g, kblocks, pair: bool, leader) -> None:
    """Thread 0: per K block wait for the stage to be free, arm the full
    barrier (the even CTA, with both CTAs' bytes for a pair) and issue the
    TMA loads of A and B."""
    stage = reg.scalar(u32, 0)
    phase = reg.scalar(u32, 0)
    tx = STAGE_BYTES * (2 if pair else 1)
    for kb in ptx.range_(0, kblocks, dtype=u32):
        with ptx.if_(kb >= STAGES):
            _wait(ptx.addr(empty.base + stage * 8), phase ^ 1)
        bar = full.base + stage * 8
        if pair:
            with ptx.if_(leader):
                ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, ptx.addr(bar), tx)
            bar = ptx.mapa.shared__cluster.u32(bar, 0)      # the even CTA's barrier
            load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile \
                .mbarrier__complete_tx__bytes.cta_group__2
        else:
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, ptx.addr(bar), tx)
            load = ptx.cp.async_.bulk.tensor._3d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
        k0 = kb * BK
        load(ptx.addr(a_ring.base + stage * A_BYTES), ptx.addr(A.tma_desc(), coords=(k0, m0, g)), ptx.addr(bar))
        b_at = b_ring.base + stage * B_BYTES
        for j in range(BN // SPAN):
            load(ptx.addr(b_at, j * BOX_B), ptx.addr(B.tma_desc(), coords=(nb0 + j * SPAN, k0, g)),
                 ptx.addr(bar))
        stage += 1
        with ptx.if_(stage == STAGES):
            stage.set(0)
            phase ^= 1


def _issue(a_ring, b_ring, full, empty, done, taddr, idesc: int, kblocks, pair: bool) -> None:
    """Thread 32 (of the even CTA for a pair): per K block wait for the
    stage's data, issue BK / 16 MMAs, commit the stage back to ``empty``."""
    # A: K-major (BM, BK) stages; B: MN-major (BK, BN) stages of BN / SPAN boxes
    # (LBO = one box, the next 64 columns; SBO = 8 rows of 128 bytes).
    lbo_a, sbo_a = tcgen05.canonical_strides("K", "128B", bf16, (BM, BK))
    lbo_b, sbo_b = tcgen05.canonical_strides("MN", "128B", bf16, (BK, BN))
    da0 = tcgen05.smem_desc(a_ring.base, swizzle="128B", lbo=lbo_a, sbo=sbo_a)
    db0 = tcgen05.smem_desc(b_ring.base, swizzle="128B", lbo=lbo_b, sbo=sbo_b)
    id_reg = reg.scalar(u32, idesc)
    always = reg.pred(init=1)
    stage = reg.scalar(u32, 0)
    phase = reg.scalar(u32, 0)
    mask = reg.scalar(b16, 0b11) if pair else None   # multicast: both CTAs of the pair

    def commit(bar) -> None:
        if pair:
            ptx.tcgen05.commit.cta_group__2.mbarrier__arrive__one.shared__cluster.multicast__cluster.b64(
                bar, mask)
        else:
            ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(bar)

    mma = ptx.tcgen05.mma.cta_group__2.kind__f16 if pair else ptx.tcgen05.mma.cta_group__1.kind__f16
    for kb in ptx.range_(0, kblocks, dtype=u32):
        _wait(ptx.addr(full.base + stage * 8), phase)
        ptx.tcgen05.fence__after_thread_sync()
        step = ptx.cvt.u64.u32(stage)
        da = da0 + ptx.mul.lo.u64(step, A_BYTES >> 4)
        db = db0 + ptx.mul.lo.u64(step, B_BYTES >> 4)
        first = kb != 0
        for kk in range(BK // 16):
            # K-major A: 16 elements = 32 bytes along the swizzled row;
            # MN-major B: 16 K rows = two 8-row groups of 1024 bytes.
            ka = tcgen05.k_offset(16 * kk, major="K", swizzle="128B", dtype=bf16, shape=(BM, BK))
            kb_off = tcgen05.k_offset(16 * kk, major="MN", swizzle="128B", dtype=bf16, shape=(BK, BN))
            mma(ptx.addr(taddr), tcgen05.advance(da, ka), tcgen05.advance(db, kb_off), id_reg,
                first if kk == 0 else always)
        commit(ptx.addr(empty.base + stage * 8))
        stage += 1
        with ptx.if_(stage == STAGES):
            stage.set(0)
            phase ^= 1
    commit(ptx.addr(done.base))


def _epilogue(C, taddr, staging, m0, n0, g, ncols: int) -> None:
    """Every warp: its 32 rows of D, 32 columns at a time, through a
    swizzled staging tile to a TMA store (module docstring)."""
    tid = ptx.special.tid.x()
    lane, warp = tid % 32, tid // 32
    row_tmem = taddr + ((warp * 32) << 16)
    mine = staging.base + warp * (2 * STAGING)
    row_at = mine + lane * 128
    swz = (lane & 7) << 4                  # 128-byte swizzle: chunk j of row r at chunk j ^ (r % 8)
    leader = lane == 0
    for c in range(0, ncols, EPI):
        buf = (c // EPI) % 2
        if c >= 2 * EPI:
            with ptx.if_(leader):
                ptx.cp.async_.bulk.wait_group.read(1)     # this buffer's last store has read it
            ptx.bar.warp.sync(0xFFFFFFFF)
        vals = reg.array(b32, EPI)
        ptx.tcgen05.ld.sync.aligned._32x32b.x32.b32(vals, ptx.addr(row_tmem + c))
        ptx.tcgen05.wait__ld.sync.aligned()
        for j in range(EPI // 4):
            at = row_at + buf * STAGING + ((swz ^ (16 * j)) if j else swz)
            ptx.st.shared.v4.b32(ptx.addr(at), tuple(vals[4 * j:4 * j + 4]))
        ptx.fence.proxy.async_.shared__cta()
        ptx.bar.warp.sync(0xFFFFFFFF)
        with ptx.if_(leader):
            ptx.cp.async_.bulk.tensor._3d.global_.shared__cta.tile.bulk_group(
                ptx.addr(C.tma_desc(), coords=(n0 + c, m0 + warp * 32, g)),
                ptx.addr(mine + buf * STAGING))
            ptx.cp.async_.bulk.commit_group()
    with ptx.if_(leader):
        ptx.cp.async_.bulk.wait_group(0)


def _gemm_body(A, B, C, *, cta_group: int) -> None:
    pair = cta_group == 2
    K = A.shape[2]
    kblocks = -(-K // BK)
    ncols = BN * cta_group                 # D columns per CTA = the MMA's N
    a_ring = smem.alloc(bf16, (STAGES, BM * BK), align=1024)
    b_ring = smem.alloc(bf16, (STAGES, BK * BN), align=1024)
    staging = smem.alloc(f32, (4, 2, EPI * EPI), align=1024)
    full, empty, done = smem.mbarrier(STAGES), smem.mbarrier(STAGES), smem.mbarrier(1)
    tm = tcgen05.TensorMemory(ncols, cta_group=cta_group)
    tid = ptx.special.tid.x()
    warp = tid // 32
    rank = ptx.special.cluster_ctarank() if pair else None
    leader = (rank == 0) if pair else None
    with ptx.if_(warp == 0):
        tm.alloc()
        tm.relinquish()
    with ptx.if_(tid == 0):
        for s in range(STAGES):
            ptx.mbarrier.init.shared.b64(full[s], 1)
            ptx.mbarrier.init.shared.b64(empty[s], 1)      # one tcgen05.commit per stage
        ptx.mbarrier.init.shared.b64(done[0], 1)
        ptx.fence.mbarrier_init.release.cluster()
    if pair:                               # the peer's TMA and commits reach these barriers
        ptx.tcgen05.fence__before_thread_sync()
        _cluster_sync()
        ptx.tcgen05.fence__after_thread_sync()
    else:
        tm.sync_after_alloc()
    taddr = tm.address()
    g = ptx.special.ctaid.z()
    m0 = ptx.special.ctaid.x() * BM        # for a pair ctaid.x = 2 * tile + rank
    n0 = ptx.special.ctaid.y() * ncols
    nb0 = n0 + rank * BN if pair else n0   # this CTA's share of B's columns
    with ptx.if_(tid == 0):
        _produce(A, B, a_ring, b_ring, full, empty, m0, nb0, g, kblocks, pair, leader)
    idesc = tcgen05.instr_desc(kind="f16", a=A.dtype.name, m=BM * cta_group, n=ncols, a_major="K",
                               b_major="MN", cta_group=cta_group)
    issuer = (tid == 32) & leader if pair else tid == 32
    with ptx.if_(issuer):
        _issue(a_ring, b_ring, full, empty, done, taddr, idesc, kblocks, pair)
    _wait(ptx.addr(done.base), 0)
    ptx.tcgen05.fence__after_thread_sync()
    ptx.bar.warp.sync(0xFFFFFFFF)
    _epilogue(C, taddr, staging, m0, n0, g, ncols)
    ptx.tcgen05.fence__before_thread_sync()
    if pair:
        _cluster_sync()                    # the peer is done with this CTA's shared memory
    else:
        ptx.bar.sync(0)
    with ptx.if_(warp == 0):
        tm.dealloc(taddr)


def _grid(cta_group: int):
    def grid(G: int, M: int, N: int) -> tuple[int, int, int]:
        return (cta_group * -(-M // (BM * cta_group)), -(-N // (BN * cta_group)), G)
    return grid


@functools.lru_cache(maxsize=None)
def build(dtype: str, cta_group: int) -> Kernel:
    """The kernel for ``dtype`` (``"bfloat16"`` or ``"float16"``) and
    ``cta_group`` (1 or 2), built once."""
    t = _DTYPES[dtype]
    specs = dict(
        in_specs=(Tile("G", "M", "K", t, Layout.TMA_128B, tma_box=(1, BM, BK)),
                  Tile("G", "K", "N", t, Layout.TMA_128B, tma_box=(1, BK, SPAN))),
        out_specs=(Tile("G", "M", "N", f32, Layout.TMA_128B, tma_box=(1, EPI, EPI)),))

    def body(A, B, C):
        _gemm_body(A, B, C, cta_group=cta_group)

    body.__doc__ = f"tcgen05 GEMM, {dtype}, cta_group::{cta_group} (see jaxptx.kernels._matmul_sm100)."
    return kernel(body, name=f"matmul_sm100_{t.name}_cta{cta_group}", grid=_grid(cta_group),
                  block=(THREADS, 1, 1), cluster=(cta_group, 1, 1), arch="sm_100a",
                  extern_smem=True, **specs)


def matmul_sm100(a, b, *, cta_group: int = 1):
    """``C[g] = A[g] @ B[g]`` on Blackwell tensor cores, in one launch.

    Args:
        a: (G, M, K) bf16 or f16.
        b: (G, K, N), the dtype of ``a``, row-major (read MN-major by the
            MMA: no transpose on the host).
        cta_group: 1 (a 128 x 128 tile per CTA) or 2 (a 256 x 256 tile per
            cluster of two CTAs, ``tcgen05.mma.cta_group::2``).

    Returns:
        (G, M, N) float32.

    Raises:
        SpecError: shapes or dtypes that do not match, K or N not a
            multiple of 8 (TMA needs 16-byte row strides), or a bad
            ``cta_group``.
    """
    if cta_group not in (1, 2):
        raise SpecError(f"matmul_sm100: cta_group must be 1 or 2, got {cta_group!r}")
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise SpecError(f"matmul_sm100: expected a (G, M, K) and b (G, K, N), got {a.shape} and {b.shape}")
    name = np.dtype(a.dtype).name
    if name not in _DTYPES or np.dtype(b.dtype).name != name:
        raise SpecError(f"matmul_sm100: a and b must both be bfloat16 or both float16, got "
                        f"{a.dtype} and {b.dtype}")
    if a.shape[2] % 8 or b.shape[2] % 8:
        raise SpecError(f"matmul_sm100: K and N must be multiples of 8 (16-byte TMA row strides), "
                        f"got K={a.shape[2]}, N={b.shape[2]}")
    return build(name, cta_group)(a, b)

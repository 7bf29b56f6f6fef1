"""Blackwell (sm_100a) flash-attention forward: TMA, ``tcgen05.mma``, tensor memory.

Each CTA owns ``BM = 128`` query rows of one (batch, query head); grid
``(ceil(Sq / BM), H, B)``. Query head ``h`` reads KV head ``h // (H //
Hkv)`` (grouped- and multi-query attention), the head coordinate of its K
and V tensor-map loads. Six warps, each with one role:

* **softmax** (warps 0-3, 128 threads): thread ``t`` owns query row
  ``m0 + t``, which is tensor-memory lane ``t`` of S and O (the M = 128 data
  path layout puts row ``i`` of D in lane ``i``). Per key block it reads its
  row of ``S = Q Kᵀ`` with ``tcgen05.ld.32x32b.x128`` (the whole row in
  registers: max and sum need no shuffles), masks, updates the running max
  and sum, exponentiates with ``ex2.approx``, and writes P back to **tensor
  memory** as packed 16-bit pairs (``tcgen05.st``): the next ``O += P V``
  reads A from ``[a-tmem]`` (``.kind::f16``), so P never visits shared
  memory. The running rescale of O is done **in tensor memory**: when a
  warp's max moved (``vote.sync.any``), after the previous ``P V`` landed,
  each thread loads its O row 32 columns at a time, multiplies by
  ``alpha = exp(m_old - m_new)`` and stores it back. At the end it divides
  O by the row sum and stores O and the log-sum-exp to global memory.
* **load** (warp 4, its first thread): the Q tile once, then K and V tiles
  of ``BN = 128`` keys through a ``STAGES``-deep ring with
  ``cp.async.bulk.tensor.4d`` (out-of-range rows arrive as zeros), each
  stage guarded by a K-full, a V-full and an empty mbarrier.
* **MMA** (warp 5, its first thread): ``S = Q Kᵀ`` (both K-major from
  shared memory) into tensor-memory columns ``[0, 128)``, ``tcgen05.commit``
  to ``s_full``; once the softmax has arrived on ``p_full`` (S read, P
  written, O rescaled) it issues the next block's ``Q Kᵀ`` — so the softmax
  of block j+1 overlaps ``P V`` of block j — and then ``O += P V`` (V
  MN-major from shared memory, no transpose), committed to the stage's
  ``empty`` barrier and to ``pv_done``.

Tensor memory: S in columns ``[0, 128)``, O (f32) in ``[128, 128 + D)``,
P (16-bit pairs) in ``[128 + D, 192 + D)``; 256 columns for D = 64, 512
for D = 128. Warp 0 allocates and frees them.

Tiles in shared memory are 64-column slabs (128 bytes of bf16/f16), each
128-byte swizzled, as TMA writes them; D = 128 uses two slabs per tile.
Keys past the sequence end and, when causal, keys after the query
(``jax.nn.dot_product_attention``'s ``is_causal``, top-left aligned) are
``-inf`` before the max; key blocks entirely after the CTA's last query are
never loaded. Stores of O and the log-sum-exp are guarded by ``row < Sq``.
The outputs are those of the other variants: o (B, Sq, H, D) and the
natural-log lse (B, H, Sq) float32.
"""

from __future__ import annotations

import functools

import jax

from .. import Layout, Tile, kernel, ptx, reg, smem
from ..dsl import Kernel, tcgen05
from ..types import bf16, f16, f32, u32
from ._attention_args import forward_dtype
from ._attention_sm100_softmax import BM, BN, Softmax, softmax_role, wait

__all__ = ["BM", "BN", "STAGES", "attention_kernel", "attention_sm100"]

STAGES = 2                         # K/V ring depth
SLAB = 64                          # columns per 128-byte swizzled slab
SOFTMAX_WARPS, LOAD_WARP, MMA_WARP = 4, 4, 5
THREADS = 32 * 6
LOG2E = 1.4426950408889634
_EL = {"bf16": bf16, "f16": f16}


def _at(bars, index):
    """The address of barrier ``index`` (a register) of an mbarrier array."""
    return ptx.addr(bars.base + index * 8)


class _Ring:
    """A stage index and the parity its next wait needs, stepped per block."""

    def __init__(self) -> None:
        self.stage = reg.scalar(u32, 0)
        self.phase = reg.scalar(u32, 0)

    def step(self) -> None:
        self.stage += 1
        with ptx.if_(self.stage == STAGES):
            self.stage.set(0)
            self.phase ^= 1


def _block_count(m0, S: int, T: int, causal: bool):
    """Key blocks this CTA visits: all, or (causal) those holding a key at or
    before its last valid query ``min(m0 + BM, S) - 1``."""
    if not causal:
        return reg.scalar(u32, -(-T // BN))
    return (ptx.min.u32(m0 + BM, min(S, T)) + (BN - 1)) // BN


def _load(q, k, v, tiles, bars, m0, h, h_kv, b, nblk) -> None:
    """The load thread: the Q tile (head ``h``), then each block's K and V
    (head ``h_kv``) into a ring stage once the MMAs have released it."""
    q_tile, k_tile, v_tile = tiles
    q_full, k_full, v_full, empty = bars
    D = q.shape[3]
    load = ptx.cp.async_.bulk.tensor._4d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
    ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, q_full[0], BM * D * 2)
    for c in range(D // SLAB):
        load(ptx.addr(q_tile, c * BM * SLAB * 2), ptx.addr(q.tma_desc(), coords=(c * SLAB, h, m0, b)),
             q_full[0])
    stage_bytes = BN * D * 2
    ring = _Ring()
    for j in ptx.range_(0, nblk, 1, dtype=u32):
        # Lap n waits for the release of lap n - 1; on lap 0 the parity-1 wait
        # returns at once (the phase before a fresh barrier's first).
        wait(_at(empty, ring.stage), ring.phase ^ 1)
        for bar, tile, src in ((k_full, k_tile, k), (v_full, v_tile, v)):
            dst = tile.base + ring.stage * stage_bytes
            bar_at = _at(bar, ring.stage)
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar_at, stage_bytes)
            for c in range(D // SLAB):
                load(ptx.addr(dst, c * BN * SLAB * 2),
                     ptx.addr(src.tma_desc(), coords=(c * SLAB, h_kv, j * BN, b)), bar_at)
        ring.step()


def _issue(dtype: str, D: int, tiles, bars, taddr, nblk) -> None:
    """The MMA thread: ``S = Q Kᵀ`` per block, and ``O += P V`` once the
    softmax has written P (module docstring for the order)."""
    q_tile, k_tile, v_tile = tiles
    q_full, k_full, v_full, empty, s_full, p_full, pv_done = bars
    el = _EL[dtype]
    stage_bytes = BN * D * 2
    s_desc = tcgen05.instr_desc(kind="f16", a=el.name, m=BM, n=BN, a_major="K", b_major="K")
    o_desc = tcgen05.instr_desc(kind="f16", a=el.name, m=BM, n=D, a_major="K", b_major="MN")
    s_id, o_id = reg.scalar(u32, s_desc), reg.scalar(u32, o_desc)
    never, always = reg.pred(init=0), reg.pred(init=1)
    mma = ptx.tcgen05.mma.cta_group__1.kind__f16
    # Q and K: K-major (rows, D) tiles; V: MN-major (BN keys, D), LBO = one slab.
    dq = tcgen05.smem_desc(q_tile)
    dk0 = tcgen05.smem_desc(k_tile)
    dv0 = tcgen05.smem_desc(v_tile.base, swizzle="128B", lbo=BN * SLAB * 2, sbo=8 * 128)
    s_tmem, o_tmem, p_tmem = taddr, taddr + BN, taddr + BN + D

    def scores(stage) -> None:
        dk = dk0 + ptx.mul.lo.u64(ptx.cvt.u64.u32(stage), stage_bytes >> 4)
        for kk in range(D // 16):
            a_off = tcgen05.k_offset(16 * kk, major="K", swizzle="128B", dtype=el, shape=(BM, D))
            b_off = tcgen05.k_offset(16 * kk, major="K", swizzle="128B", dtype=el, shape=(BN, D))
            mma(ptx.addr(s_tmem), tcgen05.advance(dq, a_off), tcgen05.advance(dk, b_off), s_id,
                always if kk else never)
        ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(ptx.addr(s_full.base))

    def values(stage, first) -> None:
        dv = dv0 + ptx.mul.lo.u64(ptx.cvt.u64.u32(stage), stage_bytes >> 4)
        for kk in range(BN // 16):
            b_off = tcgen05.k_offset(16 * kk, major="MN", swizzle="128B", dtype=el, shape=(BN, D))
            # P in tensor memory: 16 keys are 8 columns of packed pairs.
            mma(ptx.addr(o_tmem), ptx.addr(p_tmem + 8 * kk), tcgen05.advance(dv, b_off), o_id,
                first if kk == 0 else always)
        ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(_at(empty, stage))
        ptx.tcgen05.commit.cta_group__1.mbarrier__arrive__one.shared__cluster.b64(ptx.addr(pv_done.base))

    wait(q_full[0], 0)
    wait(k_full[0], 0)
    ptx.tcgen05.fence__after_thread_sync()
    scores(reg.scalar(u32, 0))
    k_ring, v_ring = _Ring(), _Ring()
    k_ring.step()
    for j in ptx.range_(0, nblk, 1, dtype=u32):
        wait(ptx.addr(p_full.base), j & 1)       # S(j) read, P(j) written, O rescaled
        ptx.tcgen05.fence__after_thread_sync()
        with ptx.if_(j + 1 < nblk):
            wait(_at(k_full, k_ring.stage), k_ring.phase)
            ptx.tcgen05.fence__after_thread_sync()
            scores(k_ring.stage)
            k_ring.step()
        wait(_at(v_full, v_ring.stage), v_ring.phase)
        ptx.tcgen05.fence__after_thread_sync()
        values(v_ring.stage, j != 0)
        v_ring.step()


def _body(dtype: str, q, k, v, o, lse, causal: bool) -> None:
    """The kernel: shared tiles, barriers and tensor memory, then the three roles."""
    _, S, H, D = q.shape
    T, Hkv = k.shape[1], k.shape[2]
    slabs = D // SLAB
    el = _EL[dtype]
    q_tile = smem.wgmma_tile(el, (slabs * BM, SLAB), major="K")
    k_tile = smem.wgmma_tile(el, (STAGES * slabs * BN, SLAB), major="K")
    v_tile = smem.wgmma_tile(el, (STAGES * slabs * BN, SLAB), major="K")
    q_full, k_full, v_full, empty = (smem.mbarrier(1), smem.mbarrier(STAGES),
                                     smem.mbarrier(STAGES), smem.mbarrier(STAGES))
    s_full, p_full, pv_done = smem.mbarrier(1), smem.mbarrier(1), smem.mbarrier(1)
    bars = (q_full, k_full, v_full, empty, s_full, p_full, pv_done)
    tm = tcgen05.TensorMemory(256 if BN + D + BN // 2 <= 256 else 512)
    tid = ptx.special.tid.x()
    warp = tid // 32
    with ptx.if_(warp == 0):
        tm.alloc()
        tm.relinquish()
    with ptx.if_(tid == 32):
        singles = [q_full[0], s_full[0], pv_done[0]]
        for bar in singles + [x[s] for x in (k_full, v_full, empty) for s in range(STAGES)]:
            ptx.mbarrier.init.shared.b64(bar, 1)            # one TMA arm or tcgen05.commit a phase
        ptx.mbarrier.init.shared.b64(p_full[0], 32 * SOFTMAX_WARPS)
        ptx.fence.mbarrier_init.release.cluster()
    tm.sync_after_alloc()
    taddr = tm.address()
    # Causal: the CTAs with the most key blocks (the last rows) start first.
    qblock = ptx.special.nctaid.x() - 1 - ptx.special.ctaid.x() if causal else ptx.special.ctaid.x()
    m0 = qblock * BM
    h, b = ptx.special.ctaid.y(), ptx.special.ctaid.z()
    per_kv = H // Hkv
    nblk = _block_count(m0, S, T, causal)
    tiles = (q_tile, k_tile, v_tile)
    with ptx.if_(warp < SOFTMAX_WARPS):
        softmax_role(Softmax(dtype, D, S, T, causal, m0, tid, taddr), bars, nblk, o, lse, h, b)
    with ptx.if_(tid == 32 * LOAD_WARP):
        h_kv = h if per_kv == 1 else h // per_kv
        _load(q, k, v, tiles, bars[:4], m0, h, h_kv, b, nblk)
    with ptx.if_(tid == 32 * MMA_WARP):
        _issue(dtype, D, tiles, bars, taddr, nblk)
    ptx.tcgen05.fence__before_thread_sync()
    ptx.bar.sync(0)
    with ptx.if_(warp == 0):
        ptx.tcgen05.fence__after_thread_sync()
        tm.dealloc(taddr)


def _grid(B: int, S: int, H: int) -> tuple[int, int, int]:
    """One CTA per BM query rows of one (batch, head)."""
    return (-(-S // BM), H, B)


@functools.cache
def attention_kernel(dtype: str) -> Kernel:
    """The sm_100a flash-attention forward kernel for ``dtype`` ("bf16" or "f16").

    Tensors: q (B, S, H, D), k and v (B, T, Hkv, D) in ``dtype`` (``Hkv``
    divides ``H``); outputs o (B, S, H, D) and lse (B, H, S) float32. The
    template keyword ``causal`` specialises the PTX; the raw f32 parameter
    ``scale_log2`` (``scale * log2 e``) rides the call, so every scale
    shares one PTX and cubin.
    """
    el = _EL[dtype]

    def spec(rows: str, heads: str, box_rows: int) -> Tile:
        return Tile("B", rows, heads, "D", el, Layout.TMA_128B, tma_box=(1, box_rows, 1, SLAB), tma_rank=4)

    def flash_attention_sm100(q, k, v, o, lse, *, causal: bool = False):
        """Flash-attention forward (module docstring): o and lse from q, k, v."""
        _body(dtype, q, k, v, o, lse, causal)

    return kernel(flash_attention_sm100, name=f"flash_attention_fwd_{dtype}_sm_100a",
                  in_specs=(spec("S", "H", BM), spec("T", "Hkv", BN), spec("T", "Hkv", BN)),
                  out_specs=(Tile("B", "S", "H", "D", el), Tile("B", "H", "S", f32)),
                  raw_params=[("f32", "scale_log2")], grid=_grid, block=(THREADS, 1, 1),
                  reqntid=(THREADS, 1, 1), arch="sm_100a", extern_smem=True)


def attention_sm100(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool,
                    scale: float) -> tuple[jax.Array, jax.Array]:
    """Flash-attention forward on Blackwell in one kernel launch: the
    arguments, outputs (``o`` and the natural-log ``lse``) and errors of
    :func:`jaxptx.kernels._attention_sm90.attention_sm90`."""
    dtype = forward_dtype("attention_sm100", q, k, v, scale)
    return attention_kernel(dtype)(q, k, v, causal=bool(causal), scale_log2=float(scale) * LOG2E)

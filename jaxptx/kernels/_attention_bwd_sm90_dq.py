"""The dQ kernel body of the Hopper attention backward (:mod:`._attention_bwd_sm90`).

One CTA per (128 query rows, batch × query head): thread 0 of warpgroup 0
loads the Q and dO tiles once and streams K and V in blocks of 64 keys
(query head ``h`` reads KV head ``h // (H // Hkv)``; causal: only blocks
holding a key at or before the CTA's last query) through the two-stage
ring; consumer warpgroups 1 and 2 take 64 rows each: S = Q·Kᵀ and dP =
dO·Vᵀ (``wgmma``, K-major descriptors), P = exp2(S·scale·log2 e + nlse),
dS = P ∘ (dP − delta), then dQ += dS·K with dS packed to 16 bits as the
register A operand and K read MN-major (the transpose bit). dQ is scaled
and stored once.
"""

from __future__ import annotations

from typing import Any

from ..dsl import ptx, reg, smem
from ..types import PtxType, b32, f32, u32
from ._attention_bwd_sm80 import _probabilities, _store_rows
from ._attention_bwd_sm90_parts import (
    CONSUMER_REGS,
    KN,
    PRODUCER_REGS,
    QM,
    SLAB,
    STAGES,
    WG,
    as_u64,
    at,
    init_barriers,
    kmajor_products,
    mask,
    pack_pairs,
    rs_products,
    signed,
    tma_load,
    wait,
    zeros,
)

__all__ = ["dq_body"]


def _dq_consume(q: Any, nlse: Any, delta: Any, dq: Any, tiles: tuple, bars: tuple, nblk: Any, m0: Any,
                bh: Any, tid: Any, *, causal: bool, dtype: PtxType) -> None:
    """One consumer warpgroup of the dQ kernel: 64 query rows' dQ over the key blocks."""
    _, Sq, H, D = q.shape
    Sp = nlse.shape[2]
    q_tile, do_tile, k_tile, v_tile = tiles
    qd_full, full, empty = bars
    wl = tid // WG - 1
    lane, warp = tid % 32, (tid % WG) // 32
    quad = lane % 4
    row_lo = m0 + wl * 64
    row = row_lo + warp * 16 + lane // 4                     # this lane's first accumulator row
    rows64 = as_u64(wl * (64 * SLAB * 2 // 16))
    q_desc, do_desc = q_tile.desc() + rows64, do_tile.desc() + rows64
    k_k, v_k = k_tile.desc(), v_tile.desc()                                      # K-major B
    k_mn = k_tile.desc(lbo=KN * SLAB * 2, sbo=8 * 128)                            # MN-major B
    stage_units = KN * D * 2 // 16
    # Rows past Sp (the last CTA's padding) read row Sp - 1: finite, never stored.
    stats = [ptx.mul.wide.u32(bh * Sp + ptx.min.u32(row + 8 * i, Sp - 1), 4) for i in range(2)]
    nl = [ptx.ld.global_.f32(ptx.addr(nlse.ptr + at_row)) for at_row in stats]
    dl = [ptx.ld.global_.f32(ptx.addr(delta.ptr + at_row)) for at_row in stats]
    acc_dq = zeros(D // 2)
    s, dp = reg.array(f32, KN // 2), reg.array(f32, KN // 2)
    ds = reg.array(b32, KN // 4)
    scale_log2 = ptx.param("scale_log2")

    wait(qd_full[0], 0)
    for j in ptx.range_(0, nblk, 1, dtype=u32):
        stage = j & 1
        wait(at(full, stage), (j >> 1) & 1)
        su = as_u64(stage * stage_units)
        ptx.wgmma.fence.sync.aligned()
        kmajor_products(s, q_desc, QM, k_k + su, KN, D, dtype)          # S = Q·Kᵀ
        kmajor_products(dp, do_desc, QM, v_k + su, KN, D, dtype)        # dP = dO·Vᵀ
        ptx.wgmma.commit_group.sync.aligned()
        ptx.wgmma.wait_group.sync.aligned(0)
        if causal:          # key kv0 + c is visible to row r when c <= r - kv0
            kv0 = j * KN
            with ptx.if_(kv0 + KN > row_lo + 1):
                base = signed(kv0 + quad * 2)
                mask(s, [signed(row + 8 * i) - base for i in range(2)], keep_below=True)
        _probabilities(s, dp, lambda jj, e: nl[e // 2], lambda jj, e: dl[e // 2], scale_log2)
        pack_pairs(ds, dp, dtype)
        ptx.wgmma.fence.sync.aligned()
        rs_products(acc_dq, ds, k_mn + su, dtype)                      # dQ += dS·K
        ptx.wgmma.commit_group.sync.aligned()
        ptx.wgmma.wait_group.sync.aligned(0)
        # Every consumer thread releases the stage it read (its own wgmma and
        # ld.shared reads are then ordered before the producer's next TMA write).
        ptx.mbarrier.arrive.shared.b64(ptx.SINK, at(empty, stage))

    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    b = bh // H
    q_first = ptx.mul.wide.u32(b * (Sq * H) + (bh - b * H), D * 2)
    _store_rows(acc_dq, ptx.param("scale"), row, Sq, dq.ptr + q_first, H * D * 2, quad, pack)


def dq_body(q: Any, k: Any, v: Any, do: Any, nlse: Any, delta: Any, dq: Any, *, causal: bool,
            dtype: PtxType) -> None:
    """The dQ kernel (module docstring): tiles, barriers, producer and consumers."""
    _, Sq, H, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    per_kv = H // Hkv
    slabs = D // SLAB
    q_tile, do_tile = (smem.wgmma_tile(dtype, (slabs * QM, SLAB)) for _ in range(2))
    k_tile, v_tile = (smem.wgmma_tile(dtype, (STAGES * slabs * KN, SLAB)) for _ in range(2))
    qd_full, full, empty = smem.mbarrier(1), smem.mbarrier(STAGES), smem.mbarrier(STAGES)
    tid = ptx.special.tid.x()
    init_barriers(tid, ((qd_full, 1, 1), (full, STAGES, 1), (empty, STAGES, 2 * WG)))

    qb, bh = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    b = bh // H
    h = bh - b * H
    h_kv = h if per_kv == 1 else h // per_kv
    m0 = qb * QM
    if causal:             # keys up to the CTA's last valid query
        nblk = (ptx.min.u32(m0 + QM, min(Sq, Skv)) + (KN - 1)) // KN
    else:
        nblk = reg.scalar(u32, -(-Skv // KN))

    with ptx.if_(tid < WG):
        ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
        with ptx.if_(tid == 0):
            tma_load(qd_full[0], ((q_tile.base, q, h, m0, QM), (do_tile.base, do, h, m0, QM)), b, D)
            for j in ptx.range_(0, nblk, 1, dtype=u32):
                stage = j & 1
                wait(at(empty, stage), ((j >> 1) + 1) & 1)
                off = stage * (KN * D * 2)
                tma_load(at(full, stage), ((k_tile.base + off, k, h_kv, j * KN, KN),
                                           (v_tile.base + off, v, h_kv, j * KN, KN)), b, D)
    with ptx.else_():
        ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
        _dq_consume(q, nlse, delta, dq, (q_tile, do_tile, k_tile, v_tile), (qd_full, full, empty), nblk,
                    m0, bh, tid, causal=causal, dtype=dtype)

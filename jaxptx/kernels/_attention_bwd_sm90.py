"""Flash-attention backward for Hopper (sm_90a): TMA, an mbarrier ring and ``wgmma``.

The design of :mod:`._attention_bwd_sm80` (two kernels from the forward's
log-sum-exp and the row terms ``nlse = −lse·log2 e``, ``delta = rowsum(dO ∘
O) − dlse`` of :func:`._attention_bwd.row_terms`; every output written once,
in a fixed order, by one CTA: no atomics, bitwise deterministic) on Hopper's
instructions. Each CTA has three warpgroups, as the forward
(:mod:`._attention_sm90`) has: warpgroup 0 gives registers back
(``setmaxnreg.dec``) and its thread 0 produces with TMA
(``cp.async.bulk.tensor.4d`` over the (B, S, heads, D) arrays, rows past the
end arriving as zeros) into a two-stage ring of full/empty mbarriers;
warpgroups 1 and 2 consume (``setmaxnreg.inc``), 64 rows each.

* :func:`dkdv_kernel`: one CTA per (128 keys, batch × KV head). K and V are
  loaded once; the ring streams Q and dO tiles of 64 query rows over every
  query head of the KV head's group (grouped-query attention) and every
  query block (causal: those from the key block's first key on). Keys are
  the accumulator rows: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ with ``wgmma`` from two
  K-major shared-memory descriptors; Pᵀ = exp2(Sᵀ·scale·log2 e + nlse) and
  dSᵀ = Pᵀ ∘ (dPᵀ − delta) in registers (nlse and delta per query column,
  which the producer brings into the stage with the tiles by
  ``cp.async.bulk``); then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ and dSᵀ
  packed to 16 bits as the register A operand and dO, Q read MN-major
  through the transpose bit — the same shared tiles, no transposed copy.
* :func:`dq_kernel` (:mod:`._attention_bwd_sm90_dq`): one CTA per (128 query
  rows, batch × query head); Q and dO are loaded once, K and V stream in
  blocks of 64 keys: S = Q·Kᵀ, dP = dO·Vᵀ (K-major descriptors), dS in
  registers, dQ += dS·K with K read MN-major.

Since the transposed products take P and dS from registers, neither is
staged through shared memory. Every consumer thread arrives on a stage's
empty barrier once its reads of the stage are done. ptxas honours
``setmaxnreg`` only with the entry's register count pinned (``.maxnreg``);
the dK/dV consumers need the 240 (dK, dV, Sᵀ, dPᵀ live together).

Padding: rows past Sq arrive as zero tiles and their nlse is −inf (P = 0);
keys past Skv are zero rows of K and V,
which add nothing to dQ = dS·K, and the dK/dV rows past Skv are never
stored — so only the causal mask (``jax.nn.dot_product_attention``'s
top-left aligned ``is_causal``) needs ``-inf`` scores.
"""

from __future__ import annotations

from typing import Any

from ..dsl import Kernel, Tile, kernel, ptx, reg, smem
from ..types import PtxType, b32, f32, u32
from ._attention_bwd_sm80 import _probabilities, _store_rows
from ._attention_bwd_sm90_dq import dq_body
from ._attention_bwd_sm90_parts import (
    BK,
    BQ,
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
    tma_spec,
    wait,
    zeros,
)

__all__ = ["dkdv_kernel", "dq_kernel"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _column_terms(row: Any) -> tuple[Any, Any]:
    """``nlse(j, e)`` and ``delta(j, e)`` for register ``4j + e`` of an
    accumulator whose columns are queries: the pair of columns ``8j + 2·(lane
    % 4)`` of the stage's row terms at ``row`` (that lane's first column).
    Each pair is read from shared memory when first asked for, so only the
    pair in use is live."""
    pairs: dict[tuple[int, int], Any] = {}

    def term(which: int) -> Any:
        def value(j: int, e: int) -> Any:
            if (which, j) not in pairs:
                pairs[which, j] = ptx.ld.shared.v2.f32(ptx.addr(row, which * BQ * 4 + 32 * j))
            return pairs[which, j][e % 2]
        return value

    return term(0), term(1)


def _dkdv_consume(dk: Any, dv: Any, tiles: tuple, bars: tuple, stream: tuple, tid: Any, *, causal: bool,
                  dtype: PtxType) -> None:
    """One consumer warpgroup of the dK/dV kernel: 64 keys' dK and dV over the stream."""
    Skv, Hkv, D = dk.shape[1], dk.shape[2], dk.shape[3]
    k_tile, v_tile, q_tile, do_tile, stats = tiles
    kv_full, full, empty = bars
    total, step, n0, b, h_kv = stream
    wl = tid // WG - 1
    lane, warp = tid % 32, (tid % WG) // 32
    quad = lane % 4
    key_lo = n0 + wl * 64
    key_row = key_lo + warp * 16 + lane // 4                 # this lane's first accumulator row
    rows64 = as_u64(wl * (64 * SLAB * 2 // 16))              # the warpgroup's 64 rows in each slab
    k_desc, v_desc = k_tile.desc() + rows64, v_tile.desc() + rows64
    q_k, do_k = q_tile.desc(), do_tile.desc()                                    # K-major B
    q_mn = q_tile.desc(lbo=BQ * SLAB * 2, sbo=8 * 128)                            # MN-major B
    do_mn = do_tile.desc(lbo=BQ * SLAB * 2, sbo=8 * 128)
    stage_units = BQ * D * 2 // 16
    acc_dk, acc_dv = zeros(D // 2), zeros(D // 2)
    s, dp = reg.array(f32, BQ // 2), reg.array(f32, BQ // 2)
    p, ds = reg.array(b32, BQ // 4), reg.array(b32, BQ // 4)
    scale_log2 = ptx.param("scale_log2")

    with ptx.if_(total > 0):
        wait(kv_full[0], 0)
    for t in ptx.range_(0, total, 1, dtype=u32):
        stage = t & 1
        _, qb = step(t)
        q0 = qb * BQ
        wait(at(full, stage), (t >> 1) & 1)
        su = as_u64(stage * stage_units)
        ptx.wgmma.fence.sync.aligned()
        kmajor_products(s, k_desc, BK, q_k + su, BQ, D, dtype)          # Sᵀ = K·Qᵀ
        kmajor_products(dp, v_desc, BK, do_k + su, BQ, D, dtype)        # dPᵀ = V·dOᵀ
        ptx.wgmma.commit_group.sync.aligned()
        ptx.wgmma.wait_group.sync.aligned(0)
        if causal:          # query q0 + c sees key r when c >= r - q0
            with ptx.if_(q0 < key_lo + 64):
                base = signed(q0 + quad * 2)
                mask(s, [signed(key_row + 8 * i) - base for i in range(2)], keep_below=False)
        _probabilities(s, dp, *_column_terms(stats.base + stage * (2 * BQ * 4) + quad * 8), scale_log2)
        pack_pairs(p, s, dtype)
        pack_pairs(ds, dp, dtype)
        ptx.wgmma.fence.sync.aligned()
        rs_products(acc_dv, p, do_mn + su, dtype)                      # dV += Pᵀ·dO
        rs_products(acc_dk, ds, q_mn + su, dtype)                      # dK += dSᵀ·Q
        ptx.wgmma.commit_group.sync.aligned()
        ptx.wgmma.wait_group.sync.aligned(0)
        # Every consumer thread releases the stage it read (its own wgmma and
        # ld.shared reads are then ordered before the producer's next TMA write).
        ptx.mbarrier.arrive.shared.b64(ptx.SINK, at(empty, stage))

    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    kv_first = ptx.mul.wide.u32(b * (Skv * Hkv) + h_kv, D * 2)
    _store_rows(acc_dk, ptx.param("scale"), key_row, Skv, dk.ptr + kv_first, Hkv * D * 2, quad, pack)
    _store_rows(acc_dv, None, key_row, Skv, dv.ptr + kv_first, Hkv * D * 2, quad, pack)


def _dkdv_body(q: Any, k: Any, v: Any, do: Any, nlse: Any, delta: Any, dk: Any, dv: Any, *,
               causal: bool, dtype: PtxType) -> None:
    """The dK/dV kernel (module docstring): tiles, barriers, the stream, the roles."""
    _, Sq, H, D = q.shape
    Hkv, Sp = k.shape[2], nlse.shape[2]
    per_kv = H // Hkv
    slabs = D // SLAB
    k_tile, v_tile = (smem.wgmma_tile(dtype, (slabs * BK, SLAB)) for _ in range(2))
    q_tile, do_tile = (smem.wgmma_tile(dtype, (STAGES * slabs * BQ, SLAB)) for _ in range(2))
    stats = smem.alloc(f32, (STAGES, 2, BQ), align=128)     # [stage][nlse, delta] of the query block
    kv_full, full, empty = smem.mbarrier(1), smem.mbarrier(STAGES), smem.mbarrier(STAGES)
    tid = ptx.special.tid.x()
    init_barriers(tid, ((kv_full, 1, 1), (full, STAGES, 1), (empty, STAGES, 2 * WG)))

    kb, bh = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    b = bh // Hkv
    h_kv = bh - b * Hkv
    n0 = kb * BK
    nq = _cdiv(Sq, BQ)
    if causal:             # query blocks holding a query at or after the first key n0
        first = kb * (BK // BQ)
        n_q = ptx.max.u32(first, nq) - first
    else:
        first, n_q = reg.scalar(u32, 0), reg.scalar(u32, nq)
    total = n_q * per_kv if per_kv > 1 else n_q

    def step(t: Any) -> tuple[Any, Any]:
        """Step ``t`` of the stream: (query head, query block), t = g·n_q + i."""
        if per_kv == 1:
            return h_kv, first + t
        g = t // n_q
        return h_kv * per_kv + g, first + (t - g * n_q)

    with ptx.if_(tid < WG):
        ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
        with ptx.if_(tid == 0):
            with ptx.if_(total > 0):
                tma_load(kv_full[0], ((k_tile.base, k, h_kv, n0, BK), (v_tile.base, v, h_kv, n0, BK)), b, D)
            for t in ptx.range_(0, total, 1, dtype=u32):
                stage = t & 1
                # Lap n waits for the release of lap n - 1 (lap 0's parity-1 wait returns at once).
                wait(at(empty, stage), ((t >> 1) + 1) & 1)
                h, qb = step(t)
                off = stage * (BQ * D * 2)
                row = ptx.mul.wide.u32((b * H + h) * Sp + qb * BQ, 4)
                st = stats.base + stage * (2 * BQ * 4)
                tma_load(at(full, stage), ((q_tile.base + off, q, h, qb * BQ, BQ),
                                           (do_tile.base + off, do, h, qb * BQ, BQ)), b, D,
                         ((st, nlse.ptr + row, BQ * 4), (st + BQ * 4, delta.ptr + row, BQ * 4)))
    with ptx.else_():
        ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
        _dkdv_consume(dk, dv, (k_tile, v_tile, q_tile, do_tile, stats), (kv_full, full, empty),
                      (total, step, n0, b, h_kv), tid, causal=causal, dtype=dtype)


_KERNELS: dict[tuple[str, str, int], Kernel] = {}
_ROWS = Tile("B", "H", "Sp", f32)          # nlse, delta: (B, H, Sp) f32, Sp = Sq rounded up to 64
_RAW = [("f32", "scale_log2"), ("f32", "scale")]
# ptxas honours setmaxnreg only when the entry's register count is pinned
# (else: "'setmaxnreg' ignored; unable to determine register count at entry",
# and every warpgroup is held to 168 registers): 65536 / 384 threads.
_MAXNREG = [("maxnreg", (65536 // (3 * WG) // 8 * 8,))]


def dkdv_kernel(dtype: PtxType, head_dim: int) -> Kernel:
    """The sm_90a dK/dV kernel for ``dtype`` (bf16 or f16) and ``head_dim`` (64 or 128).

    Inputs ``q``, ``do`` (B, Sq, H, D), ``k``, ``v`` (B, Skv, Hkv, D), ``nlse``
    and ``delta`` (B, H, Sp) f32 (:func:`._attention_bwd.row_terms`); outputs
    ``dk``, ``dv`` like ``k``; template ``causal``; raw params ``scale_log2``
    (scale·log2 e) and ``scale``.
    """
    key = ("dkdv", dtype.name, head_dim)
    if key not in _KERNELS:
        def flash_attention_bwd_dkdv(q, k, v, do, nlse, delta, dk, dv, *, causal=False):
            """dK, dV of one (128 keys, batch × KV head) per CTA (module docstring)."""
            _dkdv_body(q, k, v, do, nlse, delta, dk, dv, causal=causal, dtype=dtype)

        q_spec = tma_spec(dtype, "Sq", "H", head_dim, BQ)
        kv_spec = tma_spec(dtype, "Skv", "Hkv", head_dim, BK)
        out = Tile("B", "Skv", "Hkv", head_dim, dtype)
        _KERNELS[key] = kernel(
            flash_attention_bwd_dkdv, name=f"flash_attention_bwd_dkdv_{dtype.name}_d{head_dim}_sm_90a",
            in_specs=(q_spec, kv_spec, kv_spec, q_spec, _ROWS, _ROWS), out_specs=(out, out),
            grid=lambda B, Skv, Hkv: (_cdiv(Skv, BK), B * Hkv, 1), block=(3 * WG, 1, 1),
            reqntid=(3 * WG, 1, 1), arch="sm_90a", extern_smem=True, raw_params=_RAW,
            raw_directives=_MAXNREG)
    return _KERNELS[key]


def dq_kernel(dtype: PtxType, head_dim: int) -> Kernel:
    """The sm_90a dQ kernel for ``dtype`` (bf16 or f16) and ``head_dim`` (64 or 128).

    Inputs as :func:`dkdv_kernel`'s; output ``dq`` like ``q``; template
    ``causal``; raw params ``scale_log2`` and ``scale``.
    """
    key = ("dq", dtype.name, head_dim)
    if key not in _KERNELS:
        def flash_attention_bwd_dq(q, k, v, do, nlse, delta, dq, *, causal=False):
            """dQ of one (128 query rows, batch × query head) per CTA (module docstring)."""
            dq_body(q, k, v, do, nlse, delta, dq, causal=causal, dtype=dtype)

        q_spec = tma_spec(dtype, "Sq", "H", head_dim, QM)
        kv_spec = tma_spec(dtype, "Skv", "Hkv", head_dim, KN)
        _KERNELS[key] = kernel(
            flash_attention_bwd_dq, name=f"flash_attention_bwd_dq_{dtype.name}_d{head_dim}_sm_90a",
            in_specs=(q_spec, kv_spec, kv_spec, q_spec, _ROWS, _ROWS),
            out_specs=(Tile("B", "Sq", "H", head_dim, dtype),),
            grid=lambda B, Sq, H: (_cdiv(Sq, QM), B * H, 1), block=(3 * WG, 1, 1),
            reqntid=(3 * WG, 1, 1), arch="sm_90a", extern_smem=True, raw_params=_RAW,
            raw_directives=_MAXNREG)
    return _KERNELS[key]

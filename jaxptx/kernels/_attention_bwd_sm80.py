"""Flash-attention backward for Ampere and later: ``mma.sync.m16n8k16``.

From the forward's log-sum-exp (``lse``) and the row terms
``delta = rowsum(dO ∘ O) − dlse`` (a small JAX preprocess, O(S·D), in
:mod:`._attention_bwd`), two kernels give dQ, dK and dV without ever holding
the S×S score matrix (with S = Q·Kᵀ, P = exp(S·scale − lse)):

The kernels are launched by :func:`._attention_bwd.attention_backward_sm80`.

* :func:`dkdv_kernel`: one CTA per (block of 64 keys, batch × KV head), four
  warps of 16 keys. The K and V tiles stay in shared memory; the CTA walks
  every query head of its group (grouped-query attention: the ``H // Hkv``
  query heads reading this KV head) and every query block of 64 rows (causal:
  only blocks on or below the diagonal), streaming Q, dO and the block's
  ``lse``/``delta`` with double-buffered ``cp.async`` as the forward does. It
  works on the transposed problem, so that keys are accumulator rows: Sᵀ =
  K·Qᵀ and dPᵀ = V·dOᵀ (``ldmatrix`` A fragments of K and V, B fragments of Q
  and dO), Pᵀ = exp2(Sᵀ·scale·log2 e − lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ −
  delta), then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ and dSᵀ packed to 16 bits
  in registers (the accumulator layout is the A fragment layout) and Q, dO
  through ``ldmatrix.trans``. dK and dV of the whole group sum in registers:
  no atomics, one store.
* :func:`dq_kernel`: one CTA per (block of 64 query rows, batch × query
  head), the forward's loop over key blocks with Q and dO fragments held in
  registers: S = Q·Kᵀ, dP = dO·Vᵀ, dS = P ∘ (dP − delta), dQ += dS·K.

dQ has its own kernel rather than f32 atomics from the dK/dV kernel: every
output is written once by one CTA in a fixed order, so gradients are
bitwise deterministic (atomics sum in arrival order), need no zeroed f32
buffer nor a conversion pass, and run the same on the emulator. The price
is recomputing S and dP (7 matrix products in all instead of 5).

Rows past the sequence ends: loads clamp to the last row (finite values);
``lse`` and ``delta`` come padded to a multiple of 64 rows with ``+inf`` and
0, so a padded query row gets P = 0 and dS = 0; keys past Skv are masked to
−inf in the dQ kernel and never stored by the dK/dV kernel. ``causal`` is
``jax.nn.dot_product_attention``'s top-left aligned mask (query ``i`` sees
keys ``j <= i``).

Precision (flash attention's two shortcuts, as FlashAttention-2 and cuDNN
take them): P comes from the f32 ``lse`` (good to half an ulp of its
magnitude) and ``delta`` from the 16-bit O rather than from rowsum(P ∘ dP).
Measured on nearly one-hot rows: scaled scores up to ~400 match jax's f32
gradient within 0.5% of its largest entry; at ~3000, dQ and dK are off by a
quarter of it (O's rounding in ``delta`` times |K|·scale); past ~4e4, P
overflows (inf, NaN). :func:`jaxptx.kernels.attention.attention_backward`
(JAX, neither shortcut) stays exact there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..dsl import Kernel, Tile, kernel, ptx, reg, smem
from ..types import PtxType, f32, s32
from ._attention_sm80 import (
    BLOCK_M,
    BLOCK_N,
    THREADS,
    _accumulate_pv,
    _cdiv,
    _Loader,
    _mask,
    _Tiles,
)

__all__ = ["dkdv_kernel", "dq_kernel"]

NEG_INF = float("-inf")
# CTAs per SM to keep registers for (.minnctapersm), chosen so that ptxas
# neither spills nor runs short of registers (checked in the tests).
_MIN_CTAS = {64: 2, 128: 1}


def _mma_ops(dtype: PtxType) -> tuple[Any, Any]:
    """The ``mma.sync`` (f32 accumulate) and the f32-pair → 16-bit pack for ``dtype``."""
    mma = getattr(getattr(ptx.mma.sync.aligned.m16n8k16.row.col.f32, dtype.name), dtype.name).f32
    return mma, getattr(ptx.cvt.rn, f"{dtype.name}x2").f32


def _products(acc: Any, a_lane: list, a_tiles: _Tiles, b_lane: list, b_tiles: _Tiles, ksteps: int,
              mma: Any, b_offset: int = 0) -> None:
    """acc = A·Bᵀ for one warp: 16 rows of A (a row-major tile at ``a_lane``)
    against 64 rows of B (a row-major tile at ``b_lane`` + ``b_offset``),
    both ``16·ksteps`` wide. A fragments are read per k-step (4 registers
    live, not ``4·ksteps``)."""
    for r in acc:
        r.set(0.0)
    for ks in range(ksteps):
        a = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(a_tiles.addr(a_lane, ks, 0))
        for jj in range(BLOCK_N // 16):
            bf = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(b_tiles.addr(b_lane, ks, 16 * jj, b_offset))
            for half in range(2):
                part = acc[8 * jj + 4 * half: 8 * jj + 4 * half + 4]
                mma(part, a, bf[2 * half: 2 * half + 2], part)


def _frag_products(acc: Any, frags: list, b_lane: list, b_tiles: _Tiles, mma: Any, b_offset: int) -> None:
    """acc = A·Bᵀ with A's fragments already in registers (``frags``, one per k-step)."""
    for r in acc:
        r.set(0.0)
    for ks, a in enumerate(frags):
        for jj in range(BLOCK_N // 16):
            bf = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(b_tiles.addr(b_lane, ks, 16 * jj, b_offset))
            for half in range(2):
                part = acc[8 * jj + 4 * half: 8 * jj + 4 * half + 4]
                mma(part, a, bf[2 * half: 2 * half + 2], part)


def _store_rows(acc: Any, factor: Any, row: Any, limit: int, head: Any, row_bytes: int, quad: Any,
                pack: Any) -> None:
    """Store ``acc·factor`` (``acc`` when None; a warp's (16, D) accumulator, rows ``row`` and
    ``row + 8`` for this lane) as 16-bit rows ``< limit`` of the (S, heads, D)
    array whose row 0 of this head is at ``head``."""
    for i in range(2):
        r = row + 8 * i
        at = head + ptx.mul.wide.u32(r, row_bytes) + ptx.cvt.u64.u32(quad * 4)
        for j in range(len(acc) // 4):
            lo, hi = acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]
            word = pack(hi, lo) if factor is None else pack(hi * factor, lo * factor)
            ptx.st.global_.b32(ptx.addr(at, j * 16), word, pred=r < limit)


def _probabilities(acc_s: Any, acc_dp: Any, nlse: Any, delta: Any, scale_log2: Any) -> None:
    """In place: ``acc_s`` ← P = exp2(S·scale·log2 e + nlse) and ``acc_dp`` ←
    dS = P ∘ (dP − delta); ``nlse(j, e)`` and ``delta(j, e)`` give the
    values for register ``4j + e`` (``nlse`` is −lse·log2 e)."""
    for idx, (s, dp) in enumerate(zip(acc_s, acc_dp)):
        j, e = idx // 4, idx % 4
        ptx.fma.rn.f32(s, s, scale_log2, nlse(j, e))
        ptx.ex2.approx.ftz.f32(s, s)
        ptx.sub.f32(dp, dp, delta(j, e))
        ptx.mul.f32(dp, dp, s)


def _loop(stop: Any) -> Iterator[Any]:
    """``for i in range(stop)`` at run time, never unrolled: yields ``i``
    (s32), which the body must step (``ptx.add.s32(i, i, 1)``) at its end.

    A small static trip count (three key blocks) let ptxas unroll the dQ
    loop completely and spill; ``.pragma "nounroll"`` must open the loop's
    header block, which ``ptx.while_`` traces its condition into.
    """
    i = reg.scalar(s32, 0)

    def head() -> Any:
        ptx.directive("pragma", '"nounroll"', semicolon=True)
        return i < stop

    for _ in ptx.while_(head):
        yield i


def _dkdv_body(q: Any, k: Any, v: Any, do: Any, nlse: Any, delta: Any, dk: Any, dv: Any, *,
               causal: bool, dtype: PtxType) -> None:
    """The dK/dV kernel body (module docstring)."""
    _, Sq, H, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    Sp = nlse.shape[2]
    per_kv = H // Hkv
    mma, pack = _mma_ops(dtype)
    ksteps = D // 16
    tile_bytes = BLOCK_M * D * 2

    skv = smem.alloc(dtype, (2, BLOCK_N, D), align=128)             # K, V
    sqd = smem.alloc(dtype, (2, 2, BLOCK_M, D), align=128)          # [stage][Q, dO]
    sstat = smem.alloc(f32, (2, 2, BLOCK_M), align=16)              # [stage][nlse, delta]

    tid = ptx.special.tid.x()
    lane, warp = tid & 31, tid >> 5
    group, quad = lane >> 2, lane & 3
    kb, bh = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    b = bh // Hkv
    h_kv = bh - b * Hkv
    qp, kp, vp, dop, nlp, dlp, dkp, dvp = ptx.batch_ptrs(q, k, v, do, nlse, delta, dk, dv)
    kv_first = ptx.mul.wide.u32(b * (Skv * Hkv) + h_kv, D * 2)

    loader = _Loader(tid, D)
    kv_dst = skv.base + loader.s_off
    loader.load(kb * BLOCK_N, Skv, Hkv * D * 2,
                ((loader.source(kp + kv_first), kv_dst), (loader.source(vp + kv_first), kv_dst + tile_bytes)))

    # The stream of (query head of the group, query block) pairs, t = g·n_q + i.
    nq = _cdiv(Sq, BLOCK_M)
    if causal:
        first_q = kb
        n_q = ptx.max.s32(nq - kb, 0)
    else:
        first_q = reg.scalar(s32, 0)
        n_q = reg.scalar(s32, nq)
    total = n_q * per_kv
    qd_dst = sqd.base + loader.s_off
    q_col, do_col = loader.source(qp), loader.source(dop)
    stat_chunk = ptx.cvt.u64.u32(tid << 4)

    def pair(t: Any) -> tuple[Any, Any]:
        g = t // n_q
        return h_kv * per_kv + g, first_q + (t - g * n_q)

    def issue(t: Any, stage: Any) -> None:
        """cp.async the Q, dO tiles and the lse/delta rows of step ``t`` into ``stage``."""
        h, qb = pair(t)
        head = ptx.mul.wide.u32(b * (Sq * H) + h, D * 2)
        dst = qd_dst + stage * (2 * tile_bytes)
        loader.load(qb * BLOCK_M, Sq, H * D * 2, ((q_col + head, dst), (do_col + head, dst + tile_bytes)))
        stat = ptx.mul.wide.u32((b * H + h) * Sp + qb * BLOCK_M, 4) + stat_chunk
        s_dst = sstat.base + stage * (2 * BLOCK_M * 4) + (tid << 4)
        with ptx.if_(tid < BLOCK_M // 4):            # 16 lanes x 16 bytes per row vector
            ptx.cp.async_.cg.shared.global_(ptx.addr(s_dst), ptx.addr(nlp + stat), 16)
            ptx.cp.async_.cg.shared.global_(ptx.addr(s_dst, BLOCK_M * 4), ptx.addr(dlp + stat), 16)

    with ptx.if_(total > 0):
        issue(reg.scalar(s32, 0), 0)
    ptx.cp.async_.commit_group()

    mat, r8 = lane >> 3, lane & 7
    a_tiles = _Tiles(r8 + ((mat & 1) << 3), mat >> 1, D * 2)      # A, and B through .trans
    b_tiles = _Tiles(r8 + ((mat >> 1) << 3), mat & 1, D * 2)      # B from (n, k) rows
    k_lane = [skv.base + warp * (16 * D * 2) + x for x in a_tiles.lane]
    v_lane = [x + tile_bytes for x in k_lane]

    acc_dk, acc_dv = reg.array(f32, D // 2), reg.array(f32, D // 2)
    for r in (*acc_dk, *acc_dv):
        r.set(0.0)
    acc_s, acc_dp = reg.array(f32, BLOCK_M // 2), reg.array(f32, BLOCK_M // 2)
    scale_log2, scale = ptx.param("scale_log2"), ptx.param("scale")
    # Causal, diagonal block: query column 8j + 2·quad + e is masked below key row lim_i.
    key_row = warp * 16 + group
    lims = [ptx.sub.s32(key_row + 8 * i, quad * 2) for i in range(2)]     # signed: may be < 0

    for t in _loop(total):
        ptx.cp.async_.wait_group(0)
        ptx.bar.sync(0)
        stage = t & 1
        with ptx.if_(t + 1 < total):
            issue(t + 1, stage ^ 1)
            ptx.cp.async_.commit_group()
        qd = sqd.base + stage * (2 * tile_bytes)
        qb_lane = [qd + x for x in b_tiles.lane]
        _products(acc_s, k_lane, a_tiles, qb_lane, b_tiles, ksteps, mma)                  # Sᵀ = K·Qᵀ
        _products(acc_dp, v_lane, a_tiles, qb_lane, b_tiles, ksteps, mma, tile_bytes)     # dPᵀ = V·dOᵀ
        if causal:
            _, qb = pair(t)
            with ptx.if_(qb == kb):
                for idx, s in enumerate(acc_s):
                    j, i, e = idx // 4, (idx // 2) % 2, idx % 2
                    ptx.mov.f32(s, NEG_INF, pred=lims[i] > 8 * j + e)
        st = sstat.base + stage * (2 * BLOCK_M * 4) + quad * 8
        nl = [ptx.ld.shared.v2.f32(ptx.addr(st, 32 * j)) for j in range(BLOCK_M // 8)]
        dl = [ptx.ld.shared.v2.f32(ptx.addr(st, BLOCK_M * 4 + 32 * j)) for j in range(BLOCK_M // 8)]
        _probabilities(acc_s, acc_dp, lambda j, e, nl=nl: nl[j][e % 2], lambda j, e, dl=dl: dl[j][e % 2],
                       scale_log2)
        qa_lane = [qd + x for x in a_tiles.lane]
        _accumulate_pv(acc_dv, acc_s, a_tiles, qa_lane, tile_bytes, mma, pack)          # dV += Pᵀ·dO
        _accumulate_pv(acc_dk, acc_dp, a_tiles, qa_lane, 0, mma, pack)                  # dK += dSᵀ·Q
        ptx.add.s32(t, t, 1)

    row = kb * BLOCK_N + key_row
    _store_rows(acc_dk, scale, row, Skv, dkp + kv_first, Hkv * D * 2, quad, pack)
    _store_rows(acc_dv, None, row, Skv, dvp + kv_first, Hkv * D * 2, quad, pack)


def _dq_body(q: Any, k: Any, v: Any, do: Any, nlse: Any, delta: Any, dq: Any, *, causal: bool,
             dtype: PtxType) -> None:
    """The dQ kernel body (module docstring)."""
    _, Sq, H, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    Sp = nlse.shape[2]
    per_kv = H // Hkv
    mma, pack = _mma_ops(dtype)
    kv_stride = Hkv * D * 2
    tile_bytes = BLOCK_M * D * 2

    sqd = smem.alloc(dtype, (2, BLOCK_M, D), align=128)              # Q, dO
    skv = smem.alloc(dtype, (2, 2, BLOCK_N, D), align=128)           # [stage][K, V]

    tid = ptx.special.tid.x()
    lane, warp = tid & 31, tid >> 5
    group, quad = lane >> 2, lane & 3
    qb, bh = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    q0 = qb * BLOCK_M
    b = bh // H
    h = bh - b * H
    qp, kp, vp, dop, nlp, dlp, dqp = ptx.batch_ptrs(q, k, v, do, nlse, delta, dq)
    q_first = ptx.mul.wide.u32(b * (Sq * H) + h, D * 2)
    h_kv = h if per_kv == 1 else h // per_kv
    kv_first = ptx.mul.wide.u32(b * (Skv * Hkv) + h_kv, D * 2)

    loader = _Loader(tid, D)
    qd_dst = sqd.base + loader.s_off
    loader.load(q0, Sq, H * D * 2, ((loader.source(qp + q_first), qd_dst),
                                    (loader.source(dop + q_first), qd_dst + tile_bytes)))
    k_col, v_col = loader.source(kp + kv_first), loader.source(vp + kv_first)
    kv_dst = skv.base + loader.s_off
    loader.load(0, Skv, kv_stride, ((k_col, kv_dst), (v_col, kv_dst + tile_bytes)))
    ptx.cp.async_.commit_group()

    mat, r8 = lane >> 3, lane & 7
    a_tiles = _Tiles(r8 + ((mat & 1) << 3), mat >> 1, D * 2)
    b_tiles = _Tiles(r8 + ((mat >> 1) << 3), mat & 1, D * 2)
    rows_lane = [sqd.base + warp * (16 * D * 2) + x for x in a_tiles.lane]
    ptx.cp.async_.wait_group(0)
    ptx.bar.sync(0)
    qf = [ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(a_tiles.addr(rows_lane, ks, 0))
          for ks in range(D // 16)]
    dof = [ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(a_tiles.addr(rows_lane, ks, 0, tile_bytes))
           for ks in range(D // 16)]

    row_g = q0 + warp * 16 + group
    stat = ptx.mul.wide.u32(bh * Sp + row_g, 4)                 # rows < Sp: padded, in bounds
    nl = [ptx.ld.global_.f32(ptx.addr(nlp + stat, 32 * i)) for i in range(2)]
    dl = [ptx.ld.global_.f32(ptx.addr(dlp + stat, 32 * i)) for i in range(2)]

    acc_dq = reg.array(f32, D // 2)
    for r in acc_dq:
        r.set(0.0)
    acc_s, acc_dp = reg.array(f32, BLOCK_N // 2), reg.array(f32, BLOCK_N // 2)
    scale_log2, scale = ptx.param("scale_log2"), ptx.param("scale")
    nkv = _cdiv(Skv, BLOCK_N)
    n_blocks = ptx.min.u32(qb + 1, nkv) if causal else nkv
    masks_needed = causal or Skv % BLOCK_N != 0
    block_limit = ptx.min.s32(q0 + 1, Skv) if causal else Skv

    for kb in _loop(n_blocks):
        ptx.cp.async_.wait_group(0)
        ptx.bar.sync(0)
        stage = skv.base + (kb & 1) * (2 * tile_bytes)
        with ptx.if_(kb + 1 < n_blocks):
            nxt = kv_dst + ((kb + 1) & 1) * (2 * tile_bytes)
            loader.load((kb + 1) * BLOCK_N, Skv, kv_stride, ((k_col, nxt), (v_col, nxt + tile_bytes)))
            ptx.cp.async_.commit_group()
        kb_lane = [stage + x for x in b_tiles.lane]
        _frag_products(acc_s, qf, kb_lane, b_tiles, mma, 0)                     # S = Q·Kᵀ
        _frag_products(acc_dp, dof, kb_lane, b_tiles, mma, tile_bytes)          # dP = dO·Vᵀ
        if masks_needed:
            with ptx.if_(kb * BLOCK_N + BLOCK_N > block_limit):
                _mask(acc_s, kb, row_g, quad, Skv, causal)
        _probabilities(acc_s, acc_dp, lambda j, e, nl=nl: nl[e // 2], lambda j, e, dl=dl: dl[e // 2],
                       scale_log2)
        ka_lane = [stage + x for x in a_tiles.lane]
        _accumulate_pv(acc_dq, acc_dp, a_tiles, ka_lane, 0, mma, pack)         # dQ += dS·K

        ptx.add.s32(kb, kb, 1)

    _store_rows(acc_dq, scale, row_g, Sq, dqp + q_first, H * D * 2, quad, pack)


_KERNELS: dict[tuple[str, str, int, str], Kernel] = {}


def _specs(dtype: PtxType, head_dim: int) -> tuple[Tile, Tile, Tile]:
    """The q-like, k-like and row-vector (B, H, Sp) f32 specs."""
    return (Tile("B", "Sq", "H", head_dim, dtype), Tile("B", "Skv", "Hkv", head_dim, dtype),
            Tile("B", "H", "Sp", f32))


def dkdv_kernel(dtype: PtxType, head_dim: int, arch: str = "sm_80") -> Kernel:
    """The dK/dV kernel for ``dtype`` (bf16 or f16) and ``head_dim`` (64 or 128).

    Inputs ``q``, ``do`` (B, Sq, H, D), ``k``, ``v`` (B, Skv, Hkv, D), ``nlse``
    and ``delta`` (B, H, Sp) f32 (Sp: Sq rounded up to 64; see
    :func:`row_terms`); outputs ``dk``, ``dv`` like ``k``; template ``causal``;
    raw params ``scale_log2`` and ``scale``. ``batch="z"``: ``jax.vmap`` is
    one launch.
    """
    key = ("dkdv", dtype.name, head_dim, arch)
    if key not in _KERNELS:
        def flash_attention_bwd_dkdv(q, k, v, do, nlse, delta, dk, dv, *, causal=False):
            _dkdv_body(q, k, v, do, nlse, delta, dk, dv, causal=causal, dtype=dtype)

        q_spec, kv_spec, row_spec = _specs(dtype, head_dim)
        _KERNELS[key] = kernel(
            flash_attention_bwd_dkdv,
            in_specs=(q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec), out_specs=(kv_spec, kv_spec),
            grid=lambda B, Skv, Hkv: (_cdiv(Skv, BLOCK_N), B * Hkv, 1),
            block=(THREADS, 1, 1), arch=arch, batch="z", extern_smem=True,
            raw_params=[("f32", "scale_log2"), ("f32", "scale")],
            raw_directives=[("minnctapersm", (_MIN_CTAS[head_dim],))],
            name=f"flash_attention_bwd_dkdv_{dtype.name}_d{head_dim}_{arch}")
    return _KERNELS[key]


def dq_kernel(dtype: PtxType, head_dim: int, arch: str = "sm_80") -> Kernel:
    """The dQ kernel for ``dtype`` (bf16 or f16) and ``head_dim`` (64 or 128).

    Inputs as :func:`dkdv_kernel`'s; output ``dq`` like ``q``; template
    ``causal``; raw params ``scale_log2`` and ``scale``; ``batch="z"``.
    """
    key = ("dq", dtype.name, head_dim, arch)
    if key not in _KERNELS:
        def flash_attention_bwd_dq(q, k, v, do, nlse, delta, dq, *, causal=False):
            _dq_body(q, k, v, do, nlse, delta, dq, causal=causal, dtype=dtype)

        q_spec, kv_spec, row_spec = _specs(dtype, head_dim)
        _KERNELS[key] = kernel(
            flash_attention_bwd_dq,
            in_specs=(q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec), out_specs=(q_spec,),
            grid=lambda B, Sq, H: (_cdiv(Sq, BLOCK_M), B * H, 1),
            block=(THREADS, 1, 1), arch=arch, batch="z", extern_smem=True,
            raw_params=[("f32", "scale_log2"), ("f32", "scale")],
            raw_directives=[("minnctapersm", (_MIN_CTAS[head_dim],))],
            name=f"flash_attention_bwd_dq_{dtype.name}_d{head_dim}_{arch}")
    return _KERNELS[key]

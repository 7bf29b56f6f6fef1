"""Flash-attention forward for Ampere and later: ``mma.sync.m16n8k16``.

One CTA per (query block of 64 rows, batch × query head); four warps, each
owning 16 query rows. K and V may have fewer heads than Q (grouped-query and
multi-query attention, ``Hkv`` dividing ``H``): the CTA of query head ``h``
reads KV head ``h // (H // Hkv)`` in place (its base address and row
stride; the shared head is read by each of its query heads' CTAs, never
copied). The CTA keeps its Q tile in registers (A fragments read once with
``ldmatrix``) and walks the key/value sequence in blocks of 64:

* K and V tiles stream into shared memory with 16-byte ``cp.async`` copies,
  double-buffered: block ``j + 1`` loads while block ``j`` computes (one
  ``bar.sync`` per block).
* S = Q·Kᵀ with ``mma.sync`` (K fragments from ``ldmatrix``), then the
  online softmax in f32: running row max ``m`` of the raw scores and sum
  ``l``, each probability ``ex2.approx((s - m)·scale·log2(e))`` (the max
  subtracted before scaling, so any finite scores work).
* P is rounded to bf16/f16 in registers (the S accumulator layout is the A
  fragment layout) and O += P·V with V fragments from ``ldmatrix.trans``.

Shared tiles are row-major with each 16-byte chunk's index XORed with
``row % 8``, so the eight row addresses of one ``ldmatrix`` matrix (and the
``cp.async`` stores) fall in distinct bank groups.

Rows beyond the sequence ends are clamped to the last row when loading (so
every read is in bounds and finite); their keys get a score of −inf and
their query rows are never stored. ``causal`` uses the mask of
``jax.nn.dot_product_attention(..., is_causal=True)``: query ``i`` sees keys
``j <= i`` (aligned top-left when Sq != Skv); key blocks wholly above the
diagonal are skipped.

Outputs: ``o`` in the input dtype and ``lse`` (B, H, Sq) float32, the
natural-log logsumexp of the scaled scores of each row (for the backward).
"""

from __future__ import annotations

from typing import Any

import jax

from ..dsl import Kernel, Tile, kernel, ptx, reg, smem
from ..errors import SpecError
from ..types import PtxType, bf16, f16, f32, s32

__all__ = ["attention_sm80", "attention_kernel", "BLOCK_M", "BLOCK_N"]

BLOCK_M = 64          # query rows per CTA: 4 warps x 16
BLOCK_N = 64          # keys per block of the inner loop
THREADS = 128
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
NEG_INF = float("-inf")
HEAD_DIMS = (64, 128)
# CTAs per SM to keep registers for (.minnctapersm): ptxas's own choice
# (4 and 3) spills for some shapes; shared memory (40 and 80 KB) allows 4
# and 2 on A100.
_MIN_CTAS = {64: 3, 128: 2}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Tiles:
    """Per-lane shared-memory addressing of one swizzled (64, D) tile family.

    ``row_bytes`` bytes per row; a lane's ``ldmatrix`` address for matrix
    row ``r`` (0..15 within a 16-row slab) and 16-byte chunk ``c`` is
    ``r * row_bytes + ((c ^ (r % 8)) * 16)``. The four XOR patterns of the low
    chunk bits an unrolled loop needs (chunk pairs 0, 2, 4, 6) are kept in
    registers; the chunk's high bits and the slab are immediates.
    """

    def __init__(self, row_in_slab: Any, chunk_bit: Any, row_bytes: int) -> None:
        self.row_bytes = row_bytes
        x = chunk_bit ^ (row_in_slab & 7)
        row_off = row_in_slab * row_bytes
        self.lane = [row_off + ((x ^ (2 * c)) << 4) for c in range(4)]

    def addr(self, base: list[Any], pair: int, slab_row: int, offset: int = 0) -> Any:
        """The address of chunk pair ``pair`` (chunks 2·pair, 2·pair + 1) for
        the 16-row slab starting at ``slab_row``, from per-stage ``base``
        (:attr:`lane` plus the tile's address) and ``offset`` bytes on."""
        return ptx.addr(base[pair % 4], offset + (pair // 4) * 128 + slab_row * self.row_bytes)


class _Loader:
    """A thread's share of the ``cp.async`` copies of one (64, D) tile:
    16-byte chunk ``tid % (D/8)`` of rows ``tid / (D/8)`` + k·(128·8/D),
    written to its swizzled place (the same for every pass and tile)."""

    def __init__(self, tid: Any, d: int) -> None:
        chunks = d // 8
        self.rows_per_pass = THREADS // chunks
        self.d = d
        t_row, t_chunk = tid >> (chunks.bit_length() - 1), tid & (chunks - 1)
        self.row = t_row
        self.s_off = t_row * (d * 2) + ((t_chunk ^ (t_row & 7)) << 4)
        self.col = ptx.cvt.u64.u32(t_chunk << 4)

    def source(self, head: Any) -> Any:
        """This thread's column of the sequence rows at global ``head``."""
        return head + self.col

    def load(self, row0: Any, limit: int, row_stride: int, pairs: tuple) -> None:
        """Copy rows ``row0..row0+63`` (clamped to ``limit - 1``) of each
        (:meth:`source` address, shared tile address) pair."""
        first = row0 + self.row
        for i in range(BLOCK_M // self.rows_per_pass):
            row = ptx.min.s32(first + i * self.rows_per_pass, limit - 1)
            g_off = ptx.mul.wide.s32(row, row_stride)
            for head, dst in pairs:
                ptx.cp.async_.cg.shared.global_(
                    ptx.addr(dst, i * self.rows_per_pass * self.d * 2), ptx.addr(head + g_off), 16)


def _body(q: Any, k: Any, v: Any, o: Any, lse: Any, *, causal: bool, dtype: PtxType) -> None:
    """The kernel body (module docstring); ``dtype`` is bf16 or f16."""
    B, Sq, H, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    per_kv = H // Hkv                            # query heads per KV head
    mma = getattr(ptx.mma.sync.aligned.m16n8k16.row.col.f32, dtype.name)
    mma = getattr(mma, dtype.name).f32
    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    ksteps = D // 16
    q_stride = H * D * 2                         # bytes between sequence positions of q
    kv_stride = Hkv * D * 2                      # and of k, v
    tile_bytes = BLOCK_M * D * 2

    sq = smem.alloc(dtype, (BLOCK_M, D), align=128)
    skv = smem.alloc(dtype, (2, 2, BLOCK_N, D), align=128)   # [stage][K, V]

    tid = ptx.special.tid.x()
    lane, warp = tid & 31, tid >> 5
    group, quad = lane >> 2, lane & 3
    qb, bh = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    q0 = qb * BLOCK_M
    b = bh // H
    h = bh - b * H
    qp, kp, vp, op, lp = ptx.batch_ptrs(q, k, v, o, lse)
    q_head = qp + ptx.mul.wide.u32(b * (Sq * H) + h, D * 2)
    h_kv = h if per_kv == 1 else h // per_kv     # the KV head this query head reads
    kv_first = ptx.mul.wide.u32(b * (Skv * Hkv) + h_kv, D * 2)
    k_head, v_head = kp + kv_first, vp + kv_first

    # Q and the first K/V block: cp.async group 0.
    sq_base, kv_base = sq.base, skv.base
    loader = _Loader(tid, D)
    q_head, k_head, v_head = (loader.source(x) for x in (q_head, k_head, v_head))
    k_dst = kv_base + loader.s_off
    loader.load(q0, Sq, q_stride, ((q_head, sq_base + loader.s_off),))
    loader.load(0, Skv, kv_stride, ((k_head, k_dst), (v_head, k_dst + tile_bytes)))
    ptx.cp.async_.commit_group()

    # ldmatrix lane roles (PTX ISA, ldmatrix: lanes 8i..8i+7 address the rows of matrix i).
    mat, r8 = lane >> 3, lane & 7
    # A (Q) and V^T (.trans) x4: matrices (rows 0-7, c), (rows 8-15, c), (rows 0-7, c+1), (rows 8-15, c+1).
    qv_tiles = _Tiles(r8 + ((mat & 1) << 3), mat >> 1, D * 2)
    # K x4: (keys 0-7, c), (keys 0-7, c+1), (keys 8-15, c), (keys 8-15, c+1).
    k_tiles = _Tiles(r8 + ((mat >> 1) << 3), mat & 1, D * 2)

    warp_rows = sq_base + warp * (16 * D * 2)    # this warp's 16 query rows
    q_lane = [warp_rows + x for x in qv_tiles.lane]
    ptx.cp.async_.wait_group(0)
    ptx.bar.sync(0)
    qf = [ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(qv_tiles.addr(q_lane, ks, 0))
          for ks in range(ksteps)]

    acc_o = reg.array(f32, D // 2)               # D/8 n-tiles x 4
    for r in acc_o:
        r.set(0.0)
    m_run = [reg.scalar(f32, NEG_INF) for _ in range(2)]     # rows group, group + 8 (raw scores)
    l_run = [reg.scalar(f32, 0.0) for _ in range(2)]         # this lane's partial row sums
    scale_log2 = ptx.param("scale_log2")
    row_g = q0 + warp * 16 + group               # this lane's rows: row_g, row_g + 8

    nkv = _cdiv(Skv, BLOCK_N)
    n_blocks = ptx.min.u32(qb + 1, nkv) if causal else nkv   # causal: blocks past the diagonal skipped
    masks_needed = causal or Skv % BLOCK_N != 0
    # Blocks reaching past this limit (Skv, or causal: the CTA's first row + 1) need the mask.
    block_limit = ptx.min.s32(q0 + 1, Skv) if causal else Skv

    acc_s = reg.array(f32, BLOCK_N // 2)         # 8 n-tiles x 4
    for kb in ptx.range_(0, n_blocks, 1, dtype=s32):
        ptx.cp.async_.wait_group(0)
        ptx.bar.sync(0)                          # block kb landed; block kb-1's stage is free
        stage = kv_base + (kb & 1) * (2 * tile_bytes)
        kb_next = kb + 1
        with ptx.if_(kb_next < n_blocks):
            nxt = k_dst + (kb_next & 1) * (2 * tile_bytes)
            loader.load(kb_next * BLOCK_N, Skv, kv_stride, ((k_head, nxt), (v_head, nxt + tile_bytes)))
            ptx.cp.async_.commit_group()
        k_lane = [stage + x for x in k_tiles.lane]
        v_lane = [stage + x for x in qv_tiles.lane]       # + tile_bytes as an immediate
        _scores(acc_s, qf, k_tiles, k_lane, mma)
        if masks_needed:
            with ptx.if_(kb * BLOCK_N + BLOCK_N > block_limit):
                _mask(acc_s, kb, row_g, quad, Skv, causal)
        _online_softmax(acc_s, acc_o, m_run, l_run, scale_log2)
        _accumulate_pv(acc_o, acc_s, qv_tiles, v_lane, tile_bytes, mma, pack)

    _epilogue(acc_o, m_run, l_run, scale_log2, row_g, o, op, lse, lp, b, h, bh, quad, Sq, H, D, pack)


def _scores(acc_s: Any, qf: list, k_tiles: _Tiles, k_lane: list, mma: Any) -> None:
    """S = Q·Kᵀ for the warp's 16 rows and the block's 64 keys: per k-step of
    16, one ``ldmatrix.x4`` gives the B fragments of two 8-key n-tiles."""
    for r in acc_s:
        r.set(0.0)
    for ks, qa in enumerate(qf):
        for jj in range(BLOCK_N // 16):
            kf = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(k_tiles.addr(k_lane, ks, 16 * jj))
            for half in range(2):
                acc = acc_s[8 * jj + 4 * half: 8 * jj + 4 * half + 4]
                mma(acc, qa, kf[2 * half: 2 * half + 2], acc)


def _mask(acc_s: Any, kb: Any, row_g: Any, quad: Any, Skv: int, causal: bool) -> None:
    """Scores of keys past Skv or (causal) past the row's query become −inf.

    Lane fragment (PTX ISA, mma.m16n8k16 C/D): n-tile j, register 2i + e holds
    row ``row_g + 8i``, key ``64·kb + 8j + 2·quad + e``.
    """
    for i in range(2):
        # Keys at or past lim, counted from this lane's first key, are masked.
        lim = ptx.min.s32(row_g + (8 * i + 1), Skv) if causal else reg.scalar(s32, Skv)
        lim = lim - (kb * BLOCK_N + quad * 2)
        for j in range(BLOCK_N // 8):
            for e in range(2):
                ptx.mov.f32(acc_s[4 * j + 2 * i + e], NEG_INF, pred=lim <= 8 * j + e)


def _accumulate_pv(acc_o: Any, acc_s: Any, qv_tiles: _Tiles, v_lane: list, tile_bytes: int,
                   mma: Any, pack: Any) -> None:
    """O += P·V: P packed to 16 bits in registers (S's C fragments of two
    n-tiles are one A fragment), V's B fragments from ``ldmatrix.x4.trans``."""
    for t in range(BLOCK_N // 16):
        pa = [pack(acc_s[4 * (2 * t + jt) + 2 * i + 1], acc_s[4 * (2 * t + jt) + 2 * i])
              for jt in range(2) for i in range(2)]
        for dd in range(len(acc_o) // 8):
            vf = ptx.ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16(
                qv_tiles.addr(v_lane, dd, 16 * t, tile_bytes))
            for half in range(2):
                acc = acc_o[8 * dd + 4 * half: 8 * dd + 4 * half + 4]
                mma(acc, pa, vf[2 * half: 2 * half + 2], acc)


def quad_reduce(op: Any, x: Any) -> None:
    """Reduce ``x`` in place over the 4 lanes of a quad (they share an
    ``mma.sync`` accumulator row), with ``op`` (``ptx.max.f32``, ``ptx.add.f32``)."""
    for shift in (1, 2):
        op(x, x, ptx.shfl.sync.bfly.b32(x, shift, 0x1F, 0xFFFFFFFF))


def new_running_max(m_run: list, i: int, m_new: Any, scale_log2: Any) -> tuple[Any, Any]:
    """Move row group ``i``'s running max to ``m_new``; returns ``(m_use, alpha)``:
    the max to subtract from the scores (0 for a row every key of which is
    masked so far, whose max stays -inf: no NaN) and the factor
    ``ex2((m_old - m_new)·scale·log2 e)`` that rescales what was summed."""
    m_use = ptx.selp.f32(0.0, m_new, m_new == NEG_INF)
    alpha = ptx.ex2.approx.ftz.f32((m_run[i] - m_use) * scale_log2)
    m_run[i].set(m_new)
    return m_use, alpha


def rescale_rows(acc_o: Any, i: int, alpha: Any) -> None:
    """Multiply row group ``i``'s O accumulators (c0, c1 or c2, c3 of every tile) by ``alpha``."""
    for j in range(len(acc_o) // 4):
        for e in range(2):
            r = acc_o[4 * j + 2 * i + e]
            ptx.mul.f32(r, r, alpha)


def _online_softmax(acc_s: Any, acc_o: Any, m_run: list, l_run: list, scale_log2: Any) -> None:
    """Turn the scores in ``acc_s`` into unnormalised probabilities
    ``exp2((s - m_new)·scale·log2 e)``, rescaling ``acc_o`` and the row sums by
    ``exp2((m_old - m_new)·scale·log2 e)``.

    The running max is kept unscaled and subtracted before scaling (exact
    near the max): folding it as ``fma(s, scale_log2, -m·scale_log2)``
    saves an instruction a score but keeps the rounding of
    ``m·scale_log2`` (half an ulp: 2^7 from 2^31 on, reached with |q|, |k|
    ~ 6e4), so ``ex2`` overflows or flushes every probability of the row:
    NaN rows.
    """
    n_tiles = len(acc_s) // 4
    for i in range(2):                            # row group (c0, c1), row group + 8 (c2, c3)
        vals = [acc_s[4 * j + 2 * i + e] for j in range(n_tiles) for e in range(2)]
        mx = ptx.max.f32(vals[0], vals[1])
        for x in vals[2:]:
            ptx.max.f32(mx, mx, x)
        quad_reduce(ptx.max.f32, mx)
        m_use, alpha = new_running_max(m_run, i, ptx.max.f32(m_run[i], mx), scale_log2)
        total = None
        for x in vals:
            ptx.sub.f32(x, x, m_use)
            ptx.mul.f32(x, x, scale_log2)
            ptx.ex2.approx.ftz.f32(x, x)
            total = x if total is None else total + x
        ptx.fma.rn.f32(l_run[i], l_run[i], alpha, total)
        rescale_rows(acc_o, i, alpha)


def _epilogue(acc_o: Any, m_run: list, l_run: list, scale_log2: Any, row_g: Any, o: Any, op: Any,
              lse: Any, lp: Any, b: Any, h: Any, bh: Any, quad: Any, Sq: int, H: int, D: int,
              pack: Any) -> None:
    """Normalise O by the row sums, store it (rows < Sq) and the row's lse."""
    o_head = op + ptx.mul.wide.u32(b * (Sq * H) + h, D * 2)
    for i in range(2):
        total = l_run[i]
        quad_reduce(ptx.add.f32, total)
        inv = ptx.rcp.approx.ftz.f32(total)
        row = row_g + 8 * i
        in_range = row < Sq
        row_addr = o_head + ptx.mul.wide.u32(row, H * D * 2) + ptx.cvt.u64.u32(quad * 4)
        for j in range(D // 8):
            lo, hi = acc_o[4 * j + 2 * i], acc_o[4 * j + 2 * i + 1]
            word = pack(hi * inv, lo * inv)
            ptx.st.global_.b32(ptx.addr(row_addr, j * 16), word, pred=in_range)
        lse_val = ptx.fma.rn.f32(m_run[i], scale_log2, ptx.lg2.approx.ftz.f32(total)) * LN2
        lse_addr = lp + ptx.mul.wide.u32(bh * Sq + row, 4)
        ptx.st.global_.f32(lse_addr, lse_val, pred=ptx.and_.pred(in_range, quad == 0))


_KERNELS: dict[tuple[str, int, str], Kernel] = {}


def attention_kernel(dtype: PtxType, head_dim: int, arch: str = "sm_80") -> Kernel:
    """The forward kernel for ``dtype`` (bf16 or f16) and ``head_dim`` (64 or
    128), traced for ``arch``.

    ``arch`` is ``"sm_80"`` for the Ampere variant; the same code traced for a
    later target (``"sm_100a"``) runs there unchanged (``mma.sync``,
    ``ldmatrix`` and ``cp.async`` exist on every target from sm_80). Inputs
    ``q`` (B, Sq, H, D), ``k`` and ``v`` (B, Skv, Hkv, D); outputs ``o`` like
    ``q`` and ``lse`` (B, H, Sq) f32; template ``causal``; raw param
    ``scale_log2`` (the softmax scale times log2(e)), so every scale shares
    one PTX. ``jax.vmap`` folds into grid z (``batch="z"``): one launch.

    ``k`` and ``v`` are (B, Skv, Hkv, D) with ``Hkv`` dividing ``H``
    (grouped-query attention; ``Hkv = H`` is plain multi-head): query head
    ``h`` reads KV head ``h // (H // Hkv)``. ``H // Hkv`` is static (one PTX
    per ratio, as per shape).
    """
    key = (dtype.name, head_dim, arch)
    if key not in _KERNELS:
        def flash_attention_fwd(q, k, v, o, lse, *, causal=False):
            _body(q, k, v, o, lse, causal=causal, dtype=dtype)

        q_spec = Tile("B", "Sq", "H", head_dim, dtype)
        kv_spec = Tile("B", "Skv", "Hkv", head_dim, dtype)
        _KERNELS[key] = kernel(
            flash_attention_fwd,
            in_specs=(q_spec, kv_spec, kv_spec), out_specs=(q_spec, Tile("B", "H", "Sq", f32)),
            grid=lambda B, Sq, H: (_cdiv(Sq, BLOCK_M), B * H, 1),
            block=(THREADS, 1, 1), arch=arch, batch="z", extern_smem=True,
            raw_params=[("f32", "scale_log2")],
            raw_directives=[("minnctapersm", (_MIN_CTAS[head_dim],))],
            name=f"flash_attention_fwd_{dtype.name}_d{head_dim}_{arch}")
    return _KERNELS[key]


def attention_sm80(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool,
                   scale: float, arch: str = "sm_80") -> tuple[jax.Array, jax.Array]:
    """Flash-attention forward, one launch of :func:`attention_kernel`.

    Args:
        q: (B, Sq, H, D) bf16 or f16, D in {64, 128}.
        k, v: (B, Skv, Hkv, D), the dtype of ``q``; ``Hkv`` divides ``H``
            (query head ``h`` reads KV head ``h // (H // Hkv)``).
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned).
        scale: the factor applied to the scores before the softmax; positive
            (the running max is taken of unscaled scores).
        arch: the target to trace the Ampere code for.

    Returns:
        ``(o, lse)``: o (B, Sq, H, D) in the input dtype, lse (B, H, Sq)
        float32 (natural-log logsumexp of the scaled scores).

    Raises:
        SpecError: a dtype other than bf16/f16, a head dim other than 64/128,
            a KV head count not dividing q's (other shapes are checked
            against the kernel's specs when it is bound).
    """
    dtype = {"bfloat16": bf16, "float16": f16}.get(str(q.dtype))
    if dtype is None or q.shape[-1] not in HEAD_DIMS:
        raise SpecError(f"attention_sm80: q: expected bfloat16 or float16 with head dim 64 or 128, "
                        f"got {q.dtype} {tuple(q.shape)}")
    if k.ndim != 4 or k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise SpecError(f"attention_sm80: k: expected (B, Skv, Hkv, D) with Hkv dividing q's "
                        f"{q.shape[2]} heads, got {tuple(k.shape)}")
    return attention_kernel(dtype, q.shape[-1], arch)(q, k, v, causal=bool(causal),
                                                      scale_log2=float(scale) * LOG2E)

"""Hopper (sm_90a) flash-attention forward: one launch, TMA + mbarriers + wgmma.

Each CTA owns ``BM = 128`` query rows of one (batch, query head). K and V
may have fewer heads than Q (grouped-query and multi-query attention,
``Hkv`` dividing ``H``): query head ``h`` reads KV head ``h // (H // Hkv)``,
the head coordinate of its K and V tensor-map loads (the shared head is
read in place by each query head's CTAs). The CTA has three warpgroups:

* warpgroup 0 is the producer: its thread 0 loads the CTA's Q tile once and
  then streams K and V tiles of ``BN = 128`` keys through a two-stage ring
  with TMA (``cp.async.bulk.tensor.4d`` over the ``(B, S, H, D)`` arrays;
  out-of-range rows arrive as zeros), each stage guarded by a K-full, a
  V-full and an empty mbarrier. It gives registers back (``setmaxnreg.dec``).
* warpgroups 1 and 2 are the consumers (``setmaxnreg.inc``), 64 query rows
  each: ``S = Q Kᵀ`` with ``wgmma.mma_async`` from two shared-memory
  descriptors, an online softmax in f32 on the accumulator fragment (the
  running max subtracted from the raw scores, then scaled by
  ``scale * log2 e`` and exponentiated with ``ex2.approx``), then
  ``O += P V`` with P from registers and V through an MN-major descriptor.
  Block j's ``Q Kᵀ`` and block j-1's ``P V`` are issued together, and j's
  softmax runs while ``P V`` is still in flight (``wgmma.wait_group 1``);
  O is rescaled once it lands. Lane 0 of each consumer warp releases a stage.

Tiles are stored as 64-column slabs (128 bytes of bf16/f16), each 128-byte
swizzled; D = 128 uses two slabs per tile. Keys past the sequence end and,
when causal, keys after the query (``jax.nn.dot_product_attention``'s
``is_causal``: query ``i`` sees keys ``j <= i``, aligned at the top-left
when ``Sq != Skv``) are set to ``-inf`` before the max; key blocks entirely
after the CTA's last query are never loaded. Stores of O and of the
log-sum-exp are guarded by ``row < Sq``.
"""

from __future__ import annotations

import functools

import jax

from .. import Layout, Tile, kernel, ptx, reg, smem
from ..dsl import Kernel
from ..types import b32, bf16, f16, f32, u32
from ._attention_args import forward_dtype

__all__ = ["attention_sm90", "attention_kernel", "BM", "BN"]

# Query rows per CTA, keys per block, ring depth (block j uses stage j & 1 and
# waits for parity (j >> 1) & 1: the code assumes two stages).
BM, BN, STAGES = 128, 128, 2
WG = 128                           # threads per warpgroup
SLAB = 64                          # columns per 128-byte swizzled slab
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
PRODUCER_REGS, CONSUMER_REGS = 40, 232   # 128 * 40 + 256 * 232 = 384 * 168


def _wait(bar, parity) -> None:
    """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` completes."""
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


def _block_count(m0, S: int, T: int, causal: bool):
    """Key blocks this CTA visits: all of them, or (causal) those holding a
    key at or before its last valid query ``min(m0 + BM, S) - 1``."""
    if not causal:
        return reg.scalar(u32, -(-T // BN))
    return (ptx.min.u32(m0 + BM, min(S, T)) + (BN - 1)) // BN


def _produce(q, k, v, tiles, bars, m0, h, h_kv, b, nblk) -> None:
    """Thread 0: the Q tile (head ``h``), then each K/V block (head ``h_kv``)
    into its stage once it is free."""
    q_tile, k_tile, v_tile = tiles
    q_full, k_full, v_full, empty = bars
    D = q.shape[3]
    slabs = D // SLAB
    load = ptx.cp.async_.bulk.tensor._4d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes
    ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, q_full[0], BM * D * 2)
    for c in range(slabs):
        load(ptx.addr(q_tile, c * BM * SLAB * 2), ptx.addr(q.tma_desc(), coords=(c * SLAB, h, m0, b)),
             q_full[0])
    stage_bytes = BN * D * 2
    for j in ptx.range_(0, nblk, 1, dtype=u32):
        stage = j & 1
        # Lap n waits for the release of lap n - 1; on lap 0 the parity-1
        # wait returns at once (the phase before a fresh barrier's first).
        _wait(ptx.addr(empty.base + stage * 8), ((j >> 1) + 1) & 1)
        kv0 = j * BN
        k_dst = k_tile.base + stage * stage_bytes
        v_dst = v_tile.base + stage * stage_bytes
        for bar, dst, src in ((k_full, k_dst, k), (v_full, v_dst, v)):
            bar_at = ptx.addr(bar.base + stage * 8)
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar_at, stage_bytes)
            for c in range(slabs):
                load(ptx.addr(dst, c * BN * SLAB * 2),
                     ptx.addr(src.tma_desc(), coords=(c * SLAB, h_kv, kv0, b)), bar_at)


def _row_reduce(value, op: str):
    """Reduce over the four lanes (``lane % 4``) that share an accumulator row."""
    for offset in (1, 2):
        other = ptx.shfl.sync.bfly.b32(value, offset, 0x1F, 0xFFFFFFFF)
        value = ptx.max.f32(value, other) if op == "max" else value + other
    return value


class _Consumer:
    """One consumer warpgroup's registers and per-block steps (64 query rows)."""

    def __init__(self, dtype: str, D: int, S: int, T: int, causal: bool, m0, wl, tid) -> None:
        self.dtype, self.D, self.S, self.T, self.causal = dtype, D, S, T, causal
        self.scale2 = ptx.param("scale_log2")           # scale * log2(e), from the call
        lane, warp = tid % 32, (tid % WG) // 32
        self.quad = lane % 4
        row_lo = m0 + wl * 64                            # this warpgroup's first query row
        self.rows = [row_lo + warp * 16 + lane // 4]
        self.rows.append(self.rows[0] + 8)               # the fragment's two rows
        # Keys below lim[r] are visible to row r; lim[0] is for the first row.
        self.lims = [ptx.min.u32(r + 1, T) if causal else reg.scalar(u32, T)
                     for r in [row_lo] + self.rows]
        self.s = reg.array(f32, BN // 2)                 # scores, then probabilities
        self.p = reg.array(b32, BN // 4)                 # P packed for the A operand
        self.o = reg.array(f32, D // 2)
        for r in self.o:
            r.set(0.0)
        self.m = [reg.scalar(f32, float("-inf")) for _ in range(2)]   # running max (raw scores)
        self.l = [reg.scalar(f32, 0.0) for _ in range(2)]             # this lane's partial sums
        self.alpha = [reg.scalar(f32) for _ in range(2)]              # O's pending rescale

    def _mma(self, n: int):
        mma = getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{n}k16").f32
        return getattr(getattr(mma, self.dtype), self.dtype)

    def issue_scores(self, q_desc, k_desc) -> None:
        """Issue ``S = Q Kᵀ`` for the block whose K tile ``k_desc`` describes
        (one commit group; the caller fences and waits)."""
        mma = self._mma(BN)
        for kk in range(self.D // 16):
            slab, col = divmod(kk, SLAB // 16)
            qa = q_desc + (slab * BM * SLAB * 2 + col * 32) // 16
            kb = k_desc + (slab * BN * SLAB * 2 + col * 32) // 16
            mma(self.s, qa, kb, 1 if kk else 0, 1, 1, 0, 0)
        ptx.wgmma.commit_group.sync.aligned()

    def issue_pv(self, v_desc) -> None:
        """Issue ``O += P V`` (one commit group): P from registers, V MN-major."""
        mma = self._mma(self.D)
        for kk in range(BN // 16):
            mma(self.o, tuple(self.p[4 * kk:4 * kk + 4]), v_desc + kk * 16 * 128 // 16, 1, 1, 1, 1)
        ptx.wgmma.commit_group.sync.aligned()

    def mask(self, kv0) -> None:
        """``-inf`` for keys past the end and (causal) after the query, when
        some key of the block is out of reach for this warpgroup's first row."""
        if not self.causal and self.T % BN == 0:
            return
        with ptx.if_(kv0 + BN > self.lims[0]):
            base = ptx.cvt.s32.u32(kv0 + self.quad * 2)
            rel = [ptx.cvt.s32.u32(lim) - base for lim in self.lims[1:]]
            for i, r in enumerate(self.s):
                keep = ptx.setp.gt.s32(rel[(i // 2) % 2], 8 * (i // 4) + i % 2)
                ptx.selp.f32(r, r, float("-inf"), keep)

    def softmax(self) -> None:
        """Update the running max and sums, exponentiate S in place and keep
        the factor O must be rescaled by in ``alpha`` (O may still be in flight).

        Each probability is ``ex2((s - m)·scale·log2 e)``: the max comes off
        before scaling, exactly near the max. The one-``fma`` form
        ``s·scale_log2 - m·scale_log2`` keeps the rounding of ``m·scale_log2``
        (half an ulp: 2^7 from 2^31 on, reached with |q|, |k| ~ 6e4): rows of
        inf or 0 probabilities, NaN outputs.
        """
        for half in range(2):
            mine = [r for i, r in enumerate(self.s) if (i // 2) % 2 == half]
            top = mine[0]
            for r in mine[1:]:
                top = ptx.max.f32(top, r)
            top = _row_reduce(top, "max")
            m_new = ptx.max.f32(self.m[half], top)
            # The first block holds key 0, which every row sees: m_new is finite
            # for finite scores (the old m is -inf only then: alpha = 0).
            ptx.ex2.approx.ftz.f32(self.alpha[half], (self.m[half] - m_new) * self.scale2)
            self.m[half].set(m_new)
            self.l[half] *= self.alpha[half]
            for r in mine:
                ptx.ex2.approx.ftz.f32(r, (r - m_new) * self.scale2)
                self.l[half] += r

    def rescale_and_pack(self) -> None:
        """``O *= alpha`` (after the last ``O += P V`` completed), then S into P."""
        for i, r in enumerate(self.o):
            r *= self.alpha[(i // 2) % 2]
        pack = getattr(ptx.cvt.rn, f"{self.dtype}x2").f32
        for i, r in enumerate(self.p):
            pack(r, self.s[2 * i + 1], self.s[2 * i])

    def store(self, o, lse, h, b) -> None:
        """Normalise O, store it and the natural-log log-sum-exp for valid rows."""
        S, D = self.S, self.D
        H = o.shape[2]
        pack = getattr(ptx.cvt.rn, f"{self.dtype}x2").f32
        for half, row in enumerate(self.rows):
            total = _row_reduce(self.l[half], "add")
            inv = ptx.rcp.approx.ftz.f32(total)
            valid = row < S
            at = o.ptr + ptx.mul.wide.u32((b * S + row) * H + h, D * 2) + ptx.cvt.u64.u32(self.quad * 4)
            for j in range(D // 8):
                lo, hi = self.o[4 * j + 2 * half], self.o[4 * j + 2 * half + 1]
                word = pack(hi * inv, lo * inv)
                ptx.st.global_.b32(at + j * 16, word, pred=valid)
            value = ptx.fma.rn.f32(self.m[half], self.scale2, ptx.lg2.approx.ftz.f32(total)) * LN2
            with ptx.if_(self.quad == 0):
                ptx.st.global_.f32(lse.ptr + ptx.mul.wide.u32((b * H + h) * S + row, 4), value, pred=valid)


def _body(dtype: str, q, k, v, o, lse, causal: bool) -> None:
    """The kernel: shared tiles and barriers, then the producer and consumer roles."""
    B, S, H, D = q.shape
    T, Hkv = k.shape[1], k.shape[2]
    slabs = D // SLAB
    el = {"bf16": bf16, "f16": f16}[dtype]
    q_tile = smem.wgmma_tile(el, (slabs * BM, SLAB), major="K")
    k_tile = smem.wgmma_tile(el, (STAGES * slabs * BN, SLAB), major="K")
    v_tile = smem.wgmma_tile(el, (STAGES * slabs * BN, SLAB), major="K")
    q_full, k_full, v_full, empty = (smem.mbarrier(1), smem.mbarrier(STAGES),
                                     smem.mbarrier(STAGES), smem.mbarrier(STAGES))
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        ptx.mbarrier.init.shared.b64(q_full[0], 1)
        for s in range(STAGES):
            ptx.mbarrier.init.shared.b64(k_full[s], 1)
            ptx.mbarrier.init.shared.b64(v_full[s], 1)
            ptx.mbarrier.init.shared.b64(empty[s], 2 * WG // 32)   # lane 0 of each consumer warp
        ptx.fence.mbarrier_init.release.cluster()
    ptx.bar.sync(0)
    # Causal: the CTAs with the most key blocks (the last rows) start first.
    qblock = ptx.special.nctaid.x() - 1 - ptx.special.ctaid.x() if causal else ptx.special.ctaid.x()
    m0 = qblock * BM
    h, b = ptx.special.ctaid.y(), ptx.special.ctaid.z()
    per_kv = H // Hkv                         # query heads per KV head
    nblk = _block_count(m0, S, T, causal)
    wg = tid // WG
    with ptx.if_(wg == 0):
        ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
        with ptx.if_(tid == 0):
            h_kv = h if per_kv == 1 else h // per_kv
            _produce(q, k, v, (q_tile, k_tile, v_tile), (q_full, k_full, v_full, empty), m0, h, h_kv, b,
                     nblk)
    with ptx.else_():
        ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
        wl = wg - 1
        c = _Consumer(dtype, D, S, T, causal, m0, wl, tid)
        q_desc = q_tile.desc() + ptx.cvt.u64.u32(wl * (64 * SLAB * 2 // 16))
        k_desc0, v_desc0 = k_tile.desc(), v_tile.desc(lbo=BN * SLAB * 2, sbo=8 * 128)
        stage_units = BN * D * 2 // 16
        lane0 = tid % 32 == 0

        def at(bars, stage):
            return ptx.addr(bars.base + stage * 8)

        # Block 0 alone; then block j's S = Q Kᵀ and block j-1's O += P V are
        # issued together and j's softmax runs while P V is in flight.
        _wait(q_full[0], 0)
        _wait(k_full[0], 0)
        ptx.wgmma.fence.sync.aligned()
        c.issue_scores(q_desc, k_desc0)
        ptx.wgmma.wait_group.sync.aligned(0)
        c.mask(reg.scalar(u32, 0))
        c.softmax()
        c.rescale_and_pack()
        for j in ptx.range_(1, nblk, 1, dtype=u32):
            stage, prev = j & 1, (j - 1) & 1
            _wait(at(k_full, stage), (j >> 1) & 1)
            _wait(at(v_full, prev), ((j - 1) >> 1) & 1)
            ptx.wgmma.fence.sync.aligned()
            c.issue_scores(q_desc, k_desc0 + ptx.cvt.u64.u32(stage * stage_units))
            c.issue_pv(v_desc0 + ptx.cvt.u64.u32(prev * stage_units))
            ptx.wgmma.wait_group.sync.aligned(1)          # S is ready
            c.mask(j * BN)
            c.softmax()
            ptx.wgmma.wait_group.sync.aligned(0)          # O += P V of block j-1 is done
            ptx.mbarrier.arrive.shared.b64(ptx.SINK, at(empty, prev), pred=lane0)
            c.rescale_and_pack()
        last = nblk - 1
        _wait(at(v_full, last & 1), (last >> 1) & 1)
        ptx.wgmma.fence.sync.aligned()
        c.issue_pv(v_desc0 + ptx.cvt.u64.u32((last & 1) * stage_units))
        ptx.wgmma.wait_group.sync.aligned(0)
        c.store(o, lse, h, b)


def _grid(B: int, S: int, H: int) -> tuple[int, int, int]:
    """One CTA per BM query rows of one (batch, head)."""
    return (-(-S // BM), H, B)


@functools.cache
def attention_kernel(dtype: str) -> Kernel:
    """The sm_90a flash-attention forward kernel for ``dtype`` ("bf16" or "f16").

    Tensors: q (B, S, H, D), k and v (B, T, Hkv, D) in ``dtype`` (``Hkv``
    divides ``H``; query head ``h`` reads KV head ``h // (H // Hkv)``);
    outputs o (B, S, H, D) and lse (B, H, S) float32. The template keyword ``causal``
    specialises the PTX; the raw f32 parameter ``scale_log2`` (``scale *
    log2 e``) rides the call, so every scale shares one PTX and cubin.
    """
    el = {"bf16": bf16, "f16": f16}[dtype]

    def spec(rows: str, heads: str, box_rows: int) -> Tile:
        return Tile("B", rows, heads, "D", el, Layout.TMA_128B, tma_box=(1, box_rows, 1, SLAB), tma_rank=4)

    def flash_attention_sm90(q, k, v, o, lse, *, causal: bool = False):
        """Flash-attention forward (module docstring): o and lse from q, k, v."""
        _body(dtype, q, k, v, o, lse, causal)

    return kernel(flash_attention_sm90, name=f"flash_attention_fwd_{dtype}_sm_90a",
                  in_specs=(spec("S", "H", BM), spec("T", "Hkv", BN), spec("T", "Hkv", BN)),
                  out_specs=(Tile("B", "S", "H", "D", el), Tile("B", "H", "S", f32)),
                  raw_params=[("f32", "scale_log2")], grid=_grid, block=(3 * WG, 1, 1),
                  reqntid=(3 * WG, 1, 1), arch="sm_90a", extern_smem=True)


def attention_sm90(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool,
                   scale: float) -> tuple[jax.Array, jax.Array]:
    """Flash-attention forward on Hopper in one kernel launch.

    Args:
        q: (B, Sq, H, D) bf16 or f16, D 64 or 128.
        k, v: (B, Skv, Hkv, D), same dtype and D; ``Hkv`` divides ``H``
            (query head ``h`` reads KV head ``h // (H // Hkv)``).
        causal: mask keys after the query (``jax.nn.dot_product_attention``'s
            ``is_causal``, top-left aligned).
        scale: the factor on ``q @ k.T`` (must be positive).

    Returns:
        ``o`` (B, Sq, H, D) in the input dtype and ``lse`` (B, H, Sq) float32,
        the natural-log log-sum-exp of each row of scaled scores.

    Raises:
        SpecError: unsupported dtype, head dim, shapes or scale.
    """
    dtype = forward_dtype("attention_sm90", q, k, v, scale)
    return attention_kernel(dtype)(q, k, v, causal=bool(causal), scale_log2=float(scale) * LOG2E)

"""The softmax warps of the Blackwell attention forward (:mod:`._attention_sm100`).

Thread ``t`` of warps 0-3 owns query row ``m0 + t``, tensor-memory lane
``t`` of S and O (the M = 128 data path layout: row ``i`` of D in lane
``i``). Per key block: its row of S into registers (``tcgen05.ld``), the
mask, the online max and sum, ``ex2``; once the previous ``P V`` landed,
O's rescale in tensor memory (``tcgen05.ld`` / ``st``, skipped when no row
of the warp moved its max); P packed into 16-bit pairs and stored to tensor
memory (``tcgen05.st``) as the next MMA's A operand; then one arrival each
on ``p_full``. At the end: O / sum and the log-sum-exp to global memory.
"""

from __future__ import annotations

from .. import ptx, reg
from ..types import b32, f32, u32

__all__ = ["BM", "BN", "Softmax", "softmax_role", "wait"]

BM, BN = 128, 128                  # query rows per CTA (one a TMEM lane), keys per block
CHUNK = 32                         # O columns per tcgen05.ld/st while rescaling and storing
LN2 = 0.6931471805599453


def wait(bar, parity) -> None:
    """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` completes."""
    ok = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~ok):
        ptx.mbarrier.try_wait.parity.shared.b64(ok, bar, parity)


class Softmax:
    """One softmax thread's registers and steps: query row ``m0 + tid``."""

    def __init__(self, dtype: str, D: int, S: int, T: int, causal: bool, m0, tid, taddr) -> None:
        self.dtype, self.D, self.S, self.T, self.causal = dtype, D, S, T, causal
        self.scale2 = ptx.param("scale_log2")           # scale * log2(e), from the call
        self.row = m0 + tid
        self.lim = ptx.min.u32(self.row + 1, T) if causal else reg.scalar(u32, T)
        lane0 = taddr + ((tid // 32 * 32) << 16)        # this warp's 32 lanes
        self.s_tmem, self.o_tmem, self.p_tmem = lane0, lane0 + BN, lane0 + BN + D
        self.s = reg.array(f32, BN)                      # scores, then probabilities
        self.p = reg.array(b32, BN // 2)                 # P packed in 16-bit pairs
        self.m = reg.scalar(f32, float("-inf"))          # running max of raw scores
        self.l = reg.scalar(f32, 0.0)                    # running sum
        self.alpha = reg.scalar(f32, 1.0)                # O's pending rescale

    def read_scores(self) -> None:
        """This row of S into registers."""
        ptx.tcgen05.ld.sync.aligned._32x32b.x128.b32(self.s, ptx.addr(self.s_tmem))
        ptx.tcgen05.wait__ld.sync.aligned()

    def mask(self, kv0) -> None:
        """``-inf`` for keys at or past ``lim`` (the end, or causal: after the row)."""
        if not self.causal and self.T % BN == 0:
            return
        with ptx.if_(kv0 + BN > self.lim):
            rel = ptx.cvt.s32.u32(self.lim) - ptx.cvt.s32.u32(kv0)
            for c, r in enumerate(self.s):
                ptx.selp.f32(r, r, float("-inf"), ptx.setp.gt.s32(rel, c))

    def softmax(self) -> None:
        """New running max and sum; S exponentiated in place; ``alpha``.

        Each probability is ``ex2((s - m)·scale·log2 e)``: the max comes off
        before scaling, exact near the max (the sm_90a variant explains why
        the one-``fma`` form loses rows to rounding for large scores).
        """
        tops = list(self.s)
        while len(tops) > 1:                           # a tree: independent max chains
            tops = [ptx.max.f32(a, b) for a, b in zip(tops[::2], tops[1::2])]
        # Block 0 holds key 0, which every row sees: m_new is finite for finite scores.
        m_new = ptx.max.f32(self.m, tops[0])
        ptx.ex2.approx.ftz.f32(self.alpha, (self.m - m_new) * self.scale2)
        self.m.set(m_new)
        sums = [reg.scalar(f32, 0.0) for _ in range(4)]
        for i, r in enumerate(self.s):
            ptx.ex2.approx.ftz.f32(r, (r - m_new) * self.scale2)
            sums[i % 4] += r
        self.l.set(self.l * self.alpha + ((sums[0] + sums[1]) + (sums[2] + sums[3])))

    def rescale_o(self) -> None:
        """``O *= alpha`` in tensor memory, skipped when no row of the warp
        changed its max (the previous ``P V`` must have landed)."""
        moved = ptx.vote.sync.any.pred(ptx.setp.neu.f32(self.alpha, 1.0), 0xFFFFFFFF)
        with ptx.if_(moved):
            o = reg.array(f32, CHUNK)
            for c in range(0, self.D, CHUNK):
                ptx.tcgen05.ld.sync.aligned._32x32b.x32.b32(o, ptx.addr(self.o_tmem + c))
                ptx.tcgen05.wait__ld.sync.aligned()
                for r in o:
                    r *= self.alpha
                ptx.tcgen05.st.sync.aligned._32x32b.x32.b32(ptx.addr(self.o_tmem + c), o)

    def write_p(self) -> None:
        """P as 16-bit pairs (key 2i in the low half) into tensor memory."""
        pack = getattr(ptx.cvt.rn, f"{self.dtype}x2").f32
        for i, r in enumerate(self.p):
            pack(r, self.s[2 * i + 1], self.s[2 * i])
        ptx.tcgen05.st.sync.aligned._32x32b.x64.b32(ptx.addr(self.p_tmem), self.p)

    def store(self, o, lse, h, b) -> None:
        """Normalise O, store it and the natural-log log-sum-exp (valid rows)."""
        S, D = self.S, self.D
        H = o.shape[2]
        pack = getattr(ptx.cvt.rn, f"{self.dtype}x2").f32
        inv = ptx.rcp.approx.ftz.f32(self.l)
        valid = self.row < S
        at = o.ptr + ptx.mul.wide.u32((b * S + self.row) * H + h, D * 2)
        vals = reg.array(f32, CHUNK)
        for c in range(0, D, CHUNK):
            ptx.tcgen05.ld.sync.aligned._32x32b.x32.b32(vals, ptx.addr(self.o_tmem + c))
            ptx.tcgen05.wait__ld.sync.aligned()
            words = [pack(vals[2 * i + 1] * inv, vals[2 * i] * inv) for i in range(CHUNK // 2)]
            for w in range(0, CHUNK // 2, 4):
                ptx.st.global_.v4.b32(at + (c + 2 * w) * 2, tuple(words[w:w + 4]), pred=valid)
        value = ptx.fma.rn.f32(self.m, self.scale2, ptx.lg2.approx.ftz.f32(self.l)) * LN2
        ptx.st.global_.f32(lse.ptr + ptx.mul.wide.u32((b * H + h) * S + self.row, 4), value, pred=valid)


def softmax_role(sm: Softmax, bars, nblk, o, lse, h, b) -> None:
    """The softmax warps' loop over key blocks, then the epilogue."""
    _, _, _, _, s_full, p_full, pv_done = bars
    for j in ptx.range_(0, nblk, 1, dtype=u32):
        wait(ptx.addr(s_full.base), j & 1)
        ptx.tcgen05.fence__after_thread_sync()
        sm.read_scores()
        sm.mask(j * BN)
        sm.softmax()
        with ptx.if_(j > 0):                           # P(j-1) consumed, O holds blocks < j
            wait(ptx.addr(pv_done.base), (j - 1) & 1)
            ptx.tcgen05.fence__after_thread_sync()
            sm.rescale_o()
        sm.write_p()
        ptx.tcgen05.wait__st.sync.aligned()
        ptx.tcgen05.fence__before_thread_sync()
        ptx.mbarrier.arrive.shared.b64(ptx.SINK, ptx.addr(p_full.base))
    wait(ptx.addr(pv_done.base), (nblk - 1) & 1)
    ptx.tcgen05.fence__after_thread_sync()
    sm.store(o, lse, h, b)

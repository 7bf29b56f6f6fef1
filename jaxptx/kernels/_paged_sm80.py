"""Paged decode attention for Ampere and later: ``mma.sync.m16n8k16`` over pages.

One CTA per (split, KV head × query tile, sequence): ``grid = (S, Nkv ·
cdiv(r, 16), B)`` with ``r = Nq / Nkv`` query heads per KV head (grouped-query
attention). The CTA's 16 query rows are the query heads ``h`` of one KV head
``g`` (``h // r == g``), so each K/V page is read once for all of them;
rows past ``r`` are zero and never stored (ratios up to 8 leave the fragment's
second row group idle, and its softmax is not emitted).

The CTA walks its tokens ``[start, end)`` in blocks of 64: split ``s`` covers
tokens ``[s · SPLIT_TOKENS, (s + 1) · SPLIT_TOKENS)`` of its sequence, cut at
the sequence's length (``S = 1``: all of them). Each block is 64 / page_size
whole pages, looked up in ``block_tables`` and copied into shared memory with
16-byte ``cp.async`` copies (double-buffered, one ``bar.sync`` per block):

* a copy of a token at or past ``end`` reads nothing and writes zeros
  (``cp.async`` src-size 0), so rows past the length are finite whatever the
  page holds (0 · NaN would poison P·V), and its score is set to −inf;
* the page position is clamped to the sequence's last page and the page
  index to ``[0, P)``: table entries past a sequence's pages are never used
  and every read stays inside ``k_pages``/``v_pages``.

Each warp takes 16 tokens of the block: S = Q·Kᵀ (K fragments from
``ldmatrix``), the online softmax in f32 (running max ``m`` of the raw scores,
sum ``l``, probabilities ``ex2((s - m)·scale·log2 e)``), P rounded to 16 bits
in registers, O += P·V (V fragments from ``ldmatrix.trans``). After the loop
the four warps' states merge through shared memory (weights ``ex2((m_w -
M)·scale·log2 e)``, ``M`` the largest), in a fixed order. Then either:

* ``split=False``: o = O / L in q's dtype (``L = 0``, a length-0 sequence,
  gives 0);
* ``split=True``: the unnormalised f32 O and ``(M, L)`` of the split go to
  ``o_part`` (B, Nq, S, D) and ``ml`` (B, Nq, S, 2) for
  :mod:`._paged_combine`; a split wholly past its sequence's length returns
  at once and writes nothing (the combine never reads it).

Shared tiles are row-major with each 16-byte chunk's index XORed with
``row % 8`` (conflict-free ``ldmatrix`` and ``cp.async``).
"""

from __future__ import annotations

import functools
from typing import Any

from ..dsl import Kernel, Tile, kernel, ptx, reg, smem
from ..dsl.declarations import allow_unwritten
from ..types import PtxType, b32, f32, s32
from ._attention_sm80 import NEG_INF, new_running_max, quad_reduce, rescale_rows

__all__ = ["BLOCK_N", "HEAD_DIMS", "PAGE_SIZES", "ROWS", "SPLIT_TOKENS", "cdiv", "grid_y", "paged_kernel"]

BLOCK_N = 64            # tokens per step of the CTA: 4 warps x 16
ROWS = 16               # query heads per CTA: one m16 tile
THREADS = 128


def _red_row(D: int) -> int:
    """Bytes between rows of the f32 merge tile: D floats and 32 bytes of
    padding, so that the eight rows a warp's ``st.shared.v2`` writes start in
    different banks (unpadded, every row starts in bank 0: 8 wavefronts a
    store where 2 do)."""
    return D * 4 + 32
SPLIT_TOKENS = 512      # tokens per split (a multiple of BLOCK_N)
HEAD_DIMS = (64, 128)
PAGE_SIZES = (16, 32, 64)   # divide BLOCK_N: a block is whole pages


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints."""
    return -(-a // b)


def grid_y(nq: int, nkv: int) -> int:
    """CTA rows along grid y: one per KV head and 16-query-head tile."""
    return nkv * cdiv(nq // nkv, ROWS)


class _Tiles:
    """``ldmatrix`` addresses in a swizzled tile of ``row_bytes``-byte rows:
    matrix row ``r`` (within a 16-row slab) and 16-byte chunk ``c`` live at
    ``r * row_bytes + ((c ^ (r % 8)) * 16)``; :attr:`lane` holds the four XOR
    patterns of chunk pairs 0, 2, 4, 6 (higher chunks are immediates)."""

    def __init__(self, row_in_slab: Any, chunk_bit: Any, row_bytes: int) -> None:
        x = chunk_bit ^ (row_in_slab & 7)
        row_off = row_in_slab * row_bytes
        self.lane = [row_off + ((x ^ (2 * c)) << 4) for c in range(4)]

    @staticmethod
    def addr(base: list[Any], pair: int, offset: int = 0) -> Any:
        """Chunk pair ``pair`` (chunks 2·pair, 2·pair + 1) from ``base``
        (:attr:`lane` plus the slab's address), ``offset`` bytes on."""
        return ptx.addr(base[pair % 4], offset + (pair // 4) * 128)


class _Pages:
    """This thread's share of the ``cp.async`` copies of one 64-token block of
    K and V: 16-byte chunk ``tid % (D/8)`` of block rows ``tid / (D/8) + i ·
    rows_per_pass``. ``rows_per_pass`` divides the page size, so pass ``i``
    lies in page ``i · rows_per_pass // page_size`` of the block."""

    def __init__(self, tid: Any, k_pages: Any, v_pages: Any, g: Any, d: int) -> None:
        P, self.ps, nkv, _ = k_pages.shape
        chunks = d // 8
        self.d, self.rpp, self.pages = d, THREADS // chunks, P
        self.token_bytes = nkv * d * 2                # between tokens of a page
        self.page_bytes = self.ps * self.token_bytes
        t_row, t_chunk = tid >> (chunks.bit_length() - 1), tid & (chunks - 1)
        self.row = t_row
        self.s_off = t_row * (d * 2) + ((t_chunk ^ (t_row & 7)) << 4)
        self.chunk = ptx.cvt.u64.u32(t_chunk << 4)
        own = self.chunk + ptx.mul.wide.u32(g * d + t_row * (nkv * d), 2)
        self.k_src, self.v_src = k_pages.ptr + own, v_pages.ptr + own

    def load(self, table_row: Any, token0: Any, end: Any, last_pos: Any, k_dst: Any, tile_bytes: int) -> None:
        """Copy tokens ``token0..token0+63`` (zeros from ``end`` on) of the
        sequence whose table row is at ``table_row``; ``last_pos`` is its last
        page's position (positions past it are clamped to it)."""
        shift = self.ps.bit_length() - 1
        pos0 = token0 >> shift
        offsets = []
        for j in range(BLOCK_N // self.ps):
            pos = ptx.min.s32(pos0 + j, last_pos)
            page = ptx.ld.global_.nc.s32(table_row + ptx.mul.wide.s32(pos, 4))
            page = ptx.min.s32(ptx.max.s32(page, 0), self.pages - 1)
            offsets.append(ptx.mul.wide.s32(page, self.page_bytes))
        first = token0 + self.row
        for i in range(BLOCK_N // self.rpp):
            r0 = i * self.rpp
            size = ptx.selp.u32(16, 0, first + r0 < end)
            off = offsets[r0 // self.ps]
            in_page = (r0 % self.ps) * self.token_bytes
            dst = r0 * self.d * 2
            for src, extra in ((self.k_src, 0), (self.v_src, tile_bytes)):
                ptx.cp.async_.cg.shared.global_(ptx.addr(k_dst, dst + extra), ptx.addr(src + off, in_page),
                                                16, size)


def _body(q: Any, k_pages: Any, v_pages: Any, block_tables: Any, lengths: Any, outs: tuple,
          *, split: bool, dtype: PtxType) -> None:
    """The kernel body (module docstring)."""
    _, Nq, D = q.shape
    ps, Nkv = k_pages.shape[1], k_pages.shape[2]
    MP = block_tables.shape[1]
    ratio = Nq // Nkv
    qtiles = cdiv(ratio, ROWS)
    halves = 1 if ratio <= 8 else 2               # row groups of the fragment with live rows
    n_splits = outs[0].shape[2] if split else 1
    mma = getattr(getattr(ptx.mma.sync.aligned.m16n8k16.row.col.f32, dtype.name), dtype.name).f32
    pack = getattr(ptx.cvt.rn, f"{dtype.name}x2").f32
    tile_bytes = BLOCK_N * D * 2

    tid = ptx.special.tid.x()
    lane, warp = tid & 31, tid >> 5
    group, quad = lane >> 2, lane & 3
    s_idx, gy, b = ptx.special.ctaid.x(), ptx.special.ctaid.y(), ptx.special.ctaid.z()
    if qtiles == 1:
        g, row0 = gy, 0
        n_rows: Any = min(ratio, ROWS)
    else:
        g = gy // qtiles
        row0 = (gy - g * qtiles) * ROWS
        n_rows = ptx.min.s32(ratio - row0, ROWS)
    head0 = g * ratio + row0                      # this CTA's first query head

    length = ptx.ld.global_.nc.s32(lengths.ptr + ptx.mul.wide.u32(b, 4))
    length = ptx.min.s32(ptx.max.s32(length, 0), MP * ps)
    start = s_idx * SPLIT_TOKENS if split else reg.scalar(s32, 0)
    end = ptx.min.s32(length, start + SPLIT_TOKENS) if split and n_splits > 1 else length
    if split:
        ptx.ret(pred=end <= start)               # past the sequence: the combine skips it
    n_blocks = (end - start + (BLOCK_N - 1)) >> (BLOCK_N.bit_length() - 1)
    last_pos = ptx.max.s32(end - 1, 0) >> (ps.bit_length() - 1)
    table_row = block_tables.ptr + ptx.mul.wide.u32(b, MP * 4)

    sq = smem.alloc(dtype, (ROWS, D), align=128)
    skv = smem.alloc(dtype, (2, 2, BLOCK_N, D), align=128)   # [stage][K, V]
    sml = smem.alloc(f32, (4, ROWS, 2), align=16)             # per-warp (m, l) at the end

    pages = _Pages(tid, k_pages, v_pages, g, D)
    k_dst = skv.base + pages.s_off
    _load_q(q, sq.base + pages.s_off, pages, b, head0, n_rows, Nq, D)
    pages.load(table_row, start, end, last_pos, k_dst, tile_bytes)
    ptx.cp.async_.commit_group()

    mat, r8 = lane >> 3, lane & 7
    qv_tiles = _Tiles(r8 + ((mat & 1) << 3), mat >> 1, D * 2)   # A (Q) and V (.trans)
    k_tiles = _Tiles(r8 + ((mat >> 1) << 3), mat & 1, D * 2)    # K: keys 0-7, then 8-15
    ptx.cp.async_.wait_group(0)
    ptx.bar.sync(0)
    q_lane = [sq.base + x for x in qv_tiles.lane]
    qf = [ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(_Tiles.addr(q_lane, ks)) for ks in range(D // 16)]

    acc_o = reg.array(f32, D // 2)                # D/8 n-tiles x 4
    for r in acc_o:
        r.set(0.0)
    m_run = [reg.scalar(f32, NEG_INF) for _ in range(halves)]
    l_run = [reg.scalar(f32, 0.0) for _ in range(halves)]
    scale_log2 = ptx.param("scale_log2")
    acc_s = reg.array(f32, 8)                     # 16 rows x 16 keys: 2 n-tiles x 4
    zero = reg.scalar(b32, 0)
    warp_off = warp * (16 * D * 2)                # this warp's 16 tokens of the block
    for kb in ptx.range_(0, n_blocks, 1, dtype=s32):
        ptx.cp.async_.wait_group(0)
        ptx.bar.sync(0)                          # block kb landed; block kb-1's stage is free
        stage = skv.base + (kb & 1) * (2 * tile_bytes) + warp_off
        token0 = start + kb * BLOCK_N
        with ptx.if_(kb + 1 < n_blocks):
            nxt = k_dst + ((kb + 1) & 1) * (2 * tile_bytes)
            pages.load(table_row, token0 + BLOCK_N, end, last_pos, nxt, tile_bytes)
            ptx.cp.async_.commit_group()
        for r in acc_s:
            r.set(0.0)
        k_lane = [stage + x for x in k_tiles.lane]
        for ks in range(D // 16):
            kf = ptx.ldmatrix.sync.aligned.m8n8.x4.shared.b16(_Tiles.addr(k_lane, ks))
            mma(acc_s[0:4], qf[ks], kf[0:2], acc_s[0:4])
            mma(acc_s[4:8], qf[ks], kf[2:4], acc_s[4:8])
        with ptx.if_(token0 + BLOCK_N > end):
            # Lane fragment (PTX ISA, mma.m16n8k16 C/D): n-tile j, register 2i + e
            # holds key 16·warp + 8j + 2·quad + e of the block.
            lim = end - token0 - (warp << 4) - (quad << 1)
            for j in range(2):
                for e in range(2):
                    for i in range(halves):
                        ptx.mov.f32(acc_s[4 * j + 2 * i + e], NEG_INF, pred=lim <= 8 * j + e)
        _online_softmax(acc_s, acc_o, m_run, l_run, scale_log2)
        pa = [pack(acc_s[4 * jt + 2 * i + 1], acc_s[4 * jt + 2 * i]) if i < halves else zero
              for jt in range(2) for i in range(2)]
        v_lane = [stage + x for x in qv_tiles.lane]
        for dd in range(D // 16):
            vf = ptx.ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16(_Tiles.addr(v_lane, dd, tile_bytes))
            mma(acc_o[8 * dd: 8 * dd + 4], pa, vf[0:2], acc_o[8 * dd: 8 * dd + 4])
            mma(acc_o[8 * dd + 4: 8 * dd + 8], pa, vf[2:4], acc_o[8 * dd + 4: 8 * dd + 8])

    ptx.bar.sync(0)                              # every warp is done with the stages
    _merge_warps(acc_o, m_run, l_run, skv.base, sml, warp, group, quad, D)
    ptx.bar.sync(0)
    _store(outs, skv.base, sml, tid, b, s_idx, head0, n_rows, halves, scale_log2, split, n_splits,
           Nq, D, pack)


def _load_q(q: Any, dst: Any, pages: _Pages, b: Any, head0: Any, n_rows: Any, Nq: int, D: int) -> None:
    """Copy the CTA's query rows into ``sq`` (rows past ``n_rows``: zeros)."""
    for i in range(ROWS // pages.rpp):
        row = pages.row + i * pages.rpp
        live = row < n_rows
        row = ptx.selp.u32(row, 0, live)          # a dead row reads nothing; keep it in bounds
        src = q.ptr + ptx.mul.wide.u32((b * Nq + head0 + row) * D, 2) + pages.chunk
        ptx.cp.async_.cg.shared.global_(ptx.addr(dst, i * pages.rpp * D * 2), ptx.addr(src), 16,
                                        ptx.selp.u32(16, 0, live))


def _online_softmax(acc_s: Any, acc_o: Any, m_run: list, l_run: list, scale_log2: Any) -> None:
    """Scores to unnormalised probabilities ``ex2((s - m_new)·scale·log2 e)``,
    rescaling ``acc_o`` and the sums by ``ex2((m_old - m_new)·scale·log2 e)``.
    The max is of raw scores, subtracted before scaling (exact near the max)."""
    for i in range(len(m_run)):                   # row group (c0, c1), row group + 8 (c2, c3)
        vals = [acc_s[4 * j + 2 * i + e] for j in range(2) for e in range(2)]
        mx = ptx.max.f32(ptx.max.f32(vals[0], vals[1]), ptx.max.f32(vals[2], vals[3]))
        quad_reduce(ptx.max.f32, mx)
        m_use, alpha = new_running_max(m_run, i, ptx.max.f32(m_run[i], mx), scale_log2)
        for x in vals:
            ptx.ex2.approx.ftz.f32(x, (x - m_use) * scale_log2)
        total = (vals[0] + vals[1]) + (vals[2] + vals[3])
        ptx.fma.rn.f32(l_run[i], l_run[i], alpha, total)
        rescale_rows(acc_o, i, alpha)


def _merge_warps(acc_o: Any, m_run: list, l_run: list, red: Any, sml: Any, warp: Any, group: Any,
                 quad: Any, D: int) -> None:
    """Each warp's (m, l) to ``sml[warp, row]`` and O to the f32 tile
    ``red[warp, row, :]`` (over the freed K/V stages)."""
    for i in range(len(m_run)):
        total = l_run[i]
        quad_reduce(ptx.add.f32, total)
        row = warp * ROWS + group + 8 * i
        with ptx.if_(quad == 0):
            ptx.st.shared.v2.f32(ptx.addr(sml.base + (row << 3)), [m_run[i], total])
        at = red + row * _red_row(D) + (quad << 3)
        for j in range(D // 8):
            ptx.st.shared.v2.f32(ptx.addr(at, 32 * j), [acc_o[4 * j + 2 * i], acc_o[4 * j + 2 * i + 1]])


def _store(outs: tuple, red: Any, sml: Any, tid: Any, b: Any, s_idx: Any, head0: Any, n_rows: Any,
           halves: int, scale_log2: Any, split: bool, n_splits: int, Nq: int, D: int, pack: Any) -> None:
    """Merge the four warps' states per row, in warp order, and store: o, or
    the split's unnormalised O and (M, L)."""
    chunks = D // 4                               # 4 f32 columns a thread
    rows_per_pass = THREADS // chunks
    c = tid & (chunks - 1)
    for p in range(halves * 8 // rows_per_pass):
        row = (tid >> (chunks.bit_length() - 1)) + p * rows_per_pass
        ms = [ptx.ld.shared.f32(ptx.addr(sml.base + (row << 3), w * ROWS * 8)) for w in range(4)]
        ls = [ptx.ld.shared.f32(ptx.addr(sml.base + (row << 3), w * ROWS * 8 + 4)) for w in range(4)]
        top = ptx.max.f32(ptx.max.f32(ms[0], ms[1]), ptx.max.f32(ms[2], ms[3]))
        top_use = ptx.selp.f32(0.0, top, top == NEG_INF)
        weights = [ptx.ex2.approx.ftz.f32((m - top_use) * scale_log2) for m in ms]
        total = reg.scalar(f32, 0.0)
        acc = [reg.scalar(f32, 0.0) for _ in range(4)]
        at = red + row * _red_row(D) + (c << 4)
        for w in range(4):
            ptx.fma.rn.f32(total, weights[w], ls[w], total)
            vals = ptx.ld.shared.v4.f32(ptx.addr(at, w * ROWS * _red_row(D)))
            for a, v in zip(acc, vals):
                ptx.fma.rn.f32(a, weights[w], v, a)
        live = row < n_rows
        head = head0 + row
        if split:
            o_part, ml = outs
            slot = (b * Nq + head) * n_splits + s_idx
            ptx.st.global_.v4.f32(o_part.ptr + ptx.mul.wide.u32(slot, D * 4) + ptx.cvt.u64.u32(c << 4), acc,
                                  pred=live)
            ptx.st.global_.v2.f32(ml.ptr + ptx.mul.wide.u32(slot, 8), [top, total],
                                  pred=ptx.and_.pred(live, c == 0))
        else:
            (o,) = outs
            inv = ptx.selp.f32(ptx.rcp.rn.f32(total), 0.0, total > 0.0)   # length 0: o = 0
            words = [pack(acc[1] * inv, acc[0] * inv), pack(acc[3] * inv, acc[2] * inv)]
            ptx.st.global_.v2.b32(o.ptr + ptx.mul.wide.u32((b * Nq + head) * D, 2) + ptx.cvt.u64.u32(c << 3),
                                  words, pred=live)


@functools.cache
def paged_kernel(dtype: PtxType, head_dim: int, arch: str, split: bool) -> Kernel:
    """The paged decode kernel for ``dtype`` (bf16/f16) and ``head_dim``,
    traced for ``arch``; ``split`` writes per-split partial states.

    Inputs ``q`` (B, Nq, D), ``k_pages``/``v_pages`` (P, PS, Nkv, D),
    ``block_tables`` (B, MP) int32, ``lengths`` (B,) int32; raw param
    ``scale_log2`` (scale · log2 e). Outputs ``o`` (B, Nq, D) or, with
    ``split``, ``o_part`` (B, Nq, S, D) and ``ml`` (B, Nq, S, 2) f32 (pass
    ``S`` at the call).
    """
    def paged_attention_split(q, k_pages, v_pages, block_tables, lengths, o_part, ml):
        _body(q, k_pages, v_pages, block_tables, lengths, (o_part, ml), split=True, dtype=dtype)

    def paged_attention_fwd(q, k_pages, v_pages, block_tables, lengths, o):
        _body(q, k_pages, v_pages, block_tables, lengths, (o,), split=False, dtype=dtype)

    q_spec = Tile("B", "Nq", head_dim, dtype)
    kv_spec = Tile("P", "PS", "Nkv", head_dim, dtype)
    if split:
        outs = (Tile("B", "Nq", "S", head_dim, f32), Tile("B", "Nq", "S", 2, f32))
        grid = lambda B, Nq, Nkv, S: (S, grid_y(Nq, Nkv), B)
    else:
        outs = (q_spec,)
        grid = lambda B, Nq, Nkv: (1, grid_y(Nq, Nkv), B)
    k = kernel(paged_attention_split if split else paged_attention_fwd,
               in_specs=(q_spec, kv_spec, kv_spec, Tile("B", "MP", s32), Tile("B", s32)),
               out_specs=outs, grid=grid, block=(THREADS, 1, 1), arch=arch, extern_smem=True,
               raw_params=[("f32", "scale_log2")],
               name=f"paged_attention_{dtype.name}_d{head_dim}_{arch}{'_split' if split else ''}")
    return allow_unwritten()(k) if split else k

"""Emulator semantics: ``tcgen05.mma`` and ``tcgen05.mma.ws`` (PTX ISA
9.7.16.10, "TensorCore 5th Generation Matrix Multiply and accumulate
Operations").

``tcgen05.mma`` has single-thread semantics: every executing thread issues
one whole ``D = A*B (+ D)`` (in thread order). The emulator completes it at
issue, so the ``tcgen05.commit`` and mbarrier wait that follow find it done
— except under ``schedule="random"`` (:mod:`..core.deferred`), where the
instruction's operands and descriptors are read and checked at issue, and
the MMA reads shared and tensor memory and writes D when it completes: at a
seeded step, in issue order among the thread's tcgen05 operations, and
before the arrive of the ``tcgen05.commit`` that tracks it.

- A is M x K, from shared memory (a descriptor, :mod:`.tcgen05_smem`) or
  tensor memory (``[a-tmem]``: row ``i`` in the lane of the data path that
  computes row ``i`` of D, its K elements packed into 32-bit columns from the
  address's column: 2 a word for 16-bit types, 4 for 8-bit containers, 8 for
  ``mxf4``). B is K x N from shared memory. D is M x N in tensor memory.
- The instruction descriptor (:mod:`.tcgen05_idesc`) gives the types, M, N,
  negation and the major-ness of A and B.
- D's place in tensor memory is PTX ISA 9.7.16.10.5 "Data Path Layout
  Organization" (:func:`.tcgen05_operands.d_layout`): row ``i``, column ``j``
  of the CTA's rows is at lane ``i + R * (j / (N/f))``, column ``j % (N/f)``
  (``R`` rows a CTA, N folded ``f`` times: Layouts A and D f = 1; B and E
  f = 2; G f = 4), or for M = 64 without ``.ws`` (Layout F) at lane
  ``(i % 16) + 32 * (i / 16)``, plus the address's lane (0, or 16 for F).
  16-bit D elements take the low half of a 32-bit word (9.7.16.10.4.1).
- ``.cta_group::2``: the CTA pair (cluster ranks ``2p``, ``2p+1``) computes
  one MMA: the even CTA's shared memory holds A rows ``0..M/2-1`` and B
  columns ``0..N/2-1``, the odd CTA's the rest, both at the descriptors'
  addresses; each CTA's tensor memory holds its own M/2 rows of A (when in
  tensor memory) and of D (all N columns) at the instruction's addresses.
  The 8-word ``disable-output-lane`` mask gives the even CTA's 128 lanes in
  words 0-3 and the odd CTA's in words 4-7.
- Block scaling (``.kind::mxf8f6f4``, ``mxf4``, ``mxf4nvf4``):
  ``(A * scale_A) * (B * scale_B)``, factors in tensor memory
  (:func:`.tcgen05_operands.scales`).
- ``.ws`` with a zero-column mask descriptor: masked columns of B are zero,
  and B is read from column ``shift`` on (PTX ISA 9.7.16.4.3).

Arithmetic: elements decoded exactly, negated per the descriptor, products
exact and summed in float64, D added (times ``2^-scale-input-d``) and the
sum rounded once to f32/f16 — the ISA does not specify the hardware's
internal accumulation order or precision, so the last bit may differ from a
GPU. ``.kind::i8`` is exact with s32 wrap-around, or clamping with the
descriptor's saturate bit. Collector qualifiers only permit reuse (the ISA
requires the operands to stay unchanged), so operands are always read anew.

- Sparse A (``tcgen05.mma.sp``, ``.ws.sp``; the descriptor's sparsity bit
  must match): A is stored M x K/2 and spread over K by 4-bit metadata codes
  read from ``[sp-meta-tmem]`` (PTX ISA 9.7.16.10.8; the codes' place in
  tensor memory, drawn only in figures there, is
  :func:`.tcgen05_operands.sparse_metadata`'s). Undefined codes are refused.

- ``.ashift`` (PTX ISA 9.7.16.10.9.1, "tcgen05.mma"): "The qualifier
  ``.ashift`` shifts the rows of the ``A`` matrix down by one row, except for
  the last row in the Tensor Memory. Qualifier ``.ashift`` is only allowed
  with M = 128 or M = 256", and "it is illegal to specify either of
  ``.collector::a::use`` or ``.collector::a::fill`` along with ``.ashift``";
  the syntax has it only with ``[a-tmem]``, for the dense kinds. The
  emulator's reading of that text:

  * the MMA reads A as tensor memory holds it at issue; the shift follows
    the MMA (completing with it, so ``tcgen05.commit`` tracks both). The ISA
    does not say "before" or "after", but its collector rule only makes
    sense this way: ``lastuse`` (read A from the collector filled earlier,
    then discard it) stays legal, so the MMA must read the unshifted A;
    ``fill``/``use`` are illegal because the buffer would keep an A that
    the shift has made stale;
  * "down" is towards higher lanes, as for ``tcgen05.shift.down``: in each
    CTA of the MMA, A's row ``r`` (its ``K`` elements' words, in the lane
    the MMA reads it from) moves to row ``r + 1`` for ``r = 0 .. R-2``
    (``R`` = 128 rows a CTA, lanes 0-127 from the address); row 0 keeps its
    words, and the last row is the one not shifted (nothing below it), its
    old words overwritten by row ``R-2``'s. With ``.cta_group::2`` each CTA
    shifts its own 128 rows (nothing moves between the two tensor
    memories); for M = 128 there (Layout B, each CTA's 64 rows of A read
    from lanes 0-63 and again from 64-127) each copy shifts within itself.
    Columns other than A's ``K / (elements a word)`` are untouched; sparse A
    (``.sp``) shifts its stored ``K/2`` elements, not the metadata.

  Hardware report, not followed here: the issue-10 work notes cite a
  CUTLASS example in which a B200 shifted A within each 32-lane block of
  tensor memory (as ``tcgen05.shift`` moves one warp's 32 lanes) rather
  than over the whole 128 rows (we could not find that example's source to
  check it, nor its direction). Shifting in the same direction, the two
  readings differ only in lanes 32, 64 and 96 (the ISA's: they take rows
  31, 63, 95; per block: they keep their own). The report is unconfirmed
  and contradicts "except for the last row in the Tensor Memory" (one last
  row, not four), so the emulator follows the ISA; a kernel whose result
  depends on those lanes after an ``.ashift`` may differ on hardware.
  ``.ashift`` with M = 64, A from shared memory, ``.ws`` or block scaling
  is refused.

Refused with an error: sparse A with Layout F (M = 64) or B
(``.cta_group::2``, M = 128) and sparsity selectors 2-3 (their metadata
layout is only in the ISA's figures), K = 96 and the absolute
leading-dimension mode (sm_103a only).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ... import ir
from ...types import TYPES
from ..core import fastpaths
from ..core.deferred import later
from ..core.step import Step
from ..errors import SimError
from ..memory import tmem
from .mma import decode as decode_bits
from .mma import encode
from .registry import semantics
from .tcgen05 import peer_cta
from .tcgen05_idesc import BLOCK_SCALED, InstrDesc, decode_idesc
from .tcgen05_operands import (d_layout, expand_sparse, scale_blocks, scaled, scales, shift_tmem_a,
                               smem_operand, sparse_metadata, tmem_a)

__all__ = ["tcgen05_mma", "zero_column_mask"]

_U32, _U64, _S32 = TYPES["u32"], TYPES["u64"], TYPES["s32"]


def zero_column_mask(word: int, m: int, n: int) -> tuple[np.ndarray, int]:
    """PTX ISA 9.7.16.4.3 "Zero-Column Mask Descriptor": ``(mask (N,) bool,
    column shift)``; a set mask bit makes that column of B zero.

    Each sub-mask (1, 2 or 4 for M = 128, 64, 32, each over its share of N)
    alternates runs of columns used (``use span + 1``, bits 48-55) and zeroed
    (``skip span + 1``, bits 40-47), starting with a zeroed run when its
    first-span bit is set, and drops its first ``start count`` columns of
    that pattern. The field descriptions of the ISA's table swap the two
    spans; its worked examples (followed here) fix which is which.
    """
    word = int(word)
    shift = (word >> 56) & 0x3F
    if not (word >> 39) & 1:
        return np.zeros(n, dtype=bool), shift
    zeroed, used = ((word >> 40) & 0xFF) + 1, ((word >> 48) & 0xFF) + 1
    parts = {128: 1, 64: 2, 32: 4}[m]
    width = n // parts
    out = []
    for p in range(parts):
        start, first_zero = (word >> (8 * p)) & 0xFF, bool((word >> (32 + p)) & 1)
        period = np.array([first_zero] * (zeroed if first_zero else used) +
                          [not first_zero] * (used if first_zero else zeroed))
        out.append(np.resize(period, start + width)[start:])
    return np.concatenate(out), shift


def _address(s: Step, k: int) -> np.ndarray:
    """The tensor-memory address (lane << 16 | column) of ``[reg+off]`` operand ``k``."""
    return (s.address(k)[1].astype(np.uint64) & np.uint64(0xFFFF_FFFF)).astype(np.int64)


@semantics("tcgen05_mma", "tcgen05_mma_sp", "tcgen05_mma_ashift")
def tcgen05_mma(s: Step) -> None:
    """``tcgen05.mma{.ws}{.sp}``: one MMA per executing thread (module docstring)."""
    name, ops = s.ins.name, s.ins.operands
    parts = s.ins.opcode.split(".")
    sparse = "sp" in parts
    ashift = s.mod("ashift") is not None
    ws = "ws" in parts
    kind = s.mod("kind")
    cta_group = 2 if s.mod("cta_group") == "cta_group::2" else 1
    a_in_tmem = isinstance(ops[1], ir.Address)
    o = 1 if sparse else 0          # [sp-meta-tmem] comes between b-desc and idesc
    args = dict(d=_address(s, 0), a=_address(s, 1) if a_in_tmem else s.src(1, _U64).astype(np.uint64),
                b=s.src(2, _U64).astype(np.uint64), idesc=s.src(3 + o, _U32))
    if sparse:
        args["meta"] = _address(s, 3)
    lanes_off = enable = None
    scale_d = 0
    if kind in BLOCK_SCALED:
        args.update(sfa=_address(s, 4 + o), sfb=_address(s, 5 + o))
        enable = s.pred(6 + o)
    elif ws:
        enable = s.pred(4 + o)
        if len(ops) > 5 + o:
            args["zcm"] = s.src(5 + o, _U64).astype(np.uint64)
    else:
        tail = list(ops[4 + o:])
        k = 4 + o
        if isinstance(tail[0], ir.Vector):
            lanes_off = s.src(k, _U32).reshape(s.n, -1)
            k += 1
        enable = s.pred(k)
        if len(ops) > k + 1:
            scale_d = int(s.immediate(k + 1, _S32))
            if not 0 <= scale_d <= 15:
                raise SimError(f"{name}: scale-input-d must be in [0, 15], got {scale_d}")
    for i, thread in enumerate(s.threads):
        one = {key: int(v[i]) for key, v in args.items()}
        mask = None if lanes_off is None else lanes_off[i].copy()
        mma = _issue(s, int(thread), one, bool(enable[i]), mask, scale_d, kind, cta_group, ws, a_in_tmem, sparse,
                     ashift)
        later(s, mma, "tcgen05", s.threads[i:i + 1])


def _pair(s: Step, thread: int) -> list[int]:
    """The CTAs of the MMA: the issuing CTA, or its CTA pair (even rank
    first); checks the kernel's ``.cta_group`` is the same everywhere."""
    cta = thread // s.m.ntid
    peer = peer_cta(s, cta)
    if peer is None:
        return [cta]
    rank = int(s.m.cluster_register("cluster_ctarank", 0, np.array([cta]))[0])
    return [cta, peer] if rank % 2 == 0 else [peer, cta]


def _issue(s: Step, thread: int, args: dict, enable: bool, lanes_off: np.ndarray | None, scale_d: int,
           kind: str, cta_group: int, ws: bool, a_in_tmem: bool, sparse: bool,
           ashift: bool = False) -> Callable[[], None]:
    """One MMA issued by ``thread``: checks its descriptors now and returns
    the MMA (then, with ``.ashift``, A's rows shifted) to perform."""
    name = s.ins.name
    d = _idesc(args["idesc"], kind, cta_group, ws, name)
    if ashift:
        _check_ashift(name, d, a_in_tmem, ws, kind)
    if d.sparse != sparse:
        raise SimError(f"{name}: the instruction descriptor's sparsity bit (2) is {int(d.sparse)}, but the "
                       f"instruction is {'' if sparse else 'not '}tcgen05.mma{'.ws' if ws else ''}.sp")
    ctas = _pair(s, thread)
    layout = d_layout(d.m, d.n, cta_group, ws)[0]
    # Sparse A: K/2 stored values a row, spread over K by the metadata.
    da = dataclasses.replace(d, k=d.k // 2) if sparse else d
    if sparse and layout in ("F", "B"):
        raise SimError(f"{name}: sparse A with data path Layout {layout} (M = {d.m}, .cta_group::{cta_group}) "
                       "is not emulated: the ISA gives its metadata layout only in a figure; M = 128 "
                       "(.cta_group::1), M = 256 (.cta_group::2) and the .ws shapes run")
    base_lane = args["d"] >> 16
    if base_lane not in ((0, 16) if layout == "F" else (0,)):
        raise SimError(f"{name}: [d-tmem] lane {base_lane} is not aligned for data path Layout {layout} "
                       f"(M = {d.m}); expected lane {'0 or 16' if layout == 'F' else '0'} (PTX ISA "
                       "'Data Path Layout Organization')")
    if a_in_tmem and (args["a"] >> 16) != (base_lane if layout == "F" else 0):
        raise SimError(f"{name}: [a-tmem] lane {args['a'] >> 16} must be {base_lane if layout == 'F' else 0}: "
                       f"A and D use the same tensor-memory lane alignment (PTX ISA 'Data Path Layout "
                       "Organization')")
    mask, shift = (np.zeros(d.n, dtype=bool), 0) if "zcm" not in args else zero_column_mask(args["zcm"], d.m, d.n)
    if shift > (16 if d.m == 32 else 32):
        raise SimError(f"{name}: zero-column mask shift {shift} exceeds {16 if d.m == 32 else 32} for M = {d.m}")
    return functools.partial(_perform, s, _Checked(thread, args, enable, lanes_off, scale_d, kind, ws, ashift, d,
                                                   da, ctas, mask, shift))


_IDESCS: dict[tuple, InstrDesc] = {}


def _idesc(word: int, kind: str, cta_group: int, ws: bool, what: str) -> InstrDesc:
    """:func:`decode_idesc`, remembered per descriptor on the fast path (a
    descriptor that decoded and passed its checks once passes them again)."""
    if not fastpaths.on():
        return decode_idesc(word, kind, cta_group=cta_group, ws=ws, what=what)
    key = (int(word), kind, cta_group, ws)
    hit = _IDESCS.get(key)
    if hit is None:
        if len(_IDESCS) > 4096:
            _IDESCS.clear()
        hit = _IDESCS[key] = decode_idesc(word, kind, cta_group=cta_group, ws=ws, what=what)
    return hit


class _Checked(NamedTuple):
    """One MMA as :func:`_issue` read and checked it at issue."""

    thread: int
    args: dict
    enable: bool
    lanes_off: np.ndarray | None
    scale_d: int
    kind: str
    ws: bool
    ashift: bool
    d: InstrDesc
    da: InstrDesc                       # d with A's stored K (halved for sparse A)
    ctas: list[int]
    mask: np.ndarray                    # B's zero columns
    shift: int


def _perform(s: Step, plan: _Checked) -> None:
    """The MMA (and ``.ashift``'s shift) :func:`_issue` checked: reads A and
    B (and scales, metadata) from shared and tensor memory and accumulates
    into D — at issue, or when it completes under a random schedule."""
    thread, args, enable, lanes_off, scale_d, kind, ws, ashift, d, da, ctas, mask, shift = plan
    a_in_tmem, sparse = isinstance(s.ins.operands[1], ir.Address), d.sparse
    _, rows, lane_off, col_off = d_layout(d.m, d.n, len(ctas), ws)
    cols_per_cta = (d.n + shift) // len(ctas)
    B = np.concatenate([smem_operand(s, args["b"], c, cols_per_cta, d, d.btype, d.mn_major_b, "B", thread)
                        for c in ctas], axis=0)[shift:shift + d.n].T          # (K, N)
    B = np.where(mask[None, :], 0, B)
    if d.negate_b:
        B = -B
    blocks = scale_blocks(s, d) if kind in BLOCK_SCALED else 0
    fold = d.n // (col_off.max() + 1)
    width = d.n // fold
    for q, cta in enumerate(ctas):
        D = np.zeros((rows, d.n))
        if not a_in_tmem:
            A_smem = smem_operand(s, args["a"], cta, rows, da, d.atype, d.mn_major_a, "A", thread)
        for h in range(fold):
            cols = slice(h * width, (h + 1) * width)
            lanes = lane_off[:, h * width]
            # A in tensor memory: each block of D's lanes reads its own rows of A.
            A = tmem_a(s, cta, args["a"], lanes, da) if a_in_tmem else A_smem
            if sparse:
                A = expand_sparse(A, sparse_metadata(s, cta, args["meta"], rows, h, d), d)
            if d.negate_a:
                A = -A
            Bh = B[:, cols]
            if blocks:
                A, Bh = _block_scaled(s, cta, args, A, Bh, lanes, lane_off[:, cols], h * width, blocks, d)
            D[:, cols] = _product(A, Bh, d)
        _accumulate(s, cta, args["d"], D, lane_off, col_off, enable, scale_d, d,
                    None if lanes_off is None else lanes_off[4 * q:4 * q + 4])
    if ashift:          # after every CTA's MMA has read its A (module docstring)
        for cta in ctas:
            for h in range(fold):
                shift_tmem_a(s, cta, args["a"], lane_off[:, h * width], da)


def _check_ashift(name: str, d: InstrDesc, a_in_tmem: bool, ws: bool, kind: str) -> None:
    """The ISA's limits on ``.ashift``: A in tensor memory, M = 128 or 256,
    no ``.ws``, no block scaling (only the syntax's dense kinds)."""
    if not a_in_tmem or ws or kind in BLOCK_SCALED:
        raise SimError(f"{name}: .ashift needs A in tensor memory ([a-tmem]) and a dense, non-.ws MMA (PTX ISA "
                       "'tcgen05.mma' syntax)")
    if d.m not in (128, 256):
        raise SimError(f"{name}: .ashift is only allowed with M = 128 or M = 256 (PTX ISA 'tcgen05.mma'); the "
                       f"instruction descriptor gives M = {d.m}")


def _block_scaled(s: Step, cta: int, args: dict, A: np.ndarray, B: np.ndarray, lanes: np.ndarray,
                  d_lanes: np.ndarray, first_col: int, blocks: int, d: InstrDesc) -> tuple[np.ndarray, np.ndarray]:
    """A and B times their scale factors. Each row's factors are read in its
    data path's own 32-lane partition; B's factors in every partition the
    columns' data paths use, which must agree (the ISA has them duplicated)."""
    rows = np.arange(len(lanes))
    sfa = scales(s, cta, args["sfa"], 32 * (lanes // 32) + rows % 32, rows, d.sfa_id, blocks, d, "A")
    cols = first_col + np.arange(B.shape[1])
    sfb = None
    for part in np.unique(d_lanes // 32):
        got = scales(s, cta, args["sfb"], 32 * part + cols % 32, cols, d.sfb_id, blocks, d, "B")
        if sfb is not None and not np.array_equal(got, sfb, equal_nan=True):
            raise SimError(f"{s.ins.name}: the scale factors of B differ between the 32-lane partitions of "
                           "tensor memory; the ISA requires them duplicated in all four (PTX ISA 'Block "
                           "Scaling for tcgen05.mma')")
        sfb = got
    return scaled(A, sfa, 1), scaled(B, sfb, 0)


def _product(A: np.ndarray, B: np.ndarray, d: InstrDesc) -> np.ndarray:
    """A @ B: float64 (exact products) or exact int64."""
    if d.kind == "kind::i8":
        return A.astype(np.int64) @ B.astype(np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        return A @ B


def _rectangle(lane_off: np.ndarray, col_off: np.ndarray) -> bool:
    """Whether D's cells are lanes ``0..R-1`` by columns ``0..N-1`` in
    order (the fast path then reads and writes them as one block)."""
    if not fastpaths.on():
        return False
    key = (id(lane_off), id(col_off))        # the layouts are cached: an entry keeps its arrays alive
    hit = _RECTANGLES.get(key)
    if hit is None or hit[0] is not lane_off or hit[1] is not col_off:
        rows, cols = lane_off.shape
        flag = bool((lane_off == np.arange(rows)[:, None]).all() and (col_off == np.arange(cols)[None, :]).all())
        if len(_RECTANGLES) > 256:
            _RECTANGLES.clear()
        hit = _RECTANGLES[key] = (lane_off, col_off, flag)
    return hit[2]


_RECTANGLES: dict[tuple, tuple[np.ndarray, np.ndarray, bool]] = {}


def _accumulate(s: Step, cta: int, addr: int, AB: np.ndarray, lane_off: np.ndarray, col_off: np.ndarray,
                enable: bool, scale_d: int, d: InstrDesc, disabled: np.ndarray | None) -> None:
    """D = AB (+ D * 2^-scale_d) into CTA ``cta``'s tensor memory, skipping
    lanes whose ``disable-output-lane`` bit is set."""
    what = f"{s.ins.name} [d-tmem]"
    if disabled is None and _rectangle(lane_off, col_off):
        cells = tmem.block(s, cta, addr >> 16, addr & 0xFFFF, lane_off.shape[0], lane_off.shape[1], what)
        if enable:
            C = decode_bits(cells & np.uint32(0xFFFF), "f16") if d.dtype == "f16" else decode_bits(cells, d.dtype)
            with np.errstate(over="ignore", invalid="ignore"):
                AB = AB + (C * 2.0 ** -scale_d if scale_d else C)
        cells[...] = encode(AB, d.dtype, d.saturate).astype(np.uint32)
        return
    lanes = (addr >> 16) + lane_off
    cols = (addr & 0xFFFF) + col_off
    if enable:
        old = tmem.read(s, cta, lanes, cols, what)
        if d.dtype == "f16":
            C = decode_bits(old & np.uint32(0xFFFF), "f16")
        else:
            C = decode_bits(old, d.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            AB = AB + (C * 2.0 ** -scale_d if scale_d else C)
    bits = encode(AB, d.dtype, d.saturate).astype(np.uint32)
    keep = np.ones(lanes.shape, dtype=bool)
    if disabled is not None:
        words = disabled.astype(np.uint64)[lanes // 32]
        keep = ((words >> (lanes % 32).astype(np.uint64)) & np.uint64(1)) == 0
    tmem.write(s, cta, lanes[keep], cols[keep], bits[keep], what)

"""Emulator semantics: moves into and out of Blackwell tensor memory —
``tcgen05.ld`` / ``tcgen05.st`` (registers), ``tcgen05.cp`` (shared memory
by matrix descriptor) and ``tcgen05.shift`` (PTX ISA 9.7.16.8, 9.7.16.9).

``tcgen05.ld/st`` (PTX ISA 9.7.16.2.3 "Data Movement Shape", "Matrix
fragments for tcgen05.ld/st"): a warp moves ``.num`` repetitions of a shape
between its registers and tensor memory starting at ``taddr``. Thread ``t``'s
register ``j`` holds the cell at (lane offset, column offset):

============= ===================================== ==========================================
shape          lane                                  column
============= ===================================== ==========================================
``.32x32b``    ``t``                                  ``j``
``.16x64b``    ``t/4 + 8*(t%2)``                      ``2*j + (t/2)%2``
``.16x128b``   ``t/4 + 8*(j%2)``                      ``4*(j/2) + t%4``
``.16x256b``   ``t/4 + 8*((j/2)%2)``                  ``8*(j/4) + 2*(t%4) + j%2``
``.16x32bx2``  ``t%16``                               ``j``, plus ``immHalfSplitoff`` for t >= 16
============= ===================================== ==========================================

(the ISA's Figures 183-187, as :func:`jaxptx.isa.fragments.tcgen05` states
them; CUTLASS's ``SM100_TMEM_LOAD_*`` copy traits and Triton's TMEM access
atoms encode the same maps). With ``.pack::16b`` /
``.unpack::16b`` register ``j`` covers two adjacent columns ``2c``, ``2c+1``
(``c`` the column above, ``immHalfSplitoff`` added after doubling): the low
16 bits of each cell form the register's low and high halves; ``.unpack``
writes each half zero-extended to 32 bits. Warp ``w`` of a CTA may only
reach lanes ``32*(w%4)`` .. ``32*(w%4)+31`` (PTX ISA 9.7.16.5 "Issue
Granularity"); other lanes are an error here.

``tcgen05.cp`` copies a matrix of ``R`` rows of 128 or 256 bits from shared
memory, laid out as a K-major canonical matrix (PTX ISA 9.7.16.3: rows are
8-row core-matrix groups ``SBO`` apart, 16-byte chunks ``LBO`` apart or
swizzled), to lanes from ``taddr``: ``.128x256b``/``.128x128b`` row ``r`` to
lane ``r``; ``.4x256b`` row ``r`` to lane ``32*r``; ``.32x128b.warpx4`` row
``r`` to lanes ``r + 32*k`` (k = 0..3); ``.64x128b.warpx2::02_13`` row ``r``
to lanes ``r`` and ``r + 64``; ``.warpx2::01_23`` row ``r = i + 32*h`` to
lanes ``i + 64*h`` and ``i + 64*h + 32`` (lane maps as CUTLASS's
``SM100_UTCCP_*`` traits). The decompressing forms read 16 6-bit
(``.b6x16_p32``) or 4-bit (``.b4x16_p64``) elements from the low 12 or 8
bytes of each source chunk and write them as 16 bytes (PTX ISA 9.7.16.9.1
"Optional Decompression": 6-bit values in bits 0-5, 4-bit in bits 2-5).
``tcgen05.shift.down`` moves the 256-bit rows of lanes ``taddr .. +30`` one
lane down (lane ``taddr`` keeps its value; its lane must be a multiple of 32).
With ``.cta_group::2`` both CTAs of the pair do the same copy or shift,
each from its own shared memory into its own tensor memory.

``tcgen05.ld`` / ``st`` complete at issue (``tcgen05.wait::ld/st`` has
nothing to wait for). ``tcgen05.cp`` and ``tcgen05.shift`` are asynchronous
tcgen05 operations: at issue on the default schedule, under
``schedule="random"`` later (:mod:`..core.deferred`), in issue order with
the thread's ``tcgen05.mma`` operations and before the arrive of the
``tcgen05.commit`` that tracks them; the address and descriptor are read at
issue, shared and tensor memory when they complete.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import ir
from ...isa import fragments as layouts
from ...types import TYPES
from ..core.deferred import later
from ..core.step import Step
from ..errors import SimError
from ..memory import tmem
from .fragments import groups
from .tcgen05_operands import on_behalf_of
from .mma import registers, write_registers
from .registry import semantics
from .tcgen05 import peer_cta, uniform_per_warp, where
from .tcgen05_smem import decode_smem_desc, read_matrix

__all__ = ["tcgen05_ld", "tcgen05_st", "tcgen05_cp", "tcgen05_shift", "fragment_cells"]

_U32 = TYPES["u32"]
_U64 = TYPES["u64"]


@functools.cache
def fragment_cells(shape: str, nregs: int, packed: bool, split: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(lane offsets (32, nregs), column offsets (32, nregs, 1 or 2))`` of
    every (thread, register) of one warp: the cells of
    :func:`jaxptx.isa.fragments.tcgen05` (``split``: the ``.16x32bx2``
    half-split offset)."""
    layout = layouts.tcgen05(shape, nregs // layouts.TCGEN05_SHAPES[shape], packed, split)
    _, lane, cols = layout.grid
    return lane[:, :, 0], cols


def _cells(s: Step, k_addr: int, nregs: int, packed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(CTA, lanes (n, R, P), columns (n, R, P))`` of every executing
    thread's registers; checks the warp's address and lane quarter."""
    slot, rank, _ = groups(s)
    shape = s.mod("shape")
    want = layouts.TCGEN05_SHAPES[shape] * int(s.mod("num")[1:])
    if nregs != want:
        raise SimError(f"{s.ins.name}: {want} registers expected for .{shape}.{s.mod('num')}, got {nregs}")
    taddr = s.address(k_addr)[1].astype(np.int64) & 0xFFFF_FFFF
    uniform_per_warp(s, taddr, "taddr")
    split = int(s.immediate(k_addr + 1, _U32)) if shape == "16x32bx2" else 0
    lane_off, col_off = fragment_cells(shape, nregs, packed, split)
    lanes = ((taddr >> 16) & 0xFFFF)[:, None] + lane_off[rank]
    cols = (taddr & 0xFFFF)[:, None, None] + col_off[rank]
    lanes = np.broadcast_to(lanes[:, :, None], cols.shape)
    warp = (s.threads % s.m.ntid) // 32
    low = 32 * (warp % 4)
    bad = ((lanes < low[:, None, None]) | (lanes >= low[:, None, None] + 32)).any(axis=(1, 2))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        same = lanes[slot == slot[i]]
        raise SimError(f"{where(s)}: warp {int(warp[i])} of CTA {int(s.threads[i]) // s.m.ntid} may access tensor "
                       f"memory lanes {int(low[i])}..{int(low[i]) + 31} only (warp % 4 picks the lane quarter); "
                       f"taddr {int(taddr[i]):#010x} reaches lanes {int(same.min())}..{int(same.max())}")
    return s.threads // s.m.ntid, lanes, cols


def _by_cta(cta: np.ndarray):
    """``(cta, positions)`` for each distinct CTA among the executing threads."""
    for c in np.unique(cta):
        yield int(c), np.flatnonzero(cta == c)


@semantics("tcgen05_ld")
def tcgen05_ld(s: Step) -> None:
    """``tcgen05.ld.sync.aligned``: every shape, ``.num`` and ``.pack::16b``
    (module docstring)."""
    op = s.ins.operands[0]
    nregs = len(op.items) if isinstance(op, ir.Vector) else 1     # destinations: counted, not read
    packed = s.mod("pack") is not None
    cta, lanes, cols = _cells(s, 1, nregs, packed)
    cells = np.empty(lanes.shape, dtype=np.uint32)
    what = f"{where(s)} [taddr]"
    for c, pos in _by_cta(cta):
        cells[pos] = tmem.read(s, c, lanes[pos], cols[pos], what)
    if packed:
        regs = (cells[:, :, 0] & np.uint32(0xFFFF)) | ((cells[:, :, 1] & np.uint32(0xFFFF)) << np.uint32(16))
    else:
        regs = cells[:, :, 0]
    write_registers(s, 0, regs.astype(np.uint32))


@semantics("tcgen05_st")
def tcgen05_st(s: Step) -> None:
    """``tcgen05.st.sync.aligned``: every shape, ``.num`` and ``.unpack::16b``
    (module docstring)."""
    k_regs = 2 if s.mod("shape") == "16x32bx2" else 1
    regs = registers(s, k_regs)
    packed = s.mod("unpack") is not None
    cta, lanes, cols = _cells(s, 0, regs.shape[1], packed)
    if packed:
        values = np.stack([regs & np.uint32(0xFFFF), regs >> np.uint32(16)], axis=-1)
    else:
        values = regs[:, :, None]
    what = f"{where(s)} [taddr]"
    for c, pos in _by_cta(cta):
        tmem.write(s, c, lanes[pos], cols[pos], values[pos], what)


# --- tcgen05.cp -------------------------------------------------------------------------------

def _cp_lanes(shape: str, multicast: str | None) -> tuple[int, np.ndarray]:
    """``(source rows, lane offsets (rows, copies))`` of a copy (module docstring)."""
    if shape in ("128x256b", "128x128b"):
        return 128, np.arange(128)[:, None]
    if shape == "4x256b":
        return 4, 32 * np.arange(4)[:, None]
    if shape == "32x128b":
        return 32, np.arange(32)[:, None] + 32 * np.arange(4)[None, :]
    r = np.arange(64)[:, None]
    if multicast == "warpx2::02_13":
        return 64, r + 64 * np.arange(2)[None, :]
    return 64, r % 32 + 64 * (r // 32) + 32 * np.arange(2)[None, :]


def _source_words(s: Step, cta: int, desc: int, rows: int, chunks: int, issuer: int) -> np.ndarray:
    """The ``(rows, 4 * chunks)`` 32-bit words a copy writes, read from CTA
    ``cta``'s shared memory through descriptor ``desc``, on behalf of
    thread ``issuer``."""
    what = f"{where(s)} [s-desc]"
    sd = decode_smem_desc(desc, what)
    thread = np.array([cta * s.m.ntid])        # descriptor offsets are in CTA ``cta``'s window

    def load(addr: np.ndarray) -> np.ndarray:
        with on_behalf_of(s, issuer):
            threads = np.repeat(thread, len(addr))
            chunks = s.m.memory.load("shared", s.m.memory.shared_address(addr, threads), threads, 16, what)
            return chunks.view(np.uint8)
    fmt = s.mod("src_fmt")
    if fmt is None:
        return read_matrix(load, sd, rows, 4 * chunks, 32, 4, False).astype(np.uint32)
    bits = 6 if fmt == "b6x16_p32" else 4
    elems = read_matrix(load, sd, rows, 16 * chunks, bits, 16, False)
    if bits == 4:
        elems = elems << 2
    as_bytes = elems.astype(np.uint8).reshape(rows, 4 * chunks, 4)
    return np.ascontiguousarray(as_bytes).view("<u4").reshape(rows, 4 * chunks).astype(np.uint32)


def _pair_ctas(s: Step, cta: int) -> list[int]:
    """The CTAs an operation of CTA ``cta`` acts on: itself, and its peer for ``.cta_group::2``."""
    peer = peer_cta(s, cta)
    return [cta] if peer is None else sorted([cta, peer])


@semantics("tcgen05_cp")
def tcgen05_cp(s: Step) -> None:
    """``tcgen05.cp``: each executing thread copies one matrix from shared
    memory into tensor memory (module docstring)."""
    shape = s.mod("shape")
    rows, lane_off = _cp_lanes(shape, s.mod("multicast"))
    chunks = 2 if shape.endswith("256b") else 1
    taddr = s.address(0)[1].astype(np.int64) & 0xFFFF_FFFF
    descs = s.src(1, _U64).astype(np.uint64)
    what = f"{where(s)} [taddr]"
    for i in range(s.n):
        lane0, col0 = tmem.lane_of(taddr[i]), tmem.column_of(taddr[i])
        lanes = np.broadcast_to((lane0 + lane_off)[:, :, None], lane_off.shape + (4 * chunks,))
        cols = np.broadcast_to(col0 + np.arange(4 * chunks), lanes.shape)
        ctas = _pair_ctas(s, int(s.threads[i]) // s.m.ntid)
        later(s, functools.partial(_copy, s, ctas, lanes, cols, int(descs[i]), rows, chunks, int(s.threads[i]), what),
              "tcgen05", s.threads[i:i + 1])


def _copy(s: Step, ctas: list[int], lanes: np.ndarray, cols: np.ndarray, desc: int, rows: int, chunks: int,
          issuer: int, what: str) -> None:
    """One ``tcgen05.cp`` of thread ``issuer``: into ``(lanes, cols)`` of each of ``ctas``."""
    for cta in ctas:
        words = _source_words(s, cta, desc, rows, chunks, issuer)
        tmem.write(s, cta, lanes, cols, words[:, None, :], what)


@semantics("tcgen05_shift")
def tcgen05_shift(s: Step) -> None:
    """``tcgen05.shift.down``: each executing thread moves the 256-bit rows
    of lanes ``taddr .. taddr+30`` one lane down (module docstring)."""
    taddr = s.address(0)[1].astype(np.int64) & 0xFFFF_FFFF
    what = f"{where(s)} [taddr]"
    for i in range(s.n):
        lane0, col0 = tmem.lane_of(taddr[i]), tmem.column_of(taddr[i])
        if lane0 % 32:
            raise SimError(f"{what}: taddr {int(taddr[i]):#010x} has lane {lane0}; tcgen05.shift needs a lane "
                           "that is a multiple of 32")
        lanes = np.arange(lane0, lane0 + 31)[:, None]
        cols = col0 + np.arange(8)[None, :]
        ctas = _pair_ctas(s, int(s.threads[i]) // s.m.ntid)
        later(s, functools.partial(_shift, s, ctas, lanes, cols, what), "tcgen05", s.threads[i:i + 1])


def _shift(s: Step, ctas: list[int], lanes: np.ndarray, cols: np.ndarray, what: str) -> None:
    """One ``tcgen05.shift.down``: ``(lanes, cols)`` of each of ``ctas`` one lane down."""
    for cta in ctas:
        rows = tmem.read(s, cta, lanes, cols, what)
        tmem.write(s, cta, lanes + 1, cols, rows, what)

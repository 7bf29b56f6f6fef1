"""Blackwell tensor memory on the emulator: ``tcgen05.st`` in one shape,
``tcgen05.ld`` in another, for every shape and ``.num`` of the table, with
and without ``.pack::16b``/``.unpack::16b``, against a numpy model of the
PTX ISA's fragment maps. Every kernel is assembled by ptxas for sm_100a.

The model (written from PTX ISA 9.7.16.2.3 "Matrix fragments for
tcgen05.ld/st", Figures 183-187) places register ``j`` of lane ``t`` of a
warp at a (lane, column) offset from ``taddr``:

- ``.32x32b``: one lane per thread, one column per register;
- ``.16x64b``: thread quads share rows ``t/4`` and ``t/4 + 8``; odd threads
  take the lower row, threads 2 and 3 of a quad the second column of a
  64-bit (two-column) slice, each ``x1`` repetition two more columns;
- ``.16x128b``: thread ``t`` owns column ``t%4`` of a four-column slice,
  its even registers in row ``t/4``, odd ones in row ``t/4 + 8``;
- ``.16x256b``: thread ``t`` owns columns ``2(t%4)``, ``2(t%4)+1`` of an
  eight-column slice: registers 0, 1 in row ``t/4``, 2, 3 in row ``t/4 + 8``;
- ``.16x32bx2``: threads 0-15 rows 0-15 from column 0, threads 16-31 the
  same rows from column ``immHalfSplitoff``.

Warp ``w`` works in lanes ``32*(w%4)`` and up (16-lane shapes at the lower
or upper half of that quarter: both are used).
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"
NUMS = {"32x32b": (1, 2, 4, 8, 16, 32, 64, 128), "16x64b": (1, 2, 4, 8, 16, 32, 64, 128),
        "16x128b": (1, 2, 4, 8, 16, 32, 64), "16x256b": (1, 2, 4, 8, 16, 32),
        "16x32bx2": (1, 2, 4, 8, 16, 32, 64, 128)}
PER_X1 = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}


def cell(shape: str, t: int, j: int) -> tuple[int, int]:
    """(lane, column) offset of register ``j`` of warp lane ``t`` (unpacked,
    before the half-split offset), from the ISA's figures (module docstring)."""
    quad_row, in_quad = t // 4, t % 4
    if shape == "32x32b":
        return t, j
    if shape == "16x64b":
        row = quad_row + (8 if t % 2 else 0)
        return row, 2 * j + (1 if in_quad >= 2 else 0)
    if shape == "16x128b":
        rep, second_row = divmod(j, 2)
        return quad_row + 8 * second_row, 4 * rep + in_quad
    if shape == "16x256b":
        rep, k = divmod(j, 4)
        return quad_row + (8 if k >= 2 else 0), 8 * rep + 2 * in_quad + k % 2
    return t % 16, j


def span(shape: str, num: int, pack: bool) -> int:
    """Columns one ``.num`` instruction covers (both halves for 16x32bx2)."""
    width = {"32x32b": 1, "16x64b": 2, "16x128b": 4, "16x256b": 8, "16x32bx2": 2}[shape]
    return width * num * (2 if pack else 1)


def regs(n: int, first: int = 0) -> str:
    return "{" + ", ".join(f"%r{first + i}" for i in range(n)) + "}"


class Stream:
    """Words of a per-thread stream: word ``k`` of thread ``t`` at ``(k*128 + t)*4``."""

    def __init__(self, reg: str) -> None:
        self.reg, self.count = reg, 0

    def load(self, n: int) -> list[str]:
        out = [f"ld.global.u32 %r{i}, [{self.reg}+{(self.count + i) * 512}];" for i in range(n)]
        self.count += n
        return out

    def store(self, n: int) -> list[str]:
        out = [f"st.global.u32 [{self.reg}+{(self.count + i) * 512}], %r{i};" for i in range(n)]
        self.count += n
        return out


def build(shape: str, pack: bool, nums: tuple[int, ...]) -> tuple[str, list[tuple[int, int, int, int]]]:
    """The kernel and, per ``.num``, (num, first column, register count, split offset)."""
    src, dst = Stream("%rd1"), Stream("%rd2")
    lines, plan = [], []
    sixteen = shape.startswith("16")
    for num in nums:
        nregs = PER_X1[shape] * num
        width = span(shape, num, pack)
        col0 = min(16, 512 - width)
        split = width // 2 if shape == "16x32bx2" else 0
        base = "%r203" if sixteen else "%r202"
        lines.append(f"add.u32 %r204, {base}, {col0};")
        lines += src.load(nregs)
        imm = f", {split}" if shape == "16x32bx2" else ""
        mod = ".unpack::16b" if pack else ""
        lines.append(f"tcgen05.st.sync.aligned.{shape}.x{num}{mod}.b32 [%r204]{imm}, {regs(nregs)};")
        lines.append("tcgen05.wait::st.sync.aligned;")
        for c in range(0, width, 128):            # dump the columns as 32x32b
            n = min(128, width - c)
            lines.append(f"add.u32 %r205, %r202, {col0 + c};")
            lines.append(f"tcgen05.ld.sync.aligned.32x32b.x{n}.b32 {regs(n)}, [%r205];")
            lines.append("tcgen05.wait::ld.sync.aligned;")
            lines += dst.store(n)
        for c in range(0, width, 128):            # refill them as 32x32b
            n = min(128, width - c)
            lines += src.load(n)
            lines.append(f"add.u32 %r205, %r202, {col0 + c};")
            lines.append(f"tcgen05.st.sync.aligned.32x32b.x{n}.b32 [%r205], {regs(n)};")
        lines.append("tcgen05.wait::st.sync.aligned;")
        mod = ".pack::16b" if pack else ""
        lines.append(f"tcgen05.ld.sync.aligned.{shape}.x{num}{mod}.b32 {regs(nregs)}, [%r204]{imm};")
        lines.append("tcgen05.wait::ld.sync.aligned;")
        lines += dst.store(nregs)
        plan.append((num, col0, nregs, split))
    body = "\n    ".join(lines)
    text = HEAD + f""".visible .entry k(.param .u64 inp, .param .u64 out)
{{
    .shared .align 4 .b32 slot;
    .reg .pred %p<4>;
    .reg .b32 %r<210>;
    .reg .b64 %rd<8>;
    mov.u32 %r200, %tid.x;
    setp.lt.u32 %p1, %r200, 32;
    @%p1 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [slot], 512;
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r201, [slot];
    shr.u32 %r206, %r200, 5;
    shl.b32 %r207, %r206, 21;
    add.u32 %r202, %r201, %r207;
    and.b32 %r208, %r206, 1;
    shl.b32 %r208, %r208, 20;
    add.u32 %r203, %r202, %r208;
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r200, 4;
    add.u64 %rd1, %rd1, %rd3;
    add.u64 %rd2, %rd2, %rd3;
    {body}
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @%p1 tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r201, 512;
    ret;
}}
"""
    return text, plan


def model(shape: str, pack: bool, plan, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected output stream ``(count, 128)`` and the bits of each word that
    are checked (cells never written are not; after ``.unpack::16b`` only
    the low halves, which the ISA defines)."""
    image = np.zeros((128, 512), dtype=np.uint32)
    known = np.zeros((128, 512), dtype=bool)
    inp = iter(words)
    out, check = [], []
    for num, col0, nregs, split in plan:
        width = span(shape, num, pack)
        lane_base = [32 * w + (16 * (w % 2) if shape.startswith("16") else 0) for w in range(4)]
        values = np.array([next(inp) for _ in range(nregs)])          # (nregs, 128)
        written = np.zeros_like(known)
        for w in range(4):
            for t in range(32):
                for j in range(nregs):
                    lane, col = cell(shape, t, j)
                    half = split if (shape == "16x32bx2" and t >= 16) else 0
                    v = int(values[j, 32 * w + t])
                    lane += lane_base[w]
                    if pack:
                        for e in range(2):
                            c = col0 + 2 * col + e + half
                            image[lane, c] = (v >> (16 * e)) & 0xFFFF
                            written[lane, c] = True
                    else:
                        image[lane, col0 + col + half] = v
                        written[lane, col0 + col + half] = True
        known |= written
        low = 0xFFFF if pack else 0xFFFFFFFF       # .unpack::16b sets the low halves (ISA)
        for c in range(width):                  # the 32x32b dump: thread = lane, register = column
            out.append(image[:, col0 + c].copy())
            check.append(np.where(written[:, col0 + c], low, np.where(known[:, col0 + c], 0xFFFFFFFF, 0)))
        for c in range(width):
            image[:, col0 + c] = next(inp)
            known[:, col0 + c] = True
        regs_out = np.zeros((nregs, 128), dtype=np.uint32)
        for w in range(4):
            for t in range(32):
                for j in range(nregs):
                    lane, col = cell(shape, t, j)
                    lane += lane_base[w]
                    half = split if (shape == "16x32bx2" and t >= 16) else 0
                    if pack:
                        lo = image[lane, col0 + 2 * col + half] & 0xFFFF
                        hi = image[lane, col0 + 2 * col + 1 + half] & 0xFFFF
                        regs_out[j, 32 * w + t] = lo | (hi << 16)
                    else:
                        regs_out[j, 32 * w + t] = image[lane, col0 + col + half]
        out += list(regs_out)
        check += [np.full(128, 0xFFFFFFFF)] * nregs
    return np.array(out, dtype=np.uint32), np.array(check, dtype=np.uint32)


@pytest.mark.parametrize("pack", [False, True], ids=["plain", "pack16"])
@pytest.mark.parametrize("shape", list(NUMS))
def test_st_then_ld_every_num_matches_the_isa_maps(shape: str, pack: bool) -> None:
    text, plan = build(shape, pack, NUMS[shape])
    ptxas(text, "sm_100a")
    n_in = sum(nregs + span(shape, num, pack) for num, _, nregs, _ in plan)
    rng = np.random.default_rng(len(shape) * 2 + pack)
    words = rng.integers(0, 2**32, size=(n_in, 128), dtype=np.uint32)
    want, check = model(shape, pack, plan, words)
    got = np.zeros(want.shape, dtype=np.uint32)
    sim.launch(text, words.reshape(-1), got.reshape(-1), block=(128, 1, 1), grid=(1, 1, 1))
    mask = check
    bad = np.argwhere((got & mask) != (want & mask))
    assert not len(bad), f"first mismatch at output word {bad[0]}: got {got[tuple(bad[0])]:#x}, want {want[tuple(bad[0])]:#x}"

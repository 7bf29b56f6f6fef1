"""Emulator semantics of the video instructions (jaxptx/sim/_sem_video.py)
against a per-element Python reference written from the PTX ISA's
pseudocode (9.7.18 "Video Instructions": partSelectSignExtend, optSaturate,
optSecOp, optMerge; extractAndSignExt_2/_4 and the SIMD merge/accumulate),
plus a few values worked by hand."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

from jaxptx import sim

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
M32 = 0xFFFF_FFFF


def run(line: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Run ``line`` (operands ``%d``, ``%x0``, ``%x1``, ``%x2``, selectors
    allowed) once per element, one thread each."""
    n = len(a)
    lines = [".visible .entry k(.param .u64 out, .param .u64 pa, .param .u64 pb, .param .u64 pc)", "{",
             "    .reg .b64 %rd<12>; .reg .b32 %t<4>; .reg .b32 %d; .reg .b32 %x<3>;",
             "    mov.u32 %t0, %tid.x; mov.u32 %t1, %ctaid.x; mov.u32 %t2, %ntid.x;",
             "    mad.lo.u32 %t0, %t1, %t2, %t0; mul.wide.u32 %rd9, %t0, 4;"]
    for i, p in enumerate(("pa", "pb", "pc")):
        lines += [f"    ld.param.u64 %rd{i}, [{p}]; add.s64 %rd{i}, %rd{i}, %rd9;",
                  f"    ld.global.b32 %x{i}, [%rd{i}];"]
    lines += ["    mov.b32 %d, 0xdeadbeef;", f"    {line};", "    ld.param.u64 %rd5, [out];",
              "    add.s64 %rd5, %rd5, %rd9; st.global.b32 [%rd5], %d;", "    ret;", "}"]
    out = np.zeros(n, np.uint32)
    sim.launch(HEAD + "\n".join(lines), out, a, b, c, grid=(n // 64, 1, 1), block=(64, 1, 1))
    return out


def inputs(n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    edge = np.array([0, 1, M32, 0x8000_0000, 0x7FFF_FFFF, 0x0000_8000, 0x0000_7FFF, 0x80, 0x7F, 0xFF,
                     0x8080_8080, 0x7F7F_7F7F, 0xFFFF_0000, 0x0000_FFFF, 33, 32], np.uint32)
    out = []
    for k in range(3):
        r = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        r[:len(edge)] = np.roll(edge, 5 * k)
        small = rng.integers(0, 40, n // 8).astype(np.uint32)   # shift amounts near 32
        r[len(edge):len(edge) + len(small)] = small
        out.append(r)
    return out[0], out[1], out[2]


# --- the reference ------------------------------------------------------------------------

def ext(x: int, width: int, signed: bool) -> int:
    x &= (1 << width) - 1
    return x - (1 << width) if signed and x >> (width - 1) else x


def part(x: int, sel: str | None, signed: bool) -> int:
    """partSelectSignExtend."""
    if sel is None:
        return ext(x, 32, signed)
    w = 8 if sel[0] == "b" else 16
    return ext(x >> (w * int(sel[1])), w, signed)


def clamp(v: int, width: int, signed: bool) -> int:
    lo, hi = (-(1 << width - 1), (1 << width - 1) - 1) if signed else (0, (1 << width) - 1)
    return min(max(v, lo), hi)


def scalar_tail(tmp: int, c: int, *, dsigned: bool, sat: bool, dsel: str | None, secop: str | None) -> int:
    """optSaturate, then optSecOp or optMerge; the low 32 bits."""
    width = 32 if dsel is None else 8 if dsel[0] == "b" else 16
    if sat:
        tmp = clamp(tmp, width, dsigned)
    if secop:
        cc = ext(c, 32, dsigned)
        tmp = {"add": tmp + cc, "min": min(tmp, cc), "max": max(tmp, cc)}[secop]
    elif dsel:
        sh = width * int(dsel[1])
        field = ((1 << width) - 1) << sh
        tmp = ((tmp << sh) & field) | (c & ~field)
    return tmp & M32


SCALAR = {"vadd": lambda x, y: x + y, "vsub": lambda x, y: x - y, "vabsdiff": lambda x, y: abs(x - y),
          "vmin": min, "vmax": max}
CMP = {"eq": int.__eq__, "ne": int.__ne__, "lt": int.__lt__, "le": int.__le__, "gt": int.__gt__,
       "ge": int.__ge__}
_OPERAND = re.compile(r"%(d|x\d)(?:\.([bh]\d+))?")


def reference(line: str, a: int, b: int, c: int) -> int:
    """What the PTX ISA pseudocode gives for ``line`` on one thread."""
    name, rest = line.split(None, 1)
    parts = name.split(".")
    op, mods = parts[0], parts[1:]
    sels = [m.group(2) for m in _OPERAND.finditer(rest)]
    dsel, asel, bsel = sels[0], sels[1], sels[2]
    sat = "sat" in mods
    secop = next((m for m in mods if m in ("add", "min", "max")), None)
    if op[-1] in "24":
        return simd(op, mods, a, b, c, dsel, asel, bsel)
    if op == "vset":
        ta, tb = part(a, asel, mods[0] == "s32"), part(b, bsel, mods[1] == "s32")
        return scalar_tail(int(CMP[mods[2]](ta, tb)), c, dsigned=False, sat=False, dsel=dsel, secop=secop)
    dsigned, asigned, bsigned = (m == "s32" for m in mods[:3])
    ta, tb = part(a, asel, asigned), part(b, bsel, bsigned)
    if op == "vmad":
        signed = asigned or bsigned
        tmp = ta * tb + ext(c, 32, signed) + ("po" in mods)
        tmp >>= 7 if "shr7" in mods else 15 if "shr15" in mods else 0
        if sat:
            tmp = clamp(tmp, 32, signed)
        return tmp & M32
    if op in ("vshl", "vshr"):
        tb = part(b, bsel, False)
        tb = min(tb, 32) if "clamp" in mods else tb & 31
        tmp = ext(ta << tb, 34, True) if op == "vshl" else ta >> tb
    else:
        tmp = SCALAR[op](ta, tb)
    return scalar_tail(tmp, c, dsigned=dsigned, sat=sat, dsel=dsel, secop=secop)


def simd(op: str, mods: list[str], a: int, b: int, c: int, dsel, asel, bsel) -> int:
    """extractAndSignExt_2/_4, the lane op, saturation, merge or accumulate."""
    n = int(op[-1])
    w = 32 // n
    pair = a | b << 32
    types = mods[:2] if op.startswith("vset") else mods[1:3]
    asel = asel or ("h10" if n == 2 else "b3210")
    bsel = bsel or ("h32" if n == 2 else "b7654")
    va = [ext(pair >> w * int(asel[-1 - i]), w, types[0] == "s32") for i in range(n)]
    vb = [ext(pair >> w * int(bsel[-1 - i]), w, types[1] == "s32") for i in range(n)]
    t = []
    for x, y in zip(va, vb):
        if op.startswith("vset"):
            t.append(int(CMP[mods[2]](x, y)))
            continue
        s = x + y
        v = {"vadd": s, "vsub": x - y, "vabsdiff": abs(x - y), "vmin": min(x, y), "vmax": max(x, y),
             "vavrg": (s + 1) >> 1 if s >= 0 else s >> 1}[op[:-1]]
        t.append(clamp(v, w, mods[0] == "s32") if "sat" in mods else v)
    lanes = [i for i in range(n) if dsel is None or str(i) in dsel[1:]]
    if "add" in mods:
        return (c + sum(t[i] for i in lanes)) & M32
    d = 0
    for i in range(n):
        d |= ((t[i] if i in lanes else c >> w * i) & ((1 << w) - 1)) << w * i
    return d


# --- the cases --------------------------------------------------------------------------------

LINES = [
    "vadd.s32.u32.s32.sat %d, %x0.b0, %x1.h1",
    "vadd.u32.u32.u32 %d, %x0, %x1",
    "vadd.u32.u32.u32.sat %d, %x0, %x1",
    "vadd.s32.s32.s32.sat %d, %x0, %x1",
    "vadd.s32.u32.s32 %d, %x0, %x1, %x2",
    "vsub.s32.s32.u32.sat %d, %x0.h1, %x1.h0",
    "vsub.u32.u32.u32.sat %d.b3, %x0.b1, %x1.b2, %x2",
    "vabsdiff.s32.s32.s32.sat %d.h0, %x0.b0, %x1.b2, %x2",
    "vabsdiff.u32.s32.s32 %d, %x0, %x1",
    "vmin.s32.s32.s32.sat.add %d, %x0, %x1, %x2",
    "vmin.s32.u32.s32.min %d, %x0, %x1.h1, %x2",
    "vmax.u32.s32.u32.max %d, %x0.b3, %x1, %x2",
    "vadd.s32.s32.s32.sat %d.b1, %x0.h0, %x1.h1, %x2",
    "vadd.u32.u32.u32.add %d, %x0, %x1, %x2",
    "vshl.u32.u32.u32.clamp %d, %x0, %x1.b0",
    "vshl.u32.u32.u32.sat.clamp %d, %x0, %x1.b0",
    "vshl.s32.s32.u32.sat.wrap %d.h1, %x0.b1, %x1, %x2",
    "vshr.s32.s32.u32.clamp.add %d, %x0, %x1.b0, %x2",
    "vshr.u32.u32.u32.wrap %d, %x0, %x1",
    "vshr.u32.s32.u32.sat.clamp %d.b2, %x0.h1, %x1.b0, %x2",
    "vmad.u32.u32.u32 %d, %x0, %x1, %x2",
    "vmad.u32.u32.u32.sat %d, %x0, %x1, %x2",
    "vmad.s32.s32.u32.sat %d, %x0, %x1.h0, %x2",
    "vmad.u32.u32.u32.po.sat.shr7 %d, %x0.h0, %x1.h1, %x2",
    "vmad.s32.s32.s32.shr15 %d, %x0, %x1, %x2",
    "vmad.s32.u32.s32.sat.shr15 %d, %x0.b2, %x1, %x2",
    "vset.s32.u32.lt %d, %x0, %x1",
    "vset.u32.s32.ge.add %d, %x0.b1, %x1.h0, %x2",
    "vset.s32.s32.ne %d.b2, %x0.b0, %x1.b1, %x2",
    "vset.u32.u32.eq.max %d, %x0.h1, %x1.h1, %x2",
    "vadd2.s32.s32.u32.sat %d, %x0, %x1, %x2",
    "vadd2.u32.u32.u32 %d, %x0, %x1, %x2",
    "vsub2.s32.s32.s32.sat %d.h0, %x0.h10, %x1.h32, %x2",
    "vmin2.s32.u32.u32.add %d.h10, %x0.h00, %x1.h22, %x2",
    "vmax2.s32.s32.s32 %d.h1, %x0.h31, %x1.h02, %x2",
    "vavrg2.s32.s32.s32 %d, %x0, %x1, %x2",
    "vavrg2.u32.u32.u32.sat %d.h1, %x0.h21, %x1.h03, %x2",
    "vabsdiff2.s32.s32.s32.add %d, %x0, %x1, %x2",
    "vabsdiff4.u32.u32.u32.add %d, %x0, %x1, %x2",
    "vadd4.s32.s32.u32.sat %d.b20, %x0.b7654, %x1.b0123, %x2",
    "vsub4.u32.u32.u32.sat %d, %x0, %x1, %x2",
    "vmax4.u32.s32.s32 %d.b31, %x0.b7777, %x1, %x2",
    "vmin4.s32.s32.s32.add %d.b321, %x0, %x1, %x2",
    "vavrg4.s32.s32.s32.sat %d, %x0.b1357, %x1.b0246, %x2",
    "vavrg4.u32.u32.u32 %d, %x0, %x1, %x2",
    "vset2.s32.u32.lt %d, %x0, %x1, %x2",
    "vset2.u32.u32.ne.add %d.h1, %x0.h23, %x1, %x2",
    "vset4.u32.u32.ne.add %d.b31, %x0, %x1, %x2",
    "vset4.s32.s32.gt %d.b210, %x0.b4567, %x1.b3210, %x2",
]


@pytest.mark.parametrize("line", LINES)
def test_against_the_reference(line: str) -> None:
    a, b, c = inputs(seed=zlib.crc32(line.encode()))
    got = run(line, a, b, c)
    want = np.array([reference(line, int(x), int(y), int(z)) for x, y, z in zip(a, b, c)], np.uint32)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(hex(a[i]), hex(b[i]), hex(c[i]), hex(got[i]), hex(want[i])) for i in bad[:4]]


@pytest.mark.parametrize("line, a, b, c, want", [
    # vshr_clamp from the ZLUDA golden vectors (checked on a GPU): 16, then 32 clamped to 32.
    ("vshr.u32.u32.u32.clamp.add %d, %x0, %x1, %x2", 2385356176, 16, 613064560, 613100957),
    ("vshr.u32.u32.u32.clamp.add %d, %x0, %x1, %x2", 2385356176, 32, 613064560, 613064560),
    # byte 0 (0x80 = 128 unsigned) + high half (0xFFFF = -1 signed)
    ("vadd.s32.u32.s32.sat %d, %x0.b0, %x1.h1", 0x80, 0xFFFF_0000, 0, 127),
    # saturated into a signed byte, merged into byte 2 of c
    ("vsub.s32.s32.s32.sat %d.b2, %x0, %x1, %x2", 5, 300, 0x1122_3344, 0x1180_3344),
    # |3 - 250| = 247 per byte lane summed into c (a SAD step): 4 * 247 + 1
    ("vabsdiff4.u32.u32.u32.add %d, %x0, %x1, %x2", 0x0303_0303, 0xFAFA_FAFA, 1, 989),
    # rounded averages of (3, 4) = 4 and (-3, -4) = -4 per half (away from zero)
    ("vavrg2.s32.s32.s32 %d, %x0, %x1, %x2", 0xFFFD_0003, 0xFFFC_0004, 0, 0xFFFC_0004),
    # 0x10000 * 0x10000 + 0 saturates to U32_MAX; .shr15 first gives 0x20000
    ("vmad.u32.u32.u32.sat %d, %x0, %x1, %x2", 0x10000, 0x10000, 0, M32),
    ("vmad.u32.u32.u32.sat.shr15 %d, %x0, %x1, %x2", 0x10000, 0x10000, 0, 0x20000),
    # lane masks: compare lanes 1 and 3 only, others keep c's bytes
    ("vset4.u32.u32.lt %d.b31, %x0, %x1, %x2", 0x0102_0304, 0x0201_0403, 0xAAAA_AAAA, 0x01AA_01AA),
])
def test_worked_values(line: str, a: int, b: int, c: int, want: int) -> None:
    arr = [np.full(64, v, np.uint32) for v in (a, b, c)]
    assert int(run(line, *arr)[0]) == want
    assert reference(line, a, b, c) == want


def test_selectors_follow_block_scoping() -> None:
    # %r1.b1 inside the block names the block's own %r1, not the outer one.
    text = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  mov.u32 %r2, 4;
  {
    .reg .b32 %r<3>;
    mov.u32 %r1, 0x300;
    mov.u32 %r2, 5;
    vadd.u32.u32.u32 %r1, %r1.b1, %r2.b0;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r1;
  }
  ret;
}
"""
    out = np.zeros(1, np.uint32)
    sim.launch(text, out, grid=(1, 1, 1), block=(1, 1, 1))
    assert out[0] == 3 + 5

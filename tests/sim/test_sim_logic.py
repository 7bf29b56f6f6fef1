"""Emulator semantics of the logic family (jaxptx/sim/_sem_logic.py,
_sem_compare.py): logic and shifts, bit manipulation, comparison and
selection, each against a Python reference written from the PTX ISA's
definitions."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from elementwise import ew


def rand(bits: int, n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    edge = [0, 1, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, 0x80, 0x7F]
    v = rng.integers(0, 1 << 62, n, dtype=np.uint64) * np.uint64(4) + rng.integers(0, 4, n, dtype=np.uint64)
    return np.concatenate([np.array(edge, np.uint64), v]).astype(f"u{bits // 8}")


def check(ins: str, out_dtype, fn, *args: np.ndarray, **kw) -> None:
    got = ew(ins, out_dtype, *args, **kw)
    want = np.array([fn(*[int(a[i]) if a.dtype.kind in "iu" else float(a[i]) for a in args])
                     for i in range(len(args[0]))], dtype=np.uint64).astype(out_dtype)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, [(ins, [a[i] for a in args], int(got[i]), int(want[i])) for i in bad[:5]]


def signed(v: int, w: int) -> int:
    v &= (1 << w) - 1
    return v - (1 << w) if v >> (w - 1) else v


# --- logic and shifts ---------------------------------------------------------------------------

@pytest.mark.parametrize("w", [16, 32, 64])
def test_bitwise_logic(w: int) -> None:
    a, b = rand(w, seed=1), rand(w, seed=2)
    m = (1 << w) - 1
    check(f"and.b{w}", a.dtype, lambda x, y: x & y, a, b)
    check(f"or.b{w}", a.dtype, lambda x, y: x | y, a, b)
    check(f"xor.b{w}", a.dtype, lambda x, y: x ^ y, a, b)
    check(f"not.b{w}", a.dtype, lambda x: ~x & m, a)
    check(f"cnot.b{w}", a.dtype, lambda x: int(x == 0), a)


def test_predicate_logic_with_negated_operands() -> None:
    a = np.array([0, 0, 1, 1], np.uint32)
    b = np.array([0, 1, 0, 1], np.uint32)
    setup = "    setp.ne.u32 %p1, %x0, 0; setp.ne.u32 %p2, %x1, 0;\n"
    out = "    selp.u32 %d, 1, 0, %p3;"
    for ins, fn in (("and.pred %p3, %p1, %p2;", lambda x, y: x & y),
                    ("or.pred %p3, %p1, !%p2;", lambda x, y: x | (1 - y)),
                    ("xor.pred %p3, !%p1, %p2;", lambda x, y: (1 - x) ^ y),
                    ("not.pred %p3, %p1;", lambda x, y: 1 - x)):
        got = ew("", np.uint32, a, b, body=setup + "    " + ins + "\n" + out)
        np.testing.assert_array_equal(got, [fn(int(x), int(y)) for x, y in zip(a, b)], err_msg=ins)


@pytest.mark.parametrize("t", ["b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"])
def test_shifts_clamp_large_amounts(t: str) -> None:
    w = int(t[1:])
    a = rand(w, seed=3)
    n = np.resize(np.array([0, 1, 5, w - 1, w, w + 1, 63, 64, 100, 0xFFFFFFFF], np.uint32), len(a))
    m = (1 << w) - 1
    if t[0] == "b":
        check(f"shl.{t}", a.dtype, lambda x, k: (x << k) & m if k < w else 0, a, n)
    if t[0] == "s":
        check(f"shr.{t}", a.dtype, lambda x, k: (signed(x, w) >> min(k, w - 1)) & m, a, n)
    else:
        check(f"shr.{t}", a.dtype, lambda x, k: x >> k if k < w else 0, a, n)


@pytest.mark.parametrize("ins", ["shf.l.clamp.b32", "shf.r.clamp.b32", "shf.l.wrap.b32", "shf.r.wrap.b32"])
def test_funnel_shift(ins: str) -> None:
    a, b = rand(32, seed=4), rand(32, seed=5)
    c = np.resize(np.array([0, 1, 7, 31, 32, 33, 40, 64, 0xFFFFFFFF], np.uint32), len(a))
    left, clamp = ".l." in ins, "clamp" in ins

    def ref(x: int, y: int, z: int) -> int:
        n = min(z, 32) if clamp else z & 31
        pair = (y << 32) | x
        return ((pair << n) >> 32) & 0xFFFFFFFF if left else (pair >> n) & 0xFFFFFFFF
    check(ins, np.uint32, ref, a, b, c)


def test_lop3_truth_tables() -> None:
    a, b, c = rand(32, seed=6), rand(32, seed=7), rand(32, seed=8)
    for lut in (0x00, 0xFF, 0xF0, 0xCC, 0xAA, 0x96, 0xE8, 0x80, 0xFE, 0x1B, 0x6A):
        def ref(x: int, y: int, z: int, lut: int = lut) -> int:
            return sum(((lut >> ((x >> i & 1) << 2 | (y >> i & 1) << 1 | (z >> i & 1))) & 1) << i
                       for i in range(32))
        check("lop3.b32", np.uint32, ref, a, b, c, tail=f", {lut:#x}")
    # the predicate form: p = (d != 0) BoolOp q
    x = np.array([0, 1, 0, 5], np.uint32)
    q = np.array([0, 0, 1, 1], np.uint32)
    for op, fn in (("or", lambda d, v: int(d != 0 or v)), ("and", lambda d, v: int(d != 0 and v))):
        body = (f"    setp.ne.u32 %p2, %x1, 0;\n    lop3.{op}.b32 %t3|%p1, %x0, %x0, %x0, 0xF0, %p2;\n"
                "    selp.u32 %d, 1, 0, %p1;")
        np.testing.assert_array_equal(ew("", np.uint32, x, q, body=body),
                                      [fn(int(d), int(v)) for d, v in zip(x, q)], err_msg=op)


# --- bit manipulation ------------------------------------------------------------------------------

@pytest.mark.parametrize("w", [32, 64])
def test_popc_clz_brev_bfind(w: int) -> None:
    a = rand(w, seed=9)
    check(f"popc.b{w}", np.uint32, lambda x: bin(x).count("1"), a)
    check(f"clz.b{w}", np.uint32, lambda x: w - x.bit_length(), a)
    check(f"brev.b{w}", a.dtype, lambda x: int(f"{x:0{w}b}"[::-1], 2), a)
    check(f"bfind.u{w}", np.uint32, lambda x: x.bit_length() - 1 if x else 0xFFFFFFFF, a)
    check(f"bfind.shiftamt.u{w}", np.uint32, lambda x: w - x.bit_length() if x else 0xFFFFFFFF, a)

    def sfind(x: int) -> int:
        v = signed(x, w)
        v = ~v if v < 0 else v
        return v.bit_length() - 1 if v else 0xFFFFFFFF
    check(f"bfind.s{w}", np.uint32, sfind, a.view(f"i{w // 8}"))
    check(f"bfind.shiftamt.s{w}", np.uint32, lambda x: 0xFFFFFFFF if sfind(x) == 0xFFFFFFFF
          else w - 1 - sfind(x), a.view(f"i{w // 8}"))


def fields(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 80, n).astype(np.uint32)
    ln = rng.integers(0, 80, n).astype(np.uint32)
    pos[:6] = [0, 31, 63, 255, 256 + 3, 0xFFFFFF05]
    ln[:6] = [0, 1, 2, 8, 4, 0x105]
    return pos, ln


@pytest.mark.parametrize("t", ["u32", "s32", "u64", "s64"])
def test_bfe(t: str) -> None:
    w = int(t[1:])
    a = rand(w, seed=10)
    pos, ln = fields(len(a), 11)

    def ref(x: int, b: int, c: int) -> int:      # PTX ISA, bfe pseudo-code
        msb, p, n = w - 1, b & 0xFF, c & 0xFF
        sbit = 0 if t[0] == "u" or n == 0 else (x >> min(p + n - 1, msb)) & 1
        return sum(((x >> (p + i)) & 1 if i < n and p + i <= msb else sbit) << i for i in range(w))
    check(f"bfe.{t}", a.dtype, ref, a, pos, ln)


@pytest.mark.parametrize("w", [32, 64])
def test_bfi(w: int) -> None:
    a, b = rand(w, seed=12), rand(w, seed=13)
    pos, ln = fields(len(a), 14)

    def ref(x: int, y: int, c: int, d: int) -> int:     # PTX ISA, bfi pseudo-code
        p, n = c & 0xFF, d & 0xFF
        f = y
        i = 0
        while i < n and p + i <= w - 1:
            f = (f & ~(1 << (p + i))) | (((x >> i) & 1) << (p + i))
            i += 1
        return f
    check(f"bfi.b{w}", a.dtype, ref, a, b, pos, ln)


def test_fns() -> None:
    rng = np.random.default_rng(15)
    mask = np.concatenate([np.array([0xAAAAAAAA, 0, 0xFFFFFFFF, 1, 0x80000000], np.uint32),
                           rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)])
    base = np.resize(np.array([0, 1, 2, 3, 17, 31, 32, 40], np.uint32), len(mask))
    off = np.resize(np.array([0, 1, 2, 5, -1, -2, -7, 33, -33, 16], np.int32), len(mask))

    def ref(m: int, b: int, o: int) -> int:     # PTX ISA, fns pseudo-code
        if o == 0:
            return b if b < 32 and (m >> b) & 1 else 0xFFFFFFFF
        pos, count, inc = b, abs(o) - 1, 1 if o > 0 else -1
        while 0 <= pos < 32:
            if (m >> pos) & 1:
                if count == 0:
                    return pos
                count -= 1
            pos += inc
        return 0xFFFFFFFF
    check("fns.b32", np.uint32, ref, mask, base, off)


@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_bmsk_szext(mode: str) -> None:
    rng = np.random.default_rng(16)
    a = rng.integers(0, 70, 300).astype(np.uint32)
    b = rng.integers(0, 70, 300).astype(np.uint32)
    a[:4], b[:4] = [0, 32, 31, 0xFFFFFFFF], [32, 0, 5, 1]
    lim = (lambda v: min(v, 32)) if mode == "clamp" else (lambda v: v & 31)
    check(f"bmsk.{mode}.b32", np.uint32,
          lambda x, y: ((1 << min(lim(x) + lim(y), 32)) - 1) & ~((1 << lim(x)) - 1) & 0xFFFFFFFF, a, b)
    v = rand(32, seed=17)
    n = np.resize(b, len(v))
    check(f"szext.{mode}.u32", np.uint32, lambda x, y: x & ((1 << lim(y)) - 1), v, n)
    check(f"szext.{mode}.s32", np.uint32,
          lambda x, y: signed(x, lim(y)) & 0xFFFFFFFF if lim(y) else 0, v.view(np.int32), n)


@pytest.mark.parametrize("mode", [None, "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
def test_prmt(mode: str | None) -> None:
    a, b = rand(32, seed=18), rand(32, seed=19)
    c = rand(32, seed=20)
    pick = {"f4e": lambda s, k: (s + k) % 8, "b4e": lambda s, k: (s - k) % 8, "rc8": lambda s, k: s,
            "ecl": lambda s, k: max(k, s), "ecr": lambda s, k: min(k, s),
            "rc16": lambda s, k: 2 * (s & 1) + (k & 1)}

    def ref(x: int, y: int, z: int) -> int:
        src = [(x >> (8 * i)) & 0xFF for i in range(4)] + [(y >> (8 * i)) & 0xFF for i in range(4)]
        out = 0
        for k in range(4):
            if mode is None:
                sel = (z >> (4 * k)) & 0xF
                byte = src[sel & 7]
                if sel & 8:
                    byte = 0xFF if byte & 0x80 else 0
            else:
                byte = src[pick[mode](z & 3, k)]
            out |= byte << (8 * k)
        return out
    check("prmt.b32" + (f".{mode}" if mode else ""), np.uint32, ref, a, b, c)


# --- comparison and selection -------------------------------------------------------------------

INT_CMP = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
           "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}
UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def setp_body(ins: str) -> str:
    return f"    {ins} %p1|%p2, %x0, %x1;\n    selp.u32 %t3, 2, 0, %p2;\n    selp.u32 %d, 1, 0, %p1;\n" \
           "    or.b32 %d, %d, %t3;"


@pytest.mark.parametrize("t", ["u16", "s16", "u32", "s32", "b32", "u64", "s64"])
def test_setp_integers(t: str) -> None:
    w = int(t[1:])
    a = rand(w, seed=21)
    b = np.concatenate([a[:50], rand(w, seed=22)[50:]])[: len(a)]
    if t[0] == "s":
        a, b = a.view(f"i{w // 8}"), b.view(f"i{w // 8}")
    cmps = ["eq", "ne"] if t[0] == "b" else list(INT_CMP) + (list(UNSIGNED) if t[0] == "u" else [])
    for cmp in cmps:
        fn = INT_CMP[UNSIGNED.get(cmp, cmp)]
        ins = f"setp.{cmp}.{t}"
        got = ew("", np.uint32, a, b, body=setp_body(ins))
        want = [(1 if fn(int(x), int(y)) else 2) for x, y in zip(a, b)]
        np.testing.assert_array_equal(got, want, err_msg=ins)


FLT_CMP = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y and not (math.isnan(x) or math.isnan(y)),
           "lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
           "ge": lambda x, y: x >= y, "num": lambda x, y: not (math.isnan(x) or math.isnan(y)),
           "nan": lambda x, y: math.isnan(x) or math.isnan(y)}
for _k in ("eq", "ne", "lt", "le", "gt", "ge"):
    FLT_CMP[_k + "u"] = (lambda f: lambda x, y: math.isnan(x) or math.isnan(y) or f(x, y))(FLT_CMP[_k])


def float_pairs(dt) -> tuple[np.ndarray, np.ndarray]:
    v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 2.5], np.float64).astype(dt)
    g = np.array(np.meshgrid(np.arange(len(v)), np.arange(len(v)))).reshape(2, -1)
    return v[g[0]], v[g[1]]


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64), ("f16", np.float16)])
def test_setp_floats_ordered_and_unordered(t: str, dt) -> None:
    a, b = float_pairs(dt)
    for cmp, fn in FLT_CMP.items():
        got = ew("", np.uint32, a, b, body=setp_body(f"setp.{cmp}.{t}"))
        want = [(1 if fn(float(x), float(y)) else 2) for x, y in zip(a, b)]
        np.testing.assert_array_equal(got, want, err_msg=f"setp.{cmp}.{t}")
    if t == "f32":     # .ftz: the subnormals 1e-40 compare as zeros
        got = ew("", np.uint32, a, b, body=setp_body("setp.eq.ftz.f32"))
        flush = lambda v: 0.0 if abs(v) < 1.2e-38 else v  # noqa: E731
        want = [(1 if flush(float(x)) == flush(float(y)) else 2) for x, y in zip(a, b)]
        np.testing.assert_array_equal(got, want)


def test_setp_boolop_and_packed_halves() -> None:
    a = np.array([1, 5, 1, 5], np.int32)
    b = np.array([3, 3, 3, 3], np.int32)
    c = np.array([0, 0, 1, 1], np.int32)
    for op, fn in (("and", lambda r, v: (r and v, (not r) and v)), ("or", lambda r, v: (r or v, (not r) or v)),
                   ("xor", lambda r, v: (r != v, (not r) != v))):
        for neg in ("", "!"):
            body = (f"    setp.ne.s32 %p3, %x2, 0;\n    setp.lt.{op}.s32 %p1|%p2, %x0, %x1, {neg}%p3;\n"
                    "    selp.u32 %t3, 2, 0, %p2;\n    selp.u32 %d, 1, 0, %p1;\n    or.b32 %d, %d, %t3;")
            got = ew("", np.uint32, a, b, c, body=body)
            want = []
            for x, y, z in zip(a, b, c):
                v = bool(z) != (neg == "!")
                p, q = fn(x < y, v)
                want.append(int(p) | 2 * int(q))
            np.testing.assert_array_equal(got, want, err_msg=op + neg)
    # f16x2: p is the low half's comparison, q the high half's
    h1 = np.array([[1, 5], [4, 2], [np.nan, 1]], np.float16).view(np.uint32).reshape(3)
    h2 = np.array([[2, 2], [2, 3], [0, 0]], np.float16).view(np.uint32).reshape(3)
    got = ew("", np.uint32, h1, h2, body=setp_body("setp.lt.f16x2"))
    np.testing.assert_array_equal(got, [1, 2, 0])
    bf = ml_dtypes.bfloat16
    g1 = np.array([[1, 5], [4, 2], [np.nan, 1]], bf).view(np.uint32).reshape(3)
    g2 = np.array([[2, 2], [2, 3], [0, 0]], bf).view(np.uint32).reshape(3)
    got = ew("", np.uint32, g1, g2, body=setp_body("setp.gtu.bf16x2"))
    np.testing.assert_array_equal(got, [2, 1, 3])


def test_set_values() -> None:
    a = np.array([1.0, 2.0, np.nan], np.float32)
    b = np.array([2.0, 1.0, 0.0], np.float32)
    np.testing.assert_array_equal(ew("set.lt.u32.f32", np.uint32, a, b), [0xFFFFFFFF, 0, 0])
    np.testing.assert_array_equal(ew("set.ltu.s32.f32", np.int32, a, b), [-1, 0, -1])
    np.testing.assert_array_equal(ew("set.lt.f32.f32", np.float32, a, b), [1.0, 0, 0])
    np.testing.assert_array_equal(ew("set.ge.f32.s32", np.float32, np.array([1, -5], np.int32),
                                     np.array([0, 0], np.int32)), [1.0, 0.0])
    np.testing.assert_array_equal(ew("set.hi.u32.u64", np.uint32, np.array([2**63, 1], np.uint64),
                                     np.array([1, 2], np.uint64)), [0xFFFFFFFF, 0])
    h = ew("set.gt.f16.f16", np.float16, np.array([3, 1], np.float16), np.array([2, 2], np.float16))
    np.testing.assert_array_equal(h, [1.0, 0.0])
    h = ew("set.gt.u16.f16", np.uint16, np.array([3, 1], np.float16), np.array([2, 2], np.float16))
    np.testing.assert_array_equal(h, [0xFFFF, 0])
    x = np.array([[3, 1]], np.float16).view(np.uint32).reshape(1)
    y = np.array([[2, 2]], np.float16).view(np.uint32).reshape(1)
    np.testing.assert_array_equal(ew("set.gt.u32.f16x2", np.uint32, x, y), [0x0000FFFF])
    np.testing.assert_array_equal(ew("set.gt.f16x2.f16x2", np.uint32, x, y).view(np.float16), [1.0, 0.0])
    body = "    setp.ne.u32 %p3, %x2, 0;\n    set.gt.and.u32.s32 %d, %x0, %x1, !%p3;"
    got = ew("", np.uint32, np.array([5, 5], np.int32), np.array([1, 1], np.int32),
             np.array([0, 1], np.uint32), body=body)
    np.testing.assert_array_equal(got, [0xFFFFFFFF, 0])


def test_selp_and_slct() -> None:
    a = np.array([1.5, 2.5, 3.5, 4.5, 5.5], np.float32)
    b = np.array([-1.0, -2.0, -3.0, -4.0, -5.0], np.float32)
    c = np.array([0, 1, 0, 1, 1], np.uint32)
    body = "    setp.ne.u32 %p1, %x2, 0;\n    selp.f32 %d, %x0, %x1, !%p1;"
    np.testing.assert_array_equal(ew("", np.float32, a, b, c, body=body), [1.5, -2.0, 3.5, -4.0, -5.0])
    np.testing.assert_array_equal(ew("selp.b64", np.uint64, np.array([7], np.uint64), np.array([9], np.uint64),
                                     tail=", 1"), [7])
    cs = np.array([0, -1, 5, -(2**31), 2**31 - 1], np.int32)
    np.testing.assert_array_equal(ew("slct.f32.s32", np.float32, a, b, cs), [1.5, -2.0, 3.5, -4.0, 5.5])
    cf = np.array([-0.0, np.nan, -1e-40, 1.0, -np.inf], np.float32)
    np.testing.assert_array_equal(ew("slct.f32.f32", np.float32, a, b, cf), [1.5, -2.0, -3.0, 4.5, -5.0])
    np.testing.assert_array_equal(ew("slct.ftz.u32.f32", np.uint32, np.arange(5, dtype=np.uint32),
                                     np.full(5, 9, np.uint32), cf), [0, 9, 2, 3, 9])

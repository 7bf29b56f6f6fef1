"""Emulator semantics of the warp-level matrix instructions: ``mma.sync``,
``ldmatrix``, ``stmatrix`` (and ``wgmma`` further down).

Each mma test runs real PTX through ``jaxptx.sim.launch``: every lane loads
its A, B and C registers from global memory, the warp runs the ``mma``, and
every lane stores its D registers. The host packs the matrices into lane
fragments with the row/column formulas of PTX ISA "Matrix Fragments for
mma.m*n*k*", transcribed here literally per shape (independently of the
emulator's generic layout code), and compares D with a numpy reference.

The kernels use only ``mov``/``add``/``ld``/``st``/``bar.sync`` besides the
instruction under test, so they do not depend on other families.
"""

from __future__ import annotations

import fractions
import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim import SimError

HEAD = ".version 8.7\n.target sm_90a\n.address_size 64\n"
GOLDEN = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "golden" / "zluda"
RNG = np.random.default_rng(1234)


# --- PTX kernels that move fragments between global memory and registers -------------------

def _lane_pointer(reg: str, param: str, nbytes: int) -> str:
    """``reg = param + tid * nbytes`` with mov/add (shift-and-add)."""
    lines = [f"ld.param.u64 {reg}, [{param}];", "cvt.u64.u32 %off, %tid.x;"]
    for bit in range(nbytes.bit_length()):
        if nbytes >> bit & 1:
            lines.append(f"add.u64 {reg}, {reg}, %off;")
        lines.append("add.u64 %off, %off, %off;")
    return "\n    ".join(lines)


def _loads(reg: str, ptr: str, count: int, ty: str, width: int) -> str:
    return "\n    ".join(f"ld.global{ty} {reg}{i}, [{ptr}+{i * width}];" for i in range(count))


def _vec(reg: str, count: int) -> str:
    return "{" + ", ".join(f"{reg}{i}" for i in range(count)) + "}"


def mma_ptx(opcode: str, na: int, nb: int, nc: int, nd: int, ab: str = ".b32",
            c: str = ".b32", d: str = ".b32") -> str:
    """A kernel (a, b, c, d pointers) that runs ``opcode`` with per-lane
    register fragments read from and written to global memory."""
    w = {".b32": 4, ".f32": 4, ".s32": 4, ".f64": 8, ".b64": 8}
    wa, wc, wd = w[ab], w[c], w[d]
    return HEAD + f""".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
    .reg .u64 %off, %a, %b, %c, %d;
    .reg {ab} a<{na}>, b<{nb}>;
    .reg {c} c<{nc}>;
    .reg {d} d<{nd}>;
    {_lane_pointer('%a', 'pa', na * wa)}
    {_lane_pointer('%b', 'pb', nb * wa)}
    {_lane_pointer('%c', 'pc', nc * wc)}
    {_lane_pointer('%d', 'pd', nd * wd)}
    {_loads('a', '%a', na, ab, wa)}
    {_loads('b', '%b', nb, ab, wa)}
    {_loads('c', '%c', nc, c, wc)}
    {opcode} {_vec('d', nd)}, {_vec('a', na)}, {_vec('b', nb)}, {_vec('c', nc)};
    {chr(10).join('    st.global' + d + f' [%d+{i * wd}], d{i};' for i in range(nd)).strip()}
    ret;
}}
"""


# --- PTX ISA fragment formulas, literally (groupID = lane >> 2, tig = lane % 4) --------------

def doc_a(shape: str, ty: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element a_i of ``lane`` (PTX ISA "Matrix Fragments")."""
    g, t = lane >> 2, lane % 4
    wide = ty in ("tf32", "f64")
    if shape == "m8n8k4" and ty == "f64":
        return lane >> 2, lane % 4
    if shape == "m16n8k4" and wide:
        return (g if i == 0 else g + 8), t
    if shape == "m16n8k8" and wide:
        return (g if i in (0, 2) else g + 8), (t if i < 2 else t + 4)
    if shape == "m16n8k16" and ty == "f64":
        return (g if i % 2 == 0 else g + 8), (i * 2 + t if i % 2 == 0 else i * 2 - 2 + t)
    if shape == "m16n8k8":                                  # f16 / bf16
        return (g if i < 2 else g + 8), t * 2 + (i & 1)
    if shape == "m16n8k16" and ty in ("f16", "bf16"):
        return (g if i < 2 or 4 <= i < 6 else g + 8), t * 2 + (i & 1) + (8 if i >= 4 else 0)
    if shape == "m16n8k16":                                 # 8-bit
        return (g if i < 4 else g + 8), t * 4 + (i & 3)
    if shape == "m16n8k32" and ty in ("s4", "u4"):
        return (g if i < 8 else g + 8), t * 8 + (i & 7)
    if shape == "m16n8k32":                                 # 8-bit
        return (g if i < 4 or 8 <= i < 12 else g + 8), t * 4 + (i & 3) + (16 if i >= 8 else 0)
    if shape == "m16n8k64":
        return (g if i < 8 or 16 <= i < 24 else g + 8), t * 8 + (i & 7) + (32 if i >= 16 else 0)
    if shape == "m8n8k16":
        return g, t * 4 + i
    if shape == "m8n8k32":
        return g, t * 8 + i
    if shape == "m8n8k128":
        return g, t * 32 + i
    if shape == "m16n8k128":
        return (g if i < 32 else g + 8), t * 32 + (i & 0x1F)
    if shape == "m16n8k256":
        return (g if i < 32 or 64 <= i < 96 else g + 8), t * 32 + (i & 0x1F) + (128 if i >= 64 else 0)
    raise AssertionError(shape)


def doc_b(shape: str, ty: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element b_i of ``lane``."""
    g, t = lane >> 2, lane % 4
    if shape == "m8n8k4" and ty == "f64":
        return lane % 4, lane >> 2
    if shape == "m16n8k4":
        return t, g
    if shape == "m16n8k8" and ty in ("tf32", "f64"):
        return (t if i == 0 else t + 4), g
    if shape == "m16n8k16" and ty == "f64":
        return t + i * 4, g
    if shape == "m16n8k8":
        return t * 2 + i, g
    if shape == "m16n8k16" and ty in ("f16", "bf16"):
        return t * 2 + (i & 1) + (8 if i >= 2 else 0), g
    if shape == "m16n8k16":
        return t * 4 + i, g
    if shape == "m16n8k32" and ty in ("s4", "u4"):
        return t * 8 + (i & 7), g
    if shape == "m16n8k32":
        return t * 4 + (i & 3) + (16 if i >= 4 else 0), g
    if shape == "m16n8k64":
        return t * 8 + (i & 7) + (32 if i >= 8 else 0), g
    if shape == "m8n8k16":
        return t * 4 + i, g
    if shape == "m8n8k32":
        return t * 8 + i, g
    if shape in ("m8n8k128", "m16n8k128"):
        return t * 32 + i, g
    if shape == "m16n8k256":
        return t * 32 + (i & 0x1F) + (128 if i >= 32 else 0), g
    raise AssertionError(shape)


def doc_c(shape: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element c_i / d_i of ``lane``."""
    g, t = lane >> 2, lane % 4
    if shape.startswith("m8n8"):
        return g, t * 2 + (i & 1)
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


# --- element encodings ---------------------------------------------------------------------

BITS = {"b1": 1, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "e4m3": 8, "e5m2": 8, "f16": 16, "bf16": 16,
        "tf32": 32, "f32": 32, "s32": 32, "f64": 64}


def to_raw(values: np.ndarray, ty: str) -> np.ndarray:
    """Element bits (uint64) of ``values`` as type ``ty``."""
    if ty == "f16":
        return values.astype(np.float16).view(np.uint16).astype(np.uint64)
    if ty == "bf16":
        return values.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint64)
    if ty in ("f32", "tf32"):
        return values.astype(np.float32).view(np.uint32).astype(np.uint64)
    if ty == "e4m3":
        return values.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.uint64)
    if ty == "e5m2":
        return values.astype(ml_dtypes.float8_e5m2).view(np.uint8).astype(np.uint64)
    if ty == "f64":
        return values.astype(np.float64).view(np.uint64)
    return (values.astype(np.int64) & ((1 << BITS[ty]) - 1)).astype(np.uint64)


def fragments(mats: np.ndarray, ty: str, where, count: int) -> np.ndarray:
    """Per-lane registers ``(warps * 32, regs)`` holding ``mats`` (one matrix
    per warp) laid out by ``where(lane, i) -> (row, col)``."""
    raw = to_raw(mats, ty)
    bits = BITS[ty]
    per = max(1, 32 // bits) if bits < 64 else 1
    regs = np.zeros((len(mats) * 32, -(-count // per)), dtype=np.uint64)
    for w in range(len(mats)):
        for lane in range(32):
            for i in range(count):
                r, c = where(lane, i)
                shift = (i % per) * bits if bits < 32 else 0
                regs[w * 32 + lane, i // per] |= raw[w, r, c] << np.uint64(shift)
    return regs.astype(np.uint64 if bits == 64 else np.uint32)


def unfragment(regs: np.ndarray, ty: str, shape: tuple[int, int], where, count: int) -> np.ndarray:
    """Matrices (one per warp) from per-lane D registers."""
    warps = len(regs) // 32
    out = np.zeros((warps,) + shape, dtype=np.float64 if ty[0] == "f" else np.int64)
    for w in range(warps):
        for lane in range(32):
            for i in range(count):
                r, c = where(lane, i)
                reg = regs[w * 32 + lane]
                if ty == "f16":
                    v = np.uint16((int(reg[i // 2]) >> (16 * (i % 2))) & 0xFFFF).view(np.float16)
                elif ty == "f32":
                    v = np.uint32(reg[i]).view(np.float32)
                elif ty == "f64":
                    v = np.uint64(reg[i]).view(np.float64)
                else:
                    v = np.uint32(reg[i]).view(np.int32)
                out[w, r, c] = v
    return out


# --- the test driver -----------------------------------------------------------------------

def run_mma(shape: str, atype: str, btype: str, ctype: str, dtype: str, A, B, C, *, extra: str = "",
            tail: str = "") -> np.ndarray:
    """Run one mma over ``len(A)`` warps; returns D as matrices (float64 / int64)."""
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    warps = len(A)
    na, nb, nc = m * k // 32, k * n // 32, m * n // 32
    opcode = f"mma.sync.aligned.{shape}.row.col{extra}.{dtype}.{atype}.{btype}.{ctype}{tail}"
    ra = fragments(A, atype, lambda l, i: doc_a(shape, atype, l, i), na)
    rb = fragments(B, btype, lambda l, i: doc_b(shape, btype, l, i), nb)
    rc = fragments(C, ctype, lambda l, i: doc_c(shape, l, i), nc)
    nd = nc if dtype != "f16" else nc // 2
    acc = {"f32": ".f32", "s32": ".s32", "f16": ".b32", "f64": ".f64"}
    ab = ".f64" if atype == "f64" else ".b32"
    text = mma_ptx(opcode, ra.shape[1], rb.shape[1], rc.shape[1], nd, ab, acc[ctype], acc[dtype])
    rd = np.zeros((warps * 32, nd), dtype=np.uint64 if dtype == "f64" else np.uint32)
    sim.launch(text, ra, rb, rc, rd, block=(32 * warps, 1, 1))
    return unfragment(rd, dtype, (m, n), lambda l, i: doc_c(shape, l, i), m * n // 32)


def small_ints(shape, lo=-6, hi=7) -> np.ndarray:
    return RNG.integers(lo, hi, size=shape).astype(np.float64)


FLOAT_CASES = [
    ("m16n8k8", "f16", "f32"), ("m16n8k16", "f16", "f32"), ("m16n8k8", "f16", "f16"),
    ("m16n8k16", "f16", "f16"), ("m16n8k8", "bf16", "f32"), ("m16n8k16", "bf16", "f32"),
    ("m16n8k4", "tf32", "f32"), ("m16n8k8", "tf32", "f32"),
    ("m16n8k16", "e4m3", "f32"), ("m16n8k32", "e4m3", "f32"), ("m16n8k16", "e5m2", "f32"),
    ("m16n8k32", "e5m2", "f16"), ("m16n8k16", "e4m3", "f16"),
]


@pytest.mark.parametrize("shape,ab,acc", FLOAT_CASES)
def test_mma_float_layouts_exact(shape: str, ab: str, acc: str) -> None:
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    warps = 2
    A, B, C = small_ints((warps, m, k)), small_ints((warps, k, n)), small_ints((warps, m, n), -50, 50)
    D = run_mma(shape, ab, ab, acc, acc, A, B, C)
    np.testing.assert_array_equal(D, A @ B + C)     # small integers: every sum is exact


def test_mma_mixed_fp8_types() -> None:
    A, B, C = small_ints((1, 16, 32)), small_ints((1, 32, 8)), small_ints((1, 16, 8))
    D = run_mma("m16n8k32", "e4m3", "e5m2", "f32", "f32", A, B, C)
    np.testing.assert_array_equal(D, A @ B + C)


def test_mma_f16_rounds_once_to_f32() -> None:
    A = RNG.standard_normal((1, 16, 16)).astype(np.float16).astype(np.float64)
    B = RNG.standard_normal((1, 16, 8)).astype(np.float16).astype(np.float64)
    C = RNG.standard_normal((1, 16, 8)).astype(np.float32).astype(np.float64)
    D = run_mma("m16n8k16", "f16", "f16", "f32", "f32", A, B, C)
    np.testing.assert_array_equal(D, (A @ B + C).astype(np.float32))


def test_mma_tf32_ignores_low_mantissa_bits() -> None:
    A = small_ints((1, 16, 8))
    B = small_ints((1, 8, 8))
    noisy = (A.astype(np.float32).view(np.uint32) | np.uint32(0x1FFF)).view(np.float32)
    D = run_mma("m16n8k8", "tf32", "tf32", "f32", "f32", noisy.astype(np.float64), B, np.zeros((1, 16, 8)))
    np.testing.assert_array_equal(D, A @ B)


def test_mma_f32_nan_and_inf() -> None:
    A, B, C = small_ints((1, 16, 16)), small_ints((1, 16, 8)), np.zeros((1, 16, 8))
    A[0, 0, 0], B[0, 0, 0] = np.inf, 0.0          # inf * 0 -> NaN in D[0, 0]
    A[0, 1, 0], B[0, 0, 1] = np.inf, 1.0          # +inf in D[1, 1]
    C[0, 2, 2] = -np.inf
    D = run_mma("m16n8k16", "f16", "f16", "f32", "f32", A, B, C)
    assert np.isnan(D[0, 0, 0]) and D[0, 1, 1] == np.inf and D[0, 2, 2] == -np.inf


INT_CASES = [
    ("m8n8k16", "s8", "s8"), ("m8n8k16", "u8", "s8"), ("m16n8k16", "s8", "u8"), ("m16n8k32", "u8", "u8"),
    ("m16n8k32", "s8", "s8"), ("m8n8k32", "s4", "s4"), ("m16n8k32", "u4", "s4"), ("m16n8k64", "s4", "u4"),
]


def _int_values(ty: str, shape) -> np.ndarray:
    bits = BITS[ty]
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if ty[0] == "s" else (0, 1 << bits)
    return RNG.integers(lo, hi, size=shape)


@pytest.mark.parametrize("shape,at,bt", INT_CASES)
def test_mma_integer_layouts(shape: str, at: str, bt: str) -> None:
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    A, B = _int_values(at, (2, m, k)), _int_values(bt, (2, k, n))
    C = RNG.integers(-(1 << 31), 1 << 31, size=(2, m, n))
    D = run_mma(shape, at, bt, "s32", "s32", A, B, C)
    expected = ((A @ B + C + (1 << 31)) % (1 << 32)) - (1 << 31)       # wraps
    np.testing.assert_array_equal(D, expected)


def test_mma_satfinite_clamps_and_plain_wraps() -> None:
    A = np.full((1, 16, 32), 127)
    B = np.full((1, 32, 8), 127)
    C = np.full((1, 16, 8), 2**31 - 1000)
    C[0, 1] = -(2**31) + 1000
    B[0, :, 3] = -127                                # row 1 col 3 goes below INT32_MIN
    sat = run_mma("m16n8k32", "s8", "s8", "s32", "s32", A, B, C, extra=".satfinite")
    exact = A @ B + C
    np.testing.assert_array_equal(sat, np.clip(exact, -(2**31), 2**31 - 1))
    wrap = run_mma("m16n8k32", "s8", "s8", "s32", "s32", A, B, C)
    np.testing.assert_array_equal(wrap, ((exact + 2**31) % 2**32) - 2**31)


@pytest.mark.parametrize("shape", ["m8n8k128", "m16n8k128", "m16n8k256"])
@pytest.mark.parametrize("op", ["xor", "and"])
def test_mma_b1_popc(shape: str, op: str) -> None:
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    A, B = RNG.integers(0, 2, (1, m, k)), RNG.integers(0, 2, (1, k, n))
    C = RNG.integers(-1000, 1000, (1, m, n))
    D = run_mma(shape, "b1", "b1", "s32", "s32", A, B, C, tail=f".{op}.popc")
    both = (A[:, :, :, None] ^ B[:, None, :, :]) if op == "xor" else (A[:, :, :, None] & B[:, None, :, :])
    np.testing.assert_array_equal(D, C + both.sum(axis=2))


def _fma_chain(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """D = C, then D = fma(a_k, b_k, D) for k in order, each rounded once (exact rationals)."""
    out = np.empty(C.shape)
    F = fractions.Fraction
    for idx in np.ndindex(C.shape):
        w, i, j = idx
        acc = float(C[idx])
        for kk in range(A.shape[2]):
            acc = float(F(float(A[w, i, kk])) * F(float(B[w, kk, j])) + F(acc))
        out[idx] = acc
    return out


@pytest.mark.parametrize("shape", ["m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"])
def test_mma_f64_is_a_chain_of_fmas(shape: str) -> None:
    m, n, k = (int(x) for x in shape[1:].replace("n", " ").replace("k", " ").split())
    A = RNG.standard_normal((1, m, k)) * 3
    B = RNG.standard_normal((1, k, n)) / 7
    C = RNG.standard_normal((1, m, n))
    D = run_mma(shape, "f64", "f64", "f64", "f64", A, B, C)
    np.testing.assert_array_equal(D, _fma_chain(A, B, C))


def test_fma_f64_cancellation_is_exact() -> None:
    from jaxptx.sim.semantics.mma import fma_f64
    a = np.array([1 + 2.0**-30, 0.1, 3.0, 1e308, -0.0])
    b = np.array([1 - 2.0**-30, 0.1, 1 / 3, 10.0, 5.0])
    c = np.array([-1.0, -0.01, -1.0, 0.0, -0.0])
    got = fma_f64(a, b, c)
    F = fractions.Fraction
    assert got[0] == -(2.0**-60)
    assert got[1] == float(F(0.1) * F(0.1) - F(0.01))
    assert got[2] == float(F(3.0) * F(1 / 3) - 1)
    assert got[3] == np.inf and np.signbit(got[4])


# --- m8n8k4 .f16 (quad-pairs) ---------------------------------------------------------------

def quad_a(layout: str, lane: int, i: int) -> tuple[int, int]:
    high = lane >= 16
    if layout == "row":
        return (lane % 4) + (4 if high else 0), i
    return (i % 4) + (4 if high else 0), lane % 4


def quad_b(layout: str, lane: int, i: int) -> tuple[int, int]:
    high = lane >= 16
    if layout == "row":
        return lane % 4, i + (4 if high else 0)
    return i, (lane % 4) + (4 if high else 0)


def quad_c(ty: str, lane: int, i: int) -> tuple[int, int]:
    high = 4 if lane >= 16 else 0
    if ty == "f16":
        return (lane % 4) + high, i
    return (lane & 0b1) + (i & 0b10) + high, (i & 0b100) + (lane & 0b10) + (i & 0b1)


def _quad_frag(mats: np.ndarray, ty: str, where, count: int) -> np.ndarray:
    """Quad-pair q = (lane % 16) // 4 holds matrix mats[q]."""
    big = np.zeros((1, 4) + mats.shape[1:])
    big[0] = mats
    raw = to_raw(mats, ty)
    regs = np.zeros((32, -(-count * BITS[ty] // 32)), dtype=np.uint64)
    for lane in range(32):
        q = (lane % 16) // 4
        for i in range(count):
            r, c = where(lane, i)
            shift = (i % 2) * 16 if ty == "f16" else 0
            regs[lane, i * BITS[ty] // 32] |= raw[q, r, c] << np.uint64(shift)
    return regs.astype(np.uint32)


@pytest.mark.parametrize("alayout", ["row", "col"])
@pytest.mark.parametrize("blayout", ["row", "col"])
@pytest.mark.parametrize("dtype,ctype", [("f32", "f32"), ("f32", "f16"), ("f16", "f16")])
def test_mma_m8n8k4_quad_pairs(alayout: str, blayout: str, dtype: str, ctype: str) -> None:
    A, B, C = small_ints((4, 8, 4)), small_ints((4, 4, 8)), small_ints((4, 8, 8), -40, 40)
    ra = _quad_frag(A, "f16", lambda l, i: quad_a(alayout, l, i), 4)
    rb = _quad_frag(B, "f16", lambda l, i: quad_b(blayout, l, i), 4)
    rc = _quad_frag(C, ctype, lambda l, i: quad_c(ctype, l, i), 8)
    nd = 8 if dtype == "f32" else 4
    opcode = f"mma.sync.aligned.m8n8k4.{alayout}.{blayout}.{dtype}.f16.f16.{ctype}"
    acc = {"f32": ".f32", "f16": ".b32"}
    text = mma_ptx(opcode, 2, 2, rc.shape[1], nd, ".b32", acc[ctype], acc[dtype])
    rd = np.zeros((32, nd), dtype=np.uint32)
    sim.launch(text, ra, rb, rc, rd, block=(32, 1, 1))
    D = np.zeros((4, 8, 8))
    for lane in range(32):
        q = (lane % 16) // 4
        for i in range(8):
            r, c = quad_c(dtype, lane, i)
            if dtype == "f16":
                D[q, r, c] = np.uint16((int(rd[lane, i // 2]) >> (16 * (i % 2))) & 0xFFFF).view(np.float16)
            else:
                D[q, r, c] = rd[lane, i].view(np.float32)
    np.testing.assert_array_equal(D, A @ B + C)


def test_mma_needs_the_whole_warp() -> None:
    A, B, C = small_ints((1, 16, 16)), small_ints((1, 16, 8)), small_ints((1, 16, 8))
    ra = fragments(A, "f16", lambda l, i: doc_a("m16n8k16", "f16", l, i), 8)[:16]
    rb = fragments(B, "f16", lambda l, i: doc_b("m16n8k16", "f16", l, i), 4)[:16]
    rc = fragments(C, "f32", lambda l, i: doc_c("m16n8k16", l, i), 4)[:16]
    text = mma_ptx("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 4, 4, c=".f32", d=".f32")
    with pytest.raises(SimError, match="16 of the 32 threads"):
        sim.launch(text, ra, rb, rc, np.zeros((16, 4), np.uint32), block=(16, 1, 1))


# --- GPU-checked vectors (ZLUDA, ../shared/golden/zluda): same register inputs ---------------

def _golden(name: str) -> np.ndarray:
    path = GOLDEN / "cases.json"
    if not path.exists():
        pytest.skip("../shared/golden/zluda is absent")
    case = next(c for c in json.loads(path.read_text()) if c["name"] == name)
    return np.array([int(v, 16) if v.startswith("0x") else int(v) for v in case["output"]["values"]],
                    dtype=np.int64).astype(np.uint32)


def _half2(hi: np.ndarray, lo: np.ndarray, dtype) -> np.ndarray:
    """cvt.rn.{f16,bf16}x2.f32 d, hi, lo (PTX: a into the upper half)."""
    h = hi.astype(dtype).view(np.uint16).astype(np.uint32)
    lo_bits = lo.astype(dtype).view(np.uint16).astype(np.uint32)
    return (h << np.uint32(16)) | lo_bits


@pytest.mark.parametrize("name,dtype", [("mma_m16n8k16_f32_f16_f16_f32", np.float16),
                                        ("mma_m16n8k16_f32_bf16_bf16_f32", ml_dtypes.bfloat16),
                                        ("mma_m16n8k16_f32_bf16_bf16_f32_2x", ml_dtypes.bfloat16)])
def test_golden_mma_half(name: str, dtype) -> None:
    expected = _golden(name)
    tid = np.arange(64, dtype=np.float32)
    inp = [tid * 8 + j for j in range(8)]                      # in0..in7 of the ZLUDA kernel
    ra = np.stack([_half2(inp[2 * r], inp[2 * r + 1], dtype) for r in range(4)], -1)
    bty = "bf16" if dtype is ml_dtypes.bfloat16 else "f16"
    text = mma_ptx(f"mma.sync.aligned.m16n8k16.row.col.f32.{bty}.{bty}.f32", 4, 2, 4, 4, c=".f32", d=".f32")
    outs = []
    for first in ((0, 4) if name.endswith("2x") else (0,)):     # B from in[first..first+3], C too
        rb = np.stack([_half2(inp[first], inp[first + 1], dtype),
                       _half2(inp[first + 2], inp[first + 3], dtype)], -1)
        rc = np.stack(inp[first:first + 4], -1)
        rd = np.zeros((64, 4), np.uint32)
        sim.launch(text, ra, rb, rc, rd, block=(64, 1, 1))
        outs.append(rd)
    got = np.concatenate(outs, axis=1).reshape(-1)
    # The _2x case's buffer holds 256 floats: the first warp's 8 results per lane.
    np.testing.assert_array_equal(got[:len(expected)], expected)


def _pack_u8(a, b, c, d) -> np.ndarray:
    """The ZLUDA kernels' pack_u8: u16 values shifted by 0/8/16/24 and OR'ed
    (no masking, so high bits spill into the next byte)."""
    return ((a | (b << 8) | (c << 16) | (d << 24)) & 0xFFFFFFFF).astype(np.uint32)


def test_golden_mma_s8() -> None:
    expected = _golden("mma_m16n8k32_s32_s8_s8_s32")
    tid = np.arange(64, dtype=np.uint64)
    inp = [(tid * 16 + j) & 0xFFFF for j in range(16)]        # .u16 registers in0..in15
    a = [_pack_u8(*inp[4 * r:4 * r + 4]) for r in range(4)]
    rc = np.stack(inp[:4], -1).astype(np.int32)
    text = mma_ptx("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 4, 2, 4, 4, c=".s32", d=".s32")
    rd = np.zeros((64, 4), np.uint32)
    sim.launch(text, np.stack(a, -1), np.stack([a[0], a[0]], -1), rc, rd, block=(64, 1, 1))
    np.testing.assert_array_equal(rd.reshape(-1), expected)


def test_golden_mma_s8_interleave() -> None:
    expected = _golden("mma_m16n8k32_s32_s8_s8_s32_interleave").reshape(64, 16)
    tid = np.arange(64, dtype=np.uint64)
    inp = [(tid * 16 + j) & 0xFFFF for j in range(16)]
    a = [_pack_u8(*inp[4 * r:4 * r + 4]) for r in range(4)]
    b0, b1 = a[0], a[1]                                         # pack(in0..3), pack(in4..7)
    rc = np.stack(inp[:4], -1).astype(np.int32)
    text = mma_ptx("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 4, 2, 4, 4, c=".s32", d=".s32")
    calls = [(a, (b0, b1)), (a[::-1], (b1, b0)), (a, (b1, b0)), (a[::-1], (b0, b0))]
    for i, (aa, bb) in enumerate(calls):
        rd = np.zeros((64, 4), np.uint32)
        sim.launch(text, np.stack(aa, -1), np.stack(bb, -1), rc, rd, block=(64, 1, 1))
        np.testing.assert_array_equal(rd, expected[:, 4 * i:4 * i + 4])


# --- ldmatrix / stmatrix ---------------------------------------------------------------------

def _shift(reg: str, nbytes: int) -> str:
    """``reg = tid * nbytes``."""
    doubling = [f"add.u64 {reg}, {reg}, {reg};"] * (nbytes.bit_length() - 1)
    return "\n    ".join([f"cvt.u64.u32 {reg}, %tid.x;"] + doubling)


def ldmatrix_ptx(num: int, trans: bool, generic: bool = False) -> str:
    """Lane l copies 16 bytes of ``src`` into shared memory at l*16, then the
    warp runs ldmatrix with row address smem + offs[l]; lane l stores its
    registers at out + l*16."""
    space = "" if generic else ".shared"
    op = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}{space}.b16"
    cvta = "cvta.shared.u64 %q, %q;" if generic else ""
    return HEAD + f""".visible .entry k(.param .u64 src, .param .u64 offs, .param .u64 out)
{{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %off, %s, %o, %d, %q, %p, %v0, %v1, %base;
    .reg .b32 r<{num}>;
    {_lane_pointer('%s', 'src', 16)}
    ld.global.u64 %v0, [%s];
    ld.global.u64 %v1, [%s+8];
    mov.u64 %base, smem;
    {_shift('%p', 16)}
    add.u64 %p, %p, %base;
    st.shared.u64 [%p], %v0;
    st.shared.u64 [%p+8], %v1;
    bar.sync 0;
    {_lane_pointer('%o', 'offs', 8)}
    ld.global.u64 %q, [%o];
    add.u64 %q, %q, %base;
    {cvta}
    {op} {_vec('r', num)}, [%q];
    {_lane_pointer('%d', 'out', 16)}
    {chr(10).join(f'    st.global.b32 [%d+{4 * i}], r{i};' for i in range(num)).strip()}
    ret;
}}
"""


def stmatrix_ptx(num: int, trans: bool) -> str:
    """Lane l loads its registers from regs + l*16, the warp runs stmatrix
    with row address smem + offs[l], then lane l copies shared bytes
    l*16 .. l*16+15 to out + l*16."""
    op = f"stmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16"
    return HEAD + f""".visible .entry k(.param .u64 regs, .param .u64 offs, .param .u64 out)
{{
    .shared .align 16 .b8 smem[512];
    .reg .u64 %off, %s, %o, %d, %q, %p, %v0, %v1, %base;
    .reg .b32 r<{num}>;
    {_lane_pointer('%s', 'regs', 16)}
    {_loads('r', '%s', num, '.b32', 4)}
    mov.u64 %base, smem;
    {_lane_pointer('%o', 'offs', 8)}
    ld.global.u64 %q, [%o];
    add.u64 %q, %q, %base;
    {op} [%q], {_vec('r', num)};
    bar.sync 0;
    {_shift('%p', 16)}
    add.u64 %p, %p, %base;
    ld.shared.u64 %v0, [%p];
    ld.shared.u64 %v1, [%p+8];
    {_lane_pointer('%d', 'out', 16)}
    st.global.u64 [%d], %v0;
    st.global.u64 [%d+8], %v1;
    ret;
}}
"""


def _row_offsets(num: int) -> np.ndarray:
    """Lanes 0..8*num-1 address distinct shuffled 16-byte rows; the other
    lanes hold garbage (misaligned, out of bounds) that must be ignored."""
    offs = np.full(32, 0xFFFF_FFF3, dtype=np.uint64)
    offs[:8 * num] = RNG.permutation(32)[:8 * num].astype(np.uint64) * 16
    return offs


def _fragment_of(mat: np.ndarray, lane: int) -> int:
    """PTX ISA ldmatrix: lane l holds row l/4, columns 2*(l%4) (low) and +1 (high)."""
    lo, hi = int(mat[lane // 4, 2 * (lane % 4)]), int(mat[lane // 4, 2 * (lane % 4) + 1])
    return lo | (hi << 16)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(num: int, trans: bool) -> None:
    data = RNG.integers(0, 1 << 16, size=256).astype(np.uint16)      # 32 rows of 8 b16
    offs = _row_offsets(num)
    out = np.zeros((32, 4), np.uint32)
    sim.launch(ldmatrix_ptx(num, trans), data, offs, out, block=(32, 1, 1))
    rows = data.reshape(32, 8)
    for j in range(num):
        mat = np.stack([rows[int(offs[8 * j + r]) // 16] for r in range(8)])   # rows from lanes 8j..8j+7
        if trans:
            mat = mat.T
        np.testing.assert_array_equal(out[:, j], [_fragment_of(mat, lane) for lane in range(32)])
    assert not out[:, num:].any()


def test_ldmatrix_generic_address() -> None:
    """Row addresses made generic by ``cvta.shared`` (ldmatrix without
    ``.shared``) read the same shared rows."""
    data = RNG.integers(0, 1 << 16, size=256).astype(np.uint16)
    offs = _row_offsets(4)
    out = np.zeros((32, 4), np.uint32)
    sim.launch(ldmatrix_ptx(4, False, generic=True), data, offs, out, block=(32, 1, 1))
    rows = data.reshape(32, 8)
    for j in range(4):
        mat = np.stack([rows[int(offs[8 * j + r]) // 16] for r in range(8)])
        np.testing.assert_array_equal(out[:, j], [_fragment_of(mat, lane) for lane in range(32)])


def test_ldmatrix_misaligned_row_raises() -> None:
    offs = _row_offsets(2)
    offs[5] += 8
    with pytest.raises(SimError, match="16-byte aligned"):
        sim.launch(ldmatrix_ptx(2, False), np.zeros(256, np.uint16), offs, np.zeros((32, 4), np.uint32),
                   block=(32, 1, 1))


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(num: int, trans: bool) -> None:
    regs = np.zeros((32, 4), np.uint32)
    regs[:, :num] = RNG.integers(0, 1 << 32, size=(32, num), dtype=np.uint64).astype(np.uint32)
    offs = _row_offsets(num)
    out = np.zeros((32, 8), np.uint16)
    sim.launch(stmatrix_ptx(num, trans), regs, offs, out, block=(32, 1, 1))
    expected = np.zeros((32, 8), np.uint16)
    for j in range(num):
        mat = np.zeros((8, 8), np.uint16)
        for lane in range(32):
            r, c = lane // 4, 2 * (lane % 4)
            mat[r, c], mat[r, c + 1] = regs[lane, j] & 0xFFFF, regs[lane, j] >> 16
        if trans:
            mat = mat.T
        for r in range(8):
            expected[int(offs[8 * j + r]) // 16] = mat[r]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_inverts_ldmatrix(num: int, trans: bool) -> None:
    regs = np.zeros((32, 4), np.uint32)
    regs[:, :num] = RNG.integers(0, 1 << 32, size=(32, num), dtype=np.uint64).astype(np.uint32)
    offs = _row_offsets(num)
    mem = np.zeros((32, 8), np.uint16)
    sim.launch(stmatrix_ptx(num, trans), regs, offs, mem, block=(32, 1, 1))
    back = np.zeros((32, 4), np.uint32)
    sim.launch(ldmatrix_ptx(num, trans), mem, offs, back, block=(32, 1, 1))
    np.testing.assert_array_equal(back, regs)


def _golden_case(name: str) -> dict:
    path = GOLDEN / "cases.json"
    if not path.exists():
        pytest.skip("../shared/golden/zluda is absent")
    return next(c for c in json.loads(path.read_text()) if c["name"] == name)


def test_golden_ldmatrix_x2() -> None:
    """ZLUDA's ``ldmatrix``: values_g (u32[64]) in shared memory, row
    address tid*16, .x2; the output holds the first warp's registers."""
    text = (GOLDEN / "ldmatrix.ptx").read_text() if GOLDEN.exists() else ""
    case = _golden_case("ldmatrix")
    body = text[text.index("values_g[64] = {") + 16:text.index("};")]
    values = np.array([int(v) for v in body.replace("\n", " ").split(",")], dtype=np.uint32)
    data = np.zeros(128, np.uint32)
    data[:64] = values
    out = np.zeros((32, 4), np.uint32)
    sim.launch(ldmatrix_ptx(2, False), data.view(np.uint16), np.arange(32, dtype=np.uint64) * 16, out,
               block=(32, 1, 1))
    expected = np.array([int(v) for v in case["output"]["values"]], dtype=np.uint32)
    np.testing.assert_array_equal(out[:, :2].reshape(-1), expected)


def test_golden_ldmatrix_x4_trans() -> None:
    """ZLUDA's ``ldmatrix_trans``: u16[256] in shared memory, row address
    tid*16, .x4.trans; each b16 half is stored as one i32."""
    text = (GOLDEN / "ldmatrix_trans.ptx").read_text() if GOLDEN.exists() else ""
    case = _golden_case("ldmatrix_trans")
    body = text[text.index("values_g[256] = {") + 17:text.index("};")]
    values = np.array([int(line.split("//")[0].strip().rstrip(",").split(",")[i])
                       for line in body.splitlines() if line.split("//")[0].strip()
                       for i in range(len(line.split("//")[0].strip().rstrip(",").split(",")))],
                      dtype=np.uint16)
    out = np.zeros((32, 4), np.uint32)
    sim.launch(ldmatrix_ptx(4, True), values, np.arange(32, dtype=np.uint64) * 16, out, block=(32, 1, 1))
    halves = np.stack([out & 0xFFFF, out >> 16], -1).reshape(-1)
    expected = np.array([int(v) for v in case["output"]["values"]], dtype=np.int64)
    np.testing.assert_array_equal(halves, expected)


# --- wgmma: shared-memory layouts from PTX ISA "Canonical Layouts" (CuTe notation) -----------

def cute_offset(shape, stride, coord: int) -> int:
    """Offset of 1-D ``coord`` in a (nested) CuTe layout shape:stride,
    coordinates split colexicographically (first mode fastest)."""
    if isinstance(shape, int):
        return coord * stride
    total = 0
    for sh, st in zip(shape, stride):
        size = int(np.prod(_flat(sh)))
        total += cute_offset(sh, st, coord % size)
        coord //= size
    return total


def _flat(shape) -> list[int]:
    return [shape] if isinstance(shape, int) else [x for s in shape for x in _flat(s)]


def cute_swizzle(bits: int, addr: int) -> int:
    """CuTe ``Swizzle<bits, 4, 3>`` on a byte address: XOR bits [4, 4+bits)
    with bits [7, 7+bits)."""
    mask = ((1 << bits) - 1) << 7
    return addr ^ ((addr & mask) >> 3)


SWIZZLE_MODE = {0: 0, 1: 3, 2: 2, 3: 1}          # descriptor mode -> Swizzle<B,4,3>'s B


def canonical(major: str, mode: int, T: int, m: int, k: int, lbo: int, sbo: int):
    """PTX ISA "Canonical Layouts" table; LBO/SBO in elements. Returns
    (shape, stride) mapping (MN index, K index)."""
    c = {0: 1, 3: 2, 2: 4, 1: 8}[mode]             # 16-byte chunks in a swizzle-atom row
    if major == "MN":
        if mode == 0:
            return ((T, 1, m), (8, k)), ((1, T, sbo), (T, lbo))
        return ((T, c, m), (8, k)), ((1, T, lbo), (c * T, sbo))
    if mode == 0:
        return ((8, m), (T, 2 * k)), ((T, sbo), (1, lbo))
    return ((8, m), (T, 2 * k)), ((c * T, sbo), (1, T))


def canonical_address(start: int, size: int, layout, mode: int, x: int, y: int) -> int:
    (sx, sy), (tx, ty) = layout
    off = (cute_offset(sx, tx, x) + cute_offset(sy, ty, y)) * size
    return start + cute_swizzle(SWIZZLE_MODE[mode], off)


def descriptor(start: int, lbo_bytes: int, sbo_bytes: int, mode: int, base: int = 0) -> int:
    """PTX ISA "Matrix Descriptor Format"."""
    enc = lambda v: (v & 0x3FFFF) >> 4          # noqa: E731
    return enc(start) | enc(lbo_bytes) << 16 | enc(sbo_bytes) << 32 | base << 49 | mode << 62


DOC_EXAMPLES = [
    # (major, mode, element bytes, exact layout from the PTX ISA examples, LBO, SBO in elements)
    ("K", 0, 4, (((8, 2), (4, 4)), ((4, 32), (1, 64))), 64, 32),
    ("MN", 0, 2, (((8, 1, 2), (8, 2)), ((1, 8, 64), (8, 128))), 128, 64),
    ("MN", 3, 2, (((8, 2, 2), (8, 2)), ((1, 8, 128), (16, 256))), 128, 256),
    ("MN", 2, 2, (((8, 4, 2), (8, 2)), ((1, 8, 256), (32, 512))), 256, 512),
]


@pytest.mark.parametrize("major,mode,size,exact,lbo,sbo", DOC_EXAMPLES)
def test_descriptor_addresses_match_ptx_examples(major, mode, size, exact, lbo, sbo) -> None:
    from jaxptx.sim.semantics.wgmma import smem_matrix_addresses
    (sx, sy), _ = exact
    mn, kk = int(np.prod(_flat(sx))), int(np.prod(_flat(sy)))
    start = 2048
    desc = np.array([descriptor(start, lbo * size, sbo * size, mode)], dtype=np.uint64)
    got = smem_matrix_addresses(desc, mn, kk, size * 8, np.array([major == "MN"]))[0]
    want = np.array([[canonical_address(start, size, exact, mode, x, y) for y in range(kk)]
                     for x in range(mn)])
    np.testing.assert_array_equal(got, want)


def test_descriptor_fields() -> None:
    from jaxptx.sim.semantics.wgmma import descriptor_fields
    d = descriptor(0x3FFF0, 0x1230, 0x4560, 1, base=5)
    f = descriptor_fields(np.array([d], dtype=np.uint64))
    assert (int(f["start"][0]), int(f["lbo"][0]), int(f["sbo"][0]), int(f["base_offset"][0]),
            int(f["swizzle"][0])) == (0x3FFF0, 0x1230, 0x4560, 5, 1)


def wgmma_ptx(opcode: str, nd: int, a_regs: bool, smem: int, tail: str, d: str = ".f32") -> str:
    """One warpgroup: copy ``img`` (smem bytes) into shared memory (each
    thread smem/128 bytes), load A registers (if any) and D, run the wgmma
    between fence / commit / wait, store D."""
    per = smem // 128
    copy = "\n    ".join(f"ld.global.u64 %v, [%s+{8 * i}];\n    st.shared.u64 [%p+{8 * i}], %v;"
                         for i in range(per // 8))
    a_load = _loads("a", "%a", 4, ".b32", 4) if a_regs else ""
    a_op = _vec("a", 4) if a_regs else "%da"
    return HEAD + f""".visible .entry k(.param .u64 img, .param .u64 pa, .param .u64 pd,
    .param .u64 desca, .param .u64 descb)
{{
    .shared .align 1024 .b8 smem[{smem}];
    .reg .u64 %off, %s, %a, %d, %p, %v, %base, %da, %db;
    .reg .b32 a<4>;
    .reg {d} d<{nd}>;
    {_lane_pointer('%s', 'img', per)}
    mov.u64 %base, smem;
    {_shift('%p', per)}
    add.u64 %p, %p, %base;
    {copy}
    bar.sync 0;
    {_lane_pointer('%a', 'pa', 16)}
    {a_load}
    {_lane_pointer('%d', 'pd', nd * 4)}
    {_loads('d', '%d', nd, d, 4)}
    ld.param.u64 %da, [desca];
    ld.param.u64 %db, [descb];
    wgmma.fence.sync.aligned;
    {opcode} {_vec('d', nd)}, {a_op}, %db, {tail};
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    {chr(10).join(f'    st.global{d} [%d+{4 * i}], d{i};' for i in range(nd)).strip()}
    ret;
}}
"""


def wg_d(thread: int, i: int) -> tuple[int, int]:
    """PTX ISA wgmma D fragment (m64nN): warp w holds rows 16w.., each 8-column
    block i/4 as an mma C fragment."""
    warp, lane = thread // 32, thread % 32
    return 16 * warp + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + (i % 2)


def _place(img: np.ndarray, mat: np.ndarray, start: int, layout, mode: int, size: int = 2) -> None:
    """Write ``mat`` (MN x K element bits, or f16 values) into byte image
    ``img`` per the canonical layout."""
    raw = mat.astype(np.float16).view(np.uint16) if mat.dtype.kind == "f" else mat
    taken = set()
    for x in range(mat.shape[0]):
        for y in range(mat.shape[1]):
            addr = canonical_address(start, size, layout, mode, x, y)
            assert addr not in taken
            taken.add(addr)
            img[addr:addr + size] = np.frombuffer(int(raw[x, y]).to_bytes(size, "little"), np.uint8)


def _layout_params(major: str, mode: int, mn: int, kk: int, start: int, T: int = 8):
    """A canonical layout for an MN x K operand with T elements per 16 bytes:
    (layout, LBO bytes, SBO bytes); ``kk`` is K in elements."""
    size = 16 // T
    c = {0: 1, 3: 2, 2: 4, 1: 8}[mode]
    if major == "K":
        m, k = mn // 8, kk // (2 * T)
        if mode == 0:
            lbo, sbo = 8 * T * (mn // 8 + 1), 8 * T    # chunks along K far apart, 8-row groups dense
        else:
            lbo, sbo = T, 8 * c * T                    # (LBO unused) atoms stacked along MN
        return canonical("K", mode, T, m, k, lbo, sbo), lbo * size, sbo * size
    m, k = mn // (T * c), kk // 8
    if mode == 0:
        lbo, sbo = 8 * T * (mn // 8), 8 * T           # MN core matrices dense, K groups after them
    else:
        lbo, sbo = 8 * c * T, 8 * c * T * m            # atoms along MN, then 8-row K groups
    return canonical("MN", mode, T, m, k, lbo, sbo), lbo * size, sbo * size


WGMMA_CASES = [(am, bm, mode, n) for am, bm, mode, n in [
    ("K", "K", 0, 16), ("K", "K", 1, 32), ("K", "K", 2, 16), ("K", "K", 3, 8),
    ("MN", "MN", 0, 16), ("MN", "MN", 1, 64), ("MN", "MN", 2, 32), ("MN", "MN", 3, 16),
    ("K", "MN", 1, 64), ("MN", "K", 3, 24), ("regs", "K", 1, 16), ("regs", "MN", 0, 8),
]]


@pytest.mark.parametrize("amajor,bmajor,mode,n", WGMMA_CASES)
def test_wgmma_f16_layouts(amajor: str, bmajor: str, mode: int, n: int) -> None:
    smem = 16384
    img = np.zeros(smem, np.uint8)
    A = small_ints((64, 16), -4, 5)
    B = small_ints((16, n), -4, 5)
    D0 = small_ints((64, n), -20, 20)
    a_start, b_start = 0, 8192
    da = 0
    if amajor != "regs":
        layout, lbo, sbo = _layout_params(amajor, mode, 64, 16, a_start)
        _place(img, A, a_start, layout, mode)
        da = descriptor(a_start, lbo, sbo, mode)
    layout, lbo, sbo = _layout_params(bmajor, mode, n, 16, b_start)
    _place(img, B.T, b_start, layout, mode)
    db = descriptor(b_start, lbo, sbo, mode)
    # A registers: the mma.m16n8k16 A fragment of each warp's 16 rows.
    ra = np.zeros((128, 4), np.uint32)
    for t in range(128):
        for i in range(8):
            r, c = doc_a("m16n8k16", "f16", t % 32, i)
            bits = int(np.float16(A[16 * (t // 32) + r, c]).view(np.uint16))
            ra[t, i // 2] |= bits << (16 * (i % 2))
    rd = np.zeros((128, n // 2), np.float32)
    for t in range(128):
        for i in range(n // 2):
            rd[t, i] = D0[wg_d(t, i)]
    ta, tb = int(amajor == "MN"), int(bmajor == "MN")
    opcode = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16"
    tail = f"1, 1, -1, {tb}" if amajor == "regs" else f"1, 1, -1, {ta}, {tb}"
    text = wgmma_ptx(opcode, n // 2, amajor == "regs", smem, tail)
    sim.launch(text, img, ra, rd, np.uint64(da), np.uint64(db), block=(128, 1, 1))
    D = np.zeros((64, n))
    for t in range(128):
        for i in range(n // 2):
            D[wg_d(t, i)] = rd[t, i]
    np.testing.assert_array_equal(D, A @ -B + D0)          # imm-scale-b = -1 negates B


def _wg_run(opcode: str, tail: str, img: np.ndarray, ra: np.ndarray | None, D0: np.ndarray, da: int, db: int,
            dtype: str = "f32") -> np.ndarray:
    """Run one wgmma over a warpgroup; returns D (64 x N) as float64/int64."""
    n = D0.shape[1]
    nd = n // 4 if dtype == "f16" else n // 2
    rd = np.zeros((128, nd), np.uint32)
    for t in range(128):
        for i in range(n // 2):
            r, c = wg_d(t, i)
            if dtype == "f16":
                rd[t, i // 2] |= int(np.float16(D0[r, c]).view(np.uint16)) << (16 * (i % 2))
            elif dtype == "f32":
                rd[t, i] = np.float32(D0[r, c]).view(np.uint32)
            else:
                rd[t, i] = np.int64(D0[r, c]).astype(np.int32).view(np.uint32)
    dreg = {"f32": ".f32", "s32": ".s32", "f16": ".b32"}[dtype]
    text = wgmma_ptx(opcode, nd, ra is not None, len(img), tail, dreg)
    ra = np.zeros((128, 4), np.uint32) if ra is None else ra
    sim.launch(text, img, ra, rd, np.uint64(da), np.uint64(db), block=(128, 1, 1))
    D = np.zeros((64, n), np.float64 if dtype != "s32" else np.int64)
    for t in range(128):
        for i in range(n // 2):
            if dtype == "f16":
                D[wg_d(t, i)] = np.uint16((int(rd[t, i // 2]) >> (16 * (i % 2))) & 0xFFFF).view(np.float16)
            elif dtype == "f32":
                D[wg_d(t, i)] = rd[t, i].view(np.float32)
            else:
                D[wg_d(t, i)] = rd[t, i].view(np.int32)
    return D


def test_wgmma_k_blocks_of_a_128b_swizzled_tile() -> None:
    """CUTLASS-style: a 64x64 f16 K-major 128B-swizzled tile, the descriptor's
    start address advanced by 32 bytes per k16 block (the swizzle follows the
    absolute address)."""
    img = np.zeros(16384, np.uint8)
    A = small_ints((64, 64), -4, 5)
    B = small_ints((64, 8), -4, 5)
    layout_a = canonical("K", 1, 8, 8, 4, 8, 64 * 8)          # 8 rows x 128 B atoms, SBO 1024 B
    _place(img, A, 0, layout_a, 1)
    layout_b = canonical("K", 1, 8, 1, 4, 8, 64 * 8)
    _place(img, B.T, 8192, layout_b, 1)
    for j in range(4):
        da, db = descriptor(32 * j, 16, 1024, 1), descriptor(8192 + 32 * j, 16, 1024, 1)
        D = _wg_run("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", "1, 1, 1, 0, 0", img, None,
                    np.zeros((64, 8)), da, db)
        np.testing.assert_array_equal(D, A[:, 16 * j:16 * j + 16] @ B[16 * j:16 * j + 16])


def test_wgmma_scale_d_false_and_negated_a() -> None:
    img = np.zeros(16384, np.uint8)
    A, B = small_ints((64, 16), -4, 5), small_ints((16, 16), -4, 5)
    la, lbo_a, sbo_a = _layout_params("K", 0, 64, 16, 0)
    lb, lbo_b, sbo_b = _layout_params("K", 0, 16, 16, 8192)
    _place(img, to_raw(A, "bf16"), 0, la, 0)
    _place(img, to_raw(B.T, "bf16"), 8192, lb, 0)
    da, db = descriptor(0, lbo_a, sbo_a, 0), descriptor(8192, lbo_b, sbo_b, 0)
    D = _wg_run("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16", "0, -1, 1, 0, 0", img, None,
                np.full((64, 16), 1e30), da, db)
    np.testing.assert_array_equal(D, -A @ B)                  # D's old value is ignored
    _place(img, A, 0, la, 0)
    _place(img, B.T, 8192, lb, 0)
    D = _wg_run("wgmma.mma_async.sync.aligned.m64n16k16.f16.f16.f16", "1, 1, 1, 0, 0", img, None,
                np.full((64, 16), 3.0), da, db, dtype="f16")
    np.testing.assert_array_equal(D, A @ B + 3)


def _regs_a(A: np.ndarray, shape: str, ty: str) -> np.ndarray:
    """wgmma A registers: warp w holds rows 16w.. as the mma ``shape`` A fragment."""
    count = 16 * int(shape.split("k")[1]) // 32
    per = [fragments(A[None, 16 * w:16 * w + 16], ty, lambda l, i: doc_a(shape, ty, l, i), count)
           for w in range(4)]
    return np.concatenate(per).astype(np.uint32)


@pytest.mark.parametrize("atype,btype,dtype,a_regs,mode", [
    ("tf32", "tf32", "f32", False, 1), ("tf32", "tf32", "f32", True, 0),
    ("e4m3", "e5m2", "f32", False, 2), ("e5m2", "e4m3", "f16", True, 3),
    ("s8", "s8", "s32", False, 1), ("u8", "s8", "s32", True, 0),
])
def test_wgmma_other_types(atype: str, btype: str, dtype: str, a_regs: bool, mode: int) -> None:
    k = 8 if atype == "tf32" else 32
    T = 4 if atype == "tf32" else 16
    n = 16
    img = np.zeros(16384, np.uint8)
    if atype in ("s8", "u8"):
        A, B = _int_values(atype, (64, k)), _int_values(btype, (k, n))
        D0 = RNG.integers(-1000, 1000, (64, n))
    else:
        A, B, D0 = small_ints((64, k), -3, 4), small_ints((k, n), -3, 4), small_ints((64, n), -9, 9)
    la, lbo_a, sbo_a = _layout_params("K", mode, 64, k, 0, T)
    lb, lbo_b, sbo_b = _layout_params("K", mode, n, k, 8192, T)
    size = 16 // T
    _place(img, to_raw(A, atype), 0, la, mode, size)
    _place(img, to_raw(B.T, btype), 8192, lb, mode, size)
    da, db = descriptor(0, lbo_a, sbo_a, mode), descriptor(8192, lbo_b, sbo_b, mode)
    ra = _regs_a(A, f"m16n8k{k}", atype) if a_regs else None
    opcode = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{dtype}.{atype}.{btype}"
    tail = "1" if dtype == "s32" else "1, 1, 1"
    D = _wg_run(opcode, tail, img, ra, D0, da, db, dtype)
    np.testing.assert_array_equal(D, A @ B + D0)


def test_wgmma_s8_satfinite_and_b1() -> None:
    img = np.zeros(16384, np.uint8)
    A, B = np.full((64, 32), 127), np.full((32, 8), 127)
    la, lbo_a, sbo_a = _layout_params("K", 0, 64, 32, 0, 16)
    lb, lbo_b, sbo_b = _layout_params("K", 0, 8, 32, 8192, 16)
    _place(img, to_raw(A, "s8"), 0, la, 0, 1)
    _place(img, to_raw(B.T, "s8"), 8192, lb, 0, 1)
    da, db = descriptor(0, lbo_a, sbo_a, 0), descriptor(8192, lbo_b, sbo_b, 0)
    D0 = np.full((64, 8), 2**31 - 100)
    op = "wgmma.mma_async.sync.aligned.m64n8k32"
    D = _wg_run(f"{op}.satfinite.s32.s8.s8", "1", img, None, D0, da, db, "s32")
    assert (D == 2**31 - 1).all()
    D = _wg_run(f"{op}.s32.s8.s8", "1", img, None, D0, da, db, "s32")
    np.testing.assert_array_equal(D, ((A @ B + D0 + 2**31) % 2**32) - 2**31)
    # .b1: K = 256 bits = 32 bytes a row, the lowest K index in the lowest bit.
    Ab, Bb = RNG.integers(0, 2, (64, 256)), RNG.integers(0, 2, (256, 8))
    img[:] = 0
    _place(img, np.packbits(Ab, axis=1, bitorder="little"), 0, la, 0, 1)
    _place(img, np.packbits(Bb.T, axis=1, bitorder="little"), 8192, lb, 0, 1)
    D0 = RNG.integers(-100, 100, (64, 8))
    op = "wgmma.mma_async.sync.aligned.m64n8k256"
    D = _wg_run(f"{op}.s32.b1.b1.and.popc", "1", img, None, D0, da, db, "s32")
    np.testing.assert_array_equal(D, Ab @ Bb + D0)


def test_wgmma_needs_uniform_descriptors_and_a_whole_warpgroup() -> None:
    text = HEAD + """.visible .entry k(.param .u64 out)
{
    .shared .align 1024 .b8 smem[4096];
    .reg .u64 %da, %db;
    .reg .f32 d<4>;
    cvt.u64.u32 %da, %tid.x;
    mov.u64 %db, 0;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {d0, d1, d2, d3}, %da, %db, 1, 1, 1, 0, 0;
    ret;
}
"""
    with pytest.raises(SimError, match="warpgroup-uniform"):
        sim.launch(text, np.zeros(1, np.uint32), block=(128, 1, 1))
    with pytest.raises(SimError, match="64 of the 128 threads"):
        sim.launch(text, np.zeros(1, np.uint32), block=(64, 1, 1))

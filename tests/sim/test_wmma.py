"""``wmma.load`` / ``wmma.mma`` / ``wmma.store`` on the emulator: one warp
computes D = A * B + C for every shape and type, with row- and column-major
operands and explicit strides, against numpy. Every kernel is assembled by
ptxas. The fragment layout is the emulator's own (PTX leaves it unspecified),
so the tests check only what portable programs can observe."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.isa._wmma import fragment_elements
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError

_NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
       "s8": np.int8, "u8": np.uint8, "s32": np.int32, "tf32": np.float32}
_REG = {"f16": "b32", "bf16": "b32", "tf32": "b32", "s8": "b32", "u8": "b32", "s4": "b32", "u4": "b32",
        "b1": "b32", "f32": "f32", "s32": "s32", "f64": "f64"}
_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "s32": 32, "f64": 64, "s8": 8, "u8": 8,
         "s4": 4, "u4": 4, "b1": 1}


def _nregs(shape: str, frag: str, t: str) -> int:
    e = fragment_elements(shape, frag, t)
    return e if t == "f64" else max(1, e * _BITS[t] // 32)


def _vec(prefix: str, n: int, start: int = 0) -> str:
    return "{" + ", ".join(f"{prefix}{start + i}" for i in range(n)) + "}"


def _kernel(shape, atype, btype, ctype, dtype, la, lb, lc, ld, strides, mma_mods, version="8.0",
            target="sm_90a", scale_a=False) -> str:
    """One warp: load A, B, C from global, (optionally scale A), mma, store D."""
    acc = {"f16": ("%h", "b32"), "f32": ("%f", "f32"), "s32": ("%i", "s32"), "f64": ("%d", "f64")}
    na, nb = _nregs(shape, "a", atype), _nregs(shape, "b", btype)
    nc, nd = _nregs(shape, "c", ctype), _nregs(shape, "d", dtype)
    wide = atype == "f64"
    areg, breg = ("%da", "%db") if wide else ("%ra", "%rb")
    cp, _ = acc[ctype]
    dp, _ = acc[dtype]
    cp_decl = cp + "c"
    dp_decl = dp + "o"
    sa, sb, sc, sd = (f", {x}" if x else "" for x in strides)
    lines = [f".version {version}", f".target {target}", ".address_size 64",
             ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)", "{",
             "  .reg .b64 %rd<5>;",
             f"  .reg .{'f64' if wide else 'b32'} {areg}<{na}>;", f"  .reg .{'f64' if wide else 'b32'} {breg}<{nb}>;",
             f"  .reg .{acc[ctype][1]} {cp_decl}<{nc}>;", f"  .reg .{acc[dtype][1]} {dp_decl}<{nd}>;",
             "  ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u64 %rd4, [pd];",
             f"  wmma.load.a.sync.aligned.{la}.{shape}.global.{atype} {_vec(areg, na)}, [%rd1]{sa};",
             f"  wmma.load.b.sync.aligned.{lb}.{shape}.global.{btype} {_vec(breg, nb)}, [%rd2]{sb};",
             f"  wmma.load.c.sync.aligned.{lc}.{shape}.global.{ctype} {_vec(cp_decl, nc)}, [%rd3]{sc};"]
    if scale_a:     # every A element doubled: layout-independent
        lines += ["  .reg .b32 %two;", "  mov.b32 %two, 0x40004000;"]      # (2.0, 2.0) in f16x2
        lines += [f"  mul.rn.f16x2 {areg}{i}, {areg}{i}, %two;" for i in range(na)]
    lines += [f"  wmma.mma{mma_mods['head']}.sync.aligned.{la}.{lb}.{shape}{mma_mods['tail']} "
              f"{_vec(dp_decl, nd)}, {_vec(areg, na)}, {_vec(breg, nb)}, {_vec(cp_decl, nc)};",
              f"  wmma.store.d.sync.aligned.{ld}.{shape}.global.{dtype} [%rd4], {_vec(dp_decl, nd)}{sd};",
              "  ret;", "}"]
    return "\n".join(lines) + "\n"


def _stored(mat: np.ndarray, layout: str, stride: int | None) -> np.ndarray:
    """The matrix as memory holds it (with ``stride`` elements between rows /
    columns; padding is garbage that must not be read)."""
    m = mat if layout == "row" else mat.T
    lead = stride or m.shape[1]
    out = np.full((m.shape[0], lead), 99, dtype=mat.dtype)
    out[:, :m.shape[1]] = m
    return out.reshape(-1)


def _read(buf: np.ndarray, rows: int, cols: int, layout: str, stride: int | None) -> np.ndarray:
    r, c = (rows, cols) if layout == "row" else (cols, rows)
    m = buf.reshape(r, stride or c)[:, :c]
    return m if layout == "row" else m.T


def _dims(shape: str) -> tuple[int, int, int]:
    m, rest = shape[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _run(shape, atype, ctype, dtype, la, lb, lc, ld, strides=(None,) * 4, mods=None, target="sm_90a",
         version="8.0", scale_a=False, seed=0):
    rng = np.random.default_rng(seed)
    m, n, k = _dims(shape)
    btype = atype
    if atype in ("s8", "u8"):
        lo, hi = (-128, 128) if atype == "s8" else (0, 256)
        A, B = rng.integers(lo, hi, (m, k)), rng.integers(lo, hi, (k, n))
    else:
        A, B = rng.integers(-8, 8, (m, k)) / 4, rng.integers(-8, 8, (k, n)) / 4
    C = rng.integers(-50, 50, (m, n)) * (1 if ctype == "s32" else 0.5)
    mods = mods or {"head": "", "tail": f".{dtype}.{ctype}"}
    text = _kernel(shape, atype, btype, ctype, dtype, la, lb, lc, ld, strides, mods, version, target,
                   scale_a)
    ptxas(text, target)
    dt = _NP[atype]
    bufs = [_stored(A.astype(dt), la, strides[0]), _stored(B.astype(dt), lb, strides[1]),
            _stored(C.astype(_NP[ctype]), lc, strides[2])]
    out = np.zeros(m * n if strides[3] is None else (n if ld == "col" else m) * strides[3], _NP[dtype])
    sim.launch(text, *bufs, out, grid=(1, 1, 1), block=(32, 1, 1))
    got = _read(out, m, n, ld, strides[3]).astype(np.float64)
    want = (2 * A if scale_a else A) @ B + C
    return got, want


_F16_SHAPES = ["m16n16k16", "m8n32k16", "m32n8k16"]


@pytest.mark.parametrize("shape", _F16_SHAPES)
@pytest.mark.parametrize("dtype,ctype", [("f32", "f32"), ("f16", "f16"), ("f32", "f16"), ("f16", "f32")])
def test_f16_every_shape_and_accumulator(shape, dtype, ctype):
    got, want = _run(shape, "f16", ctype, dtype, "row", "col", "row", "row")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("la,lb,lc,ld", [("col", "row", "col", "col"), ("row", "row", "col", "row"),
                                         ("col", "col", "row", "col")])
def test_layouts_and_strides(la, lb, lc, ld):
    got, want = _run("m16n16k16", "f16", "f32", "f32", la, lb, lc, ld, strides=(24, 40, 16, 20))
    np.testing.assert_array_equal(got, want)


def test_a_fragment_scaled_element_by_element():
    got, want = _run("m32n8k16", "f16", "f32", "f32", "row", "col", "row", "row", scale_a=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", _F16_SHAPES)
def test_bf16(shape):
    got, want = _run(shape, "bf16", "f32", "f32", "row", "col", "row", "row",
                     mods={"head": "", "tail": ".f32.bf16.bf16.f32"})
    np.testing.assert_array_equal(got, want)


def test_tf32():
    got, want = _run("m16n16k8", "tf32", "f32", "f32", "col", "row", "row", "col",
                     mods={"head": "", "tail": ".f32.tf32.tf32.f32"})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rnd", ["", ".rn", ".rz"])
def test_f64(rnd):
    got, want = _run("m8n8k4", "f64", "f64", "f64", "row", "col", "col", "row",
                     mods={"head": "", "tail": f"{rnd}.f64.f64.f64.f64"})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", _F16_SHAPES)
@pytest.mark.parametrize("t", ["s8", "u8"])
def test_int8(shape, t):
    got, want = _run(shape, t, "s32", "s32", "row", "col", "row", "row",
                     mods={"head": "", "tail": f".s32.{t}.{t}.s32"})
    np.testing.assert_array_equal(got, want)


def _subbyte_kernel(t: str, head: str) -> str:
    shape = "m8n8k32" if t != "b1" else "m8n8k128"
    return "\n".join([
        ".version 8.0", ".target sm_90a", ".address_size 64",
        ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)", "{",
        "  .reg .b64 %rd<5>; .reg .b32 %r<8>;",
        "  ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u64 %rd4, [pd];",
        f"  wmma.load.a.sync.aligned.row.{shape}.{t} {{%r0}}, [%rd1];",
        f"  wmma.load.b.sync.aligned.col.{shape}.{t} {{%r1}}, [%rd2];",
        f"  wmma.load.c.sync.aligned.row.{shape}.s32 {{%r2, %r3}}, [%rd3];",
        f"  wmma.mma{head}.sync.aligned.row.col.{shape}.s32.{t}.{t}.s32 {{%r4, %r5}}, {{%r0}}, {{%r1}}, {{%r2, %r3}};",
        f"  wmma.store.d.sync.aligned.row.{shape}.s32 [%rd4], {{%r4, %r5}};",
        "  ret;", "}", ""])


def _pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Rows of small integers packed little-endian, ``bits`` each, into bytes."""
    flat = (values.reshape(-1).astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)
    per = 8 // bits
    groups = flat.reshape(-1, per)
    return np.bitwise_or.reduce(groups << (np.arange(per) * bits).astype(np.uint8), axis=1).astype(np.uint8)


@pytest.mark.parametrize("t,head", [("s4", ""), ("u4", ""), ("b1", ".xor.popc"), ("b1", ".and.popc")])
def test_subbyte_and_single_bit(t, head):
    rng = np.random.default_rng(5)
    k = 32 if t != "b1" else 128
    bits = 4 if t != "b1" else 1
    lo, hi = {"s4": (-8, 8), "u4": (0, 16), "b1": (0, 2)}[t]
    A, B = rng.integers(lo, hi, (8, k)), rng.integers(lo, hi, (k, 8))
    C = rng.integers(-100, 100, (8, 8)).astype(np.int32)
    text = _subbyte_kernel(t, head)
    ptxas(text, "sm_90a")
    out = np.zeros(64, np.int32)
    sim.launch(text, _pack_bits(A, bits), _pack_bits(B.T, bits), C.reshape(-1), out,
               grid=(1, 1, 1), block=(32, 1, 1))
    if head == ".xor.popc":
        want = C + (A[:, None, :] ^ B.T[None, :, :]).sum(-1)
    else:
        want = C + A @ B
    np.testing.assert_array_equal(out.reshape(8, 8), want)


def test_a_misaligned_address_faults():
    text = _kernel("m16n16k16", "f16", "f16", "f32", "f32", "row", "col", "row", "row",
                   (None,) * 4, {"head": "", "tail": ".f32.f32"})
    a = np.zeros(16 * 16 + 8, np.float16)
    with pytest.raises(SimError, match="not 256-bit aligned"):
        sim.launch(text.replace("[%rd1]", "[%rd1+2]", 1), a, a, np.zeros(256, np.float32),
                   np.zeros(256, np.float32), grid=(1, 1, 1), block=(32, 1, 1))


def test_half_a_warp_faults():
    text = _kernel("m16n16k16", "f16", "f16", "f32", "f32", "row", "col", "row", "row",
                   (None,) * 4, {"head": "", "tail": ".f32.f32"})
    a = np.zeros(256, np.float16)
    with pytest.raises(SimError, match="16 of the 32 threads of a warp"):
        sim.launch(text, a, a, np.zeros(256, np.float32), np.zeros(256, np.float32),
                   grid=(1, 1, 1), block=(16, 1, 1))

"""pyptx helpers no example uses (``ptx.pipe``, ``ptx.expr``, ``ptx.raw``,
``PipeRef``) and the ones the Hopper high-performance GEMM needs
(``ptx.pipeline``, ``ptx.tma.*_3d``, remote mbarrier arrives, the padded
``tma_padding`` store descriptor): PTX text, ptxas, and the emulator
against numpy."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxptx.dsl._tma import describe_tma
from jaxptx.errors import PtxError, TraceError
from jaxptx.pyptx import Layout, Tile, kernel, ptx, reg
from jaxptx.pyptx.reg import PipeRef
from jaxptx.pyptx.types import b16, bf16, pred, u32


def _body(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.startswith("\t") and not ln.strip().startswith(".")]


@kernel(in_specs=(Tile(32, u32),), out_specs=(Tile(32, u32),), grid=(1, 1, 1), block=(32, 1, 1),
        arch="sm_90a")
def _helpers(X, Y):
    px, py = ptx.global_ptrs(X, Y)
    tid = reg.scalar(u32)
    ptx.inst.mov.u32(tid, ptx.special.tid.x())
    off = tid << 2
    x = reg.scalar(u32)
    ptx.raw(f"ld.global.u32 {x.name}, [{(px + off).name}];")
    a, b, c = reg.scalar(u32), reg.scalar(u32), reg.scalar(u32)
    chain = ptx.pipe(x).add.s32(a, 100).and_.b32(b, 0xFF).shr.u32(c, 1)
    assert chain.result is c
    p, q = reg.scalar(pred), reg.scalar(pred)
    both = p | q
    assert isinstance(both, PipeRef) and both.left is p and both.right is q
    ptx.inst.setp.lt.u32(both, tid, 16)            # p = tid < 16, q = !p
    with ptx.expr():
        r = (c + 1) ^ 0
    out = reg.scalar(u32)
    ptx.raw(f"selp.u32 {out.name}, {r.name}, 7, {p.name};\n"
            f"@{q.name} add.u32 {out.name}, {out.name}, 0x1000;")
    ptx.inst.st.global_.u32(ptx.addr(py + off), out)


def test_pipe_expr_raw_piperef_emit_and_run() -> None:
    body = _body(_helpers.ptx())
    assert "ld.global.u32 %r4, [%rd7];" in body
    assert body[body.index("ld.global.u32 %r4, [%rd7];") + 1:][:3] == [
        "add.s32 %r5, %r4, 100;", "and.b32 %r6, %r5, 255;", "shr.u32 %r7, %r6, 1;"]
    assert "setp.lt.u32 %p1|%p2, %r1, 16;" in body
    assert any(ln.startswith("@%p2 add.u32") and ln.endswith("4096;") for ln in body)
    res = _helpers.resources()
    assert res.spill_stores == 0 and res.spill_loads == 0
    x = np.arange(32, dtype=np.uint32) * 37
    got = np.asarray(jax.jit(_helpers)(x))
    lane = np.arange(32)
    want = np.where(lane < 16, (((x + 100) & 0xFF) >> 1) + 1, 7 + 0x1000)
    np.testing.assert_array_equal(got, want)


def test_raw_goes_through_the_table() -> None:
    @kernel(arch="sm_90a")
    def bad():
        ptx.raw("add.q32 %r1, %r1, 1;")
    with pytest.raises(PtxError, match="add"):
        bad.ptx()

    @kernel(arch="sm_90a")
    def junk():
        ptx.raw("@@ nonsense")
    with pytest.raises(TraceError, match=r"^ptx\.raw: cannot read '@@ nonsense' as a PTX statement, "
                                         r"at test_pyptx_helpers\.py:\d+"):
        junk.ptx()


def test_or_of_integer_registers_is_still_or() -> None:
    @kernel(arch="sm_90a")
    def k():
        a = reg.scalar(u32, init=1)
        b = reg.scalar(u32, init=2)
        c = a | b
        assert not isinstance(c, PipeRef)
    assert "or.b32 %r3, %r1, %r2;" in _body(k.ptx())


@kernel(in_specs=(Tile(8, u32),), out_specs=(Tile(8, u32),), grid=(1, 1, 1), block=(1, 1, 1),
        arch="sm_90a")
def _ring(X, Y):
    (py,) = ptx.global_ptrs(Y)
    pipe = ptx.pipeline(3)
    for i in range(8):                      # records (stage, phase) of 8 advances
        stage, phase = pipe.advance()
        v = (phase << 8) + stage
        ptx.inst.st.global_.u32(ptx.addr(py, 4 * i), v)


def test_pipeline_advances_a_ring_and_flips_the_phase() -> None:
    got = np.asarray(jax.jit(_ring)(np.zeros(8, np.uint32)))
    stages = [0, 1, 2, 0, 1, 2, 0, 1]
    phases = [0, 0, 0, 1, 1, 1, 0, 0]
    np.testing.assert_array_equal(got, [(p << 8) + s for s, p in zip(stages, phases)])


def test_tma_3d_wrappers_emit_pyptx_forms() -> None:
    @kernel(in_specs=(Tile("M", "K", bf16, Layout.TMA_128B, tma_box=(64, 64), tma_rank=3),),
            out_specs=(Tile("M", "K", bf16, Layout.ROW, tma_box=(64, 64), tma_rank=3, tma_padding=True),),
            grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1), arch="sm_90a", smem=20480,
            extern_smem="smem")
    def t(A, C):
        base = reg.scalar(u32)
        ptx.inst.mov.u32(base, "smem")
        bars = ptx.mbarrier.array(base, 18432, 1)
        row, col = reg.scalar(u32, init=0), reg.scalar(u32, init=64)
        ptx.tma.load_3d(dst=base, src=A.tma_desc(), row=row, col=col, mbar=bars[0])
        mask = reg.scalar(b16, init=3)
        ptx.tma.load_3d_multicast(dst=base, src=A.tma_desc(), coords=(0, row, 1), mbar=bars[0],
                                  mask=mask, issuer=0)
        bars.arrive_remote_all(row, 1)
        ptx.tma.store_3d(dst=C.tma_desc(), src=base, row=row, col=128)
    body = "\n".join(_body(t.ptx(M=128, K=128)))
    assert "shr.u32" in body                          # col (a register) / 64
    assert ".multicast::cluster" in body and "mapa.shared::cluster.u32" in body
    assert "mbarrier.arrive.shared::cluster.b64 _," in body
    assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in body
    res = t.resources(M=128, K=128)
    assert res.spill_stores == 0


def test_padded_store_descriptor() -> None:
    """pyptx's padded C descriptor: the (N, M) array as (M/64, N, 64), the
    box's innermost dim 64 + 8 (shared rows of 72 elements)."""
    spec = Tile("N", "M", bf16, Layout.ROW, tma_box=(256, 64), tma_rank=3, tma_padding=True)
    d = describe_tma("C", 3, spec, (512, 256), "C_tma", "k")
    assert d.shape == (4, 512, 64) and d.strides == (128, 512, 2)
    assert d.box == (1, 256, 72) and d.swizzle == 0

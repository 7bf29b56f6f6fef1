"""The pyptx surface itself: module layout, the widening rules (as pyptx's
emitted PTX has them), wrappers, kloop, intrinsic, detect_arch."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx
from jaxptx import Kernel
from jaxptx.pyptx import Layout, Tile, detect_arch, intrinsic, kernel, ptx, reg, smem, specs, types
from jaxptx.pyptx.types import b64, f32, s32, u32, u64


def _body(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.startswith("\t") and not ln.strip().startswith(".")]


def test_modules_and_kernel_objects() -> None:
    from jaxptx.pyptx.specs import Tile as T2
    assert T2 is Tile and specs.Layout is Layout and types.f32 is f32
    assert Tile.wgmma_a(64, 64, jaxptx.types.bf16).layout is Layout.TMA_128B
    assert Tile.wgmma_a(64, 16, jaxptx.types.bf16, tile_m=64).tma_box == (64, 16)
    assert Tile.wgmma_b(16, 8, jaxptx.types.bf16).layout is Layout.ROW

    @kernel(arch="sm_90a")
    def k():
        ptx.ret()
    assert isinstance(k, Kernel)
    assert isinstance(detect_arch(), str) and detect_arch().startswith("sm_")


def test_widening_rules_follow_pyptx() -> None:
    @kernel(arch="sm_80")
    def w():
        p = reg.scalar(b64, init=0)
        i = reg.scalar(u32, init=3)
        s = reg.scalar(s32, init=-1)
        q = p + i                  # cvt.u64.u32 + add.s64
        q -= i                     # sub.s64 in place (after a cvt)
        q2 = i + reg.scalar(u64, init=5)   # 32 + 64: the left is widened
        j = i * 4                  # mul.lo.s32 (u32 result)
        k = i * i                  # mul.lo.u32
        m = s >> 1                 # pyptx: always the logical shr.u32
        n = i.max(7)
        ptx.ret()
        assert q.dtype is b64 and q2.dtype is u64 and j.dtype is u32 and m.dtype is s32
        assert k.dtype is u32 and n.dtype is u32
    body = _body(w.ptx())
    assert body[3:] == [
        "cvt.u64.u32 %rd3, %r1;", "add.s64 %rd2, %rd1, %rd3;",
        "cvt.u64.u32 %rd4, %r1;", "sub.s64 %rd2, %rd2, %rd4;",
        "mov.u64 %rd5, 5;", "cvt.u64.u32 %rd6, %r1;", "add.s64 %rd7, %rd6, %rd5;",
        "mul.lo.s32 %r3, %r1, 4;", "mul.lo.u32 %r4, %r1, %r1;", "shr.u32 %r5, %r2, 1;",
        "max.u32 %r6, %r1, 7;", "ret;"]


def test_keyword_wrappers_emit_documented_forms() -> None:
    @kernel(arch="sm_90a", block=(128, 1, 1))
    def k():
        bar = smem.mbarrier(2)
        ptx.mbarrier.init(bar[0], 1)
        ptx.fence.proxy_async_shared_cta()
        ptx.mbarrier.arrive_expect_tx(bar[1], 256)
        ptx.mbarrier.wait(bar[0], 0)
        ptx.wgmma.fence()
        ptx.wgmma.commit_group()
        ptx.wgmma.wait_group(0)
        ptx.ret()
    text = k.ptx()
    for line in ["mbarrier.init.shared::cta.b64 [mbar_0], 1;", "fence.proxy.async.shared::cta;",
                 "mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [mbar_0+8], 256;",
                 "mbarrier.try_wait.parity.shared.b64 %p1, [mbar_0], 0;", "wgmma.fence.sync.aligned;",
                 "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;"]:
        assert line in text, line
    assert k.resources().spill_stores == 0


def test_shared_2d_items_base_load_store() -> None:
    @kernel(in_specs=(Tile(4, 8, f32),), out_specs=(Tile(4, 8, f32),), block=(32, 1, 1),
            arch="sm_80", extern_smem=True, smem=4 * 8 * 4)
    def transpose_via_smem(X, Y):
        t = smem.alloc(f32, (8, 4))
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.from_(ptx.special.tid.x(), u32)
        r, c = tid >> 3, tid & 7
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + tid * 4))
        t[c, r] = v
        ptx.bar.sync(0)
        base = smem.base()
        w = smem.load(f32, base + ((c * 4 + r) * 4))      # the same element, by address
        smem.store(f32, base + ((c * 4 + r) * 4), w)
        ptx.inst.st.global_.f32(ptx.addr(py + tid * 4), t[c, r])
        ptx.ret()
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    y = np.zeros_like(x)
    jaxptx.sim.launch(transpose_via_smem, x, y)
    np.testing.assert_array_equal(y, x)
    assert ".extern .shared .align 1024 .b8 global_smem[];" in transpose_via_smem.ptx()


@pytest.mark.parametrize("n", [0, 1, 3, 4, 9])
def test_kloop_runs_body_total_times(n: int) -> None:
    @kernel(in_specs=(Tile(1, u32),), out_specs=(Tile(1, u32),), block=(1, 1, 1), arch="sm_80")
    def count(N, OUT):
        pn, po = ptx.global_ptrs(N, OUT)
        total = reg.scalar(u32)
        ptx.inst.ld.global_.u32(total, ptx.addr(pn))
        acc = reg.scalar(u32, init=0)

        def body() -> None:
            ptx.inst.add.u32(acc, acc, 1)
        ptx.kloop(total, unroll=4, body=body)
        ptx.inst.st.global_.u32(ptx.addr(po), acc)
        ptx.ret()
    out = np.zeros(1, np.uint32)
    jaxptx.sim.launch(count, np.array([n], np.uint32), out)
    assert out[0] == n


def test_intrinsic_brackets_its_instructions() -> None:
    @intrinsic
    def twice(r):
        r += r
        return r

    @kernel(arch="sm_80")
    def k():
        twice(reg.scalar(u32, init=1))
        ptx.ret()
    body = _body(k.ptx())
    i = body.index("// BEGIN twice")
    assert body[i + 1].startswith("add.u32") and body[i + 2] == "// END twice"
    assert ptx.intrinsic is intrinsic


def test_errors_point_at_the_users_line() -> None:
    @kernel(arch="sm_80")
    def bad():
        x = reg.scalar(f32, init=1.0)
        ptx.inst.add.u64(x, x, x)
    with pytest.raises(jaxptx.PtxError, match="test_pyptx_surface.py"):
        bad.ptx()


def test_seed_getting_started_kernel_verbatim() -> None:
    from jaxptx.pyptx import kernel, ptx, reg   # the seed's imports, renamed
    from jaxptx.pyptx.types import u32

    @kernel(arch="sm_90a")
    def tiny():
        tid = reg.from_(ptx.special.tid.x(), u32)
        x = tid + 1
        ptx.inst.mov.u32(tid, x)
        ptx.ret()
    assert "add.u32" in tiny.ptx() and tiny.resources().spill_stores == 0


def test_a_pyptx_kernel_is_a_jax_primitive() -> None:
    import jax
    import jax.numpy as jnp
    import sys as _sys
    _sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_pyptx_kernels import build_axpb
    k = build_axpb(2, 32, 2.0, 1.0)
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    assert len(jax.make_jaxpr(k)(x).eqns) == 1
    xs = np.stack([x, -x])
    np.testing.assert_array_equal(np.asarray(jax.vmap(k)(xs)), 2 * xs + 1)
    text = jax.jit(k).trace(jnp.asarray(x)).lower(lowering_platforms=("cuda",)).as_text()
    assert "jaxptx_launch" in text


def test_docstrings() -> None:
    import doctest
    import inspect

    import jaxptx.pyptx as pkg
    from jaxptx.pyptx import _ampere, _escape, _hopper, _pipeline, _regs, _tcgen05
    from jaxptx.pyptx import kernel as kmod
    assert doctest.testmod(pkg, optionflags=doctest.ELLIPSIS).failed == 0
    for mod in (pkg, ptx, reg, smem, specs, kmod, _regs, _hopper, _ampere, _tcgen05, _pipeline, _escape):
        assert inspect.getdoc(mod), mod
        for name in getattr(mod, "__all__", ()):
            assert inspect.getdoc(getattr(mod, name)), f"{mod.__name__}.{name}"


def test_stage_slices_address_their_stage() -> None:
    @kernel(arch="sm_90a", block=(32, 1, 1))
    def k():
        s = smem.alloc(f32, (2, 4))
        v = reg.scalar(f32, init=1.0)
        ptx.inst.st.shared.f32(ptx.addr(s[0]), v)
        ptx.inst.st.shared.f32(ptx.addr(s[1]), v)          # pyptx 0.1.1 writes [smem_0] here
        i = reg.scalar(u32, init=1)
        ptx.inst.st.shared.f32(ptx.addr(s[i]), v)          # a register stage: computed
        ptx.ret()
    text = k.ptx()
    assert "st.shared.f32 [smem_0], %f1;" in text and "st.shared.f32 [smem_0+16], %f1;" in text
    assert "mul.lo.u32" in text

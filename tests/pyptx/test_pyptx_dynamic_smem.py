"""Shared buffers past 48 KB, allocated the way pyptx does: a kernel whose
``smem.alloc``/``smem.mbarrier`` buffers come to more than CUDA's static
limit (and that passes no ``smem=``) is traced again with every buffer
carved from ``.extern .shared .align 1024 .b8 dyn_smem[]``, and the launch
asks for the carved bytes as dynamic shared memory (pyptx 0.1.1,
``Kernel._trace``: ``use_dynamic_smem = total_smem > 48 * 1024``)."""

from __future__ import annotations

import numpy as np
import pytest

import jaxptx
from jaxptx.pyptx import Tile, kernel, ptx, reg, smem
from jaxptx.pyptx.smem import CarvedName
from jaxptx.pyptx.types import f32, u32
from jaxptx.runtime import ptxas

N = 128


def _build(floats: int):
    """Copy X, reversed, to Y through two shared buffers of ``floats`` f32
    each (the second written through ``mov.b32 r, sB.name``, as pyptx's
    flash attention addresses its P tile, and read through ``sB.base``),
    with an mbarrier after them."""
    @kernel(in_specs=(Tile(N, f32),), out_specs=(Tile(N, f32),), grid=(1, 1, 1), block=(N, 1, 1),
            arch="sm_90a")
    def staged(X, Y):
        sA = smem.alloc(f32, (floats,))
        sB = smem.alloc(f32, (floats,))
        bar = smem.mbarrier(1)
        px, py = ptx.global_ptrs(X, Y)
        tid = reg.scalar(u32)
        ptx.inst.mov.u32(tid, ptx.special.tid.x())
        off = tid * 4
        v = reg.scalar(f32)
        ptx.inst.ld.global_.f32(v, ptx.addr(px + off))
        a = reg.scalar(u32)
        ptx.inst.mov.u32(a, sA.base)
        ptx.inst.st.shared.f32(ptx.addr(a + off), v)
        with ptx.if_(tid == 0):
            ptx.mbarrier.init(bar[0], 1)
        ptx.bar.sync(0)
        w = reg.scalar(f32)
        ptx.inst.ld.shared.f32(w, ptx.addr(a + ((N - 1) * 4 - off)))    # another thread's value
        b = reg.scalar(u32)
        ptx.inst.mov.b32(b, sB.name)
        b_end = b + (floats - N) * 4                                    # the far end of sB
        ptx.inst.st.shared.f32(ptx.addr(b_end + off), w)
        ptx.bar.sync(0)
        sb = reg.scalar(u32)
        ptx.inst.mov.u32(sb, sB.base)                                    # read back through sB itself
        ptx.inst.ld.shared.f32(w, ptx.addr(sb + ((floats - N) * 4) + off))
        ptx.inst.st.global_.f32(ptx.addr(py + off), w)
        ptx.ret()
    return staged


def test_buffers_past_48_kib_are_carved_from_one_extern_array():
    k = _build(8192)                    # 2 x 32 KiB + an mbarrier
    text = k.ptx()
    assert ".extern .shared .align 1024 .b8 dyn_smem[];" in text
    assert "\n.shared" not in text                                    # no static buffer left
    assert "mov.b32 %r" in text and ", dyn_smem+32768;" in text        # sB.name is sB's own start
    assert k.specialize().smem == 2 * 32768 + 8                       # the launch asks for every byte
    ptxas(text, "sm_90a")


def test_buffers_within_48_kib_stay_static():
    text = _build(1024).ptx()
    assert "dyn_smem" not in text and ".shared .align 128 .b8 smem_1[4096];" in text


@pytest.mark.parametrize("floats", [1024, 8192])
def test_the_emulator_runs_both(floats):
    x = np.arange(N, dtype=np.float32)
    y = np.zeros(N, np.float32)
    jaxptx.sim.launch(_build(floats), x, y)
    np.testing.assert_array_equal(y, x[::-1])


def test_a_carved_name_is_the_extern_symbol_as_a_string():
    name = CarvedName("dyn_smem", 4096)
    assert name == "dyn_smem" and name.offset == 4096

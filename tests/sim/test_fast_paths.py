"""The emulator's fast paths give what the general paths give: registers
adopted without copies never alias, cached per-shape tables (special
registers, shuffle sources, fragment permutations) follow the launch shape,
and a launch frees its machine at once."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.semantics import fragments as _fragments
from jaxptx.sim.core.machine import Machine

HEAD = ".version 8.5\n.target sm_80\n.address_size 64\n"

ALIASES = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .pred %p<3>; .reg .b32 %r<8>; .reg .b64 %rd<8>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %r1;
    mov.u32 %r3, %tid.x;
    setp.lt.u32 %p1, %r1, 16;
    mov.pred %p2, %p1;
    @%p1 add.u32 %r1, %r1, 100;
    @%p1 add.u32 %r3, %r3, 1000;
    @%p2 setp.ne.u32 %p1, %r1, %r1;
    selp.u32 %r4, 1, 0, %p2;
    mov.u32 %r5, %tid.x;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r5, 20;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    st.global.u32 [%rd3+4], %r2;
    st.global.u32 [%rd3+8], %r3;
    st.global.u32 [%rd3+12], %r4;
    st.global.u32 [%rd3+16], %r5;
    ret;
}"""


def test_partial_writes_never_reach_a_copied_register() -> None:
    """mov copies, guarded writes land in one register only, and the cached
    %tid.x stays intact for the next launch."""
    for _ in range(2):
        out = np.zeros((64, 5), np.uint32)
        sim.launch(ALIASES, out, block=(64, 1, 1))
        tid = np.arange(64, dtype=np.uint32)
        low = tid < 16
        np.testing.assert_array_equal(out[:, 0], np.where(low, tid + 100, tid))
        np.testing.assert_array_equal(out[:, 1], tid)
        np.testing.assert_array_equal(out[:, 2], np.where(low, tid + 1000, tid))
        np.testing.assert_array_equal(out[:, 3], low.astype(np.uint32))
        np.testing.assert_array_equal(out[:, 4], tid)


SHFL = HEAD + """.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<5>; .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    shfl.sync.{mode}.b32 %r2, %r1, {b}, {c}, 0xFFFFFFFF;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r3, %r3, %r4, %r1;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r3, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}"""


@pytest.mark.parametrize("mode,b,c,want", [
    ("bfly", 1, 31, lambda lane: lane ^ 1),
    ("bfly", 16, 31, lambda lane: lane ^ 16),
    ("down", 4, 31, lambda lane: np.where(lane + 4 <= 31, lane + 4, lane)),
    ("idx", 3, 31, lambda lane: np.full_like(lane, 3)),
])
@pytest.mark.parametrize("block", [32, 64, 96])
def test_shfl_sources_follow_the_launch_shape(mode, b, c, want, block) -> None:
    out = np.zeros(2 * block, np.uint32)
    sim.launch(SHFL.replace("{mode}", mode).replace("{b}", str(b)).replace("{c}", str(c)),
               out, grid=(2, 1, 1), block=(block, 1, 1))
    tid = np.tile(np.arange(block), 2)
    lane = tid % 32
    np.testing.assert_array_equal(out, tid - lane + want(lane))


def _reference_gather(frag, slot, rank, count, layout, dims):
    grp, row, col = layout
    out = np.zeros((count,) + dims, dtype=frag.dtype)
    for i in range(len(frag)):
        for e in range(frag.shape[1]):
            out[slot[i], grp[rank[i], e], row[rank[i], e], col[rank[i], e]] = frag[i, e]
    return out


@pytest.mark.parametrize("shape,which,dtype,major,dims", [
    ("m16n8k16", "a", "bf16", "row", (1, 16, 16)),
    ("m16n8k16", "b", "f16", "col", (1, 16, 8)),
    ("m16n8k16", "c", "f32", "", (1, 16, 8)),
    ("m16n8k8", "a", "tf32", "row", (1, 16, 8)),
    ("m16n8k32", "a", "s8", "row", (1, 16, 32)),
    ("m8n8k4", "a", "f16", "row", (4, 8, 4)),
])
def test_gather_and_scatter_in_order_match_the_index_maps(shape, which, dtype, major, dims) -> None:
    layout = _fragments.mma_layout(shape, which, dtype, major)
    count = 3
    n = 32 * count
    rng = np.random.default_rng(0)
    frag = rng.standard_normal((n, layout[0].shape[1]))
    slot, rank = np.arange(n) // 32, np.arange(n) % 32
    want = _reference_gather(frag, slot, rank, count, layout, dims)
    got = _fragments.gather(frag, slot, rank, count, layout, dims)
    if _fragments._permutation(layout, dims) is not None:
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(_fragments.scatter(got, slot, rank, layout), frag)
    # out of order: the general path
    order = rng.permutation(n)
    np.testing.assert_array_equal(
        _fragments.gather(frag[order], slot[order], rank[order], count, layout, dims),
        _reference_gather(frag[order], slot[order], rank[order], count, layout, dims))


def _machines() -> set[int]:
    # type(), not isinstance(): the latter asks each object's __class__,
    # which some modules' deprecated objects answer with a warning
    return {id(o) for o in gc.get_objects() if issubclass(type(o), Machine)}


def test_a_launch_frees_its_machine() -> None:
    """Reference counting alone frees a launch's machine (no cycle left for
    the collector): no Machine this launch made is alive after it."""
    out = np.zeros(64 * 5, np.uint32)
    gc.collect()
    gc.disable()
    try:
        before = _machines()       # any a test before this one still holds
        sim.launch(ALIASES, out, block=(64, 1, 1))
        assert _machines() - before == set()
    finally:
        gc.enable()

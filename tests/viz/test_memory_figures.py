"""jaxptx.viz swizzle, TMA-box and pipeline figures against the emulator
(``tma.swizzle``, a real ``cp.async.bulk.tensor`` run, mbarrier words
after a Hopper GEMM) and independent formulas."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxptx import sim, viz                                   # noqa: E402
from jaxptx.dsl import fragments as dslf                       # noqa: E402
from jaxptx.sim.semantics.tma import swizzle            # noqa: E402


def _close(fig) -> None:
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("span", [32, 64, 128])
def test_swizzle_pattern_is_the_emulator_swizzle_and_the_dsl_swizzle(span: int) -> None:
    fig = viz.swizzle_pattern(span, rows=16)
    chunks = span // 16
    assert fig.data.shape == (16, chunks)
    for r in range(16):
        assert sorted(fig.data[r]) == list(range(chunks))       # a permutation of the row's chunks
        for c in range(chunks):
            landed = int(swizzle(np.array([r * span + 16 * c], np.uint64), span)[0])
            assert landed == r * span + 16 * fig.data[r, c]
            assert dslf.swizzle(r, 16 * c, bytes=span) == landed
    # The closed form (PTX ISA, the shared-memory swizzling modes; CUTLASS's
    # Swizzle<log2(span / 16), 4, 3>): byte address bits 7.. of the row, masked
    # to the span's chunk count, XOR the 16-byte chunk index.
    r, c = np.arange(16)[:, None], np.arange(chunks)[None, :]
    np.testing.assert_array_equal(fig.data, c ^ ((r * span // 128) % chunks))
    if span == 128:                                              # chunk ^ row % 8
        assert (fig.data == np.arange(8)[None, :] ^ (np.arange(16)[:, None] % 8)).all()
    with pytest.raises(ValueError, match="span must be 32, 64 or 128"):
        viz.swizzle_chunks(16)
    _close(fig)


def _box_reference(shape, box, coords, w: int, span: int) -> np.ndarray:
    """numpy: box element (i, j) reads tensor (r0 + i, c0 + j) when inside,
    and lands at the swizzled byte offset of its dense position."""
    out = np.full(box[0] * box[1], -1)
    for i in range(box[0]):
        for j in range(box[1]):
            r, c = coords[0] + i, coords[1] + j
            dense = (i * box[1] + j) * w
            slot = (dense ^ (((dense >> 7) & (span // 16 - 1)) << 4) if span else dense) // w
            out[slot] = r * shape[1] + c if 0 <= r < shape[0] and 0 <= c < shape[1] else -1
    return out.reshape(box)


@pytest.mark.parametrize("shape, box, coords, dtype, w, span", [
    ((12, 40), (8, 32), (6, 16), "f32", 4, 128),
    ((20, 64), (16, 32), (-3, 40), "bf16", 2, 64),
    ((9, 16), (4, 8), (2, 4), "f32", 4, 32),
    ((9, 16), (4, 8), (2, 4), "f32", 4, 0),
])
def test_tma_box_matches_numpy_and_an_emulator_copy(shape, box, coords, dtype, w, span) -> None:
    fig = viz.tma_box(shape, box, coords, dtype, span)
    np.testing.assert_array_equal(fig.data, _box_reference(shape, box, coords, w, span))
    _close(fig)


def test_tma_box_data_is_what_a_tensor_copy_writes() -> None:
    """An emulator TMA load of a tensor of its own flat indices (+1, so the
    zero fill reads as -1 after subtracting) into a 128B-swizzled tile."""
    shape, box, coords = (12, 40), (8, 32), (6, 16)
    tensor = (np.arange(12 * 40, dtype=np.float32) + 1).reshape(shape)
    out = np.zeros(box, np.float32)
    dev = sim.Device()
    src, dst = dev.to_device(tensor), dev.to_device(out)
    desc = sim.tensor_map(src, shape, np.float32, box=box, swizzle=128)
    ptx = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 tm[128], .param .u64 out)
{
    .shared .align 1024 .b8 tile[1024];
    .shared .align 8 .b64 bar;
    .reg .u64 %t, %o, %p, %v;
    .reg .u32 %i, %b, %s;
    .reg .pred %done, %first;
    mov.u32 %i, %tid.x;
    setp.eq.u32 %first, %i, 0;
    mov.u32 %b, bar;
    mov.u32 %s, tile;
    @%first mbarrier.init.shared::cta.b64 [%b], 1;
    @%first mbarrier.arrive.expect_tx.shared::cta.b64 _, [%b], 1024;
    mov.u64 %t, tm;
    cvta.param.u64 %t, %t;
    @%first cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%s], [%t, {16, 6}], [%b];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %done, [%b], 0;
    @!%done bra WAIT;
    ld.param.u64 %o, [out];
    ld.shared.v2.u64 {%p, %v}, [tile];
    mul.wide.u32 %t, %i, 16;
    add.u64 %o, %o, %t;
    cvt.u64.u32 %p, %i;
    mul.lo.u64 %p, %p, 16;
    cvt.u32.u64 %s, %p;
    mov.u32 %b, tile;
    add.u32 %s, %s, %b;
    ld.shared.v2.u64 {%p, %v}, [%s];
    st.global.v2.u64 [%o], {%p, %v};
    ret;
}
"""
    dev.launch(ptx, [desc, dst], grid=(1, 1, 1), block=(64, 1, 1))
    got = dev.from_device(dst, like=out).astype(np.int64) - 1
    np.testing.assert_array_equal(got, _box_reference(shape, box, coords, 4, 128))
    np.testing.assert_array_equal(got, viz.tma_box_data(shape, box, coords, "f32", 128))


def kinds_tma_expected() -> int:
    """Per CTA: the producer's A and B loads for each of 8 K blocks, then the
    epilogue's 4 store boxes, issued by both consumer leaders in one step."""
    return 2 * 8 + 4


def test_pipeline_timeline_of_a_hopper_gemm() -> None:
    """Hopper GEMM, one tile, K = 8 blocks over a 4-stage ring: per CTA each
    full barrier completes twice (phases 1, 0), the empty barriers once or
    twice, every flip alternates; MMAs: 8 blocks x 4
    k-steps, one event per step."""
    from jaxptx.kernels._matmul_sm90 import BK, STAGES, matmul_sm90
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 128, 8 * BK)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1, 8 * BK, 128)).astype(ml_dtypes.bfloat16)
    with viz.record_pipeline() as trace:
        c = np.asarray(matmul_sm90(a, b))
    np.testing.assert_allclose(c[0], a[0].astype(np.float64) @ b[0].astype(np.float64), rtol=1e-4, atol=1e-3)
    assert trace.launches >= 1
    fig = viz.pipeline_timeline(trace, cta=0)
    flips, events = fig.data, fig.events
    bars = sorted({off for n, c_, off in trace.barriers if n == 0 and c_ == 0})
    assert len(bars) == 2 * STAGES
    full = bars[:STAGES]                     # the Pipeline allocates full[] then empty[]
    for off in bars:
        phases = flips[flips[:, 1] == off][:, 2]
        assert list(phases) == [1 - k % 2 for k in range(len(phases))]
    for off in full:
        assert len(flips[flips[:, 1] == off]) == 8 // STAGES
    kinds = {name: int((events[:, 1] == viz.KIND_CODES.index(name)).sum()) for name in viz.KIND_CODES}
    # One event per step: both consumer warpgroups issue each wgmma at the same PC.
    assert kinds["MMA issue"] == 8 * (BK // 16)
    assert kinds["TMA copy"] == kinds_tma_expected()
    assert (np.diff(flips[:, 0]) >= 0).all()
    _close(fig)

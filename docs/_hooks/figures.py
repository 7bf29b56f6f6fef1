"""The site's figures: each drawn by ``jaxptx.viz`` when the site is built
(nothing is committed as a PNG)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jaxptx import viz


def close(fig: Any) -> None:
    """Free a figure after it is saved."""
    import matplotlib.pyplot as plt
    plt.close(fig)


def _gemm_timeline(arch: str) -> Any:
    """A one-tile GEMM (K = 8 blocks) recorded on the emulator, its full and
    empty barriers named."""
    import ml_dtypes
    rng = np.random.default_rng(0)
    if arch == "sm_90a":
        from jaxptx.kernels._matmul_sm90 import BK, STAGES, matmul_sm90 as run
        m, n = 128, 128
    else:
        from jaxptx.kernels._matmul_sm100 import BK, STAGES, matmul_sm100 as run
        m, n = 128, 128
    a = rng.standard_normal((1, m, 8 * BK)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1, 8 * BK, n)).astype(ml_dtypes.bfloat16)
    with viz.record_pipeline() as trace:
        np.asarray(run(a, b))
    offs = sorted({off for launch, cta, off in trace.barriers if launch == 0 and cta == 0})
    names = {off: (f"full[{k}]" if k < STAGES else f"empty[{k - STAGES}]") if k < 2 * STAGES else "done"
             for k, off in enumerate(offs)}
    return viz.pipeline_timeline(trace, cta=0, names=names, title=f"{arch} GEMM, 1 tile, K = 8 x {BK}")


def _transpose_profile(pad: int) -> Any:
    """The profile of the profiling guide's kernel: a 32 x 32 f32 transpose
    through shared memory whose rows hold ``32 + pad`` floats (pad 0: every
    column read is a 32-way bank conflict)."""
    from jaxptx import Tile, kernel, profile, ptx, smem
    from jaxptx.types import f32

    @kernel(in_specs=(Tile(32, 32, f32),), out_specs=(Tile(32, 32, f32),),
            grid=(1, 1, 1), block=(32, 32, 1), arch="sm_90a")
    def transpose(x, y, *, pad=0):
        stride = 32 + pad
        tile = smem.alloc(f32, 32 * stride)
        c, r = ptx.special.tid.x(), ptx.special.tid.y()
        ptx.st.shared.f32(tile[r * stride + c], ptx.ld.global_.f32(x.ptr + ptx.mul.wide.u32(r * 32 + c, 4)))
        ptx.bar.sync(0)
        v = ptx.ld.shared.f32(tile[c * stride + r])
        ptx.st.global_.f32(y.ptr + ptx.mul.wide.u32(r * 32 + c, 4), v)

    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    return profile(transpose, x, np.zeros_like(x), pad=pad, resources=False)


def _node_ring() -> Any:
    """The collectives guide's ring all-gather (examples/node_allgather.py)
    on 8 emulated GPUs, recorded by a ``viz.NodeRecorder``."""
    import importlib.util
    import pathlib
    from jaxptx.sim import System
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "node_allgather.py"
    spec = importlib.util.spec_from_file_location("_jaxptx_docs_node_allgather", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    n, threads = 8, example.THREADS
    node = System(n)
    node.enable_peer_access()
    outs, flags = [], []
    for d in node.devices:
        mine = np.zeros((n, threads), np.uint32)
        mine[d.index] = d.index
        outs.append(d.to_device(mine))
        flags.append(d.alloc(4))
    recorder = viz.NodeRecorder(node)
    text = example.ring_allgather.ptx(n=n)
    node.launch([dict(device=r, source=text, block=threads,
                      params=[outs[r], outs[(r + 1) % n], flags[r], flags[(r + 1) % n], r]) for r in range(n)],
                observers=[recorder])
    return viz.node_timeline(recorder.trace, title="ring all-gather on 8 emulated GPUs")


FIGURES: dict[str, Callable[[], Any]] = {
    "images/mma_m16n8k16_a.png": lambda: viz.mma_fragment("m16n8k16", "a", "f16"),
    "images/mma_m16n8k16_b.png": lambda: viz.mma_fragment("m16n8k16", "b", "f16"),
    "images/mma_m16n8k16_c.png": lambda: viz.mma_fragment("m16n8k16", "c", "f32"),
    "images/wgmma_d_n16.png": lambda: viz.wgmma_fragment(16, rows=32),
    "images/ldmatrix_x4.png": lambda: viz.ldmatrix_map("m8n8", False, 4),
    "images/ldmatrix_trans.png": lambda: viz.ldmatrix_map("m8n8", True, 1),
    "images/tcgen05_ld_32x32b.png": lambda: viz.tcgen05_ld_map("32x32b", 4),
    "images/tcgen05_ld_16x256b.png": lambda: viz.tcgen05_ld_map("16x256b", 2),
    "images/swizzle_128.png": lambda: viz.swizzle_pattern(128),
    "images/swizzle_64.png": lambda: viz.swizzle_pattern(64),
    "images/swizzle_32.png": lambda: viz.swizzle_pattern(32),
    "images/tma_box.png": lambda: viz.tma_box((12, 40), (8, 32), (6, 16), "f32", 128),
    "images/pipeline_sm90.png": lambda: _gemm_timeline("sm_90a"),
    "images/pipeline_sm100.png": lambda: _gemm_timeline("sm_100a"),
    "images/profile_heatmap.png": lambda: _transpose_profile(0).heatmap(),
    "images/profile_bank_map.png": lambda: _transpose_profile(0).bank_map("ld.shared"),
    "images/profile_bank_map_padded.png": lambda: _transpose_profile(1).bank_map("ld.shared"),
    "images/node_ring_allgather.png": _node_ring,
}

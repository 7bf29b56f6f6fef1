"""Kernels that copy through TMA descriptors the runtime builds per call
(shared by the TMA call tests and their GPU twins)."""

from __future__ import annotations

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.types import bf16, f32, u32

THREADS = 128


def _load(tile, desc_addr, coords, bar, nbytes: int) -> None:
    """Thread 0 arms ``bar`` and issues one TMA load of ``nbytes``; every
    thread waits for it."""
    tid = ptx.special.tid.x()
    with ptx.if_(tid == 0):
        ptx.mbarrier.init.shared.b64(bar[0], 1)
        ptx.fence.mbarrier_init.release.cluster()
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], nbytes)
        op = (ptx.cp.async_.bulk.tensor._3d if len(coords) == 3 else ptx.cp.async_.bulk.tensor._2d)
        op.shared__cluster.global_.tile.mbarrier__complete_tx__bytes(
            tile, ptx.addr(desc_addr, coords=coords), bar[0])
    done = reg.pred(init=0)
    for _ in ptx.while_(lambda: ~done):
        ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], 0)


@kernel(in_specs=(Tile("M", "N", f32, Layout.TMA_128B, tma_box=(32, 32)),),
        out_specs=(Tile("M", "N", f32, Layout.TMA_128B, tma_box=(32, 32)),),
        grid=lambda M, N: (N // 32, M // 32, 1), block=(THREADS, 1, 1), arch="sm_90a", batch="z")
def tma_scale(x, y, *, scale=2.0):
    """``y = x * scale + 1``, tile by tile: a TMA load (128-byte swizzle) into
    shared memory, the arithmetic in place, a TMA store back out."""
    col = ptx.special.ctaid.x() * 32
    row = ptx.special.ctaid.y() * 32
    tile = smem.alloc(f32, (32, 32), align=1024)
    bar = smem.mbarrier(1)
    _load(tile, x.tma_desc(), (col, row), bar, 32 * 32 * 4)
    tid = ptx.special.tid.x()
    for k in range(32 * 32 // THREADS):
        at = tile.base + (tid + k * THREADS) * 4
        v = ptx.ld.shared.f32(at)
        ptx.st.shared.f32(at, v * scale + 1.0)
    ptx.fence.proxy.async_.shared__cta()
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        ptx.cp.async_.bulk.tensor._2d.global_.shared__cta.tile.bulk_group(
            ptx.addr(y.tma_desc(), coords=(col, row)), tile)
        ptx.cp.async_.bulk.commit_group()
        ptx.cp.async_.bulk.wait_group.read(0)


def _dump(tile, out, words: int) -> None:
    """Every thread copies 4-byte words of shared ``tile`` to ``out``, in
    shared-memory order (so the swizzle shows), block ``ctaid.x`` at
    ``out + ctaid.x * words * 4``."""
    tid = ptx.special.tid.x()
    base = out.ptr + ptx.mul.wide.u32(ptx.special.ctaid.x(), words * 4)
    for i in ptx.range_(tid, words, THREADS, dtype=u32):
        v = ptx.ld.shared.b32(tile.base + i * 4)
        ptx.st.global_.b32(base + ptx.mul.wide.u32(i, 4), v)


@kernel(in_specs=(Tile("M", "N", bf16, Layout.TMA_128B, tma_box=(16, 128), tma_rank=3),),
        out_specs=(Tile("G", 16 * 128, bf16),), grid=lambda G: (G, 1, 1), block=(THREADS, 1, 1),
        arch="sm_90a")
def tma_reshaped_dump(x, out):
    """CTA ``g`` loads the 16 x 128 box at rows ``16 g`` (one copy through
    the reshaped rank-3 descriptor: two swizzled 16 x 64 blocks) and dumps
    its shared memory as it lies."""
    row = ptx.special.ctaid.x() * 16
    tile = smem.alloc(bf16, (16 * 128,), align=1024)
    bar = smem.mbarrier(1)
    _load(tile, x.tma_desc(), (0, row, 0), bar, 16 * 128 * 2)
    _dump(tile, out, 16 * 128 * 2 // 4)

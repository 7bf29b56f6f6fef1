"""The all-gather matmul on Ampere: the rows travel as in
:mod:`._collective_gather`; the GEMM is the library's sm_80 one
(:mod:`._matmul_sm80`: ``cp.async`` ring, swizzled ``ldmatrix``,
``mma.sync``), its main loop run once per shard on CTA ``(j, i)``'s
128 x 128 tile.

The shard loop is a runtime loop over ``step = 0 .. W-1`` (one copy of the
main loop in the PTX, whatever ``W``): shard ``s = (rank + step) % W``
reads A from ``x`` at step 0 and from ``xg`` after its rows arrived
(thread 0 spins on the block's arrival slot; the main loop's opening
``bar.sync`` lets the CTA's ``cp.async`` reads follow its acquire).
"""

from __future__ import annotations

import functools

from ..dsl import Kernel, TensorArg, Tile, kernel, ptx, smem
from ..types import bf16, f16, f32, u32
from ._collective_gather import GatherPlan, push_rows, start, wait_rows
from ._matmul_sm80 import (
    BM,
    BN,
    SMEM_BYTES,
    THREADS,
    Operands,
    epilogue,
    mainloop,
    new_accumulators,
)

__all__ = ["gather_kernel_sm80", "layout_sm80"]


def layout_sm80(R: int, K: int, N: int, W: int) -> GatherPlan:
    """The grid and flag slots of a call (tile 128 x 128)."""
    return GatherPlan(R, K, N, W, BM, BN)


def _body(x: TensorArg, w: TensorArg, flag: TensorArg, xg: TensorArg, out: TensorArg, dtype: str) -> None:
    R, K = x.shape
    N = w.shape[1]
    lay = layout_sm80(R, K, N, ptx.world_size())
    buf = smem.alloc(u32, (SMEM_BYTES // 4,), align=1024)
    tid = ptx.special.tid.x()
    j, i = ptx.special.ctaid.x(), ptx.special.ctaid.y()
    start(flag, lay, j, i)
    push_rows(x, xg, flag, lay, j, i, THREADS)
    rank = ptx.rank()
    m0, n0 = i * BM, j * BN
    for step in ptx.range_(0, lay.W, dtype=u32):
        shard = ptx.rem.u32(rank + step, lay.W)
        mine = step == 0
        with ptx.if_(ptx.and_.pred(tid == 0, step > 0)):
            wait_rows(flag, lay, shard, i)
        a = ptx.selp.u64(x.ptr, xg.ptr + ptx.mul.wide.u32(shard, R * K * 2), mine)
        acc = new_accumulators()
        mainloop(Operands(a=a, b=w.ptr, m0=m0, n0=n0, M=R, N=N, K=K, dtype=dtype), acc, buf.base,
                 reuse=True)
        epilogue(acc, out.ptr + ptx.mul.wide.u32(shard, R * N * 4), m0, n0, R, N)


@functools.cache
def gather_kernel_sm80(dtype: str) -> Kernel:
    """The sm_80 all-gather matmul for ``dtype`` ("bf16" or "f16"):
    ``(x (R, K), w (K, N), flag (F,) u32, xg (W, R, K)) -> out (W, R, N) f32``."""
    t = {"bf16": bf16, "f16": f16}[dtype]

    def fn(x: TensorArg, w: TensorArg, flag: TensorArg, xg: TensorArg, out: TensorArg) -> None:
        _body(x, w, flag, xg, out, dtype)
    fn.__name__ = fn.__qualname__ = f"all_gather_matmul_sm80_{dtype}"
    fn.__doc__ = "out = all_gather(x) @ w, the gather overlapped with the GEMM (module docstring)."
    return kernel(fn, in_specs=(Tile("R", "K", t), Tile("K", "N", t), Tile("F", u32),
                            Tile("W", "R", "K", t)),
                  out_specs=(Tile("W", "R", "N", f32),), grid=_grid, block=(THREADS, 1, 1), arch="sm_80",
                  extern_smem=True, peers=("flag", "xg"))


def _grid(R: int, N: int) -> tuple[int, int, int]:
    return (-(-N // BN), -(-R // BM), 1)

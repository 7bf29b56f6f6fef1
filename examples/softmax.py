"""Row-wise softmax, one CTA of 128 threads per row of N floats.

Each thread owns N/128 elements (loaded once into registers: the Python loop
unrolls at trace time), the row maximum and the sum of exponentials are
reduced with butterfly shuffles inside each warp and through shared memory
across the four warps.

    python examples/softmax.py      # PTX, then a check against numpy on the emulator
"""

from __future__ import annotations

import numpy as np

from jaxptx import Tile, kernel, ptx, smem
from jaxptx.types import f32

THREADS = 128
WARPS = THREADS // 32
LOG2E = 1.4426950408889634


def _block_reduce(value, op: str, scratch, lane, warp):
    """Reduce ``value`` over the CTA with ``max`` or ``add``; every thread gets
    the result."""
    for offset in (16, 8, 4, 2, 1):
        other = ptx.shfl.sync.bfly.b32(value, offset, 0x1F, 0xFFFFFFFF)
        value = ptx.max.f32(value, other) if op == "max" else value + other
    with ptx.if_(lane == 0):
        ptx.st.shared.f32(scratch[warp], value)
    ptx.bar.sync(0)
    total = ptx.ld.shared.f32(scratch[0])
    for k in range(1, WARPS):
        part = ptx.ld.shared.f32(scratch[k])
        total = ptx.max.f32(total, part) if op == "max" else total + part
    ptx.bar.sync(0)
    return total


@kernel(
    in_specs=(Tile("B", "N", f32),),
    out_specs=(Tile("B", "N", f32),),
    grid=lambda B: (B, 1, 1),
    block=(THREADS, 1, 1),
    arch="sm_80",
)
def softmax(x, y):
    """``y[b] = exp(x[b] - max x[b]) / sum exp(x[b] - max x[b])`` for each row."""
    n = x.shape[1]
    per_thread = n // THREADS
    tid = ptx.special.tid.x()
    row = ptx.mul.wide.u32(ptx.special.ctaid.x(), n * 4)
    x_row, y_row = x.ptr + row, y.ptr + row
    offsets = [ptx.mul.wide.u32(tid + i * THREADS, 4) for i in range(per_thread)]
    values = [ptx.ld.global_.f32(x_row + off) for off in offsets]
    scratch = smem.alloc(f32, WARPS)
    lane, warp = tid & 31, tid >> 5

    peak = values[0]
    for v in values[1:]:
        peak = ptx.max.f32(peak, v)
    peak = _block_reduce(peak, "max", scratch, lane, warp)

    exps = [ptx.ex2.approx.f32((v - peak) * LOG2E) for v in values]
    total = exps[0]
    for e in exps[1:]:
        total = total + e
    total = _block_reduce(total, "add", scratch, lane, warp)
    inv = ptx.rcp.approx.f32(total)
    for off, e in zip(offsets, exps):
        ptx.st.global_.f32(y_row + off, e * inv)


def reference(x: np.ndarray) -> np.ndarray:
    """numpy softmax in float64, rounded to float32."""
    z = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def main() -> None:
    """Print the PTX for (4, 1024) and check the emulator against numpy."""
    from jaxptx import sim

    print(softmax.ptx(B=4, N=1024))
    x = np.random.default_rng(0).standard_normal((4, 1024)).astype(np.float32)
    y = np.zeros_like(x)
    sim.launch(softmax, x, y)
    err = np.abs(y - reference(x)).max()
    print(f"emulator vs numpy: max abs error {err:.2e}")


if __name__ == "__main__":
    main()

"""Row-wise RMS norm, one CTA per row: y = x * rsqrt(mean(x²) + eps) * w.

Each thread strides over the row accumulating x², a butterfly shuffle
reduces within each warp, shared memory combines the warps, and a second
pass writes the scaled row. Run it to see the PTX and what ptxas made of it::

    python examples/rms_norm.py
"""

from __future__ import annotations

from jaxptx import Tile, kernel, ptx, reg, smem
from jaxptx.types import f32, u32

THREADS = 128
WARPS = THREADS // 32


@kernel(
    in_specs=(Tile("B", "N", f32), Tile("N", f32)),
    out_specs=(Tile("B", "N", f32),),
    grid=lambda B: (B, 1, 1),
    block=(THREADS, 1, 1),
    arch="sm_90a",
    batch="z",
    shardable=("B",),
)
def rms_norm(x, w, y, *, eps=1e-6):
    """Normalise each row of ``x`` by its root mean square, scale by ``w``.

    Under ``jax.vmap`` it is one launch: batch element ``g`` runs at
    ``%ctaid.z == g``, its tensors addressed through ``batch_ptrs``. Rows are
    independent (``shardable=("B",)``): under ``jax.jit`` on inputs sharded
    by rows, each device normalises its own rows.
    """
    n = x.shape[1]
    row = ptx.special.ctaid.x()
    tid = ptx.special.tid.x()
    xp, wp, yp = ptx.batch_ptrs(x, w, y)
    row_bytes = ptx.mul.wide.u32(row, n * 4)
    x_row = xp + row_bytes
    y_row = yp + row_bytes

    acc = reg.scalar(f32, 0.0)
    for i in ptx.range_(tid, n, THREADS, dtype=u32):
        v = ptx.ld.global_.f32(x_row + ptx.mul.wide.u32(i, 4))
        ptx.fma.rn.f32(acc, v, v, acc)

    for offset in (16, 8, 4, 2, 1):           # unrolled at trace time
        acc += ptx.shfl.sync.bfly.b32(acc, offset, 0x1F, 0xFFFFFFFF)

    partial = smem.alloc(f32, WARPS)
    lane, warp = tid & 31, tid >> 5
    with ptx.if_(lane == 0):
        ptx.st.shared.f32(partial[warp], acc)
    ptx.bar.sync(0)
    total = reg.scalar(f32, 0.0)
    for k in range(WARPS):
        total += ptx.ld.shared.f32(partial[k])
    rstd = ptx.rsqrt.approx.f32(total * (1.0 / n) + eps)

    for i in ptx.range_(tid, n, THREADS, dtype=u32):
        off = ptx.mul.wide.u32(i, 4)
        v = ptx.ld.global_.f32(x_row + off)
        g = ptx.ld.global_.nc.f32(wp + off)
        ptx.st.global_.f32(y_row + off, v * rstd * g)
    ptx.ret()


def main() -> None:
    """Print the PTX and the ptxas resource report for B=4, N=1024, show the
    typed-FFI custom call a GPU would run, then run it with ``jax.jit`` (on
    the CPU emulator when there is no GPU) and check it against numpy."""
    import re

    import jax
    import numpy as np

    spec = rms_norm.specialize(B=4, N=1024)
    print(f"== PTX of rms_norm for B=4, N=1024 (grid {spec.grid}, block {spec.block}) ==")
    print(spec.ptx)
    print(f"== ptxas -arch={spec.target.name} ==")
    print(rms_norm.resources(B=4, N=1024))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    w = rng.standard_normal(1024).astype(np.float32)
    lowered = jax.jit(rms_norm).trace(x, w).lower(lowering_platforms=("cuda",))
    print("== jax.jit(rms_norm) lowered for CUDA: the custom call (its PTX attribute cut short) ==")
    for line in lowered.as_text().splitlines():
        if "custom_call" in line:
            print(re.sub(r'ptx = "(.{40}).*?(?<!\\)"', r'ptx = "\1..."', line.strip()))
    y = jax.jit(rms_norm)(x, w)             # no GPU here: the CPU emulator, 4 CTAs x 128 threads
    print(f"== jax.jit(rms_norm) ran on {jax.devices()[0].platform} ==")
    y = np.asarray(y)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * w
    err = float(np.abs(y - want).max())
    print(f"== emulator vs numpy: max abs error {err:.2e} ==")
    if err > 1e-4:
        raise SystemExit("the emulator's result does not match numpy")


if __name__ == "__main__":
    main()

"""Per-call overhead of a jitted jaxptx kernel on the CPU path.

A trivial elementwise kernel (``y = x * 2 + 1`` over N float32, 128 threads a
CTA) called through ``jax.jit`` against the same computation as a jitted
``jnp`` op, and the pieces in between:

* ``jnp``: ``jax.jit(lambda x: x * 2 + 1)``, the floor of a jitted call.
* ``kernel``: ``jax.jit(affine)``: XLA → the ``jaxptx_cpu`` FFI handler →
  the GIL → the Python callback → the emulator.
* ``kernel, no-op callback``: the same executable with the callback swapped
  for one that returns at once: the cost of the FFI and Python round trip.
* ``emulator alone``: ``jaxptx.sim.launch`` on numpy arrays, no JAX.

Then ``jax.vmap`` over a batch of problems: the same kernel declared
without ``batch`` (a loop of launches) and with ``batch="z"`` (one launch,
the batch as grid z).

Then a bare launch of a one-CTA kernel (32 threads, six instructions)
through ``sim.launch`` on PTX text and through ``Device.launch`` on a
loaded module of a prepared device: the emulator's fixed cost a launch.

Last, the per-call cost of TMA descriptors on the CPU path: the emulator
building the maps a call's ``tma`` attribute describes (a 2-d load and a
2-d store), which the handler does on every call before the launch.

Times are medians of ``--repeat`` blocked calls (``block_until_ready``).
The dispatch overhead of the custom call is ``no-op cb`` minus ``jnp`` at the
smallest N, where the jnp op itself costs next to nothing; ``kernel`` minus
``no-op cb`` is the emulator run plus the numpy views and input copies.

    python benchmarks/dispatch.py [--sizes 256 4096 65536] [--repeat 200]
    python benchmarks/dispatch.py --smoke     # CI: N = 256, 3 calls, B = 2, a 64 x 64 TMA copy

Every result is checked: the kernel against the jnp op, the emulator's
output against numpy, the vmap loop against the grid-z launch and against
numpy, and the TMA copy against its input (``self-check:`` lines).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from _timing import wall_times


def median_us(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``fn()`` in microseconds, after three warm-ups."""
    return statistics.median(wall_times(fn, repeat, warmup=3)) * 1e6


def make_kernel(batch: str | None = None) -> Any:
    """The benchmarked kernel: ``y = x * 2 + 1``."""
    from jaxptx import Tile, kernel, ptx
    from jaxptx.types import f32

    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
            grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a", batch=batch)
    def affine(x, y):
        i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
        off = ptx.mul.wide.u32(i, 4)
        xp, yp = ptx.batch_ptrs(x, y)
        v = ptx.ld.global_.f32(xp + off)
        ptx.st.global_.f32(yp + off, v * 2.0 + 1.0)

    return affine


def vmap_table(repeat: int, batches: tuple[int, ...] = (4, 16, 64)) -> None:
    """``jax.vmap`` as a loop of launches against one grid-z launch, for each
    batch size in ``batches``; both checked against numpy."""
    import jax
    import jax.numpy as jnp

    loop, folded = jax.jit(jax.vmap(make_kernel())), jax.jit(jax.vmap(make_kernel("z")))
    print(f"\njax.vmap over B problems of N = 4096; median of {repeat} calls, microseconds")
    print(f"{'B':>8} {'loop':>10} {'grid z':>10} {'ratio':>8}")
    for b in batches:
        xs = jnp.arange(b * 4096, dtype=jnp.float32).reshape(b, 4096)
        want = np.asarray(xs) * 2 + 1
        np.testing.assert_array_equal(loop(xs), want)
        np.testing.assert_array_equal(folded(xs), want)
        t_loop = median_us(lambda: loop(xs).block_until_ready(), repeat)
        t_fold = median_us(lambda: folded(xs).block_until_ready(), repeat)
        print(f"{b:>8} {t_loop:>10.1f} {t_fold:>10.1f} {t_loop / t_fold:>7.1f}x")
    print(f"self-check: vmap loop and grid-z launches equal x * 2 + 1 (B = {', '.join(map(str, batches))})")


ONE_CTA = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry ones(.param .u64 x)
{
    .reg .b32 %r<3>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [x];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], 0f3F800000;
    ret;
}"""


def one_cta_table(repeat: int) -> None:
    """A bare launch of :data:`ONE_CTA` (one CTA of 32 threads): through
    ``sim.launch`` and through ``Device.launch`` of a loaded module, each
    checked."""
    from jaxptx import sim

    x = np.zeros(32, np.float32)
    dev = sim.Device()
    address = dev.to_device(x)
    module = dev.load(ONE_CTA)
    t_launch = median_us(lambda: sim.launch(ONE_CTA, x, block=32), repeat)
    t_device = median_us(lambda: dev.launch(module, [address], block=32), repeat)
    np.testing.assert_array_equal(x, 1)
    np.testing.assert_array_equal(dev.from_device(address, like=x), 1)
    print(f"\none CTA, 32 threads, 6 instructions, median of {repeat}: sim.launch {t_launch:.1f}, "
          f"Device.launch {t_device:.1f} microseconds")
    print("self-check: both launches wrote 1.0 to every element")


def tma_copy_kernel() -> Any:
    """A TMA copy ``y = x``, one 32 x 32 tile a CTA: a TMA load (128-byte
    swizzle) into shared memory, then a TMA store from it to ``y``.

    Its two descriptors are what :func:`tma_table` times; the copy writes
    every element of ``y``, so the call's result is checked (the CPU path
    refuses outputs a kernel leaves unwritten).
    """
    from jaxptx import Layout, Tile, kernel, ptx, reg, smem
    from jaxptx.types import f32

    spec = Tile("M", "N", f32, Layout.TMA_128B, tma_box=(32, 32))

    @kernel(in_specs=(spec,), out_specs=(spec,), grid=lambda M, N: (N // 32, M // 32, 1),
            block=(32, 1, 1), arch="sm_90a")
    def two_maps(x, y):
        col = ptx.special.ctaid.x() * 32
        row = ptx.special.ctaid.y() * 32
        tile = smem.alloc(f32, (32, 32), align=1024)
        bar = smem.mbarrier(1)
        tid = ptx.special.tid.x()
        with ptx.if_(tid == 0):
            ptx.mbarrier.init.shared.b64(bar[0], 1)
            ptx.fence.mbarrier_init.release.cluster()
        ptx.bar.sync(0)
        with ptx.if_(tid == 0):
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], 32 * 32 * 4)
            ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes(
                tile, ptx.addr(x.tma_desc(), coords=(col, row)), bar[0])
        done = reg.pred(init=0)
        for _ in ptx.while_(lambda: ~done):
            ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], 0)
        with ptx.if_(tid == 0):
            ptx.cp.async_.bulk.tensor._2d.global_.shared__cta.tile.bulk_group(
                ptx.addr(y.tma_desc(), coords=(col, row)), tile)
            ptx.cp.async_.bulk.commit_group()
            ptx.cp.async_.bulk.wait_group.read(0)

    return two_maps


def tma_table(repeat: int, n: int = 256) -> None:
    """Decoding and encoding a call's two TMA descriptors on the CPU path
    (an ``n`` x ``n`` float32 load map and store map), after one real call
    of the kernel that uses them, checked against its input."""
    import jax

    from jaxptx.jax import _tma

    two_maps = tma_copy_kernel()
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    s = two_maps.specialize(M=n, N=n)
    records = _tma.records(s.tma, "two_maps", [(x.shape, x.dtype)] * 2)
    y = jax.jit(two_maps)(x)  # the same records run through a real call
    np.testing.assert_array_equal(np.asarray(y), x)
    print(f"\nself-check: the TMA copy kernel's output equals its input ({n}x{n})")

    def build() -> None:
        for m in _tma.sim_maps(records):
            m.encode(1 << 36)

    print(f"TMA descriptors per call (CPU path), median of {repeat}: "
          f"{median_us(build, repeat):.1f} microseconds for 2 maps")


def main(argv: list[str] | None = None) -> None:
    """Print the three tables (``--smoke``: tiny sizes, a few calls)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="N of the elementwise kernel (default 256 4096 65536; --smoke: 256)")
    parser.add_argument("--repeat", type=int, default=None, help="calls per median (default 200; --smoke: 3)")
    parser.add_argument("--smoke", action="store_true",
                        help="CI smoke run: N = 256, 3 calls, B = 2, a 64 x 64 TMA copy; checks only")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([256] if args.smoke else [256, 4096, 65536])
    repeat = args.repeat or (3 if args.smoke else 200)

    import jax
    import jax.numpy as jnp

    from jaxptx import _ffi, sim
    from jaxptx.jax import _cpu

    affine = make_kernel()
    jnp_op = jax.jit(lambda x: x * 2 + 1)
    kernel_op = jax.jit(affine)
    print(f"jax {jax.__version__}, device {jax.devices()[0].device_kind}; "
          f"median of {repeat} calls, microseconds")
    print(f"{'N':>8} {'jnp':>9} {'kernel':>10} {'no-op cb':>10} {'emulator':>10}")
    for n in sizes:
        x = jnp.arange(n, dtype=jnp.float32)
        np.testing.assert_array_equal(kernel_op(x), jnp_op(x))
        t_jnp = median_us(lambda: jnp_op(x).block_until_ready(), repeat)
        t_kernel = median_us(lambda: kernel_op(x).block_until_ready(), repeat)
        _ffi.set_cpu_callback(lambda *call: None)
        try:
            t_noop = median_us(lambda: kernel_op(x).block_until_ready(), repeat)
        finally:
            _ffi.set_cpu_callback(_cpu.run)
        spec = affine.specialize(N=n)
        xn, yn = np.asarray(x).copy(), np.zeros(n, np.float32)
        t_sim = median_us(lambda: sim.launch(spec.module, xn, yn, grid=spec.grid,
                                             block=spec.block), repeat)
        np.testing.assert_array_equal(yn, xn * 2 + 1)
        print(f"{n:>8} {t_jnp:>9.1f} {t_kernel:>10.1f} {t_noop:>10.1f} {t_sim:>10.1f}")
    print(f"self-check: kernel under jax.jit equals the jnp op, emulator output equals numpy "
          f"(N = {', '.join(map(str, sizes))})")
    one_cta_table(repeat)
    vmap_table(max(repeat // 10, 5) if not args.smoke else 1, (2,) if args.smoke else (4, 16, 64))
    tma_table(repeat, 64 if args.smoke else 256)


if __name__ == "__main__":
    main()

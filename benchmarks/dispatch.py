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

Last, the per-call cost of TMA descriptors on the CPU path: the emulator
building the maps a call's ``tma`` attribute describes (a 2-d load and a
2-d store), which the handler does on every call before the launch.

Times are medians of ``--repeat`` blocked calls (``block_until_ready``).
The dispatch overhead of the custom call is ``no-op cb`` minus ``jnp`` at the
smallest N, where the jnp op itself costs next to nothing; ``kernel`` minus
``no-op cb`` is the emulator run plus the numpy views and input copies.

    python benchmarks/dispatch.py [--sizes 256 4096 65536] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _timing import wall_times


def median_us(fn, repeat: int) -> float:
    """Median wall time of ``fn()`` in microseconds, after three warm-ups."""
    return statistics.median(wall_times(fn, repeat, warmup=3)) * 1e6


def make_kernel(batch: str | None = None):
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


def vmap_table(repeat: int) -> None:
    """``jax.vmap`` as a loop of launches against one grid-z launch."""
    import jax
    import jax.numpy as jnp

    loop, folded = jax.jit(jax.vmap(make_kernel())), jax.jit(jax.vmap(make_kernel("z")))
    print(f"\njax.vmap over B problems of N = 4096; median of {repeat} calls, microseconds")
    print(f"{'B':>8} {'loop':>10} {'grid z':>10} {'ratio':>8}")
    for b in (4, 16, 64):
        xs = jnp.arange(b * 4096, dtype=jnp.float32).reshape(b, 4096)
        np.testing.assert_array_equal(loop(xs), folded(xs))
        t_loop = median_us(lambda: loop(xs).block_until_ready(), repeat)
        t_fold = median_us(lambda: folded(xs).block_until_ready(), repeat)
        print(f"{b:>8} {t_loop:>10.1f} {t_fold:>10.1f} {t_loop / t_fold:>7.1f}x")


def tma_table(repeat: int) -> None:
    """Decoding and encoding a call's two TMA descriptors on the CPU path."""
    import jax

    from jaxptx import Layout, Tile, kernel, ptx
    from jaxptx.jax import _tma
    from jaxptx.types import f32

    spec = Tile("M", "N", f32, Layout.TMA_128B, tma_box=(32, 32))

    @kernel(in_specs=(spec,), out_specs=(spec,), arch="sm_90a")
    def two_maps(x, y):
        ptx.prefetch.tensormap(ptx.addr(x.tma_desc()))
        ptx.prefetch.tensormap(ptx.addr(y.tma_desc()))

    x = np.zeros((256, 256), np.float32)
    s = two_maps.specialize(M=256, N=256)
    records = _tma.records(s.tma, "two_maps", [(x.shape, x.dtype)] * 2)
    jax.jit(two_maps)(x).block_until_ready()  # the same records run through a real call

    def build() -> None:
        for m in _tma.sim_maps(records):
            m.encode(1 << 36)

    print(f"\nTMA descriptors per call (CPU path), median of {repeat}: "
          f"{median_us(build, repeat):.1f} microseconds for 2 maps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 4096, 65536])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    from jaxptx import _ffi, sim
    from jaxptx.jax import _cpu

    affine = make_kernel()
    jnp_op = jax.jit(lambda x: x * 2 + 1)
    kernel_op = jax.jit(affine)
    print(f"jax {jax.__version__}, device {jax.devices()[0].device_kind}; "
          f"median of {args.repeat} calls, microseconds")
    print(f"{'N':>8} {'jnp':>9} {'kernel':>10} {'no-op cb':>10} {'emulator':>10}")
    for n in args.sizes:
        x = jnp.arange(n, dtype=jnp.float32)
        np.testing.assert_array_equal(kernel_op(x), jnp_op(x))
        t_jnp = median_us(lambda: jnp_op(x).block_until_ready(), args.repeat)
        t_kernel = median_us(lambda: kernel_op(x).block_until_ready(), args.repeat)
        _ffi.set_cpu_callback(lambda *call: None)
        try:
            t_noop = median_us(lambda: kernel_op(x).block_until_ready(), args.repeat)
        finally:
            _ffi.set_cpu_callback(_cpu.run)
        spec = affine.specialize(N=n)
        xn, yn = np.asarray(x).copy(), np.zeros(n, np.float32)
        t_sim = median_us(lambda: sim.launch(spec.module, xn, yn, grid=spec.grid,
                                             block=spec.block), args.repeat)
        print(f"{n:>8} {t_jnp:>9.1f} {t_kernel:>10.1f} {t_noop:>10.1f} {t_sim:>10.1f}")
    vmap_table(max(args.repeat // 10, 5))
    tma_table(args.repeat)


if __name__ == "__main__":
    main()

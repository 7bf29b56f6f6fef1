"""Time the library's collective kernels against XLA's collectives.

Each row is a :class:`Row`: a name, the jaxptx function and the reference
(both called inside ``jax.shard_map`` over axis ``"d"``), and how to make
the per-device inputs. Add a row to ``ROWS`` to time another collective.

With several GPUs the rows run there (median of ``--repeat`` calls); on
the CPU they run on the emulator over ``--devices`` host devices (set before
jax starts) and the figures are the emulator's. ``--smoke``: tiny shapes,
one repeat, and each result checked against its reference.

    python benchmarks/collectives.py --smoke
    python benchmarks/collectives.py --devices 8 --repeat 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Row:
    """One benchmark row.

    Attributes:
        name: what is timed.
        ours: ``fn(*local_inputs) -> local output`` (inside shard_map).
        reference: the same with ``jax.lax`` collectives.
        inputs: ``(world, small) -> (arrays, in_specs, out_spec)``: the
            global inputs and how they are sharded.
        tolerance: relative tolerance of the smoke check.
    """

    name: str
    ours: Callable[..., Any]
    reference: Callable[..., Any]
    inputs: Callable[[int, bool], tuple[tuple[Any, ...], tuple[Any, ...], Any]]
    tolerance: float = 1e-5


def _rows() -> list[Row]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from jaxptx.kernels.collectives import all_gather_matmul, all_reduce
    from jaxptx.kernels.matmul_reduce_scatter import matmul_reduce_scatter

    def vector(world: int, small: bool):
        n = 4096 if small else 1 << 22
        x = np.random.default_rng(0).standard_normal((world, n)).astype(np.float32)
        return (x,), (P("d"),), P("d")

    def gemm(world: int, small: bool):
        r, k, c = (64, 64, 64) if small else (1024, 4096, 1024)
        rng = np.random.default_rng(1)
        x = rng.integers(-3, 4, (world * r, k)).astype(jnp.bfloat16)
        w = rng.integers(-3, 4, (k, world * c)).astype(jnp.bfloat16)
        return (x, w), (P("d", None), P(None, "d")), P(None, "d")

    def reduce_gemm(world: int, small: bool):
        m, k, n = (64, 64, 64) if small else (1024, 4096, 1024)   # m rows of the result per device
        rng = np.random.default_rng(2)
        x = rng.integers(-3, 4, (world * m, k)).astype(jnp.bfloat16)
        w = rng.integers(-3, 4, (k, n)).astype(jnp.bfloat16)
        return (x, w), (P(None, "d"), P("d", None)), P("d")

    def psum(a):
        return jax.lax.psum(a[0], "d")[None]

    rows = [Row(f"all_reduce {m}", lambda a, m=m: all_reduce(a[0], "d", method=m)[None], psum, vector)
            for m in ("one_shot", "two_shot", "multimem")]
    for arch in ("sm_80", "sm_90a"):
        rows.append(Row(f"all_gather_matmul {arch}",
                        lambda a, b, arch=arch: all_gather_matmul(a, b, "d", arch=arch),
                        lambda a, b: jnp.dot(jax.lax.all_gather(a, "d", tiled=True), b,
                                             preferred_element_type=jnp.float32),
                        gemm))
    for arch in ("sm_80", "sm_90a"):
        rows.append(Row(f"matmul_reduce_scatter {arch}",
                        lambda a, b, arch=arch: matmul_reduce_scatter(a, b, "d", arch=arch),
                        lambda a, b: jax.lax.psum_scatter(jnp.dot(a, b, preferred_element_type=jnp.float32),
                                                          "d", scatter_dimension=0, tiled=True),
                        reduce_gemm))
    return rows


ROWS: Callable[[], list[Row]] = _rows


def run(row: Row, mesh: Any, small: bool, repeat: int, check: bool) -> tuple[float, float]:
    """Median seconds of ``row``'s jaxptx function and of its reference;
    with ``check``, their results must agree.

    Raises:
        AssertionError: ``check`` and the results differ.
    """
    import jax
    import numpy as np
    from _timing import wall_times
    from jax.sharding import NamedSharding

    arrays, specs, out = row.inputs(mesh.size, small)
    args = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)]
    ours = jax.jit(jax.shard_map(row.ours, mesh=mesh, in_specs=specs, out_specs=out))
    ref = jax.jit(jax.shard_map(row.reference, mesh=mesh, in_specs=specs, out_specs=out))
    if check:
        np.testing.assert_allclose(np.asarray(ours(*args), np.float64), np.asarray(ref(*args), np.float64),
                                   rtol=row.tolerance, atol=row.tolerance, err_msg=row.name)
    t_ours = statistics.median(wall_times(lambda: ours(*args).block_until_ready(), repeat))
    t_ref = statistics.median(wall_times(lambda: ref(*args).block_until_ready(), repeat))
    return t_ours, t_ref


def main(argv: list[str] | None = None) -> None:
    """Parse the options, pick the devices and print one line per row."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat, results checked")
    p.add_argument("--devices", type=int, default=2, help="host devices when there is no GPU (default 2)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="", help="run the rows whose name contains this")
    args = p.parse_args(argv)
    if "jax" not in sys.modules:
        os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
    import jax
    from jax.sharding import AxisType

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    on_gpu = len(gpus) > 1
    world = len(gpus) if on_gpu else jax.device_count()
    mesh = jax.make_mesh((world,), ("d",), axis_types=(AxisType.Explicit,))
    small = args.smoke or not on_gpu
    repeat = 1 if args.smoke else args.repeat
    where = f"{world} GPUs ({gpus[0].device_kind})" if on_gpu else f"emulator, {world} CPU devices"
    print(f"# collectives on {where}; {'small' if small else 'large'} shapes; median of {repeat}")
    print(f"{'row':32s} {'jaxptx ms':>12s} {'jax.lax ms':>12s} {'ratio':>7s}")
    checked = 0
    for row in ROWS():
        if args.only not in row.name:
            continue
        ours, ref = run(row, mesh, small, repeat, check=args.smoke)
        checked += args.smoke
        print(f"{row.name:32s} {ours * 1e3:12.3f} {ref * 1e3:12.3f} {ours / ref:7.2f}", flush=True)
    if checked:
        print(f"self-check: {checked} rows match jax.lax within their tolerances")


if __name__ == "__main__":
    main()

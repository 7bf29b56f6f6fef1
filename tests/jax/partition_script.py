"""Run by test_partition.py in a fresh process with 8 CPU devices: a
``shardable`` kernel under plain ``jax.jit`` on sharded inputs runs per
shard (the handler sees local buffers), nothing is gathered, and the
results are right. Prints OK when every check passes."""

from __future__ import annotations

import pathlib
import sys

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from jaxptx import _ffi
from jaxptx.jax import _cpu, _lowering  # noqa: F401  (_lowering installs the callback)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "examples"))
from jax_kernels import affine  # noqa: E402
from rms_norm import rms_norm  # noqa: E402


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,))
    seen = []

    def spy(kernel_id, inputs, outputs, ptx, entry, launch, *rest):
        seen.append((entry, tuple(mv.nbytes for mv in inputs), launch[0]))  # launch[0]: its grid
        return _cpu.run(kernel_id, inputs, outputs, ptx, entry, launch, *rest)

    _ffi.set_cpu_callback(spy)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("d", None)))
    ws = jax.device_put(w, NamedSharding(mesh, P()))

    f = jax.jit(rms_norm)
    compiled = f.lower(xs, ws).compile().as_text()
    assert "all-gather" not in compiled and "CustomSPMDPartitioning" not in compiled, compiled
    y = f(xs, ws)
    np.testing.assert_allclose(y, reference(x, w), rtol=1e-5, atol=1e-5)
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("d", None)), 2), y.sharding
    # eight launches, each over its own two rows, with a grid of two CTAs
    assert sorted(seen) == [("rms_norm", (2 * 256 * 4, 256 * 4), (2, 1, 1))] * 8, seen

    # A vmapped batch (grid z) is a factor the kernel may shard too.
    seen.clear()
    xb = rng.standard_normal((8, 4, 256)).astype(np.float32)
    g = jax.jit(jax.vmap(rms_norm, in_axes=(0, None)))
    yb = g(jax.device_put(xb, NamedSharding(mesh, P("d"))), ws)
    np.testing.assert_allclose(yb, reference(xb, w), rtol=1e-5, atol=1e-5)
    assert sorted(seen) == [("rms_norm", (4 * 256 * 4, 256 * 4), (4, 1, 1))] * 8, seen

    # The norm dim N is not shardable: sharded along it, the call replicates
    # its input first (one full launch per device) and is still right.
    seen.clear()
    xn = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    np.testing.assert_allclose(f(xn, ws), reference(x, w), rtol=1e-5, atol=1e-5)
    assert {s[1] for s in seen} == {(16 * 256 * 4, 256 * 4)}, seen

    # A kernel that declares nothing shardable is gathered: full-size launches.
    seen.clear()
    flat = jax.device_put(np.arange(8 * 256, dtype=np.float32), NamedSharding(mesh, P("d")))
    np.testing.assert_array_equal(jax.jit(affine)(flat), np.arange(8 * 256) * 2 + 1)
    assert {s[1] for s in seen} == {(8 * 256 * 4,)}, seen
    print("OK")


if __name__ == "__main__":
    main()

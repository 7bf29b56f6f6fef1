"""Run by test_shard_map.py in a fresh process with 8 CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8 must be set before jax
loads). Prints OK when every check passes."""

from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jaxptx
from jaxptx import _ffi
from jaxptx.jax import _cpu, _lowering  # _lowering installs _cpu.run as the callback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "examples"))
from jax_kernels import affine, axpy_index  # noqa: E402
from rms_norm import rms_norm  # noqa: E402


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,))
    seen = []
    run = _cpu.run

    def spy(kernel_id, inputs, outputs, *launch):  # what the handler sees, per launch
        seen.append((kernel_id, tuple(mv.nbytes for mv in inputs)))
        return run(kernel_id, inputs, outputs, *launch)

    assert _lowering.CPU_TARGET == "jaxptx_cpu_v2"
    _ffi.set_cpu_callback(spy)

    x = np.arange(8 * 256, dtype=np.float32)
    f = jax.jit(jax.shard_map(affine, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    np.testing.assert_array_equal(f(jax.device_put(x, NamedSharding(mesh, P("d")))), x * 2 + 1)
    assert len(seen) == 8 and all(nbytes == (256 * 4,) for _, nbytes in seen), seen

    # The index output shows each launch ran over its local shard only.
    g = jax.jit(jax.shard_map(lambda a, b: axpy_index(a, b), mesh=mesh,
                              in_specs=(P("d"), P("d")), out_specs=(P("d"), P("d"))))
    y, idx = g(x, x)
    np.testing.assert_array_equal(y, x * 4)
    np.testing.assert_array_equal(idx, np.tile(np.arange(256, dtype=np.int32), 8))

    # rms_norm, rows sharded, weights replicated, also under vmap and grad.
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8 * 2, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    ref = xs / np.sqrt((xs.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * w
    h = jax.jit(jax.shard_map(rms_norm, mesh=mesh, in_specs=(P("d"), P()), out_specs=P("d")))
    np.testing.assert_allclose(h(xs, w), ref, rtol=1e-5, atol=1e-5)
    seen.clear()
    hv = jax.jit(jax.shard_map(jax.vmap(rms_norm, in_axes=(0, None)), mesh=mesh,
                               in_specs=(P("d"), P()), out_specs=P("d")))
    np.testing.assert_allclose(hv(xs.reshape(16, 1, 256), w), ref.reshape(16, 1, 256),
                               rtol=1e-5, atol=1e-5)
    # Two vmapped rows per device: one launch each (batch="z"), over both rows.
    assert len(seen) == 8 and all(n == (2 * 256 * 4, 256 * 4) for _, n in seen), seen

    # grad through custom_vjp: the outputs vary over "d" like x; w's
    # cotangent, local on each shard, is summed over the shards (w is shared).
    norm = jaxptx.custom_vjp(rms_norm, lambda x, w, y, dy: (dy * w, jnp.sum(dy * x, axis=0)))
    loss = jax.shard_map(lambda a, b: jax.lax.psum(jnp.sum(norm(a, b)), "d"), mesh=mesh,
                         in_specs=(P("d"), P()), out_specs=P())
    gx, gw = jax.jit(jax.grad(loss, argnums=(0, 1)))(xs, w)
    np.testing.assert_allclose(gx, np.broadcast_to(w, xs.shape), rtol=1e-6)
    np.testing.assert_allclose(gw, xs.sum(axis=0), rtol=1e-5, atol=1e-5)
    print("OK")


if __name__ == "__main__":
    main()

"""matmul_reduce_scatter inside jax.shard_map on N CPU devices.

Run by test_matmul_reduce_scatter.py in a fresh process as
``mrs_script.py N ARCH [ARCH...]`` with
XLA_FLAGS=--xla_force_host_platform_device_count=N (the device count is
fixed when jax starts). Prints OK when every check passes.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxptx
from jaxptx.errors import SpecError
from jaxptx.kernels.matmul_reduce_scatter import _with_state, matmul_reduce_scatter

S = 48           # rows of the result per device: part of one 128-row tile (masked edges)
KL = {"sm_80": 32, "sm_90a": 64}      # x's columns per device: one K block of the variant
N = 136          # two column tiles, the second 8 wide


def _operands(n: int, kl: int, dtype: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Small integers: every product and f32 sum is exact, in any order."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (n * S, n * kl)).astype(dtype)
    w = rng.integers(-3, 4, (n * kl, N)).astype(dtype)
    return x, w


def check(n: int, arch: str) -> None:
    """Against psum_scatter(x @ w), under the sanitizer, state threaded
    through calls, and the CUDA lowering."""
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Explicit,))
    specs = dict(mesh=mesh, in_specs=(P(None, "d"), P("d", None)), out_specs=P("d"))

    def put(a: np.ndarray, *spec: Any) -> jax.Array:
        return jax.device_put(a, NamedSharding(mesh, P(*spec)))

    ours = jax.jit(jax.shard_map(lambda a, b: matmul_reduce_scatter(a, b, "d", arch=arch), **specs))
    theirs = jax.jit(jax.shard_map(
        lambda a, b: jax.lax.psum_scatter(jnp.dot(a, b, preferred_element_type=jnp.float32), "d",
                                          scatter_dimension=0, tiled=True), **specs))
    for dtype, seed in ((jnp.bfloat16, 0), (jnp.float16, 1)):
        x, w = _operands(n, KL[arch], dtype, seed)
        xs, ws = put(x, None, "d"), put(w, "d", None)
        with jaxptx.sim.checking():
            got = ours(xs, ws).block_until_ready()
        assert got.dtype == jnp.float32 and got.shape == (n * S, N), (got.dtype, got.shape)
        np.testing.assert_array_equal(got, theirs(xs, ws))
        np.testing.assert_array_equal(got, x.astype(np.float64) @ w.astype(np.float64))

    # Random values: f32 sums in rank order, within f32 rounding of the exact sum.
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n * S, n * KL[arch])).astype(jnp.bfloat16)
    w = rng.standard_normal((n * KL[arch], N)).astype(jnp.bfloat16)
    xs, ws = put(x, None, "d"), put(w, "d", None)
    first = np.asarray(ours(xs, ws))
    np.testing.assert_allclose(first, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(first, ours(xs, ws))      # deterministic

    # One state through three calls: the epochs count them (flags[t, self]
    # is the call count; every other source's flag is too).
    def step(a, b, slots, flags):
        out, (slots, flags) = _with_state(a, b, "d", arch=arch, state=(slots, flags))
        return out, slots, flags

    stepped = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(None, "d"), P("d", None), P("d"), P("d")),
                                    out_specs=(P("d"), P("d"), P("d"))))
    tiles = 2
    slots = put(np.zeros((n * 2, n, S, N), np.float32), "d")
    flags = put(np.zeros((n * tiles, n), np.uint32), "d")
    for call in range(1, 4):
        out, slots, flags = stepped(xs, ws, slots, flags)
        np.testing.assert_array_equal(out, first)
        np.testing.assert_array_equal(flags, np.full((n * tiles, n), call, np.uint32))

    # The CUDA lowering: the custom call with its peers attribute (slots, flags).
    text = ours.trace(xs, ws).lower(lowering_platforms=("cuda",)).as_text()
    assert len(re.findall(r"stablehlo.custom_call @jaxptx_launch_v2", text)) == 1, text
    assert re.search(rf'peers = \{{axis_name = "d", axis_size = {n} : i64, buffers = '
                     r'dense<\[5, 6\]> : tensor<2xi64>, multimem = 0 : i64, site = 0 : i64\}', text), text
    # Rows that do not divide among the devices.
    odd = jax.jit(jax.shard_map(lambda a, b: matmul_reduce_scatter(a[1:], b, "d", arch=arch), **specs))
    with pytest.raises(SpecError, match=rf"x: its {n * S - 1} rows must divide among the {n} devices "
                                        rf"of axis 'd'"):
        odd(xs, ws)
    print(f"{arch} on {n} devices: ok")


def main(n: int, arches: list[str]) -> None:
    assert jax.device_count() == n, jax.devices()
    for arch in arches:
        check(n, arch)
    print("OK")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])

"""The library's collectives inside jax.shard_map on N CPU devices.

Run by test_collectives.py in a fresh process as ``collectives_script.py N``
with XLA_FLAGS=--xla_force_host_platform_device_count=N (the device count is
fixed when jax starts). Prints OK when every check passes.
"""

from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxptx
from jaxptx.kernels import _collective_gather_sm80
from jaxptx.kernels.collectives import all_gather_matmul, all_reduce

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}


def check_all_reduce(mesh, n: int) -> None:
    """Every method and dtype against psum: small integers (exact in any
    order and any rounding), then random f32 within rounding; every device
    gets the same bits."""
    def put(a):
        return jax.device_put(a, NamedSharding(mesh, P("d")))

    for method in ("one_shot", "two_shot", "multimem", "auto"):
        for name, dt in DTYPES.items():
            data = np.random.default_rng(n).integers(-8, 8, (n, 3, 333)).astype(dt)   # 999: padded
            f = jax.jit(jax.shard_map(
                lambda a, method=method: (all_reduce(a[0], "d", method=method)[None], jax.lax.psum(a, "d")),
                mesh=mesh, in_specs=P("d"), out_specs=(P("d"), P("d"))))
            with jaxptx.sim.checking():
                mine, theirs = f(put(data))
            assert mine.dtype == dt and mine.shape == data.shape, (method, name, mine.dtype, mine.shape)
            np.testing.assert_array_equal(np.asarray(mine, np.float32), np.asarray(theirs, np.float32),
                                          err_msg=f"{method} {name}")
    data = np.random.default_rng(1).standard_normal((n, 4096)).astype(np.float32)
    for method in ("one_shot", "two_shot", "multimem"):
        f = jax.jit(jax.shard_map(lambda a, method=method: all_reduce(a[0], "d", method=method)[None], mesh=mesh,
                                  in_specs=P("d"), out_specs=P("d")))
        got = np.asarray(f(put(data)))
        np.testing.assert_allclose(got, np.broadcast_to(data.astype(np.float64).sum(0), got.shape),
                                   rtol=1e-5, atol=1e-5)
        assert (got == got[0]).all(), f"{method}: devices disagree"


def check_all_gather_matmul(mesh, n: int, arch: str, shapes: list[tuple[int, int, int]]) -> None:
    """Against ``all_gather(x, tiled=True) @ w`` (f32 accumulation), exact
    on small integers, for bf16 and f16, under the sanitizer."""
    for (r, k, c), name in zip(shapes, ("bf16", "f16", "bf16")):
        dt = DTYPES[name]
        rng = np.random.default_rng(r + k + c)
        x = rng.integers(-3, 4, (n * r, k)).astype(dt)
        w = rng.integers(-3, 4, (k, n * c)).astype(dt)
        f = jax.jit(jax.shard_map(
            lambda a, b: (all_gather_matmul(a, b, "d", arch=arch),
                          jnp.dot(jax.lax.all_gather(a, "d", tiled=True), b, preferred_element_type=jnp.float32)),
            mesh=mesh, in_specs=(P("d", None), P(None, "d")), out_specs=(P(None, "d"), P(None, "d"))))
        xs = jax.device_put(x, NamedSharding(mesh, P("d", None)))
        ws = jax.device_put(w, NamedSharding(mesh, P(None, "d")))
        with jaxptx.sim.checking():
            mine, theirs = f(xs, ws)
        assert mine.dtype == jnp.float32 and mine.shape == (n * r, n * c), (mine.dtype, mine.shape)
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs), err_msg=f"{arch} {(r, k, c)}")


def check_the_flags_matter(mesh, n: int) -> None:
    """Without the per-block wait, the sanitizer reports the peer's push
    racing with the GEMM's reads: the arrival flags are what orders them."""
    real = _collective_gather_sm80.wait_rows
    _collective_gather_sm80.wait_rows = lambda *args: None
    _collective_gather_sm80.gather_kernel_sm80.cache_clear()
    try:
        x = jax.device_put(np.ones((n * 64, 64), jnp.bfloat16), NamedSharding(mesh, P("d", None)))
        w = jax.device_put(np.ones((64, n * 64), jnp.bfloat16), NamedSharding(mesh, P(None, "d")))
        f = jax.jit(jax.shard_map(lambda a, b: all_gather_matmul(a, b, "d", arch="sm_80"), mesh=mesh,
                                  in_specs=(P("d", None), P(None, "d")), out_specs=P(None, "d")))
        with jaxptx.sim.checking(), pytest.raises(Exception, match=r"SanitizerError.*race between devices"):
            f(x, w).block_until_ready()
    finally:
        _collective_gather_sm80.wait_rows = real
        _collective_gather_sm80.gather_kernel_sm80.cache_clear()


def check_cuda_lowering(mesh, n: int) -> None:
    """One custom call per collective, with the axis and its peer buffers."""
    data = jax.device_put(np.zeros((n, 1024), np.float32), NamedSharding(mesh, P("d")))
    f = jax.jit(jax.shard_map(lambda a: all_reduce(a, "d", method="multimem", arch="sm_90a"), mesh=mesh,
                              in_specs=P("d"), out_specs=P("d")))
    text = f.trace(data).lower(lowering_platforms=("cuda",)).as_text()
    assert re.search(rf'peers = \{{axis_name = "d", axis_size = {n} : i64, buffers = dense<\[0, 1, 2\]> '
                     rf': tensor<3xi64>, multimem = 7 : i64', text), text
    x = jax.device_put(np.zeros((n * 64, 64), jnp.bfloat16), NamedSharding(mesh, P("d", None)))
    w = jax.device_put(np.zeros((64, n * 64), jnp.bfloat16), NamedSharding(mesh, P(None, "d")))
    g = jax.jit(jax.shard_map(lambda a, b: all_gather_matmul(a, b, "d", arch="sm_90a"), mesh=mesh,
                              in_specs=(P("d", None), P(None, "d")), out_specs=P(None, "d")))
    text = g.trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
    assert len(re.findall(r"stablehlo.custom_call @jaxptx_launch_v2", text)) == 1, text
    assert re.search(rf'axis_size = {n} : i64, buffers = dense<\[2, 3\]> : tensor<2xi64>, multimem = 0', text), text
    hlo = g.trace(x, w).lower(lowering_platforms=("cuda",)).as_text(dialect="hlo")
    assert "API_VERSION_TYPED_FFI" in hlo


def main(n: int, full: bool) -> None:
    assert jax.device_count() == n, jax.devices()
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Explicit,))
    check_all_reduce(mesh, n)
    # (R, K, N) per device: partial row blocks, K not a multiple of the K tile,
    # K and N that need padding to 8 (the last); `full` adds two column tiles.
    shapes = [(40, 72, 24), (64, 64, 64), (24, 36, 20)]
    if full:
        shapes[1] = (136, 96, 136)
    check_all_gather_matmul(mesh, n, "sm_80", shapes)
    check_all_gather_matmul(mesh, n, "sm_90a", shapes[:2])
    check_the_flags_matter(mesh, n)
    check_cuda_lowering(mesh, n)
    print("OK")


if __name__ == "__main__":
    main(int(sys.argv[1]), "--full" in sys.argv[2:])

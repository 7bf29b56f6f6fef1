"""matmul_reduce_scatter: psum_scatter(x @ w) with the reduction overlapped.

The multi-device runs are a subprocess each (``mrs_script.py N ARCH...`` on
N CPU devices: against ``jax.lax.psum_scatter`` and float64 numpy, under the
sanitizer, a state threaded through three calls, the CUDA lowering, rows
that do not divide); ptxas, a one-device mesh and the argument errors run
here.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxptx.errors import SpecError
from jaxptx.kernels._mrs_sm80 import mrs_kernel as sm80_kernel
from jaxptx.kernels._mrs_sm90 import mrs_kernel as sm90_kernel
from jaxptx.kernels.matmul_reduce_scatter import matmul_reduce_scatter

ARCHES = ("sm_80", "sm_90a")


@pytest.mark.parametrize("devices", [2, pytest.param(4, marks=pytest.mark.slow),
                                     pytest.param(8, marks=pytest.mark.slow)])
def test_on_cpu_devices(devices):
    """Both variants, bf16 and f16, on ``devices`` CPU devices (mrs_script.py)."""
    script = pathlib.Path(__file__).with_name("mrs_script.py")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script), str(devices), *ARCHES], env=env,
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")


@pytest.mark.parametrize("world", [2, 8])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ptxas_accepts_every_variant_without_spills(dtype, world):
    """Full tiles, several K blocks, ragged edges: no spills, no stack."""
    for dims in (dict(S=256, K=256, N=256, T=4), dict(S=48, K=64, N=136, T=2)):
        for r in (sm80_kernel(dtype).resources(M=world * dims["S"], world_size=world, W=world, **dims),
                  sm90_kernel(dtype).resources(world_size=world, W=world, **dims)):
            assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, r


def test_owners_in_ring_order_own_slice_last():
    """The send loop walks owners rank + 1 .. rank + W - 1 (mod W) through
    the peer table; the own slice comes after it, read from ``slots.ptr``."""
    text = sm80_kernel("bf16").ptx(M=96, K=32, N=136, S=48, W=2, T=2, world_size=4)
    assert text.count("st.release.sys.global.u32") == 1        # one flag per sent tile
    assert text.count("ld.acquire.sys.global.u32") == 4        # a wait per source (own rank skipped at run time)
    assert "rem.u32" in text                                    # ring order
    assert not re.search(r"^\s*(red|atom)\.", text, re.MULTILINE)       # no atomics: stores to per-source slots


def _one_device_mesh():
    return jax.make_mesh((1,), ("d",), axis_types=(AxisType.Auto,))


@pytest.mark.parametrize("arch", ARCHES)
def test_one_device_axis_is_a_matmul(arch):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (40, 64)).astype(jnp.bfloat16)
    w = rng.integers(-3, 4, (64, 16)).astype(jnp.bfloat16)
    f = jax.shard_map(lambda a, b: matmul_reduce_scatter(a, b, "d", arch=arch), mesh=_one_device_mesh(),
                      in_specs=(P(None, "d"), P("d", None)), out_specs=P("d"))
    got = jax.jit(f)(x, w)
    assert got.dtype == jnp.float32
    np.testing.assert_array_equal(got, x.astype(np.float64) @ w.astype(np.float64))


def _bf16(*shape):
    return jnp.zeros(shape, jnp.bfloat16)


@pytest.mark.parametrize("x, w, match", [
    (_bf16(8, 8, 8), _bf16(8, 8),
     r"matmul_reduce_scatter x: expected a 2-d array \(this device's shard\), got shape \(8, 8, 8\)"),
    (_bf16(8, 8), [1.0], r"matmul_reduce_scatter w: expected a 2-d array .*got list"),
    (jnp.zeros((8, 8), jnp.float32), _bf16(8, 8), r"x: expected bfloat16 or float16, got float32"),
    (_bf16(8, 8), jnp.zeros((8, 8), jnp.float16), r"same dtype, got bfloat16 and float16"),
    (_bf16(8, 8), _bf16(16, 8),
     r"x is \(8, 8\) and w is \(16, 8\) on this device; expected w.shape\[0\] == x.shape\[1\]"),
    (_bf16(8, 8), _bf16(8, 8), r"axis_name='d' is not a mesh axis here \(called outside jax.shard_map"),
])
def test_bad_arguments_outside_shard_map(x, w, match):
    with pytest.raises(SpecError, match=match):
        matmul_reduce_scatter(x, w, "d")


@pytest.mark.parametrize("x, w, axis, arch, match", [
    (_bf16(8, 8), _bf16(8, 8), "e", None, r"axis_name='e' is not a mesh axis here .*no axis 'e'"),
    (_bf16(8, 8), _bf16(8, 8), 3, None, r"axis_name: expected the name of a mesh axis, got 3"),
    (_bf16(8, 12), _bf16(12, 8), "d", None,
     r"x's columns per device \(12\) and w's columns \(8\) must be multiples of 8"),
    (_bf16(8, 8), _bf16(8, 8), "d", "sm_100a", r"arch='sm_100a' is not a variant of matmul_reduce_scatter"),
])
def test_bad_arguments_inside_shard_map(x, w, axis, arch, match):
    f = jax.shard_map(lambda a, b: matmul_reduce_scatter(a, b, axis, arch=arch), mesh=_one_device_mesh(),
                      in_specs=(P(), P()), out_specs=P())
    with pytest.raises(SpecError, match=match):
        jax.jit(f)(x, w)

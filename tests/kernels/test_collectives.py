"""The library's collectives: ``all_reduce`` (one-shot, two-shot, multimem)
and ``all_gather_matmul`` (sm_80, sm_90a).

The multi-device runs are a subprocess each (``collectives_script.py N`` on
N CPU devices: against psum and all_gather + jnp.dot, under the sanitizer,
and the CUDA lowering); ptxas, the method choice, the errors and a
one-device mesh run here.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxptx.errors import SpecError
from jaxptx.kernels._collective_gather_sm80 import gather_kernel_sm80
from jaxptx.kernels._collective_gather_sm90 import gather_kernel_sm90
from jaxptx.kernels._collective_reduce import METHODS, reduce_kernel
from jaxptx.kernels.collectives import (
    ONE_SHOT_MAX_BYTES,
    all_gather_matmul,
    all_reduce,
    choose_method,
)


def _run_script(devices: int, *extra: str) -> None:
    script = pathlib.Path(__file__).with_name("collectives_script.py")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script), str(devices), *extra], check=False, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert result.stdout.strip().endswith("OK")


def test_collectives_on_two_cpu_devices():
    """all_reduce (every method, f32/bf16/f16) against psum, all_gather_matmul
    (sm_80, sm_90a) against all_gather + jnp.dot, all under the sanitizer; the
    sanitizer catching a kernel without its arrival waits; the CUDA lowering."""
    _run_script(2)


@pytest.mark.slow
@pytest.mark.parametrize("devices", [4, 8])
def test_collectives_on_more_cpu_devices(devices):
    _run_script(devices, "--full")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_ptxas_accepts_all_reduce_without_spills(method, dtype):
    for arch in (("sm_90a",) if method == "multimem" else ("sm_80", "sm_90a")):
        for world in (2, 8):
            r = reduce_kernel(method, dtype, arch).resources(N=1 << 20, F=32, world_size=world)
            assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, (arch, world, r)


@pytest.mark.parametrize("make", [gather_kernel_sm80, gather_kernel_sm90])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ptxas_accepts_all_gather_matmul_without_spills(make, dtype):
    for world in (2, 8):
        r = make(dtype).resources(R=1000, K=1024, N=384, F=64, W=world, world_size=world)
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, (world, r)


def test_ptx_uses_the_collective_instructions():
    text = reduce_kernel("multimem", "bf16", "sm_90a").ptx(N=4096, F=2, world_size=4)
    assert "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2" in text
    assert "multimem.st.relaxed.sys.global.v4.bf16x2" in text
    assert "multimem.red.release.sys.global.add.u32" in text
    text = reduce_kernel("two_shot", "f32", "sm_80").ptx(N=4096, F=2, world_size=4)
    assert "red.release.sys.global.add.u32" in text and "ld.acquire.sys.global.u32" in text
    text = gather_kernel_sm90("bf16").ptx(R=128, K=64, N=128, F=8, W=4, world_size=4)
    assert "fence.proxy.async.global;" in text and "wgmma.mma_async" in text
    assert "cp.async.bulk.tensor.3d" in text
    text = gather_kernel_sm80("f16").ptx(R=128, K=64, N=128, F=8, W=4, world_size=4)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in text


def test_auto_method_by_size():
    assert choose_method(ONE_SHOT_MAX_BYTES, "sm_90a", True) == "one_shot"
    assert choose_method(ONE_SHOT_MAX_BYTES + 1, "sm_90a", True) == "multimem"
    assert choose_method(ONE_SHOT_MAX_BYTES + 1, "sm_90a", False) == "two_shot"
    assert choose_method(ONE_SHOT_MAX_BYTES + 1, "sm_80", True) == "two_shot"


def _mesh():
    return jax.make_mesh((1,), ("d",), axis_types=(AxisType.Auto,))


def _in_shard_map(fn, *args):
    """``fn(*args)`` inside shard_map over the one-device axis ``d``."""
    return jax.jit(jax.shard_map(fn, mesh=_mesh(), in_specs=tuple(P("d") for _ in args),
                                 out_specs=P("d")))(*args)


def test_one_device_axis():
    """On an axis of one device the all-reduce is a copy (every method) and
    the all-gather matmul a plain matmul."""
    x = np.arange(700, dtype=np.float32).reshape(7, 100)
    for method in ("one_shot", "two_shot", "multimem"):
        np.testing.assert_array_equal(_in_shard_map(lambda a, method=method: all_reduce(a, "d", method=method), x), x)
    a = (np.arange(40 * 32) % 7).reshape(40, 32).astype(jnp.bfloat16)
    b = (np.arange(32 * 16) % 5).reshape(32, 16).astype(jnp.bfloat16)
    want = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    np.testing.assert_array_equal(_in_shard_map(lambda p, q: all_gather_matmul(p, q, "d", arch="sm_80"), a, b),
                                  want)


def test_errors_outside_shard_map_and_unknown_axis():
    x = np.ones(8, np.float32)
    with pytest.raises(SpecError, match=r"all_reduce: axis_name='d' is not a mesh axis here \(called outside"):
        all_reduce(x, "d")
    with pytest.raises(SpecError, match=r"all_gather_matmul: axis_name='e' is not a mesh axis here.*no axis 'e'"):
        _in_shard_map(lambda a, b: all_gather_matmul(a, b, "e"), np.ones((8, 8), jnp.bfloat16),
                      np.ones((8, 8), jnp.bfloat16))
    with pytest.raises(SpecError, match=r"all_reduce axis_name: expected the name of a mesh axis.*got 3"):
        _in_shard_map(lambda a: all_reduce(a, 3), x)


@pytest.mark.parametrize("fn, match", [
    (lambda: all_reduce(np.ones(8, np.int32), "d"), r"all_reduce x: expected float32, bfloat16 or float16, got int32"),
    (lambda: all_reduce(np.ones(8, np.float32), "d", method="ring"), r"all_reduce method: expected 'auto' or one of"),
    (lambda: all_reduce(np.ones(8, np.float32), "d", method="multimem", arch="sm_80"),
     r"method='multimem' needs sm_90 or later"),
    (lambda: all_reduce(np.ones(8, np.float32), "d", arch="sm_70"), r"all_reduce: arch='sm_70' is not a variant"),
    (lambda: all_gather_matmul(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32), "d"),
     r"all_gather_matmul x: expected bfloat16 or float16, got float32"),
    (lambda: all_gather_matmul(np.ones(8, jnp.bfloat16), np.ones((8, 8), jnp.bfloat16), "d"),
     r"all_gather_matmul x: expected a 2-d array, got shape \(8,\)"),
    (lambda: all_gather_matmul(np.ones((8, 8), jnp.bfloat16), np.ones((8, 8), jnp.float16), "d"),
     r"x and w must have the same dtype, got bfloat16 and float16"),
    (lambda: all_gather_matmul(np.ones((8, 8), jnp.bfloat16), np.ones((16, 8), jnp.bfloat16), "d"),
     r"expected w.shape\[0\] == x.shape\[1\]"),
    (lambda: all_gather_matmul(np.ones((8, 8), jnp.bfloat16), np.ones((8, 8), jnp.bfloat16), "d",
                               arch="sm_100a"), r"arch='sm_100a' is not a variant of all_gather_matmul"),
])
def test_bad_arguments_name_the_argument(fn, match):
    with pytest.raises(SpecError, match=match):
        _in_shard_map(lambda: fn())

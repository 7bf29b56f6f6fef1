"""Kernels that name their peers (``@kernel(peers=...)``) under jax.shard_map.

The multi-device runs are a subprocess each (``peers_script.py N`` on N CPU
devices); the DSL, the errors and a one-device mesh run here.
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
from jax.sharding import AxisType, PartitionSpec as P

from jaxptx import Tile, kernel, ptx
from jaxptx.errors import SpecError, TraceError
from jaxptx.types import f32, u32

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from peers_script import SHARD, oneshot_allreduce, ring_shift  # noqa: E402


@pytest.mark.parametrize("devices", [2, pytest.param(4, marks=pytest.mark.slow),
                                     pytest.param(8, marks=pytest.mark.slow)])
def test_peer_kernels_on_cpu_devices(devices):
    """Ring shift (twice per program, run twice, under vmap) against
    np.roll, multimem all-reduce against psum, the sanitizer, a shard that
    never arrives, the CUDA lowering and a jax.export round trip."""
    script = pathlib.Path(__file__).with_name("peers_script.py")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script), str(devices)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")


def test_a_two_axis_mesh_runs_each_group_along_the_axis_on_its_own():
    """A 2 x 2 mesh: the ring shift over "d" stays within each row of "x" (the
    devices of different rows never meet), and lowers for CUDA as a one-axis call."""
    script = pathlib.Path(__file__).with_name("peers_script.py")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script), "4", "two-axis"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def test_hidden_parameters_follow_the_kernels_own():
    text = ring_shift.ptx(N=256, world_size=4)
    params = re.findall(r"\.param \.(\w+) (\w+)", text)
    assert params == [("u64", "x"), ("u64", "flag"), ("u64", "y"), ("u32", "jaxptx_rank"),
                      ("u64", "jaxptx_peers")]
    assert "ld.param.u32 %r1, [jaxptx_rank];" in text
    assert re.search(r"rem\.u32 %r\d+, %r\d+, 4;", text)       # world_size() is the int 4
    assert ring_shift.cubin(N=256, world_size=4)[:4] == b"\x7fELF"   # ptxas accepts it


def test_peer_table_rows():
    """peer_ptr(int) reads row k * W + r; multimem_ptr row K * W + k."""
    @kernel(in_specs=(Tile(4, u32), Tile(4, u32)), out_specs=(Tile(4, u32),), arch="sm_90a",
            peers=("a", "b"))
    def rows(a, b, c):
        ptx.st.global_.u64(c.ptr, b.peer_ptr(3))
        ptx.st.global_.u64(c.ptr, b.multimem_ptr)

    text = rows.ptx(world_size=4)
    assert re.search(r"ld\.global\.u64 %rd\d+, \[%rd\d+\+56\];", text)      # (1 * 4 + 3) * 8
    assert re.search(r"ld\.global\.u64 %rd\d+, \[%rd\d+\+72\];", text)      # (2 * 4 + 1) * 8
    assert rows.specialize(world_size=4).multimem == ("b",)


@pytest.mark.parametrize("make, match", [
    (lambda: kernel(in_specs=(Tile(1, f32),), out_specs=(Tile(1, f32),), peers=("z",))(
        lambda x, y: None), r"peers: \['z'\] are not tensor parameters of the kernel"),
    (lambda: kernel(in_specs=(Tile(1, f32),), out_specs=(Tile(1, f32),), peers=("x", "x"))(
        lambda x, y: None), r"peers: each tensor once"),
])
def test_bad_peers_option(make, match):
    with pytest.raises(SpecError, match=match):
        make()


def test_trace_errors():
    with pytest.raises(SpecError, match=r"kernel ring_shift has peers \('y', 'flag'\).*pass world_size="):
        ring_shift.ptx(N=256)

    @kernel(in_specs=(Tile(1, u32),), out_specs=(Tile(1, u32),), arch="sm_90a")
    def lonely(x, y):
        ptx.rank()

    with pytest.raises(TraceError, match=r"ptx.rank\(\): kernel lonely declares no peers"):
        lonely.ptx()

    @kernel(in_specs=(Tile(1, u32),), out_specs=(Tile(1, u32),), arch="sm_90a", peers=("x",))
    def far(x, y):
        x.peer_ptr(4)

    with pytest.raises(TraceError, match=r"x.peer_ptr\(4\): rank 4 is outside the axis \(0..3\)"):
        far.ptx(world_size=4)


def _one_device_mesh():
    return jax.make_mesh((1,), ("d",), axis_types=(AxisType.Auto,))


def _shift(a, axis="d"):
    return ring_shift(a, jnp.zeros(1, jnp.uint32), axis_name=axis)


def test_call_errors_name_the_axis():
    x = np.arange(SHARD, dtype=np.float32)
    with pytest.raises(SpecError, match=r"axis_name='d' is not a mesh axis here \(called outside "
                                        r"jax.shard_map"):
        _shift(x)
    f = jax.shard_map(lambda a: _shift(a, "e"), mesh=_one_device_mesh(), in_specs=P("d"),
                      out_specs=P("d"))
    with pytest.raises(SpecError, match=r"axis_name='e' is not a mesh axis here.*no axis 'e'"):
        jax.jit(f)(x)
    with pytest.raises(SpecError, match=r"call it inside jax.shard_map .* got axis_name=None"):
        ring_shift(x, np.zeros(1, np.uint32))


def test_axis_name_on_a_kernel_without_peers():
    @kernel(in_specs=(Tile(1, f32),), out_specs=(Tile(1, f32),), arch="sm_90a")
    def plain(x, y):
        ptx.st.global_.f32(y.ptr, ptx.ld.global_.f32(x.ptr))

    with pytest.raises(SpecError, match=r"axis_name='d' is for kernels with peers"):
        plain(np.ones(1, np.float32), axis_name="d")


def test_one_device_axis_runs_and_shows_in_the_jaxpr():
    """On a mesh of one, the ring shift is the identity and the all-reduce a copy."""
    mesh = _one_device_mesh()
    x = np.arange(SHARD, dtype=np.float32)
    f = jax.shard_map(_shift, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    jaxpr = str(jax.make_jaxpr(f)(x))
    assert re.search(r"ring_shift\[\s*axis=\(.d., 1\)", jaxpr), jaxpr
    assert "axis_index" in jaxpr
    np.testing.assert_array_equal(jax.jit(f)(x), x)
    g = jax.shard_map(lambda a: oneshot_allreduce(a, jnp.zeros(1, jnp.uint32), axis_name="d"),
                      mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    y = np.arange(512, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(g)(y), y)

"""``jaxptx.profile.profiling()``: every emulator launch inside a block,
under ``jax.jit`` too, profiled as a direct ``profile=True`` launch would
be, with what the caller gets (results, findings, errors) unchanged."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from profile_cases import COLUMN_READ

from jaxptx import Tile, kernel, kernels, profile, ptx, sim, smem
from jaxptx.profile import collect
from jaxptx.sim import device as sim_device
from jaxptx.types import f32


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=(1, 1, 1), block=(32, 1, 1),
        arch="sm_90a")
def swap_pairs(x, y, *, sync=True):
    """y[i] = x[i ^ 1] through shared memory; ``sync=False`` leaves out the
    barrier between the store and the neighbour's load (a race)."""
    buf = smem.alloc(f32, 32)
    tid = ptx.special.tid.x()
    ptx.st.shared.f32(buf[tid], ptx.ld.global_.f32(x.ptr + ptx.mul.wide.u32(tid, 4)))
    if sync:
        ptx.bar.sync(0)
    v = ptx.ld.shared.f32(buf[tid ^ 1])
    ptx.st.global_.f32(y.ptr + ptx.mul.wide.u32(tid, 4), v)


X = np.arange(32, dtype=np.float32)


def _direct(p: profile.Profile, module, inputs: list[np.ndarray], outputs: list[int]) -> profile.Profile:
    """The same launch on a fresh device with ``profile=True``: the inputs,
    then an output buffer of each byte size, as the CPU handler places them."""
    dev = sim.Device()
    pointers = [dev.to_device(np.asarray(a)) for a in inputs] + [dev.alloc(n) for n in outputs]
    launch = p.launch
    return dev.launch(module, pointers, grid=launch["grid"], block=launch["block"],
                      smem=launch["dynamic_smem"], profile=True)


def test_under_jit_one_profile_per_launch_equal_to_a_direct_profile():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 256)), jnp.float32)
    w = jnp.ones((256,), jnp.float32)
    with profile.profiling() as p:
        y = jax.block_until_ready(jax.jit(kernels.rms_norm)(x, w))
        z = jax.block_until_ready(jax.jit(kernels.softmax)(x))
    assert len(p) == len(p.profiles) == len(p.modules) == 2
    assert [q.name for q in p.profiles] == p.kernels()
    assert p.profiles[0].name.startswith("rms_norm") and p.profiles[1].name.startswith("softmax")
    assert list(p.by_kernel()) == p.kernels()
    # the results are what they are without the block
    np.testing.assert_allclose(np.asarray(y), np.asarray(jax.jit(kernels.rms_norm)(x, w)))
    np.testing.assert_allclose(np.asarray(z), np.asarray(jax.jit(kernels.softmax)(x)))
    direct = _direct(p.profiles[0], p.modules[0], [x, w], [y.nbytes, x.shape[0] * 4])   # y, and rstd (f32 a row)
    assert p.profiles[0].to_dict() == direct.to_dict()
    direct = _direct(p.profiles[1], p.modules[1], [x], [z.nbytes])
    assert p.profiles[1].to_dict() == direct.to_dict()


def test_a_traced_kernel_under_jit_and_eager():
    f = jax.jit(swap_pairs)
    with profile.profiling() as p:
        y = jax.block_until_ready(f(X))
        jax.block_until_ready(swap_pairs(X))           # eager: the same CPU handler
    np.testing.assert_array_equal(np.asarray(y), X.reshape(-1, 2)[:, ::-1].reshape(-1))
    assert [q.name for q in p] == ["swap_pairs", "swap_pairs"]
    assert p[0].to_dict() == p[1].to_dict() == _direct(p[0], p.modules[0], [X], [X.nbytes]).to_dict()
    assert p.by_kernel() == {"swap_pairs": [p[0], p[1]]}
    text = str(p)
    assert text.startswith("jaxptx.profile.profiling: 2 launches")
    assert text.count("swap_pairs") == 2 and "roofline estimate" in text and "H100" in text
    assert repr(p) == "<Profiling: 2 launches of 1 kernels>"
    assert [e["name"] for e in json.loads(p.to_json())["launches"]] == ["swap_pairs"] * 2


def test_sim_launch_device_launch_and_profile_are_collected_unchanged():
    src = np.arange(32 * 32, dtype=np.float32)
    with profile.profiling() as p:
        plain = sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32)
        asked = sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32, profile=True)
        found = sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32, check="all")
        dev = sim.Device()
        a, b = dev.to_device(src), dev.alloc(32 * 4)
        fidelity = dev.launch(COLUMN_READ, [a, b], block=32, fidelity=True)
        both = dev.launch(COLUMN_READ, [a, b], block=32, fidelity=True, profile=True)
        top = profile.profile(COLUMN_READ, src, np.zeros(32, np.float32), block=32, resources=False)
    assert plain is None and found == []                      # what they return without a block
    assert isinstance(asked, profile.Profile) and asked is p[1]     # the caller's own, shared
    assert fidelity.profile is None and both.profile is p[4]
    assert p[5] is top
    assert len(p) == 6 and all(q.kernel["global_sectors"] == 36 for q in p)
    assert p[0].to_dict() == asked.to_dict()
    assert p[2].findings == [] and p[0].findings is None


def test_no_block_nested_blocks_and_after_the_block():
    src = np.arange(32 * 32, dtype=np.float32)

    def run():
        return sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32)
    assert sim_device.PROFILING[0] is None
    assert run() is None
    with profile.profiling() as outer:
        run()
        with profile.profiling() as inner:
            run()
            assert sim_device.PROFILING[0] is not None
        assert sim_device.PROFILING[0] is not None      # the outer block is still open
        run()
    assert sim_device.PROFILING[0] is None
    run()
    assert len(outer) == 3 and len(inner) == 1
    assert inner[0] is outer[1]
    with profile.profiling() as empty:
        pass
    assert len(empty) == 0 and str(empty) == ("jaxptx.profile.profiling: 0 launches\n" +
                                              collect.render(empty).splitlines()[1])


def test_a_block_closes_when_its_body_raises():
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        with profile.profiling():
            1 / 0
    assert sim_device.PROFILING[0] is None and not collect._OPEN


def _raised(f, x) -> str:
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"(?s)^INTERNAL: SanitizerError: kernel swap_pairs: "
                                                         r".*sanitizer: shared-memory race: ") as e:
        jax.block_until_ready(f(x))
    return str(e.value)


@pytest.mark.parametrize("mode", [True, "all"])
def test_sanitizer_findings_are_raised_as_without_profiling(mode):
    f = jax.jit(lambda x: swap_pairs(x, sync=False))
    with sim.checking(mode):
        plain = _raised(f, X)
        with profile.profiling() as p:
            profiled = _raised(f, X)
    assert "SanitizerError: kernel swap_pairs" in plain
    assert profiled == plain
    # a launch that raised has no profile ("all" ends the launch, then raises in the handler)
    assert len(p) == (1 if mode == "all" else 0)


def test_a_fault_is_raised_as_without_profiling():
    src = np.arange(4, dtype=np.float32)                   # far too small: the reads fault
    fault = (r"^kernel column_read: ld\.global\.f32: global access of 4 bytes at offset 0x80 of parameter "
             r"'src' is out of bounds \(its buffer has 16 bytes; CTA 0, thread 1\)")
    with pytest.raises(sim.SimError, match=fault) as plain:
        sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32)
    with profile.profiling() as p:
        with pytest.raises(sim.SimError, match=fault) as profiled:
            sim.launch(COLUMN_READ, src, np.zeros(32, np.float32), block=32)
    assert str(profiled.value) == str(plain.value) and len(p) == 0


def test_resources_from_ptxas_once_per_kernel():
    with profile.profiling(resources=True) as p:
        jax.block_until_ready(jax.jit(swap_pairs)(X))
        jax.block_until_ready(jax.jit(lambda x: swap_pairs(x) * 2)(X))
    assert len(p) == 2
    first, second = p
    if "error" in (first.resources or {}):
        pytest.skip(f"no ptxas here: {first.resources['error']}")
    assert first.resources["registers"] > 0 and second.resources == first.resources
    assert set(first.occupancy) == set(second.occupancy) == {"sm_90a"}


def test_docstring_example_runs():
    result = doctest.testmod(collect, optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed


def test_launches_on_xla_threads_are_collected():
    """Under ``shard_map`` on two CPU devices XLA runs the custom calls on
    threads of its own (a context variable set in the caller's thread would
    miss them): both launches are collected."""
    code = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax, jax.numpy as jnp
        from jax.sharding import PartitionSpec as P
        from jaxptx import kernels, profile
        mesh = jax.make_mesh((2,), ("b",), axis_types=(jax.sharding.AxisType.Auto,))
        f = jax.jit(jax.shard_map(kernels.rms_norm, mesh=mesh, in_specs=(P("b"), P()), out_specs=P("b")))
        x, w = jnp.ones((8, 256), jnp.float32), jnp.ones((256,), jnp.float32)
        with profile.profiling() as p:
            jax.block_until_ready(f(x, w))
        print(len(p), [q.launch["grid"] for q in p])
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "2 [[1, 1, 1], [1, 1, 1]]", out.stdout


def test_the_library_benchmark_profiles_through_profiling():
    """``benchmarks/profile_kernels.py`` part 1 (one op): a row per launch of
    each variant, with ptxas's figures where ptxas is installed."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "profile_kernels.py")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, script, "--only", "rms_norm", "--skip-overhead", "--skip-library-check"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| rms_norm 64x1024 |")]   # not the vjp rows
    assert [r.split(" | ")[1] for r in rows] == ["sm_80", "sm_90a", "sm_100a"], out.stdout
    assert all("failed" not in r and "rms_norm_bf16" in r for r in rows)

"""Kernels with peers inside jax.shard_map on N CPU devices.

Run by test_peers.py in a fresh process as ``peers_script.py N`` with
XLA_FLAGS=--xla_force_host_platform_device_count=N (the device count is fixed
when jax starts). Prints OK when every check passes. The kernels are
imported by test_peers.py too.
"""

from __future__ import annotations

import re
import sys

from jaxptx import Tile, kernel, ptx
from jaxptx.types import f32, u32

BLOCK = 64
SHARD = 256          # elements of x per device


@kernel(in_specs=(Tile("N", f32), Tile(1, u32)), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // BLOCK, 1, 1), block=(BLOCK, 1, 1), arch="sm_90a", peers=("y", "flag"))
def ring_shift(x, flag, y):
    """Each device stores its shard into its right neighbour's ``y``; each
    CTA then adds 1 to the neighbour's flag (``red.release.sys``), and waits
    until its own flag counts every CTA of its left neighbour."""
    right = ptx.rem.u32(ptx.rank() + 1, ptx.world_size())
    tid = ptx.special.tid.x()
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * BLOCK + tid, 4)
    ptx.st.global_.f32(y.peer_ptr(right) + off, ptx.ld.global_.f32(x.ptr + off))
    ptx.bar.sync(0)                           # the CTA's stores happen before the release
    with ptx.if_(tid == 0):
        ptx.red.release.sys.global_.add.u32(flag.peer_ptr(right), 1)
        for _ in ptx.while_(lambda: ptx.ld.acquire.sys.global_.u32(flag.ptr) < ptx.special.nctaid.x()):
            pass
    ptx.bar.sync(0)


@kernel(in_specs=(Tile("N", f32), Tile(1, u32)), out_specs=(Tile("N", f32),),
        block=(BLOCK, 1, 1), arch="sm_90a", peers=("x", "y", "flag"))
def oneshot_allreduce(x, flag, y):
    """One CTA per device: rank r sums its slice of ``x`` over every device
    (``multimem.ld_reduce``) and writes it to every device's ``y``
    (``multimem.st``); then the devices meet at a barrier of ``multimem.red``
    on the flags."""
    n = ptx.world_size()
    part = x.shape[0] // n
    tid = ptx.special.tid.x()
    base = ptx.rank() * part + tid
    for j in range(part // BLOCK):            # unrolled at trace time
        off = ptx.mul.wide.u32(base + j * BLOCK, 4)
        total = ptx.multimem.ld_reduce.relaxed.sys.global_.add.f32(x.multimem_ptr + off)
        ptx.multimem.st.relaxed.sys.global_.f32(y.multimem_ptr + off, total)
    ptx.bar.sync(0)
    with ptx.if_(tid == 0):
        ptx.multimem.red.release.sys.global_.add.u32(flag.multimem_ptr, 1)
        for _ in ptx.while_(lambda: ptx.ld.acquire.sys.global_.u32(flag.ptr) < n):
            pass
    ptx.bar.sync(0)


@kernel(in_specs=(Tile(1, u32),), out_specs=(Tile(1, u32),), block=(BLOCK, 1, 1), arch="sm_90a",
        peers=("y",))
def racy(x, y):
    """Every thread stores its own index to one word of its device's ``y``:
    a race the sanitizer reports."""
    ptx.st.global_.u32(y.peer_ptr(ptx.rank()), ptx.special.tid.x())


def main(n: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import pytest
    from jax import export
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxptx
    from jaxptx.jax import _peer_cpu

    assert jax.device_count() == n, jax.devices()
    mesh = jax.make_mesh((n,), ("d",), axis_types=(AxisType.Explicit,))
    x = np.arange(n * SHARD, dtype=np.float32)

    def put(a, *spec):
        return jax.device_put(a, NamedSharding(mesh, P(*spec)))

    xs = put(x, "d")

    def shift(a):
        return ring_shift(a, jnp.zeros(1, jnp.uint32), axis_name="d")

    # A ring shift, twice in one program (two call sites) and run twice.
    f = jax.jit(jax.shard_map(lambda a: (shift(a), shift(shift(a))), mesh=mesh,
                              in_specs=P("d"), out_specs=(P("d"), P("d"))))
    for _ in range(2):
        once, twice = f(xs)
        np.testing.assert_array_equal(once, np.roll(x, SHARD))
        np.testing.assert_array_equal(twice, np.roll(x, 2 * SHARD))

    # vmap: a loop of collective launches, one per batch element.
    batch = np.stack([x, -x])
    g = jax.jit(jax.shard_map(jax.vmap(shift), mesh=mesh, in_specs=P(None, "d"),
                              out_specs=P(None, "d")))
    np.testing.assert_array_equal(g(put(batch, None, "d")), np.roll(batch, SHARD, axis=1))

    two_axis(n)

    # One-shot multimem all-reduce against psum (integers in f32: exact in any order).
    data = np.random.default_rng(n).integers(-50, 50, (n, 512)).astype(np.float32)
    h = jax.jit(jax.shard_map(
        lambda a: (oneshot_allreduce(a[0], jnp.zeros(1, jnp.uint32), axis_name="d")[None],
                   jax.lax.psum(a, "d")),
        mesh=mesh, in_specs=P("d"), out_specs=(P("d"), P("d"))))
    mine, theirs = h(put(data, "d"))
    np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(mine, np.broadcast_to(data.sum(0), (n, 512)))

    # The sanitizer reaches the node's launch.
    r = jax.jit(jax.shard_map(lambda a: racy(a, axis_name="d"), mesh=mesh, in_specs=P("d"),
                              out_specs=P("d")))
    with jaxptx.sim.checking(), pytest.raises(Exception, match=r"SanitizerError.*kernel racy"):
        r(put(np.zeros(n, np.uint32), "d")).block_until_ready()
    with jaxptx.sim.checking():
        np.testing.assert_array_equal(f(xs)[0], np.roll(x, SHARD))

    # A shard that never arrives: only rank 0 calls the kernel.
    lone = jax.jit(jax.shard_map(
        lambda a: jax.lax.cond(jax.lax.axis_index("d") == 0, shift, lambda b: b, a),
        mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    missing = ", ".join(map(str, range(1, n)))
    import os
    os.environ[_peer_cpu.TIMEOUT_ENV] = "1"
    with pytest.raises(Exception, match=rf"PeerTimeoutError: kernel ring_shift: rank 0 of mesh axis "
                                        rf"'d' \(size {n}\) waited 1 s .*rank\(s\) \[{missing}\] never"):
        lone(xs).block_until_ready()
    del os.environ[_peer_cpu.TIMEOUT_ENV]
    np.testing.assert_array_equal(f(xs)[0], np.roll(x, SHARD))   # nothing left behind

    # The CUDA lowering: one custom call per device with the axis and the peers.
    text = f.trace(xs).lower(lowering_platforms=("cuda",)).as_text()
    calls = re.findall(r"stablehlo.custom_call @jaxptx_launch_v2\(([^)]*)\).*", text)
    assert len(calls) == 3, text
    for site in range(3):
        assert re.search(rf'peers = \{{axis_name = "d", axis_size = {n} : i64, buffers = '
                         rf'dense<\[2, 1\]> : tensor<2xi64>, multimem = 0 : i64, site = {site} : i64\}}',
                         text), text
    assert all(len(c.split(",")) == 3 for c in calls), calls     # x, flag, and the rank
    hlo = h.trace(put(data, "d")).lower(lowering_platforms=("cuda",)).as_text()
    assert re.search(r'buffers = dense<\[0, 2, 1\]> : tensor<3xi64>, multimem = 7 : i64', hlo), hlo

    # jax.export round trip on the CPU.
    exp = export.export(f, platforms=("cpu",), disabled_checks=jaxptx.jax.disabled_checks())(xs)
    back = jaxptx.jax.deserialize(exp.serialize())
    once, twice = back.call(xs)
    np.testing.assert_array_equal(twice, np.roll(x, 2 * SHARD))
    print("OK")


def two_axis(n: int) -> None:
    """A ring shift over axis "d" of a mesh with a second axis "x": each
    position on "x" is a group of its own along "d"; the CUDA lowering is the
    one-axis call (the rank operand carries the group)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    rows = 2 if n % 2 == 0 else 1
    mesh = jax.make_mesh((rows, n // rows), ("x", "d"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    x = np.arange(n * SHARD, dtype=np.float32).reshape(rows, -1)
    f = jax.jit(jax.shard_map(lambda a: ring_shift(a[0], jnp.zeros(1, jnp.uint32), axis_name="d")[None],
                              mesh=mesh, in_specs=P("x", "d"), out_specs=P("x", "d")))
    xs = jax.device_put(x, NamedSharding(mesh, P("x", "d")))
    np.testing.assert_array_equal(f(xs), np.roll(x, SHARD, axis=1))     # each row shifts on its own
    text = f.trace(xs).lower(lowering_platforms=("cuda",)).as_text()    # the same call, rank operand and all
    assert re.search(rf'peers = \{{axis_name = "d", axis_size = {n // rows} : i64', text), text


if __name__ == "__main__":
    if sys.argv[2:] == ["two-axis"]:
        two_axis(int(sys.argv[1]))
    else:
        main(int(sys.argv[1]))

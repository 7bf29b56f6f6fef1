"""Kernels that take a multicast address (x.multimem_ptr) on the CUDA handler's
path (ffi/cuda_multicast.cc, ffi/cuda_peers.cc) run with no GPU: multimem
all-reduces lowered for CUDA on 2- and 4-device meshes, handed to the real
handler once per rank, concurrently, against the stand-in driver over one
emulated node (jaxptx.testing._standin_peers.StandInNode), whose
cuMulticastCreate / cuMemCreate / cuMemMap run on a jaxptx.sim.System.
Results are compared with numpy; the driver's log shows the multicast
objects, the memory bound to them, the ranges mapped and the copies in and
out of the workspaces.

The calls are lowered in a subprocess with 4 CPU devices (the device count
is fixed when jax starts): tests/jax/peers_script.py's one-shot multimem
all-reduce and jaxptx.kernels.all_reduce(method="multimem")."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from jaxptx.testing._standin_peers import MULTICAST_GRANULARITY, StandInNode
from jaxptx.testing.standin import HandlerError, Ran

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer_calls import lowered_calls
INVALID_ARGUMENT, FAILED_PRECONDITION = 3, 9

_CALLS = """
from jaxptx.kernels import all_reduce
from peers_script import oneshot_allreduce

for n in (2, 4):
    calls["oneshot", n] = lower(
        lambda a: oneshot_allreduce(a[0], jnp.zeros(1, jnp.uint32), axis_name="d")[None], n, (n, 512))
    calls["library", n] = lower(
        lambda a: all_reduce(a[0], "d", method="multimem", arch="sm_90a")[None], n, (n, 1024))
"""


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    """The CUDA custom calls of the two multimem all-reduces on 2 and 4
    devices, each with its own kernel id."""
    return lowered_calls(_CALLS, tmp_path_factory.mktemp("multimem") / "calls.pkl", "test_cuda_multimem")


def shards(call, n: int, seed: int = 0) -> list[list[np.ndarray]]:
    """Each rank's x (integers in f32: sums exact in any order) and flags (zero)."""
    (x_shape, _), (flag_shape, _), _ = call.inputs
    rng = np.random.default_rng(seed)
    return [[rng.integers(-50, 50, x_shape).astype(np.float32), np.zeros(flag_shape, np.uint32)]
            for _ in range(n)]


def ok(results) -> list[Ran]:
    for r in results:
        if isinstance(r, HandlerError):
            raise r
    return results


def count(node: StandInNode, *entry_points: str) -> dict[str, int]:
    return {e: len(node.calls(e)) for e in entry_points}


@pytest.mark.parametrize("key", [("oneshot", 2), ("oneshot", 4), ("library", 2), ("library", 4)],
                         ids=lambda key: f"{key[0]}-{key[1]}")
def test_the_multimem_all_reduce_runs_through_the_handler_and_matches_numpy(calls, key):
    call, n = calls[key], key[1]
    peers = call["peers"]
    assert peers["multimem"] == 7 and len(peers["buffers"]) == 3
    node = StandInNode(n)
    data = shards(call, n)
    results = ok(node.run_ranks(call, data))
    total = np.sum([x for x, _ in data], axis=0)
    for r, ran in enumerate(results):
        np.testing.assert_array_equal(ran.outputs[0], total)
        # XLA's inputs are untouched: the kernel summed and flagged in the workspaces
        np.testing.assert_array_equal(ran.inputs[0], data[r][0])
        np.testing.assert_array_equal(ran.inputs[1], data[r][1])
    assert [sorted(group) for group in node.node_launches] == [list(range(n))]

    # one multicast object per peer tensor over every device, its size the
    # tensor's rounded up to the granularity; memory bound on every device
    created = node.calls("multicast_create")
    assert [(members, size) for _, members, size in created] == [(n, MULTICAST_GRANULARITY)] * 3
    assert sorted(d for _, d in node.calls("multicast_add_device")) == sorted(list(range(n)) * 3)
    assert sorted(d for _, d, _ in node.calls("multicast_bind_mem")) == sorted(list(range(n)) * 3)
    assert sorted(d for _, d, _ in node.calls("mem_create")) == sorted(list(range(n)) * 3)

    # each rank maps its memory (every device may access it) and the object
    # (its own device may); its table lists the ranks' memory, then its own
    # mappings of the objects
    assert {(size, alignment) for _, size, alignment in node.calls("mem_address_reserve")} == \
        {(MULTICAST_GRANULARITY, MULTICAST_GRANULARITY)}
    everyone = {(d, "rw") for d in range(n)}
    unicast = {a for a, granted in node.access.items() if granted == everyone}
    multicast = {a: next(iter(granted))[0] for a, granted in node.access.items() if len(granted) == 1}
    assert len(unicast) == len(multicast) == 3 * n
    tables = [np.frombuffer(data, np.uint64) for _, data in node.calls("memcpy_htod")]
    assert len(tables) == n
    seen = set()
    for t in tables:
        entries, own = [int(a) for a in t[:3 * n]], [int(a) for a in t[3 * n:]]
        assert set(entries) <= unicast and [a >> 48 for a in entries] == list(range(n)) * 3
        device = {multicast[a] for a in own}
        assert len(device) == 1 and all(a >> 48 == d for a in own for d in device)
        seen |= device
    assert seen == set(range(n))
    assert all(np.array_equal(t[:3 * n], tables[0][:3 * n]) for t in tables)

    # x and the flags are copied into the workspaces, y out of them
    x_bytes, flag_bytes = data[0][0].nbytes, data[0][1].nbytes
    copies = node.calls("memcpy_dtod")
    into = sorted(size for dst, _, size in copies if dst in unicast)
    out_of = sorted(size for _, src, size in copies if src in unicast)
    assert into == sorted([x_bytes, flag_bytes] * n) and out_of == [x_bytes] * n


def test_a_second_call_reuses_the_multicast_objects(calls):
    call, n = calls["library", 2], 2
    node = StandInNode(n)
    ok(node.run_ranks(call, shards(call, n, seed=1)))
    made = ("multicast_create", "multicast_add_device", "multicast_bind_mem", "mem_create",
            "mem_address_reserve", "mem_map", "mem_set_access", "device_get_attribute")
    first = count(node, *made, "memcpy_dtod")
    data = shards(call, n, seed=2)
    results = ok(node.run_ranks(call, data))
    total = data[0][0] + data[1][0]
    for ran in results:
        np.testing.assert_array_equal(ran.outputs[0], total)
    again = count(node, *made, "memcpy_dtod")
    assert {e: again[e] for e in made} == {e: first[e] for e in made}
    # the copies in and out are made again: the flags start from XLA's zeros
    assert again["memcpy_dtod"] == 2 * first["memcpy_dtod"] == 2 * 3 * n


def test_a_device_without_multicast_support_is_refused_and_no_rank_launches(calls):
    call = calls["oneshot", 2]
    node = StandInNode(2, no_multicast=[1])
    results = node.run_ranks(call, shards(call, 2))
    for e in results:
        assert isinstance(e, HandlerError) and e.code == FAILED_PRECONDITION
        assert e.message.startswith(
            "jaxptx_launch_v2: kernel oneshot_allreduce takes the multicast address (multimem_ptr) "
            "of peer tensor(s) 0, 1, 2 (in peers order), and device 1 (rank 1 of mesh axis 'd' "
            "(size 2)) has no multicast support (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0"), \
            e.message
        assert "use peer_ptr on these GPUs, or run the kernel on the CPU" in e.message
        assert e.message.endswith("(so no rank of mesh axis 'd' (size 2) launched it)")
    assert node.node_launches == [] and node.calls("launch") == []
    assert node.calls("multicast_create") == [] and node.calls("mem_create") == []
    # nothing was cached: the same devices with support run it
    data = shards(call, 2)
    results = ok(StandInNode(2).run_ranks(call, data))
    np.testing.assert_array_equal(results[0].outputs[0], data[0][0] + data[1][0])


def test_a_multimem_mask_past_the_peer_tensors_is_refused(calls):
    call = calls["oneshot", 2].replace(peers=dict(multimem=8))
    node = StandInNode(2)
    for e in node.run_ranks(call, shards(call, 2)):
        assert isinstance(e, HandlerError) and e.code == INVALID_ARGUMENT
        assert e.message.endswith("attribute peers: multimem: expected a mask of the 3 peer "
                                  "tensors, got 8")
    assert node.calls("module_load") == []


def _multicast_gpus() -> list:
    """The GPUs jax sees whose driver says they support multicast objects."""
    import jax

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        return []
    try:
        from cuda.bindings import driver  # optional heavy dependency: only with a GPU
    except ImportError:
        return []
    (err,) = driver.cuInit(0)
    if int(err):
        return []
    attribute = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
    out = []
    for d in gpus:
        err, dev = driver.cuDeviceGet(d.local_hardware_id)
        err2, supported = driver.cuDeviceGetAttribute(attribute, dev)
        if not int(err) and not int(err2) and supported:
            out.append(d)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_multimem_all_reduce_on_gpus_under_shard_map(n):
    """all_reduce(method="multimem") under shard_map over the first n GPUs
    with multicast support, twice (the second call reuses the multicast
    objects), against numpy."""
    import jax
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

    from jaxptx.kernels import all_reduce

    gpus = _multicast_gpus()
    if len(gpus) < n:
        pytest.skip(f"needs {n} GPUs with multicast support, found {len(gpus)}")
    mesh = Mesh(np.array(gpus[:n]), ("d",), axis_types=(AxisType.Explicit,))
    f = jax.jit(jax.shard_map(lambda a: all_reduce(a[0], "d", method="multimem")[None], mesh=mesh,
                              in_specs=P("d"), out_specs=P("d")))
    for seed in range(2):
        data = np.random.default_rng(seed).integers(-50, 50, (n, 1 << 16)).astype(np.float32)
        got = np.asarray(f(jax.device_put(data, NamedSharding(mesh, P("d")))))
        np.testing.assert_array_equal(got, np.broadcast_to(data.sum(0), data.shape))

"""The CUDA handler's path for kernels that name their peers (ffi/cuda_peers.cc)
run with no GPU: calls lowered for CUDA on 2- and 4-device meshes, handed to
the real handler once per rank, concurrently (a thread per rank, as XLA runs
each device's thunk), against the stand-in driver over the devices of one
emulated node (jaxptx.testing._standin_peers.StandInNode). Results are
compared with numpy; the driver's log shows the peer access the handlers
enabled and the peer tables they wrote.

The calls are lowered in a subprocess with 4 CPU devices (the device count
is fixed when jax starts); the kernels are tests/jax/peers_script.py's."""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import re
import sys

import numpy as np
import pytest

from jaxptx.testing._standin_peers import StandInNode
from jaxptx.testing.standin import HandlerError, Ran

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer_calls import lowered_calls
SHARD = 256
DEADLINE_EXCEEDED, INVALID_ARGUMENT, FAILED_PRECONDITION = 4, 3, 9

_CALLS = """
from peers_script import SHARD, oneshot_allreduce, ring_shift

for n in (2, 4):
    calls["ring", n] = lower(lambda a: ring_shift(a, jnp.zeros(1, jnp.uint32), axis_name="d"),
                             n, n * SHARD)
calls["allreduce", 2] = lower(
    lambda a: oneshot_allreduce(a[0], jnp.zeros(1, jnp.uint32), axis_name="d")[None], 2, (2, 512))
"""


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    """The CUDA custom calls of the ring shift on 2 and 4 devices and of the
    multimem all-reduce on 2, each with its own kernel id."""
    return lowered_calls(_CALLS, tmp_path_factory.mktemp("peers") / "calls.pkl", "test_cuda_peers")


def shards(n: int) -> list[list[np.ndarray]]:
    x = np.arange(n * SHARD, dtype=np.float32).reshape(n, SHARD) * 0.5 - 7
    return [[x[r], np.zeros(1, np.uint32)] for r in range(n)]


def ok(results) -> list[Ran]:
    for r in results:
        if isinstance(r, HandlerError):
            raise r
    return results


def table_writes(node: StandInNode) -> list[np.ndarray]:
    """The peer tables the handlers wrote, as u64 arrays (in call order)."""
    return [np.frombuffer(data, np.uint64) for _, data in node.calls("memcpy_htod")]


@pytest.mark.parametrize("n", [2, 4])
def test_the_ring_shift_runs_on_every_rank_and_matches_numpy(calls, n):
    call = calls["ring", n]
    assert call["peers"]["axis_size"] == n and call["peers"]["buffers"] == (2, 1)
    node = StandInNode(n)
    data = shards(n)
    results = ok(node.run_ranks(call, data))
    for r, ran in enumerate(results):
        (y,) = ran.outputs
        np.testing.assert_array_equal(y, data[(r - 1) % n][0])     # the left neighbour's shard
        np.testing.assert_array_equal(ran.inputs[1], [0])          # the flag was a private copy
    # every rank launched, and the node ran the grids together, with peer
    # access enabled by the handlers between every ordered pair
    assert [sorted(group) for group in node.node_launches] == [list(range(n))]
    assert node.peer_access == set(itertools.permutations(range(n), 2))
    # each rank's table: entry k*W + r is rank r's copy of peer tensor k (y,
    # then flag), on rank r's device; then K zero multicast entries
    tables = table_writes(node)
    assert len(tables) == n
    for t in tables:
        assert len(t) == 2 * n + 2 and list(t[2 * n:]) == [0, 0]
        assert [int(a) >> 48 for a in t[:2 * n]] == list(range(n)) * 2
    assert all(np.array_equal(t, tables[0]) for t in tables)      # one table, on every device


def test_groups_along_the_axis_meet_on_their_own(calls):
    """Four devices calling the ring shift of a 2-device axis, as a 2 x 2 mesh
    does: the rank operand carries each device's group (rank + 2 * group), and
    each group of two shifts within itself."""
    call = calls["ring", 2]
    node = StandInNode(4)
    data = shards(4)
    results = ok(node.run_ranks(call, data))
    for code, ran in enumerate(results):
        group, rank = divmod(code, 2)
        (y,) = ran.outputs
        np.testing.assert_array_equal(y, data[2 * group + (rank - 1) % 2][0])
    tables = table_writes(node)
    assert len(tables) == 4
    owners = sorted(tuple(int(a) >> 48 for a in t[:2]) for t in tables)
    assert owners == [(0, 1), (0, 1), (2, 3), (2, 3)]      # each table names its own group's devices


def test_a_second_call_reuses_peer_access_and_the_tables(calls):
    call, n = calls["ring", 2], 2
    node = StandInNode(n)
    ok(node.run_ranks(call, shards(n)))
    data = [[-a, f] for a, f in shards(n)]
    results = ok(node.run_ranks(call, data))
    np.testing.assert_array_equal(results[0].outputs[0], data[1][0])
    assert len(node.calls("ctx_enable_peer_access")) == 2            # once per ordered pair
    assert len(node.calls("mem_alloc")) == 2                         # one table per rank, kept
    assert len(node.calls("memcpy_htod")) == 4                       # written anew each call
    assert len(node.node_launches) == 2


def test_the_rank_comes_from_the_operand_not_the_device_order(calls):
    call, n = calls["ring", 4], 4
    node = StandInNode(n)
    placement = {0: 3, 1: 2, 2: 0, 3: 1}
    data = shards(n)
    results = ok(node.run_ranks(call, data, devices=placement))
    for r, ran in enumerate(results):
        np.testing.assert_array_equal(ran.outputs[0], data[(r - 1) % n][0])
    # the table lists the ranks' copies in rank order, wherever they live
    table = table_writes(node)[0]
    assert [int(a) >> 48 for a in table[:n]] == [placement[r] for r in range(n)]


def test_a_pair_enabled_already_is_fine(calls):
    node = StandInNode(2)
    node.peer_access.add((0, 1))        # say another library in the process enabled it
    data = shards(2)
    results = ok(node.run_ranks(calls["ring", 2], data))
    np.testing.assert_array_equal(results[1].outputs[0], data[0][0])


@pytest.mark.parametrize("n, ranks, missing", [(2, [0], "1"), (4, [0, 2], "1, 3")])
def test_a_rank_that_never_arrives_is_a_timeout_naming_the_axis(calls, monkeypatch, n, ranks, missing):
    monkeypatch.setenv("JAXPTX_PEER_TIMEOUT", "0.5")
    node = StandInNode(n)
    results = node.run_ranks(calls["ring", n], shards(n), ranks=ranks)
    for r, e in zip(ranks, results):
        assert isinstance(e, HandlerError) and e.code == DEADLINE_EXCEEDED
        assert e.message.startswith("jaxptx_launch_v2: kernel ring_shift: ")
        assert f"rank {r} of mesh axis 'd' (size {n}) waited 0.5 s for the other ranks; " \
               f"rank(s) [{missing}] never called it" in e.message
        assert "multi-process meshes are not supported" in e.message
    assert node.node_launches == [] and node.calls("launch") == []
    # nothing is left behind: the next call meets afresh
    monkeypatch.delenv("JAXPTX_PEER_TIMEOUT")
    data = shards(n)
    results = ok(node.run_ranks(calls["ring", n], data))
    np.testing.assert_array_equal(results[0].outputs[0], data[n - 1][0])


def test_a_pair_without_peer_access_is_refused_and_no_rank_launches(calls):
    node = StandInNode(4, no_peer_access=[(1, 2)])
    results = node.run_ranks(calls["ring", 4], shards(4))
    assert all(isinstance(e, HandlerError) and e.code == FAILED_PRECONDITION for e in results)
    for e in results:
        assert "(rank 1 of mesh axis 'd' (size 4)) cannot access the memory of device 2 (rank 2)" \
            in e.message or "(rank 2 of mesh axis 'd' (size 4)) cannot access the memory of " \
            "device 1 (rank 1)" in e.message, e.message
        assert "cuDeviceCanAccessPeer says no" in e.message
        assert e.message.endswith("(so no rank of mesh axis 'd' (size 4) launched it)")
    assert node.node_launches == [] and node.calls("launch") == []


def test_an_axis_larger_than_the_process_gpus_is_refused_as_multi_process(calls):
    node = StandInNode(2)
    results = node.run_ranks(calls["ring", 4], shards(4), ranks=[0, 1])
    for e in results:
        assert isinstance(e, HandlerError) and e.code == FAILED_PRECONDITION
        assert e.message == (
            "jaxptx_launch_v2: kernel ring_shift: mesh axis 'd' (size 4) has 4 devices, but this "
            "process has 2 GPU(s): a kernel with peers runs on GPUs only when one process drives "
            "every device of its axis (single-process multi-GPU); multi-process meshes are not "
            "supported")


def test_multimem_runs_on_multicast_workspaces(calls):
    """The handler binds multicast objects (test_cuda_multimem.py has the rest)."""
    call = calls["allreduce", 2]
    assert call["peers"]["multimem"] == 7
    node = StandInNode(2)
    data = [[np.arange(512, dtype=np.float32) * (r + 1), np.zeros(1, np.uint32)] for r in range(2)]
    for ran in ok(node.run_ranks(call, data)):
        np.testing.assert_array_equal(ran.outputs[0], np.arange(512, dtype=np.float32) * 3)
    assert len(node.calls("multicast_create")) == 3


def test_a_bad_timeout_setting_is_refused(calls, monkeypatch):
    monkeypatch.setenv("JAXPTX_PEER_TIMEOUT", "soon")
    for e in StandInNode(2).run_ranks(calls["ring", 2], shards(2)):
        assert isinstance(e, HandlerError) and e.code == INVALID_ARGUMENT
        assert e.message.endswith("JAXPTX_PEER_TIMEOUT='soon': expected a positive number of seconds")


def test_attributes_that_are_not_this_jaxptxs_are_refused_by_name(calls):
    call = calls["ring", 2]
    extra = dataclasses.replace(call, attributes=call.attributes + (("colour", "i64", 1),))
    lacking = dataclasses.replace(call, attributes=tuple(a for a in call.attributes if a[0] != "tma"))
    prefix = ("jaxptx_launch_v2: the call's attributes are not this jaxptx's (lowered by another "
              "jaxptx? lower the function again with this one): ")
    for edited, what in [(extra, "unknown colour"), (lacking, "missing tma")]:
        for e in StandInNode(2).run_ranks(edited, shards(2)):
            assert isinstance(e, HandlerError) and e.code == INVALID_ARGUMENT
            assert e.message == prefix + what


@pytest.mark.parametrize("members, message", [
    (dict(buffers=(2, 7)), r"attribute peers: buffers: expected distinct tensor indices below 3, got 7"),
    (dict(buffers=(1, 1)), r"attribute peers: buffers: expected distinct tensor indices below 3, got 1"),
    (dict(axis_size=0), r"attribute peers: axis_size: expected 1 to 65536 devices, got 0"),
    (dict(colour=("i64", 1)), r"attribute peers: unknown members colour \(this jaxptx reads "),
])
def test_a_bad_peers_attribute_is_refused_before_the_driver_is_asked(calls, members, message):
    call = calls["ring", 2].replace(peers=members)
    node = StandInNode(2)
    for e in node.run_ranks(call, shards(2)):
        assert isinstance(e, HandlerError) and e.code == INVALID_ARGUMENT
        assert re.search(message, e.message), e.message
    assert node.calls("module_load") == []


def _ring_shift_on_gpus(n: int) -> None:
    """The ring shift under shard_map over the first ``n`` GPUs, run twice
    (the second call reuses the peer access and the tables), against numpy."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

    sys.path.insert(0, str(HERE.parent / "jax"))
    from peers_script import ring_shift

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if len(gpus) < n:
        pytest.skip(f"needs {n} GPUs, found {len(gpus)}")
    mesh = Mesh(np.array(gpus[:n]), ("d",), axis_types=(AxisType.Explicit,))
    x = np.arange(n * SHARD, dtype=np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))
    f = jax.jit(jax.shard_map(lambda a: ring_shift(a, jnp.zeros(1, jnp.uint32), axis_name="d"),
                              mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(xs)), np.roll(x, SHARD))


@pytest.mark.gpu
def test_a_one_device_axis_runs_the_peer_path_on_a_gpu():
    """One GPU still runs the whole path: the rank read back, a rendezvous of
    one, the table written, the hidden parameters passed."""
    _ring_shift_on_gpus(1)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_ring_shift_on_gpus_under_shard_map(n):
    _ring_shift_on_gpus(n)

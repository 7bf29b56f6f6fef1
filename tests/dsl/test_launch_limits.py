"""One launch value (jaxptx.launch.Launch) and CUDA's launch limits.

Bad launches are refused with LaunchError naming the argument, the limit,
the target and the value given: at construction for what holds on every
target, at check_target for what depends on it; through @kernel at
decoration for the values given there and at trace for a grid function's
grid and the module's shared memory.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, smem
from jaxptx.errors import LaunchError
from jaxptx.launch import MAX_GRID, Launch, validate_launch
from jaxptx.runtime import ptxas
from jaxptx.types import b8, f32

# (Launch keyword arguments, message) for launches no target allows.
BAD_LAUNCHES = [
    (dict(grid=(1, 70000, 1)), r"^launch: grid\.y = 70000 exceeds CUDA's limit of 65535$"),
    (dict(grid=(2**31, 1, 1)), r"grid\.x = 2147483648 exceeds CUDA's limit of 2147483647"),
    (dict(grid=(1, 1, 65536)), r"grid\.z = 65536 exceeds CUDA's limit of 65535"),
    (dict(block=(1, 1, 128)), r"block\.z = 128 exceeds CUDA's limit of 64"),
    (dict(block=2048), r"block\.x = 2048 exceeds CUDA's limit of 1024"),
    (dict(block=(1, 1025)), r"block\.y = 1025 exceeds CUDA's limit of 1024"),
    (dict(block=(64, 32, 1)), r"block = \(64, 32, 1\) has 2048 threads, over CUDA's limit of "
                              r"1024 threads per block"),
    (dict(block=(32, 32, 2)), r"block = \(32, 32, 2\) has 2048 threads"),
    (dict(block=(0, 1, 1)), r"block: expected 1 to 3 positive ints like \(128, 1, 1\), got \(0, 1, 1\)"),
    (dict(grid=-4), r"grid: expected 1 to 3 positive ints like \(128, 1, 1\), got -4"),
    (dict(grid=(1, 2, 3, 4)), r"grid: expected 1 to 3 positive ints .*got \(1, 2, 3, 4\)"),
    (dict(grid=()), r"grid: expected 1 to 3 positive ints .*got \(\)"),
    (dict(block=(32.0,)), r"block: expected 1 to 3 positive ints .*got \(32\.0,\)"),
    (dict(block=True), r"block: expected 1 to 3 positive ints .*got True"),
    (dict(cluster="2"), r"cluster: expected 1 to 3 positive ints .*got '2'"),
    (dict(grid=(9, 9), cluster=(3, 3, 1)), r"cluster = \(3, 3, 1\) has 9 blocks, over CUDA's "
                                           r"portable limit of 8 blocks per cluster"),
    (dict(grid=16, cluster=16), r"cluster = \(16, 1, 1\) has 16 blocks, over CUDA's portable limit"),
    (dict(grid=(3, 1, 1), cluster=(2, 1, 1)), r"grid\.x = 3 is not a multiple of cluster\.x = 2 "
                                              r"\(a grid is made of whole clusters\)"),
    (dict(grid=(4, 6, 1), cluster=(1, 4, 1)), r"grid\.y = 6 is not a multiple of cluster\.y = 4"),
    (dict(grid=1, cluster=(1, 1, 2)), r"grid\.z = 1 is not a multiple of cluster\.z = 2"),
    (dict(smem=-1), r"smem: expected a byte count >= 0, got -1"),
    (dict(smem=1.5), r"smem: expected a byte count >= 0, got 1\.5"),
    (dict(smem=10**9), r"smem = 1000000000 bytes of dynamic shared memory exceeds the most any "
                       r"CUDA target allows per block, 232448 bytes \(227 KB\)"),
]


@pytest.mark.parametrize("options, message", BAD_LAUNCHES)
def test_a_launch_no_target_allows_is_refused(options, message) -> None:
    with pytest.raises(LaunchError, match=message):
        Launch(**options)


# (grid, block, cluster, smem, static_smem, target, message) for limits of a target.
BAD_FOR_TARGET = [
    (2, 32, 2, 0, 0, "sm_80", r"^kernel k: cluster = \(2, 1, 1\) needs sm_90 or newer \(thread "
                              r"block clusters\), target is sm_80; launch without a cluster"),
    (2, 32, (1, 1, 1), 0, 800 * 1024, "sm_90a",
     r"static shared memory of 819200 bytes exceeds CUDA's limit of 49152 bytes \(48 KB\) per "
     r"block; put larger buffers in dynamic shared memory \(extern_smem=True\)"),
    (1, 32, 1, 166913, 0, "sm_80", r"shared memory of 0 static \+ 166913 dynamic = 166913 bytes "
                                   r"exceeds sm_80's maximum of 166912 bytes \(163 KB\) per block"),
    (1, 32, 1, 100 * 1024, 1024, "sm_86", r"1024 static \+ 102400 dynamic = 103424 bytes exceeds "
                                          r"sm_86's maximum of 101376 bytes \(99 KB\)"),
    (1, 32, 1, 101377, 0, "sm_89", r"exceeds sm_89's maximum of 101376 bytes \(99 KB\)"),
    (1, 32, 1, 200 * 1024, 48 * 1024, "sm_90a", r"49152 static \+ 204800 dynamic = 253952 bytes "
                                                r"exceeds sm_90a's maximum of 232448 bytes \(227 KB\)"),
    (1, 32, 1, 231425, 1024, "sm_100a", r"= 232449 bytes exceeds sm_100a's maximum of 232448 bytes"),
    (1, 32, 1, 100 * 1024, 0, "sm_120", r"exceeds sm_120's maximum of 101376 bytes \(99 KB\)"),
    (1, 32, 1, 70 * 1024, 0, "sm_75", r"exceeds sm_75's maximum of 65536 bytes \(64 KB\)"),
    (1, 32, 1, 50000, 0, "sm_88", r"50000 bytes exceeds 49152 bytes \(48 KB\), the most jaxptx "
                                  r"knows sm_88 allows per block \(it has no opt-in maximum"),
    (1, 32, 1, 0, -5, "sm_90a", r"static_smem: expected a byte count >= 0, got -5"),
]


@pytest.mark.parametrize("grid, block, cluster, dyn, static, target, message", BAD_FOR_TARGET)
def test_a_launch_its_target_does_not_allow_is_refused(grid, block, cluster, dyn, static, target,
                                                       message) -> None:
    with pytest.raises(LaunchError, match=message):
        validate_launch(grid, block, cluster, dyn, static, target, where="kernel k")


@pytest.mark.parametrize("grid, block, cluster, dyn, static, target", [
    ((2**31 - 1, 65535, 65535), (1024, 1, 1), 1, 0, 0, "sm_80"),
    ((1, 65535, 1), (32, 32, 1), 1, 0, 0, "sm_80"),
    (1, (16, 16, 4), 1, 0, 0, "sm_86"),
    (1, (1, 1, 64), 1, 0, 0, "sm_86"),
    (1, (1, 1024, 1), 1, 0, 48 * 1024, "sm_75"),        # static exactly 48 KB
    (8, 256, 8, 0, 0, "sm_90a"),                         # the portable cluster size
    ((4, 4, 2), 128, (2, 2, 2), 0, 0, "sm_100a"),
    (1, 32, 1, 166912, 0, "sm_80"),                      # 163 KB
    (1, 32, 1, 101376 - 4096, 4096, "sm_86"),            # 99 KB, static + dynamic
    (1, 32, 1, 101376, 0, "sm_89"),
    (1, 32, 1, 232448 - 49152, 49152, "sm_90a"),         # 227 KB
    (1, 32, 1, 232448, 0, "sm_100a"),
    (1, 32, 1, 49152, 0, "sm_88"),                       # a target with no known opt-in
    (np.int64(4), (np.int32(32), 2), 1, np.int64(16), 0, "sm_80"),
])
def test_launches_at_the_limits_are_accepted(grid, block, cluster, dyn, static, target) -> None:
    launch = validate_launch(grid, block, cluster, dyn, static, target)
    assert all(type(d) is int for d in launch.grid + launch.block + launch.cluster)
    assert type(launch.smem) is int and launch.smem == dyn


def test_a_launch_is_one_hashable_value() -> None:
    a = Launch(4, 32, where="kernel a")
    b = Launch((4, 1, 1), (32, 1), (1,), 0, where="kernel b")
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1  # where is not part of the value
    assert (a.grid, a.block, a.cluster, a.smem) == ((4, 1, 1), (32, 1, 1), (1, 1, 1), 0)
    assert (a.threads, a.blocks, a.cluster_size) == (32, 4, 1)
    assert Launch(4, 32, smem=16) != a
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'grid'"):
        a.grid = (8, 1, 1)  # type: ignore[misc]
    # dataclasses.replace builds a new value and checks it again, naming the same place.
    assert dataclasses.replace(a, grid=(4, 1, 3)).grid == (4, 1, 3)
    with pytest.raises(LaunchError, match=r"^kernel a: grid\.z = 70000 exceeds CUDA's limit"):
        dataclasses.replace(a, grid=(4, 1, 70000))


def test_attributes_round_trip_and_need_three_ints_per_dim() -> None:
    launch = Launch((4, 2), (32, 4), (2,), 1024)
    attrs = launch.attributes()
    assert attrs["grid"].dtype == np.int32 and attrs["smem"].dtype == np.int64
    assert attrs["grid"].tolist() == [4, 2, 1] and attrs["cluster"].tolist() == [2, 1, 1]
    assert Launch.from_attributes(**attrs) == launch
    assert Launch.from_attributes([4, 2, 1], [32, 4, 1], [2, 1, 1], 1024) == launch
    with pytest.raises(LaunchError, match=r"^launch attributes: grid: expected 3 ints, got \[4, 2\]"):
        Launch.from_attributes([4, 2], [32, 1, 1], [1, 1, 1], 0)
    with pytest.raises(LaunchError, match=r"^launch attributes: block\.z = 65 exceeds CUDA's limit of 64"):
        Launch.from_attributes([1, 1, 1], [1, 1, 65], [1, 1, 1], 0)


# --- through @kernel ------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (dict(grid=(1, 70000, 1)), r"^@kernel k: grid\.y = 70000 exceeds CUDA's limit of 65535$"),
    (dict(block=(1, 1, 128)), r"^@kernel k: block\.z = 128 exceeds CUDA's limit of 64$"),
    (dict(smem=10**9), r"^@kernel k: smem = 1000000000 bytes of dynamic shared memory exceeds"),
    (dict(grid=(3, 1, 1), cluster=(2, 1, 1)), r"^@kernel k: grid\.x = 3 is not a multiple of cluster\.x = 2"),
    (dict(grid=lambda N: (N, 1, 1), cluster=(4, 4, 1)), r"^@kernel k: cluster = \(4, 4, 1\) has 16 blocks"),
    (dict(arch="sm_80", cluster=(2, 1, 1), grid=2), r"^@kernel k: cluster = \(2, 1, 1\) needs sm_90 "
                                                    r"or newer \(thread block clusters\), target is sm_80"),
    (dict(arch="sm_86", smem=110 * 1024), r"^@kernel k: shared memory of 0 static \+ 112640 dynamic = "
                                          r"112640 bytes exceeds sm_86's maximum of 101376 bytes"),
    (dict(reqntid=(128,), block=(64, 1, 1)), r"^@kernel k: block = \(64, 1, 1\) differs from "
                                             r"reqntid = \(128, 1, 1\)"),
    (dict(reqntid=(64, 32)), r"^@kernel k: block = \(64, 32, 1\) has 2048 threads"),
    (dict(grid=(1, 2), block=(32, 0)), r"^@kernel k: block: expected 1 to 3 positive ints"),
])
def test_a_bad_static_launch_fails_at_decoration(options, message) -> None:
    def k():
        ptx.ret()
    with pytest.raises(LaunchError, match=message):
        kernel(**options)(k)


def test_target_limits_wait_for_the_target_when_arch_is_auto() -> None:
    @kernel(arch="auto", grid=2, cluster=(2, 1, 1), block=32)
    def k():
        ptx.ret()
    assert k.specialize_for("sm_90a").launch == Launch(2, 32, 2)
    with pytest.raises(LaunchError, match=r"^kernel k: cluster = \(2, 1, 1\) needs sm_90 or newer"):
        k.specialize_for("sm_80")


def test_the_specialisation_carries_the_launch() -> None:
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), arch="sm_90a",
            grid=lambda N: (N // 128, 1, 1), block=128, cluster=2, smem=4096)
    def k(x, y):
        ptx.ret()
    spec = k.specialize(N=1024)
    assert spec.launch == Launch((8, 1, 1), (128, 1, 1), (2, 1, 1), 4096)
    assert (spec.grid, spec.block, spec.cluster, spec.smem) == ((8, 1, 1), (128, 1, 1), (2, 1, 1), 4096)
    assert ".maxntid 128, 1, 1" in spec.ptx and ".reqnctapercluster 2, 1, 1" in spec.ptx


def test_defaults_block_is_reqntid_and_grid_is_one_cluster() -> None:
    @kernel(arch="sm_90a", reqntid=(64, 2), cluster=(2, 1, 2))
    def k():
        ptx.ret()
    assert k.block == (64, 2, 1)
    assert k.specialize().launch == Launch((2, 1, 2), (64, 2, 1), (2, 1, 2))
    assert ".reqntid 64, 2, 1" in k.ptx()


def test_a_grid_function_over_a_limit_fails_at_trace_naming_its_values() -> None:
    @kernel(in_specs=(Tile("M", "N", f32),), out_specs=(Tile("M", "N", f32),), arch="sm_90a",
            grid=lambda M, N: (N // 128, M, 1), block=128)
    def k(x, y):
        ptx.ret()
    assert k.specialize(M=65535, N=256).grid == (2, 65535, 1)
    with pytest.raises(LaunchError, match=r"^kernel k \(grid for M=70000, N=256\): grid\.y = 70000 "
                                          r"exceeds CUDA's limit of 65535$"):
        k.specialize(M=70000, N=256)
    with pytest.raises(LaunchError, match=r"^kernel k \(grid for M=4, N=100\): grid: expected 1 to 3 "
                                          r"positive ints like \(128, 1, 1\), got \(0, 4, 1\)"):
        k.specialize(M=4, N=100)


def test_a_grid_function_that_breaks_the_cluster_fails_at_trace() -> None:
    @kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), arch="sm_90a",
            grid=lambda N: (N // 32, 1, 1), block=32, cluster=(4, 1, 1))
    def k(x, y):
        ptx.ret()
    assert k.specialize(N=128).grid == (4, 1, 1)
    with pytest.raises(LaunchError, match=r"^kernel k \(grid for N=96\): grid\.x = 3 is not a "
                                          r"multiple of cluster\.x = 4"):
        k.specialize(N=96)


def test_static_shared_memory_is_counted_at_trace() -> None:
    @kernel(arch="sm_90a", block=32)
    def fits():
        smem.alloc(f32, (12 * 1024,))          # exactly 48 KB
        ptx.ret()
    assert fits.specialize().launch.smem == 0
    ptxas(fits.ptx(), "sm_90a")

    @kernel(arch="sm_90a", block=32)
    def too_big():
        smem.alloc(b8, (800 * 1024,))
        ptx.ret()
    with pytest.raises(LaunchError, match=r"^kernel too_big: static shared memory of 819200 bytes "
                                          r"exceeds CUDA's limit of 49152 bytes \(48 KB\)"):
        too_big.specialize()


def test_carved_dynamic_shared_memory_is_checked_against_the_target() -> None:
    def body():
        smem.alloc(b8, (200 * 1024,))
        ptx.ret()
    big = kernel(arch="auto", block=32, extern_smem=True, name="big")(body)
    assert big.specialize_for("sm_90a").launch.smem == 200 * 1024
    with pytest.raises(LaunchError, match=r"^kernel big: shared memory of 0 static \+ 204800 dynamic "
                                          r"= 204800 bytes exceeds sm_80's maximum of 166912 bytes"):
        big.specialize_for("sm_80")


def test_a_batch_folds_into_grid_z_through_one_method():
    """``Launch.with_grid_z`` is the one place a vmap's batch becomes grid z
    (kernels, ptx_call and the partitioned call use it): the rest of the
    launch is kept, and gridDim.z's limit still holds."""
    base = Launch((3, 2, 1), (64, 1, 1), (1, 1, 1), 1024, where="kernel k")
    folded = base.with_grid_z(8)
    assert (folded.grid, folded.block, folded.smem) == ((3, 2, 8), (64, 1, 1), 1024)
    with pytest.raises(LaunchError, match=r"kernel k: grid.z = 65536 exceeds CUDA's limit of 65535"):
        base.with_grid_z(MAX_GRID[2] + 1)

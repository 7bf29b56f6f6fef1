"""The CUDA launch handler (ffi/cuda_launch.cc, jaxptx_launch_v2) run with no
GPU: its real C++ code, called with the call frame XLA would build from a CUDA
lowering, against a stand-in driver that runs the PTX on the emulator
(jaxptx.testing.standin, swapped in through jaxptx._ffi.set_cuda_driver).
Results are compared with numpy; the driver's log shows what the handler
asked of it."""

from __future__ import annotations

import pathlib
import re
import struct
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.launch import Launch
from jaxptx.testing.standin import CUDA_ERROR_INVALID_HANDLE, DriverError, StandInDriver

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "jax"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from handler_calls import (  # noqa: E402
    FAILED_PRECONDITION,
    INTERNAL,
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    X,
    add_one,
    cluster_rank,
    failure,
    lowered_call,
    run,
    scaled,
)
from jax_kernels import affine, axpy_index, clobber, wild_load  # noqa: E402
from tma_kernels import tma_reshaped_dump, tma_scale  # noqa: E402


def test_a_plain_kernel_with_two_inputs_and_two_outputs_matches_numpy():
    w = X[::-1].copy()
    call = lowered_call(axpy_index, X, w)
    y, idx = run(call, X, w)[0].outputs
    np.testing.assert_array_equal(y, X * 3 + w)
    np.testing.assert_array_equal(idx, np.arange(256, dtype=np.int32))


def test_the_driver_is_asked_in_order_and_params_are_the_device_addresses():
    call = lowered_call(axpy_index, X, X)
    _, driver = run(call, X, X)
    assert [name for name, _ in driver.log] == [
        "ctx_push", "module_load", "module_get_function", *["func_get_param_info"] * 4, "launch",
        "ctx_pop"]
    # the parameters the PTX declares, each asked of the driver (never one past the last:
    # compute-sanitizer reports the CUDA_ERROR_INVALID_VALUE that answers it)
    assert driver.calls("func_get_param_info") == [("axpy_index", k) for k in range(4)]
    (launch,) = driver.calls("launch")
    assert launch["grid"] == (2, 1, 1) and launch["block"] == (128, 1, 1)
    assert launch["cluster"] == (1, 1, 1) and launch["smem"] == 0
    pointers = [struct.unpack("<Q", p)[0] for p in launch["params"]]
    # the device's allocations in order: inputs, then outputs (1 << 36 apart)
    assert pointers == [(k + 1) << 36 for k in range(4)]


def test_a_module_is_loaded_once_per_context():
    call = lowered_call(affine, X)
    driver = StandInDriver()
    for _ in range(2):
        np.testing.assert_array_equal(run(call, X, driver=driver)[0].outputs[0], X * 2 + 1)
    assert len(driver.calls("module_load")) == 1 and len(driver.calls("launch")) == 2
    assert len(driver.calls("func_get_param_info")) == 2  # read once, with the function
    other = run(call, X)[1]  # another device: another context, loaded again
    assert len(other.calls("module_load")) == 1


def test_raw_scalars_reach_the_kernel_with_their_own_sizes():
    call = lowered_call(lambda x: scaled(x, n=100, alpha=-1.5, bias=-(2**40) + 5), X)
    ran, driver = run(call, X)
    y, z = ran.outputs
    np.testing.assert_array_equal(y, np.where(np.arange(256) < 100, X * np.float32(-1.5), X))
    np.testing.assert_array_equal(z, np.arange(256, dtype=np.int64) - 2**40 + 5)
    params = driver.calls("launch")[0]["params"]
    assert [len(p) for p in params] == [8, 8, 8, 4, 4, 8]
    assert params[3:] == [struct.pack("<I", 100), struct.pack("<f", -1.5),
                          struct.pack("<q", -(2**40) + 5)]


def test_tma_descriptors_are_encoded_from_the_buffers_addresses():
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    call = lowered_call(tma_scale, x)
    ran, driver = run(call, x)
    np.testing.assert_allclose(ran.outputs[0], x.astype(np.float64) * 2 + 1, rtol=1e-6)
    maps = driver.calls("tensor_map_encode_tiled")
    assert [m["address"] for m in maps] == [1 << 36, 2 << 36]  # input, then output
    assert all(m["dims"] == (96, 64) and m["box"] == (32, 32) and m["swizzle"] == 3 for m in maps)
    params = driver.calls("launch")[0]["params"]
    assert [len(p) for p in params] == [8, 8, 128, 128]
    assert sim.memory.tensormap.decode(params[2]).address == 1 << 36


def test_a_rank_3_bf16_descriptor_gives_what_the_cpu_handler_gives():
    x = np.random.default_rng(1).standard_normal((48, 256)).astype(ml_dtypes.bfloat16)
    f = jax.jit(lambda x: tma_reshaped_dump(x, G=3))
    ran, driver = run(lowered_call(f, x), x)
    np.testing.assert_array_equal(ran.outputs[0], np.asarray(f(x)))  # the emulator's own maps
    (m,) = driver.calls("tensor_map_encode_tiled")
    assert (m["dtype"], m["rank"], m["dims"], m["strides"], m["box"]) == \
        (9, 3, (64, 48, 4), (512, 128), (64, 16, 2))


def test_a_cluster_launch_with_more_than_48_kib_of_dynamic_shared_memory():
    call = lowered_call(cluster_rank, X)
    driver = StandInDriver()
    for _ in range(2):
        (y,) = run(call, X, driver=driver)[0].outputs
        np.testing.assert_array_equal(y, 20 + (np.arange(256) // 128) % 2)
    launch = driver.calls("launch")[0]
    assert launch["cluster"] == (2, 1, 1) and launch["smem"] == 64 * 1024
    # opted in once: the function is cached per context with its opt-in
    assert driver.calls("func_set_attribute") == [("cluster_rank", 8, 64 * 1024)]


def test_an_input_the_kernel_writes_is_handed_to_it_as_a_private_copy():
    call = lowered_call(clobber, X)
    assert call["may_write_inputs"] == 1
    ran, driver = run(call, X)
    np.testing.assert_array_equal(ran.outputs[0], X)
    np.testing.assert_array_equal(ran.inputs[0], X)  # XLA's input is untouched
    ((copy, size),) = driver.calls("alloc")
    assert driver.calls("memcpy_dtod") == [(copy, 1 << 36, X.nbytes)]
    assert driver.calls("free") == [(copy, size)]
    params = driver.calls("launch")[0]["params"]
    assert struct.unpack("<Q", params[0])[0] == copy


def test_an_in_place_output_is_its_input_and_is_not_copied():
    call = lowered_call(add_one, X)
    assert call.aliases == ((0, 0),)
    ran, driver = run(call, X)
    np.testing.assert_array_equal(ran.outputs[0], X + 1)
    assert driver.calls("memcpy_dtod") == []
    params = driver.calls("launch")[0]["params"]
    assert params[0] == params[1]


def test_no_scratch_memory_for_a_private_copy_is_an_error():
    e = failure(lowered_call(clobber, X), X, scratch=False)
    assert e.code == RESOURCE_EXHAUSTED
    assert "no scratch memory for a private copy of input 0" in e.message


def test_a_call_whose_content_does_not_match_its_id_is_refused():
    call = lowered_call(affine, X)
    e = failure(call.replace(kernel_id=call["kernel_id"] ^ 1), X)
    assert e.code == INVALID_ARGUMENT and "does not match its kernel id" in e.message
    edited = call.replace(ptx=call["ptx"] + b"// edited\n", rehash=False)
    assert "does not match its kernel id" in failure(edited, X).message
    assert "does not match its kernel id" in failure(call, X[:128]).message  # other sizes


def test_a_module_the_jit_refuses_returns_its_error_log():
    call = lowered_call(affine, X)
    bad = call.replace(ptx=call["ptx"].replace(b"ld.global.f32", b"ld.global.f33"))
    e = failure(bad, X)
    assert e.code == INTERNAL
    assert "loading the module of kernel affine" in e.message
    head, _, log = e.message.partition("\n")
    assert "CUDA_ERROR_INVALID_PTX" in head and "f33" in log


def test_an_entry_the_ptx_lacks_is_refused():
    call = lowered_call(affine, X)
    e = failure(call.replace(entry="affine2"), X)
    assert e.code == INTERNAL
    assert re.search(r"the module of kernel id \d+ has no entry affine2: CUDA_ERROR_NOT_FOUND",
                     e.message), e.message


def test_a_fault_in_the_kernel_is_a_launch_error_with_the_emulators_reason():
    e = failure(lowered_call(wild_load, X), X)
    assert e.code == INTERNAL
    assert "launching kernel wild_load failed: CUDA_ERROR_LAUNCH_FAILED" in e.message
    assert "ld.global.f32" in e.message


def test_a_tensor_map_the_driver_refuses_names_the_descriptor():
    x = np.zeros((64, 96), np.float32)
    call = lowered_call(tma_scale, x)
    tma = list(call["tma"])
    tma[13] = 300  # box width over the driver's 256
    e = failure(call.replace(tma=tma), x)
    assert e.code == INVALID_ARGUMENT
    assert "cuTensorMapEncodeTiled refused TMA descriptor 0 (buffer 0, data type 7, rank 2" \
        in e.message and "box {300, 32}" in e.message


def test_a_stream_without_a_context_is_an_error():
    driver = StandInDriver()

    def no_context(stream):
        raise DriverError(CUDA_ERROR_INVALID_HANDLE, "unknown stream")

    driver.stream_get_ctx = no_context
    e = failure(lowered_call(affine, X), X, driver=driver)
    assert e.code == INTERNAL
    assert ("no CUDA context for XLA's stream: cuStreamGetCtx gave CUDA_ERROR_INVALID_HANDLE "
            "(cuStreamGetCtx: DriverError: unknown stream), and no context is current") in e.message
    assert driver.calls("launch") == []


def test_the_launch_travels_as_one_attribute_and_reaches_the_driver():
    call = lowered_call(affine, X)
    assert [k for n, k, _ in call.attributes if n == "launch"] == ["dict"]
    assert call.launch == Launch((2, 1, 1), (128, 1, 1))
    clustered = call.replace(launch=dict(cluster=(2, 1, 1)))  # re-derives the id
    assert clustered.launch == Launch((2, 1, 1), (128, 1, 1), (2, 1, 1))
    ran, driver = run(clustered, X)
    np.testing.assert_array_equal(ran.outputs[0], X * 2 + 1)
    (launch,) = driver.calls("launch")
    assert (launch["grid"], launch["block"], launch["cluster"], launch["smem"]) == \
        ((2, 1, 1), (128, 1, 1), (2, 1, 1), 0)


@pytest.mark.parametrize("members, message", [
    (dict(block=(1, 1, 65)), r"block\.z = 65 exceeds CUDA's limit of 64"),
    (dict(grid=(3, 1, 1), cluster=(2, 1, 1)), r"grid\.x = 3 is not a multiple of cluster\.x = 2"),
    (dict(smem=300 * 1024), r"smem = 307200: expected 0 to 232448 bytes"),
    (dict(grid=(2, 1)), r"grid: expected 3 positive ints, got \[2, 1\]"),
    (dict(smem=None), r"expected the members block, cluster, grid \(3 int32 each\) and smem "
                      r"\(int64\), got \{block, cluster, grid\}"),
    (dict(grid=("i64[]", (2, 1, 1))), r"grid: expected 3 int32, Wrong array data type: expected "
                                      r"S32 but got S64"),
])
def test_a_bad_launch_attribute_is_refused_before_the_driver_is_asked(members, message):
    call = lowered_call(affine, X)
    driver = StandInDriver()
    e = failure(call.replace(launch=members, rehash=False), X, driver=driver)
    assert e.code == INVALID_ARGUMENT
    assert re.search(r"^jaxptx_launch_v2: kernel affine \(id \d+\): attribute launch: " + message,
                     e.message), e.message
    assert driver.log == []


def test_the_retired_version_1_handler_names_the_version_and_the_fix():
    e = failure(lowered_call(affine, X), X, retired=True)
    assert e.code == FAILED_PRECONDITION
    assert e.message.startswith(
        "jaxptx_launch_v1 (kernel affine): this custom call was lowered by an older jaxptx, whose "
        "FFI targets are version 1 (grid, block, cluster and smem as four attributes); this "
        "jaxptx handles version 2 (jaxptx_launch_v2, one launch attribute). Lower and export "
        "the function again")


@pytest.mark.parametrize("members", [
    dict(grid=(1, 1, 1)), dict(block=(64, 1, 1)), dict(cluster=(2, 1, 1)), dict(smem=1024)])
def test_the_kernel_id_covers_every_member_of_the_launch(members):
    call = lowered_call(affine, X)
    edited = call.replace(launch=members, rehash=False)
    e = failure(edited, X)
    assert e.code == INVALID_ARGUMENT and "does not match its kernel id" in e.message
    assert edited.content_id() != call["kernel_id"]

"""A kernel's id is derived from its content (PTX, entry, launch, buffer
sizes), and both handlers check every call against it before running
anything: an edited call is an error, never another kernel's code."""

from __future__ import annotations

import hashlib
import pathlib
import re
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxptx
from jaxptx import _ffi
from jaxptx.jax import _lowering, _registry
from jaxptx.launch import Launch

from jax_kernels import affine, clobber
from raw_calls import raw_call

X = np.arange(256, dtype=np.float32)
REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCH = ([2, 1, 1], [128, 1, 1], [1, 1, 1], 0)


def _id(ptx: str, entry: str, grid=(2, 1, 1), nbytes=1024, tma=()) -> int:
    ints = _registry.launch_integers(Launch(grid, (128, 1, 1)), [nbytes], [nbytes], tma)
    return _registry.content_id(_registry.content_bytes(ptx.encode(), entry, ints))


def _launch(grid=(2, 1, 1), **members) -> dict:
    """A launch attribute; a member given as None is left out."""
    grid = grid if isinstance(grid, np.ndarray) else np.array(grid, np.int32)
    launch = dict(grid=grid, block=np.array([128, 1, 1], np.int32),
                  cluster=np.array([1, 1, 1], np.int32), smem=np.int64(0))
    launch.update(members)
    return {k: v for k, v in launch.items() if v is not None}


def _call(ptx: str, kernel_id: int, entry: str = "affine", grid=(2, 1, 1), n: int = 256,
          launch: Any = None):
    attrs = dict(kernel_id=np.int64(kernel_id), ptx=ptx, entry=entry,
                 launch=_launch(grid) if launch is None else launch,
                 scalars=np.zeros(0, np.int64), tma=np.zeros(0, np.int64),
                 may_write_inputs=np.int64(0), allow_unwritten=np.int64(0))
    return raw_call(_lowering.CPU_TARGET, attrs, (n,))


@pytest.mark.parametrize("size", [0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 100_000])
def test_the_shim_and_python_derive_the_same_id(size):
    ptx = bytes((i * 7 + size) % 251 for i in range(size))
    launch = [3, 1, 1, 128, 1, 1, 1, 1, 1, 0, 1, 1, 512, 512, 0]
    content = _registry.content_bytes(ptx, "k", launch)
    expected = int.from_bytes(hashlib.sha256(content).digest()[:8], "little") >> 16
    assert _registry.content_id(content) == expected
    assert _ffi.content_id(ptx, "k", launch) == expected  # the shim's own SHA-256


def test_a_lowered_call_carries_the_id_of_its_content():
    text = jax.jit(affine).lower(X).as_text()
    kid = int(re.search(r"kernel_id = (\d+)", text).group(1))
    assert kid == _id(affine.ptx(N=256), "affine")
    assert _ffi.check_call("jaxptx_cpu_v2", kid, affine.ptx(N=256).encode(), "affine", *LAUNCH,
                           [], [1024], [1024]) == ""


def test_new_ptx_under_an_id_already_seen_is_refused():
    np.testing.assert_array_equal(jax.jit(affine)(X), X * 2 + 1)
    kid = _id(affine.ptx(N=256), "affine")
    other = clobber.ptx(N=256).replace("clobber", "affine")
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"INVALID_ARGUMENT: jaxptx_cpu_v2: kernel affine \(id \d+\): the "
                             r"call's PTX, entry or launch does not match its kernel id \(the "
                             r"content hashes to id \d+\): the custom call was edited after "
                             r"lowering"):
        jax.block_until_ready(_call(other, kid)(X))


@pytest.mark.parametrize("change", ["entry", "grid", "bytes"])
def test_the_check_covers_entry_launch_and_buffer_sizes(change):
    ptx = affine.ptx(N=256).encode()
    kid = _id(affine.ptx(N=256), "affine")
    args = dict(entry="affine", grid=[2, 1, 1], input_bytes=[1024])
    args.update({"entry": dict(entry="affine2"), "grid": dict(grid=[1, 1, 1]),
                 "bytes": dict(input_bytes=[512])}[change])
    bad = _ffi.check_call("jaxptx_launch_v2", kid, ptx, args["entry"], args["grid"], [128, 1, 1],
                          [1, 1, 1], 0, [], args["input_bytes"], [1024])
    assert "does not match its kernel id" in bad and bad.startswith("jaxptx_launch_v2: kernel ")


@pytest.mark.parametrize("grid, message", [
    ([2, 1], r"attribute launch: grid: expected 3 positive ints, got \[2, 1\]"),
    ([2, 0, 1], r"attribute launch: grid: expected 3 positive ints, got \[2, 0, 1\]"),
    ([2, 1, 1, 1], r"attribute launch: grid: expected 3 positive ints, got \[2, 1, 1, 1\]"),
    ([2, 70000, 1], r"attribute launch: grid\.y = 70000 exceeds CUDA's limit of 65535"),
])
def test_the_cpu_handler_refuses_a_grid_of_the_wrong_shape(grid, message):
    with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT: jaxptx_cpu_v2: kernel "
                                                         r"affine \(id 7\): " + message):
        jax.block_until_ready(_call(affine.ptx(N=256), 7, grid=grid)(X))


@pytest.mark.parametrize("launch, message", [
    (dict(block=np.array([128, 8, 2], np.int32)),
     r"block = \(128, 8, 2\) has 2048 threads, over CUDA's limit of 1024 per block"),
    (dict(block=np.array([1, 1, 65], np.int32)), r"block\.z = 65 exceeds CUDA's limit of 64"),
    (dict(cluster=np.array([4, 1, 1], np.int32)),
     r"grid\.x = 2 is not a multiple of cluster\.x = 4 \(a grid is made of whole clusters\)"),
    (dict(grid=np.array([16, 1, 1], np.int32), cluster=np.array([16, 1, 1], np.int32)),
     r"cluster = \(16, 1, 1\) has 16 blocks, over CUDA's portable limit of 8"),
    (dict(smem=np.int64(10**9)), r"smem = 1000000000: expected 0 to 232448 bytes"),
    (dict(smem=np.int64(-1)), r"smem = -1: expected 0 to 232448 bytes"),
    (dict(smem=None), r"expected the members block, cluster, grid \(3 int32 each\) and smem "
                      r"\(int64\), got \{block, cluster, grid\}"),
    (dict(warps=np.int64(4)),
     r"expected the members .* got \{block, cluster, grid, smem, warps\}"),
    (dict(grid=np.array([2, 1, 1], np.int64)), r"grid: expected 3 int32, Wrong array data type"),
    (dict(smem=np.int32(0)), r"smem: expected an int64, "),
])
def test_the_handler_decodes_one_launch_and_checks_cudas_limits(launch, message):
    """The launch attribute is decoded into one LaunchShape and validated in
    one place (ffi/call_identity.cc) before the id is checked."""
    with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT: jaxptx_cpu_v2: kernel "
                                                         r"affine \(id 7\): attribute launch: "
                                                         + message):
        jax.block_until_ready(_call(affine.ptx(N=256), 7, launch=_launch(**launch))(X))


def test_launch_members_are_checked_by_the_shims_hook_as_by_the_handlers():
    ptx = affine.ptx(N=256).encode()
    bad = _ffi.check_call("jaxptx_cpu_v2", 7, ptx, "affine", [2, 1, 1], [32, 33, 1], [1, 1, 1],
                          0, [], [1024], [1024])
    assert bad == ("jaxptx_cpu_v2: kernel affine (id 7): attribute launch: block = (32, 33, 1) "
                   "has 1056 threads, over CUDA's limit of 1024 per block")


def test_a_launch_attribute_that_is_not_a_dictionary_is_refused():
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"Wrong attribute type: expected "
                                                         r"dictionary but got array"):
        jax.block_until_ready(_call(affine.ptx(N=256), 7, launch=np.zeros(10, np.int64))(X))


def test_a_call_whose_entry_is_missing_names_the_entries():
    ptx = affine.ptx(N=256)
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"INTERNAL: ValueError: kernel nope: the call names entry 'nope', but "
                             r"its PTX has no such \.entry \(it has affine\)"):
        jax.block_until_ready(_call(ptx, _id(ptx, "nope"), entry="nope")(X))


def _export_artifact(tmp_path) -> pathlib.Path:
    exp = export.export(jax.jit(lambda x: jnp.sin(affine(x))), platforms=["cpu", "cuda"],
                        disabled_checks=jaxptx.jax.disabled_checks())(X)
    path = tmp_path / "f.jax"
    path.write_bytes(exp.serialize())
    return path


def _run_artifact(path: pathlib.Path, register: bool = True,
                  load: str = "export.deserialize") -> subprocess.CompletedProcess:
    code = ("import sys, numpy as np, jax; from jax import export; import jaxptx.jax; "
            + ("jaxptx.jax.register_ffi_targets(); " if register else "")
            + f"f = {load}(open(sys.argv[1], 'rb').read()); "
              "x = np.arange(256, dtype=np.float32); "
              "np.testing.assert_allclose(f.call(x), np.sin(x * 2 + 1), rtol=1e-6); print('OK')")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_an_exported_artifact_whose_ptx_was_edited_is_refused(tmp_path):
    path = _export_artifact(tmp_path)
    data = path.read_bytes()
    # y = x * 2 + 1 becomes x * 3 + 1: an edit of the same length (the CPU and CUDA
    # calls share one string in the serialised module)
    assert data.count(b"0f40000000") == 1
    path.write_bytes(data.replace(b"0f40000000", b"0f40400000"))
    run = _run_artifact(path)
    assert run.returncode != 0
    assert re.search(r"jaxptx_cpu_v2: kernel affine \(id \d+\): the call's PTX, entry or launch "
                     r"does not match its kernel id", run.stderr), run.stderr


def test_an_artifact_run_without_registering_names_the_target_and_deserialize_registers(tmp_path):
    path = _export_artifact(tmp_path)
    run = _run_artifact(path, register=False)
    assert run.returncode != 0
    assert "No FFI handler registered for jaxptx_cpu_v2" in run.stderr, run.stderr
    loaded = _run_artifact(path, register=False, load="jaxptx.jax.deserialize")
    assert loaded.stdout.strip() == "OK", loaded.stderr


def test_lowered_calls_name_the_target_without_advice():
    text = jax.jit(affine).lower(X).as_text()
    assert "custom_call @jaxptx_cpu_v2(" in text and "register_ffi_targets" not in text


def test_a_call_of_the_earlier_hinted_target_name_still_runs():
    """Artifacts lowered before the targets lost their appended advice
    name ``jaxptx_cpu_v2 (call jaxptx.jax.register_ffi_targets() first)``."""
    ptx = affine.ptx(N=256)
    call = raw_call(_lowering.CPU_TARGET + " (call jaxptx.jax.register_ffi_targets() first)",
                    dict(kernel_id=np.int64(_id(ptx, "affine")), ptx=ptx, entry="affine",
                         launch=_launch(), scalars=np.zeros(0, np.int64), tma=np.zeros(0, np.int64),
                         may_write_inputs=np.int64(0), allow_unwritten=np.int64(0)), (256,))
    np.testing.assert_allclose(call(X), X * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("cut", [0, 7, 100, 1000])
def test_a_truncated_artifact_is_refused_with_its_size(tmp_path, cut):
    data = _export_artifact(tmp_path).read_bytes()[:cut]
    with pytest.raises(ValueError, match=rf"^jaxptx\.jax\.deserialize: {cut} bytes that are not a "
                                         r"complete jax\.export artifact \(truncated, or another "
                                         r"file\?\): reading them failed with struct\.error: "):
        jaxptx.jax.deserialize(data)


def test_deserialize_takes_bytes():
    with pytest.raises(TypeError, match=r"jaxptx\.jax\.deserialize: expected the bytes of "
                                        r"Exported\.serialize\(\), got str"):
        jaxptx.jax.deserialize("f.jax")


_V1_CPU = "jaxptx_cpu_v1 (call jaxptx.jax.register_ffi_targets() first)"
_RETIRED = (r"FAILED_PRECONDITION: jaxptx_cpu_v1 \(kernel affine\): this custom call was lowered "
            r"by an older jaxptx, whose FFI targets are version 1 \(grid, block, cluster and smem "
            r"as four attributes\); this jaxptx handles version 2 \(jaxptx_cpu_v2, one launch "
            r"attribute\)\. Lower and export the function again with this jaxptx, or run the "
            r"artifact with the jaxptx version that exported it")


def _v1_attrs() -> dict:
    """The attributes of jaxptx's version-1 calls: four launch attributes."""
    ptx = affine.ptx(N=256)
    return dict(kernel_id=np.int64(_id(ptx, "affine")), ptx=ptx, entry="affine",
                grid=np.array([2, 1, 1], np.int32), block=np.array([128, 1, 1], np.int32),
                cluster=np.array([1, 1, 1], np.int32), smem=np.int64(0),
                scalars=np.zeros(0, np.int64), tma=np.zeros(0, np.int64),
                may_write_inputs=np.int64(0), allow_unwritten=np.int64(0))


def _v1(x):
    return jax.ffi.ffi_call(_V1_CPU, jax.ShapeDtypeStruct((256,), jnp.float32))(x, **_v1_attrs())


def test_a_call_of_the_retired_version_1_target_names_the_version_and_the_fix():
    with pytest.raises(jax.errors.JaxRuntimeError, match=_RETIRED):
        jax.block_until_ready(jax.jit(_v1)(X))


def test_a_version_1_artifact_fails_with_the_version_and_the_fix(tmp_path):
    exp = export.export(jax.jit(lambda x: jnp.sin(_v1(x))), platforms=["cpu"],
                        disabled_checks=[export.DisabledSafetyCheck.custom_call(_V1_CPU)])(X)
    path = tmp_path / "v1.jax"
    path.write_bytes(exp.serialize())
    run = _run_artifact(path)
    assert run.returncode != 0
    assert re.search(_RETIRED, run.stderr), run.stderr


def test_registering_a_cubin_binds_it_to_its_ptx():
    _ffi.cuda_register(11, b"\x7fELF cubin", "ptx a", "k", 2)
    with pytest.raises(ValueError, match="kernel id 11 is already registered with different "
                                         "content"):
        _ffi.cuda_register(11, b"\x7fELF cubin", "ptx b", "k", 2)

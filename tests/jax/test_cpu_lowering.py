"""CPU lowering: a typed-FFI custom call into the shim, which runs the kernel
on the emulator through a Python callback with zero-copy buffers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx.jax import _cpu, _lowering, _registry
from jaxptx.launch import Launch

from jax_kernels import affine, axpy_index, clobber, wild_load
from raw_calls import raw_call

X = np.arange(256, dtype=np.float32)


def _kernel_id(text: str) -> int:
    return int(re.search(r"kernel_id = (\d+) : i64", text).group(1))


def test_lowered_text_shows_the_custom_call_and_kernel_id():
    text = jax.jit(affine).lower(X).as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_cpu_v2\(%arg0\) \{backend_config = \"\", "
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text
    attrs = m.group(1)
    assert re.fullmatch(r"allow_unwritten = 0 : i64, entry = \"affine\", kernel_id = \d+ : i64, "
                        r"launch = \{block = dense<\[128, 1, 1\]> : tensor<3xi32>, "
                        r"cluster = dense<1> : tensor<3xi32>, grid = dense<\[2, 1, 1\]> : "
                        r"tensor<3xi32>, smem = 0 : i64\}, may_write_inputs = 0 : i64, "
                        r"ptx = \".*\", "
                        r"scalars = dense<> : tensor<0xi64>, "
                        r"tma = dense<> : tensor<0xi64>", attrs)
    assert "ptx = \".version 8.5\\0A.target sm_90a\\0A" in attrs  # the call carries its PTX
    hlo = jax.jit(affine).lower(X).as_text(dialect="hlo")
    assert "api_version=API_VERSION_TYPED_FFI" in hlo


def test_kernels_in_a_lowered_function_give_their_ptx():
    lowered = jax.jit(lambda x: axpy_index(affine(x), x)).lower(X)
    specs = jaxptx.jax.kernels_in(lowered)
    assert sorted(s.module.functions[0].name for s in specs.values()) == ["affine", "axpy_index"]
    assert specs[_kernel_id(lowered.as_text())].ptx == affine.ptx(N=256)


def test_kernel_ids_are_small_and_depend_only_on_the_launch():
    a = _kernel_id(jax.jit(affine).lower(X).as_text())
    assert 0 < a < 2**48
    assert a == _kernel_id(jax.jit(lambda x: affine(x) * 2).lower(X).as_text())
    assert a != _kernel_id(jax.jit(affine).lower(np.zeros(512, np.float32)).as_text())
    assert _registry.lookup(a).kernel is affine


def test_kernel_ids_are_the_same_in_another_process():
    here = Path(__file__).parent
    code = ("import sys, re, jax, numpy as np; sys.path.insert(0, sys.argv[1]); "
            "from jax_kernels import affine; "
            "print(re.search(r'kernel_id = (\\d+)', "
            "jax.jit(affine).lower(np.zeros(256, np.float32)).as_text()).group(1))")
    out = subprocess.run([sys.executable, "-c", code, str(here)], check=True,
                         capture_output=True, text=True).stdout
    assert int(out) == _kernel_id(jax.jit(affine).lower(X).as_text())


def test_inputs_are_never_written():
    x = jnp.asarray(X)
    y = jax.jit(clobber)(x)
    np.testing.assert_array_equal(y, X)
    np.testing.assert_array_equal(x, X)


def test_outputs_of_several_dtypes():
    y, idx = jax.jit(axpy_index)(X, X)
    np.testing.assert_array_equal(y, X * 4)
    np.testing.assert_array_equal(idx, np.arange(256, dtype=np.int32))


def test_an_emulator_fault_is_an_ffi_error_not_a_crash():
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"INTERNAL: SimFault: kernel wild_load: ld\.global\.f32: "
                             r"address 0x\w+ is not in any global buffer"):
        jax.block_until_ready(jax.jit(wild_load)(X))
    np.testing.assert_array_equal(jax.jit(affine)(X), X * 2 + 1)  # still usable


def _raw_call(ptx: str, n: int, entry: str = "affine", **launch):
    """A jaxptx_cpu_v2 call made by hand, as a deserialised export makes it
    (``launch`` members replace the default launch's); its kernel id is
    derived from its content unless given."""
    kernel_id = launch.pop("kernel_id", None)
    members = dict(grid=np.array([n // 128, 1, 1], np.int32),
                   block=np.array([128, 1, 1], np.int32),
                   cluster=np.array([1, 1, 1], np.int32), smem=np.int64(0))
    members.update(launch)
    attrs = dict(ptx=ptx, entry=entry, launch=members, scalars=np.zeros(0, np.int64),
                 tma=np.zeros(0, np.int64), may_write_inputs=np.int64(0),
                 allow_unwritten=np.int64(0))
    if kernel_id is None:
        ints = _registry.launch_integers(Launch.from_attributes(**members), [4 * n], [4 * n],
                                         attrs["tma"])
        kernel_id = _registry.content_id(_registry.content_bytes(ptx.encode(), entry, ints))
    attrs["kernel_id"] = np.int64(kernel_id)
    return raw_call(_lowering.CPU_TARGET, attrs, (n,))


def test_an_id_not_lowered_here_runs_from_the_ptx_the_call_carries():
    x = np.arange(384, dtype=np.float32)  # a launch no test lowers
    f = _raw_call(affine.ptx(N=384), 384)
    kid = int(re.search(r"kernel_id = (\d+)", f.lower(x).as_text()).group(1))
    assert _registry.find(kid) is None
    np.testing.assert_array_equal(f(x), x * 2 + 1)


def test_bad_ptx_or_a_missing_attribute_in_a_call_is_an_ffi_error():
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"(?s)INTERNAL: ParseError: kernel affine: <string>:1:8: expected ';'.*"
                             r"\(jaxptx_cpu_v2, kernel id \d+\)"):
        jax.block_until_ready(_raw_call("garbage", 256)(X))
    call = jax.ffi.ffi_call(_lowering.CPU_TARGET, jax.ShapeDtypeStruct((4,), jnp.float32))
    with pytest.raises(jax.errors.JaxRuntimeError, match="Wrong number of attributes: expected 8"):
        jax.block_until_ready(jax.jit(lambda x: call(x, kernel_id=np.int64(1)))(X[:4]))


def test_the_callback_checks_buffer_sizes():
    kid = _kernel_id(jax.jit(affine).lower(X).as_text())
    small = memoryview(bytearray(16))
    message = _cpu.run(kid, (small,), (memoryview(bytearray(1024)),), memoryview(b""), "affine",
                       ((2, 1, 1), (128, 1, 1), (1, 1, 1), 0))
    assert message == ("ValueError: kernel affine: input 0: expected 1024 bytes for float32[256], "
                       "got 16 (jaxptx_cpu_v2, kernel id %d)" % kid)


def test_a_raising_or_missing_callback_is_an_ffi_error():
    from jaxptx import _ffi

    f = jax.jit(lambda x: affine(x) + 0.5)  # a fresh executable

    def boom(*args):
        raise RuntimeError("boom")

    try:
        _ffi.set_cpu_callback(boom)
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match="jaxptx_cpu_v2: the Python callback raised: RuntimeError: boom"):
            jax.block_until_ready(f(X))
        _ffi.set_cpu_callback(None)
        with pytest.raises(jax.errors.JaxRuntimeError, match="no Python callback registered"):
            jax.block_until_ready(f(X))
    finally:
        _ffi.set_cpu_callback(_cpu.run)
    np.testing.assert_array_equal(f(X), X * 2 + 1.5)

"""jaxptx.torch: kernels on torch tensors, as torch.library custom ops.

CPU tensors run on the emulator (compared with numpy); torch.compile traces
the op through its fake implementation; the CUDA path's handler call runs
here on the stand-in driver (jaxptx.testing.standin), and on a GPU for real.
Everything but the import test skips when torch does not import.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from torch_kernels import (add_one_in_place, axpy_index, increment_s32, negate_bf16,  # noqa: E402
                           scale_rows)


def test_importing_jaxptx_never_imports_torch():
    code = ("import sys, jaxptx, jaxptx.jax, jaxptx.runtime, jaxptx.torch; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


torch = pytest.importorskip("torch")
if getattr(torch, "__file__", None) is None:  # tests/torch itself, as a namespace package
    pytest.skip("torch is not installed", allow_module_level=True)

import jaxptx.torch as jt  # noqa: E402
from jaxptx import _ffi, kernel, kernels  # noqa: E402
from jaxptx.errors import SpecError  # noqa: E402
from jaxptx.runtime import _compat  # noqa: E402
from jaxptx.testing import standin  # noqa: E402
from jaxptx.torch import _cuda  # noqa: E402
from jaxptx.torch._op import decode_params, encode_params  # noqa: E402

SCALE = jt.op(scale_rows)
AXPY = jt.op(axpy_index)


def _rand(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# eager, CPU: the emulator ----------------------------------------------------------------

def test_eager_cpu_matches_numpy():
    for shape, factor in (((3, 40), 3.0), ((1, 7), -0.5)):
        x = _rand(*shape)
        y = SCALE(x, factor=factor)
        assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
        np.testing.assert_array_equal(y.numpy(), x.numpy() * np.float32(factor))


def test_several_outputs_and_a_raw_scalar_param():
    x = _rand(64)
    y, z = AXPY(x, alpha=0.25)
    np.testing.assert_allclose(y.numpy(), x.numpy().astype(np.float64) * 0.25 + 1, rtol=1e-6)
    assert z.dtype == torch.int32
    np.testing.assert_array_equal(z.numpy(), np.arange(64))


def test_bfloat16_tensors_cross_without_loss():
    x = _rand(96).to(torch.bfloat16)
    y = jt.op(negate_bf16)(x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, -x)


def test_in_place_kernel_returns_a_new_tensor_and_leaves_its_input():
    x = _rand(32)
    before = x.clone()
    y = jt.op(add_one_in_place)(x)
    assert torch.equal(x, before)
    np.testing.assert_array_equal(y.numpy(), before.numpy() + np.float32(1))


def test_non_contiguous_input_is_read_as_its_values():
    x = _rand(40, 3).t()  # (3, 40), not contiguous
    np.testing.assert_array_equal(SCALE(x, factor=2.0).numpy(), x.numpy() * 2)


def test_op_is_a_registered_custom_op_and_passes_opcheck():
    assert SCALE.qualname == "jaxptx::scale_rows"
    assert jt.op(scale_rows) is SCALE
    x = _rand(2, 40)
    y = torch.ops.jaxptx.scale_rows([x], encode_params({"factor": 2.0}))
    np.testing.assert_array_equal(y[0].numpy(), x.numpy() * 2)
    torch.library.opcheck(SCALE.custom_op, ([x], encode_params({"factor": 2.0})))
    assert jt.op(scale_rows, name="scale_rows").qualname == "jaxptx::scale_rows_1"


def test_params_round_trip():
    for kwargs in ({}, {"factor": 2.0}, {"n": 3, "mode": "x", "shape": (1, 2)}):
        assert decode_params(encode_params(kwargs)) == kwargs
    opaque = {"factor": np.float32(1.5)}  # not a Python literal: kept in the process
    key = encode_params(opaque)
    assert key.startswith("@") and encode_params(dict(opaque)) == key
    assert decode_params(key) == opaque


# torch.compile and fake tensors ----------------------------------------------------------

def test_torch_compile_of_a_function_calling_the_kernel():
    def f(x):
        return SCALE(torch.sin(x), factor=2.0) + 1.0

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for shape in ((3, 40), (2, 17)):
        x = _rand(*shape)
        np.testing.assert_allclose(compiled(x).numpy(), np.sin(x.numpy()) * 2 + 1, rtol=1e-6)


def test_torch_compile_with_dynamic_shapes_and_two_outputs():
    compiled = torch.compile(lambda x: AXPY(x, alpha=2.0)[0] * 3, fullgraph=True,
                             backend="aot_eager", dynamic=True)
    for n in (32, 96):
        x = _rand(n)
        np.testing.assert_allclose(compiled(x).numpy(), (x.numpy() * 2 + 1) * 3, rtol=1e-6)


@pytest.mark.slow
def test_torch_compile_with_inductor():
    compiled = torch.compile(lambda x: SCALE(x, factor=3.0).relu(), fullgraph=True)
    x = _rand(4, 33)
    np.testing.assert_allclose(compiled(x).numpy(), np.maximum(x.numpy() * 3, 0), rtol=1e-6)


def test_fake_tensors_get_the_output_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y, z = AXPY(torch.empty(128), alpha=1.0)
        s = SCALE(torch.empty(5, 7, dtype=torch.float32))
    assert (tuple(y.shape), y.dtype, tuple(z.shape), z.dtype) == ((128,), torch.float32,
                                                                  (128,), torch.int32)
    assert tuple(s.shape) == (5, 7)
    meta = SCALE(torch.empty(6, 9, device="meta"))
    assert meta.device.type == "meta" and tuple(meta.shape) == (6, 9)


# bad inputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, error, message", [
    ((torch.ones(2, 8, dtype=torch.float16),), {}, SpecError, "expected dtype f32"),
    ((torch.ones(8),), {}, SpecError, "expected rank 2"),
    ((torch.ones(2, 8),), {"nope": 1}, SpecError, "unknown keyword 'nope'"),
    ((torch.ones(2, 8, dtype=torch.complex64),), {}, SpecError, "complex64 cannot reach a kernel"),
    ((torch.ones(2, 8), torch.ones(2, 8)), {}, SpecError, "expected 1 input"),
    ((), {}, SpecError, "at least one input tensor"),
])
def test_bad_inputs_are_refused_with_jaxptx_messages(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        SCALE(*args, **kwargs)


@pytest.mark.parametrize("op, tensor, message", [
    (scale_rows, torch.ones(2, 8, dtype=torch.float64),
     r"kernel scale_rows: argument 'x': expected dtype f32 for Tile\('B', 'N', f32.*got float64"),
    (increment_s32, torch.arange(32, dtype=torch.int64) + 2 ** 33,
     r"kernel increment_s32: argument 'x': expected dtype s32 for Tile\('N', s32.*got int64"),
    (increment_s32, torch.arange(32, dtype=torch.int16),
     r"kernel increment_s32: argument 'x': expected dtype s32 .*got int16"),
])
def test_a_tensor_of_another_dtype_is_refused_never_converted(op, tensor, message):
    # Regression: JAX (x64 off) narrowed float64 and int64 tensors to the kernel's
    # f32 and s32 before the spec check saw them (2**33 + i came back as i + 1).
    with pytest.raises(SpecError, match=message):
        jt.op(op)(tensor)
    np.testing.assert_array_equal(jt.op(increment_s32)(torch.arange(32, dtype=torch.int32)).numpy(),
                                  np.arange(1, 33))


def test_bad_inputs_fail_in_torch_compile_too():
    compiled = torch.compile(lambda x: SCALE(x), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="expected rank 2"):
        compiled(torch.ones(8))


def test_inputs_on_two_devices_are_refused():
    with pytest.raises(SpecError, match="different devices"):
        AXPY.custom_op([torch.ones(32), torch.ones(32, device="meta")], "()")


def test_a_missing_raw_param_and_a_non_kernel():
    with pytest.raises(SpecError, match="raw param alpha"):
        AXPY(torch.ones(32))
    with pytest.raises(TypeError, match="expected a jaxptx kernel or a function of arrays "
                                        "calling kernels, got int"):
        jt.op(3)

    @kernel(module=True, arch="sm_80")
    def module_only():
        pass

    with pytest.raises(SpecError, match="no out_specs"):
        jt.op(module_only)


# functions of arrays: the library's ops -----------------------------------------------------

F = torch.nn.functional


def _torch_reference(name, *args):
    """The op in torch, with the library's default eps."""
    x, n = args[0], (args[0].shape[-1],)
    if name == "rms_norm":
        return F.rms_norm(x, n, args[1], eps=1e-6)
    if name == "layer_norm":
        return F.layer_norm(x, n, args[1], args[2], eps=1e-5)
    if name == "softmax":
        return torch.softmax(x, dim=-1)
    return F.silu(x) * args[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "softmax", "swiglu"])
def test_library_ops_run_on_cpu_tensors(name, dtype):
    x, y, z = _rand(3, 40, seed=1), _rand(40, seed=2), _rand(40, seed=3)
    if name == "swiglu":
        y = _rand(3, 40, seed=2)
    args = {"rms_norm": (x, y), "layer_norm": (x, y, z), "softmax": (x,), "swiglu": (x, y)}[name]
    args = [a.to(dtype) for a in args]
    got = jt.op(getattr(kernels, name))(*args)
    want = _torch_reference(name, *[a.float() for a in args])
    assert got.dtype == dtype and got.shape == args[0].shape
    tol = 2e-5 if dtype == torch.float32 else 1e-2
    np.testing.assert_allclose(got.float().numpy(), want.numpy(), rtol=tol, atol=tol)


def test_a_library_op_takes_keywords_and_compiles():
    rms_norm = jt.op(kernels.rms_norm)
    assert rms_norm.qualname == "jaxptx::rms_norm" and jt.op(kernels.rms_norm) is rms_norm
    x, w = _rand(2, 24), _rand(24, seed=1)
    want = F.rms_norm(x, (24,), w, eps=0.5)
    np.testing.assert_allclose(rms_norm(x, w, eps=0.5).numpy(), want.numpy(), rtol=2e-5, atol=2e-5)
    compiled = torch.compile(lambda x: rms_norm(x, w, eps=0.5) * 2, fullgraph=True, backend="aot_eager")
    np.testing.assert_allclose(compiled(x).numpy(), want.numpy() * 2, rtol=2e-5, atol=2e-5)


def test_a_library_op_refuses_what_jax_would_narrow_and_keeps_its_own_checks():
    rms_norm = jt.op(kernels.rms_norm)
    with pytest.raises(SpecError, match=r"function rms_norm: argument 'x': expected a dtype JAX "
                                        r"keeps, got float64 \(JAX would narrow it to float32"):
        rms_norm(_rand(2, 8).double(), _rand(8).double())
    with pytest.raises(SpecError, match=r"rms_norm: w must have x's dtype float16, got float32"):
        rms_norm(_rand(2, 8).half(), _rand(8))


# the CUDA path, on the stand-in driver ---------------------------------------------------

def _on_standin(driver, fn):
    with standin.installed(driver):
        return fn()


def test_cuda_path_launches_through_the_handler(monkeypatch):
    """What a CUDA tensor's launch does, with the stand-in driver's memory
    for the tensors': the call lowered for CUDA, its image registered (PTX
    here: the compiler is made newer than the driver, so module_image hands
    the driver PTX to JIT), the handler called with a frame of device
    addresses on a stream."""
    monkeypatch.setattr(_compat, "driver_cuda_version", lambda: (13, 0))
    monkeypatch.setattr(_compat, "toolchain_cuda_version", lambda backend="auto": (13, 5))
    x = _rand(64)
    call = AXPY.cuda_call([x], encode_params({"alpha": 3.0}))
    assert not _ffi.cuda_registered(call["kernel_id"])
    _cuda.register_image(call, "sm_80")
    assert _ffi.cuda_registered(call["kernel_id"])

    driver = standin.StandInDriver()
    dev = driver.device
    inputs = [dev.to_device(x.numpy())]
    outputs = [dev.alloc(64 * 4), dev.alloc(64 * 4)]
    _on_standin(driver, lambda: _cuda.launch(call, inputs, outputs, driver.stream, driver))
    y = dev.from_device(outputs[0], np.empty(64, np.float32))
    z = dev.from_device(outputs[1], np.empty(64, np.int32))
    np.testing.assert_allclose(y, x.numpy().astype(np.float64) * 3 + 1, rtol=1e-6)
    np.testing.assert_array_equal(z, np.arange(64))
    (launch,) = driver.calls("launch")
    assert launch["name"] == call["entry"].decode() and launch["grid"] == (2, 1, 1)


def test_cuda_path_reports_handler_errors_and_bad_frames():
    x = _rand(32)
    call = AXPY.cuda_call([x], encode_params({"alpha": 1.0}))
    driver = standin.StandInDriver()
    dev = driver.device
    inputs, outputs = [dev.to_device(x.numpy())], [dev.alloc(128), dev.alloc(128)]
    forged = call.replace(kernel_id=12345, rehash=False)
    with pytest.raises(RuntimeError, match="jaxptx.torch: .*kernel"):
        _on_standin(driver, lambda: _cuda.launch(forged, inputs, outputs, driver.stream, driver))
    with pytest.raises(SpecError, match="takes 1 inputs and 2 outputs"):
        _cuda.frames(call, inputs, outputs[:1])
    in_place_call = jt.op(add_one_in_place).cuda_call([x], "()")
    assert in_place_call.aliases == ((0, 0),)
    with pytest.raises(SpecError, match="must share input 0's buffer"):
        _cuda.frames(in_place_call, [inputs[0]], [outputs[0]])


@pytest.mark.gpu
def test_cuda_tensors_on_a_gpu():
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA device")
    x = _rand(3, 40).cuda()
    np.testing.assert_array_equal(SCALE(x, factor=3.0).cpu().numpy(), x.cpu().numpy() * 3)
    y, z = AXPY(_rand(64).cuda(), alpha=2.0)
    np.testing.assert_array_equal(z.cpu().numpy(), np.arange(64))
    x = _rand(32).cuda()
    y = jt.op(add_one_in_place)(x)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), x.cpu().numpy() + np.float32(1))
    compiled = torch.compile(lambda x: SCALE(x, factor=2.0) + 1, fullgraph=True)
    x = _rand(2, 40).cuda()
    np.testing.assert_allclose(compiled(x).cpu().numpy(), x.cpu().numpy() * 2 + 1, rtol=1e-6)


@pytest.mark.gpu
def test_a_library_op_on_cuda_tensors():
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA device")
    import jax
    try:
        jax.devices("cuda")
    except RuntimeError:
        pytest.skip("this jax has no CUDA backend")
    x, w = _rand(4, 256).cuda(), _rand(256, seed=1).cuda()
    y = jt.op(kernels.rms_norm)(x, w)
    assert y.device == x.device
    want = F.rms_norm(x, (256,), w, eps=1e-6)
    np.testing.assert_allclose(y.cpu().numpy(), want.cpu().numpy(), rtol=1e-5, atol=1e-5)

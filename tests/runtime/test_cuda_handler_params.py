"""What the CUDA handler asks of the driver beyond the launch: each kernel's
parameters (cuFuncGetParamInfo, against which a call's parameter list is
checked before anything is copied or launched), and the one seam through
which the stand-in driver replaces libcuda.so.1 (jaxptx._ffi.set_cuda_driver)."""

from __future__ import annotations

import ctypes
import pathlib
import sys

import numpy as np
import pytest

from jaxptx import _ffi
from jaxptx.testing import _standin
from jaxptx.testing.standin import (
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED,
    DriverError,
    StandInDriver,
    installed,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "jax"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from handler_calls import (  # noqa: E402
    INTERNAL,
    INVALID_ARGUMENT,
    X,
    cluster_rank,
    failure,
    lowered_call,
    run,
    scaled,
)
from jax_kernels import affine, axpy_index  # noqa: E402
from tma_kernels import tma_scale  # noqa: E402


def test_a_wrong_buffer_count_is_refused_before_the_launch():
    call = lowered_call(axpy_index, X, X)
    driver = StandInDriver()
    e = failure(call.replace(outputs=call.outputs[:1]), X, X, driver=driver)
    assert e.code == INVALID_ARGUMENT
    assert ("kernel axpy_index: it declares 4 parameters, but the call passes 3 buffer "
            "pointers, 0 raw scalars and 0 TMA descriptors (3)") in e.message
    assert len(driver.calls("func_get_param_info")) == 4  # the kernel's, from the driver
    assert driver.calls("launch") == []


def test_a_registered_module_with_another_pointer_count_is_refused():
    call = lowered_call(axpy_index, X, X)
    call = call.replace(ptx=call["ptx"] + b"// registered with 5 pointers\n")  # an id of its own
    _ffi.cuda_register(call["kernel_id"], call["ptx"], call["ptx"].decode(), "axpy_index", 5)
    e = failure(call, X, X)
    assert "kernel axpy_index takes 5 pointer parameters, got 4 buffers" in e.message


def test_a_scalar_count_or_size_that_does_not_match_the_kernel_is_refused():
    call = lowered_call(lambda x: scaled(x, n=3, alpha=1.0, bias=7), X)
    fewer = call.replace(scalars=call["scalars"][:-2])
    e = failure(fewer, X)
    assert e.code == INVALID_ARGUMENT
    assert ("kernel scaled: it declares 6 parameters, but the call passes 3 buffer pointers, "
            "2 raw scalars and 0 TMA descriptors (5)") in e.message
    wider = list(call["scalars"])
    wider[0] = 8  # n (a .u32) as 8 bytes
    e = failure(call.replace(scalars=wider), X)
    assert "parameter 3 is 4 bytes in the kernel, but the call passes raw scalar 0 there (8 bytes)" \
        in e.message
    odd = call.replace(scalars=[3, 1, 7, 4, 1, 8, 7])
    assert "the scalars attribute is not (bytes, bits) pairs" in failure(odd, X).message


def test_the_handler_checks_the_call_against_the_sizes_the_driver_reports():
    """The sizes come from cuFuncGetParamInfo, not from the PTX: a driver
    reporting another size for a buffer's parameter makes the call refused."""
    driver = StandInDriver()
    real = driver.func_get_param_info

    def narrow_first(fn, index):
        offset, size = real(fn, index)
        return (offset, 4) if index == 0 else (offset, size)

    driver.func_get_param_info = narrow_first
    e = failure(lowered_call(affine, X), X, driver=driver)
    assert e.code == INVALID_ARGUMENT
    assert ("kernel affine: parameter 0 is 4 bytes in the kernel, but the call passes buffer "
            "pointer 0 there (8 bytes)") in e.message
    assert driver.calls("launch") == []


def test_a_driver_that_cannot_report_parameters_fails_the_call_with_its_reason():
    driver = StandInDriver()

    def unsupported(fn, index):
        raise DriverError(CUDA_ERROR_NOT_SUPPORTED, "no parameter info here")

    driver.func_get_param_info = unsupported
    e = failure(lowered_call(affine, X), X, driver=driver)
    assert e.code == INTERNAL
    assert ("kernel affine: cannot read its parameters: cuFuncGetParamInfo failed for parameter "
            "0: CUDA_ERROR_NOT_SUPPORTED (cuFuncGetParamInfo: DriverError: no parameter info "
            "here)") in e.message
    assert driver.calls("launch") == []


@pytest.mark.parametrize("f, args, sizes", [
    (affine, (X,), [8, 8]), (axpy_index, (X, X), [8, 8, 8, 8]),
    (lambda x: scaled(x, n=1, alpha=1.0, bias=0), (X,), [8, 8, 8, 4, 4, 8]),
    (tma_scale, (np.zeros((64, 64), np.float32),), [8, 8, 128, 128]), (cluster_rank, (X,), [8, 8]),
])
def test_each_parameter_is_copied_with_the_size_the_driver_reports(f, args, sizes):
    ran, driver = run(lowered_call(f, *args), *args)
    assert [len(p) for p in driver.calls("launch")[0]["params"]] == sizes
    assert len(driver.calls("func_get_param_info")) == len(sizes)   # never past the last one


def test_a_driver_reporting_fewer_parameters_than_the_ptx_declares_fails_the_call():
    driver = StandInDriver()
    real = driver.func_get_param_info

    def three_only(fn, index):
        if index >= 3:
            raise DriverError(CUDA_ERROR_INVALID_VALUE, "past the last parameter")
        return real(fn, index)

    driver.func_get_param_info = three_only
    e = failure(lowered_call(axpy_index, X, X), X, X, driver=driver)
    assert e.code == INTERNAL
    assert ("kernel axpy_index: cannot read its parameters: its PTX declares 4 parameters, but "
            "the driver reports 3") in e.message
    assert driver.calls("launch") == []


_DECLARATIONS = b"""
.version 8.0
.target sm_90a
.address_size 64
// .entry decoy(.param .u32 a)
.visible .entry k /* c */ (
    .param .u64 .ptr .global .align 16 p,   // a pointer
    .param .align 64 .b8 tmap[128],
    .param .f64 d, .param .u16 h
) { ret; }
.visible .entry none() { ret; }
"""


def test_the_stand_ins_param_info_lays_out_comments_alignment_and_arrays():
    """cuFuncGetParamInfo's offsets and sizes, worked by hand: p at 0 (8),
    tmap aligned to 64 (128 bytes), d at 192 (8), h at 200 (2)."""
    driver = StandInDriver()
    driver.ctx_push(driver.context)
    module = driver.module_load(_DECLARATIONS)
    k = driver.module_get_function(module, "k")
    assert [driver.func_get_param_info(k, i) for i in range(4)] == \
        [(0, 8), (64, 128), (192, 8), (200, 2)]
    with pytest.raises(DriverError, match=r"^k has 4 parameters, no parameter 4$") as info:
        driver.func_get_param_info(k, 4)
    assert info.value.code == CUDA_ERROR_INVALID_VALUE
    none = driver.module_get_function(module, "none")
    with pytest.raises(DriverError, match=r"^none has 0 parameters, no parameter 0$"):
        driver.func_get_param_info(none, 0)
    with pytest.raises(DriverError, match=r"the module has no entry 'decoy'"):
        driver.module_get_function(module, "decoy")


def test_the_driver_table_is_swapped_through_one_capsule_and_put_back():
    driver = StandInDriver()
    with installed(driver):
        assert _ffi.cuda_driver_error() == ""  # the stand-in answers cuInit's place
    assert _ffi.cuda_driver_error() != "" or _has_libcuda()  # libcuda.so.1 again
    with pytest.raises(TypeError, match=r"expected a capsule named jaxptx\.cu\.Driver\.v\d+ or "
                                        r"None, got int"):
        _ffi.set_cuda_driver(3)
    name = b"another.table"
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p,
                                                                   ctypes.c_char_p, ctypes.c_void_p]
    with pytest.raises(TypeError, match=r"got one named another\.table \(an extension built "
                                        r"against another driver table\?\)"):
        _ffi.set_cuda_driver(new_capsule(8, name, None))
    with pytest.raises(ValueError, match=r"install: expected a driver object, got None"):
        _standin.install(None)


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


_COMMENTED = """
.version 8.0
.target sm_90a
.address_size 64
// .visible .entry twice(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d)
/* .entry twice(.param .u64 a, .param .u64 b, .param .u64 c) */
.visible .entry twice_the_decoy(.param .u64 a) { ret; }
.visible .entry twice /* (.param .u64 x, */ (
    .param .u64 .ptr .global .align 4 src,   // input, read
    .param .u64 dst                          /* output, written */
)
{
    .reg .b32 %r<3>; .reg .b64 %rd<6>; .reg .f32 %f<3>;
    ld.param.u64 %rd1, [src]; ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x; mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3; add.u64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4]; add.f32 %f2, %f1, %f1; st.global.f32 [%rd5], %f2;
    ret;
}
"""


def test_the_handler_counts_the_entrys_parameters_past_comments_and_other_entries():
    """How many parameters to ask the driver about comes from the loaded PTX's
    .entry: commented-out headers, a longer name sharing the prefix and a comment
    holding a comma inside the list do not change the count."""
    import jax

    from jaxptx.jax import ptx_call

    x = np.arange(64, dtype=np.float32)
    call = lowered_call(lambda v: ptx_call(_COMMENTED, v, kernel="twice", out_shape=jax.ShapeDtypeStruct(
        (64,), np.float32), grid=1, block=64), x)
    ran, driver = run(call, x)
    (out,) = ran.outputs
    np.testing.assert_array_equal(out, 2 * x)
    assert driver.calls("func_get_param_info") == [("twice", 0), ("twice", 1)]

"""The CPU handler keeps what a call signature derives (its parsed PTX, checked
launch, raw scalar bytes, output names) for the next call (issue 29). A key
that left something out would run a later call with an earlier call's
launch, scalars or PTX: each test alternates calls that differ in one of
them and checks every result."""

from __future__ import annotations

import re

import jax
import pytest
import numpy as np

from jaxptx import Tile, kernel, ptx
from jaxptx.jax import _cpu
from jaxptx.types import f32

from jax_kernels import affine


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), raw_params=[("u32", "n"), ("f32", "alpha")],
        grid=lambda N: (N // 128, 1, 1), block=(128, 1, 1), arch="sm_90a")
def scale_head(x, y):
    """``y[i] = x[i] * alpha`` for ``i < n``, else ``x[i]``."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    with ptx.if_(i < ptx.param("n")):
        ptx.mul.f32(v, v, ptx.param("alpha"))
    ptx.st.global_.f32(y.ptr + off, v)


def test_calls_of_other_sizes_alternate_without_mixing_launches():
    f = jax.jit(affine)
    for n in (128, 640, 128, 256, 640):       # not 384: test_cpu_lowering needs a launch no test lowers
        x = np.arange(n, dtype=np.float32) - 7
        np.testing.assert_array_equal(np.asarray(f(x)), x * 2 + 1)


def test_calls_with_other_raw_scalars_alternate_without_mixing_values():
    f = jax.jit(scale_head, static_argnames=("n", "alpha"))
    x = np.arange(256, dtype=np.float32)
    for n, alpha in ((100, 3.0), (7, -0.5), (100, 3.0), (200, 3.0)):
        want = np.where(np.arange(256) < n, x * np.float32(alpha), x)
        np.testing.assert_array_equal(np.asarray(f(x, n=n, alpha=alpha)), want)


def _direct(kid: int, text: bytes, grid: int, x: np.ndarray) -> tuple[str | None, np.ndarray]:
    out = bytearray(x.nbytes)
    message = _cpu.run(kid, (memoryview(x.tobytes()),), (memoryview(out),), memoryview(text), "affine",
                       ((grid, 1, 1), (128, 1, 1), (1, 1, 1), 0))
    return message, np.frombuffer(bytes(out), np.float32)


def test_a_direct_call_with_another_launch_or_ptx_under_one_id_is_checked_afresh():
    x = np.arange(256, dtype=np.float32)
    kid = int(re.search(r"kernel_id = (\d+)", jax.jit(affine).lower(x).as_text()).group(1))
    text = affine.ptx(N=256).encode()
    message, y = _direct(kid, text, 2, x)
    assert message is None
    np.testing.assert_array_equal(y, x * 2 + 1)
    # One CTA of two: the second half is never written, whatever ran before.
    message, _ = _direct(kid, text, 1, x)
    assert re.match(r"UnwrittenOutputError: kernel affine: output 0 'y' has 512 of 1024 bytes the kernel never "
                    r"wrote, the first at byte 512", message), message
    # The same id and launch with other text: parsed again, not the kept module.
    message, _ = _direct(kid, b"garbage", 2, x)
    assert re.match(r"ParseError: kernel affine: <string>:1:8: expected ';'", message), message
    message, y = _direct(kid, text, 2, x + 1)
    assert message is None
    np.testing.assert_array_equal(y, (x + 1) * 2 + 1)


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=lambda N: (N // 128, 1, 1),
        block=(128, 1, 1), arch="sm_90a")
def positive_only(x, y):
    """``y[i] = 2 * x[i]`` where ``x[i] > 0``; other elements are never written."""
    i = ptx.special.ctaid.x() * 128 + ptx.special.tid.x()
    off = ptx.mul.wide.u32(i, 4)
    v = ptx.ld.global_.f32(x.ptr + off)
    with ptx.if_(v > 0.0):
        ptx.st.global_.f32(y.ptr + off, v * 2.0)


def test_each_call_on_the_kept_device_starts_from_its_own_inputs_and_a_fresh_output():
    f = jax.jit(positive_only)
    x = np.arange(1, 257, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2)
    holes = x.copy()
    holes[[5, 9, 200]] = -1.0
    # Bytes the last call wrote are not this call's: the unwritten elements are found.
    with pytest.raises(ValueError,
                       match=r"UnwrittenOutputError: kernel positive_only: output 0 'y' \(float32\[256\]\) has 3 "
                             r"of 256 elements the kernel never wrote, the first at index \(5,\)"):
        jax.block_until_ready(f(holes))
    np.testing.assert_array_equal(np.asarray(f(x + 1)), (x + 1) * 2)


GLOBAL_COUNTER = """.version 8.5
.target sm_90a
.address_size 64
.global .u32 counter;
.visible .entry count(.param .u64 x, .param .u64 y)
{
    .reg .b32 %r<4>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [y];
    mov.u32 %r1, %tid.x;
    atom.global.add.u32 %r2, [counter], 1;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}"""


def test_a_module_with_global_variables_starts_each_call_with_them_initialised():
    for _ in range(3):
        out = bytearray(128)
        message = _cpu.run(987_654_321, (memoryview(bytes(128)),), (memoryview(out),),
                           memoryview(GLOBAL_COUNTER.encode()), "count", ((1, 1, 1), (32, 1, 1), (1, 1, 1), 0))
        assert message is None
        np.testing.assert_array_equal(np.sort(np.frombuffer(bytes(out), np.uint32)), np.arange(32))


def test_a_direct_call_with_an_output_that_is_its_input_updates_it_in_place():
    x = np.arange(256, dtype=np.float32)
    kid = int(re.search(r"kernel_id = (\d+)", jax.jit(affine).lower(x).as_text()).group(1))
    for k in range(2):
        buffer = bytearray((x + k).tobytes())
        view = memoryview(buffer)
        message = _cpu.run(kid + 1, (view,), (view,), memoryview(affine.ptx(N=256).encode()), "affine",
                           ((2, 1, 1), (128, 1, 1), (1, 1, 1), 0))
        assert message is None
        np.testing.assert_array_equal(np.frombuffer(bytes(buffer), np.float32), (x + k) * 2 + 1)

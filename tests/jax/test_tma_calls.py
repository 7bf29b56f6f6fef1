"""TMA descriptors built by the runtime for each call: the kernel declares
``x.tma_desc()``, the call carries the descriptor but for its address
(the ``tma`` attribute), and the handler encodes it with the buffer's
address — the emulator here, ``cuTensorMapEncodeTiled`` on a GPU."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import Layout, Tile, _ffi, kernel, ptx
from jaxptx.errors import SpecError
from jaxptx.jax import _cpu
from jaxptx.jax._tma import RECORD, sim_maps
from jaxptx.sim.memory.tensormap import decode
from jaxptx.runtime import ptxas
from jaxptx.types import f32

from tma_kernels import tma_reshaped_dump, tma_scale

RNG = np.random.default_rng(7)


def _tma_attribute(text: str) -> list[int]:
    m = re.search(r"tma = dense<\[([-\d, ]+)\]> : tensor<(\d+)xi64>", text)
    assert m, text
    values = [int(v) for v in m.group(1).split(",")]
    assert len(values) == int(m.group(2))
    return values


def test_ptxas_accepts_the_descriptor_params_and_their_generic_addresses():
    text = tma_scale.ptx(M=64, N=64)
    assert ".param .align 64 .b8 x_tma[128]" in text and ".param .align 64 .b8 y_tma[128]" in text
    ptxas(text, "sm_90a")
    ptxas(tma_reshaped_dump.ptx(M=32, N=256, G=2), "sm_90a")


def test_a_tiled_tma_load_and_store_under_jit_and_eagerly():
    x = RNG.standard_normal((96, 64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(tma_scale)(x)), x * 2 + 1)
    np.testing.assert_array_equal(np.asarray(tma_scale(x, scale=3.0)), x * 3 + 1)


def test_the_call_carries_each_descriptor_but_its_address():
    x = np.zeros((96, 64), np.float32)
    for text in (jax.jit(tma_scale).lower(x).as_text(),
                 jax.jit(tma_scale).trace(x).lower(lowering_platforms=("cuda",)).as_text()):
        tma = _tma_attribute(text)
        assert len(tma) == 2 * RECORD
        # buffer, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank 2, SWIZZLE_128B; dims innermost
        # first; the row stride in bytes; the box; element strides; no interleave,
        # L2 promotion 128B, zero fill
        want = [0, 7, 2, 3, 64, 96, 0, 0, 0, 256, 0, 0, 0, 32, 32, 0, 0, 0, 1, 1, 0, 0, 0, 0, 2, 0]
        assert tma[:RECORD] == want
        assert tma[RECORD:] == [1] + want[1:]  # the output's, over buffer 1


def test_the_cuda_handler_and_the_emulator_read_the_same_descriptor_from_a_record():
    """The shim's decoder (what it hands cuTensorMapEncodeTiled) and the
    emulator's map agree on every field, for the reshaped rank-3 bf16 map."""
    x = np.zeros((48, 256), jnp.bfloat16)
    text = jax.jit(lambda x: tma_reshaped_dump(x, G=3)).trace(x).lower(
        lowering_platforms=("cuda",)).as_text()
    tma = _tma_attribute(text)
    (cuda,) = _ffi.tma_encode_arguments(tma, 2)
    assert cuda == dict(buffer=0, dtype=9, rank=3, dims=(64, 48, 4), strides=(512, 128),
                        box=(64, 16, 2), element_strides=(1, 1, 1), interleave=0, swizzle=3,
                        l2_promotion=2, oob_fill=0)
    (emulated,) = sim_maps(tma)
    tm = decode(emulated.encode(1 << 36))
    assert (tm.dims, tm.box, tm.strides[:2], tm.elem_bytes) == ((64, 48, 4), (64, 16, 2), (512, 128), 2)
    assert (tm.swizzle, tm.address) == (128, 1 << 36)
    for bad, message in (([0] * 3, "not whole records of 26"),
                         ([2] + tma[1:], r"buffer 2 of 2"), ([0, 9, 6] + tma[3:], "rank 6")):
        with pytest.raises(ValueError, match=message):
            _ffi.tma_encode_arguments(bad, 2)


def _swizzled_128b(rows: np.ndarray) -> np.ndarray:
    """Rows of 128 bytes as the 128-byte swizzle lays them in shared memory
    (1024-byte aligned): 16-byte chunk c of row r lands at chunk c ^ (r % 8)."""
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        chunks = rows[r].reshape(8, 16)
        out[r].reshape(8, 16)[np.arange(8) ^ (r % 8)] = chunks
    return out


def test_the_reshaped_rank3_descriptor_moves_a_box_wider_than_the_swizzle_in_one_copy():
    """A 16 x 128 bf16 box (256-byte rows) through ``tma_rank=3``: two
    swizzled 16 x 64 blocks, one after the other."""
    x = RNG.integers(0, 2**16, size=(48, 256), dtype=np.uint16).view(jnp.bfloat16)
    dump = jax.jit(lambda x: tma_reshaped_dump(x, G=3))
    out = np.asarray(dump(x))
    raw = np.asarray(x).view(np.uint8).reshape(48, 512)
    for g in range(3):
        rows = raw[16 * g:16 * g + 16]
        want = np.concatenate([_swizzled_128b(rows[:, 128 * b:128 * b + 128]) for b in range(4)][:2])
        got = out[g].view(np.uint8).reshape(32, 128)
        np.testing.assert_array_equal(got, want, err_msg=f"CTA {g}")
    text = dump.lower(x).as_text()
    # (48, 256) as (256 / 64, 48, 64): dims {64, 48, 4}, strides {512, 128}, box {64, 16, 2}
    assert _tma_attribute(text) == [0, 9, 3, 3, 64, 48, 4, 0, 0, 512, 128, 0, 0, 64, 16, 2, 0, 0,
                                    1, 1, 1, 0, 0, 0, 2, 0]


def test_vmap_of_a_tma_kernel_loops_with_a_descriptor_per_element():
    """One descriptor describes one tensor, so a batch='z' kernel with TMA
    descriptors of batched tensors runs a loop of launches under vmap."""
    xs = RNG.standard_normal((3, 32, 64)).astype(np.float32)
    f = jax.jit(jax.vmap(tma_scale))
    np.testing.assert_array_equal(np.asarray(f(xs)), xs * 2 + 1)
    text = f.lower(xs).as_text()
    assert "stablehlo.while" in text
    assert re.search(r"grid = dense<\[2, 1, 1\]>", text)  # one element's grid, no z batch


def _copy_kernel(spec: Tile):
    @kernel(in_specs=(spec,), out_specs=(Tile("M", "N", f32),), arch="sm_90a")
    def tma_bad(x, y):
        ptx.prefetch.tensormap(ptx.addr(x.tma_desc()))
    return tma_bad


@pytest.mark.parametrize("spec, n, message", [
    (Tile("M", "N", f32), 512, r"TMA box \(4, 512\) has a dim outside 1..256; give the Tile a tma_box"),
    (Tile("M", "N", f32, tma_box=(2, 2)), 3,
     r"TMA descriptor x_tma \(shape \(4, 3\), box \(2, 2\), .f32, swizzle 0\): .*multiple"),
    (Tile("M", "N", f32, Layout.TMA_32B, tma_box=(2, 16)), 16,
     r"TMA descriptor x_tma .*swizzle 32\): "),
    (Tile("M", "N", f32, tma_rank=3, tma_box=(2, 16)), 16, r"tma_rank=3 splits rows into swizzle spans"),
    (Tile("M", "N", f32, tma_padding=True), 16, r"tma_padding are not supported"),
])
def test_descriptors_the_driver_would_refuse_are_refused_at_lowering(spec, n, message):
    with pytest.raises(SpecError, match=message):
        jax.jit(_copy_kernel(spec)).lower(np.zeros((4, n), np.float32))


def test_a_descriptor_reaching_past_its_buffer_is_refused():
    """The records' own check (the specs make buffers match; this guards
    the reshaped form's extent, whose outermost dim is not its widest)."""
    from jaxptx.jax import _tma

    s = tma_reshaped_dump.specialize(M=48, N=256, G=3)
    assert len(_tma.records(s.tma, "k", [((48, 256), np.dtype(np.uint16))])) == RECORD
    with pytest.raises(SpecError, match="TMA descriptor x_tma spans 24576 bytes but its buffer has 19200"):
        _tma.records(s.tma, "k", [((48, 200), np.dtype(np.uint16))])


def test_a_malformed_tma_attribute_is_an_ffi_error_not_a_crash():
    x = np.zeros((32, 32), np.float32)
    ptx_text = tma_scale.ptx(M=32, N=32)
    views = (memoryview(x.tobytes()),), (memoryview(bytearray(x.nbytes)),)
    launch = ((1, 1, 1), (128, 1, 1), (1, 1, 1), 0)
    message = _cpu.run(999, *views, memoryview(ptx_text.encode()), "tma_scale", launch,
                       tma=(0, 7, 2))
    assert "the tma attribute has 3 entries, not a multiple of 26" in message
    record = [0, 99] + [0] * (RECORD - 2)
    message = _cpu.run(999, *views, memoryview(ptx_text.encode()), "tma_scale", launch,
                       tma=tuple(record * 2))
    assert "unknown code" in message


@pytest.mark.gpu
def test_gpu_tma_descriptors_are_encoded_for_each_call():
    dev = jax.devices("gpu")[0]
    for shape in ((64, 96), (128, 32)):  # new buffers, new addresses, each call
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(jax.jit(tma_scale)(jax.device_put(x, dev))), x * 2 + 1)
    x = RNG.integers(0, 2**16, size=(48, 256), dtype=np.uint16).view(jnp.bfloat16)
    gpu = np.asarray(jax.jit(lambda x: tma_reshaped_dump(x, G=3))(jax.device_put(x, dev)))
    cpu = np.asarray(jax.jit(lambda x: tma_reshaped_dump(x, G=3), backend="cpu")(x))
    np.testing.assert_array_equal(gpu.view(np.uint16), cpu.view(np.uint16))

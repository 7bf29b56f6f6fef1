"""No silent garbage from the JAX path: output bytes a kernel never writes
are an error on the CPU (unless declared padding), in-place outputs update
an input's buffer, and inputs a kernel may write are known to the CUDA
handler, which hands it private copies."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from eight_devices import run_script

import jaxptx.jax
from jaxptx import Tile, kernel, sim
from jaxptx.errors import SpecError
from jaxptx.types import f32, s32

from jax_kernels import affine, clobber
from tma_kernels import tma_scale
from unwritten_kernels import (add_one_and_mark, add_one_in_place, leak_pointer, padded,
                               sentinel_writer, short_grid, short_grid_shardable,
                               tma_store_into_input)

X200 = np.arange(200, dtype=np.float32)


def test_a_grid_that_does_not_cover_its_output_is_an_error():
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"INTERNAL: UnwrittenOutputError: kernel short_grid: output 0 'y' "
                             r"\(float32\[200\]\) has 72 of 200 elements the kernel never wrote, "
                             r"the first at index \(128,\) \(garbage on a GPU\): make the grid "
                             r"cover the whole output, or, if the kernel leaves padding on "
                             r"purpose, declare it with jaxptx\.jax\.allow_unwritten"):
        jax.block_until_ready(jax.jit(short_grid)(X200))
    np.testing.assert_array_equal(jax.jit(short_grid)(X200[:128]), X200[:128] + 1)


def test_the_shardable_variant_unsharded_and_sharded():
    with pytest.raises(jax.errors.JaxRuntimeError, match="UnwrittenOutputError: kernel "
                                                         "short_grid_shardable: output 0 'y'"):
        jax.block_until_ready(jax.jit(short_grid_shardable)(X200))
    run_script("unwritten_script.py")


def test_declared_padding_is_zero_and_not_an_error():
    y = np.asarray(jax.jit(padded)(X200))
    np.testing.assert_array_equal(y[:128], X200[:128] + 1)
    np.testing.assert_array_equal(y[128:], 0)
    assert "allow_unwritten = 1 : i64" in jax.jit(padded).lower(X200).as_text()


def test_bytes_equal_to_a_sentinel_are_not_unwritten():
    y = jax.jit(sentinel_writer)(np.zeros(256, np.int32))
    np.testing.assert_array_equal(y, np.full(256, -0x5A5A5A5B, np.int32))


def test_one_launch_when_stores_or_atomics_wrote_the_sentinel_bytes(monkeypatch):
    """The CPU handler learns which bytes the launch wrote (stores, copies
    and atomics: Device.written): output bytes holding the sentinel that a
    store or an atomic wrote are written, and one launch tells."""
    launches = []
    plain = sim.Device.launch

    def launch(self, *args, **kw):
        launches.append(kw.get("kernel"))
        return plain(self, *args, **kw)
    monkeypatch.setattr(sim.Device, "launch", launch)
    y = jax.jit(sentinel_writer)(np.zeros(256, np.int32))      # every byte 0xA5: the first sentinel
    np.testing.assert_array_equal(y, np.full(256, -0x5A5A5A5B, np.int32))
    assert len(launches) == 1
    y, z = jax.jit(add_one_and_mark)(jnp.arange(256, dtype=jnp.float32))
    np.testing.assert_array_equal(z, np.full(256, -0x5A5A5A5B, np.int32))
    assert len(launches) == 2


def test_an_in_place_output_updates_its_input_buffer():
    x = jnp.arange(256, dtype=jnp.float32)
    f = jax.jit(add_one_in_place)
    np.testing.assert_array_equal(f(x), np.arange(256) + 1)
    np.testing.assert_array_equal(x, np.arange(256))  # not donated: JAX copied it first
    assert re.search(r"output_operand_aliases = \[#stablehlo\.output_operand_alias<"
                     r"output_tuple_indices = \[\], operand_index = 0", f.lower(x).as_text())
    donated = jax.jit(add_one_in_place, donate_argnums=0)
    np.testing.assert_array_equal(donated(jnp.ones(256, jnp.float32)), np.full(256, 2.0))


def test_a_second_launch_starts_from_the_in_place_input_again():
    y, z = jax.jit(add_one_and_mark)(jnp.arange(256, dtype=jnp.float32))
    np.testing.assert_array_equal(y, np.arange(256) + 1)  # once, though it launched twice
    np.testing.assert_array_equal(z, np.full(256, -0x5A5A5A5B, np.int32))


def test_in_place_and_allow_unwritten_check_their_names():
    k = kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=(1, 1, 1),
               block=(32, 1, 1))(lambda x, y: None)
    with pytest.raises(SpecError, match=r"in_place: kernel <lambda> has no output 'z' "
                                        r"\(outputs: y\)"):
        jaxptx.jax.in_place(z="x")(k)
    with pytest.raises(SpecError, match=r"in_place: y='w': kernel <lambda> has no input 'w' "
                                        r"\(inputs: x\)"):
        jaxptx.jax.in_place(y="w")(k)
    with pytest.raises(SpecError, match=r"allow_unwritten: kernel <lambda> has no output 'x'"):
        jaxptx.jax.allow_unwritten("x")(k)
    with pytest.raises(TypeError, match="allow_unwritten: expected a jaxptx kernel"):
        jaxptx.jax.allow_unwritten()(lambda x: x)


def test_an_in_place_output_of_another_type_is_refused():
    k = jaxptx.jax.in_place(y="x")(kernel(
        in_specs=(Tile("N", f32),), out_specs=(Tile("N", s32),), grid=(1, 1, 1),
        block=(32, 1, 1), name="retype")(lambda x, y: None))
    with pytest.raises(SpecError, match=r"kernel retype: in-place output 'y' is int32\[32\] but "
                                        r"its input 'x' is float32\[32\]; an in-place output has "
                                        r"its input's shape and dtype"):
        jax.jit(k).lower(np.zeros(32, np.float32))


def _may_write(f, *args) -> int:
    return int(re.search(r"may_write_inputs = (\d+)", jax.jit(f).lower(*args).as_text()).group(1))


def test_the_inputs_a_kernel_may_write_are_found():
    x = np.zeros(256, np.float32)
    assert _may_write(affine, x) == 0                      # reads x, writes y
    assert _may_write(clobber, x) == 1                     # stores into x
    assert _may_write(leak_pointer, x, x) == 0b11  # an escape: every input
    tile = np.zeros((64, 64), np.float32)
    assert _may_write(tma_scale, tile) == 0                # TMA load from x, TMA store to y
    assert _may_write(tma_store_into_input, tile) == 1     # a TMA store through x's descriptor


def test_inputs_are_never_changed_on_the_cpu():
    x = jnp.asarray(np.arange(256, dtype=np.float32))
    np.testing.assert_array_equal(jax.jit(clobber)(x), np.arange(256))
    np.testing.assert_array_equal(x, np.arange(256))

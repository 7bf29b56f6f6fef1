"""A ``shardable`` kernel under plain jax.jit on inputs sharded over 8 CPU
devices runs per shard."""

from __future__ import annotations

import pytest
from eight_devices import run_script

from jaxptx import Tile, kernel
from jaxptx.errors import SpecError
from jaxptx.types import f32


def test_jit_on_sharded_inputs_launches_per_shard():
    run_script("partition_script.py")


def test_shardable_names_dims_of_the_inputs():
    with pytest.raises(SpecError, match=r"shardable: expected a tuple of symbolic dims of "
                                        r"in_specs \(\['N'\]\), got \('M',\)"):
        kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("M", f32),),
               shardable=("M",))(lambda x, y: None)

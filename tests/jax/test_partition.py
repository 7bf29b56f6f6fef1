"""A ``shardable`` kernel under plain jax.jit on inputs sharded over 8 CPU
devices runs per shard (in a fresh process: the device count is fixed when
jax starts)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from jaxptx import Tile, kernel
from jaxptx.errors import SpecError
from jaxptx.types import f32


def test_jit_on_sharded_inputs_launches_per_shard():
    script = pathlib.Path(__file__).with_name("partition_script.py")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")


def test_shardable_names_dims_of_the_inputs():
    with pytest.raises(SpecError, match=r"shardable: expected a tuple of symbolic dims of "
                                        r"in_specs \(\['N'\]\), got \('M',\)"):
        kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("M", f32),),
               shardable=("M",))(lambda x, y: None)

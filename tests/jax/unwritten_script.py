"""Run by test_unwritten.py in a fresh process with 8 CPU devices: a
shardable kernel whose grid covers the whole output but not each shard's
(N = 1280 over 4 devices: 320 a shard, grid 2, 256 rows) is right unsharded
and an error naming the unwritten elements sharded. Prints OK at the end."""

from __future__ import annotations

import pathlib
import re
import sys

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from unwritten_kernels import short_grid_shardable  # noqa: E402


def main() -> None:
    x = np.arange(1280, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(short_grid_shardable)(x), x + 1)
    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
    sharded = jax.device_put(x, NamedSharding(mesh, P("d")))
    try:
        jax.block_until_ready(jax.jit(short_grid_shardable)(sharded))
    except jax.errors.JaxRuntimeError as e:
        message = str(e)
    else:
        raise AssertionError("a sharded launch left elements unwritten without an error")
    assert re.search(r"UnwrittenOutputError: kernel short_grid_shardable: output 0 'y' "
                     r"\(float32\[320\]\) has 64 of 320 elements the kernel never wrote, the first "
                     r"at index \(256,\)", message), message
    print("OK")


if __name__ == "__main__":
    main()

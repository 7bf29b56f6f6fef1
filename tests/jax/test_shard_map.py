"""Kernels inside jax.shard_map on 8 CPU devices."""

from __future__ import annotations

from eight_devices import run_script


def test_shard_map_on_8_cpu_devices_launches_on_local_shards():
    run_script("shard_map_script.py")

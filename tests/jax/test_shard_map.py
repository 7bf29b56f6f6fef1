"""Kernels inside jax.shard_map on 8 CPU devices (in a fresh process: the
device count is fixed when jax starts)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys


def test_shard_map_on_8_cpu_devices_launches_on_local_shards():
    script = pathlib.Path(__file__).with_name("shard_map_script.py")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")

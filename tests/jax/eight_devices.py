"""Run a script of this directory in a fresh process with 8 CPU devices
(the device count is fixed when jax starts, so it cannot be a test here)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys


def run_script(name: str) -> None:
    """Run ``name`` with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``;
    it must exit cleanly and print OK last."""
    script = pathlib.Path(__file__).with_name(name)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")

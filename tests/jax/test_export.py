"""jax.export: a function calling a jaxptx kernel exports for CUDA (and the
CPU), and the artifact runs in a fresh process that never traced it."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxptx

from jax_kernels import affine

X = np.arange(256, dtype=np.float32)
REPO = pathlib.Path(__file__).resolve().parents[2]


def _f(x):
    return jnp.sin(affine(x))


def test_export_without_the_disabled_check_is_refused():
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility"):
        export.export(jax.jit(_f), platforms=["cuda"])(X)


def test_export_for_cuda_carries_the_launch_and_its_ptx():
    exp = export.export(jax.jit(_f), platforms=["cuda"],
                        disabled_checks=jaxptx.jax.disabled_checks())(X)
    text = exp.mlir_module()
    assert re.search(r"stablehlo\.custom_call @jaxptx_launch_v2\(.*entry = \"affine\", .*"
                     r"launch = \{.*grid = dense<\[2, 1, 1\]>.*\}.*ptx = \"\.version 8\.5", text)
    back = export.deserialize(exp.serialize())
    assert back.platforms == ("cuda",) and back.mlir_module() == text


def test_an_exported_artifact_runs_in_a_fresh_process(tmp_path):
    exp = export.export(jax.jit(_f), platforms=["cpu", "cuda"],
                        disabled_checks=jaxptx.jax.disabled_checks())(X)
    path = tmp_path / "f.jax"
    path.write_bytes(exp.serialize())
    code = ("import sys, numpy as np, jaxptx.jax; from jax import export; "
            "jaxptx.jax.register_ffi_targets(); "
            "f = export.deserialize(open(sys.argv[1], 'rb').read()); "
            "x = np.arange(256, dtype=np.float32); "
            "np.testing.assert_allclose(f.call(x), np.sin(x * 2 + 1), rtol=1e-6); print('OK')")
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert run.stdout.strip() == "OK", run.stderr

"""Lowering kernels with peers for CUDA on several CPU devices, for the CUDA
handler's peer tests (test_cuda_peers.py, test_cuda_multimem.py).

jax fixes its device count when it starts, so the calls are lowered in a
subprocess with 4 CPU devices: :func:`lowered_calls` runs :data:`PRELUDE`
(imports and ``lower(f, n, shape)``, the custom call of ``f`` under
``jax.shard_map`` over an ``n``-device axis ``"d"``) followed by a body that
fills ``calls``, and returns those calls, each given a kernel id of its own.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
from typing import Any

JAX_TESTS = pathlib.Path(__file__).resolve().parent.parent / "jax"

PRELUDE = r"""
import pickle, sys
sys.path.insert(0, sys.argv[2])
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from jaxptx.runtime import cuda_calls

def lower(f, n, shape):
    mesh = Mesh(np.array(jax.devices()[:n]), ("d",), axis_types=(AxisType.Explicit,))
    a = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, P("d")))
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    (call,) = cuda_calls(g.trace(a).lower(lowering_platforms=("cuda",)))
    return call

calls = {}
"""


def lowered_calls(body: str, out: pathlib.Path, tag: str) -> dict[Any, Any]:
    """The calls ``body`` puts in ``calls`` (run after :data:`PRELUDE`, with
    tests/jax on the path), each with ``// run by {tag}`` added to its PTX: a
    GPU test in this process may have registered a cubin under the kernel's
    own id, and the stand-in runs PTX only."""
    script = PRELUDE + body + '\nwith open(sys.argv[1], "wb") as f:\n    pickle.dump(calls, f)\n'
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", script, str(out), str(JAX_TESTS)], check=False,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    with open(out, "rb") as f:
        lowered = pickle.load(f)
    return {key: c.replace(ptx=c["ptx"] + f"// run by {tag}\n".encode()) for key, c in lowered.items()}

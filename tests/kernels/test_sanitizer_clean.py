"""Every op of the kernel library, every variant, runs clean under the
sanitizer (``jaxptx.sim.checking()``: races by happens-before, async data
used early, missing proxy fences, uninitialised reads) and stays correct."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import kernels, sim

ARCHES = ("sm_80", "sm_90a", "sm_100a")


def _rand(shape, seed=0, dtype=jnp.bfloat16):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _f64(x):
    return np.asarray(x, np.float64)


CASES = {
    "rms_norm": (lambda a: kernels.rms_norm(_rand((3, 1000)), _rand((1000,), 1), arch=a), None),
    "softmax": (lambda a: kernels.softmax(_rand((3, 4096)), arch=a), None),
    "matmul": (lambda a: kernels.matmul(_rand((200, 264)), _rand((264, 136), 1), arch=a),
               lambda: _f64(_rand((200, 264))) @ _f64(_rand((264, 136), 1))),
    "grouped_matmul": (lambda a: kernels.grouped_matmul(_rand((100, 64)), _rand((3, 64, 40), 1),
                                                        jnp.array([30, 0, 50], jnp.int32), arch=a), None),
    "flash_attention": (lambda a: kernels.flash_attention(_rand((1, 130, 2, 64)), _rand((1, 130, 2, 64), 1),
                                                          _rand((1, 130, 2, 64), 2), causal=True, arch=a),
                        None),
}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op", list(CASES))
def test_clean_under_the_sanitizer(op, arch) -> None:
    run, reference = CASES[op]
    with sim.checking("all"):
        out = jax.block_until_ready(run(arch))
    if reference is not None:
        np.testing.assert_allclose(_f64(out), reference(), rtol=1e-4, atol=1e-3)

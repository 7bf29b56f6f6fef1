"""Every op of the kernel library, every variant, runs clean under the
sanitizer (``jaxptx.sim.checking()``: races by happens-before, async data
used early, missing proxy fences, uninitialised reads) and stays correct:
each output is checked against a float64 numpy reference written here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_reference import reference as attention_reference

from jaxptx import kernels, sim

ARCHES = ("sm_80", "sm_90a", "sm_100a")


def _rand(shape, seed=0, dtype=jnp.bfloat16):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _f64(x):
    return np.asarray(x, np.float64)


def _rms_norm_reference() -> np.ndarray:
    x, w = _f64(_rand((3, 1000))), _f64(_rand((1000,), 1))
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


def _softmax_reference() -> np.ndarray:
    x = _f64(_rand((3, 4096)))
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _grouped_matmul_reference() -> np.ndarray:
    lhs, rhs = _f64(_rand((100, 64))), _f64(_rand((3, 64, 40), 1))
    out = np.zeros((100, 40))
    out[0:30] = lhs[0:30] @ rhs[0]          # group 1 is empty; rows 80.. belong to no group
    out[30:80] = lhs[30:80] @ rhs[2]
    return out


# op -> (the call, its float64 reference, rtol/atol). A bf16 output has 8
# significant bits (a relative error up to 2^-9 per rounding, and the norms
# round twice); f32 outputs differ from float64 by f32 accumulation only.
BF16 = {"rtol": 2 ** -7, "atol": 1e-5}
CASES = {
    "rms_norm": (lambda a: kernels.rms_norm(_rand((3, 1000)), _rand((1000,), 1), arch=a),
                 _rms_norm_reference, BF16),
    "softmax": (lambda a: kernels.softmax(_rand((3, 4096)), arch=a), _softmax_reference, BF16),
    "matmul": (lambda a: kernels.matmul(_rand((200, 264)), _rand((264, 136), 1), arch=a),
               lambda: _f64(_rand((200, 264))) @ _f64(_rand((264, 136), 1)), {"rtol": 1e-4, "atol": 1e-3}),
    "grouped_matmul": (lambda a: kernels.grouped_matmul(_rand((100, 64)), _rand((3, 64, 40), 1),
                                                        jnp.array([30, 0, 50], jnp.int32), arch=a),
                       _grouped_matmul_reference, {"rtol": 1e-4, "atol": 1e-4}),
    # P is rounded to bf16 before P·V as well as o: the attention tests' tolerance
    "flash_attention": (lambda a: kernels.flash_attention(_rand((1, 130, 2, 64)), _rand((1, 130, 2, 64), 1),
                                                          _rand((1, 130, 2, 64), 2), causal=True, arch=a),
                        lambda: attention_reference(_rand((1, 130, 2, 64)), _rand((1, 130, 2, 64), 1),
                                                    _rand((1, 130, 2, 64), 2), True, 1 / 8)[0],
                        {"rtol": 1.5e-2, "atol": 1.5e-2}),
}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op", list(CASES))
def test_clean_under_the_sanitizer(op, arch) -> None:
    run, reference, tolerance = CASES[op]
    with sim.checking("all"):
        out = jax.block_until_ready(run(arch))
    want = reference()
    assert out.shape == want.shape
    np.testing.assert_allclose(_f64(out), want, **tolerance)

"""One exception class for bad arguments across jaxptx.kernels: every op
refuses a wrong dtype, shape or value with a :class:`jaxptx.errors.SpecError`,
which is both a ``TypeError`` and a ``ValueError``, naming the op and the
argument."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import kernels
from jaxptx.errors import PtxError, SpecError
from jaxptx.kernels._attention_sm90 import attention_sm90
from jaxptx.kernels._matmul_sm100 import matmul_sm100

F32 = np.ones((2, 8), np.float32)
W = np.ones(8, np.float32)
BF16 = jnp.ones((64, 64), jnp.bfloat16)
QKV = jnp.zeros((1, 64, 1, 64), jnp.bfloat16)

# (call, message): dtype errors first (once TypeError), then shapes and values (ValueError).
CASES = [
    (lambda: kernels.rms_norm(F32.astype(np.int32), W),
     r"rms_norm: x must be float32, bfloat16 or float16, got int32"),
    (lambda: kernels.layer_norm(F32, W, W.astype(np.float16)), r"layer_norm: b must have x's dtype"),
    (lambda: kernels.softmax(F32.astype(np.float64)), r"softmax: x must be float32"),
    (lambda: kernels.swiglu(F32, F32.astype(np.float16)), r"swiglu: up must have gate's dtype float32"),
    (lambda: kernels.rms_norm(F32, W, eps=jnp.ones(2)), r"rms_norm: eps must be a Python float"),
    (lambda: kernels.matmul(F32, F32.T), r"matmul a: expected bfloat16 or float16, got float32"),
    (lambda: kernels.flash_attention(QKV.astype(jnp.float32), QKV, QKV),
     r"flash_attention: q: expected dtype bfloat16 or float16, got float32"),
    (lambda: kernels.grouped_matmul(BF16, BF16[None], jnp.ones(1, jnp.float32)),
     r"grouped_matmul: group_sizes: expected an integer dtype \(int32\), got float32"),
    (lambda: attention_sm90(QKV, QKV.astype(jnp.float16), QKV, causal=False, scale=0.1),
     r"attention_sm90: q, k, v must all be bf16 or all f16"),
    (lambda: matmul_sm100(BF16[None], BF16[None].astype(jnp.float16)),
     r"matmul_sm100: a and b must both be bfloat16 or both float16"),
    (lambda: kernels.rms_norm(F32, np.ones(7, np.float32)), r"rms_norm: w must have shape \(8,\)"),
    (lambda: kernels.softmax(F32, axis=2), r"softmax: axis must be an int in \[-2, 2\)"),
    (lambda: kernels.flash_attention(QKV, QKV, QKV, scale=-1.0),
     r"flash_attention: scale: expected a positive finite Python number"),
    (lambda: kernels.grouped_matmul(BF16, BF16[None], jnp.asarray([65], jnp.int32)),
     r"grouped_matmul: group_sizes: expected a sum of at most M = 64"),
    (lambda: matmul_sm100(BF16[None], BF16[None], cta_group=3), r"matmul_sm100: cta_group must be 1 or 2"),
]


@pytest.mark.parametrize("call,message", CASES)
def test_every_bad_argument_is_a_spec_error_both_builtins_catch(call, message):
    with pytest.raises(SpecError, match=message) as info:
        call()
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, PtxError)
    for builtin in (TypeError, ValueError):
        with pytest.raises(builtin, match=message):
            call()

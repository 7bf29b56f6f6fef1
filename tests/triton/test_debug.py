"""``debug=True``: Triton's device assertions run on the emulator (its PTX
declares ``__assertfail`` with ``.noreturn`` and the messages as
initialised ``.global`` byte arrays)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("triton")

import jaxptx.triton as jt  # noqa: E402
from triton_kernels import checked_copy_kernel  # noqa: E402


def _copy(x, limit):
    return jt.triton_call(x, kernel=checked_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(2,), n=x.shape[0], limit=limit, BLOCK=32, debug=True)


def test_a_passing_assertion_runs_and_a_failing_one_stops_the_kernel_with_its_message():
    """Every lane fails here. (When only some lanes of a warp fail, the
    others reach Triton's next ``bar.sync`` first on the emulator's default
    schedule, which reports that barrier's divergence instead: still an
    error, but not the assertion's.)"""
    x = jnp.arange(40, dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(_copy(x, 100.0)), np.arange(40, dtype=np.float32))
    with pytest.raises(Exception, match=r"device assertion failed: .*triton_kernels\.py:\d+: "
                                        r"\w+: Assertion `x is below the limit` failed, "
                                        r"thread \(0, 0, 0\) of CTA \(0, 0, 0\)"):
        np.asarray(_copy(x, -1.0))

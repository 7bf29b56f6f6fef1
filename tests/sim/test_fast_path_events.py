"""The fast paths tell an access observer what the general paths tell it:
the same buffers, offsets, threads, widths, kinds and stored values, in the
same order, for the library GEMMs' TMA loads and stores, wgmma and
loads/stores of every width (``jaxptx.sim.core.fastpaths``)."""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxptx import kernels, sim
from jaxptx.sim.core import fastpaths


class _Accesses(sim.Observer):
    """Every access event, as a digest of its arrays (buffers by size)."""

    def __init__(self, log: list) -> None:
        self.log = log

    def access(self, buf, off, threads, width, kind, values=None) -> None:
        digest = hashlib.sha1()
        for a in (np.asarray(off, np.int64), np.asarray(threads, np.int64)):
            digest.update(np.ascontiguousarray(a).tobytes())
        if values is not None:
            digest.update(np.ascontiguousarray(values).tobytes())
        self.log.append((len(buf), width, kind, digest.hexdigest()))


def _events(arch: str) -> tuple[list, np.ndarray]:
    log: list = []
    a = jnp.asarray(np.random.default_rng(1).standard_normal((128, 192)), jnp.bfloat16)
    b = jnp.asarray(np.random.default_rng(2).standard_normal((192, 256)), jnp.bfloat16)
    with sim.observing(lambda m: _Accesses(log)):
        out = np.asarray(jax.jit(lambda a, b: kernels.matmul(a, b, arch=arch))(a, b))
    return log, out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_the_library_gemm_tells_the_same_accesses_on_both_paths(arch: str) -> None:
    fast, out_fast = _events(arch)
    with fastpaths.reference():
        general, out_general = _events(arch)
    np.testing.assert_array_equal(out_fast, out_general)
    assert len(fast) == len(general) and fast == general
    assert {kind for _, _, kind, _ in fast} >= {"load", "store"}

"""CUTLASS's CuTe DSL 2-CTA Blackwell GEMM on the emulator (issue #27).

The PTX is what ``nvidia-cutlass-dsl`` makes of CUTLASS's
``examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm.py`` for sm_100a; it is
not kept in the repository (``tests/data/cute_dsl/README.md`` says why, how to generate it with
``tests/data/cute_dsl/generate.py``, and the launch contract), and these tests skip where it is
absent: ``tcgen05.mma.cta_group::2`` over CTA pairs, TMA loads
with ``.cta_group::2`` signalling the even CTA's mbarrier, ``tcgen05.commit`` multicast to both CTAs
of the pair, a six-stage pipeline and a TMA store of C; the (2, 2) cluster build also multicasts A.
It is launched here the way the example's
host code launches it: seven byte-array parameters (the TiledMMA's runtime fields, three tensor maps
and three coordinate-tensor shapes), 128 threads a CTA, 180352 bytes of dynamic shared memory.

K = 512 makes eight k-tiles through the six pipeline stages, so stages are refilled after the
MMA warp's ``tcgen05.commit`` frees them. The kernel reads its ``tcgen05.ld`` results with no
``tcgen05.wait::ld`` (the example never calls ``fence_view_async_tmem_load``): the sanitizer's
findings on it are exactly those reads, and with the waits put in, it finds nothing.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re

import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim

DATA = pathlib.Path(os.environ.get("JAXPTX_CUTE_DSL_DIR")
                    or pathlib.Path(__file__).resolve().parents[1] / "data" / "cute_dsl" / "build")
BUILDS = ("gemm_2cta_sm100a.ptx", "gemm_2cta_mcast_sm100a.ptx")
pytestmark = pytest.mark.skipif(not all((DATA / name).is_file() for name in BUILDS),
                                reason=f"no CuTe DSL PTX in {DATA}: tests/data/cute_dsl/README.md says how "
                                       "to generate it")
SMEM = 180352           # 128 (mbarriers, TMEM address) + 2 x 16 KiB C + 6 x 16 KiB A + 6 x 8 KiB B
TILE_M, TILE_N, TILE_K = 128, 128, 64     # one CTA's share of the 256 x 128 x 64 pair tile


@functools.cache
def _ptx(name: str) -> str:
    return (DATA / name).read_text()


def _gemm(name: str, cluster: tuple[int, int], m: int, n: int, k: int, l: int = 1, ptx: str | None = None,
          **options):
    """Run the kernel on bf16 A (l, m, k), B (l, n, k); return C (l, m, n), its float64 reference and
    what the launch returned."""
    rng = np.random.default_rng(27)
    a = rng.standard_normal((l, m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((l, n, k)).astype(ml_dtypes.bfloat16)
    c = np.full((l, m, n), np.nan, np.float32)
    dev = sim.Device(arch="sm_100a")
    pa, pb, pc = dev.to_device(a), dev.to_device(b), dev.to_device(c)
    # The A box is one CTA's 128 rows, split across the N pair when A is multicast (cluster_n = 2).
    a_rows = TILE_M // cluster[1]
    params = [
        bytes(64),          # accumulate, negate A, negate B, disable-output-lane words: all 0
        sim.tensor_map(pa, (l, m, k), "bf16", box=(1, a_rows, TILE_K), swizzle=128),
        np.array([m, k, l], np.int32).tobytes(),
        sim.tensor_map(pb, (l, n, k), "bf16", box=(1, TILE_N // 2, TILE_K), swizzle=128),
        np.array([n, k, l], np.int32).tobytes(),
        sim.tensor_map(pc, (l, m, n), np.float32, box=(1, TILE_M, 32), swizzle=128),
        np.array([m, n, l], np.int32).tobytes(),
    ]
    up = lambda x, q: -(-x // q) * q
    grid = (up(-(-m // TILE_M), cluster[0]), up(-(-n // TILE_N), cluster[1]), l)
    result = dev.launch(ptx or _ptx(name), params, grid=grid, block=(128, 1, 1), cluster=(*cluster, 1),
                        smem=SMEM, **options)
    out = dev.from_device(pc, like=c)
    want = np.einsum("lmk,lnk->lmn", a.astype(np.float64), b.astype(np.float64))
    dev.close()
    return out, want, result


def _close(out: np.ndarray, want: np.ndarray) -> None:
    # bf16 products are exact in f32; only the order of the f32 sums differs
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def _with_wait_ld(ptx: str) -> str:
    """The kernel with ``tcgen05.wait::ld`` after each ``tcgen05.ld``."""
    return re.sub(r"^(\s*tcgen05\.ld\.[^\n]*\n)", r"\1\ttcgen05.wait::ld.sync.aligned;\n", ptx, flags=re.MULTILINE)


def test_the_ptx_is_the_2cta_kernel():
    text = _ptx("gemm_2cta_sm100a.ptx")
    assert ".target sm_100a" in text
    assert text.count("tcgen05.mma.cta_group::2.kind::f16") == 4
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in text
    assert "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster" in text
    assert "tcgen05.wait::ld" not in text
    assert ".multicast::cluster.L2::cache_hint.cta_group::2" in _ptx("gemm_2cta_mcast_sm100a.ptx")


def test_default_schedule():
    out, want, _ = _gemm("gemm_2cta_sm100a.ptx", (2, 1), 256, 256, 512)
    _close(out, want)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_schedule(seed):
    out, want, _ = _gemm("gemm_2cta_sm100a.ptx", (2, 1), 256, 256, 512, schedule="random", seed=seed)
    _close(out, want)


def test_sanitizer_finds_only_the_missing_wait_ld():
    text = _ptx("gemm_2cta_sm100a.ptx")
    loads = {i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("tcgen05.ld.")}
    assert len(loads) == 4
    out, want, findings = _gemm("gemm_2cta_sm100a.ptx", (2, 1), 256, 256, 128, check="all")
    _close(out, want)
    assert findings and all(f.kind == "async" and "no tcgen05.wait::ld" in f.message for f in findings)
    named = {int(x) for f in findings for x in re.findall(r"before the tcgen05\.ld at PTX line (\d+)", f.message)}
    assert named == loads


def test_sanitizer_clean_with_wait_ld():
    out, want, _ = _gemm("gemm_2cta_sm100a.ptx", (2, 1), 256, 256, 512, check=True,
                         ptx=_with_wait_ld(_ptx("gemm_2cta_sm100a.ptx")))
    _close(out, want)


def test_multicast_a_cluster_2x2():
    """Cluster (2, 2): A is multicast to both CTAs of each N pair, with ``.cta_group::2``."""
    out, want, _ = _gemm("gemm_2cta_mcast_sm100a.ptx", (2, 2), 256, 256, 512)
    _close(out, want)


def test_multicast_sanitizer_clean_with_wait_ld():
    """Each MMA leader's commit arrives on the stage's empty mbarrier in all four CTAs (count 2: one
    arrive per leader), so every producer waits for both pairs' MMAs before refilling a stage."""
    out, want, _ = _gemm("gemm_2cta_mcast_sm100a.ptx", (2, 2), 256, 256, 512, check=True,
                         ptx=_with_wait_ld(_ptx("gemm_2cta_mcast_sm100a.ptx")))
    _close(out, want)

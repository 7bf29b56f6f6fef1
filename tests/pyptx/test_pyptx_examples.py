"""pyptx's own examples, with only their imports changed to ``jaxptx.pyptx``.

Skipped when ``pyptx`` is not installed (the ``bench`` extra installs it).
Each case loads the example module from the installed pyptx package with
its imports rewritten (``_pyptx_loader.py``), builds the kernel at the first
size the example itself runs, and checks: it traces, ptxas accepts it
(0 spills), and where the example has a reference the emulator's output
matches it. ``EXAMPLES`` lists every example module and what is expected
of it today (the table in ``docs/coming_from_pyptx.md``).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import _pyptx_loader as _examples  # noqa: E402

pytestmark = pytest.mark.skipif(not _examples.install(), reason="pyptx is not installed")

# module -> (builder, args (the example's first size), reference, (atol, rtol))
# A reference is the example's own function name; "grouped" reshapes to 3-d.
RUNS: dict[str, tuple[str, tuple, str | None, tuple[float, float]]] = {
    "ampere.rms_norm": ("build_rms_norm", (4, 64), "_pyptx_examples.hopper.rms_norm:rms_norm_ref", (1e-4, 0.001)),
    "ampere.softmax": ("build_softmax", (4, 64), "_pyptx_examples.hopper.softmax:softmax_ref", (1e-5, 0.0001)),
    "ampere.layer_norm": ("build_layer_norm", (4, 64), "_pyptx_examples.hopper.layer_norm:layer_norm_ref", (1e-4, 0.001)),
    "ampere.swiglu": ("build_fused_silu_mul", (4, 512), "_pyptx_examples.hopper.swiglu:fused_silu_mul_ref", (1e-5, 0.0001)),
    "ampere.gemm": ("build_gemm", (16, 8, 16), "gemm_ref", (1e-4, 0.001)),
    "ampere.gemm_pipelined": ("build_gemm_pipelined", (64, 64, 64), "gemm_ref", (1e-4, 0.001)),
    "ampere.gemm_highperf_ampere": ("build_gemm_highperf", (128, 128, 256), "gemm_ref", (1e-4, 0.001)),
    "hopper.rms_norm": ("build_rms_norm", (4, 64), "rms_norm_ref", (1e-4, 0.001)),
    "hopper.softmax": ("build_softmax", (4, 64), "softmax_ref", (1e-5, 0.0001)),
    "hopper.layer_norm": ("build_layer_norm", (4, 64), "layer_norm_ref", (1e-4, 0.001)),
    "hopper.swiglu": ("build_fused_silu_mul", (4, 512), "fused_silu_mul_ref", (1e-5, 0.0001)),
    "hopper.grouped_gemm": ("build_grouped_gemm", (1, 64, 8, 32), "grouped", (1e-4, 0.001)),
    "blackwell.rms_norm": ("build_rms_norm", (4, 64), "_pyptx_examples.hopper.rms_norm:rms_norm_ref", (1e-4, 0.001)),
    "blackwell.layer_norm": ("build_layer_norm", (4, 64), "_pyptx_examples.hopper.layer_norm:layer_norm_ref", (1e-4, 0.001)),
    "blackwell.swiglu": ("build_fused_silu_mul", (4, 512), "_pyptx_examples.hopper.swiglu:fused_silu_mul_ref", (1e-5, 0.0001)),
    "blackwell.grouped_gemm": ("build_grouped_gemm", (1, 128, 64, 64), "grouped_nt", (1e-4, 0.001)),
    "blackwell.gemm_highperf_blackwell": ("build_gemm", (128, 256, 64), "nt", (1e-4, 0.001)),
    # the 2-SM GEMM: a .cta_group::2 TMA load into .shared::cta signalling the
    # even CTA's mbarrier (shared addresses carry the CTA's cluster rank)
    "blackwell.gemm_highperf_blackwell/2sm": ("build_gemm_2sm", (256, 256, 64), "nt", (1e-4, 1e-3)),
    "blackwell.gemm_experimental_blackwell/pallas": ("build_gemm_pallas_experimental", (128, 256, 64), "nt",
                                                     (1e-4, 1e-3)),
    "hopper.experimental.flash_attention_hopper": ("build_flash_attention_hopper", (128, 128, 16), "attn",
                                                   (5e-2, 1e-2)),
    "hopper.experimental.flash_attention_parallel": ("build_flash_attention_parallel", (64, 64), "attn",
                                                     (5e-2, 1e-2)),
    "hopper.experimental.flash_attention_wgmma_kloop": ("build_flash_attention_kloop", (16,), "attn",
                                                        (5e-2, 1e-2)),
}

# The example's own barrier protocol deadlocks on the emulator (it re-inits
# an mbarrier a tcgen05.commit may still arrive on, and waits on parity 1 of
# a fresh barrier, which passes at once): traced and assembled, not matched.
# build_gemm_persistent: warps 4-7 read tensor-memory lanes 128-159
# ((tid << 16) & 0x3E00000 with tid >= 128), outside the lane quarter a warp
# may access.
XFAIL = {
    "blackwell.gemm_experimental_blackwell": ("build_gemm_no_tma_debug", (128, 256, 64), "nt", (1e-4, 1e-3)),
    "blackwell.gemm_highperf_blackwell/persistent": ("build_gemm_persistent", (128, 256, 64), "nt",
                                                     (1e-4, 1e-3)),
}

# Examples whose kernels print values for a person to read (no reference):
# traced and assembled only. (module, builder, keyword arguments)
TRACE_ONLY: list[tuple[str, str, dict]] = [
    ("blackwell.tcgen05_smoke", "build_alloc_only", {}),
    ("blackwell.tcgen05_smoke", "build_ld_only", {}),
    ("blackwell.tcgen05_smoke", "build_mma_only", {}),
    ("blackwell.tcgen05_roundtrip", "build", {}),
    ("blackwell.tcgen05_mma_probe", "build", {}),
    ("blackwell.tcgen05_accum_probe", "build", {}),
    ("blackwell.tcgen05_ld_register_probe", "build", {}),
    ("blackwell.tcgen05_ld_phase_probe", "build", {"use_shift": False}),
    ("blackwell.tcgen05_ld_phase_probe", "build", {"use_shift": True}),
]

# ptxas spills these (255 registers); recorded, not failed.
SPILLS = {"blackwell.gemm_experimental_blackwell", "blackwell.tcgen05_ld_phase_probe"}



def _inputs(kernel, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for spec in kernel.in_specs:
        shape = tuple(int(d) for d in spec.shape)
        x = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        out.append(x.astype(spec.dtype.np_dtype))
    return out


def _reference(module, name: str, xs: list[np.ndarray], args: tuple) -> np.ndarray:
    import importlib

    import jax.numpy as jnp
    if name == "attn":
        q, kt, v = (x.astype(np.float64) for x in xs)
        s = q @ kt / np.sqrt(q.shape[1])
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v
    if name == "nt":
        return xs[0].astype(np.float64) @ xs[1].astype(np.float64).T
    if name == "grouped_nt":
        G, M, N, K = args
        a3 = xs[0].astype(np.float64).reshape(G, M, K)
        b3 = xs[1].astype(np.float64).reshape(G, N, K)
        return np.einsum("gmk,gnk->gmn", a3, b3).reshape(G * M, N)
    if name == "grouped":
        G, M, N, K = args
        a3 = xs[0].astype(np.float64).reshape(G, M, K)
        b3 = xs[1].astype(np.float64).reshape(G, K, N)
        return np.einsum("gmk,gkn->gmn", a3, b3).reshape(G * M, N)
    if ":" in name:
        mod, fn = name.split(":")
        ref = getattr(importlib.import_module(mod), fn)
    else:
        ref = getattr(module, name)
    return np.asarray(ref(*[jnp.asarray(x) for x in xs]), dtype=np.float64)


@pytest.mark.parametrize("name", sorted(RUNS) + [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="see XFAIL")) for n in XFAIL])
def test_example_traces_assembles_matches(name: str) -> None:
    import jax
    builder, args, ref, (atol, rtol) = RUNS.get(name) or XFAIL[name]
    module = _examples.load(name.split("/")[0])
    k = getattr(module, builder)(*args)
    res = k.resources()
    assert name in SPILLS or (res.spill_stores == 0 and res.spill_loads == 0), res
    xs = _inputs(k, np.random.default_rng(0))
    got = np.asarray(jax.jit(k)(*xs), dtype=np.float64)     # the CPU emulator under jax.jit
    want = _reference(module, ref, xs, args)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,builder,kwargs", TRACE_ONLY, ids=[f"{m}.{b}{sorted(k.values())}"
                                                                 for m, b, k in TRACE_ONLY])
def test_example_traces_and_assembles(name: str, builder: str, kwargs: dict) -> None:
    k = getattr(_examples.load(name), builder)(**kwargs)
    res = k.resources()
    assert name in SPILLS or (res.spill_stores == 0 and res.spill_loads == 0), res


def _hopper_highperf(size: int, k: int) -> tuple[float, float]:
    """hopper.gemm_highperf_hopper at M = N = ``size``, K = ``k``, called as
    the example calls it (A, B and its Hilbert schedule; M, N, K raw params
    from the shapes); returns (max error, max |reference|) against the
    example's reference computed in float64 and rounded to bf16."""
    import jax
    import ml_dtypes

    module = _examples.load("hopper.gemm_highperf_hopper")
    rng = np.random.default_rng(size + k)
    a = (rng.standard_normal((size, k)) * 0.3).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal((size, k)) * 0.3).astype(ml_dtypes.bfloat16)
    tiles = size // (module.BM * module.CLUSTER_M), size // module.BN
    sched = module.create_hilbert_schedule(*tiles).astype(np.uint32)
    got = np.asarray(jax.jit(module.gemm_warp_specialized)(a, b, sched), dtype=np.float64)
    want = (a.astype(np.float64) @ b.astype(np.float64).T).T      # C is stored (N, M)
    want = want.astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    return float(np.abs(got - want).max()), float(np.abs(want).max())


def test_hopper_gemm_highperf_assembles() -> None:
    """Warp-specialised, 2-CTA clusters, multicast B, padded TMA store of C:
    ptxas takes it for sm_90a without spills (at the example's 4096)."""
    k = _examples.load("hopper.gemm_highperf_hopper").gemm_warp_specialized
    res = k.resources(M=4096, N=4096, K=4096)
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    text = k.ptx(M=4096, N=4096, K=4096)
    assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in text
    assert ".multicast::cluster" in text and "mapa.shared::cluster.u32" in text


def test_hopper_gemm_highperf_matches_numpy() -> None:
    """The smallest size the example supports (one 256 x 256 cluster tile:
    M, N multiples of BM * CLUSTER_M = BN = 256), K = 256: four K blocks on
    three stages, so the ring wraps and the phase flips."""
    _hopper_highperf(256, 256)


@pytest.mark.slow
def test_hopper_gemm_highperf_matches_numpy_1024() -> None:
    """16 tiles over the 64 clusters of the fixed 128-CTA grid."""
    _hopper_highperf(1024, 1024)


def test_instruction_forms_against_pyptx() -> None:
    """pyptx's own PTX for two examples and ours: ptxas takes both, and the
    instruction forms differ only where docs/coming_from_pyptx.md says why."""
    from compare_pyptx import compare
    r = compare("hopper.rms_norm", "build_rms_norm", (4, 64))
    assert r["pyptx_ptxas"] is True
    # warp reductions shfl the f32 register directly (pyptx: mov.b32 in and out);
    # a constant 2-d shared index folds into the address (pyptx: mov/add/shl);
    # if_ is one branch (pyptx: two); global_ptrs copies x.ptr (mov.b64).
    assert set(r["diff"]) <= {"mov.b32", "add.u32", "shl.b32", "bra", "mov.b64", "mov.u32"}, r["diff"]
    assert r["ours"] < r["pyptx"]
    g = compare("hopper.grouped_gemm", "build_grouped_gemm", (1, 64, 8, 32))
    assert g["pyptx_ptxas"] is True
    # wgmma descriptors on the u32 shared address (pyptx: u64); TMA descriptors
    # by value (.param .b8 [128], mov + cvta.param; pyptx: a .u64 pointer,
    # ld.param); `.tile` spelled out; special registers read with a mov.
    tma = "cp.async.bulk.tensor.2d.shared::cluster.global"
    assert set(g["diff"]) <= {"and.b32", "and.b64", "bra", "cvt.u64.u32", "cvta.param.u64", "ld.param.u64",
                              "mov.b64", "mov.u32", "shr.u32", "shr.u64",
                              f"{tma}.mbarrier::complete_tx::bytes",
                              f"{tma}.tile.mbarrier::complete_tx::bytes"}, g["diff"]

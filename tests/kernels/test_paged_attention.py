"""``jaxptx.kernels.paged_attention`` (``_paged_sm80``, ``_paged_combine``): the
emulator against a float64 numpy reference at ragged lengths over shuffled
page tables (with NaN everywhere a sequence does not own), GQA ratios 1 to
24, the split-K path; the sanitizer; ``jit`` and ``vmap`` (one launch per
kernel); ptxas (0 spills) per variant; the CUDA lowering's custom calls;
argument errors."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxptx import sim
from jaxptx.errors import SpecError
from jaxptx.jax import kernels_in
from jaxptx.kernels import paged_attention
from jaxptx.kernels._paged_combine import combine_kernel
from jaxptx.kernels._paged_sm80 import SPLIT_TOKENS, paged_kernel
from jaxptx.types import bf16, f16

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
TOL = {"bf16": 1.5e-2, "f16": 3e-3}     # o and P are rounded to 16 bits


def reference(q, k_pages, v_pages, block_tables, lengths, scale: float) -> np.ndarray:
    """Decode attention in float64: gather each sequence's pages by its
    table, softmax over its first ``lengths[b]`` tokens; length 0 gives 0."""
    q, k_pages, v_pages = (np.asarray(x, np.float64) for x in (q, k_pages, v_pages))
    B, Nq, D = q.shape
    _, ps, Nkv, _ = k_pages.shape
    out = np.zeros((B, Nq, D))
    for b, n in enumerate(np.asarray(lengths)):
        if n == 0:
            continue
        pages = np.asarray(block_tables)[b, :-(-n // ps)]
        k = k_pages[pages].reshape(-1, Nkv, D)[:n]           # (n, Nkv, D)
        v = v_pages[pages].reshape(-1, Nkv, D)[:n]
        kv_head = np.arange(Nq) // (Nq // Nkv)
        s = np.einsum("hd,thd->ht", q[b], k[:, kv_head]) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        out[b] = np.einsum("ht,thd->hd", p / p.sum(-1, keepdims=True), v[:, kv_head])
    return out


def problem(lengths, Nq: int, Nkv: int, D: int, ps: int, dtype: str = "bf16", max_pages: int | None = None,
            seed: int = 0):
    """q, k_pages, v_pages, block_tables, lengths: each sequence's pages drawn
    from a shuffled pool; every page row no sequence owns (unused pages, rows
    past a length) is NaN, and table entries past a sequence's pages are
    out of range (-1, P + 7), so reading any of them shows in the output."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int32)
    need = [-(-int(n) // ps) for n in lengths]
    max_pages = max_pages or max(max(need), 1)
    P = sum(need) + 3
    order = rng.permutation(P)
    k_pages = np.full((P, ps, Nkv, D), np.nan, np.float32)
    v_pages = np.full((P, ps, Nkv, D), np.nan, np.float32)
    tables = np.where(rng.random((len(lengths), max_pages)) < 0.5, -1, P + 7).astype(np.int32)
    used = 0
    for b, (n, m) in enumerate(zip(lengths, need)):
        pages = order[used:used + m]
        used += m
        tables[b, :m] = pages
        for t in range(n):
            k_pages[pages[t // ps], t % ps] = rng.standard_normal((Nkv, D))
            v_pages[pages[t // ps], t % ps] = rng.standard_normal((Nkv, D))
    q = rng.standard_normal((len(lengths), Nq, D)).astype(NP[dtype])
    return q, k_pages.astype(NP[dtype]), v_pages.astype(NP[dtype]), tables, lengths


def check(o, args, scale: float, dtype: str) -> None:
    q = args[0]
    assert o.shape == q.shape and o.dtype == q.dtype
    np.testing.assert_allclose(np.asarray(o, np.float64), reference(*args, scale), rtol=TOL[dtype],
                               atol=TOL[dtype])


def _launches(f, *args) -> list[str]:
    return re.findall(r"= (paged_attention_\w+)\[", str(jax.make_jaxpr(f)(*args)))


# (lengths, Nq, Nkv, D, page_size, dtype): lengths 0, 1, page_size - 1, page_size,
# several pages and (past SPLIT_TOKENS) the split path; page sizes 16, 32, 64; GQA ratios 1, 4, 8,
# 16 (both row groups of the fragment) and 24 (two query tiles, the second
# half full).
CASES = [
    ((0, 1, 15, 16, 53, 128), 8, 2, 64, 16, "bf16"),
    ((31, 0, 32, 1, 100), 8, 1, 128, 32, "bf16"),
    ((16, 64, 70), 4, 4, 64, 16, "f16"),
    ((5, 33), 32, 2, 128, 16, "f16"),
    ((40, 1), 24, 1, 64, 32, "bf16"),
    ((64, 65, 0), 4, 1, 128, 64, "bf16"),
    ((0, 600, 1, 513), 8, 1, 64, 16, "bf16"),
    ((700, 31, 0), 4, 4, 128, 32, "f16"),
]


@pytest.mark.parametrize("lengths,Nq,Nkv,D,ps,dtype", CASES)
def test_emulator_matches_float64(lengths, Nq, Nkv, D, ps, dtype) -> None:
    args = problem(lengths, Nq, Nkv, D, ps, dtype)
    f = jax.jit(lambda *a: paged_attention(*a, arch="sm_80"))
    o = f(*args)
    check(o, args, 1 / np.sqrt(D), dtype)
    names = _launches(f, *args)
    split = args[3].shape[1] * ps > SPLIT_TOKENS
    assert len(names) == (2 if split else 1) and names[-1].startswith(
        "paged_attention_combine" if split else "paged_attention_" + dtype), names


def test_sanitizer_clean_split_and_combine_sm90a() -> None:
    args = problem((530, 0, 17), 8, 2, 64, 16, seed=1)
    with sim.checking():
        o = jax.block_until_ready(paged_attention(*args, scale=0.3, arch="sm_90a"))
    check(o, args, 0.3, "bf16")


def test_sanitizer_clean_single_pass() -> None:
    args = problem((0, 1, 47), 4, 1, 128, 32, "f16", seed=2)
    with sim.checking():
        o = jax.block_until_ready(paged_attention(*args, arch="sm_80"))
    check(o, args, 1 / np.sqrt(128), "f16")


def test_max_pages_past_the_split_size_with_short_sequences() -> None:
    # The split path from the shapes, every sequence inside its first split:
    # later splits return at once and the combine reads only split 0.
    args = problem((3, 20), 8, 2, 64, 16, max_pages=40, seed=3)
    f = jax.jit(lambda *a: paged_attention(*a, arch="sm_80"))
    assert len(_launches(f, *args)) == 2
    check(f(*args), args, 1 / 8, "bf16")


def test_vmap_folds_into_the_sequences() -> None:
    problems = [problem((9, 40), 8, 2, 64, 16, max_pages=3, seed=s) for s in (4, 5)]
    stacked = [jnp.stack([p[i] for p in problems]) for i in range(5)]
    f = jax.vmap(lambda *a: paged_attention(*a, arch="sm_80"))
    assert _launches(f, *stacked) == ["paged_attention_bf16_d64_sm_80"]
    o = jax.jit(f)(*stacked)
    for i, p in enumerate(problems):
        check(o[i], p, 1 / 8, "bf16")
    # A pool shared by the batch (in_axes None) is not copied; the tables index it.
    q, k, v, tables, lengths = problems[0]
    qs = jnp.stack([q, q[::-1]])
    shared = jax.jit(jax.vmap(lambda q: paged_attention(q, k, v, tables, lengths, arch="sm_80")))(qs)
    check(shared[1], (q[::-1], k, v, tables, lengths), 1 / 8, "bf16")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("dtype", [bf16, f16])
def test_ptxas_no_spills(arch, D, dtype) -> None:
    for split in (False, True):
        for Nq, Nkv in ((32, 32), (32, 4), (64, 2)):
            dims = {"B": 8, "Nq": Nq, "Nkv": Nkv, "P": 4096, "PS": 16, "MP": 64, **({"S": 2} if split else {})}
            r = paged_kernel(dtype, D, arch, split).resources(**dims)
            assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, r
            # recorded: D=64 92-96, D=128 149-158 (sm_80 and sm_90a)
            assert r.registers <= (110 if D == 64 else 176), r
    r = combine_kernel(dtype, D, arch).resources(B=8, Nq=32, S=4)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.registers <= 40, r


def test_ptx_has_the_page_loads_and_tensor_cores() -> None:
    text = paged_kernel(bf16, 128, "sm_90a", True).ptx(B=2, Nq=8, Nkv=1, P=9, PS=32, MP=20, S=2)
    for needle in (".target sm_90a", "cp.async.cg.shared.global", "ld.global.nc.s32",
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ex2.approx.ftz.f32",
                   "st.global.v4.f32"):
        assert needle in text, needle


def test_cuda_lowering_shows_the_custom_calls() -> None:
    args = [jnp.asarray(x) for x in problem((600, 3), 8, 2, 64, 16)]
    lowered = jax.jit(lambda *a: paged_attention(*a, arch="sm_90a")).trace(*args).lower(
        lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("stablehlo.custom_call @jaxptx_launch") == 2, text.count("jaxptx_launch")
    assert "API_VERSION_TYPED_FFI" in lowered.as_text(dialect="hlo")
    specs = {s.ptx.split(".entry ")[1].split("(")[0]: s for s in kernels_in(lowered).values()}
    assert specs["paged_attention_bf16_d64_sm_90a_split"].grid == (2, 2, 2)     # (S, Nkv, B)
    assert specs["paged_attention_combine_bf16_d64_sm_90a"].grid == (1, 2, 1)   # (Nq / 8 heads, B)


def _arrays(q=(2, 4, 64), k=(5, 16, 2, 64), v=None, tables=(2, 3), lengths=(2,), dtype=jnp.bfloat16,
            table_dtype=jnp.int32, length_dtype=jnp.int32):
    return (jnp.zeros(q, dtype), jnp.zeros(k, dtype), jnp.zeros(v or k, dtype),
            jnp.zeros(tables, table_dtype), jnp.zeros(lengths, length_dtype))


@pytest.mark.parametrize("kwargs,call,message", [
    ({"q": (2, 4, 1, 64)}, {}, r"q: expected 3 dims \(B, Nq, H\), got shape \(2, 4, 1, 64\)"),
    ({"k": (5, 16, 64)}, {}, r"k_pages: expected 4 dims \(P, page_size, Nkv, H\), got shape \(5, 16, 64\)"),
    ({"dtype": jnp.float32}, {}, r"q: expected dtype bfloat16 or float16, got float32"),
    ({"q": (2, 4, 96), "k": (5, 16, 2, 96)}, {}, r"q: head dim \(last axis\) must be one of \(64, 128\), got 96"),
    ({"k": (5, 16, 2, 128)}, {}, r"k_pages: expected head dim 64 \(q's\), got shape \(5, 16, 2, 128\)"),
    ({"v": (5, 32, 2, 64)}, {}, r"v_pages: expected the shape of k_pages \(5, 16, 2, 64\), got \(5, 32, 2, 64\)"),
    ({"k": (5, 8, 2, 64)}, {}, r"k_pages: page_size \(axis 1\) must be one of \(16, 32, 64\), got 8"),
    ({"k": (5, 16, 3, 64)}, {}, r"q: Nq = 4 query heads must be a positive multiple of Nkv = 3"),
    ({"table_dtype": jnp.int16}, {}, r"block_tables: expected dtype int32, got int16"),
    ({"length_dtype": jnp.uint32}, {}, r"lengths: expected dtype int32, got uint32"),
    ({"tables": (3, 3)}, {}, (r"block_tables: expected shape \(B, max_pages\) with max_pages > 0, B = 2 "
                              r"\(q's\), got \(3, 3\)")),
    ({"tables": (2, 0)}, {}, r"block_tables: expected shape \(B, max_pages\) with max_pages > 0, B = 2"),
    ({"lengths": (3,)}, {}, r"lengths: expected shape \(B,\), B = 2 \(q's\), got \(3,\)"),
    ({"lengths": (2, 1)}, {}, r"lengths: expected 1 dims \(B,\), got shape \(2, 1\)"),
    ({}, {"scale": 0.0}, r"scale: expected a positive finite Python number \(static\), got 0.0"),
    ({}, {"arch": "sm_70"}, r"arch='sm_70' is not a variant of paged_attention"),
])
def test_bad_arguments_name_the_argument(kwargs, call, message) -> None:
    with pytest.raises(SpecError, match="paged_attention: " + message):
        paged_attention(*_arrays(**kwargs), **call)


def test_concrete_lengths_and_tables_are_checked() -> None:
    q, k, v, tables, _ = _arrays()
    with pytest.raises(SpecError, match=r"lengths: expected 0 <= lengths\[b\] <= max_pages · page_size = 48, "
                                        r"got lengths\[1\] = 49"):
        paged_attention(q, k, v, tables, jnp.array([0, 49], jnp.int32))
    bad = jnp.array([[0, 0, 0], [1, 5, -1]], jnp.int32)     # entry [1, 2] is past length 17's pages
    with pytest.raises(SpecError, match=r"block_tables: expected page indices in \[0, 5\) \(k_pages' axis 0\), "
                                        r"got block_tables\[1, 1\] = 5"):
        paged_attention(q, k, v, bad, jnp.array([0, 17], jnp.int32))
    o = paged_attention(q, k, v, bad, jnp.array([0, 16], jnp.int32), arch="sm_80")   # [1, 1] unused
    assert o.shape == q.shape and not np.asarray(o, np.float32).any()


@pytest.mark.parametrize("D", [64, 128])
def test_the_warp_merge_has_no_shared_memory_bank_conflicts(D) -> None:
    """The four warps' partial O tiles go through shared memory with padded rows
    (``_red_row``): ``jaxptx.profile`` counts no bank conflict in the kernel (it
    counted 768 at D=64 before the padding: every row started in bank 0)."""
    from jaxptx import profile
    args = problem((200, 131), 8, 2, D, 16, seed=3)
    with profile.profiling() as collected:
        o = jax.block_until_ready(paged_attention(*args, scale=0.2, arch="sm_80"))
    check(o, args, 0.2, "bf16")
    (p,) = [p for p in collected.profiles if p.name.startswith("paged_attention")]
    assert p.kernel["shared_bank_conflicts"] == 0, p.kernel

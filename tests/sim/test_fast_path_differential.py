"""The emulator's fast paths give the general paths' bytes (issue 29).

Every tensor-core kernel here runs twice, with the fast paths on and under
:func:`jaxptx.sim.core.fastpaths.reference`, on the same inputs; the outputs
must be identical bit for bit (float sums included: a fast path may regroup
work, never change the order a value is rounded in). The kernels: the library
GEMMs (``mma.sync``, TMA + ``wgmma``, TMA + ``tcgen05.mma``) at small shapes
and every output type, ``tcgen05.mma`` of every kind, swizzle, major and
block-scaled form (the ``tcgen05`` tests' kernels), Triton's pipelined
``wgmma`` and ``mma.sync`` matmuls with the sanitizer attached, and the
deferred completions of ``schedule="random"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim.core import fastpaths

import tcgen05_mma_harness as harness
import test_deferred_mma as deferred
import test_tcgen05_mma as tc
import test_tcgen05_mma_scaled as tc_scaled


def _bytes(value: Any) -> Any:
    """Arrays (nested in tuples and lists) as their raw bytes and shapes."""
    if isinstance(value, (tuple, list)):
        return [_bytes(v) for v in value]
    a = np.asarray(value)
    return a.shape, a.dtype.str, np.ascontiguousarray(a).view(np.uint8).tobytes()


def _both(run: Callable[[], Any], rng: np.random.Generator | None = None) -> tuple[Any, Any]:
    """``run()`` with the fast paths on, then on the general paths, from the
    same random state of ``rng``; the two results as bytes."""
    state = None if rng is None else rng.bit_generator.state
    assert fastpaths.on(), "the differential tests need the fast paths on (JAXPTX_SIM_FAST is 0)"
    fast = _bytes(run())
    if rng is not None:
        rng.bit_generator.state = state
    with fastpaths.reference():
        assert not fastpaths.on()
        slow = _bytes(run())
    assert fastpaths.on()
    return fast, slow


# --- the library GEMMs ------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
@pytest.mark.parametrize("shape", [(128, 64, 128), (256, 192, 128), (200, 72, 136)])
def test_library_matmul_bytes(arch: str, shape: tuple[int, int, int]) -> None:
    import jax.numpy as jnp

    from jaxptx.kernels import matmul

    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    outs = []
    for dt in (jnp.bfloat16, jnp.float16):
        # Wide magnitudes so that f64 partial sums are not all exact.
        a = jnp.asarray(rng.standard_normal((m, k)) * np.exp2(rng.integers(-12, 12, (m, k))), dt)
        b = jnp.asarray(rng.standard_normal((k, n)) * np.exp2(rng.integers(-12, 12, (k, n))), dt)
        for out in (jnp.float32, jnp.bfloat16):
            outs.append((a, b, out))

    def run() -> list[np.ndarray]:
        return [np.asarray(matmul(a, b, arch=arch, preferred_element_type=out)) for a, b, out in outs]
    fast, slow = _both(run)
    assert fast == slow
    got = run()[0].astype(np.float64)             # and it is the product, to f32 rounding
    a64, b64 = (np.asarray(x, np.float64) for x in outs[0][:2])
    scale = np.abs(a64) @ np.abs(b64)
    assert (np.abs(got - a64 @ b64) <= 1e-5 * scale + 1e-30).all()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_library_matmul_bytes_under_random_schedules(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred completion of wgmma / tcgen05.mma / TMA (``core.deferred``)
    runs the fast paths too, at the step the seed picks."""
    import jax.numpy as jnp

    from jaxptx.kernels import matmul

    rng = np.random.default_rng(11)
    a = jnp.asarray(rng.standard_normal((128, 256)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((256, 128)), jnp.bfloat16)
    for seed in (1, 2):
        monkeypatch.setenv("JAXPTX_SIM_SCHEDULE", f"random:{seed}")
        fast, slow = _both(lambda: np.asarray(matmul(a, b, arch=arch)))
        assert fast == slow, f"seed {seed}"


@pytest.mark.parametrize("case", list(deferred.CASES))
def test_racy_tensor_core_kernels_bytes_per_seed(case: str) -> None:
    """A kernel whose result depends on the seed (an operand overwritten or D
    read before the wait) depends on it the same way on both paths."""
    racy, fixed, _ = deferred.CASES[case]
    for seed in (None, 0, 3, 5):
        fast, slow = _both(lambda: (racy(seed), fixed(seed)))
        assert fast == slow, f"seed {seed}"


# --- tcgen05.mma: every kind, swizzle, major, and the block-scaled kinds -----------------------

TC_CASES = {
    **{f"f16 swizzle {mode} {am}/{bm}": (lambda mode=mode, am=am, bm=bm: tc.gemm(
        "f16", "f16", "f16", n=64, mode=mode, amajor=am, bmajor=bm))
       for mode in (0, 2, 4, 6) for am, bm in (("K", "K"), ("MN", "MN"), ("MN", "K"))},
    **{f"{kind} {atype}x{btype} swizzle {mode}": (lambda kind=kind, atype=atype, btype=btype, dtype=dtype, mode=mode:
                                                   tc.gemm(kind, atype, btype, n=16, mode=mode, dtype=dtype))
       for kind, atype, btype, dtype in (("f16", "bf16", "bf16", "f32"), ("tf32", "tf32", "tf32", "f32"),
                                         ("f8f6f4", "e4m3", "e2m1", "f32"), ("i8", "s8", "u8", "s32"))
       for mode in (0, 2, 6)},
    "tf32 MN-major 32B atoms": lambda: tc.gemm("tf32", "tf32", "tf32", n=32, mode=1, amajor="MN", bmajor="MN"),
    "e4m3 MN-major": lambda: tc.gemm("f8f6f4", "e4m3", "e4m3", n=64, mode=4, amajor="MN", bmajor="MN"),
    "e5m2 x e4m3": lambda: tc.gemm("f8f6f4", "e5m2", "e4m3", n=32, mode=0),
    "mxf8f6f4 1X": lambda: tc_scaled.scaled_gemm("mxf8f6f4", ".scale_vec::1X", "e4m3", "e2m1", 1, "ue8m0",
                                                 sfa_id=0, sfb_id=3),
    "mxf4 2X": lambda: tc_scaled.scaled_gemm("mxf4", ".scale_vec::2X", "e2m1", "e2m1", 2, "ue8m0",
                                             sfa_id=2, sfb_id=0),
    "mxf4nvf4 ue4m3 4X": lambda: tc_scaled.scaled_gemm("mxf4nvf4", ".scale_vec::4X", "e2m1", "e2m1", 4, "ue4m3",
                                                       n=64),
}


@pytest.mark.parametrize("case", list(TC_CASES))
def test_tcgen05_mma_bytes(case: str) -> None:
    fast, slow = _both(TC_CASES[case], harness.RNG)
    assert fast == slow


@pytest.mark.parametrize("test", [tc.test_bf16_negated_and_f16_accumulator, tc.test_i8_saturate_and_wrap,
                                  tc.test_enable_input_d_accumulates_or_overwrites_and_scale_input_d,
                                  tc.test_disable_output_lane_mask, tc.test_a_from_tensor_memory,
                                  tc.test_ws_zero_column_mask_descriptor,
                                  tc.test_ashift_form_runs_and_shifts_a_after_the_mma],
                         ids=lambda f: f.__name__)
def test_tcgen05_kernels_launch_the_same_bytes(test: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``tcgen05`` tests' own kernels: every array of every launch,
    after it, is the same on both paths."""
    real = sim.launch

    def run() -> list:
        seen: list = []

        def recording(*args: Any, **kw: Any) -> Any:
            got = real(*args, **kw)
            seen.append([np.array(a) for a in args if isinstance(a, np.ndarray)])
            return got
        monkeypatch.setattr(sim, "launch", recording)
        try:
            test()
        finally:
            monkeypatch.setattr(sim, "launch", real)
        return seen
    fast, slow = _both(run, harness.RNG)
    assert fast and fast == slow


# --- Triton's own matmuls, with the sanitizer watching -------------------------------------------

@pytest.mark.parametrize("capability", [80, 90])
def test_triton_pipelined_matmul_bytes_and_findings(capability: int) -> None:
    """Triton's pipelined matmul (``wgmma`` on sm_90a, ``mma.sync`` +
    ``cp.async`` on sm_80): the same C, and with ``check="all"`` the same
    (no) findings: the observers hear what they heard."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    import test_triton_checked as checked

    ptx, args, kw = checked._pipelined(capability)

    def run(check: Any) -> tuple:
        fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        found = sim.launch(ptx, *fresh, **kw, check=check)
        messages = sorted(f.message for f in found) if check else []
        return fresh[2], np.frombuffer("\n".join(messages).encode(), np.uint8)
    for check in (False, "all"):
        fast, slow = _both(lambda: run(check))
        assert fast == slow, f"check={check}"


# --- ldmatrix: every shape, count, transpose and source format; whole and partial grids ----------

LDMATRIX = """.version 8.6
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 dst)
{
    .reg .b32 %r<40>; .reg .b64 %rd<12>; .reg .pred %p<4>;
    .shared .align 16 .b8 rows[2048];
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd3, %r4, 16;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.v2.u64 {%rd5, %rd6}, [%rd4];
    mov.u32 %r5, rows;
    shl.b32 %r6, %r1, 4;
    add.u32 %r7, %r5, %r6;
    st.shared.v2.u64 [%r7], {%rd5, %rd6};
    bar.sync 0;
    shr.u32 %r8, %r1, 5;
    and.b32 %r9, %r1, 31;
    and.b32 %r10, %r8, SKIP;
    setp.ne.u32 %p1, %r10, 0;
    @%p1 bra DONE;
    mad.lo.u32 %r11, %r9, 7, %r8;
    and.b32 %r11, %r11, 31;
    shl.b32 %r11, %r11, 4;
    shl.b32 %r12, %r8, 9;
    add.u32 %r13, %r5, %r12;
    add.u32 %r13, %r13, %r11;
    LOAD
    mul.wide.u32 %rd7, %r4, 32;
    add.u64 %rd8, %rd2, %rd7;
    STORES
DONE:
    ret;
}
"""


def _ldmatrix_case(form: str, regs: int, skip: int) -> np.ndarray:
    """Each lane's ``regs`` registers after ``ldmatrix`` ``form`` from rows of
    random bytes at scattered addresses of its warp's 512 shared bytes, in
    2 CTAs of 128 threads; warps with ``warp & skip`` branch around it (the
    instruction then runs for part of the grid)."""
    names = [f"%r{20 + i}" for i in range(regs)]
    text = (LDMATRIX.replace("SKIP", str(skip))
            .replace("LOAD", f"ldmatrix.sync.aligned.{form} {{{', '.join(names)}}}, [%r13];")
            .replace("STORES", "\n    ".join(f"st.global.u32 [%rd8+{4 * i}], {r};" for i, r in enumerate(names))))
    src = np.random.default_rng(regs + skip).integers(0, 256, 256 * 16, dtype=np.uint8)
    dst = np.zeros(256 * 8, np.uint32)
    sim.launch(text, src, dst, grid=2, block=128)
    return dst


LDMATRIX_FORMS = {"m8n8.x1.shared.b16": 1, "m8n8.x2.trans.shared.b16": 2, "m8n8.x4.shared.b16": 4,
                  "m8n8.x4.trans.shared.b16": 4, "m16n16.x1.trans.shared.b8": 2,
                  "m16n16.x2.trans.shared.b8": 4, "m16n16.x2.trans.shared.b8x16.b6x16_p32": 4,
                  "m8n16.x1.shared.b8x16.b4x16_p64": 1, "m8n16.x4.shared.b8x16.b6x16_p32": 4}


@pytest.mark.parametrize("form", list(LDMATRIX_FORMS))
def test_ldmatrix_bytes(form: str) -> None:
    """Whole grids in order and grids with every other warp (or every other
    pair of warps) branched away: the same registers on both paths."""
    for skip in (0, 1, 2):
        fast, slow = _both(lambda: _ldmatrix_case(form, LDMATRIX_FORMS[form], skip))
        assert fast == slow, f"skip {skip}"
    got = _ldmatrix_case(form, LDMATRIX_FORMS[form], 0)
    assert got.any() and (got[:128 * 8].reshape(128, 8)[:, LDMATRIX_FORMS[form]:] == 0).all()


# --- wgmma's register-order reorder and the per-CTA thread blocks -------------------------------

@pytest.mark.parametrize("n", [8, 16, 24, 64, 128, 256])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_wgmma_register_reorder_matches_the_fragment_layout(n: int, dtype: str) -> None:
    """The reshape/transpose the fast path reads A*B through puts element
    ``wgmma_d_layout(n)`` of every thread where its register holds it: .f32
    D register ``i`` is element ``i``; .f16 D register ``j`` packs elements
    ``2j`` (low half) and ``2j + 1``."""
    from jaxptx.sim.semantics.wgmma import wgmma_d_layout

    count = 3
    ab = np.arange(count * 64 * n, dtype=np.float64).reshape(count, 64, n)
    _, row, col = wgmma_d_layout(n)                       # (128 lanes, n / 2)
    want = ab[:, row, col]                                # (count, 128, n / 2): thread, element
    view = ab.reshape(count, 4, 2, 8, n // 8, 4, 2)
    if dtype == "f32":
        got = view.transpose(4, 2, 6, 0, 1, 3, 5).reshape(n // 2, count * 128)
        assert np.array_equal(got, want.reshape(count * 128, n // 2).T)
    else:
        got = view.transpose(4, 2, 0, 1, 3, 5, 6).reshape(n // 4, count * 128, 2)
        pairs = want.reshape(count * 128, n // 4, 2).transpose(1, 0, 2)
        assert np.array_equal(got, pairs)


def test_cta_blocks_finds_per_cta_thread_ranges() -> None:
    from jaxptx.sim.semantics.fragments import cta_blocks

    ntid, nctas = 384, 4
    every = np.arange(ntid * nctas)
    assert cta_blocks(every, ntid, len(every)) == (0, nctas, 0, ntid)
    consumers = every.reshape(nctas, ntid)[:, 128:].ravel()
    assert cta_blocks(consumers, ntid, len(every)) == (0, nctas, 128, ntid)
    assert cta_blocks(every.reshape(nctas, ntid)[1:3, :128].ravel(), ntid, len(every)) == (1, 3, 0, 128)
    skipping = every.reshape(nctas, ntid)[::2, 128:].ravel()     # CTAs 0 and 2: not one slice
    assert cta_blocks(skipping, ntid, len(every)) is None
    ragged = np.concatenate([every[128:384], every[384 + 256:384 + 384]])
    assert cta_blocks(ragged, ntid, len(every)) is None
    assert cta_blocks(every[::-1].copy(), ntid, len(every)) is None


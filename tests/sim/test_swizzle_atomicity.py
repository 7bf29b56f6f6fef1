"""TMA tensor copies with the 128-byte swizzle's coarser atomicities
(tensor-map ``.swizzle_atomicity`` codes 1-3; the CUDA driver's
``CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B`` / ``_ATOM_32B_FLIP_8B`` /
``_ATOM_64B``).

The references follow the driver's description of each mode, on a box of
128-byte rows at a 1024-byte aligned shared address: row ``r``'s 32-byte
chunk ``c`` goes to chunk ``c ^ (r % 4)`` (32B atoms), additionally the two
8-byte halves of every 16-byte chunk swap on odd rows (8B flip), or its
64-byte half ``h`` goes to ``h ^ (r % 2)`` (64B atoms). Kernels are
assembled by ptxas for sm_100a.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError
from jaxptx.sim.memory.spaces import GLOBAL_SHIFT

HEAD = ".version 8.8\n.target sm_100a\n.address_size 64\n"
ROWS = 16          # two 1024-byte swizzle periods of 128-byte rows
NAMES = {1: "32B", 2: "32B with 8B flip", 3: "64B"}


def _kernel(code: int | None) -> str:
    """Thread 0 (optionally rewriting the map's atomicity to ``code`` with
    ``tensormap.replace``) TMA-loads a ROWS x 32 f32 box into shared
    memory, dumps the shared bytes to ``out``, then TMA-stores the shared
    box back into the tensor."""
    replace = "" if code is None else (
        f"tensormap.replace.tile.swizzle_atomicity.global.b1024.b32 [%rd3], {code};\n    "
        "fence.proxy.tensormap::generic.release.gpu;\n    "
        "fence.proxy.tensormap::generic.acquire.gpu [%rd3], 128;\n    ")
    text = HEAD + f""".visible .entry k(.param .u64 out, .param .u64 inp, .param .u64 tm)
{{
    .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .pred %p<8>;
    .shared .align 8 .b64 bar;
    .shared .align 1024 .b8 buf[{ROWS * 128}];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd3, [tm];
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @!%p1 bra END;
    {replace}mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [bar], {ROWS * 128};
    cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [buf], [%rd3, {{0, 0}}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    mov.u32 %r2, 0;
DUMP:
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    ld.shared.b32 %r4, [%r3];
    cvt.u64.u32 %rd5, %r2;
    add.u64 %rd5, %rd1, %rd5;
    st.global.b32 [%rd5], %r4;
    add.u32 %r2, %r2, 4;
    setp.lt.u32 %p3, %r2, {ROWS * 128};
    @%p3 bra DUMP;
    fence.proxy.async.shared::cta;
    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd3, {{0, 0}}], [buf];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
END:
    ret;
}}
"""
    ptxas(text, "sm_100a")
    return text


def _expected(a: np.ndarray, code: int) -> np.ndarray:
    """The shared-memory image of box ``a`` (ROWS x 128 bytes) under atomicity ``code``."""
    rows = a.view(np.uint8).reshape(ROWS, 128)
    out = np.zeros_like(rows)
    for r in range(ROWS):
        if code == 0:
            for c in range(8):
                s = c ^ (r % 8)
                out[r, 16 * s:16 * s + 16] = rows[r, 16 * c:16 * c + 16]
        elif code in (1, 2):
            for c in range(4):
                s = c ^ (r % 4)
                out[r, 32 * s:32 * s + 32] = rows[r, 32 * c:32 * c + 32]
            if code == 2 and r % 2:
                halves = out[r].reshape(8, 2, 8)
                out[r] = halves[:, ::-1, :].reshape(128)
        else:
            for h in range(2):
                s = h ^ (r % 2)
                out[r, 64 * s:64 * s + 64] = rows[r, 64 * h:64 * h + 64]
    return out.reshape(-1)


def _run(code: int, via_replace: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.arange(ROWS * 32, dtype=np.float32).reshape(ROWS, 32) * 1.5 - 7
    out = np.zeros(ROWS * 32, np.float32)
    kwargs = {} if via_replace else {"swizzle_atomicity": "16B" if code == 0 else NAMES[code]}
    # One map over ``inp`` (argument 1) serves the load and the store back.
    tm = np.frombuffer(sim.tensor_map((1 + 1) << GLOBAL_SHIFT, a.shape, a.dtype, (ROWS, 32), swizzle=128,
                                      **kwargs), np.uint8).copy()
    inp = a.copy()
    inp_before = inp.copy()
    sim.launch(_kernel(code if via_replace else None), out, inp, tm, block=(32, 1, 1))
    return out, inp_before, inp


@pytest.mark.parametrize("via_replace", [False, True], ids=["host_map", "tensormap_replace"])
@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_tma_load_lands_with_each_atomicity_and_the_store_undoes_it(code: int, via_replace: bool) -> None:
    out, a, after = _run(code, via_replace)
    np.testing.assert_array_equal(out.view(np.uint8), _expected(a, code))
    # The store un-swizzles with the same map: the tensor is unchanged.
    np.testing.assert_array_equal(after, a)


def test_32b_atomicity_matches_the_tcgen05_descriptor_mode() -> None:
    """A TMA load with 32-byte atomicity lays bytes out as the sm_100
    shared-memory descriptor's "128B with 32B atomicity" mode reads them
    (CuTe Swizzle<2, 5, 2>: address bits [5, 7) XOR bits [7, 9))."""
    out, a, _ = _run(1, False)
    src = a.view(np.uint8).reshape(-1)
    for off in range(0, ROWS * 128, 8):
        dst = off ^ (((off >> 7) & 3) << 5)
        np.testing.assert_array_equal(out.view(np.uint8)[dst:dst + 8], src[off:off + 8])


@pytest.mark.parametrize("swz", [0, 32, 64])
def test_coarse_atomicity_needs_the_128b_swizzle(swz: int) -> None:
    with pytest.raises(ValueError, match=r"swizzle atomicity must be 16B \(code 0\) without the 128-byte swizzle, got 32B"):
        sim.tensor_map(1 << 36, (8, 8), np.float32, (8, 8), swizzle=swz, swizzle_atomicity="32B")
    with pytest.raises(ValueError, match="swizzle_atomicity"):
        sim.tensor_map(1 << 36, (8, 32), np.float32, (8, 32), swizzle=128, swizzle_atomicity="8B")


def test_replace_to_a_coarse_atomicity_on_a_64b_swizzled_map_is_refused_by_the_copy() -> None:
    a = np.zeros((ROWS, 16), np.float32)
    tm = np.frombuffer(sim.tensor_map((1 + 1) << GLOBAL_SHIFT, a.shape, a.dtype, (ROWS, 16), swizzle=64),
                       np.uint8).copy()
    text = _kernel(3).replace(f"{ROWS * 128}];", f"{ROWS * 64}];", 1).replace(
        f"[bar], {ROWS * 128};", f"[bar], {ROWS * 64};")
    with pytest.raises(SimError, match=r"without the 128-byte swizzle, got 64B \(code 3\) with 64-byte swizzle"):
        sim.launch(text, np.zeros(ROWS * 32, np.float32), a, tm, block=(32, 1, 1))

"""jaxptx.profile: exact counts on access patterns counted by hand (and the
kernels' results checked against numpy, so a count never comes from a
kernel that did something else)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxptx.profile.api import profile

from profile_cases import COLUMN_READ, MMA_SYNC, ldmatrix, row_read, shared_width, transpose


def _run(ptx: str, *args, **kw):
    return profile(ptx, *args, resources=False, **kw)


@pytest.mark.parametrize("vector, lanes, sectors, ideal", [
    (True, 32, 16, 16),     # 32 lanes x 16 bytes: 512 bytes, 16 sectors
    (True, 8, 4, 4),        # a 128-byte row by 8 lanes of v4: 4 sectors
    (False, 32, 4, 4),      # a 128-byte row by 32 lanes of f32: 4 sectors
])
def test_coalesced_row_read(vector, lanes, sectors, ideal):
    src = np.arange(128, dtype=np.float32)
    dst = np.zeros(128, np.float32)
    p = _run(row_read(vector, lanes), src, dst, block=32)
    n = lanes * (4 if vector else 1)
    np.testing.assert_array_equal(dst[:n], src[:n])
    assert not dst[n:].any()
    (ld,) = p.find("ld.global")
    assert ld["global_requests"] == 1 and ld["executions"] == 1
    assert ld["global_sectors"] == sectors and ld["global_ideal_sectors"] == ideal
    assert ld["sectors_per_request"] == sectors
    assert ld["active_lanes"] == lanes
    assert ld["global_bytes"] == n * 4
    assert p.kernel["global_requests"] == 2 and p.kernel["global_sectors"] == 2 * sectors
    assert p.kernel["compulsory_bytes"] == 2 * 32 * sectors


def test_column_read_touches_a_sector_per_lane():
    src = np.arange(32 * 32, dtype=np.float32)
    dst = np.zeros(32, np.float32)
    p = _run(COLUMN_READ, src, dst, block=32)
    np.testing.assert_array_equal(dst, src.reshape(32, 32)[:, 0])
    (ld,) = p.find("ld.global")
    assert (ld["global_requests"], ld["global_sectors"], ld["global_ideal_sectors"]) == (1, 32, 4)
    (st,) = p.find("st.global")
    assert (st["global_requests"], st["global_sectors"]) == (1, 4)


@pytest.mark.parametrize("stride, wavefronts", [(32, 32), (33, 1)])
def test_shared_transpose_conflicts(stride, wavefronts):
    src = np.arange(32 * 32, dtype=np.float32)
    dst = np.zeros(32 * 32, np.float32)
    p = _run(transpose(stride), src, dst, block=(32, 32))
    np.testing.assert_array_equal(dst.reshape(32, 32), src.reshape(32, 32).T)
    (st,) = p.find("st.shared")
    assert (st["shared_requests"], st["shared_wavefronts"], st["shared_bank_conflicts"]) == (32, 32, 0)
    (ld,) = p.find("ld.shared")
    assert ld["shared_requests"] == 32
    assert ld["wavefronts_per_request"] == wavefronts
    assert ld["shared_bank_conflicts"] == 32 * (wavefronts - 1)
    assert p.kernel["shared_bank_conflicts"] == 32 * (wavefronts - 1)
    assert p.kernel["barrier_waits"] == 32
    # the global side is coalesced either way
    assert p.kernel["sectors_per_request"] == 4


def _fragments(tile: np.ndarray) -> np.ndarray:
    """ldmatrix.x4 m8n8.b16: lane l, register j holds row l/4, columns
    2(l%4), 2(l%4)+1 of matrix j = rows 8(j%2).., columns 8(j/2).. of the tile."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        for j in range(4):
            r = 8 * (j % 2) + lane // 4
            c = 8 * (j // 2) + 2 * (lane % 4)
            out[lane, j] = int(tile[r, c]) | int(tile[r, c + 1]) << 16
    return out


@pytest.mark.parametrize("swizzle, per_phase", [(False, 4), (True, 1)])
def test_ldmatrix_unswizzled_vs_swizzled(swizzle, per_phase):
    tile = np.arange(16 * 32, dtype=np.uint16).reshape(16, 32)
    dst = np.zeros((32, 4), np.uint32)
    p = _run(ldmatrix(swizzle), tile.copy(), dst, block=32)
    np.testing.assert_array_equal(dst, _fragments(tile))
    (ldm,) = p.find("ldmatrix")
    # four 8-address phases (one per matrix), each 8 rows of 16 bytes
    assert ldm["shared_requests"] == 1
    assert ldm["shared_ideal_wavefronts"] == 4
    assert ldm["shared_wavefronts"] == 4 * per_phase
    assert ldm["shared_bank_conflicts"] == 4 * (per_phase - 1)
    # Lane l stores 16-byte chunk 2l (then 2l+1): a quarter-warp's chunks
    # 0, 2, .., 14 fall in bank groups 0, 2, 4, 6 twice (2 wavefronts a
    # phase); swizzled, rows 1-3 of the 128-byte pattern XOR in 1, 2, 3 and
    # the 8 chunks land in 8 different groups.
    stores = p.find("st.shared")
    assert len(stores) == 2
    for s in stores:
        assert s["shared_wavefronts"] == (4 if swizzle else 8)
        assert s["shared_bank_conflicts"] == (0 if swizzle else 4)


@pytest.mark.parametrize("store, scale, wavefronts, conflicts", [
    ("st.shared.f32 [%r3], %f1;", 4, 1, 0),
    ("st.shared.v2.f32 [%r3], {%f1, %f2};", 8, 2, 0),            # 8 bytes a lane: 2 half-warp passes
    ("st.shared.b64 [%r3], %rd2;", 8, 2, 0),
    ("st.shared.v4.f32 [%r3], {%f1, %f2, %f1, %f2};", 16, 4, 0),  # 16 bytes: 4 quarter-warp passes
    ("st.shared.f32 [%r3], %f1;", 8, 2, 1),       # every other word: 2-way conflict
])
def test_shared_store_widths(store, scale, wavefronts, conflicts):
    dst = np.zeros(32, np.float32)
    p = _run(shared_width(store, scale), dst, block=32)
    lane = np.arange(32, dtype=np.float32)
    words = np.zeros(32 * scale // 4, np.float32)
    per = scale // 4
    if "v4" in store:
        words = np.stack([lane, lane + 0.5, lane, lane + 0.5], 1).reshape(-1)
    elif "v2" in store or "b64" in store:
        words = np.stack([lane, lane + 0.5], 1).reshape(-1)
    else:
        words[::per] = lane
    np.testing.assert_array_equal(dst, words[:32])
    (st,) = p.find("st.shared")
    assert st["shared_requests"] == 1
    assert st["shared_wavefronts"] == wavefronts
    assert st["shared_bank_conflicts"] == conflicts
    (ld,) = p.find("ld.shared")
    assert (ld["shared_wavefronts"], ld["shared_bank_conflicts"]) == (1, 0)


def test_mma_sync_flops():
    dst = np.zeros(64, np.float32)
    p = _run(MMA_SYNC, dst, block=64)
    np.testing.assert_array_equal(dst, np.full(64, 16.0))        # a row of ones . a column of ones, K = 16
    assert p.tensor_flops == {"bf16": 2 * 2 * 16 * 8 * 16}      # two warps, one m16n8k16 each
    assert p.kernel["tensor_flops"] == 2 * 2 * 16 * 8 * 16
    assert p.mix["tensor"] == 2


def test_divergence_and_mix():
    src = np.arange(128, dtype=np.float32)
    dst = np.zeros(128, np.float32)
    p = _run(row_read(False, 8), src, dst, block=64)
    (ld,) = p.find("ld.global")
    # two warps reach the load; 8 lanes of warp 0 execute it, none of warp 1
    assert ld["executions"] == 2 and ld["predicated_on"] == 8 and ld["active_lanes"] == 4
    assert ld["global_requests"] == 1
    assert p.mix["memory.global"] == 4 and p.mix["memory.param"] == 4
    assert p.kernel["instructions"] == sum(e["executions"] for e in p.lines)


def test_device_launch_profile_and_json():
    import json

    from jaxptx import sim
    from jaxptx.profile.report import Profile
    dev = sim.Device()
    src = dev.to_device(np.arange(32 * 32, dtype=np.float32))
    dst = dev.alloc(32 * 4)
    p = dev.launch(COLUMN_READ, [src, dst], block=32, profile=True)
    assert isinstance(p, Profile)
    assert p.kernel["global_sectors"] == 32 + 4
    assert dev.launch(COLUMN_READ, [src, dst], block=32) is None
    data = json.loads(p.to_json())
    assert data["kernel"]["global_requests"] == 2
    assert data["roofline"]["H100"]["estimate"] is True
    assert "ESTIMATE" in data["roofline"]["B200"]["note"]
    text = str(p)
    assert "sectors/request" in text and "ESTIMATE" in text


def test_bf16_data_unchanged_by_profiling():
    # bf16 values (NaN, infinities, subnormals, negative zero among them) go
    # through the swizzled copy and ldmatrix bit for bit, profiled or not.
    from jaxptx import sim
    from jaxptx.profile.report import Profile
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, -3.5], np.float32)
    values = np.random.default_rng(0).standard_normal(16 * 32).astype(np.float32)
    values[:special.size] = special
    tile = values.astype(ml_dtypes.bfloat16).view(np.uint16).reshape(16, 32)
    a, b = np.zeros((32, 4), np.uint32), np.zeros((32, 4), np.uint32)
    assert sim.launch(ldmatrix(True), tile.copy(), a, block=32) is None
    assert isinstance(sim.launch(ldmatrix(True), tile.copy(), b, block=32, profile=True), Profile)
    np.testing.assert_array_equal(a, _fragments(tile))
    np.testing.assert_array_equal(b, _fragments(tile))

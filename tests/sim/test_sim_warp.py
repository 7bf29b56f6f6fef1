"""Emulator semantics of the warp family: shfl.sync, vote.sync, activemask,
redux.sync, match.sync, elect.sync — against per-lane references written
from the PTX ISA's pseudocode, with partial warps and divergent lanes."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"
HEAD_100 = ".version 8.8\n.target sm_100a\n.address_size 64\n"
# Thread g (global index) reads in0..in3 = inp[g, 0..3] into %r10..%r13 and
# writes out[g, k] through [%rd6 + 4k]; %r1 = %tid.x, %r2 = %laneid.
PROLOGUE = """
    .reg .b32 %r<32>; .reg .b64 %rd<16>; .reg .pred %p<8>; .reg .f32 %f<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %laneid;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r3, %r4, %r1;
    mul.wide.u32 %rd3, %r5, 16;
    add.s64 %rd5, %rd2, %rd3;
    add.s64 %rd6, %rd1, %rd3;
    ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd5];
    st.global.v4.u32 [%rd6], {0, 0, 0, 0};
"""


def run(body: str, inp: np.ndarray, block: int, grid: int = 1, head: str = HEAD) -> np.ndarray:
    """Run ``body``; ``inp`` is (threads, 4) uint32; returns out (threads, 4)."""
    text = head + ".visible .entry k(.param .u64 out, .param .u64 inp)\n{" + PROLOGUE + body + "\n    ret;\n}\n"
    inp = np.ascontiguousarray(inp, dtype=np.uint32)
    out = np.zeros_like(inp)
    sim.launch(text, out, inp, grid=(grid, 1, 1), block=(block, 1, 1))
    return out


def warps(block: int, grid: int) -> list[np.ndarray]:
    """Global thread indices of each warp."""
    out = []
    for cta in range(grid):
        for w in range(0, block, 32):
            out.append(cta * block + np.arange(w, min(w + 32, block)))
    return out


# --- shfl.sync -----------------------------------------------------------------------------


def shfl_ref(mode: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, block: int, grid: int,
             executing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PTX ISA shfl.sync pseudocode, per lane; a non-executing source lane
    yields the thread's own value (the emulator's choice for undefined)."""
    d = a.copy()
    p = np.zeros(len(a), bool)
    for w in warps(block, grid):
        for lane, g in enumerate(w):
            if not executing[g]:
                continue
            bval, cval, seg = int(b[g]) & 31, int(c[g]) & 31, (int(c[g]) >> 8) & 31
            max_lane = (lane & seg) | (cval & ~seg)
            min_lane = lane & seg
            if mode == "up":
                j = lane - bval
                ok = j >= max_lane
            elif mode == "down":
                j = lane + bval
                ok = j <= max_lane
            elif mode == "bfly":
                j = lane ^ bval
                ok = j <= max_lane
            else:
                j = min_lane | (bval & ~seg)
                ok = j <= max_lane
            if not ok:
                j = lane
            p[g] = ok
            if j < len(w) and executing[w[j]]:
                d[g] = a[w[j]]
    return d, p


SHFL_CASES = [(mode, b, c) for mode in ("up", "down", "bfly", "idx")
              for b, c in ((1, 0x1F), (3, 0), (5, 0x1F), (7, 0x181F), (2, 0x1C03), (31, 0x1F), (0, 0x0A))]


@pytest.mark.parametrize("mode, b, c", SHFL_CASES, ids=[f"{m}-{b}-{c:#x}" for m, b, c in SHFL_CASES])
def test_shfl_immediate_operands(mode: str, b: int, c: int) -> None:
    block, grid = 48, 2                                   # each CTA: a full warp and 16 lanes
    n = block * grid
    inp = np.zeros((n, 4), np.uint32)
    inp[:, 0] = np.arange(n) * 7 + 3
    out = run(f"""
    shfl.sync.{mode}.b32 %r20|%p1, %r10, {b}, {c}, 0xFFFFFFFF;
    selp.u32 %r21, 1, 0, %p1;
    st.global.v2.u32 [%rd6], {{%r20, %r21}};
    """, inp, block, grid)
    d, p = shfl_ref(mode, inp[:, 0], np.full(n, b), np.full(n, c), block, grid, np.ones(n, bool))
    np.testing.assert_array_equal(out[:, 0], d)
    np.testing.assert_array_equal(out[:, 1], p)


@pytest.mark.parametrize("mode", ["up", "down", "bfly", "idx"])
def test_shfl_register_operands_and_inactive_sources(mode: str) -> None:
    rng = np.random.default_rng(11)
    block = 64
    inp = np.zeros((block, 4), np.uint32)
    inp[:, 0] = rng.integers(0, 2**32, block, dtype=np.uint64)
    inp[:, 1] = rng.integers(0, 64, block)                # b: bits above 4 are ignored
    inp[:, 2] = rng.choice([0x1F, 0, 0x101F, 0x1E1F, 0x0C07, 0x1F00], block) | (rng.integers(0, 8, block) << 16)
    inp[:, 3] = rng.integers(0, 4, block) != 0            # which lanes execute the shuffle
    out = run(f"""
    setp.ne.u32 %p2, %r13, 0;
    @%p2 shfl.sync.{mode}.b32 %r20|%p1, %r10, %r11, %r12, 0xFFFFFFFF;
    @%p2 selp.u32 %r21, 1, 0, %p1;
    @%p2 st.global.v2.u32 [%rd6], {{%r20, %r21}};
    """, inp, block)
    executing = inp[:, 3] != 0
    d, p = shfl_ref(mode, inp[:, 0], inp[:, 1], inp[:, 2], block, 1, executing)
    np.testing.assert_array_equal(out[executing, 0], d[executing])
    np.testing.assert_array_equal(out[executing, 1], p[executing])


def test_shfl_without_predicate_output_and_golden_mode_values() -> None:
    # the ZLUDA shfl_sync_mode_b32 vectors: c = 7680, 7199, 6175, 4127.
    out = run("""
    shfl.sync.up.b32 %r20, %r1, 3, 7680, 0xFFFFFFFF;
    shfl.sync.down.b32 %r21, %r1, 3, 7199, 0xFFFFFFFF;
    shfl.sync.bfly.b32 %r22, %r1, 3, 6175, 0xFFFFFFFF;
    shfl.sync.idx.b32 %r23, %r1, 3, 4127, 0xFFFFFFFF;
    add.u32 %r24, %r20, %r21;
    add.u32 %r24, %r24, %r22;
    add.u32 %r24, %r24, %r23;
    st.global.u32 [%rd6], %r24;
    """, np.zeros((64, 4), np.uint32), 64)
    np.testing.assert_array_equal(out[:8, 0], [9, 7, 8, 9, 21, 19, 20, 21])
    np.testing.assert_array_equal(out[-4:, 0], [237, 235, 236, 237])


# --- vote.sync, activemask -------------------------------------------------------------------


def test_vote_all_any_uni_ballot_with_masks_and_divergence() -> None:
    rng = np.random.default_rng(2)
    block = 80
    inp = np.zeros((block, 4), np.uint32)
    inp[:, 0] = rng.random(block) < 0.5                  # the predicate
    inp[:32, 0] = 1                                        # warp 0: all true...
    inp[3, 0] = 0                                          # ...but lane 3
    inp[:, 1] = rng.choice([0xFFFFFFFF, 0x0000FFF0, 0xF0F0F0F0], block)
    inp[:, 2] = (np.arange(block) % 5) != 1                # lanes executing the votes
    out = run("""
    setp.ne.u32 %p1, %r10, 0;
    setp.ne.u32 %p2, %r12, 0;
    @!%p2 bra SKIP;
    vote.sync.all.pred %p3, %p1, %r11;
    vote.sync.any.pred %p4, !%p1, %r11;
    vote.sync.uni.pred %p5, %p1, %r11;
    vote.sync.ballot.b32 %r20, %p1, %r11;
    selp.u32 %r21, 1, 0, %p3;
    selp.u32 %r22, 2, 0, %p4;
    selp.u32 %r23, 4, 0, %p5;
    or.b32 %r21, %r21, %r22;
    or.b32 %r21, %r21, %r23;
    st.global.v2.u32 [%rd6], {%r20, %r21};
SKIP:
    """, inp, block)
    pred, mask, executing = inp[:, 0] != 0, inp[:, 1], inp[:, 2] != 0
    for w in warps(block, 1):
        for lane, g in enumerate(w):
            if not executing[g]:
                continue
            members = [h for i, h in enumerate(w) if executing[h] and (int(mask[g]) >> i) & 1]
            ballot = sum(1 << (h - w[0]) for h in members if pred[h])
            all_ = all(pred[h] for h in members)
            any_not = any(not pred[h] for h in members)
            uni = all_ or not any(pred[h] for h in members)
            assert out[g, 0] == ballot, g
            assert out[g, 1] == all_ + 2 * any_not + 4 * uni, g


def test_activemask_sees_the_lanes_at_this_instruction() -> None:
    block = 40                                             # the second warp has 8 lanes
    out = run("""
    rem.u32 %r20, %r1, 3;
    setp.eq.u32 %p1, %r20, 0;
    @%p1 bra THIRD;
    activemask.b32 %r21;
    st.global.u32 [%rd6], %r21;
    bra.uni DONE;
THIRD:
    activemask.b32 %r21;
    st.global.u32 [%rd6+4], %r21;
DONE:
    activemask.b32 %r22;
    st.global.u32 [%rd6+8], %r22;
    """, np.zeros((block, 4), np.uint32), block)
    tid = np.arange(block)
    third = tid % 3 == 0
    for w in warps(block, 1):
        bits = lambda sel: sum(1 << (g - w[0]) for g in w if sel[g])   # noqa: E731
        np.testing.assert_array_equal(out[w[~third[w]], 0], bits(~third))
        np.testing.assert_array_equal(out[w[third[w]], 1], bits(third))
        np.testing.assert_array_equal(out[w, 2], bits(np.ones(block, bool)))


# --- redux.sync ------------------------------------------------------------------------------


INT_REDUX = [("add", "u32"), ("add", "s32"), ("min", "u32"), ("min", "s32"), ("max", "u32"),
             ("max", "s32"), ("and", "b32"), ("or", "b32"), ("xor", "b32")]


@pytest.mark.parametrize("op, t", INT_REDUX, ids=[f"{o}.{t}" for o, t in INT_REDUX])
def test_redux_integer(op: str, t: str) -> None:
    rng = np.random.default_rng(INT_REDUX.index((op, t)))
    block = 72
    inp = np.zeros((block, 4), np.uint32)
    inp[:, 0] = rng.integers(0, 2**32, block, dtype=np.uint64)
    inp[:, 0] |= (rng.random(block) < 0.5) * np.uint32(0x8000_0000)
    lane = np.arange(block) % 32
    inp[:, 1] = np.where(lane < 16, 0x0000FFFF, 0xFFFF0000)   # two halves reduce apart
    out = run(f"""
    redux.sync.{op}.{t} %r20, %r10, %r11;
    st.global.u32 [%rd6], %r20;
    """, inp, block)
    dtype = np.int32 if t == "s32" else np.uint32
    vals = inp[:, 0].view(dtype)
    fn = {"add": lambda x: np.uint32(int(x.astype(np.int64).sum()) & 0xFFFF_FFFF), "min": np.min, "max": np.max,
          "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}[op]
    for w in warps(block, 1):
        for lane_i, g in enumerate(w):
            members = [h for i, h in enumerate(w) if (int(inp[g, 1]) >> i) & 1]
            want = np.asarray(fn(vals[members])).astype(dtype).view(np.uint32)
            assert out[g, 0] == want, (g, out[g, 0], want)


def _f32_ref(values: np.ndarray, want_max: bool, absolute: bool, nan_mode: bool) -> int:
    v = np.abs(values) if absolute else values
    nans = np.isnan(v)
    if nans.all() or (nan_mode and nans.any()):
        return 0x7FFF_FFFF
    v = v[~nans]
    best = v[0]
    for x in v[1:]:
        if (x > best if want_max else x < best) or (x == best and np.signbit(best) == want_max
                                                      and np.signbit(x) != want_max):
            best = x
    return int(np.float32(best).view(np.uint32))


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("mods", ["", ".abs", ".NaN", ".abs.NaN"])
def test_redux_f32(op: str, mods: str) -> None:
    block = 96
    vals = np.array([3.5, -0.0, 0.0, -7.25, np.inf, -np.inf, 1e-40, -1e-40] * 12, np.float32)
    vals[40] = np.nan                                      # warp 1 has a NaN
    vals[64:96] = np.nan                                   # warp 2 is all NaN
    inp = np.zeros((block, 4), np.uint32)
    inp[:, 0] = vals.view(np.uint32)
    out = run(f"""
    mov.b32 %f1, %r10;
    redux.sync.{op}{mods}.f32 %f2, %f1, 0xFFFFFFFF;
    st.global.f32 [%rd6], %f2;
    """, inp, block, head=HEAD_100)
    for w in warps(block, 1):
        want = _f32_ref(vals[w], op == "max", ".abs" in mods, ".NaN" in mods)
        np.testing.assert_array_equal(out[w, 0], want)


# --- match.sync, elect.sync ------------------------------------------------------------------


@pytest.mark.parametrize("t", ["b32", "b64"])
def test_match_any_and_all(t: str) -> None:
    rng = np.random.default_rng(4)
    block = 96
    inp = np.zeros((block, 4), np.uint32)
    inp[:, 0] = rng.integers(0, 3, block)
    inp[:, 1] = rng.integers(0, 2, block) << 28            # b64: high word matters too
    inp[64:96, 0] = 5                                      # warp 2: all equal...
    inp[64:96, 1] = 1
    inp[:, 2] = np.where(np.arange(block) % 32 < 20, 0xFFFFFFFF, 0x00FF00FF)
    inp[32:64, 2] = 0x0000F00F                             # warp 1 takes a sub-mask
    reg = "%r10" if t == "b32" else "%rd7"
    out = run(f"""
    ld.global.u64 %rd7, [%rd5];
    match.any.sync.{t} %r20, {reg}, %r12;
    match.all.sync.{t} %r21|%p1, {reg}, %r12;
    selp.u32 %r22, 1, 0, %p1;
    st.global.v4.u32 [%rd6], {{%r20, %r21, %r22, 0}};
    """, inp, block)
    key = inp[:, 0] if t == "b32" else inp[:, 0] + (inp[:, 1].astype(np.uint64) << 32)
    for w in warps(block, 1):
        for g in w:
            m = int(inp[g, 2])
            members = [h for i, h in enumerate(w) if (m >> i) & 1]
            any_mask = sum(1 << (h - w[0]) for h in members if key[h] == key[g])
            same = len({int(key[h]) for h in members}) == 1
            assert out[g, 0] == any_mask, g
            assert out[g, 1] == (m if same else 0) and out[g, 2] == same, g


def test_elect_sync_picks_the_lowest_executing_member() -> None:
    block = 64
    inp = np.zeros((block, 4), np.uint32)
    lane = np.arange(block) % 32
    inp[:, 0] = lane >= 5                                  # warp lanes 0-4 skip the elect
    inp[:, 1] = np.where(np.arange(block) < 32, 0xFFFFFFFF, 0xFFFF0000)
    out = run("""
    setp.ne.u32 %p2, %r10, 0;
    @!%p2 bra SKIP;
    elect.sync %r20|%p1, %r11;
    selp.u32 %r21, 1, 0, %p1;
    elect.sync _|%p3, %r11;
    selp.u32 %r22, 1, 0, %p3;
    st.global.v4.u32 [%rd6], {%r20, %r21, %r22, 1};
SKIP:
    """, inp, block)
    ran = lane >= 5
    leader = np.where(np.arange(block) < 32, 5, 16)
    np.testing.assert_array_equal(out[ran, 0], leader[ran])
    np.testing.assert_array_equal(out[ran, 1], lane[ran] == leader[ran])
    np.testing.assert_array_equal(out[ran, 2], lane[ran] == leader[ran])
    np.testing.assert_array_equal(out[~ran, 3], 0)

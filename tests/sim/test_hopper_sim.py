"""Emulator semantics of the Hopper family: mbarriers (phases, arrival and
tx-count accounting), bulk copies, TMA tensor copies (tile mode, swizzles,
out-of-bounds fill, multicast, stores), tensor maps, mapa / getctarank and
distributed shared memory."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import SimError
from jaxptx.sim.memory.spaces import GLOBAL_SHIFT
from jaxptx.sim.memory.tensormap import decode

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"
REGS = """
    .reg .b16 %h<8>; .reg .b32 %r<40>; .reg .b64 %rd<40>; .reg .f32 %f<8>; .reg .pred %p<8>;
"""


def buffer(k: int) -> int:
    """Global address of a launch's k-th array argument (no global variables)."""
    return (k + 1) << GLOBAL_SHIFT


def tmap(*args, **kw) -> np.ndarray:
    """A tensor map as a param-space argument (``.param .align 64 .b8 t[128]``)."""
    return np.frombuffer(sim.tensor_map(*args, **kw), np.uint8).copy()


def kernel(body: str, params: str = ".param .u64 out", decls: str = "") -> str:
    return (HEAD + f".visible .entry k({params})\n{{" + REGS + decls
            + "\n    ld.param.u64 %rd1, [out];\n    mov.u32 %r1, %tid.x;\n    setp.eq.u32 %p1, %r1, 0;\n"
            + body + "\n    ret;\n}\n")


def dump(buf: str, nbytes: int, nthreads: int, out_offset: int = 0) -> str:
    """PTX: every thread copies 4-byte words of shared ``buf`` to ``out``
    (plain ld.shared / st.global, independent of the copies under test)."""
    return f"""
    mov.u32 %r30, %tid.x;
DUMP_{buf}:
    setp.ge.u32 %p7, %r30, {nbytes // 4};
    @%p7 bra DUMPED_{buf};
    shl.b32 %r31, %r30, 2;
    mov.u32 %r32, {buf};
    add.u32 %r32, %r32, %r31;
    ld.shared.u32 %r33, [%r32];
    cvt.u64.u32 %rd30, %r31;
    add.u64 %rd30, %rd30, {out_offset};
    add.u64 %rd30, %rd1, %rd30;
    st.global.u32 [%rd30], %r33;
    add.u32 %r30, %r30, {nthreads};
    bra DUMP_{buf};
DUMPED_{buf}:
"""


WAIT = """
WAIT{n}:
    mbarrier.try_wait.parity.shared::cta.b64 %p6, [{bar}], {parity};
    @!%p6 bra WAIT{n};
"""


# --- producer / consumer with TMA --------------------------------------------------------------


@pytest.mark.parametrize("check", [False, True])
def test_tma_producer_consumer_in_one_cta(check: bool) -> None:
    """Thread 0 arms the barrier with arrive.expect_tx and issues a 2-D TMA
    load; every thread spins on try_wait.parity, then reads the tile."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 1024;
    mov.u32 %r2, 8; mov.u32 %r3, 4;
    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [buf], [t, {%r2, %r3}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + """
    shl.b32 %r4, %r1, 2;
    mov.u32 %r5, buf;
    add.u32 %r5, %r5, %r4;
    ld.shared.f32 %f1, [%r5];
    cvt.u64.u32 %rd3, %r4;
    add.u64 %rd3, %rd1, %rd3;
    st.global.f32 [%rd3], %f1;
    """
    decls = ".shared .align 8 .b64 bar;\n.shared .align 1024 .b8 buf[1024];"
    a = np.arange(48 * 64, dtype=np.float32).reshape(48, 64)
    out = np.zeros(256, np.float32)
    text = kernel(body, ".param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128]", decls)
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, (16, 16)), block=(256, 1, 1), check=check)
    np.testing.assert_array_equal(out.reshape(16, 16), a[4:20, 8:24])


def test_tensor_map_in_global_memory_through_a_register() -> None:
    """The tensor-map operand may be a register holding a global address."""
    body = """
    ld.param.u64 %rd5, [tm];
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 64;
    mov.u32 %r2, 3;
    @%p1 cp.async.bulk.tensor.1d.shared::cta.global.mbarrier::complete_tx::bytes [buf], [%rd5, {%r2}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", 64, 1)
    decls = ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[64];"
    a = np.arange(100, dtype=np.int32)
    out = np.zeros(16, np.int32)
    t = tmap(buffer(1), a.shape, a.dtype, (16,))
    sim.launch(kernel(body, ".param .u64 out, .param .u64 inp, .param .u64 tm", decls), out, a, t)
    np.testing.assert_array_equal(out, a[3:19])


def test_arg_tensor_map_is_encoded_with_the_address_the_launch_gives_its_array() -> None:
    """An ArgTensorMap names its array by argument index; the launch fills in
    the address (here past a module global, which takes the first buffer),
    and the param is read through its generic address (cvta.param)."""
    body = """
    mov.u64 %rd6, t;
    cvta.param.u64 %rd5, %rd6;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 64;
    mov.u32 %r2, 3;
    @%p1 cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [buf], [%rd5, {%r2}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", 64, 1)
    decls = ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[64];"
    text = kernel(body, ".param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128]", decls)
    text = text.replace(".visible .entry", ".global .align 8 .b64 unused;\n.visible .entry")
    ptxas(text, "sm_90a")
    a = np.arange(100, dtype=np.int32)
    out = np.zeros(16, np.int32)
    sim.launch(text, out, a, sim.ArgTensorMap(1, a.shape, a.dtype, (16,)))
    np.testing.assert_array_equal(out, a[3:19])
    with pytest.raises(sim.SimError, match=r"parameter t: its tensor map describes argument 2, which is not an array"):
        sim.launch(text, out, a, sim.ArgTensorMap(2, a.shape, a.dtype, (16,)))
    with pytest.raises(sim.SimError, match=r"parameter inp \(.u64, 8 bytes\): a tensor map needs a 128-byte"):
        sim.launch(text, out, sim.ArgTensorMap(0, a.shape, a.dtype, (16,)), a)
    with pytest.raises(ValueError, match="tensor_map: "):
        sim.ArgTensorMap(1, a.shape, a.dtype, (300,))


# --- mbarrier accounting ----------------------------------------------------------------------


def _word(phase: int, pending: int, expected: int, tx: int) -> int:
    return (1 << 62) | (phase << 63) | pending | (expected << 20) | ((tx & ((1 << 21) - 1)) << 40)


def test_tx_count_accounting_and_the_documented_encoding() -> None:
    """Phase completion needs both the pending arrivals and the tx-count at
    zero; complete_tx may come before expect_tx (negative tx-count)."""
    body = """
    @!%p1 bra END;
    mbarrier.init.shared::cta.b64 [bar], 2;
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1], %rd10;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 64;
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1+8], %rd10;
    st.global.b64 [%rd1+16], %rd2;
    mbarrier.arrive.shared::cta.b64 %rd3, [bar];
    mbarrier.test_wait.parity.shared::cta.b64 %p2, [bar], 0;
    selp.u64 %rd11, 1, 0, %p2;                         st.global.b64 [%rd1+24], %rd11;
    mbarrier.complete_tx.shared::cta.b64 [bar], 32;
    mbarrier.test_wait.shared::cta.b64 %p2, [bar], %rd3;
    selp.u64 %rd11, 1, 0, %p2;                         st.global.b64 [%rd1+32], %rd11;
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1+40], %rd10;
    mbarrier.complete_tx.shared::cta.b64 [bar], 32;
    mbarrier.test_wait.shared::cta.b64 %p2, [bar], %rd3;
    selp.u64 %rd11, 1, 0, %p2;                         st.global.b64 [%rd1+48], %rd11;
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1+56], %rd10;
    // phase 1: the bytes arrive first (tx-count goes negative), then the arrivals
    mbarrier.complete_tx.shared::cta.b64 [bar], 16;
    mbarrier.arrive.shared::cta.b64 %rd4, [bar];
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1+64], %rd10;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [bar], 16;
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 1;
    selp.u64 %rd11, 1, 0, %p2;                         st.global.b64 [%rd1+72], %rd11;
    ld.shared.b64 %rd10, [bar];                        st.global.b64 [%rd1+80], %rd10;
END:
    """
    out = np.zeros(11, np.uint64)
    sim.launch(kernel(body, decls=".shared .align 8 .b64 bar;"), out)
    want = [_word(0, 2, 2, 0), _word(0, 1, 2, 64), _word(0, 2, 2, 64), 0, 0, _word(0, 0, 2, 32), 1,
            _word(1, 2, 2, 0), _word(1, 1, 2, -16), 1, _word(0, 2, 2, 0)]
    assert [int(v) for v in out] == want


def test_many_arrivals_in_one_step_and_state_tokens() -> None:
    """96 threads arrive at once on a barrier expecting 64: the first 64
    complete phase 0 and the other 32 count towards phase 1; each token is
    the state just before its own arrival."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 64;
    bar.sync 0;
    mbarrier.arrive.shared::cta.b64 %rd2, [bar];
    mul.wide.u32 %rd3, %r1, 8;
    add.u64 %rd3, %rd1, %rd3;
    st.global.b64 [%rd3], %rd2;
    mbarrier.test_wait.shared::cta.b64 %p2, [bar], %rd2;
    selp.u64 %rd4, 1, 0, %p2;
    st.global.b64 [%rd3+768], %rd4;
    @%p1 ld.shared.b64 %rd10, [bar];
    @%p1 st.global.b64 [%rd1+1536], %rd10;
    """
    out = np.zeros(193, np.uint64)
    sim.launch(kernel(body, decls=".shared .align 8 .b64 bar;"), out, block=(96, 1, 1))
    want = [_word(int(t >= 64), 64 - t % 64, 64, 0) for t in range(96)]
    assert [int(v) for v in out[:96]] == want
    assert list(out[96:192]) == [1] * 64 + [0] * 32
    assert int(out[192]) == _word(1, 32, 64, 0)


def test_arrive_with_count_drop_and_no_complete() -> None:
    body = """
    @!%p1 bra END;
    mbarrier.init.shared.b64 [bar], 5;
    mbarrier.arrive.noComplete.shared.b64 %rd2, [bar], 2;
    mbarrier.pending_count.b64 %r2, %rd2;               st.global.u32 [%rd1], %r2;
    mbarrier.arrive_drop.noComplete.shared.b64 %rd2, [bar], 1;
    mbarrier.pending_count.b64 %r2, %rd2;               st.global.u32 [%rd1+4], %r2;
    mbarrier.arrive.shared.b64 %rd2, [bar], 2;          // completes phase 0; expected is now 4
    mbarrier.pending_count.b64 %r2, %rd2;               st.global.u32 [%rd1+8], %r2;
    ld.shared.b64 %rd10, [bar];                         st.global.b64 [%rd1+16], %rd10;
    mbarrier.arrive_drop.shared.b64 %rd2, [bar];        // pending 3, expected 3
    ld.shared.b64 %rd10, [bar];                         st.global.b64 [%rd1+24], %rd10;
    mbarrier.inval.shared.b64 [bar];
    ld.shared.b64 %rd10, [bar];                         st.global.b64 [%rd1+32], %rd10;
END:
    """
    out = np.zeros(5, np.uint64)
    sim.launch(kernel(body, decls=".shared .align 8 .b64 bar;"), out)
    assert [int(v) for v in out.view(np.uint32)[:3]] == [5, 3, 2]
    assert int(out[2]) == _word(1, 4, 4, 0)
    assert int(out[3]) == _word(1, 3, 3, 0)
    assert int(out[4]) == 0


def test_mbarrier_misuse_is_an_error() -> None:
    with pytest.raises(SimError, match="not initialised"):
        sim.launch(kernel("mbarrier.arrive.shared.b64 %rd2, [bar];", decls=".shared .align 8 .b64 bar;"),
                   np.zeros(1, np.uint64))
    with pytest.raises(SimError, match="noComplete"):
        sim.launch(kernel("mbarrier.init.shared.b64 [bar], 1;\n"
                          "mbarrier.arrive.noComplete.shared.b64 %rd2, [bar], 1;",
                          decls=".shared .align 8 .b64 bar;"), np.zeros(1, np.uint64))
    with pytest.raises(SimError, match="more arrivals"):
        sim.launch(kernel("@%p1 mbarrier.init.shared.b64 [bar], 1;\n@%p1 mbarrier.expect_tx.shared.b64 [bar], 8;\n"
                          "bar.sync 0;\nmbarrier.arrive.shared.b64 %rd2, [bar];",
                          decls=".shared .align 8 .b64 bar;"), np.zeros(1, np.uint64), block=(2, 1, 1))


def test_cp_async_mbarrier_arrive() -> None:
    """Without .noinc the arrive is balanced by an increment (no net change);
    with .noinc it is one of the expected arrivals."""
    body = """
    @!%p1 bra END;
    mbarrier.init.shared.b64 [bar], 2;
    cp.async.mbarrier.arrive.shared.b64 [bar];
    ld.shared.b64 %rd10, [bar];                         st.global.b64 [%rd1], %rd10;
    cp.async.mbarrier.arrive.noinc.shared.b64 [bar];
    ld.shared.b64 %rd10, [bar];                         st.global.b64 [%rd1+8], %rd10;
END:
    """
    out = np.zeros(2, np.uint64)
    sim.launch(kernel(body, decls=".shared .align 8 .b64 bar;"), out)
    assert [int(v) for v in out] == [_word(0, 2, 2, 0), _word(0, 1, 2, 0)]


# --- TMA tile loads: swizzles, bounds, ranks, stores -------------------------------------------

TMA_PARAMS = ".param .u64 out, .param .u64 inp, .param .align 64 .b8 t[128]"


def tma_load_kernel(rank: int, coords: list[int], nbytes: int, dst_offset: int = 0, nthreads: int = 32,
                    align: int = 1024) -> str:
    """Thread 0 loads one box at ``coords`` into ``buf + dst_offset``; every
    thread waits, then the shared bytes are dumped to ``out``."""
    cs = ", ".join(str(c) for c in coords)
    size = dst_offset + nbytes
    body = f"""
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    mov.u32 %r2, buf;
    add.u32 %r2, %r2, {dst_offset};
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], {nbytes};
    @%p1 cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r2], [t, {{{cs}}}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", size, nthreads)
    decls = f".shared .align 8 .b64 bar;\n.shared .align {align} .b8 buf[{size}];"
    return kernel(body, TMA_PARAMS, decls)


def box_of(a: np.ndarray, start: list[int], box: list[int], fill=0) -> np.ndarray:
    """numpy model of a tile-mode box (numpy axis order): out-of-bounds
    elements take ``fill``."""
    out = np.full(box, fill, dtype=a.dtype)
    src = tuple(slice(max(s, 0), min(s + b, n)) for s, b, n in zip(start, box, a.shape))
    dst = tuple(slice(sl.start - s, sl.stop - s) for sl, s in zip(src, start))
    if all(sl.stop > sl.start for sl in src):
        out[dst] = a[src]
    return out


def swizzled(dense: np.ndarray, dst: int, span: int) -> np.ndarray:
    """numpy model of a swizzled box in shared memory, from the PTX ISA's
    "Tensor Swizzling Modes" tables: within each 128-byte line, 16-byte chunk
    c goes to position c ^ (line % (span / 16)), the line counted from a
    span*8-byte boundary (``dst`` is the box's shared-memory offset)."""
    chunks = dense.view(np.uint8).reshape(-1, 16)
    out = np.empty_like(chunks)
    for j in range(len(chunks)):
        a = dst + 16 * j
        line, c = a // 128, (a // 16) % 8
        out[(line * 128 + ((c ^ (line % (span // 16))) * 16) - dst) // 16] = chunks[j]
    return out.reshape(-1)


def test_swizzle_model_matches_the_isa_128b_table() -> None:
    table = [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5],
             [3, 2, 1, 0, 7, 6, 5, 4], [4, 5, 6, 7, 0, 1, 2, 3], [5, 4, 7, 6, 1, 0, 3, 2],
             [6, 7, 4, 5, 2, 3, 0, 1], [7, 6, 5, 4, 3, 2, 1, 0]]
    dense = np.repeat(np.arange(64, dtype=np.uint8), 16)       # chunk k holds byte value k
    image = swizzled(dense, 0, 128).reshape(8, 8, 16)[:, :, 0]
    np.testing.assert_array_equal(image, np.arange(64).reshape(8, 8)[np.arange(8)[:, None], table])


@pytest.mark.parametrize("span, dst_offset", [(32, 0), (64, 0), (128, 0), (128, 384), (64, 128), (32, 128)])
def test_swizzled_tma_load_matches_the_numpy_model(span: int, dst_offset: int) -> None:
    a = (np.arange(40 * 96, dtype=np.uint32) * 2654435761 % 65521).astype(np.float16).reshape(40, 96)
    inner = span // 2                         # f16 elements per span-wide row
    box = [16, inner]
    nbytes = 16 * span
    out = np.zeros((dst_offset + nbytes) // 2, np.float16)
    text = tma_load_kernel(2, [8, 5], nbytes, dst_offset)
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, box, swizzle=span), block=(32, 1, 1))
    want = swizzled(box_of(a, [5, 8], box), dst_offset, span)
    np.testing.assert_array_equal(out.view(np.uint8)[dst_offset:], want)


def test_out_of_bounds_elements_fill_with_zero_or_nan() -> None:
    a = np.arange(1, 121, dtype=np.float32).reshape(10, 12)
    for fill, value in (("zero", 0.0), ("nan", np.nan)):
        out = np.zeros(64, np.float32)
        sim.launch(tma_load_kernel(2, [-3, 6], 256), out, a,
                   tmap(buffer(1), a.shape, a.dtype, (8, 8), oob_fill=fill), block=(32, 1, 1))
        np.testing.assert_array_equal(out.reshape(8, 8), box_of(a, [6, -3], [8, 8], value))
        if fill == "nan":
            assert (out.view(np.uint32)[np.isnan(out)] == 0x7FFF_FFFF).all()


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_tma_load_boxes_of_every_rank(rank: int) -> None:
    rng = np.random.default_rng(rank)
    shape = [int(x) for x in rng.integers(3, 7, rank)]
    shape[-1] = 12
    a = rng.integers(0, 2**31, shape, dtype=np.int64).astype(np.int32)
    box = [int(x) for x in rng.integers(1, 4, rank)]
    box[-1] = 4
    start = [int(x) for x in rng.integers(-2, 5, rank)]
    n = int(np.prod(box))
    out = np.zeros(n, np.int32)
    sim.launch(tma_load_kernel(rank, start[::-1], 4 * n, nthreads=64, align=128), out, a,
               tmap(buffer(1), a.shape, a.dtype, box), block=(64, 1, 1))
    np.testing.assert_array_equal(out.reshape(box), box_of(a, start, box))


def test_element_strides_and_padded_global_strides() -> None:
    """A strided view (row pitch 80 bytes) with traversal stride 2 in the
    outer dimension: ceil(6 / 2) = 3 rows of the box are loaded."""
    base = np.arange(20 * 20, dtype=np.uint32).reshape(20, 20)
    view = base[:, :12]                       # shape (20, 12), strides (80, 4)
    out = np.zeros(3 * 4, np.uint32)
    t = tmap(buffer(1), view.shape, view.dtype, (6, 4), strides=view.strides, element_strides=(2, 1))
    sim.launch(tma_load_kernel(2, [4, 7], 48, align=128), out, base, t, block=(32, 1, 1))
    np.testing.assert_array_equal(out.reshape(3, 4), base[7:13:2, 4:8])


def test_tf32_and_ftz_element_types() -> None:
    """.tf32 rounds f32 to 10 mantissa bits, nearest even; the .ftz types
    flush subnormals to sign-preserving zero; inf and NaN pass."""
    bits = np.array([0x3F80_0FFF, 0x3F80_1000, 0x3F80_3000, 0x3F80_1001, 0x8040_2000, 0x7F80_0000,
                     0xBF80_0000, 0x7FC0_1234], np.uint32)
    a = bits.view(np.float32)
    rounded = [0x3F80_0000, 0x3F80_0000, 0x3F80_4000, 0x3F80_2000]
    cases = {"tf32": rounded + [0x8040_2000], "tf32.ftz": rounded + [0x8000_0000],
             "f32": list(bits[:5]), "f32.ftz": list(bits[:4]) + [0x8000_0000]}
    for dtype, head in cases.items():
        out = np.zeros(8, np.uint32)
        sim.launch(tma_load_kernel(1, [0], 32, align=128), out, a, tmap(buffer(1), a.shape, dtype, (8,)),
                   block=(32, 1, 1))
        assert [hex(v) for v in out] == [hex(v) for v in head + [0x7F80_0000, 0xBF80_0000, 0x7FC0_1234]]


@pytest.mark.parametrize("span", [0, 128])
def test_tma_store_writes_the_box_and_skips_out_of_bounds(span: int) -> None:
    """Threads fill shared memory (in the swizzled layout for span 128),
    thread 0 stores the box at coordinates partly outside the tensor."""
    body = f"""
    shl.b32 %r2, %r1, 2;
    mov.u32 %r3, buf;
    add.u32 %r3, %r3, %r2;
    // element index e = tid: its swizzled address
    shr.u32 %r4, %r3, 7;
    and.b32 %r4, %r4, {span // 16 - 1 if span else 0};
    shl.b32 %r4, %r4, 4;
    xor.b32 %r3, %r3, %r4;
    add.u32 %r5, %r1, 1000;
    st.shared.u32 [%r3], %r5;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    ld.param.u64 %rd2, [inp];
    mov.u32 %r6, -8; mov.u32 %r7, 13;
    @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [t, {{%r6, %r7}}], [buf];
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group.read 0;
    """
    a = np.zeros((16, 32), np.uint32)
    text = kernel(body, TMA_PARAMS, ".shared .align 1024 .b8 buf[1024];")
    sim.launch(text, np.zeros(1, np.uint32), a, tmap(buffer(1), a.shape, a.dtype, (8, 32), swizzle=span),
               block=(256, 1, 1))
    want = np.zeros((16, 32), np.uint32)
    tile = (np.arange(256, dtype=np.uint32) + 1000).reshape(8, 32)
    want[13:16, 0:24] = tile[0:3, 8:32]
    np.testing.assert_array_equal(a, want)


def test_tma_phases_flip_over_several_rounds() -> None:
    """Four rounds of load / wait(parity = round & 1) / consume on one
    barrier; each thread sums the element it reads in every round."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    mov.u32 %r10, 0;                 // round
    mov.f32 %f2, 0f00000000;
    shl.b32 %r4, %r1, 2;
    mov.u32 %r5, buf;
    add.u32 %r5, %r5, %r4;
ROUND:
    shl.b32 %r11, %r10, 2;           // row = 4 * round
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 256;
    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [buf], [t, {0, %r11}], [bar];
    and.b32 %r12, %r10, 1;
SPIN:
    mbarrier.try_wait.parity.shared::cta.b64 %p6, [bar], %r12;
    @!%p6 bra SPIN;
    ld.shared.f32 %f1, [%r5];
    add.f32 %f2, %f2, %f1;
    bar.sync 0;
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p3, %r10, 4;
    @%p3 bra ROUND;
    cvt.u64.u32 %rd3, %r4;
    add.u64 %rd3, %rd1, %rd3;
    st.global.f32 [%rd3], %f2;
    @%p1 ld.shared.b64 %rd10, [bar];
    @%p1 st.global.b64 [%rd1+256], %rd10;
    """
    a = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
    out = np.zeros(66, np.float32)
    text = kernel(body, TMA_PARAMS, ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[256];")
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, (4, 16)), block=(64, 1, 1))
    np.testing.assert_array_equal(out[:64], a.reshape(4, 4, 16).sum(axis=0).reshape(64))
    assert int(out[64:].view(np.uint64)[0]) == _word(0, 1, 1, 0)


# --- clusters: multicast, DSMEM, bulk copies ------------------------------------------------------


def test_tma_multicast_into_a_two_cta_cluster() -> None:
    """CTA rank 0 loads one box with .multicast::cluster ctaMask 0b11: both
    CTAs get it at the same offset, and each CTA's barrier gets the bytes."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 512;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p2, %r2, 0;
    and.pred %p2, %p2, %p1;
    mov.u16 %h1, 3;
    @%p2 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
        [buf], [t, {4, 2}], [bar], %h1;
    """ + WAIT.format(n=0, bar="bar", parity=0) + """
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd4, %r3, 512;
    add.u64 %rd1, %rd1, %rd4;
    """ + dump("buf", 512, 64)
    a = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32)
    out = np.zeros(256, np.uint32)
    text = kernel(body, TMA_PARAMS, ".shared .align 8 .b64 bar;\n.shared .align 1024 .b8 buf[512];")
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, (8, 16)), grid=(2, 1, 1), block=(64, 1, 1),
               cluster=(2, 1, 1))
    for cta in range(2):
        np.testing.assert_array_equal(out[128 * cta:128 * (cta + 1)].reshape(8, 16), a[2:10, 4:20])


def test_distributed_shared_memory_through_mapa() -> None:
    """Each CTA of a 4-CTA cluster stores into the next CTA's shared memory
    (mapa.shared::cluster + st.shared::cluster, and the generic forms), then
    reads its own; getctarank names the owner of each address."""
    body = """
    mov.u32 %r2, %cluster_ctarank;
    add.u32 %r3, %r2, 1;
    rem.u32 %r3, %r3, 4;                      // next rank
    shl.b32 %r4, %r1, 2;
    mov.u32 %r5, arr;
    add.u32 %r5, %r5, %r4;
    mapa.shared::cluster.u32 %r6, %r5, %r3;
    mad.lo.u32 %r7, %r2, 100, %r1;
    st.shared::cluster.u32 [%r6], %r7;
    getctarank.shared::cluster.u32 %r8, %r6;
    getctarank.shared::cluster.u32 %r9, %r5;
    // generic: the same through cvta + mapa.u64 into arr2
    mov.u32 %r10, arr2;
    add.u32 %r10, %r10, %r4;
    cvt.u64.u32 %rd5, %r10;
    cvta.shared.u64 %rd5, %rd5;
    mapa.u64 %rd6, %rd5, %r3;
    add.u32 %r11, %r7, 5000;
    st.u32 [%rd6], %r11;
    getctarank.u64 %r12, %rd6;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ld.shared.u32 %r13, [%r5];
    ld.shared.u32 %r14, [%r10];
    ld.u32 %r15, [%rd6];                      // read back through the generic mapa address
    mov.u32 %r16, %ctaid.x;
    mad.lo.u32 %r17, %r16, 32, %r1;
    mul.wide.u32 %rd7, %r17, 24;
    add.u64 %rd7, %rd1, %rd7;
    st.global.v2.u32 [%rd7], {%r13, %r14};
    st.global.v2.u32 [%rd7+8], {%r8, %r9};
    st.global.v2.u32 [%rd7+16], {%r12, %r15};
    """
    out = np.zeros((4, 32, 6), np.uint32)
    text = kernel(body, decls=".shared .align 4 .b32 arr[32];\n.shared .align 4 .b32 arr2[32];")
    sim.launch(text, out, grid=(4, 1, 1), block=(32, 1, 1), cluster=(4, 1, 1))
    tid = np.arange(32)
    for cta in range(4):
        prev, nxt = (cta - 1) % 4, (cta + 1) % 4
        np.testing.assert_array_equal(out[cta, :, 0], prev * 100 + tid)
        np.testing.assert_array_equal(out[cta, :, 1], prev * 100 + tid + 5000)
        assert (out[cta, :, 2] == nxt).all() and (out[cta, :, 3] == cta).all() and (out[cta, :, 4] == nxt).all()
        np.testing.assert_array_equal(out[cta, :, 5], cta * 100 + tid + 5000)


def test_bulk_copies_global_shared_and_cluster() -> None:
    """cp.async.bulk global → shared (complete_tx on the local barrier),
    shared::cta → the other CTA's shared memory (complete_tx on its barrier,
    both addresses from mapa), then shared → global (bulk_group)."""
    body = """
    ld.param.u64 %rd2, [inp];
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.init.shared::cta.b64 [bar2], 1;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p2, %r2, 0;
    and.pred %p2, %p2, %p1;
    @%p2 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [bar], 256;
    @%p2 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [src], [%rd2], 256, [bar];
    """ + WAIT.format(n=0, bar="bar", parity="%r2") + """
    // rank 0 pushes its copy into rank 1's dst; rank 1 waits on its bar2
    setp.eq.u32 %p3, %r2, 1;
    and.pred %p4, %p3, %p1;
    @%p4 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [bar2], 256;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r3, dst;
    mapa.shared::cluster.u32 %r4, %r3, 1;
    mov.u32 %r5, bar2;
    mapa.shared::cluster.u32 %r6, %r5, 1;
    @%p2 cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r4], [src], 256, [%r6];
    @%p3 bra RANK1;
    bra DONE;
RANK1:
    """ + WAIT.format(n=1, bar="bar2", parity=0) + """
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [dst], 256;
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
DONE:
    """
    inp = np.arange(64, dtype=np.uint32) * 7
    out = np.zeros(64, np.uint32)
    text = kernel(body, ".param .u64 out, .param .u64 inp",
                  ".shared .align 8 .b64 bar;\n.shared .align 8 .b64 bar2;\n"
                  ".shared .align 128 .b8 src[256];\n.shared .align 128 .b8 dst[256];")
    sim.launch(text, out, inp, grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1))
    np.testing.assert_array_equal(out, inp)


def test_bulk_copy_multicast_and_alignment() -> None:
    body = """
    ld.param.u64 %rd2, [inp];
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [bar], 64;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r2, %cluster_ctarank;
    setp.eq.u32 %p2, %r2, 1;
    and.pred %p2, %p2, %p1;
    @%p2 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
        [buf], [%rd2], 64, [bar], 3;
    """ + WAIT.format(n=0, bar="bar", parity=0) + """
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd4, %r3, 64;
    add.u64 %rd1, %rd1, %rd4;
    """ + dump("buf", 64, 32)
    inp = np.arange(16, dtype=np.uint32) + 40
    out = np.zeros(32, np.uint32)
    text = kernel(body, ".param .u64 out, .param .u64 inp",
                  ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[64];")
    sim.launch(text, out, inp, grid=(2, 1, 1), block=(32, 1, 1), cluster=(2, 1, 1))
    np.testing.assert_array_equal(out, np.tile(inp, 2))
    bad = kernel("@%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [buf], 24;",
                 decls=".shared .align 128 .b8 buf[64];")
    with pytest.raises(SimError, match="multiple of 16"):
        sim.launch(bad, np.zeros(16, np.uint32))


# --- tensor maps ---------------------------------------------------------------------------------


def test_tensor_map_encoding_round_trips() -> None:
    raw = sim.tensor_map(0x1000, (3, 5, 7, 9, 64), np.float16, (1, 2, 3, 4, 64), swizzle=128, oob_fill="nan")
    tm = decode(raw)
    assert len(raw) == 128 and tm.rank == 5 and tm.dims == (64, 9, 7, 5, 3) and tm.box == (64, 4, 3, 2, 1)
    assert tm.strides == (128, 128 * 9, 128 * 63, 128 * 315) and tm.swizzle == 128 and tm.fill == 1
    assert tm.box_bytes == 64 * 4 * 3 * 2 * 2
    with pytest.raises(ValueError, match="swizzle span"):
        sim.tensor_map(0x1000, (8, 128), np.float16, (8, 128), swizzle=64)
    with pytest.raises(ValueError, match="NaN"):
        sim.tensor_map(0x1000, (8, 8), np.int32, (8, 8), oob_fill="nan")


def test_tensormap_replace_builds_a_map_used_by_a_copy() -> None:
    """Thread 0 builds a map field by field in zeroed shared memory with
    tensormap.replace, publishes it with tensormap.cp_fenceproxy, and a TMA
    load reads through it."""
    body = """
    ld.param.u64 %rd2, [inp];
    ld.param.u64 %rd3, [tm];
    @!%p1 bra END;
    mov.u32 %r2, map;
    tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r2], %rd2;
    tensormap.replace.tile.rank.shared::cta.b1024.b32 [%r2], 1;
    tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%r2], 7;
    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r2], 0, 24;
    tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r2], 1, 10;
    tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%r2], 0, 96;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r2], 0, 8;
    tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r2], 1, 4;
    tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r2], 0, 1;
    tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r2], 1, 1;
    tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd3], [map], 128;
    fence.proxy.tensormap::generic.acquire.gpu [%rd3], 128;
    mbarrier.init.shared::cta.b64 [bar], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [bar], 128;
    cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [buf], [%rd3, {16, 6}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", 128, 1) + "\nEND:"
    a = np.arange(240, dtype=np.float32).reshape(10, 24)
    out = np.zeros(32, np.float32)
    tm = np.zeros(128, np.uint8)
    text = kernel(body, ".param .u64 out, .param .u64 inp, .param .u64 tm",
                  ".shared .align 128 .b8 map[128];\n.shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[128];")
    sim.launch(text, out, a, tm)
    np.testing.assert_array_equal(out.reshape(4, 8), box_of(a, [6, 16], [4, 8]))
    assert tm.tobytes() == sim.tensor_map(buffer(1), a.shape, a.dtype, (4, 8))


def test_generic_mbarrier_addresses_and_remote_arrivals() -> None:
    """mbarrier operations through generic addresses; the threads of CTA 1
    arrive on CTA 0's barrier (mapa + mbarrier.arrive.shared::cluster) and
    add expected bytes to it, CTA 0 completes them and waits."""
    body = """
    mov.u32 %r2, %cluster_ctarank;
    mov.u32 %r3, bar;
    cvt.u64.u32 %rd2, %r3;
    cvta.shared.u64 %rd2, %rd2;
    @%p1 mbarrier.init.b64 [%rd2], 33;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mapa.shared::cluster.u32 %r4, %r3, 0;
    setp.eq.u32 %p2, %r2, 1;
    @%p2 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
    and.pred %p3, %p2, %p1;
    @%p3 mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%r4], 48;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    @%p2 bra DONE;
    @%p1 ld.shared.b64 %rd10, [bar];
    @%p1 st.global.b64 [%rd1], %rd10;
    @%p1 mbarrier.complete_tx.b64 [%rd2], 48;
    @%p1 mbarrier.arrive.b64 %rd3, [%rd2];
WAITG:
    mbarrier.try_wait.parity.acquire.cta.b64 %p4, [%rd2], 0;
    @!%p4 bra WAITG;
    @%p1 ld.shared.b64 %rd10, [bar];
    @%p1 st.global.b64 [%rd1+8], %rd10;
DONE:
    """
    out = np.zeros(2, np.uint64)
    sim.launch(kernel(body, decls=".shared .align 8 .b64 bar;"), out, grid=(2, 1, 1), block=(32, 1, 1),
               cluster=(2, 1, 1))
    assert [int(v) for v in out] == [_word(0, 1, 33, 48), _word(1, 33, 33, 0)]


def test_tensor_map_param_address_in_a_register() -> None:
    """``mov.u64 %rd, param`` (as Triton writes it) gives the param-space
    address of the map; a TMA load reads the map there."""
    body = """
    mov.u64 %rd5, t;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [bar], 64;
    @%p1 cp.async.bulk.tensor.1d.shared::cta.global.tile.mbarrier::complete_tx::bytes [buf], [%rd5, {-4}], [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", 64, 16)
    a = np.arange(1, 101, dtype=np.int32)
    out = np.zeros(16, np.int32)
    text = kernel(body, TMA_PARAMS, ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[64];")
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, (16,)), block=(16, 1, 1))
    np.testing.assert_array_equal(out, np.r_[np.zeros(4, np.int32), a[:12]])


def test_tma_errors() -> None:
    a = np.zeros(64, np.float32)
    bad_align = tma_load_kernel(1, [0], 64, dst_offset=16, align=128)
    with pytest.raises(SimError, match="128-byte aligned"):
        sim.launch(bad_align, np.zeros(32, np.float32), a, tmap(buffer(1), a.shape, a.dtype, (16,)))
    with pytest.raises(SimError, match=r"magic and version must be 0x4d54504a and 1 \(a jaxptx tensor map"):
        sim.launch(tma_load_kernel(1, [0], 64, align=128), np.zeros(16, np.float32), a, np.zeros(128, np.uint8))
    with pytest.raises(SimError, match="rank-2 tensor map"):
        sim.launch(tma_load_kernel(1, [0], 64, align=128), np.zeros(16, np.float32), a,
                   tmap(buffer(1), (4, 16), a.dtype, (1, 16)))


def test_several_threads_issue_tma_copies_in_one_step() -> None:
    """Threads 0..3 each load a box with their own tensor map (two distinct
    maps in a global array) into their own slice; all signal one barrier."""
    body = """
    ld.param.u64 %rd5, [tm];
    setp.lt.u32 %p2, %r1, 4;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    @%p1 mbarrier.expect_tx.shared::cta.b64 [bar], 256;
    and.b32 %r2, %r1, 1;
    mul.wide.u32 %rd6, %r2, 128;
    add.u64 %rd5, %rd5, %rd6;                 // map (tid & 1)
    shl.b32 %r3, %r1, 7;
    mov.u32 %r4, buf;
    add.u32 %r4, %r4, %r3;                    // buf + 128 * tid
    shl.b32 %r5, %r1, 3;                      // c0 = 8 * tid
    @%p2 cp.async.bulk.tensor.1d.shared::cta.global.mbarrier::complete_tx::bytes
        [%r4], [%rd5, {%r5}], [bar];
    @%p1 mbarrier.arrive.shared::cta.b64 %rd2, [bar];
    """ + WAIT.format(n=0, bar="bar", parity=0) + dump("buf", 512, 32)
    a = np.arange(64, dtype=np.float32)
    b = -np.arange(64, dtype=np.float64)
    maps = np.concatenate([tmap(buffer(1), a.shape, a.dtype, (16,)), tmap(buffer(2), b.shape, b.dtype, (8,))])
    out = np.zeros(128, np.uint32)
    text = kernel(body, ".param .u64 out, .param .u64 a, .param .u64 b, .param .u64 tm",
                  ".shared .align 8 .b64 bar;\n.shared .align 128 .b8 buf[512];")
    sim.launch(text, out, a, b, maps, block=(32, 1, 1))
    for t in range(4):
        got = out[32 * t:32 * (t + 1)].view(np.uint8)[:64]
        want = (a[8 * t:8 * t + 16] if t % 2 == 0 else b[8 * t:8 * t + 8]).view(np.uint8)
        np.testing.assert_array_equal(got, want)


def test_warp_specialised_pipeline_with_full_and_empty_barriers() -> None:
    """Warp 0 consumes, warp 1 (lane 0) produces through a 2-stage ring of
    full/empty barriers for 6 iterations. The consumer's spin loop sits at
    lower PCs than the producer: a failing try_wait must let the producer
    run (Machine.spinning)."""
    body = """
    @%p1 mbarrier.init.shared::cta.b64 [full], 1;
    @%p1 mbarrier.init.shared::cta.b64 [full+8], 1;
    @%p1 mbarrier.init.shared::cta.b64 [empty], 32;
    @%p1 mbarrier.init.shared::cta.b64 [empty+8], 32;
    bar.sync 0;
    mov.u32 %r10, 0;                          // iteration
    mov.f32 %f2, 0f00000000;
    setp.ge.u32 %p2, %r1, 32;
    @%p2 bra PRODUCER;
CONSUME:
    and.b32 %r11, %r10, 1;                    // stage
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;                    // phase parity
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
CWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r13], %r12;
    @!%p3 bra CWAIT;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 128, %r14;
    mad.lo.u32 %r14, %r1, 4, %r14;
    ld.shared.f32 %f1, [%r14];
    add.f32 %f2, %f2, %f1;
    mov.u32 %r15, empty;
    mad.lo.u32 %r15, %r11, 8, %r15;
    mbarrier.arrive.shared::cta.b64 %rd2, [%r15];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 6;
    @%p4 bra CONSUME;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd3, %rd1, %rd3;
    st.global.f32 [%rd3], %f2;
    bra END;
PRODUCER:
    setp.ne.u32 %p5, %r1, 32;
    @%p5 bra END;
PRODUCE:
    and.b32 %r11, %r10, 1;
    shr.u32 %r12, %r10, 1;
    and.b32 %r12, %r12, 1;
    xor.b32 %r12, %r12, 1;                    // wait for the consumers to free the stage
    mov.u32 %r15, empty;
    mad.lo.u32 %r15, %r11, 8, %r15;
PWAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r15], %r12;
    @!%p3 bra PWAIT;
    mov.u32 %r13, full;
    mad.lo.u32 %r13, %r11, 8, %r13;
    mov.u32 %r14, buf;
    mad.lo.u32 %r14, %r11, 128, %r14;
    shl.b32 %r16, %r10, 5;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r13], 128;
    cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r14], [t, {%r16}], [%r13];
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p4, %r10, 6;
    @%p4 bra PRODUCE;
END:
    """
    a = np.arange(6 * 32, dtype=np.float32) * 0.5
    out = np.zeros(32, np.float32)
    text = kernel(body, TMA_PARAMS, ".shared .align 8 .b64 full[2];\n.shared .align 8 .b64 empty[2];\n"
                  ".shared .align 128 .b8 buf[256];")
    sim.launch(text, out, a, tmap(buffer(1), a.shape, a.dtype, (32,)), block=(64, 1, 1))
    np.testing.assert_array_equal(out, a.reshape(6, 32).sum(axis=0))

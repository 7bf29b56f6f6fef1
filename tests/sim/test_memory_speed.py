"""The memory's one-buffer fast path (issue 29): an access whose addresses
all lie in one global buffer (or each thread's own shared window), in bounds
and aligned, is one gather or scatter of whole elements, and a vector one
gather of whole vectors. It must give the bytes, faults and access events
of the element-by-element path (``fastpaths.reference()``)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.sim import SimFault
from jaxptx.sim.core import fastpaths
from jaxptx.sim.core.observers import LOAD, STORE
from jaxptx.sim.memory.spaces import SHARED_WINDOW, Memory

HEAD = ".version 8.5\n.target sm_90a\n.address_size 64\n"

# Each thread: a vector of x at a permuted index -> y at its own index, through
# shared memory (a state-space address and a generic one) on the way.
VECTORS = HEAD + """
.visible .entry k(.param .u64 y, .param .u64 x, .param .u64 perm)
{
    .shared .align 16 .b8 buf[2048];
    .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .f64 %fd<4>; .reg .b16 %h<8>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    ld.param.u64 %rd3, [perm];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd3, %rd4;
    ld.global.u32 %r5, [%rd5];
    mul.wide.u32 %rd6, %r5, 16;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.v4.b32 {%r6, %r7, %r8, %r9}, [%rd7];
    mul.wide.u32 %rd8, %r1, 16;
    mov.u64 %rd9, buf;
    add.s64 %rd10, %rd9, %rd8;
    st.shared.v4.b32 [%rd10], {%r9, %r8, %r7, %r6};
    bar.sync 0;
    cvta.shared.u64 %rd11, %rd10;
    ld.v2.f64 {%fd1, %fd2}, [%rd11];
    ld.shared.v4.u16 {%h1, %h2, %h3, %h4}, [%rd10];
    mul.wide.u32 %rd12, %r4, 16;
    add.s64 %rd13, %rd1, %rd12;
    st.global.v2.f64 [%rd13], {%fd2, %fd1};
    st.v4.b16 [%rd13], {%h4, %h3, %h2, %h1};
    ret;
}
"""


def _vectors(x: np.ndarray, perm: np.ndarray, ctas: int) -> np.ndarray:
    y = np.zeros_like(x)
    sim.launch(VECTORS, y, x, perm, grid=(ctas, 1, 1), block=(128, 1, 1))
    return y


def test_vector_loads_and_stores_give_the_reference_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    gathered = []
    gather = Memory.gather

    def spy(self, *args, **kwargs):
        rows = gather(self, *args, **kwargs)
        gathered.append(rows is not None)
        return rows
    monkeypatch.setattr(Memory, "gather", spy)
    ctas = 3
    n = 128 * ctas
    rng = np.random.default_rng(0)
    # NaN payloads and signalling NaNs among the words: bits, not values, move.
    x = rng.integers(0, 2**32, size=(n, 4), dtype=np.uint32)
    x[::7, 1] = 0x7FA0_0001
    x[::5, 2:] = [0x0000_0001, 0x7FF0_0000]
    perm = rng.permutation(n).astype(np.uint32)
    fast = _vectors(x, perm, ctas)
    assert all(gathered[-4:])              # the vectors took the fast path
    with fastpaths.reference():
        slow = _vectors(x, perm, ctas)
    want = x[perm][:, ::-1].copy()                        # the v4 reversed into shared memory
    # then v2.f64 swapped back: words (1,0) then (3,2) of the reversed vector ...
    halves = want.view(np.uint64)[:, ::-1].copy().view(np.uint32)
    # ... and its first 8 bytes overwritten by the four u16 of the reversed vector, reversed
    shorts = want.view(np.uint16)[:, :4][:, ::-1]
    halves.view(np.uint16)[:, :4] = shorts
    np.testing.assert_array_equal(fast, halves)
    np.testing.assert_array_equal(slow, fast)


def test_a_misaligned_vector_still_faults_as_before() -> None:
    perm = np.arange(128, dtype=np.uint32)
    x = np.zeros((129, 4), np.uint32)
    text = VECTORS.replace("add.s64 %rd7, %rd2, %rd6;", "add.s64 %rd7, %rd2, %rd6;\n    add.s64 %rd7, %rd7, 4;")
    y = np.zeros((128, 4), np.uint32)
    with pytest.raises(SimFault, match=r"ld.global.v4.b32: misaligned 16-byte vector load at 0x[0-9a-f]*0004 "):
        sim.launch(text, y, x, perm, grid=(1, 1, 1), block=(128, 1, 1))


def test_a_vector_past_its_buffer_still_faults_as_before() -> None:
    perm = np.full(128, 64, dtype=np.uint32)         # the vector after the last one of x
    x = np.zeros((64, 4), np.uint32)
    y = np.zeros((128, 4), np.uint32)
    with pytest.raises(SimFault, match=r"ld.global.v4.b32: global access of 4 bytes at offset 0x400 .*out of bounds"):
        _vectors_of(x, perm, y)


def _vectors_of(x: np.ndarray, perm: np.ndarray, y: np.ndarray) -> None:
    sim.launch(VECTORS, y, x, perm, grid=(1, 1, 1), block=(128, 1, 1))


def _memory(n: int = 256) -> tuple[Memory, int, np.ndarray]:
    m = Memory(n // 128, 128, 4096, 0, 0, 0)
    base = m.add_global(1 << 14)
    m.globals[0][:1 << 14] = np.arange(1 << 14, dtype=np.uint32).view(np.uint8)[:1 << 14]
    return m, base, np.arange(n, dtype=np.int64)


def test_gather_takes_only_accesses_the_general_path_cannot_fault_on() -> None:
    m, base, threads = _memory()
    addr = (base + 16 * threads[::-1]).astype(np.uint64)
    rows = m.gather("global", addr, threads, 4, 4)
    np.testing.assert_array_equal(rows, np.arange(1024, dtype=np.uint32).reshape(-1, 4)[255::-1])
    assert m.gather("global", addr + np.uint64(4), threads, 4, 4) is None          # misaligned
    assert m.gather("global", addr + np.uint64(1 << 14), threads, 4, 4) is None    # out of bounds
    two = addr.copy()
    two[0] = np.uint64(2 << 36)                                                      # a second slot
    assert m.gather("global", two, threads, 4, 4) is None
    with fastpaths.reference():
        assert m.gather("global", addr, threads, 4, 4) is None


def test_loads_skip_a_hook_that_ignores_them_and_tell_one_that_listens() -> None:
    m, base, threads = _memory()
    addr = (base + 4 * threads).astype(np.uint64)
    heard = []

    def stores_only(buf, off, ts, width, kind, values=None):
        heard.append(kind)
    stores_only.hears_loads = False
    m.on_access = stores_only
    assert m.hears(STORE) and not m.hears(LOAD)
    np.testing.assert_array_equal(m.load("global", addr, threads, 4), np.arange(256, dtype=np.uint32))
    assert heard == []

    def everything(buf, off, ts, width, kind, values=None):
        heard.append((kind, off.copy(), ts.copy(), width, values))
    m.on_access = everything
    pairs = (base + 8 * threads).astype(np.uint64)
    rows = m.gather("global", pairs - np.uint64(8), threads, 4, 2, offset=8)    # one gather, two events
    np.testing.assert_array_equal(rows, np.arange(512, dtype=np.uint32).reshape(-1, 2))
    fast, heard[:] = heard[:], []
    with fastpaths.reference():
        assert m.gather("global", pairs, threads, 4, 2) is None
        m.load("global", pairs, threads, 4)
        m.load("global", pairs + np.uint64(4), threads, 4)
    assert [h[0] for h in fast] == [h[0] for h in heard] == [LOAD, LOAD]
    for a, b in zip(fast, heard):
        assert a[3] == b[3] == 4 and a[4] is b[4] is None
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])


@pytest.mark.parametrize("space", ["global", "shared", "generic shared"])
def test_a_listener_hears_a_vector_store_as_element_stores(space: str) -> None:
    def events(fast: bool) -> tuple[list, np.ndarray]:
        m, base, threads = _memory()
        buf = m.shared if "shared" in space else m.globals[0]
        heard = []
        # What the buffer holds when each event comes: element i is told before it is written.
        m.on_access = lambda b, off, ts, width, kind, v=None: heard.append(
            (b is buf, off.copy(), ts.copy(), width, kind, v.copy(), v.flags.c_contiguous, buf.copy()))
        if space == "global":
            addr = (base + 16 * threads[::-1]).astype(np.uint64)
        else:
            addr = (16 * (threads % 128)).astype(np.uint64) + np.uint64(SHARED_WINDOW if "generic" in space else 0)
        where = "generic" if "generic" in space else space
        values = np.arange(4 * len(threads), dtype=np.uint32).reshape(-1, 4) * np.uint32(2654435761)
        if fast:
            assert m.scatter(where, addr + np.uint64(32), threads, values, 4, 4, offset=-32)
        else:
            for i in range(4):
                m.store(where, addr + np.uint64(4 * i), threads, np.ascontiguousarray(values[:, i]), 4)
        return heard, buf.copy()

    fast, fast_bytes = events(True)
    with fastpaths.reference():
        slow, slow_bytes = events(False)
    assert len(fast) == len(slow) == 4
    for a, b in zip(fast, slow):
        assert a[0] and b[0] and a[3:5] == b[3:5] == (4, STORE) and a[6] and b[6]
        for x, y in zip(a[1:3] + a[5:6] + a[7:], b[1:3] + b[5:6] + b[7:]):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(fast_bytes, slow_bytes)


def test_a_shared_gather_needs_every_thread_of_the_grid_in_order() -> None:
    m, _, threads = _memory()
    m.shared[:] = np.arange(len(m.shared), dtype=np.uint64).astype(np.uint8)
    addr = (8 * (threads % 128)).astype(np.uint64)
    rows = m.gather("shared", addr, threads, 4, 2)
    words = m.shared.view(np.uint32).reshape(2, -1)
    np.testing.assert_array_equal(rows, words[(threads // 128)[:, None], 2 * (threads % 128)[:, None] + np.arange(2)])
    assert m.gather("shared", addr[:-1], threads[:-1], 4, 2) is None
    assert m.gather("shared", addr, threads, 4, 2) is not None      # the remembered array


OFFSETS = HEAD + """
.visible .entry k(.param .u64 y, .param .u64 x)
{
    .reg .b32 %r<8>; .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [y];
    ld.param.u64 %rd2, [x];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd2, %rd3;
    add.s64 %rd4, %rd4, 16;
    add.s64 %rd5, %rd1, %rd3;
    ld.global.v2.u32 {%r2, %r3}, [%rd4+8];
    ld.global.u32 %r4, [%rd4+-4];
    ld.global.u32 %r5, [%rd4+20];
    st.global.v2.u32 [%rd5+8], {%r3, %r2};
    st.global.u32 [%rd5], %r4;
    st.global.u32 [%rd5+4], %r5;
    ret;
}
"""


def test_address_offsets_fold_into_the_gather_and_the_scatter() -> None:
    x = np.arange(4 * 66, dtype=np.uint32)
    words = x.reshape(-1, 4)

    def run() -> np.ndarray:
        y = np.zeros((64, 4), np.uint32)
        # each thread from x's vector after its own: [%rd4+-4] is the word before it
        sim.launch(OFFSETS, y, x, grid=(1, 1, 1), block=(64, 1, 1))
        return y

    fast = run()
    with fastpaths.reference():
        slow = run()
    want = np.stack([words[:64, 3], words[2:66, 1], words[1:65, 3], words[1:65, 2]], axis=1)
    np.testing.assert_array_equal(fast, want)
    np.testing.assert_array_equal(slow, fast)

"""Each DSL construct crossed with runtime control flow.

A value the DSL materialises on first use (a tensor's ``.ptr``, a raw
``ptx.param``, ``batch_ptr``, a shared array's ``.base`` / ``.desc()``, a TMA
descriptor) is first used inside ``if_`` / ``else_`` / ``range_`` /
``while_`` / a nested mix, on a path some threads never take, then used by
every thread after it; every augmented operator updates a loop-carried
register inside the same constructs. Each kernel is assembled by ptxas for
its target and run on the emulator (``jaxptx.sim.launch``, the layer above
the DSL: the emulator is how the DSL's output is known to compute), and the
result is compared with the same computation in Python.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np
import pytest

from jaxptx import Tile, kernel, ptx, reg, sim, smem
from jaxptx.runtime import ptxas
from jaxptx.types import b32, b64, f32, u16, u32

THREADS = 8
PLACES = ("if", "else", "range", "while", "nested")


def in_place(kind: str, tid, body: Callable[[], None]) -> None:
    """Trace ``body`` inside runtime control flow of kind ``kind``; thread
    ``tid`` runs it ``runs(kind, tid)`` times (none for some threads)."""
    if kind == "if":
        with ptx.if_(tid < 2):
            body()
    elif kind == "else":
        with ptx.if_(tid < 2):
            ptx.comment("then")
        with ptx.else_():
            body()
    elif kind == "range":
        for _ in ptx.range_(0, tid, dtype=u32):
            body()
    elif kind == "while":
        n = reg.scalar(u32, 0)
        for _ in ptx.while_(lambda: n < tid):
            body()
            n += 1
    else:  # nested: an if around a loop around an if
        with ptx.if_(tid != 0):
            for i in ptx.range_(0, tid, dtype=u32):
                with ptx.if_((i & 1) == 0):
                    body()


def runs(kind: str, tid: int) -> int:
    """How many times ``in_place(kind, ...)`` runs its body for thread ``tid``."""
    return {"if": int(tid < 2), "else": int(tid >= 2), "range": tid, "while": tid,
            "nested": (tid + 1) // 2}[kind]


def assemble_and_run(k, *args, **launch) -> str:
    s = k.specialize()
    ptxas(s.ptx, s.target.name)
    sim.launch(k, *args, **launch)
    return s.ptx


def thread_out(y, tid, value, dtype=u32) -> None:
    """``y[tid] = value`` (4-byte elements)."""
    at = y.ptr + ptx.mul.wide.u32(tid, 4)
    ptx.st.global_(dtype, ptx.addr(at), value)


# --- lazily materialised values ---------------------------------------------------

def _lazy_kernel(kind: str, use: Callable, **options):
    """``y[tid] = (runs + 1) * use()``: ``use()`` first inside the control
    flow, then once after it for every thread."""
    @kernel(arch="sm_80", block=(THREADS, 1, 1), name=f"lazy_{kind}", **options)
    def k(x, y):
        tid = ptx.special.tid.x()
        acc = reg.scalar(u32, 0)

        def body() -> None:
            acc.set(acc + use(x))   # an ordinary (non-augmented) update
        in_place(kind, tid, body)
        body()
        thread_out(y, tid, acc)
    return k


SPECS = dict(in_specs=(Tile(THREADS, u32),), out_specs=(Tile(THREADS, u32),))


@pytest.mark.parametrize("kind", PLACES)
def test_tensor_ptr_first_used_in_control_flow(kind: str) -> None:
    k = _lazy_kernel(kind, lambda x: ptx.ld.global_.u32(ptx.addr(x.ptr, 4)), **SPECS)
    x = np.arange(10, 10 + THREADS, dtype=np.uint32)
    y = np.zeros(THREADS, np.uint32)
    text = assemble_and_run(k, x, y)
    want = [(runs(kind, t) + 1) * int(x[1]) for t in range(THREADS)]
    assert y.tolist() == want
    # Emitted once, before the first branch.
    assert text.count("ld.param.u64") == 2
    assert text.index("ld.param.u64") < text.index("bra")


@pytest.mark.parametrize("kind", PLACES)
def test_raw_param_first_used_in_control_flow(kind: str) -> None:
    k = _lazy_kernel(kind, lambda x: ptx.param("step"), raw_params=(("u32", "step"),), **SPECS)
    y = np.zeros(THREADS, np.uint32)
    assemble_and_run(k, np.zeros(THREADS, np.uint32), y, 7)
    assert y.tolist() == [(runs(kind, t) + 1) * 7 for t in range(THREADS)]


@pytest.mark.parametrize("kind", PLACES)
def test_batch_ptr_first_used_in_control_flow(kind: str) -> None:
    k = _lazy_kernel(kind, lambda x: ptx.ld.global_.u32(ptx.addr(x.batch_ptr, 8)), batch="z", **SPECS)
    x = np.arange(3, 3 + THREADS, dtype=np.uint32)
    y = np.zeros(THREADS, np.uint32)
    text = assemble_and_run(k, x, y)
    assert y.tolist() == [(runs(kind, t) + 1) * int(x[2]) for t in range(THREADS)]
    assert text.index("%ctaid.z") < text.index("bra")


def _smem_kernel(kind: str, use: Callable):
    """Shared ``buf[0] = x[0]`` by its symbol, then ``use(buf)`` crossed
    with control flow as in :func:`_lazy_kernel`."""
    @kernel(arch="sm_90a", block=(THREADS, 1, 1), name=f"smem_{kind}", **SPECS)
    def k(x, y):
        tid = ptx.special.tid.x()
        smem.alloc(u32, (4,), name="pad")    # so that buf does not start at address 0
        buf = smem.wgmma_tile(u16, (8, 64), major="K")
        with ptx.if_(tid == 0):
            ptx.st.shared.u32(buf[0, 0], ptx.ld.global_.u32(ptx.addr(x.ptr)))
        ptx.bar.sync(0)
        acc = reg.scalar(u32, 0)

        def body() -> None:
            acc.set(acc + use(buf))
        in_place(kind, tid, body)
        body()
        thread_out(y, tid, acc)
    return k


@pytest.mark.parametrize("kind", PLACES)
def test_smem_base_first_used_in_control_flow(kind: str) -> None:
    k = _smem_kernel(kind, lambda buf: ptx.ld.shared.u32(ptx.addr(buf.base)))
    y = np.zeros(THREADS, np.uint32)
    assemble_and_run(k, np.full(THREADS, 5, np.uint32), y)
    assert y.tolist() == [(runs(kind, t) + 1) * 5 for t in range(THREADS)]


def _descriptor_fields(buf) -> object:
    """LBO>>4 (bits 16-29) + swizzle mode (bits 62-63) of the tile's
    descriptor, + its start address (bits 0-13, << 4) - the tile's address."""
    d = buf.desc()
    lbo = ptx.cvt.u32.u64((d >> 16) & 0x3FFF)
    mode = ptx.cvt.u32.u64(d >> 62)
    start = ptx.cvt.u32.u64((d & 0x3FFF) << 4)
    return lbo + mode + start - ptx.mov.u32(buf.symbol)


@pytest.mark.parametrize("kind", PLACES)
def test_smem_desc_first_used_in_control_flow(kind: str) -> None:
    k = _smem_kernel(kind, _descriptor_fields)
    y = np.zeros(THREADS, np.uint32)
    assemble_and_run(k, np.zeros(THREADS, np.uint32), y)
    # K-major, 128-byte swizzle: LBO 16 (field 1), mode 1.
    assert y.tolist() == [(runs(kind, t) + 1) * 2 for t in range(THREADS)]


@pytest.mark.parametrize("kind", ["if", "nested"])
def test_tma_descriptor_first_used_on_another_threads_path(kind: str) -> None:
    """Thread 1 prefetches the descriptor (its first use); thread 0, which
    never ran that code, copies the tile with it."""
    @kernel(arch="sm_90a", block=(64, 1, 1), in_specs=(Tile(8, 8, f32),),
            out_specs=(Tile(8, 8, f32),), name=f"tma_{kind}")
    def k(x, y):
        tid = ptx.special.tid.x()
        tile = smem.alloc(f32, (8, 8), align=128)
        bar = smem.mbarrier(1)
        if kind == "if":
            with ptx.if_(tid == 1):
                ptx.prefetch.tensormap(ptx.addr(x.tma_desc()))
        else:
            in_place("nested", tid, lambda: ptx.prefetch.tensormap(ptx.addr(x.tma_desc())))
        with ptx.if_(tid == 0):
            ptx.mbarrier.init.shared.b64(bar[0], 1)
            ptx.fence.mbarrier_init.release.cluster()
            ptx.mbarrier.arrive.expect_tx.shared.b64(ptx.SINK, bar[0], 8 * 8 * 4)
            ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile.mbarrier__complete_tx__bytes(
                tile, ptx.addr(x.tma_desc(), coords=(0, 0)), bar[0])
        ptx.bar.sync(0)
        done = reg.pred(init=0)
        for _ in ptx.while_(lambda: ~done):
            ptx.mbarrier.try_wait.parity.shared.b64(done, bar[0], 0)
        v = ptx.ld.shared.f32(tile.base + tid * 4)
        ptx.st.global_.f32(ptx.addr(y.ptr + ptx.mul.wide.u32(tid, 4)), v * 2.0)

    x = np.arange(64, dtype=np.float32).reshape(8, 8) - 20.5
    y = np.zeros((8, 8), np.float32)
    s = k.specialize()
    ptxas(s.ptx, s.target.name)
    (d,) = s.tma
    tmap = sim.ArgTensorMap(d.tensor, d.shape, d.dtype, box=d.box, strides=d.strides, swizzle=d.swizzle)
    sim.launch(k, x, y, tmap)
    np.testing.assert_array_equal(y, x * 2)


# --- augmented operators on loop-carried registers ------------------------------

# (operator, Python function on u32 values, operand: "imm" or "reg")
_INT_OPS = [
    ("+=", operator.add, 3), ("-=", operator.sub, 2), ("*=", operator.mul, 3),
    ("//=", operator.floordiv, 2), ("%=", operator.mod, 1000), ("<<=", operator.lshift, 1),
    (">>=", operator.rshift, 1), ("&=", operator.and_, 0xFFF7), ("|=", operator.or_, 0x100),
    ("^=", operator.xor, 0x5A5A),
]


def _apply(op: str, acc, value):
    # The augmented statement itself, as the user writes it.
    namespace = {"acc": acc, "value": value}
    exec(f"acc {op} value", namespace)
    return namespace["acc"]


@pytest.mark.parametrize("kind", PLACES)
def test_augmented_operators_update_in_place(kind: str) -> None:
    """Each operator, inside the control flow, on a register read after it;
    the operand alternates between an immediate and a register."""
    n = len(_INT_OPS)

    @kernel(arch="sm_80", block=(THREADS, 1, 1), out_specs=(Tile(THREADS, n + 1, u32),),
            name=f"augmented_{kind}")
    def k(y):
        tid = ptx.special.tid.x()
        accs = [reg.scalar(u32, 1000 + 17 * j) for j in range(n)]
        facc = reg.scalar(f32, 1.0)

        def body() -> None:
            for j, (op, _, value) in enumerate(_INT_OPS):
                operand = value if j % 2 == 0 else reg.scalar(u32, value)
                same = accs[j]
                accs[j] = _apply(op, accs[j], operand)
                assert accs[j] is same     # updated in place, not rebound
            nonlocal facc
            facc = _apply("/=", facc, 2.0)
        in_place(kind, tid, body)
        row = y.ptr + ptx.mul.wide.u32(tid, (n + 1) * 4)
        for j, acc in enumerate(accs):
            ptx.st.global_.u32(ptx.addr(row, 4 * j), acc)
        ptx.st.global_.f32(ptx.addr(row, 4 * n), facc)

    y = np.zeros((THREADS, n + 1), np.uint32)
    assemble_and_run(k, y)
    for t in range(THREADS):
        want = []
        for j, (_, fn, value) in enumerate(_INT_OPS):
            acc = 1000 + 17 * j
            for _ in range(runs(kind, t)):
                acc = fn(acc, value) & 0xFFFFFFFF
            want.append(acc)
        assert y[t, :n].tolist() == want, t
        assert y[t, n:].view(np.float32)[0] == 0.5 ** runs(kind, t)


def test_shift_left_four_times_in_a_loop_gives_16() -> None:
    @kernel(arch="sm_80", out_specs=(Tile(1, u32),))
    def k(y):
        r = reg.scalar(u32, 1)
        for _ in ptx.range_(0, 4):
            r <<= 1
        ptx.st.global_.u32(ptx.addr(y.ptr), r)
    y = np.zeros(1, np.uint32)
    text = assemble_and_run(k, y)
    assert y[0] == 16
    assert "shl.b32 %r1, %r1, 1;" in text


def test_register_array_elements_update_in_place() -> None:
    """``frag[i] += x`` writes the element itself (the accumulator idiom)."""
    @kernel(arch="sm_80", block=(THREADS, 1, 1), out_specs=(Tile(THREADS, 4, u32),))
    def k(y):
        tid = ptx.special.tid.x()
        frag = reg.array(u32, 4)
        for j in range(4):
            frag[j].set(j + 1)
        for i in ptx.range_(0, tid, dtype=u32):
            frag[0] += i
            frag[1] *= 2
            frag[2] ^= tid
            frag[3] <<= 1
        row = y.ptr + ptx.mul.wide.u32(tid, 16)
        ptx.st.global_.v4.u32(ptx.addr(row), frag)

    y = np.zeros((THREADS, 4), np.uint32)
    assemble_and_run(k, y)
    for t in range(THREADS):
        assert y[t].tolist() == [1 + sum(range(t)), 2 * 2**t, 3 ^ (t if t % 2 else 0), 4 << t], t


# --- bit-typed registers ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["range", "nested"])
def test_bit_typed_arithmetic(kind: str) -> None:
    """Descriptor-style .b64 / .b32 registers: + - * // % and ordered
    comparisons are written as .u (PTX has no add.b64), in place and not."""
    @kernel(arch="sm_80", block=(THREADS, 1, 1), out_specs=(Tile(THREADS, 6, u32),),
            name=f"bits_{kind}")
    def k(y):
        tid = ptx.special.tid.x()
        d = reg.scalar(b64, 0x4000_0000_0000_0010)
        w = reg.scalar(b32, 0xFFFF_FFF0)
        small = reg.scalar(u32, 0)

        def body() -> None:
            d.set(d + 0x20)
            d.__isub__(1)          # d -= 1 without rebinding the closure's name
            w.__iadd__(w * 2 - 1)
            with ptx.if_(w < 0x8000_0000):
                small.__iadd__(1)
        in_place(kind, tid, body)
        row = y.ptr + ptx.mul.wide.u32(tid, 24)
        ptx.st.global_.b64(ptx.addr(row), d)
        ptx.st.global_.b32(ptx.addr(row, 8), w)
        ptx.st.global_.b32(ptx.addr(row, 12), w // 3)
        ptx.st.global_.b32(ptx.addr(row, 16), -w)
        ptx.st.global_.u32(ptx.addr(row, 20), small)

    y = np.zeros((THREADS, 6), np.uint32)
    text = assemble_and_run(k, y)
    assert ".b64" not in " ".join(l for l in text.splitlines() if l.strip().startswith(("add", "sub")))
    for t in range(THREADS):
        d, w, small = 0x4000_0000_0000_0010, 0xFFFF_FFF0, 0
        for _ in range(runs(kind, t)):
            d = (d + 0x20 - 1) % 2**64
            w = (w + (w * 2 - 1)) % 2**32
            small += w < 0x8000_0000
        got = y[t]
        assert int(got[0]) | int(got[1]) << 32 == d, t
        assert got[2:].tolist() == [w, w // 3, (-w) % 2**32, small], t


# --- one-element vector operands ------------------------------------------------

def test_ldmatrix_x1_single_destination() -> None:
    """ldmatrix .x1 writes one register per thread ({%r}); thread t holds
    row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 of the 8 x 8 matrix."""
    @kernel(arch="sm_80", block=(32, 1, 1), in_specs=(Tile(8, 8, u16),), out_specs=(Tile(32, u32),))
    def k(x, y):
        tid = ptx.special.tid.x()
        m = smem.alloc(u16, (8, 8))
        with ptx.if_(tid < 32):     # 32 threads copy 4 bytes each (m.base's first use)
            v = ptx.ld.global_.u32(ptx.addr(x.ptr + ptx.mul.wide.u32(tid, 4)))
            ptx.st.shared.u32(m.base + tid * 4, v)
        ptx.bar.sync(0)
        d = reg.scalar(b32)
        ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16([d], m.base + (tid & 7) * 16)
        single = ptx.ldmatrix.sync.aligned.m8n8.x1.shared.b16(m.base + (tid & 7) * 16)
        thread_out(y, tid, d + single[0], b32)

    x = (np.arange(64, dtype=np.uint16) * 3 + 1).reshape(8, 8)
    y = np.zeros(32, np.uint32)
    text = assemble_and_run(k, x, y)
    assert "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r" in text
    want = [2 * (int(x[t // 4, 2 * (t % 4)]) | int(x[t // 4, 2 * (t % 4) + 1]) << 16) for t in range(32)]
    assert y.tolist() == want


def test_tcgen05_ld_x1_single_destination_assembles() -> None:
    """tcgen05.ld / st .x1 with one register (the emulator has no tcgen05:
    ptxas is the check here)."""
    @kernel(arch="sm_100a", block=(128, 1, 1))
    def k():
        taddr = reg.scalar(b32, 0)
        r = reg.scalar(b32)
        ptx.tcgen05.ld.sync.aligned._32x32b.x1.b32([r], ptx.addr(taddr))
        alloc = ptx.tcgen05.ld.sync.aligned._32x32b.x1.b32(ptx.addr(taddr + 32))
        ptx.tcgen05.wait__ld.sync.aligned()
        ptx.tcgen05.st.sync.aligned._32x32b.x1.b32(ptx.addr(taddr), alloc)
    s = k.specialize()
    ptxas(s.ptx, s.target.name)
    assert "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r" in s.ptx
    assert "tcgen05.st.sync.aligned.32x32b.x1.b32 [%r1], {%r" in s.ptx

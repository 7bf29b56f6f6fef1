"""jaxptx.sim.Device: device memory that persists, parameters as the bytes
a CUDA launch passes (packed structs holding device addresses, 128-byte
tensor maps) or checked numbers, and every error path. Kernels are
assembled by ptxas for their target."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jaxptx import sim
from jaxptx.runtime import ptxas
from jaxptx.sim import Device, SimError

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"

# CuTe-style: one packed struct of arguments {float* out; float* scale;
# u32 col; u32 row} and a tensor map by value. Thread 0 copies the 16x16
# f32 tile at (row, col) with TMA; every thread scales one element of it.
TILE = HEAD + """.visible .entry tile(.param .align 8 .b8 args[24], .param .align 64 .b8 tmap[128])
{
    .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .f32 %f<4>; .reg .pred %p<3>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 buf[1024];
    ld.param.u64 %rd1, [args];
    ld.param.u64 %rd2, [args+8];
    ld.param.u32 %r2, [args+16];
    ld.param.u32 %r3, [args+20];
    mov.u64 %rd6, tmap;
    cvta.param.u64 %rd5, %rd6;
    mov.u32 %r1, %tid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [bar], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [bar], 1024;
    @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [buf], [%rd5, {%r2, %r3}], [bar];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [bar], 0;
    @!%p2 bra WAIT;
    ld.global.f32 %f2, [%rd2];
    shl.b32 %r4, %r1, 2;
    mov.u32 %r5, buf;
    add.u32 %r5, %r5, %r4;
    ld.shared.f32 %f1, [%r5];
    mul.f32 %f1, %f1, %f2;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd4, %rd1, %rd4;
    st.global.f32 [%rd4], %f1;
    ret;
}
"""

# Every scalar parameter stored to out as 8-byte slots (raw bits).
SCALARS = HEAD + """.visible .entry scalars(.param .u64 out, .param .u32 a, .param .s32 b, .param .b32 c,
    .param .f32 d, .param .f16 e, .param .u64 f, .param .s8 g)
{
    .reg .b16 %h<3>; .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .f32 %f<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [a];
    st.global.u32 [%rd1], %r1;
    ld.param.s32 %r2, [b];
    st.global.s32 [%rd1+8], %r2;
    ld.param.b32 %r3, [c];
    st.global.b32 [%rd1+16], %r3;
    ld.param.f32 %f1, [d];
    st.global.f32 [%rd1+24], %f1;
    ld.param.b16 %h1, [e];
    st.global.b16 [%rd1+32], %h1;
    ld.param.u64 %rd2, [f];
    st.global.u64 [%rd1+40], %rd2;
    ld.param.s8 %h2, [g];
    st.global.s8 [%rd1+48], %h2;
    ret;
}
"""

# out[i] += in[i] for 64 threads (one launch's output feeds the next).
ACCUMULATE = HEAD + """.visible .entry acc(.param .u64 out, .param .u64 inp)
{
    .reg .b32 %r<4>; .reg .b64 %rd<6>; .reg .f32 %f<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [inp];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    ld.global.f32 %f2, [%rd5];
    add.f32 %f1, %f1, %f2;
    st.global.f32 [%rd4], %f1;
    ret;
}
"""


@pytest.fixture(scope="module", autouse=True)
def _assembled() -> None:
    for text in (TILE, SCALARS, ACCUMULATE):
        ptxas(text, "sm_90a")


def test_packed_struct_params_and_a_tensor_map_at_device_addresses() -> None:
    """The struct holds device addresses (one inside an allocation); the
    tensor map describes memory the previous launch wrote, at an offset
    into a larger allocation; every result checked against numpy."""
    dev = Device()
    a = np.arange(48 * 64, dtype=np.float32).reshape(48, 64)
    a_dev = dev.to_device(a)
    work = dev.alloc(4096)                   # [1024, 1028): the scale; [2048, 3072): the first tile
    dev.write(work + 1024, np.float32([3.0]))
    args = struct.pack("<QQII", work + 2048, work + 1024, 8, 4)     # out, scale, col, row
    tmap = sim.tensor_map(a_dev, a.shape, a.dtype, (16, 16))
    dev.launch(TILE, [args, tmap], block=256)
    first = dev.from_device(work + 2048, like=np.zeros((16, 16), np.float32))
    np.testing.assert_array_equal(first, a[4:20, 8:24] * 3)
    # second launch: a tensor map over the first launch's 16x16 output, inside an allocation
    out2 = dev.alloc(1024)
    tmap2 = sim.tensor_map(work + 2048, (16, 16), np.float32, (16, 16))
    dev.launch(TILE, [struct.pack("<QQII", out2, work + 1024, 0, 0), tmap2], block=256)
    np.testing.assert_array_equal(dev.from_device(out2, like=first), a[4:20, 8:24] * 9)
    assert [p.size for p in dev.param_info(TILE)] == [24, 128]


def test_memory_persists_across_launches_and_copies() -> None:
    dev = Device()
    x = np.arange(64, dtype=np.float32)
    acc = dev.alloc(x.nbytes)
    inp = dev.to_device(x)
    for _ in range(3):
        dev.launch(ACCUMULATE, [acc, inp], block=64)
    np.testing.assert_array_equal(dev.from_device(acc, like=x), 3 * x)
    other = dev.alloc(x.nbytes)
    dev.copy(other, acc, x.nbytes)
    dev.memset(acc, 0, x.nbytes)
    np.testing.assert_array_equal(dev.from_device(other, like=x), 3 * x)
    assert dev.read(acc, 8) == bytes(8)
    dev.free(other)
    fresh = dev.alloc(16)                 # a freed range is not handed out again
    assert fresh > other and dev.read(fresh, 16) == bytes(16)


def test_scalar_params_land_with_their_types() -> None:
    dev = Device()
    out = dev.alloc(56)
    dev.launch(SCALARS, [out, 2**32 - 1, -7, -1, 2.5, np.float16(-0.5), 2**64 - 1, -128])
    raw = dev.read(out, 56)
    assert struct.unpack_from("<I", raw, 0)[0] == 2**32 - 1
    assert struct.unpack_from("<i", raw, 8)[0] == -7
    assert struct.unpack_from("<I", raw, 16)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<f", raw, 24)[0] == 2.5
    assert struct.unpack_from("<e", raw, 32)[0] == -0.5
    assert struct.unpack_from("<Q", raw, 40)[0] == 2**64 - 1
    assert struct.unpack_from("<b", raw, 48)[0] == -128
    # bytes of the exact size work for a scalar too
    dev.launch(SCALARS, [out, struct.pack("<I", 5), 0, 0, 0.0, 0.0, 0, 0])
    assert struct.unpack_from("<I", dev.read(out, 4))[0] == 5


@pytest.mark.parametrize("index, value, message", [
    (1, 2**40 + 5, r"scalars parameter 1 \(a\) \(.u32, 4 bytes\): 1099511627781 is outside 0..4294967295"),
    (1, -1, r"parameter 1 \(a\) \(.u32, 4 bytes\): -1 is outside 0..4294967295"),
    (1, 3.7, r"parameter 1 \(a\) \(.u32, 4 bytes\): expected an int, got float 3.7"),
    (1, True, r"parameter 1 \(a\) \(.u32, 4 bytes\): expected an int or 4 bytes, got bool"),
    (2, -2**31 - 1, r"parameter 2 \(b\) \(.s32, 4 bytes\): -2147483649 is outside -2147483648..2147483647"),
    (3, 2**32, r"parameter 3 \(c\) \(.b32, 4 bytes\): 4294967296 is outside -2147483648..4294967295"),
    (4, "1.0", r"parameter 4 \(d\) \(.f32, 4 bytes\): expected a real number or 4 bytes, got str"),
    (6, b"\0" * 4, r"parameter 6 \(f\) \(.u64, 8 bytes\): expected exactly 8 bytes, got 4"),
    (7, 128, r"parameter 7 \(g\) \(.s8, 1 bytes\): 128 is outside -128..127"),
    (0, np.zeros(2, np.uint32), r"parameter 0 \(out\) .*got a uint32 array of shape \(2,\) \(pass array.tobytes"),
])
def test_bad_scalar_params_name_the_param(index: int, value, message: str) -> None:
    dev = Device()
    params = [dev.alloc(56), 0, 0, 0, 0.0, 0.0, 0, 0]
    params[index] = value
    with pytest.raises(SimError, match=message):
        dev.launch(SCALARS, params)


def test_bad_struct_params_and_param_counts() -> None:
    dev = Device()
    tmap = sim.tensor_map(dev.alloc(48 * 64 * 4), (48, 64), np.float32, (16, 16))
    with pytest.raises(SimError, match=r"tile takes 2 parameters \(.b8 args, .b8 tmap\), got 1"):
        dev.launch(TILE, [bytes(24)])
    with pytest.raises(SimError, match=r"tile parameter 0 \(args\) \(.b8, 24 bytes\): expected exactly 24 bytes, got 16"):
        dev.launch(TILE, [bytes(16), tmap])
    with pytest.raises(SimError, match=r"tile parameter 1 \(tmap\) \(.b8, 128 bytes\): expected 128 bytes "
                                       r"\(bytes, bytearray or memoryview\), got int"):
        dev.launch(TILE, [bytes(24), 5])
    with pytest.raises(SimError, match=r"tile: params must be a list with one item per .param, got bytes"):
        dev.launch(TILE, bytes(24))


def test_addresses_not_from_the_device_and_out_of_bounds() -> None:
    dev = Device()
    a = dev.to_device(np.arange(4, dtype=np.int32))
    with pytest.raises(SimError, match=r"read: 0x1234 is not an address on this device"):
        dev.read(0x1234, 4)
    with pytest.raises(SimError, match=r"read: 20 bytes at 0x1000000000 go past the end of the allocation at "
                                       r"0x1000000000 \(16 bytes; the access starts at offset 0\)"):
        dev.read(a, 20)
    with pytest.raises(SimError, match=r"from_device: 32 bytes at 0x1000000000 go past the end"):
        dev.from_device(a, like=np.zeros(8, np.int32))
    with pytest.raises(SimError, match=r"write: 4 bytes at 0x1000000010 go past the end"):
        dev.write(a + 16, b"abcd")
    with pytest.raises(SimError, match=r"from_device: expected a device address \(an int\), got str"):
        dev.from_device("a", like=np.zeros(1))
    with pytest.raises(SimError, match=r"from_device: like must have a shape and a dtype"):
        dev.from_device(a, like=[1, 2])
    with pytest.raises(SimError, match=r"free: 0x1000000004 is inside the allocation at 0x1000000000, not its start"):
        dev.free(a + 4)
    with pytest.raises(SimError, match=r"alloc: nbytes must be an int in 0..2\*\*36, got -1"):
        dev.alloc(-1)
    with pytest.raises(SimError, match=r"to_device: expected a numpy array or bytes, got list"):
        dev.to_device([1, 2])
    with pytest.raises(SimError, match=r"memset: value must be a byte 0..255, got 256"):
        dev.memset(a, 256, 4)
    dev.free(a)
    with pytest.raises(SimError, match=r"read: 0x1000000000 is in the allocation at 0x1000000000, which was freed "
                                       r"\(a use after free\)"):
        dev.read(a, 4)
    with pytest.raises(SimError, match=r"free: 0x1000000000 is in the allocation at 0x1000000000, which was freed"):
        dev.free(a)
    with pytest.raises(SimError, match=r"read: 0x1000000000 is not an address on this device"):
        Device().read(a, 4)             # another device's address


def test_kernel_access_outside_an_allocation_faults() -> None:
    dev = Device()
    acc = dev.alloc(64 * 4)
    inp = dev.alloc(32 * 4)                          # too small for 64 threads
    with pytest.raises(sim.SimFault, match=r"^kernel acc: ld.global.f32: global access of 4 bytes at offset "
                                           r"0x80 of parameter 'inp' is out of bounds \(its buffer has 128 bytes; "
                                           r"CTA 0, thread 32\) \[PTX line 14: ld.global.f32 %f2, \[%rd5\];\]$"):
        dev.launch(ACCUMULATE, [acc, inp], block=64)
    dev.free(inp)
    with pytest.raises(sim.SimFault, match=r"ld.global.f32: address 0x2000000000 is in the allocation at "
                                           r"0x2000000000, which was freed \(a use after free; CTA 0, thread 0\) "
                                           r"\[PTX line 14: "):
        dev.launch(ACCUMULATE, [acc, inp], block=64)      # a freed allocation


def test_module_globals_persist_and_have_addresses() -> None:
    text = HEAD + """.global .align 4 .u32 counter = 40;
.visible .entry bump(.param .u64 out)
{
    .reg .b32 %r<3>; .reg .b64 %rd<2>;
    ld.global.u32 %r1, [counter];
    add.u32 %r1, %r1, 1;
    st.global.u32 [counter], %r1;
    ld.param.u64 %rd1, [out];
    st.global.u32 [%rd1], %r1;
    ret;
}
"""
    ptxas(text, "sm_90a")
    dev = Device()
    out = dev.alloc(4)
    assert not dev.holds_module_globals
    dev.launch(text, [out])
    assert dev.holds_module_globals
    dev.launch(text, [out])
    assert dev.read(out, 4) == struct.pack("<I", 42)
    counter = dev.global_address(text, "counter")
    assert dev.read(counter, 4) == struct.pack("<I", 42)
    with pytest.raises(SimError, match=r"free: 0x[0-9a-f]+ holds a module's global variables"):
        dev.free(counter)
    with pytest.raises(SimError, match=r"global_address: bump's module has no .global variable 'nope' "
                                       r"\(it has: counter\)"):
        dev.global_address(text, "nope")


def test_bad_launch_arguments() -> None:
    dev = Device()
    acc, inp = dev.alloc(256), dev.alloc(256)
    with pytest.raises(SimError, match=r"block\.x = 2048 exceeds CUDA.s limit of 1024"):
        dev.launch(ACCUMULATE, [acc, inp], block=2048)
    with pytest.raises(SimError, match=r"smem: expected a byte count >= 0, got -4"):
        dev.launch(ACCUMULATE, [acc, inp], smem=-4)
    with pytest.raises(SimError, match=r"launch max_steps: expected an int >= 1, got 0"):
        dev.launch(ACCUMULATE, [acc, inp], max_steps=0)
    with pytest.raises(SimError, match=r"acc: more than 3 steps"):
        dev.launch(ACCUMULATE, [acc, inp], max_steps=3)
    with pytest.raises(SimError, match=r"expected PTX text or a jaxptx.ir.Module, got bytes"):
        dev.launch(ACCUMULATE.encode(), [acc, inp])
    with pytest.raises(SimError, match=r"no kernel 'other' in the module; kernels: acc"):
        dev.launch(ACCUMULATE, [acc, inp], kernel="other")
    with pytest.raises(SimError, match=r"Device: arch: expected a target like 'sm_80'"):
        Device(arch="hopper")


def test_launches_past_cuda_limits_or_host_memory_are_refused_before_running():
    from jaxptx.errors import LaunchError
    from jaxptx.sim import SimLaunchError
    text = """.version 8.5
.target sm_80
.address_size 64
.visible .entry k()
{
  ret;
}
"""
    cases = [(dict(grid=(1, 70000, 1)), r"grid\.y = 70000 exceeds CUDA's limit of 65535"),
             (dict(block=(1, 1, 128)), r"block\.z = 128 exceeds CUDA's limit of 64"),
             (dict(grid=(2, 1, 1), cluster=(2, 1, 1)), r"cluster"),
             (dict(smem=10**9), r"smem = 1000000000 bytes"),
             (dict(grid=(2**31 - 1, 1, 1), block=(1024, 1, 1)), r"GiB of emulator state .* this host has")]
    for kw, match in cases:
        with pytest.raises(SimLaunchError, match=match) as info:
            sim.Device().launch(text, [], **kw)
        assert isinstance(info.value, LaunchError) and isinstance(info.value, sim.SimError)


def test_launching_a_kernel_object_uses_its_cluster():
    from jaxptx import Tile, kernel, ptx, reg
    from jaxptx.types import u32

    @kernel(out_specs=(Tile(4, u32),), grid=(4, 1, 1), block=(1, 1, 1), cluster=(2, 1, 1), arch="sm_90a")
    def ranks(out):
        cta = reg.from_(ptx.special.ctaid.x(), u32)
        ptx.st.global_.u32(ptx.addr(out.ptr + ptx.mul.wide.u32(cta, 4)),
                           reg.from_(ptx.special.cluster_nctarank(), u32))
        ptx.ret()

    out = np.zeros(4, np.uint32)
    sim.launch(ranks, out)
    np.testing.assert_array_equal(out, 2)


STORES = HEAD + """.visible .entry stores(.param .u64 out)
{
    .reg .b16 %rs<2>; .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.b16 %rs1, 7;
    mov.b32 %r2, 9;
    st.global.u8 [%rd1+1], %rs1;
    st.global.u16 [%rd1+4], %rs1;
    st.global.u32 [%rd1+8], %r2;
    st.global.v4.u32 [%rd1+32], {%r2, %r2, %r2, %r2};
    mov.b64 %rd2, 5;
    st.global.u64 [%rd1+56], %rd2;
    atom.global.exch.b32 %r3, [%rd1+64], %r2;
DONE:
    ret;
}
"""


def test_track_stores_records_the_bytes_plain_stores_write() -> None:
    """What the JAX CPU path uses to tell written output bytes from ones
    still holding its sentinel: every byte a plain store wrote, whatever its
    width; atomics are not recorded; nothing before track_stores."""
    ptxas(STORES, "sm_90a")
    dev = Device()
    out = dev.alloc(80)
    dev.launch(STORES, [out], block=32)
    assert not dev.stored(out, 80).any()            # not tracking yet
    dev.track_stores()
    dev.launch(STORES, [out], block=32)
    want = np.zeros(80, bool)
    for start, width in [(1, 1), (4, 2), (8, 4), (32, 16), (56, 8)]:
        want[start:start + width] = True
    np.testing.assert_array_equal(dev.stored(out, 80), want)
    np.testing.assert_array_equal(dev.stored(out + 30, 4), want[30:34])
    np.testing.assert_array_equal(dev.written(out, 80), want | (np.arange(80) // 4 == 16))   # the atomic too
    dev.free(out)
    again = dev.alloc(80)                            # a fresh range: nothing stored yet
    assert again != out and not dev.stored(again, 80).any() and not dev.written(again, 80).any()
    with pytest.raises(SimError, match="stored: .* go past the end of the allocation"):
        dev.stored(again, 81)


def test_a_launch_travels_whole():
    """``Device.launch(launch=Launch(...))`` runs the shape as given (the
    CPU path hands the call's Launch over unchanged); giving it beside
    grid/block is an error, and the program's own limits still apply."""
    from jaxptx.launch import Launch
    from elementwise import SCALE_PTX
    dev = sim.Device()
    x = dev.to_device(np.arange(8, dtype=np.float32))
    dev.launch(SCALE_PTX, [x, 3.0], launch=Launch((1, 1, 1), (8, 1, 1)))
    np.testing.assert_array_equal(dev.from_device(x, like=np.zeros(8, np.float32)), 3 * np.arange(8))
    with pytest.raises(sim.SimError, match="give launch= or grid/block/cluster/smem, not both"):
        dev.launch(SCALE_PTX, [x, 3.0], block=8, launch=Launch((1, 1, 1), (8, 1, 1)))
    with pytest.raises(sim.SimLaunchError, match="cluster = .* needs sm_90 or newer"):
        sm80 = SCALE_PTX.replace("sm_90a", "sm_80")
        dev.launch(sm80, [x, 3.0], launch=Launch((2, 1, 1), (8, 1, 1), (2, 1, 1)))

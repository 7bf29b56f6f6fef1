"""``jaxptx.jax.cuda_call``: CUDA C++ compiled by NVRTC, run on the CPU by the emulator.

Each kernel is checked three ways: the emulator's numbers against numpy
(under ``jax.jit``), ptxas accepting the PTX the call carries (its
``.version`` lowered from NVRTC's), and the CUDA lowering carrying it.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx.errors import PtxTargetError, SpecError
from jaxptx.jax import CudaCompileError, Output, cuda_call
from jaxptx.jax._cuda_call import lowered_version
from jaxptx.runtime import _nvrtc, ptxas

RNG = np.random.default_rng(7)


def f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def carried_ptx(f, *args) -> str:
    """The PTX the one custom call of ``jax.jit(f)`` carries."""
    spec, = jaxptx.jax.kernels_in(jax.jit(f).lower(*args)).values()
    return spec.ptx


def assembles(ptx: str) -> None:
    target = re.search(r"^\.target (sm_\w+)", ptx, re.MULTILINE).group(1)
    assert ptxas(ptx, target).cubin[:4] == b"\x7fELF"


# ---- kernels, each against numpy

AXPY = r"""
extern "C" __global__ void axpy(const float* x, const float* y, float alpha, int n, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}
"""


def axpy(x, y, alpha=2.5):
    n = x.shape[0]
    return cuda_call(AXPY, x, y, alpha, n, out_shape=f32(n), grid=(n + 127) // 128, block=128)


def test_an_extern_c_kernel_with_scalars():
    x, y = RNG.standard_normal((2, 1000)).astype(np.float32)
    np.testing.assert_allclose(jax.jit(axpy)(x, y), 2.5 * x + y, rtol=1e-6, atol=1e-6)
    ptx = carried_ptx(axpy, x, y)
    # NVRTC 13.x writes its own release's PTX ISA (9.x); the call lowers it
    assert re.search(r"^\.version 8\.5  // NVRTC wrote \.version \d+\.\d+; jaxptx\.jax\.cuda_call "
                     r"lowered it", ptx, re.MULTILINE), ptx[:400]
    assert "\n.target sm_90a\n" in ptx          # arch=None without a GPU: arch="auto"'s fallback
    assembles(ptx)


def test_the_cuda_lowering_carries_the_nvrtc_ptx():
    x = np.ones(256, np.float32)
    text = jax.jit(axpy).trace(x, x).lower(lowering_platforms=("cuda",)).as_text()
    m = re.search(r"stablehlo\.custom_call @jaxptx_launch_v2\(%arg0, %arg1\) \{.*?"
                  r"mhlo\.backend_config = \{(.*?)\}, operand_layouts", text)
    assert m, text
    assert 'entry = "axpy"' in m.group(1) and r"\0A.version 8.5 " in m.group(1)


SCALE = r"""
namespace ops {
template <typename T, int K>
__global__ void scale(const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * T(K);
}
}  // namespace ops
"""


@pytest.mark.parametrize("dtype,ctype", [(np.float32, "float"), (np.float64, "double"),
                                         (np.int32, "int")])
def test_a_template_by_its_name_expression(dtype, ctype):
    x = (RNG.standard_normal(200) * 100).astype(dtype)
    f = jax.jit(lambda x: cuda_call(SCALE, x, Output(0), 200, kernel=f"ops::scale<{ctype}, 3>",
                                    out_shape=jax.ShapeDtypeStruct((200,), dtype),
                                    grid=2, block=128))
    with jax.enable_x64(True):          # float64 arrays stay float64
        np.testing.assert_array_equal(f(x), x * dtype(3))
        ptx = carried_ptx(f, x)
    assert re.search(r"\.entry _ZN3ops5scaleI\w+Li3EEEvPKT_PS\d?_i\(", ptx), ptx
    assembles(ptx)


WARP_SUM = r"""
extern "C" __global__ void warp_sum(const float* x, float* sums) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) sums[i / 32] = v;
}
"""


def test_a_warp_reduction_with_shfl_down_sync():
    x = RNG.standard_normal(256).astype(np.float32)
    out = jax.jit(lambda x: cuda_call(WARP_SUM, x, out_shape=f32(8), grid=2, block=128))(x)
    np.testing.assert_allclose(out, x.reshape(8, 32).sum(1), rtol=1e-5, atol=1e-5)


SHARED = r"""
extern "C" __global__ void reverse_static(const float* x, float* y) {
    __shared__ float tile[128];
    int base = blockIdx.x * 128;
    tile[threadIdx.x] = x[base + threadIdx.x];
    __syncthreads();
    y[base + threadIdx.x] = tile[127 - threadIdx.x];
}

extern "C" __global__ void rotate_dynamic(const float* x, float* y, int shift) {
    extern __shared__ float buf[];
    int n = blockDim.x, base = blockIdx.x * n;
    buf[threadIdx.x] = x[base + threadIdx.x];
    __syncthreads();
    y[base + threadIdx.x] = buf[(threadIdx.x + n + shift) % n];
}
"""


def test_static_and_dynamic_shared_memory():
    x = RNG.standard_normal(512).astype(np.float32)
    rev = jax.jit(lambda x: cuda_call(SHARED, x, kernel="reverse_static", out_shape=f32(512),
                                      grid=4, block=128))(x)
    np.testing.assert_array_equal(rev, x.reshape(4, 128)[:, ::-1].ravel())
    # an int is a .u32 param (NVVM's): a negative one passes as its two's complement
    rot = jax.jit(lambda x: cuda_call(SHARED, x, Output(0), -5, kernel="rotate_dynamic",
                                      out_shape=f32(512), grid=2, block=256, smem=256 * 4))(x)
    np.testing.assert_array_equal(rot, np.roll(x.reshape(2, 256), 5, axis=1).ravel())


CUB_SUM = r"""
#include <cub/block/block_reduce.cuh>

extern "C" __global__ void block_sum(const float* x, float* sums) {
    using BlockReduce = cub::BlockReduce<float, 128>;
    __shared__ typename BlockReduce::TempStorage temp;
    float total = BlockReduce(temp).Sum(x[blockIdx.x * 128 + threadIdx.x]);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}
"""


def test_a_cub_block_reduce():
    x = RNG.standard_normal(384).astype(np.float32)
    f = jax.jit(lambda x: cuda_call(CUB_SUM, x, out_shape=f32(3), grid=3, block=128))
    np.testing.assert_allclose(f(x), x.reshape(3, 128).sum(1), rtol=1e-5, atol=1e-5)
    assembles(carried_ptx(f, x))


CG_SUM = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void tile_sums(const int* x, int* sums) {
    auto tile = cg::tiled_partition<16>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int total = cg::reduce(tile, x[i], cg::plus<int>());
    if (tile.thread_rank() == 0) sums[i / 16] = total;
}
"""


def test_cooperative_groups_reduce_over_tiles():
    x = RNG.integers(-1000, 1000, 256).astype(np.int32)
    out = jax.jit(lambda x: cuda_call(CG_SUM, x, out_shape=jax.ShapeDtypeStruct((16,), jnp.int32),
                                      grid=2, block=128))(x)
    np.testing.assert_array_equal(out, x.reshape(16, 16).sum(1))


MIX64 = r"""
extern "C" __global__ void mix64(const unsigned long long* x, long long offset,
                                 unsigned long long* y) {
    unsigned long long z = x[threadIdx.x] + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    y[threadIdx.x] = (z ^ (z >> 31)) + (unsigned long long)offset;
}
"""


def test_64_bit_integers_and_a_64_bit_scalar():
    x = RNG.integers(0, 2**63, 64, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with jax.enable_x64(True):          # uint64 arrays stay uint64
        out = jax.jit(lambda x: cuda_call(MIX64, x, np.int64(-(2**40)), Output(0), grid=1,
                                          block=64,
                                          out_shape=jax.ShapeDtypeStruct((64,), jnp.uint64)))(x)
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        want = (z ^ (z >> np.uint64(31))) - np.uint64(2**40)
    np.testing.assert_array_equal(np.asarray(out), want)


PRINTF = r"""
extern "C" __global__ void show(const float* x, int* y) {
    printf("thread %d of block %d: %.2f\n", threadIdx.x, blockIdx.x, x[threadIdx.x]);
    y[threadIdx.x] = threadIdx.x;
}
"""


def test_printf_prints_on_the_cpu(capsys):
    x = np.array([0.5, 1.25, -2.0, 3.0], np.float32)
    out = jax.jit(lambda x: cuda_call(PRINTF, x, grid=1, block=4,
                                      out_shape=jax.ShapeDtypeStruct((4,), jnp.int32)))(x)
    np.testing.assert_array_equal(out, np.arange(4))
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"thread {t} of block 0: {v:.2f}" for t, v in enumerate(x)]


# ---- errors

def test_a_compile_error_names_the_line_and_shows_it():
    bad = ('extern "C" __global__ void k(float* y) {\n'
           "    float v = 1.0f;\n"
           "    y[threadIdx.x] = v * undefined_scale;\n"
           "}\n")
    with pytest.raises(CudaCompileError, match=re.escape(
            "NVRTC could not compile cuda_call.cu (--gpu-architecture=compute_80): 1 error(s)\n"
            'cuda_call.cu(3): error: identifier "undefined_scale" is undefined\n'
            "       3 |     y[threadIdx.x] = v * undefined_scale;\n"
            "         |                          ^")) as info:
        cuda_call(bad, out_shape=f32(32), grid=1, block=32, arch="sm_80")
    assert info.value.log.startswith("cuda_call.cu(3): error")
    assert [(d.line, d.column, d.severity) for d in info.value.diagnostics] == [(3, 26, "error")]
    assert isinstance(info.value, jaxptx.errors.ToolchainError)


def test_a_missing_header_says_where_it_looked():
    with pytest.raises(CudaCompileError, match=r"open source file \"nothere\.h\"\n"
                                               r"\s+1 \| #include <nothere\.h>\n.*\n"
                                               r"\(include_dirs searched: \[.*cccl"):
        cuda_call("#include <nothere.h>\n", out_shape=f32(1), grid=1, block=1)


def test_bad_options_kernels_and_targets():
    x = np.ones(32, np.float32)
    with pytest.raises(CudaCompileError, match=r"NVRTC refused the options \[.*'--no-such-flag'.*\]: "
                                               r"nvrtc: error: unrecognized option --no-such-flag found"):
        cuda_call(AXPY, x, x, 1.0, 32, out_shape=f32(32), grid=1, block=32,
                  options=("--no-such-flag",))
    with pytest.raises(SpecError, match=r"cuda_call: options: '-arch=sm_80' chooses the target, "
                                        r"which is cuda_call's arch="):
        cuda_call(AXPY, x, x, 1.0, 32, out_shape=f32(32), grid=1, block=32, options=("-arch=sm_80",))
    with pytest.raises(SpecError, match=r"cuda_call: options: expected a sequence of str"):
        cuda_call(AXPY, x, out_shape=f32(32), grid=1, block=32, options="-DX=1")
    device = '__device__ float twice(float v) { return 2 * v; }\n' + AXPY
    with pytest.raises(CudaCompileError, match=r"__nv_name_map\(2\): error: Name expression "
                                               r"cannot form address of a non-__global__"):
        cuda_call(device, x, x, 1.0, 32, kernel="twice", out_shape=f32(32), grid=1, block=32)
    with pytest.raises(CudaCompileError, match=r'identifier "nope" is undefined'):
        cuda_call(AXPY, x, x, 1.0, 32, kernel="nope", out_shape=f32(32), grid=1, block=32)
    with pytest.raises(SpecError, match=r"cuda_call: the source defines 2 kernels \(reverse_static, "
                                        r"rotate_dynamic\); pick one with kernel='name'"):
        cuda_call(SHARED, x, out_shape=f32(32), grid=1, block=32)
    with pytest.raises(SpecError, match=r"cuda_call: the source defines 0 kernels \(none "
                                        r"instantiated\); pick one with kernel='name', a C\+\+ "
                                        r"name expression \('scale<float>' instantiates"):
        cuda_call(SCALE, x, Output(0), 32, out_shape=f32(32), grid=1, block=32)
    with pytest.raises(SpecError, match=r"ptx_call rotate_dynamic: param 2 rotate_dynamic_param_2 "
                                        r"\(\.u32\): -2147483649 is outside 0\.\.4294967295"):
        cuda_call(SHARED, x, Output(0), -2**31 - 1, kernel="rotate_dynamic", out_shape=f32(32),
                  grid=1, block=32, smem=128)          # past an int's range too
    with pytest.raises(SpecError, match=r"cuda_call: include_dirs: '/no/such/dir' is not a "
                                        r"directory"):
        cuda_call(AXPY, x, x, 1.0, 32, out_shape=f32(32), grid=1, block=32,
                  include_dirs=("/no/such/dir",))
    with pytest.raises(PtxTargetError, match=r"arch: expected a target like 'sm_80'"):
        cuda_call(AXPY, x, x, 1.0, 32, out_shape=f32(32), grid=1, block=32, arch="hopper")
    with pytest.raises(SpecError, match=r"ptx_call axpy: param 3 axpy_param_3 \(\.u32\): expected "
                                        r"a \.u32 value"):
        cuda_call(AXPY, x, x, 1.0, x, out_shape=f32(32), grid=1, block=32)


def test_arch_and_the_jaxptx_arch_variable(monkeypatch):
    x = np.ones(128, np.float32)
    def on_sm80(x):
        return cuda_call(AXPY, x, x, 1.0, 128, out_shape=f32(128), grid=1, block=128, arch="sm_80")

    assert "\n.target sm_80\n" in carried_ptx(on_sm80, x)
    monkeypatch.setenv("JAXPTX_ARCH", "sm_89")
    assert "\n.target sm_89\n" in carried_ptx(axpy, x, x)


# ---- the PTX version and the cache

def test_the_version_is_lowered_only_as_far_as_the_instructions_allow():
    head = ".version 9.5\n.target {}\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{\n"
    plain = head.format("sm_90a") + "\tret;\n}\n"
    assert lowered_version(plain).startswith(".version 8.5  // NVRTC wrote .version 9.5")
    # a three-input max needs PTX 8.8: 9.0 is as low as it goes
    max3 = head.format("sm_100a") + ("\t.reg .f32 %f<5>;\n\tmax.f32 %f1, %f2, %f3, %f4;\n"
                                     "\tret;\n}\n")
    assert lowered_version(max3).startswith(".version 9.0  // NVRTC wrote .version 9.5")
    old = plain.replace("9.5", "8.0")
    assert lowered_version(old) is old


CACHED = r"""
#include "cached_value.h"
extern "C" __global__ void fill(int* y) { y[threadIdx.x] = VALUE + threadIdx.x; }
"""


def test_the_ptx_is_cached_in_memory_and_on_disk(tmp_path, monkeypatch):
    from cuda.bindings import nvrtc
    compiles = []
    real = nvrtc.nvrtcCompileProgram
    monkeypatch.setattr(nvrtc, "nvrtcCompileProgram",
                        lambda *a: compiles.append(1) or real(*a))
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path / "cache"))
    headers = tmp_path / "include"
    headers.mkdir()
    (headers / "cached_value.h").write_text("#define VALUE 100\n")

    def fill():
        return cuda_call(CACHED, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), grid=1, block=8,
                         include_dirs=(headers,))

    np.testing.assert_array_equal(fill(), 100 + np.arange(8))
    assert len(compiles) == 1
    fill()
    assert len(compiles) == 1                                   # in memory
    _nvrtc._memoized.cache_clear()
    np.testing.assert_array_equal(fill(), 100 + np.arange(8))
    assert len(compiles) == 1                                   # on disk
    assert len(list((tmp_path / "cache" / "nvrtc").glob("*/*.nvrtc"))) == 1
    (headers / "cached_value.h").write_text("#define VALUE 7000\n")    # another size
    np.testing.assert_array_equal(fill(), 7000 + np.arange(8))
    assert len(compiles) == 2                                   # an edited header compiles again
    cuda_call(CACHED, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), grid=1, block=8,
              include_dirs=(str(headers),), options=("-DUNUSED=1",))
    assert len(compiles) == 3                                   # so do other options


def test_without_nvrtc_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(_nvrtc, "nvrtc_version", lambda: None)
    _nvrtc._compiler.cache_clear()
    try:
        with pytest.raises(jaxptx.errors.ToolchainError,
                           match=re.escape("NVRTC (libnvrtc) not found; pip install "
                                           "'jaxptx[nvrtc]'")):
            _nvrtc.compile_cuda(AXPY, "sm_90a", cache=False)
    finally:
        _nvrtc._compiler.cache_clear()     # the real NVRTC again, for later tests

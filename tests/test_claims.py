"""Claims of README.md and docs/guides/*.md about errors and detection that
no other test held (issue #30, item 5): each test names the claim it holds
(file and the words), and fails if the claim stops being true.

The other claims of that kind are held where their layer is tested; the
table of claim -> test is in the issue's thread.
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxptx
from jaxptx import Tile, kernel, kernels, ptx, reg, sim, smem
from jaxptx.errors import PtxTargetError, SpecError
from jaxptx.types import f32, u32, u64

ROOT = pathlib.Path(__file__).resolve().parents[1]
HERE = pathlib.Path(__file__).name


def _line(fn, needle: str) -> int:
    """The line of ``fn``'s source that holds ``needle``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if needle in text)


# --- README "Errors at trace time, at your line": the PtxTargetError sample ------------------

def test_an_instruction_the_target_lacks_reads_as_the_readme_sample() -> None:
    """README: ``PtxTargetError: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
    needs sm_90a, kernel targets sm_80; pass arch='sm_90a', at my_kernel.py:14``."""
    @kernel(arch="sm_80")
    def my_kernel():
        acc = reg.array(f32, 32)
        a, b = reg.scalar(u64, 0), reg.scalar(u64, 0)
        ptx.wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16(list(acc), a, b, 1, 1, 1, 0, 0)  # HERE

    line = _line(my_kernel.fn, "# HERE")
    with pytest.raises(PtxTargetError, match=rf"^wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 "
                                             rf"needs sm_90a, kernel targets sm_80; pass arch='sm_90a', "
                                             rf"at {re.escape(HERE)}:{line}$"):
        my_kernel.ptx()


# --- faults read the same through jaxptx.profile ---------------------------------------------

@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32 + 1, 1, 1), block=(32, 1, 1), arch="sm_90a")
def off_by_one_here(x, y):
    # Its own name: the debugging guide's off_by_one has the same PTX, so
    # the same kernel id, and its faults cite the first one registered.
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off))


def test_a_fault_reads_the_same_through_profile_as_through_sim_launch() -> None:
    """README: "Every fault reads the same through sim.launch, sim.Device.launch,
    jax.jit and jaxptx.profile"; debugging.md: "(sim.Device.launch and
    jaxptx.profile say it the same way too)"; "e.fault holds the same parts"."""
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(sim.SimFault) as plain:
        sim.launch(off_by_one_here, x, np.zeros_like(x))
    with pytest.raises(sim.SimFault) as profiled:
        jaxptx.profile(off_by_one_here, x, np.zeros_like(x), resources=False)
    assert str(profiled.value) == str(plain.value)
    message, fault = str(plain.value), plain.value.fault
    line = _line(off_by_one_here.fn, "ptx.ld.global_.f32(")
    assert re.fullmatch(rf"kernel off_by_one_here: ld\.global\.f32: global access of 4 bytes at offset 0x100 of "
                        rf"parameter 'x' is out of bounds \(its buffer has 256 bytes; CTA 2, thread 0\) "
                        rf"\[PTX line {fault.ptx_line}: {re.escape(fault.ptx_text)}\], "
                        rf"at {re.escape(__file__)}:{line} in the kernel", message), message
    assert str(fault) == message and fault.kernel == "off_by_one_here" and fault.python == (__file__, line)
    assert fault.ptx_text.startswith("ld.global.f32")


# --- emulator.md: a partial warp at an .aligned barrier is a finding under check="all" ------------

@kernel(out_specs=(Tile(64, u32),), arch="sm_90a", block=(64, 1, 1))
def half_warp_barrier(y):
    tid = ptx.special.tid.x()
    with ptx.if_(tid >= 16):                       # threads 0-15 skip the barrier
        ptx.bar.sync(0)                            # BARRIER
    ptx.st.global_.u32(y.ptr + ptx.mul.wide.u32(tid, 4), tid + 1)


def test_half_a_warp_at_an_aligned_barrier_is_a_finding_and_check_all_goes_on() -> None:
    """emulator.md: an .aligned barrier that part of a warp reaches faults
    without the sanitizer, and "the sanitizer reports the same as a finding,
    so check="all" goes on"."""
    line = _line(half_warp_barrier.fn, "# BARRIER")
    y = np.zeros(64, np.uint32)
    with pytest.raises(sim.SimFault, match=r"bar\.sync: CTA 0, thread 16 reaches this \.aligned barrier without "
                                           r"thread 0 of its warp"):
        sim.launch(half_warp_barrier, y)
    with pytest.raises(sim.SanitizerError, match=r"barrier divergence: .*is \.aligned, but CTA \(0, 0, 0\) "
                                                 r"thread \(16, 0, 0\) reaches it without thread \(0, 0, 0\)"):
        sim.launch(half_warp_barrier, y, check=True)
    y[:] = 0
    findings = sim.launch(half_warp_barrier, y, check="all")
    assert [f.kind for f in findings] == ["divergence"], [f.message for f in findings]
    assert f"{HERE}:{line}" in findings[0].line
    np.testing.assert_array_equal(y, np.arange(1, 65))         # it ran to the end


# --- emulator.md / README: the bounds and the progress reports ---------------------------------

def test_the_default_bounds(monkeypatch) -> None:
    """README: "50 million steps by default"; emulator.md: "default 50,000,000
    steps", "A launch that runs longer than 5 s reports, every 5 s",
    "There is none [no wall-time bound] by default"."""
    from jaxptx.sim.core import hangs, progress

    for name in ("JAXPTX_SIM_MAX_STEPS", "JAXPTX_SIM_TIMEOUT", "JAXPTX_SIM_PROGRESS_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert hangs.default_max_steps() == 50_000_000
    assert progress.default_max_seconds() is None
    assert progress.progress_seconds() == 5.0


COUNT = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .b32 %r<4>; .reg .b64 %rd<2>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, 0;
LOOP:
    add.u32 %r3, %r3, 1;
    st.global.u32 [%rd1], %r3;
    setp.ne.u32 %p1, %r3, %r2;
    @%p1 bra LOOP;
    ret;
}
"""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_goes_to_stderr_on_a_terminal_else_to_the_logger(monkeypatch, caplog) -> None:
    """README: "(stderr on a terminal, else the jaxptx.sim logger ...)";
    emulator.md: "the first of a launch at WARNING ..., the later ones at INFO"."""
    monkeypatch.setenv("JAXPTX_SIM_PROGRESS_SECONDS", "0")          # a report at every look at the clock
    monkeypatch.delenv("JAXPTX_SIM_TIMEOUT", raising=False)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    out = np.zeros(1, np.uint32)
    with caplog.at_level(logging.DEBUG, logger="jaxptx.sim"):
        sim.launch(COUNT, out, 3_000, block=(32, 1, 1))
    assert out[0] == 3_000
    said = terminal.getvalue().splitlines()
    assert said and said[0].startswith("jaxptx.sim: k: running for "), said
    assert re.search(r"steps/s, .*0 of 1 CTAs finished; 32 threads .*PTX line", said[0]), said[0]
    assert said[-1].startswith("jaxptx.sim: k: finished after "), said
    assert [r for r in caplog.records if "running for" in r.getMessage()] == []

    monkeypatch.setattr(sys, "stderr", io.StringIO())                # not a terminal
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="jaxptx.sim"):
        sim.launch(COUNT, out, 3_000, block=(32, 1, 1))
    reports = [r for r in caplog.records if "running for" in r.getMessage()]
    assert len(reports) >= 2, [r.getMessage() for r in caplog.records]
    assert reports[0].levelno == logging.WARNING
    assert {r.levelno for r in reports[1:]} == {logging.INFO}


def test_max_seconds_names_the_python_lines_of_a_traced_kernel() -> None:
    """emulator.md: progress and the max_seconds SimError name "their PTX lines
    (Python lines for a traced kernel), instruction text, thread counts and
    the loop around them"."""
    @kernel(out_specs=(Tile("N", u32),), grid=(1, 1, 1), block=(32, 1, 1), arch="sm_80")
    def ticker(y):
        i = ptx.mov.u32(1)
        with ptx.loop() as turn:
            ptx.st.global_.u32(y.ptr, i)
            ptx.add.u32(i, i, 1)                                 # TICK
            turn.again(i != 0)

    with pytest.raises(sim.SimError, match=r"^ticker: still running after 0\.\d s \(max_seconds=0\.3\), "
                                           r"[\d,]+ steps, 0 of 1 CTAs finished; ") as e:
        sim.launch(ticker, np.zeros(32, np.uint32), max_seconds=0.3)
    message = str(e.value)
    assert re.search(r"32 threads \(CTA 0 threads 0-31\) at " + re.escape(__file__) + r":\d+ `[^`]+` in the "
                     r"loop at " + re.escape(__file__) + r":\d+", message), message
    assert f"{HERE}:{_line(ticker.fn, '# TICK')}" in message, message


# --- README / emulator.md: sim.Device hands out 1791 fresh ranges first ----------------------------

def test_a_freed_address_is_not_handed_out_again_for_1791_allocations() -> None:
    """README: "a freed address is not handed out again ... until 1791
    allocations have used up the address space"; emulator.md: "then the
    range freed longest ago is reused"."""
    dev = sim.Device()
    seen: list[int] = []
    for _ in range(1791):
        address = dev.alloc(8)
        assert address not in seen
        seen.append(address)
        dev.free(address)
    assert dev.alloc(8) == seen[0] and dev.alloc(8) == seen[1]


# --- README: the build checks the shim's driver structs against cuda.h ---------------------------

def test_the_shim_was_built_with_its_driver_declarations_checked_against_cuda_h() -> None:
    """README: "the build checks the shim's driver structs against cuda.h from
    the nvidia-cuda-runtime wheel" (ffi/cuda_driver_check.cc, static_asserts)."""
    import jaxptx._ffi as ffi

    assert ffi.abi_info()["checked_against_cuda_h"] is True
    text = (ROOT / "ffi" / "cuda_driver_check.cc").read_text()
    for name in ("LaunchConfig", "LaunchAttribute", "TensorMap"):
        assert f"sizeof(jaxptx::cu::{name})" in text


# --- debugging.md: JAXPTX_CAPTURE_MAX_BYTES ----------------------------------------------------

def test_the_capture_cap_defaults_to_one_gib(monkeypatch) -> None:
    """debugging.md: "JAXPTX_CAPTURE_MAX_BYTES (default 1 GiB) skips larger
    launches with a warning" (the warning: tests/test_capture_replay.py)."""
    from jaxptx import capture

    monkeypatch.delenv(capture.ENV_MAX_BYTES, raising=False)
    assert capture.max_bytes() == 1 << 30


# --- README "The kernel library": every variant runs clean under the sanitizer ----------------------
# (rms_norm and softmax in bf16, matmul, grouped_matmul and flash_attention at
# head dim 64: tests/kernels/test_sanitizer_clean.py)

def _rand(shape, seed=0, dtype=jnp.bfloat16):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32), dtype)


def _norm_args(op: str, dtype):
    x = _rand((3, 1000), 0, dtype)
    return {"rms_norm": (x, _rand((1000,), 1, dtype)),
            "layer_norm": (x, _rand((1000,), 1, dtype), _rand((1000,), 2, dtype)),
            "softmax": (x,),
            "swiglu": (x, _rand((3, 1000), 1, dtype))}[op]


def _norm_reference(op: str, args):
    from jaxptx.kernels import norms

    if op == "softmax":
        return jax.nn.softmax(args[0].astype(jnp.float32), axis=-1).astype(args[0].dtype)
    return getattr(norms, f"{op}_reference")(*args)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax", "swiglu"])
def test_every_norm_variant_is_clean_under_the_sanitizer(op, dtype) -> None:
    """README: "f32/bf16/f16 in and out ... one kernel traced per target" and
    "Every variant is verified ... and it runs clean under the sanitizer"."""
    args = _norm_args(op, dtype)
    want = np.asarray(_norm_reference(op, args), np.float64)
    tolerance = 2e-5 if dtype == jnp.float32 else 2 ** -6
    for arch in ("sm_80", "sm_90a", "sm_100a"):
        with sim.checking("all"):
            out = jax.block_until_ready(getattr(kernels, op)(*args, arch=arch))
        assert out.dtype == args[0].dtype
        np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=tolerance, atol=tolerance)


def test_the_sm100_cta_pair_matmul_is_clean_under_the_sanitizer() -> None:
    """README: "sm_100a: ... and a cta_group::2 form" (every variant clean)."""
    from jaxptx.kernels._matmul_sm100 import matmul_sm100

    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 200, 136)).astype(jnp.bfloat16)
    b = rng.standard_normal((1, 136, 136)).astype(jnp.bfloat16)
    with sim.checking("all"):
        c = jax.block_until_ready(jax.jit(matmul_sm100, static_argnames="cta_group")(a, b, cta_group=2))
    want = np.einsum("gmk,gkn->gmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(np.asarray(c), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_flash_attention_at_head_dim_128_is_clean_under_the_sanitizer(arch) -> None:
    """README: flash_attention "head dims 64 and 128" (every variant clean)."""
    q, k, v = (_rand((1, 130, 1, 128), seed) for seed in range(3))
    with sim.checking("all"):
        o = jax.block_until_ready(kernels.flash_attention(q, k, v, causal=True, arch=arch))
    want = jax.nn.dot_product_attention(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32),
                                        is_causal=True)
    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(want), rtol=1.5e-2, atol=1.5e-2)


# --- bring_your_own.md: cuda_call refuses a struct passed by value ----------------------------------

def test_cuda_call_refuses_a_struct_passed_by_value_naming_the_parameter() -> None:
    """bring_your_own.md: "Structs passed by value are refused naming the
    parameter, as PTX's packed argument structs are"."""
    from jaxptx.jax import cuda_call

    source = ("struct Params { float a; int n; };\n"
              'extern "C" __global__ void by_value(Params p, float* y) { y[threadIdx.x] = p.a * p.n; }\n')
    with pytest.raises(SpecError, match=r"^ptx_call by_value: param 0 by_value_param_0 \(\.b8\[8\]\): ptx_call "
                                        r"cannot fill this parameter"):
        cuda_call(source, np.float32(1.0), out_shape=jax.ShapeDtypeStruct((32,), jnp.float32), grid=1,
                  block=32, arch="sm_80")


# --- torch.md: the checks and the emulator's errors through jaxptx.torch ------------------------------

def test_spec_error_is_a_type_error_and_a_value_error() -> None:
    """torch.md: "jaxptx.errors.SpecError, a TypeError/ValueError subclass"."""
    assert issubclass(SpecError, TypeError) and issubclass(SpecError, ValueError)


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if getattr(torch, "__file__", None) is None:
        pytest.skip("torch is not installed")
    return torch


@pytest.mark.parametrize("dtype", ["int64", "uint64", "float64"])
def test_a_library_op_refuses_every_dtype_jax_would_narrow(torch, dtype) -> None:
    """torch.md: "a library op refuses the dtypes JAX would narrow (float64,
    int64, uint64 while jax_enable_x64 is off)"."""
    import jaxptx.torch as jt

    narrowed = {"int64": "int32", "uint64": "uint32", "float64": "float32"}[dtype]
    t = getattr(torch, dtype)
    with pytest.raises(SpecError, match=rf"function rms_norm: argument 'x': expected a dtype JAX keeps, got "
                                        rf"{dtype} \(JAX would narrow it to {narrowed}"):
        jt.op(kernels.rms_norm)(torch.ones(2, 8, dtype=t), torch.ones(8, dtype=t))


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),), grid=(1, 1, 1), block=(64, 1, 1), arch="sm_80")
def rotate_racy(x, y):
    buf = smem.alloc(f32, 64)
    tid = ptx.special.tid.x()
    ptx.st.shared.f32(buf[tid], ptx.ld.global_.f32(x.ptr + ptx.mul.wide.u32(tid, 4)))     # WRITE
    v = ptx.ld.shared.f32(buf[(tid + 32) & 63])                                            # READ
    ptx.st.global_.f32(y.ptr + ptx.mul.wide.u32(tid, 4), v)


def test_through_torch_faults_and_the_sanitizer_name_the_ptx_and_python_lines(torch) -> None:
    """torch.md: on CPU tensors "everything the emulator offers applies — the
    sanitizer (with jaxptx.sim.checking():), faults that name the PTX and
    Python line"."""
    import jaxptx.torch as jt

    fault_line = _line(off_by_one_here.fn, "ptx.ld.global_.f32(")
    with pytest.raises(Exception, match=rf"SimFault: kernel off_by_one_here: ld\.global\.f32: .* of parameter 'x' is "
                                        rf"out of bounds .*\[PTX line \d+: ld\.global\.f32 .*\], at "
                                        rf"{re.escape(__file__)}:{fault_line} in the kernel"):
        jt.op(off_by_one_here)(torch.zeros(64))
    jt.op(rotate_racy)(torch.arange(64.0))                            # unchecked: runs
    read, write = _line(rotate_racy.fn, "# READ"), _line(rotate_racy.fn, "# WRITE")
    race = (rf"SanitizerError: kernel rotate_racy: sanitizer: shared-memory race: read .* at PTX line \d+ "
            rf".*conflicts with the write at PTX line \d+ \[{re.escape(HERE)}:{write}\].*, at "
            rf"{re.escape(__file__)}:{read} in the kernel")
    with sim.checking(), pytest.raises(Exception, match=race):
        jt.op(rotate_racy)(torch.arange(64.0))


@kernel(in_specs=(Tile("N", f32),), out_specs=(Tile("N", f32),),
        grid=lambda N: (N // 32, 1, 1), block=(32, 1, 1), arch="sm_90a")
def copy_sm90(x, y):
    off = ptx.mul.wide.u32(ptx.special.ctaid.x() * 32 + ptx.special.tid.x(), 4)
    ptx.st.global_.f32(y.ptr + off, ptx.ld.global_.f32(x.ptr + off))


def test_a_cuda_device_that_cannot_run_the_target_is_refused_with_the_arch(torch, monkeypatch) -> None:
    """torch.md: "a kernel whose target the device cannot run is refused with
    the arch= to give it" (the device's capability faked: no GPU here)."""
    import jaxptx.torch as jt
    from jaxptx.torch._op import encode_params

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(SpecError, match=r"^kernel copy_sm90: its PTX targets sm_90a, which the tensors' device "
                                        r"cuda:0 \(sm_80\) cannot run; give the kernel arch='sm_80'$"):
        jt.op(copy_sm90)._run_cuda([torch.zeros(64)], encode_params({}), torch.device("cuda", 0))


# --- README "Checking on a GPU": a failed step does not stop the next --------------------------------

def test_gpu_check_goes_on_after_a_failed_step(monkeypatch, tmp_path, capsys) -> None:
    """README: "Each step has its own time budget and a failed step does not
    stop the next" (benchmarks/gpu_check.py; steps faked: no GPU here)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_check
    from _gpu_steps import Outcome, Step

    ran = []

    def crashes(ctx, clock):
        raise RuntimeError("kaput")

    def fails(ctx, clock):
        ran.append("kernels")
        return Outcome("failed", "wrong numbers")

    def passes(ctx, clock):
        ran.append("torch")
        return Outcome("ok")

    monkeypatch.setattr(gpu_check, "STEPS", [Step("tests", "gpu tests", 5, lambda ctx: [], crashes),
                                             Step("kernels", "kernels vs XLA", 5, lambda ctx: [], fails),
                                             Step("torch", "torch", 5, lambda ctx: [], passes)])
    monkeypatch.setattr(gpu_check, "preflight", lambda ctx: {"imports": {}})
    assert gpu_check.main(["--out", str(tmp_path)]) == 1
    assert ran == ["kernels", "torch"]
    steps = json.loads((tmp_path / "results.json").read_text())["steps"]
    assert [(s["key"], s["status"]) for s in steps] == [("tests", "failed"), ("kernels", "failed"), ("torch", "ok")]
    assert steps[0]["why"] == "gpu_check error in this step: RuntimeError: kaput"
    capsys.readouterr()

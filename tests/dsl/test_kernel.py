"""@kernel: options, specialisation, caching, determinism, errors that point
at the user's line, and ptxas accepting what the DSL writes."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

from jaxptx import Layout, Tile, kernel, ptx, reg, smem
from jaxptx.errors import (LaunchError, PtxModifierError, PtxTargetError, PtxTypeError, PtxVersionError,
                           SpecError, TraceError)
from jaxptx.runtime import ptxas
from jaxptx.types import bf16, f32, s32, u32, u64


def assembles(k, **kw) -> str:
    s = k.specialize(**kw)
    ptxas(s.ptx, s.target.name)
    return s.ptx


def here() -> int:
    return inspect.currentframe().f_back.f_lineno


# The Getting Started page's kernel, unchanged apart from the import name.
@kernel(arch="sm_90a")
def tiny():
    tid = reg.from_(ptx.special.tid.x(), u32)
    x = tid + 1
    ptx.inst.mov.u32(tid, x)
    ptx.ret()


def test_seed_tiny_kernel() -> None:
    text = assembles(tiny)
    assert ".target sm_90a" in text
    assert "mov.u32 %r1, %tid.x;" in text
    assert "mov.u32 %r2, %r1;" in text
    assert "add.u32 %r3, %r2, 1;" in text
    assert "mov.u32 %r2, %r3;" in text
    assert text.rstrip().endswith("ret;\n}")


def test_tracing_is_deterministic_in_one_process() -> None:
    first = tiny.ptx()
    fresh = kernel(arch="sm_90a")(tiny.fn)
    assert fresh.ptx() == first


def test_tracing_is_deterministic_across_processes() -> None:
    code = textwrap.dedent("""
        from jaxptx import kernel, reg, ptx
        from jaxptx.types import u32
        @kernel(arch="sm_90a")
        def tiny():
            tid = reg.from_(ptx.special.tid.x(), u32)
            x = tid + 1
            ptx.inst.mov.u32(tid, x)
            ptx.ret()
        print(tiny.ptx(), end="")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == tiny.ptx()


GEMM_SPECS = dict(
    in_specs=(Tile("M", "K", bf16, Layout.ROW), Tile("K", "N", bf16, Layout.COL)),
    out_specs=(Tile("M", "N", f32, Layout.ROW),),
    grid=lambda M, N, K: (M // 128, N // 256),
    block=(128, 1, 1),
    arch="sm_90a",
)


@kernel(**GEMM_SPECS)
def gemm_shell(A, B, C, *, BM=128, BN=256, BK=64):
    ptx.comment(f"M={A.shape[0]} K={A.shape[1]} BM={BM} BK={BK}")
    ptx.ret()


def test_specialisation_by_dims_and_template() -> None:
    text = gemm_shell.ptx(M=4096, N=4096, K=4096)
    assert "// M=4096 K=4096 BM=128 BK=64" in text
    s = gemm_shell.specialize(M=4096, N=4096, K=4096, BM=64)
    assert "BM=64" in s.ptx
    assert s.grid == (32, 16, 1)
    assert s.block == (128, 1, 1)
    assert gemm_shell.template_params == {"BM": 128, "BN": 256, "BK": 64}
    assert gemm_shell.dims == ("M", "K", "N")
    assert gemm_shell.specialize(M=4096, N=4096, K=4096) is gemm_shell.specialize(K=4096, N=4096, M=4096)
    params = [line.strip() for line in text.splitlines() if line.strip().startswith(".param")]
    assert params == [".param .u64 A,", ".param .u64 B,", ".param .u64 C"]


def test_unknown_keyword_lists_what_is_accepted() -> None:
    with pytest.raises(SpecError, match=r"unknown keyword 'Q'; template params: \['BM', 'BN', 'BK'\], dims: \['M', 'K', 'N'\]"):
        gemm_shell.ptx(Q=1)


def test_unbound_dim_used_in_body() -> None:
    with pytest.raises(SpecError, match=r"dim 'M' is not bound; pass M=<int>"):
        gemm_shell.ptx()


def test_grid_needs_dims() -> None:
    @kernel(**GEMM_SPECS)
    def shell(A, B, C):
        ptx.ret()
    with pytest.raises(SpecError, match=r"grid needs \['M', 'N', 'K'\]"):
        shell.ptx()


def test_spec_count_must_match_parameters() -> None:
    with pytest.raises(SpecError, match=r"2 positional \(tensor\) parameters \['a', 'b'\] but 1 in_specs \+ 0 out_specs"):
        @kernel(in_specs=(Tile("N", f32),))
        def bad(a, b):
            pass


@pytest.mark.parametrize("option, value, message", [
    ("block", (0, 1, 1), r"block: expected 1 to 3 positive ints"),
    ("block", (1024, 2, 1), r"block = \(1024, 2, 1\) has 2048 threads, over CUDA's limit of 1024"),
    ("arch", "sm90", r"arch: expected a target like 'sm_80'"),
    ("arch", "sm_91", r"arch: unknown target 'sm_91'"),
    ("version", "eight", r"version: expected a PTX ISA version"),
    ("smem", -1, r"smem: expected a byte count >= 0"),
    ("raw_params", [("n",)], r"raw_params: expected \(type, name\) pairs"),
    ("in_specs", ("M",), r"in_specs: expected a tuple of Tile"),
    ("extern_smem", "1x", r"extern_smem: expected a bool or a symbol name"),
    ("batch", "y", r"batch: expected None or 'z' \(a vmapped call runs the batch as grid z\)"),
])
def test_bad_options_fail_at_decoration(option, value, message) -> None:
    with pytest.raises((LaunchError, TraceError, SpecError, PtxTargetError, PtxVersionError),
                       match=message):
        kernel(**{option: value})(lambda: None)


def test_batch_ptr_offsets_by_ctaid_z_unless_shared() -> None:
    strides = []

    @kernel(in_specs=(Tile("N", f32), Tile(4, u32)), out_specs=(Tile("N", f32),), batch="z")
    def k(x, w, y):
        strides.append((x.batch_stride, w.batch_stride, y.batch_stride, w.nbytes))
        for p in ptx.batch_ptrs(x, w, y):
            ptx.st.global_.u32(p, 0)
    plain = k.specialize_for("sm_90a", shared=("w",), N=8).ptx
    assert plain.count("%ctaid.z") == 1 and plain.count("mul.wide.u32 %rd") == 2
    assert "mul.wide.u32 %rd1, %r1, 32;" in plain and strides == [(32, 0, 32, 16)]
    both = k.specialize_for("sm_90a", shared=("x", "w"), N=8).ptx
    assert both.count("mul.wide.u32") == 1
    huge = k.specialize_for("sm_90a", N=2**30).ptx  # 4 GiB per batch element
    assert "mul.lo.u64 %rd2, %rd1, 4294967296;" in huge
    with pytest.raises(SpecError, match=r"kernel k: shared names \['y'\] are not inputs"):
        k.specialize_for("sm_90a", shared=("y",), N=8)


def test_arch_auto_resolves_at_trace_time(monkeypatch) -> None:
    @kernel(arch="auto")
    def k():
        ptx.ret()
    monkeypatch.setenv("JAXPTX_ARCH", "sm_80")
    assert ".target sm_80" in k.ptx()
    monkeypatch.setenv("JAXPTX_ARCH", "sm_100a")
    assert ".target sm_100a" in k.ptx()


def test_version_defaults_per_target_and_can_be_set() -> None:
    def body():
        ptx.ret()
    assert ".version 8.5" in kernel(arch="sm_80")(body).ptx()
    assert ".version 8.6" in kernel(arch="sm_100a")(body).ptx()
    assert ".version 8.7" in kernel(arch="sm_90a", version=(8, 7))(body).ptx()
    with pytest.raises(PtxVersionError, match=r"sm_90a needs PTX ISA 8.0, got version=\(7, 8\)"):
        kernel(arch="sm_90a", version=(7, 8))(body).ptx()


def test_type_error_points_at_user_line() -> None:
    lines = []

    @kernel(arch="sm_80")
    def bad():
        a = reg.scalar(f32)
        b = reg.scalar(u64)
        lines.append(here() + 1)
        ptx.add.f32(a, a, b)
    with pytest.raises(PtxTypeError, match=r"add.f32 operand b: expected .f32 register or immediate, "
                                           r"got %rd1 \(.u64\), at test_kernel.py:\d+") as e:
        bad.ptx()
    assert str(e.value).endswith(f"test_kernel.py:{lines[0]}")


def test_unknown_modifier_points_at_user_line() -> None:
    @kernel(arch="sm_80")
    def bad():
        a = reg.scalar(f32)
        ptx.add.f33(a, a, a)
    with pytest.raises(PtxModifierError, match=r"add.f33: unknown modifier .f33 \(did you mean .f32\?\).*at test_kernel.py:\d+"):
        bad.ptx()


def test_mixed_operand_types_in_operators() -> None:
    @kernel(arch="sm_80")
    def bad():
        reg.scalar(f32) + reg.scalar(s32)
    with pytest.raises(PtxTypeError, match=r"add: operands must have one type, got %f1 \(.f32\) and %r1 \(.s32\)"):
        bad.ptx()


def test_register_truth_value_is_an_error() -> None:
    @kernel(arch="sm_80")
    def bad():
        if reg.scalar(s32) < 3:
            pass
    with pytest.raises(TraceError, match=r"no Python truth value at trace time; use `with ptx.if_"):
        bad.ptx()


def test_calls_outside_a_trace() -> None:
    with pytest.raises(TraceError, match=r"no kernel is being traced"):
        reg.scalar(f32)


def test_operators_emit_one_instruction_each() -> None:
    @kernel(arch="sm_80")
    def ops():
        a, b = reg.scalar(s32, 7), reg.scalar(s32, 3)
        x, y = reg.scalar(f32, 1.5), reg.scalar(f32, 2.0)
        a + b; a - 1; a * b; a // b; a % b; a & b; a | 5; a ^ b; a << 2; a >> 1; -a; ~a
        x + y; x * y; x / y; -x
        p = a < b
        ~p
        a.max(b); x.min(y)
        a += 1
        ptx.ret()
    text = assembles(ops)
    for line in ["add.s32 %r3, %r1, %r2;", "sub.s32 %r4, %r1, 1;", "mul.lo.s32 %r5, %r1, %r2;",
                 "div.s32 %r6, %r1, %r2;", "rem.s32 %r7, %r1, %r2;", "and.b32 %r8, %r1, %r2;",
                 "or.b32 %r9, %r1, 5;", "xor.b32 %r10, %r1, %r2;", "shl.b32 %r11, %r1, 2;",
                 "shr.s32 %r12, %r1, 1;", "neg.s32 %r13, %r1;", "not.b32 %r14, %r1;",
                 "mov.f32 %f1, 0f3FC00000;", "add.f32 %f3, %f1, %f2;", "mul.f32 %f4, %f1, %f2;",
                 "div.rn.f32 %f5, %f1, %f2;", "neg.f32 %f6, %f1;", "setp.lt.s32 %p1, %r1, %r2;",
                 "max.s32 %r15, %r1, %r2;", "min.f32 %f7, %f1, %f2;", "add.s32 %r1, %r1, 1;"]:
        assert line in text, line


def test_control_flow_if_else_range_while() -> None:
    @kernel(arch="sm_80", block=(64, 1, 1))
    def flow():
        tid = ptx.special.tid.x()
        acc = reg.scalar(u32, 0)
        with ptx.if_(tid < 32):
            acc += 1
        with ptx.else_():
            acc += 2
        for i in ptx.range_(0, 10):
            with ptx.if_(i == 5):
                ptx.continue_()
            acc += 3
        n = reg.scalar(u32, 0)
        for _ in ptx.while_(lambda: n < 4):
            n += 1
            ptx.break_(pred=n == acc)
        ptx.ret()
    text = assembles(flow)
    lines = [l.strip() for l in text.splitlines()]
    i_if = lines.index("@!%p1 bra $L_endif_1;")
    assert lines[i_if + 1] == "add.u32 %r2, %r2, 1;"
    assert lines[i_if + 2] == "bra.uni $L_endelse_2;"
    assert lines[i_if + 3] == "$L_endif_1:"
    assert lines[i_if + 4] == "add.u32 %r2, %r2, 2;"
    assert lines[i_if + 5] == "$L_endelse_2:"
    assert "bra $L_latch_4;" in " ".join(lines)
    assert ".maxntid 64, 1, 1" in text


def test_else_without_if() -> None:
    @kernel(arch="sm_80")
    def bad():
        with ptx.else_():
            pass
    with pytest.raises(TraceError, match=r"must directly follow a `with ptx.if_"):
        bad.ptx()


def test_destination_allocated_when_omitted() -> None:
    @kernel(arch="sm_80")
    def k():
        a = reg.scalar(f32, 1.0)
        b = ptx.fma.rn.f32(a, a, a)
        assert b.type == f32 and b.name == "%f2"
        ptx.ret()
    assert "fma.rn.f32 %f2, %f1, %f1, %f1;" in assembles(k)


def test_pyptx_style_type_first_argument() -> None:
    @kernel(arch="sm_80")
    def k():
        a = reg.scalar(s32)
        ptx.add(s32, a, a, 1)
        ptx.ret()
    assert "add.s32 %r1, %r1, 1;" in assembles(k)


def test_named_registers_and_arrays() -> None:
    @kernel(arch="sm_80")
    def k():
        acc = reg.array(f32, 4, name="acc")
        for r in acc:
            r.set(0.0)
        reg.pred(name="done")
        ptx.ret()
    text = assembles(k)
    assert ".reg .f32 %acc<4>;" in text and "mov.f32 %acc3, 0f00000000;" in text
    assert ".reg .pred %done;" in text


def test_register_name_conflicts() -> None:
    @kernel(arch="sm_80")
    def k():
        reg.scalar(f32, name="x")
        reg.scalar(f32, name="x")
    with pytest.raises(TraceError, match=r"register name 'x' is already used"):
        k.ptx()


def test_raw_params_directives_cluster_reqntid() -> None:
    @kernel(arch="sm_90a", raw_params=[("u32", "n")], cluster=(2, 1, 1), reqntid=(128,),
            raw_directives=[("maxnreg", (128,))])
    def k(x):
        n = ptx.param("n")
        ptx.st.global_.u32(x.ptr, n)
        ptx.ret()
    text = assembles(k)
    assert ".param .u32 n" in text and "ld.param.u32 %r1, [n];" in text
    assert ".reqntid 128, 1, 1" in text and ".reqnctapercluster 2, 1, 1" in text
    assert ".maxnreg 128" in text


def test_unknown_raw_param() -> None:
    @kernel(arch="sm_80")
    def k():
        ptx.param("n")
    with pytest.raises(TraceError, match=r"declares no raw param of that name; raw_params: none"):
        k.ptx()


def test_smem_static_and_extern() -> None:
    @kernel(arch="sm_90a")
    def static():
        buf = smem.alloc(f32, (4, 32))
        tid = ptx.special.tid.x()
        v = reg.scalar(f32, 1.0)
        ptx.st.shared.f32(buf[1, 2], v)
        ptx.st.shared.f32(buf[tid, 0], v)
        ptx.ret()
    text = assembles(static)
    assert ".shared .align 16 .b8 smem_0[512];" in text
    assert "st.shared.f32 [smem_0+136], %f1;" in text

    @kernel(arch="sm_90a", extern_smem=True)
    def dynamic():
        smem.alloc(f32, 100)
        b = smem.alloc(f32, 4, align=128)
        ptx.st.shared.f32(b[1], reg.scalar(f32, 2.0))
        ptx.ret()
    s = dynamic.specialize()
    ptxas(s.ptx, "sm_90a")
    assert ".extern .shared .align 1024 .b8 dyn_smem[];" in s.ptx
    assert "st.shared.f32 [dyn_smem+516], %f1;" in s.ptx
    assert s.smem == 528


def test_special_register_errors() -> None:
    @kernel(arch="sm_80")
    def k():
        ptx.special.cluster_ctarank()
    with pytest.raises(PtxTargetError, match=r"%cluster_ctarank needs sm_90 or newer, kernel targets sm_80"):
        k.ptx()
    with pytest.raises(AttributeError, match=r"no special register %tidd"):
        ptx.special.tidd


def test_resources_sass_cubin() -> None:
    @kernel(arch="sm_90a")
    def k(x):
        ptx.st.global_.u32(x.ptr, ptx.special.tid.x())
        ptx.ret()
    assert k.cubin()[:4] == b"\x7fELF"
    assert "STG" in k.sass()
    r = k.resources()
    assert r.registers > 0 and r.spill_stores == 0


def test_predicate_negation_guard() -> None:
    @kernel(arch="sm_80")
    def k(x):
        p = ptx.special.tid.x() == 0
        ptx.st.global_.u32(x.ptr, 1, pred=~p)
        ptx.ret()
    assert "@!%p1 st.global.u32 [%rd2], 1;" in assembles(k)


def test_unknown_instruction_name() -> None:
    with pytest.raises(AttributeError, match=r"no instruction starts with 'frobnicate'"):
        ptx.frobnicate

    @kernel(arch="sm_80")
    def k():
        ptx.cp.bogus()
    with pytest.raises(PtxModifierError, match=r"cp.bogus: no instruction of that name"):
        k.ptx()


def test_instruction_newer_than_declared_version() -> None:
    @kernel(arch="sm_90", version=(7, 8))
    def k():
        ptx.elect.sync((reg.scalar(u32), reg.pred()), 0xFFFFFFFF)
    with pytest.raises(PtxVersionError, match=r"elect.sync needs PTX ISA 8.0, kernel declares 7.8; pass version=\(8, 0\), at test_kernel.py:\d+"):
        k.ptx()


def test_labels_placed_and_forward() -> None:
    @kernel(arch="sm_80")
    def k(x):
        tid = ptx.special.tid.x()
        ptx.bra("skip", pred=tid > 3)                 # pyptx style: by name
        done = ptx.new_label()                        # forward, placed later
        ptx.bra(done, pred=tid == 0)
        ptx.st.global_.u32(x.ptr, tid)
        ptx.label("skip")
        done.place()
        top = ptx.label()
        ptx.bra(top, pred=tid > 100)
    text = assembles(k)
    lines = [l.strip() for l in text.splitlines()]
    assert "@%p1 bra skip;" in lines and "skip:" in lines
    assert "@%p2 bra $L_user_1;" in lines and "$L_user_1:" in lines
    assert "$L_user_2:" in lines and "@%p3 bra $L_user_2;" in lines


def test_bad_label_names() -> None:
    @kernel(arch="sm_80")
    def k():
        ptx.label("has space")
    with pytest.raises(TraceError, match=r"ptx.label: expected a PTX identifier"):
        k.ptx()

    @kernel(arch="sm_80")
    def twice():
        ptx.label("a")
        ptx.label("a")
    with pytest.raises(TraceError, match=r"name 'a' is already used in kernel twice"):
        twice.ptx()

"""The CUDA toolchain wrappers, run against the real ptxas / nvJitLink / nvdisasm."""

from __future__ import annotations

import ctypes
import os
import re

import pytest

from jaxptx.errors import PtxasError, ToolchainError
from jaxptx.runtime import (
    PtxasResult, Resources, arch_from_capability, compile_cubin, detect_arch,
    find_tool, parse_ptxas_errors, ptxas, resources, resources_all, sass,
    tool_version,
)
from jaxptx.runtime._toolchain import _locate

TINY = """\
.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p){
 .reg .b64 %rd<2>; .reg .b32 %r<2>;
 ld.param.u64 %rd1,[p]; cvta.to.global.u64 %rd1,%rd1; mov.u32 %r1,%tid.x;
 st.global.u32 [%rd1],%r1; ret; }
"""

SMEM = """\
.version 8.5
.target sm_90a
.address_size 64
.visible .entry uses_smem(.param .u64 p){
 .shared .align 4 .b8 buf[1024];
 .reg .b64 %rd<2>; .reg .b32 %r<3>;
 ld.param.u64 %rd1,[p]; cvta.to.global.u64 %rd1,%rd1; mov.u32 %r1,%tid.x;
 st.shared.u32 [buf],%r1; bar.sync 0; ld.shared.u32 %r2,[buf+1020];
 st.global.u32 [%rd1],%r2; ret; }
.visible .entry second(.param .u64 p){
 .reg .b64 %rd<2>;
 ld.param.u64 %rd1,[p]; cvta.to.global.u64 %rd1,%rd1;
 st.global.u32 [%rd1],7; ret; }
"""

BAD = """\
.version 8.5
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p){
 .reg .b64 %rd<2>; .reg .b32 %r<2>;
 ld.param.u64 %rd1,[p];
 mov.u32 %r1, no_such_symbol;
 ret; }
"""


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize("tool", ["ptxas", "nvdisasm"])
def test_find_tool_finds_executables(tool: str) -> None:
    path = find_tool(tool)
    assert os.path.basename(path) == tool
    assert os.access(path, os.X_OK)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", tool_version(tool))


@pytest.mark.parametrize(("tool", "package"), [
    ("ptxas", "nvidia-cuda-nvcc"), ("nvdisasm", "nvidia-cuda-nvdisasm")])
def test_missing_tool_names_pip_package(tool: str, package: str, tmp_path) -> None:
    with pytest.raises(ToolchainError, match=f"{tool} not found; pip install {package}"):
        _locate(tool, pathfinder=False, pip_dirs=(), path=str(tmp_path))


def test_pip_wheel_dir_is_searched() -> None:
    path = _locate("ptxas", pathfinder=False, path="")
    assert os.sep + "nvidia" + os.sep in path


def test_unknown_tool_raises_toolchain_error() -> None:
    with pytest.raises(ToolchainError, match="no-such-cuda-tool not found"):
        find_tool("no-such-cuda-tool")


@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink", "auto"])
def test_compile_cubin_gives_elf(backend: str) -> None:
    cubin = compile_cubin(TINY, "sm_90a", backend=backend)
    assert cubin.startswith(b"\x7fELF")


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        compile_cubin(TINY, "sm_90a", backend="nvcc")  # type: ignore[arg-type]


def test_ptxas_result_and_sass() -> None:
    result = ptxas(TINY, "sm_90a", verbose=True)
    assert isinstance(result, PtxasResult)
    assert "Used" in result.log
    text = sass(result.cubin)
    assert "STG" in text and "EXIT" in text


def test_resources() -> None:
    res = resources(SMEM, "sm_90a")
    assert isinstance(res, Resources)
    assert res.registers > 0
    assert res.shared_bytes == 1024
    assert res.barriers == 1
    assert res.const_bytes > 0  # params live in cmem[0]
    assert (res.stack_frame, res.spill_stores, res.spill_loads) == (0, 0, 0)
    table = resources_all(SMEM, "sm_90a")
    assert set(table) == {"uses_smem", "second"}
    assert table["uses_smem"] == res
    assert table["second"].shared_bytes == 0


@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink"])
def test_ptx_error_reports_line(backend: str) -> None:
    with pytest.raises(PtxasError, match=r"ptxas: line 7: Unknown symbol 'no_such_symbol'") as info:
        compile_cubin(BAD, "sm_90a", backend=backend)
    assert "mov.u32 %r1, no_such_symbol;" in str(info.value)
    assert "line 7" in info.value.log and "fatal" in info.value.log
    assert isinstance(info.value, ToolchainError)


def test_bad_arch_is_ptxas_error() -> None:
    with pytest.raises(PtxasError, match="sm_999") as info:
        ptxas(TINY, "sm_999")
    assert info.value.log


def test_parse_ptxas_errors() -> None:
    log = ("ptxas info    : 0 bytes gmem\n"
           "ptxas /tmp/x.ptx, line 12; error   : Unknown symbol 'foo'\n"
           "ptxas /tmp/x.ptx, line 3; warning : Unused\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    got = [(d.line, d.severity, d.message) for d in parse_ptxas_errors(log)]
    assert got == [(12, "error", "Unknown symbol 'foo'"), (3, "warning", "Unused"),
                   (0, "fatal", "Ptx assembly aborted due to errors")]


@pytest.mark.skipif(_driver_present(), reason="a CUDA driver is present")
def test_detect_arch_without_gpu(monkeypatch) -> None:
    monkeypatch.delenv("JAXPTX_ARCH", raising=False)
    assert detect_arch() is None


def test_detect_arch_env_override(monkeypatch) -> None:
    monkeypatch.setenv("JAXPTX_ARCH", "sm_100a")
    assert detect_arch() == "sm_100a"
    monkeypatch.setenv("JAXPTX_ARCH", "90a")
    assert detect_arch() == "sm_90a"
    monkeypatch.setenv("JAXPTX_ARCH", "hopper")
    with pytest.raises(ToolchainError, match="JAXPTX_ARCH"):
        detect_arch()


@pytest.mark.parametrize(("cap", "arch"), [
    ((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((10, 3), "sm_103a"),
    ((12, 0), "sm_120a"), ((8, 0), "sm_80"), ((8, 9), "sm_89")])
def test_arch_from_capability(cap: tuple[int, int], arch: str) -> None:
    assert arch_from_capability(*cap) == arch

"""The compiled extension is built, installed and matches the package metadata."""

import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ffi_imports_with_package_version():
    import jaxptx._ffi as ffi

    assert ffi.__version__ == importlib.metadata.version("jaxptx")


def test_abi_info_is_a_dict():
    import jaxptx._ffi as ffi

    info = ffi.abi_info()
    assert isinstance(info, dict)
    assert {"compiler", "nanobind", "stable_abi"} <= info.keys()


# ffi/call_frame.cc fills an XLA_FFI_Api, whose entry points jaxlib 0.11
# renamed (XLA_FFI_API_MINOR 4). This machine's pip serves jaxlib <= 0.10, so
# the renamed API is made from the installed headers by the same renames and
# the file is compiled against both: it must select the names by feature
# tests on the header, whatever the header calls them.
_RENAMES_IN_MINOR_4 = {"XLA_FFI_Error_GetMessage": "XLA_FFI_Error_GetDetails",
                       "XLA_FFI_ExecutionContext": "XLA_FFI_InvokeContext"}


def _compile_call_frame(include: pathlib.Path) -> subprocess.CompletedProcess:
    import nanobind

    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler on PATH (the shim's build needs one too)")
    command = [compiler, "-std=c++17", "-fsyntax-only", f"-I{include}",
               f"-I{nanobind.include_dir()}", f"-I{sysconfig.get_paths()['include']}",
               str(ROOT / "ffi" / "call_frame.cc")]
    return subprocess.run(command, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def renamed_ffi_headers(tmp_path_factory) -> pathlib.Path:
    import jax.ffi

    root = tmp_path_factory.mktemp("jaxlib_minor4") / "include"
    shutil.copytree(pathlib.Path(jax.ffi.include_dir()) / "xla", root / "xla")
    for header in (root / "xla" / "ffi" / "api").glob("*.h"):
        text = header.read_text()
        for old, new in _RENAMES_IN_MINOR_4.items():
            text = text.replace(old, new)
        text = re.sub(r"#define XLA_FFI_API_MINOR \d+", "#define XLA_FFI_API_MINOR 4", text)
        header.write_text(text)
    return root


def test_call_frame_compiles_against_the_renamed_ffi_api(renamed_ffi_headers):
    api = (renamed_ffi_headers / "xla" / "ffi" / "api" / "c_api.h").read_text()
    assert "XLA_FFI_Error_GetDetails" in api and "XLA_FFI_Error_GetMessage" not in api
    result = _compile_call_frame(renamed_ffi_headers)
    assert result.returncode == 0, result.stderr[-3000:]


def test_call_frame_compiles_against_the_installed_ffi_api():
    import jax.ffi

    result = _compile_call_frame(pathlib.Path(jax.ffi.include_dir()))
    assert result.returncode == 0, result.stderr[-3000:]

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


def _largest_smem() -> int:
    from jaxptx import launch

    return max(launch.MAX_SMEM_PER_BLOCK.values())


def test_the_shims_launch_limits_are_jaxptx_launchs():
    """The C++ ``LaunchShape`` (ffi/call_identity.h) checks the numbers
    jaxptx/launch.py checks: changing one without the other fails here."""
    import jaxptx._ffi as ffi
    from jaxptx import launch

    assert ffi.launch_limits() == {"grid": launch.MAX_GRID, "block": launch.MAX_BLOCK,
                                   "threads_per_block": launch.MAX_THREADS_PER_BLOCK,
                                   "cluster_size": launch.MAX_CLUSTER_SIZE, "smem": _largest_smem()}


def _over_each_limit():
    """One launch past each limit of jaxptx/launch.py, as (grid, block,
    cluster, smem), and what the shim says of it. grid.x's limit is int32's
    largest value, so no int32 attribute can pass it."""
    from jaxptx.launch import MAX_BLOCK, MAX_CLUSTER_SIZE, MAX_GRID, MAX_THREADS_PER_BLOCK

    n = MAX_CLUSTER_SIZE + 1
    return dict(zip(_LIMITS, [
        (([1, MAX_GRID[1] + 1, 1], [1, 1, 1], [1, 1, 1], 0), rf"grid\.y = {MAX_GRID[1] + 1} exceeds CUDA's limit "),
        (([1, 1, MAX_GRID[2] + 1], [1, 1, 1], [1, 1, 1], 0), rf"grid\.z = {MAX_GRID[2] + 1} exceeds CUDA's limit "),
        (([1, 1, 1], [MAX_BLOCK[0] + 1, 1, 1], [1, 1, 1], 0), rf"block\.x = {MAX_BLOCK[0] + 1} exceeds "),
        (([1, 1, 1], [1, MAX_BLOCK[1] + 1, 1], [1, 1, 1], 0), rf"block\.y = {MAX_BLOCK[1] + 1} exceeds "),
        (([1, 1, 1], [1, 1, MAX_BLOCK[2] + 1], [1, 1, 1], 0), rf"block\.z = {MAX_BLOCK[2] + 1} exceeds "),
        (([1, 1, 1], [MAX_THREADS_PER_BLOCK // 2, 3, 1], [1, 1, 1], 0),
         rf"has {MAX_THREADS_PER_BLOCK // 2 * 3} threads, over CUDA's limit of {MAX_THREADS_PER_BLOCK} per block"),
        (([n, 1, 1], [1, 1, 1], [n, 1, 1], 0),
         rf"cluster = \({n}, 1, 1\) has {n} blocks, over CUDA's portable limit of {MAX_CLUSTER_SIZE}"),
        (([1, 1, 1], [1, 1, 1], [1, 1, 1], _largest_smem() + 1), rf"smem = {_largest_smem() + 1}: expected 0 to "),
    ], strict=True))


_LIMITS = ["grid.y", "grid.z", "block.x", "block.y", "block.z", "threads", "cluster", "smem"]


@pytest.mark.parametrize("limit", _LIMITS)
def test_the_shim_and_launch_py_refuse_one_past_each_limit(limit):
    import jaxptx._ffi as ffi
    from jaxptx.errors import LaunchError
    from jaxptx.launch import Launch

    (grid, block, cluster, smem), message = _over_each_limit()[limit]
    said = ffi.check_call("jaxptx_cpu_v2", 7, b"ptx", "k", grid, block, cluster, smem, [], [], [])
    assert re.search(message, said), said
    with pytest.raises(LaunchError, match="exceeds|over CUDA's"):
        Launch(grid, block, cluster, smem)


def test_the_shim_and_launch_py_accept_a_launch_at_every_limit():
    import jaxptx._ffi as ffi
    from jaxptx.launch import MAX_BLOCK, MAX_CLUSTER_SIZE, MAX_GRID, MAX_THREADS_PER_BLOCK, Launch

    for grid, block, cluster in [((MAX_CLUSTER_SIZE, MAX_GRID[1], MAX_GRID[2]), (MAX_THREADS_PER_BLOCK, 1, 1),
                                  (MAX_CLUSTER_SIZE, 1, 1)),
                                 ((MAX_GRID[0], 1, 1), (1, MAX_THREADS_PER_BLOCK // MAX_BLOCK[2], MAX_BLOCK[2]),
                                  (1, 1, 1))]:
        said = ffi.check_call("jaxptx_cpu_v2", 7, b"ptx", "k", list(grid), list(block), list(cluster),
                              _largest_smem(), [], [], [])
        assert "attribute launch" not in said and "does not match" in said, said   # only the id is wrong
        Launch(grid, block, cluster, _largest_smem())


# Marks only the stand-in driver's code carries (ffi/standin_driver.cc), and
# the text the PTX parameter parser it replaced carried (cuFuncGetParamInfo
# now tells the handler a kernel's parameters).
_STAND_IN_MARKS = (b"no stand-in driver is installed", b"the stand-in driver loads PTX, not cubins")
_PARSER_MARKS = (b"unknown parameter type", b"the PTX has no .entry")


def test_the_products_extension_holds_no_test_double():
    """jaxptx._ffi ships no stand-in driver and no PTX parameter parser: the
    stand-in is the testing layer's own extension, which does hold it (so the
    marks below are real ones), installed through set_cuda_driver."""
    import jaxptx._ffi as ffi
    import jaxptx.testing._standin as standin

    names = [n for n in dir(ffi) if not n.startswith("__")]
    assert [n for n in names if "standin" in n or "entry_param" in n] == []
    assert "set_cuda_driver" in names and "call_cuda_handler" in names  # the seam; torch's launcher
    product = pathlib.Path(ffi.__file__).read_bytes()
    testing = pathlib.Path(standin.__file__).read_bytes()
    assert [m for m in _STAND_IN_MARKS + _PARSER_MARKS if m in product] == []
    assert [m for m in _STAND_IN_MARKS if m not in testing] == []
    assert {"driver_table", "install", "uninstall"} <= set(dir(standin))

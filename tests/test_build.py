"""The compiled extension is built, installed and matches the package metadata."""

import importlib.metadata


def test_ffi_imports_with_package_version():
    import jaxptx._ffi as ffi

    assert ffi.__version__ == importlib.metadata.version("jaxptx")


def test_abi_info_is_a_dict():
    import jaxptx._ffi as ffi

    info = ffi.abi_info()
    assert isinstance(info, dict)
    assert {"compiler", "nanobind", "stable_abi"} <= info.keys()

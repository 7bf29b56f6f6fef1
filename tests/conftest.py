"""Shared fixtures: where the shared corpus lives, GPU detection for `gpu` tests."""

from __future__ import annotations

import pathlib

import pytest

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared"


def _has_gpu() -> bool:
    from jaxptx.runtime import detect_arch  # cuda.bindings is optional

    try:
        import os
        if os.environ.get("JAXPTX_ARCH"):
            return False
        return detect_arch() is not None
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver (none found)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _cubin_cache_in_a_temporary_directory(tmp_path_factory: pytest.TempPathFactory):
    """Tests never read or fill the user's cubin cache."""
    import os
    old = os.environ.get("JAXPTX_CACHE_DIR")
    os.environ["JAXPTX_CACHE_DIR"] = str(tmp_path_factory.mktemp("cubin-cache"))
    yield
    if old is None:
        os.environ.pop("JAXPTX_CACHE_DIR", None)
    else:
        os.environ["JAXPTX_CACHE_DIR"] = old


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-differential", action="store_true",
                     help="run every emulator launch on the general and the fast paths and compare "
                          "(tests/differential.py)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--sim-differential"):
        import differential
        differential.install()

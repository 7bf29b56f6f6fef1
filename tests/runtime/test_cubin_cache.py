"""The on-disk cubin cache: keyed by PTX, target and compiler version."""

from __future__ import annotations

import pytest

from jaxptx import kernel, ptx
from jaxptx.runtime import cache_dir, compile_cubin


@kernel(arch="sm_90a")
def noop():
    ptx.ret()


def _entries(root):
    return sorted(p for p in (root / "cubin").rglob("*.cubin"))


@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink"])
def test_a_compile_is_stored_and_read_back(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path))
    text = noop.ptx()
    cubin = compile_cubin(text, "sm_90a", backend=backend)
    (entry,) = _entries(tmp_path)
    assert entry.read_bytes() == cubin and cubin.startswith(b"\x7fELF")
    marker = b"\x7fELF read from the cache"
    entry.write_bytes(marker)
    assert compile_cubin(text, "sm_90a", backend=backend) == marker
    assert compile_cubin(text, "sm_90a", backend=backend, cache=False) == cubin


def test_target_backend_and_ptx_are_in_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path))
    text = noop.ptx().replace("sm_90a", "sm_80")
    compile_cubin(text, "sm_80", backend="ptxas")
    compile_cubin(text, "sm_80", backend="nvjitlink")
    compile_cubin(text, "sm_90", backend="ptxas")  # sm_80 PTX compiles for later targets
    compile_cubin(text + "\n", "sm_80", backend="ptxas")
    assert len(_entries(tmp_path)) == 4


def test_a_broken_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path))
    cubin = compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")
    (entry,) = _entries(tmp_path)
    entry.write_bytes(b"half a fi")
    assert compile_cubin(noop.ptx(), "sm_90a", backend="ptxas") == cubin
    assert entry.read_bytes() == cubin


def test_the_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path / "here"))
    assert cache_dir() == tmp_path / "here"
    monkeypatch.setenv("JAXPTX_CACHE_DIR", "")
    assert cache_dir() is None
    compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")  # the cache is off: nothing written
    assert not (tmp_path / "here").exists()
    monkeypatch.delenv("JAXPTX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "jaxptx"

"""The on-disk cubin cache: keyed by PTX, target and compiler version;
entries verified against their digest (corrupt ones rebuilt), temp files of
interrupted writes removed, and the size bounded by LRU eviction."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jaxptx import kernel, ptx
from jaxptx.runtime import _cache, cache_dir, cache_max_bytes, compile_cubin


@kernel(arch="sm_90a")
def noop():
    ptx.ret()


@kernel(arch="sm_90a")
def other():
    ptx.exit()


def _entries(root):
    return sorted(p for p in (root / "cubin").rglob("*.cubin"))


def _payload(path):
    return path.read_bytes()[len(_cache._MAGIC) + _cache._DIGEST_BYTES:]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("JAXPTX_CACHE_MAX_BYTES", raising=False)
    return tmp_path


@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink"])
def test_a_compile_is_stored_with_its_digest_and_read_back(cache, backend):
    cubin = compile_cubin(noop.ptx(), "sm_90a", backend=backend)
    (entry,) = _entries(cache)
    assert cubin.startswith(b"\x7fELF")
    assert entry.read_bytes().startswith(_cache._MAGIC) and _payload(entry) == cubin
    before = entry.stat().st_mtime_ns
    os.utime(entry, ns=(before - 10**9, before - 10**9))
    assert compile_cubin(noop.ptx(), "sm_90a", backend=backend) == cubin
    assert entry.stat().st_mtime_ns > before - 10**9  # a hit refreshes the entry's time


def test_target_backend_and_ptx_are_in_the_key(cache):
    text = noop.ptx().replace("sm_90a", "sm_80")
    compile_cubin(text, "sm_80", backend="ptxas")
    compile_cubin(text, "sm_80", backend="nvjitlink")
    compile_cubin(text, "sm_90", backend="ptxas")  # sm_80 PTX compiles for later targets
    compile_cubin(text + "\n", "sm_80", backend="ptxas")
    assert len(_entries(cache)) == 4


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _headerless(path):
    path.write_bytes(_payload(path))  # an ELF image without the digest (an old cache)


@pytest.mark.parametrize("corrupt", [_truncate, _flip_a_bit, _headerless,
                                     lambda p: p.write_bytes(b""),
                                     lambda p: p.write_bytes(_cache._MAGIC)],
                         ids=["truncated", "bit-flipped", "no-digest", "empty", "header-only"])
def test_a_corrupt_entry_is_rebuilt(cache, corrupt):
    cubin = compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")
    (entry,) = _entries(cache)
    corrupt(entry)
    assert compile_cubin(noop.ptx(), "sm_90a", backend="ptxas") == cubin
    assert _payload(entry) == cubin and entry.read_bytes().startswith(_cache._MAGIC)


def test_a_swapped_entry_is_not_served_for_another_key(cache):
    a = compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")
    entry_a, = _entries(cache)
    b = compile_cubin(other.ptx(), "sm_90a", backend="ptxas")
    entry_b, = [p for p in _entries(cache) if p != entry_a]
    assert a != b
    entry_b.write_bytes(entry_a.read_bytes())  # a valid entry under the wrong name
    assert compile_cubin(other.ptx(), "sm_90a", backend="ptxas") == b
    assert _payload(entry_b) == b


def test_temp_files_of_interrupted_writes_are_removed(cache):
    compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")
    folder = _entries(cache)[0].parent
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    of_dead = folder / f".tmp-{dead}-abc"
    stale = folder / f".tmp-{os.getpid()}-old"
    live = folder / f".tmp-{os.getpid()}-now"  # a write in progress in this process
    for p in (of_dead, stale, live):
        p.write_bytes(b"half an entry")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    compile_cubin(other.ptx(), "sm_90a", backend="ptxas")  # a write sweeps
    assert not of_dead.exists() and not stale.exists() and live.exists()


def test_least_recently_used_entries_are_evicted_past_the_bound(cache, monkeypatch):
    cubin = compile_cubin(noop.ptx(), "sm_90a", backend="ptxas", cache=False)
    size = len(_cache._MAGIC) + _cache._DIGEST_BYTES + len(cubin)
    monkeypatch.setenv("JAXPTX_CACHE_MAX_BYTES", str(2 * size))
    compiles = []

    def compile_():
        compiles.append(1)
        return cubin

    for i, text in enumerate(["a", "b"]):
        _cache.cached(text, "sm_90a", "test", compile_)
        for p in _entries(cache):  # distinct, increasing times
            os.utime(p, (p.stat().st_mtime - 100 + i, p.stat().st_mtime - 100 + i))
    time.sleep(0.01)
    _cache.cached("a", "sm_90a", "test", compile_)  # a hit: "a" is now the most recent
    _cache.cached("c", "sm_90a", "test", compile_)  # over the bound: "b" goes
    assert len(compiles) == 3 and len(_entries(cache)) == 2
    _cache.cached("a", "sm_90a", "test", compile_)
    _cache.cached("c", "sm_90a", "test", compile_)
    assert len(compiles) == 3
    _cache.cached("b", "sm_90a", "test", compile_)
    assert len(compiles) == 4


def test_the_bound_comes_from_the_environment(cache, monkeypatch):
    assert cache_max_bytes() == _cache.DEFAULT_MAX_BYTES == 1 << 30
    for text, value in [("512K", 512 << 10), ("2g", 2 << 30), ("1000", 1000), (" 0 ", 0)]:
        monkeypatch.setenv("JAXPTX_CACHE_MAX_BYTES", text)
        assert cache_max_bytes() == value
    compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")  # 0: nothing is kept
    assert _entries(cache) == []
    monkeypatch.setenv("JAXPTX_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"JAXPTX_CACHE_MAX_BYTES='lots': expected the cubin "
                                         r"cache's size bound as a byte count >= 0 with an "
                                         r"optional K, M or G suffix \(1000000, 512M, 2G; 0 keeps "
                                         r"nothing\); unset it for the default 1G"):
        cache_max_bytes()


@pytest.mark.parametrize("text", ["garbage", "1.5G", "-1", "10KB", "\u00b2"])
def test_a_malformed_bound_fails_naming_the_variable_before_any_compile(cache, monkeypatch, text):
    monkeypatch.setenv("JAXPTX_CACHE_MAX_BYTES", text)
    compiled = []
    with pytest.raises(ValueError, match=r"^JAXPTX_CACHE_MAX_BYTES=" + repr(text).replace(".", r"\.")
                       + r": expected the cubin cache's size bound"):
        _cache.cached(noop.ptx(), "sm_90a", "test", lambda: compiled.append(1) or b"cubin")
    assert compiled == [] and _entries(cache) == []


def test_the_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXPTX_CACHE_DIR", str(tmp_path / "here"))
    assert cache_dir() == tmp_path / "here"
    compile_cubin(noop.ptx(), "sm_90a", backend="ptxas")
    assert (tmp_path / "here").stat().st_mode & 0o777 == 0o700  # private
    monkeypatch.setenv("JAXPTX_CACHE_DIR", "")
    assert cache_dir() is None
    compile_cubin(other.ptx(), "sm_90a", backend="ptxas")  # the cache is off: nothing written
    assert len(_entries(tmp_path / "here")) == 1
    monkeypatch.delenv("JAXPTX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "jaxptx"

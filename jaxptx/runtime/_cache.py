"""An on-disk cache of compiled cubins.

Compiling PTX takes tens to hundreds of milliseconds a kernel; a process
that lowers the same kernels again (every test run, every restart of a
training job) finds them here instead. An entry is keyed by a hash of the
PTX, the target, the compiler and its version, so a new toolchain never
serves an old result. Entries are written to a temporary file and renamed
into place, so concurrent processes never read half a file; an entry that
is not an ELF image is ignored and overwritten.

The directory is ``$JAXPTX_CACHE_DIR`` when set (an empty value turns the
cache off), else ``$XDG_CACHE_HOME/jaxptx`` or ``~/.cache/jaxptx``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["cache_dir", "cached"]

_ELF_MAGIC = b"\x7fELF"


def cache_dir() -> Path | None:
    """The cubin cache directory, or None when the cache is off."""
    env = os.environ.get("JAXPTX_CACHE_DIR")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxptx"


def cached(ptx: str, arch: str, compiler: str, compile: Callable[[], bytes]) -> bytes:
    """The cubin of ``ptx`` for ``arch`` from the cache, or ``compile()``'s
    result, stored for next time. ``compiler`` names the compiler and its
    version (``"nvjitlink 13.0"``). Failures to read or write the cache
    only cost a compile."""
    root = cache_dir()
    if root is None:
        return compile()
    key = hashlib.sha256("\0".join((compiler, arch, ptx)).encode()).hexdigest()
    path = root / "cubin" / key[:2] / f"{key}.cubin"
    try:
        data = path.read_bytes()
        if data.startswith(_ELF_MAGIC):
            return data
    except OSError:
        pass
    cubin = compile()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    except OSError:
        pass
    return cubin

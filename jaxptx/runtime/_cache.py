"""An on-disk cache of compiled cubins (and of NVRTC's PTX, ``_nvrtc``).

Compiling PTX takes tens to hundreds of milliseconds a kernel; a process
that lowers the same kernels again (every test run, every restart of a
training job) finds them here instead.

* **Key.** An entry is keyed by a hash of the PTX, the target, the compiler
  and its version, so a new toolchain never serves an old result.
* **Integrity.** Each file holds a header, the SHA-256 of its key and
  payload, then the cubin. A read recomputes the digest: a truncated,
  bit-flipped or foreign file (an entry copied over another's name) fails,
  is deleted and rebuilt. The digest detects corruption and mix-ups; it is
  not a secret, so it does not stop someone who can write the directory
  from planting a consistent entry: the directory is created private
  (mode 0700) and should stay so.
* **Atomic writes.** An entry is written to ``.tmp-<pid>-*`` beside it and
  renamed into place, so concurrent processes never read half a file; temp
  files left by a process that died mid-write are removed by the next
  write's sweep (those of a dead pid, or older than a minute).
* **Bounded.** Reads refresh an entry's modification time; after each
  write, the least recently used entries are deleted until the cache holds
  at most ``$JAXPTX_CACHE_MAX_BYTES`` (an int, optionally with a ``K``,
  ``M`` or ``G`` suffix; default ``1G``; ``0`` keeps nothing).

The directory is ``$JAXPTX_CACHE_DIR`` when set (an empty value turns the
cache off), else ``$XDG_CACHE_HOME/jaxptx`` or ``~/.cache/jaxptx``.
Failures to read or write the cache only ever cost a compile.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["cache_dir", "cache_max_bytes", "cached", "DEFAULT_MAX_BYTES"]

_MAGIC = b"jaxptx-cubin-v1\n"
_DIGEST_BYTES = 32
_TEMP_PREFIX = ".tmp-"
# A temp file this old belongs to a write that will not finish.
_STALE_TEMP_SECONDS = 60.0
DEFAULT_MAX_BYTES = 1 << 30
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_DIGITS = re.compile(r"[0-9]+")     # ASCII only: str.isdigit() also takes "²"


def cache_dir() -> Path | None:
    """The cubin cache directory, or None when the cache is off."""
    env = os.environ.get("JAXPTX_CACHE_DIR")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxptx"


def cache_max_bytes() -> int:
    """The cache's size bound in bytes, from ``$JAXPTX_CACHE_MAX_BYTES``
    (``"512M"``, ``"2G"``, ``"1000000"``; default 1 GiB).

    Raises:
        ValueError: the variable is not a non-negative int with an optional
            K, M or G suffix; the message names the variable and its value.
    """
    raw = os.environ.get("JAXPTX_CACHE_MAX_BYTES", "")
    text = raw.strip().upper()
    if not text:
        return DEFAULT_MAX_BYTES
    number, suffix = (text[:-1], text[-1]) if text[-1] in "KMG" else (text, "")
    if not _DIGITS.fullmatch(number):
        raise ValueError(f"JAXPTX_CACHE_MAX_BYTES={raw!r}: expected the cubin cache's size bound "
                         "as a byte count >= 0 with an optional K, M or G suffix (1000000, 512M, "
                         "2G; 0 keeps nothing); unset it for the default 1G")
    return int(number) * _SUFFIXES[suffix]


def cached(ptx: str, arch: str, compiler: str, compile: Callable[[], bytes], *,
           kind: str = "cubin") -> bytes:
    """The cubin of ``ptx`` for ``arch`` from the cache, or ``compile()``'s
    result, stored for next time. ``compiler`` names the compiler and its
    version (``"nvjitlink 13.0"``). ``kind`` names the entries' subdirectory
    and suffix: ``"cubin"``, or ``"nvrtc"`` for NVRTC's output (``ptx`` is
    then the text of the compile's key); each kind is bounded on its own.

    Raises:
        ValueError: ``JAXPTX_CACHE_MAX_BYTES`` is malformed (checked before
            anything is read or compiled).
    """
    root = cache_dir()
    if root is None:
        return compile()
    limit = cache_max_bytes()   # a bad setting fails before any work, not after a compile
    key = hashlib.sha256("\0".join((compiler, arch, ptx)).encode()).hexdigest()
    path = root / kind / key[:2] / f"{key}.{kind}"
    cubin = _read(path, key)
    if cubin is not None:
        return cubin
    cubin = compile()
    try:
        if limit > 0:
            _write(root, path, key, cubin)
        _sweep(root / kind, limit)
    except OSError:
        pass
    return cubin


def _digest(key: str, payload: bytes) -> bytes:
    return hashlib.sha256(key.encode() + b"\0" + payload).digest()


def _read(path: Path, key: str) -> bytes | None:
    """The entry's cubin when its digest holds (its time refreshed), else
    None; a corrupt entry is deleted."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + _DIGEST_BYTES
    payload = data[head:]
    if (data[:len(_MAGIC)] == _MAGIC and len(data) > head
            and data[len(_MAGIC):head] == _digest(key, payload)):
        try:
            os.utime(path)
        except OSError:
            pass
        return payload
    try:
        path.unlink()
    except OSError:
        pass
    return None


def _write(root: Path, path: Path, key: str, cubin: bytes) -> None:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{_TEMP_PREFIX}{os.getpid()}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + _digest(key, cubin) + cubin)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sweep(entries_dir: Path, limit: int) -> None:
    """Delete temp files of writes that died, then the least recently used
    entries (``<key>.<kind>`` files in the directory named after their kind)
    until the rest fit in ``limit`` bytes."""
    if not entries_dir.is_dir():
        return
    now = time.time()
    entries = []
    for p in entries_dir.glob("*/*"):
        try:
            st = p.stat()
        except OSError:
            continue
        if p.name.startswith(_TEMP_PREFIX):
            if _abandoned(p.name, now - st.st_mtime):
                p.unlink(missing_ok=True)
        elif p.suffix == f".{entries_dir.name}":
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        try:
            p.unlink()
            total -= size
        except OSError:
            pass


def _abandoned(name: str, age: float) -> bool:
    """Whether a temp file's write can no longer finish: its process is
    gone, or it is older than any write takes."""
    if age > _STALE_TEMP_SECONDS:
        return True
    pid = name[len(_TEMP_PREFIX):].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False

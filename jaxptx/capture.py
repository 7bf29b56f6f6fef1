"""Launch captures: one self-contained file per kernel launch, to replay on
the emulator (:mod:`jaxptx.replay`).

With ``JAXPTX_CAPTURE_DIR=DIR`` set, every launch through the CPU handler
(``jax.jit`` on the CPU, ``jaxptx.torch`` on CPU tensors), the CUDA handler
(``jax.jit`` on a GPU, ``jaxptx.torch`` on CUDA tensors) and
:meth:`jaxptx.sim.Device.launch` writes one file to ``DIR``: the PTX, the
entry, the launch shape, the kernel id, every parameter (pointers as buffer
indices and offsets, raw scalars as their bytes, tensor maps as the call's
encode records), each buffer's bytes before and after the launch, and a
digest of it all. Off (the variable unset or empty), nothing is recorded and
a launch pays one dictionary lookup. ``JAXPTX_CAPTURE_MAX_BYTES`` (default
1 GiB) caps the bytes one capture may hold; a larger launch is skipped with
a :class:`CaptureWarning`.

The file::

    JXCAP1\\n
    <header: one line of JSON, sorted keys>\\n
    <payload: the blobs the header names by offset and size>
    <32 bytes: SHA-256 of everything before them>

A file whose digest, length or header does not hold is refused
(:class:`CaptureError`), never replayed.

Importing this module imports only the standard library and numpy.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import itertools
import json
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Capture", "Buffer", "CaptureError", "CaptureWarning", "ENV_DIR", "ENV_MAX_BYTES",
           "directory", "load", "save", "suppressed", "FORMAT_VERSION"]

ENV_DIR = "JAXPTX_CAPTURE_DIR"
ENV_MAX_BYTES = "JAXPTX_CAPTURE_MAX_BYTES"
FORMAT_VERSION = 1
_MAGIC = b"JXCAP1\n"
_DIGEST = 32
_DEFAULT_MAX_BYTES = 1 << 30
SOURCES = ("sim", "cpu", "cuda")


class CaptureError(ValueError):
    """A capture file that cannot be read: truncated, edited, or not a capture."""


class CaptureWarning(UserWarning):
    """A launch that was not captured (too large, or its bytes could not be read)."""


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One memory buffer of a captured launch.

    Attributes:
        name: what it was (``"input 0"``, ``"output 1"``, ``"allocation 3"``).
        before: its bytes when the launch started.
        after: its bytes when the launch ended.
        dtype: the numpy dtype name of its elements, when known.
        shape: its shape, when known.
        address: its device address (:class:`jaxptx.sim.Device` captures:
            the replay places it there, so addresses packed into raw
            parameters and tensor maps stay valid).
    """

    name: str
    before: bytes
    after: bytes
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    address: int | None = None


@dataclasses.dataclass(frozen=True)
class Capture:
    """One launch, as recorded (see the module docstring).

    Attributes:
        source: ``"sim"`` (:meth:`jaxptx.sim.Device.launch`), ``"cpu"`` or
            ``"cuda"`` (the FFI handlers).
        ptx: the module's PTX text.
        entry: the ``.entry`` launched.
        grid, block, cluster: the launch shape; smem: dynamic shared bytes.
        buffers: the launch's memory (:class:`Buffer`).
        params: one per ``.param`` of the entry, in order:
            ``("pointer", buffer, offset)``, ``("bytes", data)`` or
            ``("tensor_map", record)`` (an index into ``tma``).
        tma: the call's tensor-map records (``jaxptx.jax._tma``: buffer
            indices are parameter indices), for ``"cpu"``/``"cuda"``.
        kernel_id: the call's kernel id (FFI captures).
        arch: the target the emulator ran it for (``None``: the module's).
        globals: ``(name, before, after)`` of the module's global variables.
        meta: what recorded it (jaxptx version, platform); not compared.
    """

    source: str
    ptx: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int
    buffers: tuple[Buffer, ...]
    params: tuple[tuple, ...]
    tma: tuple[int, ...] = ()
    kernel_id: int | None = None
    arch: str | None = None
    globals: tuple[tuple[str, bytes, bytes], ...] = ()
    meta: dict = dataclasses.field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of memory the capture holds (before and after)."""
        return sum(len(b.before) + len(b.after) for b in self.buffers) + \
            sum(len(g[1]) + len(g[2]) for g in self.globals)


# -- recording -----------------------------------------------------------------

_SUPPRESSED: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxptx_capture_off", default=False)
_COUNTER = itertools.count()
_COUNTER_LOCK = threading.Lock()


def directory() -> Path | None:
    """Where launches are captured now (``JAXPTX_CAPTURE_DIR``), or None
    when captures are off or suppressed (:func:`suppressed`)."""
    value = os.environ.get(ENV_DIR)
    if not value or _SUPPRESSED.get():
        return None
    return Path(value)


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """No :meth:`jaxptx.sim.Device.launch` capture inside: for launches a
    handler records itself (the CPU handler's emulator runs, the stand-in
    driver's)."""
    token = _SUPPRESSED.set(True)
    try:
        yield
    finally:
        _SUPPRESSED.reset(token)


def max_bytes() -> int:
    """The largest capture written (``JAXPTX_CAPTURE_MAX_BYTES``)."""
    value = os.environ.get(ENV_MAX_BYTES)
    if not value:
        return _DEFAULT_MAX_BYTES
    try:
        limit = int(value)
    except ValueError:
        raise CaptureError(f"{ENV_MAX_BYTES}: expected a number of bytes, got {value!r}") from None
    if limit < 0:
        raise CaptureError(f"{ENV_MAX_BYTES}: expected a number of bytes >= 0, got {limit}")
    return limit


def fits(nbytes: int, entry: str) -> bool:
    """Whether a capture of ``nbytes`` of memory is written; warns when not."""
    limit = max_bytes()
    if nbytes <= limit:
        return True
    warnings.warn(f"jaxptx capture: kernel {entry}: {nbytes} bytes of memory exceed "
                  f"{ENV_MAX_BYTES}={limit}; this launch was not captured", CaptureWarning,
                  stacklevel=3)
    return False


def record(capture: Capture, where: Path | None = None) -> Path | None:
    """Write ``capture`` into the capture directory (or ``where``) under a
    fresh name; None when it is over the size cap."""
    where = where if where is not None else directory()
    if where is None:
        return None
    if not fits(capture.nbytes, capture.entry):
        return None
    where.mkdir(parents=True, exist_ok=True)
    with _COUNTER_LOCK:
        n = next(_COUNTER)
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in capture.entry)[:80]
    path = where / f"{safe}-{capture.source}-{os.getpid()}-{n:05d}.jxcap"
    save(capture, path)
    return path


def meta() -> dict:
    """What the recording side was (not compared on replay)."""
    import platform

    from . import __version__
    return {"jaxptx": __version__, "python": platform.python_version(), "machine": platform.node()}


# -- the file --------------------------------------------------------------------

class _Blobs:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> list[int]:
        ref = [self.size, len(data)]
        self.parts.append(bytes(data))
        self.size += len(data)
        return ref


def save(capture: Capture, path: str | os.PathLike) -> None:
    """Write ``capture`` to ``path`` (the format of the module docstring)."""
    if capture.source not in SOURCES:
        raise ValueError(f"capture source: expected one of {SOURCES}, got {capture.source!r}")
    blobs = _Blobs()
    params = []
    for p in capture.params:
        if p[0] == "bytes":
            params.append(["bytes", blobs.add(p[1])])
        else:
            params.append([p[0], *(int(v) for v in p[1:])])
    header = {
        "format": FORMAT_VERSION, "source": capture.source, "entry": capture.entry,
        "ptx": blobs.add(capture.ptx.encode()),
        "grid": list(capture.grid), "block": list(capture.block), "cluster": list(capture.cluster),
        "smem": int(capture.smem), "kernel_id": capture.kernel_id, "arch": capture.arch,
        "tma": [int(v) for v in capture.tma], "params": params,
        "buffers": [{"name": b.name, "dtype": b.dtype,
                     "shape": None if b.shape is None else list(b.shape), "address": b.address,
                     "before": blobs.add(b.before), "after": blobs.add(b.after)}
                    for b in capture.buffers],
        "globals": [[name, blobs.add(before), blobs.add(after)] for name, before, after in capture.globals],
        "meta": capture.meta, "payload": blobs.size,
    }
    head = _MAGIC + json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    digest = hashlib.sha256(head)
    for part in blobs.parts:
        digest.update(part)
    tmp = Path(f"{os.fspath(path)}.partial")
    with open(tmp, "wb") as f:
        f.write(head)
        for part in blobs.parts:
            f.write(part)
        f.write(digest.digest())
    os.replace(tmp, path)       # a reader never sees half a file under the final name


def load(path: str | os.PathLike) -> Capture:
    """Read a capture file.

    Raises:
        CaptureError: not a capture, truncated, or edited (its digest does
            not match), naming the file and what is wrong.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CaptureError(f"{path}: cannot read: {e.strerror or e}") from None
    if not data.startswith(_MAGIC):
        raise CaptureError(f"{path}: not a jaxptx capture (it does not start with {_MAGIC!r})")
    end = data.find(b"\n", len(_MAGIC))
    if end < 0 or len(data) < end + 1 + _DIGEST:
        raise CaptureError(f"{path}: truncated: {len(data)} bytes, the header or digest is missing")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise CaptureError(f"{path}: its SHA-256 digest does not match its contents: the file "
                           "was truncated or edited after it was written; refusing to replay it")
    try:
        header = json.loads(data[len(_MAGIC):end])
    except ValueError as e:
        raise CaptureError(f"{path}: the header is not JSON: {e}") from None
    payload = body[end + 1:]
    if header.get("format") != FORMAT_VERSION:
        raise CaptureError(f"{path}: capture format {header.get('format')!r}; this jaxptx reads "
                           f"format {FORMAT_VERSION}")
    if header.get("payload") != len(payload):
        raise CaptureError(f"{path}: the header names {header.get('payload')} payload bytes, "
                           f"the file holds {len(payload)}")
    try:
        return _capture(header, payload)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise CaptureError(f"{path}: malformed header: {type(e).__name__}: {e}") from None


def _blob(payload: bytes, ref: Sequence[int]) -> bytes:
    offset, size = (int(v) for v in ref)
    if offset < 0 or size < 0 or offset + size > len(payload):
        raise ValueError(f"blob [{offset}, +{size}) outside the {len(payload)}-byte payload")
    return payload[offset:offset + size]


def _capture(h: dict, payload: bytes) -> Capture:
    params: list[tuple] = []
    for p in h["params"]:
        if p[0] == "bytes":
            params.append(("bytes", _blob(payload, p[1])))
        elif p[0] in ("pointer", "tensor_map"):
            params.append((p[0], *(int(v) for v in p[1:])))
        else:
            raise ValueError(f"unknown parameter kind {p[0]!r}")
    buffers = tuple(Buffer(b["name"], _blob(payload, b["before"]), _blob(payload, b["after"]),
                           b["dtype"], None if b["shape"] is None else tuple(b["shape"]), b["address"])
                    for b in h["buffers"])
    return Capture(
        source=h["source"], ptx=_blob(payload, h["ptx"]).decode(), entry=h["entry"],
        grid=tuple(h["grid"]), block=tuple(h["block"]), cluster=tuple(h["cluster"]),
        smem=int(h["smem"]), buffers=buffers, params=tuple(params), tma=tuple(h["tma"]),
        kernel_id=h["kernel_id"], arch=h["arch"],
        globals=tuple((g[0], _blob(payload, g[1]), _blob(payload, g[2])) for g in h["globals"]),
        meta=h.get("meta", {}))


def ffi_params(n_pointers: int, buffer_of: Sequence[int], scalars: Sequence[bytes],
               n_maps: int) -> tuple[tuple, ...]:
    """An FFI call's parameters: its buffers' pointers (parameter i is buffer
    ``buffer_of[i]``), then the raw scalars, then the tensor maps."""
    return (*(("pointer", buffer_of[i], 0) for i in range(n_pointers)),
            *(("bytes", bytes(s)) for s in scalars),
            *(("tensor_map", j) for j in range(n_maps)))


def scalar_bytes(nbytes: int, bits: int) -> bytes:
    """A raw scalar param's bytes from the FFI ``scalars`` attribute's
    ``(bytes, bits)`` pair: the low ``nbytes`` of its 64 bits, little-endian."""
    return (int(bits) & (2**64 - 1)).to_bytes(8, "little")[:int(nbytes)]


def record_ffi(source: str, kernel_id: int, ptx: str, entry: str, shape: tuple, n_in: int,
               buffer_of: Sequence[int], before: Sequence[bytes], after: Sequence[bytes],
               types: Sequence[tuple[str | None, Sequence[int] | None]], scalars: Sequence[bytes],
               tma: Sequence[int], n_maps: int) -> Path | None:
    """Write the capture of one FFI call's launch (``source`` ``"cpu"`` or
    ``"cuda"``): ``buffer_of[i]`` is the distinct buffer of pointer
    parameter i, ``types[i]`` its ``(numpy dtype name, shape)``; ``shape``
    the launch's ``(grid, block, cluster, smem)``."""
    first = {b: i for i, b in reversed(list(enumerate(buffer_of)))}
    names = buffer_names(n_in, buffer_of)
    buffers = []
    for b, (data, now) in enumerate(zip(before, after)):
        dtype, dims = types[first[b]] if first[b] < len(types) else (None, None)
        buffers.append(Buffer(names[b], bytes(data), bytes(now), dtype or None,
                              None if dims is None else tuple(int(d) for d in dims)))
    grid, block, cluster, smem = shape
    return record(Capture(
        source=source, ptx=ptx, entry=entry, grid=tuple(grid), block=tuple(block),
        cluster=tuple(cluster), smem=int(smem), buffers=tuple(buffers),
        params=ffi_params(len(buffer_of), buffer_of, scalars, n_maps),
        tma=tuple(int(v) for v in tma), kernel_id=int(kernel_id), meta=meta()))


def buffer_names(n_in: int, buffer_of: Sequence[int]) -> list[str]:
    """Names of an FFI call's distinct buffers: the first parameter each
    one is (``"input 0"``, ``"output 1"``)."""
    names: dict[int, str] = {}
    for i, b in enumerate(buffer_of):
        names.setdefault(b, f"input {i}" if i < n_in else f"output {i - n_in}")
    return [names[b] for b in sorted(names)]


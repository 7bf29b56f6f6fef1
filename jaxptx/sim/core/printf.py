"""Device ``printf``: CUDA's ``vprintf(format, buffer)`` on the emulator.

The call's convention (format conversions, the argument buffer's layout)
is :mod:`jaxptx._vprintf`'s. Semantics (CUDA C++ Programming Guide,
"Formatted Output"): the final formatting takes place on the host with the
host's C library, so each conversion is formatted here by the C library's
``snprintf``; ``printf`` returns the number of arguments parsed (0 when
none, -1 for a NULL format); at most 32 arguments are read, and
conversions past them are printed as written. A conversion CUDA's printf
does not take is a :class:`SimError` naming the call's line and the
conversion, never a guess.

Order: each executed ``vprintf`` prints at once to ``sys.stdout`` (as
bytes, flushed), the calling threads' texts in ascending global thread
order (CTA linear index, then thread linear index in the CTA); calls print
in the order the emulator executes them, which is program order for each
thread (a call every thread makes prints for all of them before the next
call does). Text printed before a fault or a hang is not lost.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import TYPE_CHECKING

import numpy as np

from ..._vprintf import Conversion, layout, parse_format, plan
from .naming import where
from ..errors import SimError
from ..memory.spaces import SHARED_WINDOW

if TYPE_CHECKING:
    from .step import Step

__all__ = ["vprintf"]


@functools.cache
def _snprintf():
    """The C library's ``snprintf`` (CUDA formats printf output on the host
    with the host's C library)."""
    try:
        fn = ctypes.CDLL(None).snprintf
    except (OSError, AttributeError) as e:      # no C library to call
        raise SimError(f"vprintf: formatting needs the C library's snprintf, which ctypes cannot load ({e})")
    fn.restype = ctypes.c_int
    return fn


def _format_one(spec: bytes, args: list) -> bytes:
    """``spec`` formatted with ``args`` (ctypes values) by ``snprintf``."""
    fn = _snprintf()
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(buf, ctypes.c_size_t(size), spec, *args)
        if n < 0:
            raise SimError(f"vprintf: snprintf failed on {spec.decode('latin-1')!r}")
        if n < size:
            return buf.raw[:n]
        size = n + 1


def _c_value(c: Conversion, bits: int, text: bytes | None):
    if c.kind == "float":
        return ctypes.c_double(np.uint64(bits).view(np.float64).item())
    if c.conv == "s":
        return ctypes.c_char_p(None if bits == 0 else text)     # NULL: "(null)", as glibc prints it
    if c.conv == "p":
        return ctypes.c_void_p(bits or None)
    return ctypes.c_uint64(bits) if c.size == 8 else ctypes.c_uint32(bits)


def _strings(m, addrs: np.ndarray, threads: np.ndarray, limit: np.ndarray | None = None) -> list[bytes]:
    """The NUL-terminated strings at generic ``addrs`` (one per thread; at
    most ``limit`` bytes each where given), read a byte at a time for every
    thread at once."""
    n = len(addrs)
    out = [bytearray() for _ in range(n)]
    live = np.flatnonzero(addrs != 0) if limit is None else np.flatnonzero((addrs != 0) & (limit != 0))
    i = 0
    while len(live):
        byte = m.memory.load("generic", addrs[live] + np.uint64(i), threads[live], 1, "vprintf")
        going = byte != 0
        for k, b in zip(live[going].tolist(), byte[going].tolist()):
            out[k].append(b)
        i += 1
        live = live[going]
        if limit is not None:
            live = live[limit[live] > i]
    return [bytes(b) for b in out]


def _format_threads(m, parts: tuple[bytes | Conversion, ...], buffers: np.ndarray,
                    threads: np.ndarray) -> tuple[list[bytes], int]:
    """The text each of ``threads`` prints for one format, and the number
    of arguments the format reads."""
    slots = layout(parts)
    steps = plan(parts)
    values = [m.memory.load("generic", buffers + np.uint64(off), threads, size, "vprintf")
              .astype(np.uint64) for off, size in slots]
    texts: dict[int, list[bytes]] = {}     # slot of a %s -> each thread's string
    for p, _, k in steps:
        if k is not None and p.conv == "s":
            limit = None if p.precision is None else np.full(len(threads), p.precision, dtype=np.int64)
            texts[k] = _strings(m, values[k], threads, limit)
    columns = [v.tolist() for v in values]
    lines = []
    for t in range(len(threads)):
        pieces = []
        for p, star, k in steps:
            if k is None:
                pieces.append(p if isinstance(p, bytes) else p.text)
                continue
            args = [] if star is None else [ctypes.c_int32(np.uint32(columns[star][t]).view(np.int32).item())]
            args.append(_c_value(p, columns[k][t], texts[k][t] if k in texts else None))
            pieces.append(_format_one(p.text, args))
        lines.append(b"".join(pieces))
    return lines, len(slots)


def vprintf(s: "Step", fmt_addr: np.ndarray, buf_addr: np.ndarray) -> np.ndarray:
    """Run ``vprintf`` for the threads of step ``s``: print each thread's
    text to ``sys.stdout`` (threads in ascending global order) and return
    each thread's result (int32: arguments parsed, -1 for a NULL format).

    Raises:
        SimError: a conversion the emulator does not format, naming the
            call's line and the conversion.
        SimFault: the format, a ``%s`` string or the argument buffer is
            not readable memory.
    """
    m = s.m
    order = np.argsort(s.threads, kind="stable")
    threads = s.threads[order]
    fmt_addr = np.asarray(fmt_addr, dtype=np.uint64)[order]
    buf_addr = np.asarray(buf_addr, dtype=np.uint64)[order]
    result = np.full(len(threads), -1, dtype=np.int32)
    lines: list[bytes] = [b""] * len(threads)
    for addr in np.unique(fmt_addr).tolist():
        if addr == 0:
            continue            # a NULL format: -1, nothing printed
        sel = np.flatnonzero(fmt_addr == addr)
        groups: dict[bytes, np.ndarray]
        if addr < SHARED_WINDOW:
            # In global memory: the same bytes for every thread, read once.
            groups = {_strings(m, fmt_addr[sel[:1]], threads[sel[:1]])[0]: sel}
        else:
            # In a per-CTA or per-thread window: each thread's own.
            texts = _strings(m, fmt_addr[sel], threads[sel])
            groups = {}
            for text in set(texts):
                groups[text] = sel[[t == text for t in texts]]
        for text, idx in groups.items():
            try:
                parts = parse_format(text)
            except ValueError as e:
                raise SimError(f"{m.program.name}: vprintf with format {_quoted(text)}: "
                               f"{e}{where(s.ins)}") from None
            got, count = _format_threads(m, parts, buf_addr[idx], threads[idx])
            result[idx] = count
            for k, line in zip(idx.tolist(), got):
                lines[k] = line
    _write(b"".join(lines))
    out = np.empty(len(threads), dtype=np.int32)
    out[order] = result
    return out


def _quoted(fmt: bytes) -> str:
    text = fmt.decode("utf-8", "backslashreplace")
    return '"' + text.replace("\n", "\\n").replace('"', '\\"') + '"'


def _write(data: bytes) -> None:
    """``data`` to ``sys.stdout`` as bytes (as the host's C library would
    write them), flushed so it interleaves rightly with other output."""
    if not data:
        return
    out = sys.stdout
    raw = getattr(out, "buffer", None)
    if raw is None:         # a text-only stream (a notebook's): decode
        out.write(data.decode("utf-8", "backslashreplace"))
        out.flush()
        return
    out.flush()
    raw.write(data)
    raw.flush()

"""CUDA's ``vprintf(format, buffer)`` convention: the conversions of a format
string and the argument buffer they lay out.

nvcc lowers ``printf(fmt, ...)`` (and Triton lowers ``tl.device_print``) to
``call.uni (retval0), vprintf, (param0, param1);``: ``param0`` is the
generic address of the NUL-terminated format, ``param1`` that of a
local-memory buffer holding the arguments after C's default promotions. The
buffer carries no types; the format says what it holds: an integer
conversion 4 bytes (``int``; 8 with ``l``/``ll``), a floating-point one 8
(``float`` is promoted to ``double``), ``%s``/``%p`` 8 (a pointer), a ``*``
width 4 (``int``), each at an offset aligned to its size (the layout of
clang's and NVVM's argument struct).

One module for both directions: :mod:`jaxptx.dsl` writes buffers by
:func:`layout` (``ptx.printf``) and :mod:`jaxptx.sim` reads them by it.
What CUDA's printf takes (CUDA C++ Programming Guide, "Formatted Output",
"Format Specifiers"): flags ``# 0 + - space``, a width (digits or ``*``),
a precision (digits), sizes ``h l ll``, and the conversions
``c d i o u x X e E f F g G a A p s``; at most 32 arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import re

__all__ = ["MAX_ARGS", "Conversion", "parse_format", "layout", "plan"]

MAX_ARGS = 32
"""Arguments CUDA's printf reads after the format string; conversions past
them are printed as written."""

_SPEC = re.compile(rb"%(?P<flags>[-+ #0]*)(?P<width>\*|[0-9]+)?(?:\.(?P<precision>\*|[0-9]*))?"
                   rb"(?P<length>hh|h|ll|l|L|j|z|t|q)?(?P<conv>.?)", re.DOTALL)
INTEGER = frozenset("diuxXoc")
FLOAT = frozenset("fFeEgGaA")
_LENGTHS = ("", "h", "hh", "l", "ll")
_SUPPORTED = "d i u x X o c s f F e E g G a A p and %%"


@dataclasses.dataclass(frozen=True)
class Conversion:
    """One conversion specification of a format string.

    Attributes:
        text: the specification as written (``b"%-08.3lld"``).
        conv: the conversion character (``"d"``).
        length: the size modifier (``""``, ``"h"``, ``"hh"``, ``"l"``, ``"ll"``).
        star: the width is an ``int`` argument (``*``).
        precision: the precision (``None`` if none; ``%.s`` is 0).
    """

    text: bytes
    conv: str
    length: str
    star: bool
    precision: int | None

    @property
    def size(self) -> int:
        """Bytes its value takes in the argument buffer."""
        if self.conv in INTEGER:
            return 8 if self.length in ("l", "ll") else 4
        return 8        # a double, or a pointer

    @property
    def kind(self) -> str:
        """``"int"``, ``"float"``, ``"string"`` (``%s``) or ``"pointer"`` (``%p``)."""
        if self.conv in INTEGER:
            return "int"
        if self.conv in FLOAT:
            return "float"
        return "string" if self.conv == "s" else "pointer"

    def __str__(self) -> str:
        return self.text.decode("latin-1")


@functools.lru_cache(maxsize=256)
def parse_format(fmt: bytes) -> tuple[bytes | Conversion, ...]:
    """Split ``fmt`` into literal text and conversions (``%%`` is the text ``%``).

    Raises:
        ValueError: a conversion CUDA's printf does not take (or the format
            ends inside one), saying which and why.
    """
    out: list[bytes | Conversion] = []
    at = 0
    while True:
        k = fmt.find(b"%", at)
        if k < 0:
            out.append(fmt[at:])
            return tuple(p for p in out if p != b"")
        out.append(fmt[at:k])
        m = _SPEC.match(fmt, k)
        spec, conv = m.group(0), m["conv"].decode("latin-1")
        shown = "'" + spec.decode("latin-1") + "'"
        length = (m["length"] or b"").decode()
        if spec == b"%%":
            out.append(b"%")
        elif conv == "":
            raise ValueError(f"the format ends inside the conversion {shown}")
        elif conv not in INTEGER and conv not in FLOAT and conv not in "sp":
            raise ValueError(f"conversion {shown} is not supported (CUDA's printf formats {_SUPPORTED})")
        elif m["precision"] == b"*":
            raise ValueError(f"conversion {shown}: a '*' precision is not supported "
                             "(CUDA's printf takes '*' for the width only)")
        elif length not in _LENGTHS or (length and conv in "spc") or (length not in ("", "l") and conv in FLOAT):
            raise ValueError(f"conversion {shown}: the size {length!r} is not supported with %{conv} "
                             "(sizes h, hh, l and ll go with d i u x X o, l with floating-point conversions)")
        else:
            prec = m["precision"]
            out.append(Conversion(spec, conv, length, m["width"] == b"*",
                                  None if prec is None else int(prec or b"0")))
        at = m.end()


def layout(parts: tuple[bytes | Conversion, ...]) -> list[tuple[int, int]]:
    """``(offset, size)`` in the argument buffer of each argument the
    conversions of ``parts`` read (a ``*`` width before its value), each
    aligned to its size. A conversion whose arguments would pass
    :data:`MAX_ARGS` reads none, nor do those after it."""
    out: list[tuple[int, int]] = []
    at = 0
    for p in parts:
        if isinstance(p, bytes):
            continue
        sizes = ((4,) if p.star else ()) + (p.size,)
        if len(out) + len(sizes) > MAX_ARGS:
            break
        for size in sizes:
            at = -(-at // size) * size
            out.append((at, size))
            at += size
    return out


def plan(parts: tuple[bytes | Conversion, ...]) -> list[tuple[bytes | Conversion, int | None, int | None]]:
    """Each part with the indices (into :func:`layout`) of its ``*`` width
    and of its value; ``None`` for text, and for a conversion past
    :data:`MAX_ARGS` (printed as written)."""
    count = len(layout(parts))
    out: list[tuple[bytes | Conversion, int | None, int | None]] = []
    k = 0
    for p in parts:
        if isinstance(p, bytes) or k + 1 + p.star > count:
            out.append((p, None, None))
            continue
        star = k if p.star else None
        k += p.star
        out.append((p, star, k))
        k += 1
    return out

"""pyptx's escape hatches and shorthands: ``ptx.pipe``, ``ptx.expr``,
``ptx.raw`` and :class:`PipeRef` (the ``p|q`` operand).

All of them still emit through jaxptx's instruction table: ``ptx.raw``
parses its text into opcode, modifiers and operands and emits each
statement as a table instruction (so an unknown opcode or modifier is an
error at the line that wrote it), rather than pasting the text.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..dsl import Label
from ..dsl import ptx as _ptx
from ..errors import TraceError
from ..isa import to_ptx
from ._regs import PipeRef, adopt

__all__ = ["PipeRef", "expr", "pipe", "raw"]


class _Pipe:
    """``ptx.pipe(src)``: each ``.<opcode>.<mods>(dst, *more)`` emits
    ``opcode.mods dst, <previous result>, *more`` and continues from ``dst``."""

    __slots__ = ("result",)

    def __init__(self, src: Any) -> None:
        self.result = src      # the last destination (the source, before any step)

    def __getattr__(self, name: str) -> _PipeStep:
        if name.startswith("_"):
            raise AttributeError(name)
        return _PipeStep(self.result, (to_ptx(name),))


class _PipeStep:
    __slots__ = ("_parts", "_src")

    def __init__(self, src: Any, parts: tuple[str, ...]) -> None:
        self._src, self._parts = src, parts

    def __getattr__(self, name: str) -> _PipeStep:
        if name.startswith("_"):
            raise AttributeError(name)
        return _PipeStep(self._src, self._parts + (to_ptx(name),))

    def __call__(self, dst: Any, *operands: Any, pred: Any = None) -> _Pipe:
        adopt(_ptx.Instr(self._parts)(dst, self._src, *operands, pred=pred))
        return _Pipe(dst)


def pipe(src: Any) -> _Pipe:
    """Start an instruction chain at ``src``:
    ``ptx.pipe(x).add.s32(t, -8192).and_.b32(u, 0x3FF80).shr.u32(v, 4)`` is
    three instructions, each reading the previous destination; ``.result``
    is the last destination."""
    return _Pipe(src)


@contextmanager
def expr() -> Iterator[None]:
    """Group the instructions of one Python expression. pyptx folds them into
    one IR node for a compact printout; the PTX is the same instructions in
    the same order, which is what jaxptx emits here (a no-op block)."""
    yield


_STATEMENT = re.compile(r"^(?:@(!?)(%?\w+)\s+)?([\w.:]+)\s*(.*)$", re.DOTALL)


def _split_operands(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _number(text: str) -> int | float | None:
    t = text.lower()
    try:
        if re.fullmatch(r"0f[0-9a-f]{8}", t):
            return struct.unpack(">f", bytes.fromhex(t[2:]))[0]
        if re.fullmatch(r"0d[0-9a-f]{16}", t):
            return struct.unpack(">d", bytes.fromhex(t[2:]))[0]
        if re.fullmatch(r"-?(0x[0-9a-f]+|0b[01]+|\d+)u?", t):
            return int(t.rstrip("u"), 0)
        if re.fullmatch(r"-?\d*\.\d+(e-?\d+)?|-?\d+e-?\d+", t):
            return float(t)
    except (ValueError, struct.error):
        return None
    return None


def _operand(text: str, position: int, opcode: str) -> Any:
    if text == "_":
        return _ptx.SINK
    num = _number(text)
    if num is not None:
        return num
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        if "," in inner:                   # [tensormap, {c0, c1}]
            base, coords = inner.split(",", 1)
            items = _split_operands(coords.strip().strip("{}"))
            return _ptx.addr(base.strip(), coords=tuple(_operand(c, 1, opcode) for c in items))
        m = re.fullmatch(r"([%\w$.]+)\s*(?:([+-])\s*(\w+))?", inner)
        if m is None:
            raise TraceError(f"ptx.raw: cannot read the address {text!r}")
        off = None if m.group(3) is None else _number(m.group(3))
        return _ptx.addr(m.group(1), None if off is None else (-off if m.group(2) == "-" else off))
    if text.startswith("{") and text.endswith("}"):
        return [_operand(t, 1, opcode) for t in _split_operands(text[1:-1])]
    if "|" in text:
        left, right = (t.strip() for t in text.split("|", 1))
        return PipeRef(left, right)
    if opcode in ("bra", "call") and not text.startswith("%"):
        return Label(text)
    return text


def raw(text: str) -> None:
    """Emit PTX written as text: one or more ``;``-terminated statements,
    each ``[@[!]p] opcode.mods operands``. Registers are written by name
    (``f"{r.name}"``); numbers, ``0f``/``0d`` float bits, ``[addr+off]``,
    ``{vectors}``, ``p|q`` pairs and ``_`` are read as PTX spells them.
    Each statement is emitted through jaxptx's table.

    Raises:
        TraceError: text that is not a PTX statement.
        PtxError: an instruction the table refuses.
    """
    for stmt in (s.strip() for s in text.split(";")):
        if not stmt:
            continue
        m = _STATEMENT.match(stmt)
        if m is None:
            raise TraceError(f"ptx.raw: cannot read {stmt!r} as a PTX statement")
        neg, guard, name, rest = m.groups()
        parts = tuple(name.split("."))
        operands = [_operand(t, i, parts[0]) for i, t in enumerate(_split_operands(rest))]
        pred = None if guard is None else ("!" if neg else "") + guard
        adopt(_ptx.Instr(parts)(*operands, pred=pred))

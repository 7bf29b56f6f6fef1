"""The fragment-layout record, :class:`FragmentLayout`, made of :class:`Digit`
values (see :mod:`jaxptx.isa.fragments`)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...types import TYPES

__all__ = ["ELEMENT_BITS", "Digit", "FragmentLayout", "layout", "per_register", "shape_dims"]

# Bits of one matrix element of each type the matrix instructions take.
ELEMENT_BITS = {name: TYPES[name].bits for name in
                ("b1", "s4", "u4", "s8", "u8", "e4m3", "e5m2", "f16", "bf16", "tf32", "f32", "s32", "f64")}


@dataclass(frozen=True)
class Digit:
    """One digit of an index: ``size`` values, each step moving the cell by
    (``group``, ``row``, ``col``)."""

    size: int
    row: int = 0
    col: int = 0
    group: int = 0

    def scaled(self, times: int) -> Digit:
        """The digit of the next place up after splitting off ``times`` values."""
        return Digit(self.size // times, self.row * times, self.col * times, self.group * times)


def _place(digits: Sequence[Digit], index: Any) -> tuple[Any, Any, Any]:
    """(group, row, col) that ``index`` (an int or an int array) moves the cell by."""
    group = row = col = 0
    for d in digits:
        value = index % d.size
        index = index // d.size
        group, row, col = group + value * d.group, row + value * d.row, col + value * d.col
    return group, row, col


def _frozen(a: np.ndarray) -> np.ndarray:
    out = np.array(a, dtype=np.int64)
    out.flags.writeable = False        # cached: shared by every caller
    return out


@dataclass(frozen=True)
class FragmentLayout:
    """Where each (thread, register, element of the register) of a fragment
    sits in its matrices.

    Attributes:
        name: what the layout is of, e.g. ``"mma.m16n8k16 C .f32"``.
        dims: (groups, rows, columns) of the matrices; groups are the
            independent matrices of the quad-pair ``mma.m8n8k4``, else 1.
        thread: digits of the thread index (lane, or warpgroup thread).
        register: digits of the register index.
        element: digits of the element within a register (16-bit elements
            of an ``.f16x2`` register, bytes of a ``.b32`` ...); empty when
            a register holds one element.
    """

    name: str
    dims: tuple[int, int, int]
    thread: tuple[Digit, ...]
    register: tuple[Digit, ...]
    element: tuple[Digit, ...] = ()

    @property
    def threads(self) -> int:
        """Threads sharing the fragment (32, or 128 for a warpgroup)."""
        return math.prod(d.size for d in self.thread)

    @property
    def registers(self) -> int:
        """Registers each thread holds."""
        return math.prod(d.size for d in self.register)

    @property
    def elements(self) -> int:
        """Elements in each register."""
        return math.prod(d.size for d in self.element)

    def thread_offset(self, thread: Any) -> tuple[Any, Any, Any]:
        """(group, row, col) of register 0, element 0 of ``thread`` (int or array)."""
        return _place(self.thread, thread)

    def register_offset(self, register: Any, element: Any = 0) -> tuple[Any, Any, Any]:
        """(group, row, col) of ``register``'s ``element`` relative to
        register 0 of the same thread: the same for every thread."""
        eg, er, ec = _place(self.element, element)
        rg, rr, rc = _place(self.register, register)
        return eg + rg, er + rr, ec + rc

    def coords(self, thread: Any, register: Any, element: Any = 0) -> tuple[Any, Any, Any]:
        """(group, row, col) of ``thread``'s ``register``'s ``element``.

        Args:
            thread, register, element: ints, or int arrays that broadcast.

        Returns:
            Three ints, or three arrays of the broadcast shape.
        """
        tg, tr, tc = self.thread_offset(thread)
        rg, rr, rc = self.register_offset(register, element)
        return tg + rg, tr + rr, tc + rc

    @functools.cached_property
    def grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(group, row, col) of every (thread, register, element): three
        read-only int64 arrays of shape ``(threads, registers, elements)``."""
        t = np.arange(self.threads)[:, None, None]
        r = np.arange(self.registers)[None, :, None]
        e = np.arange(self.elements)[None, None, :]
        shape = (self.threads, self.registers, self.elements)
        g, row, col = (np.broadcast_to(a, shape) for a in self.coords(t, r, e))
        return _frozen(g), _frozen(row), _frozen(col)

    @functools.cached_property
    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:attr:`grid` with each thread's elements numbered ``register *
        elements + element`` (the PTX ISA's ``a0, a1, ...``): arrays of shape
        ``(threads, registers * elements)``."""
        return tuple(_frozen(a.reshape(self.threads, -1)) for a in self.grid)  # type: ignore[return-value]


def _split(sequence: Sequence[Digit], per: int) -> tuple[tuple[Digit, ...], tuple[Digit, ...]]:
    """Split the digits of a fragment's element numbering into those of the
    element within a register (``per`` values) and those of the register."""
    element: list[Digit] = []
    rest = [d for d in sequence if d.size > 1]
    while per > 1:
        d = rest.pop(0)
        if d.size <= per:
            assert per % d.size == 0, (sequence, per)
            element.append(d)
            per //= d.size
        else:
            assert d.size % per == 0, (sequence, per)
            element.append(Digit(per, d.row, d.col, d.group))
            rest.insert(0, d.scaled(per))
            per = 1
    return tuple(element), tuple(rest)


def layout(name: str, dims: tuple[int, int, int], thread: Sequence[Digit], sequence: Sequence[Digit],
           per: int = 1) -> FragmentLayout:
    """A :class:`FragmentLayout` from the digits of the thread index and of
    the fragment's element numbering (``a0, a1, ...``), ``per`` elements to
    a register; digits of size 1 are dropped."""
    element, register = _split(sequence, per)
    return FragmentLayout(name, dims, tuple(d for d in thread if d.size > 1), register, element)


def per_register(type_name: str) -> int:
    """Elements of ``type_name`` in one register (a 64-bit one for ``.f64``)."""
    if type_name not in ELEMENT_BITS:
        raise ValueError(f"fragment layout: expected an element type in {tuple(ELEMENT_BITS)}, "
                         f"got {type_name!r}")
    return max(1, 32 // ELEMENT_BITS[type_name])


_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")


@functools.cache
def shape_dims(shape: str) -> tuple[int, int, int]:
    """(M, N, K) of an MMA shape such as ``"m16n8k16"``.

    Raises:
        ValueError: ``shape`` is not ``m<M>n<N>k<K>``.
    """
    match = _SHAPE.fullmatch(shape)
    if match is None:
        raise ValueError(f"fragment layout: expected an MMA shape like 'm16n8k16', got {shape!r}")
    m, n, k = (int(g) for g in match.groups())
    return m, n, k


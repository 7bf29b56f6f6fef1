"""Emulator semantics: ``multimem.ld_reduce``, ``multimem.st``, ``multimem.red``.

PTX ISA, multimem: a multimem address names one location on every device
its multicast object maps; ``ld_reduce`` loads all of them and reduces,
``st`` stores to each, ``red`` reduces into each. The memory resolves the
address into one copy per bound device, in device order
(``Memory.multicast``, filled by :class:`jaxptx.sim.System`; a lone device
has none, and a multimem instruction there faults). Hence:

* ``ld_reduce`` reduces in device order, ``((v0 op v1) op v2) ...``, each
  partial result rounded to the accumulation precision: the type's own by
  default, ``f32`` with ``.acc::f32`` (``.f16``/``.bf16`` and their ``x2``)
  and ``f16`` with ``.acc::f16`` (fp8 types), then rounded once to the type
  (PTX ISA, multimem: "the default precision of the intermediate
  accumulation is same as the specified type"). Float adds and min/max
  follow ``atom``/``red`` (:mod:`.atomics`: f32 adds flush subnormals,
  min/max return the non-NaN operand and order -0 below +0); an fp8 result
  past the format's range is what a conversion gives (NaN for e4m3, inf
  for e5m2). Both are the emulator's reading: the ISA says no more.
* ``st`` writes the value to every copy; ``red`` is ``red`` on every copy,
  in device order.
* Vector forms (``.v2``/``.v4``/``.v8``) are one access per element at
  consecutive addresses, the whole vector aligned to its size.
* The bulk copies (``multimem.cp.async.bulk``, ``multimem.cp.reduce.async.bulk``)
  read ``size`` bytes of the executing CTA's shared memory through the async
  proxy and write (or reduce, element by element as ``red`` does) them into
  every copy, in device order, when the instruction runs; so their
  ``bulk_group`` has completed by the next ``cp.async.bulk.wait_group``, as
  with ``cp.async.bulk``. ``.cp_mask`` writes byte j of each 16-byte chunk
  only where bit j of the mask is set.

Orderings and scopes (``.acquire``, ``.release.sys`` ...) change nothing:
the emulator completes every access when the instruction runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np

from ... import ir
from ...types import TYPES, PtxType
from ..core.naming import first_thread
from ..core.step import Step
from ..errors import SimFault
from ..numerics.values import from_bits, to_bits
from .atomics import rmw, step_for
from .bulk_copy import read_bulk_source
from .mbarrier import present
from .memory import check_alignment
from .registry import semantics

__all__: list[str] = []

_FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_ACCUMULATE = {"acc::f32": (TYPES["f32"], np.float32), "acc::f16": (TYPES["f16"], np.float16)}


class _Form:
    """One multimem instruction's data: each vector item's width in bytes
    and their count, and how an item's bits become elements and back
    (``.e4m3x4``/``.e5m2x4`` items are four fp8 values in a ``.b32``)."""

    def __init__(self, s: Step, value: int) -> None:
        self.name = s.mod("type") or s.type(value).name
        base, _, lanes = self.name.partition("x")
        self.fp8 = _FP8.get(base)
        self.lanes = int(lanes or 1) if self.fp8 is not None else 1
        self.type: PtxType = TYPES[base] if self.fp8 is not None else TYPES[self.name]
        self.width = self.lanes if self.fp8 is not None else self.type.nbytes
        self.bits = TYPES[f"b{8 * self.width}"]
        op = s.ins.operands[value]
        self.count = len(op.items) if isinstance(op, ir.Vector) else 1

    def decode(self, bits: np.ndarray) -> np.ndarray:
        """The elements of items (``(n,)`` or ``(n, lanes)``) from their bits."""
        if self.fp8 is None:
            return from_bits(self.type, bits)
        raw = np.ascontiguousarray(bits.astype(_UINT[self.width], copy=False)).view(np.uint8).view(self.fp8)
        return raw.reshape(len(bits), self.lanes) if self.lanes > 1 else raw

    def encode(self, values: np.ndarray) -> np.ndarray:
        """The bits of items from their elements."""
        if self.fp8 is None:
            return to_bits(self.type, values, 8 * self.width)
        return np.ascontiguousarray(values.astype(self.fp8)).view(np.uint8).reshape(-1).view(_UINT[self.width])

    def element(self) -> PtxType:
        """The element type a reduction computes in by default."""
        return TYPES[self.type.element] if self.type.element else self.type


def _item(values: np.ndarray, i: int, count: int) -> np.ndarray:
    """Item ``i`` of an operand read with :meth:`Step.src` (vectors stack
    their items on the last axis)."""
    return values[..., i] if count > 1 else values


def _copies(s: Step, addr: np.ndarray, form: _Form) -> list[tuple[np.ndarray, list[Any]]]:
    """Per multicast object the access touches: the positions of its
    threads and, per bound device in device order, ``(device, memory,
    addresses there)``."""
    total = form.width * form.count
    if form.count > 1:
        check_alignment(s, addr, total, "multimem vector access")
    resolve = s.m.memory.multicast
    if resolve is None:
        raise SimFault(f"{s.ins.name}: address {int(addr[0]):#x} is not a multicast address: multimem "
                       f"instructions run on the devices of a jaxptx.sim.System, on the address of one of its "
                       f"multicast objects (mc.address) ({first_thread(s.m, s.threads)})")
    return resolve(addr, s.threads, total, s.ins.name)


@semantics("multimem_ld_reduce")
def multimem_ld_reduce(s: Step) -> None:
    """``multimem.ld_reduce.op{.acc}{.vec}.type d, [a]``: the reduction of
    every copy's value, in device order (see the module docstring)."""
    form = _Form(s, 0)
    _, addr = s.address(1)
    acc_type, acc_dtype = _ACCUMULATE.get(s.mod("acc"), (form.element(), None))
    combine = step_for(s.mod("op"), acc_type)
    out = np.zeros((s.n, form.count), dtype=_UINT[form.width])
    with np.errstate(all="ignore"):
        for pos, copies in _copies(s, addr, form):
            threads = s.threads[pos]
            for i in range(form.count):
                acc = None
                for _, memory, at in copies:
                    bits = memory.load("global", at + np.uint64(i * form.width), threads, form.width, s.ins.name)
                    value = form.decode(bits)
                    dtype = value.dtype
                    value = value if acc_dtype is None else value.astype(acc_dtype)
                    acc = value if acc is None else combine(acc, value)
                out[pos, i] = form.encode(acc.astype(dtype))
    s.dst(0, out if form.count > 1 else out[:, 0], form.bits)


@semantics("multimem_st")
def multimem_st(s: Step) -> None:
    """``multimem.st{.vec}.type [a], b``: store ``b`` to every copy."""
    form = _Form(s, 1)
    _, addr = s.address(0)
    bits = s.src(1, form.bits)
    for pos, copies in _copies(s, addr, form):
        threads = s.threads[pos]
        for _, memory, at in copies:
            for i in range(form.count):
                memory.store("global", at + np.uint64(i * form.width), threads,
                             _item(bits, i, form.count)[pos], form.width, s.ins.name)


@semantics("multimem_red")
def multimem_red(s: Step) -> None:
    """``multimem.red.op{.vec}.type [a], b``: ``red.op`` of ``b`` into every
    copy, in device order."""
    form = _Form(s, 1)
    _, addr = s.address(0)
    values = s.src(1, form.type)
    op = s.mod("op")
    for pos, copies in _copies(s, addr, form):
        threads = s.threads[pos]
        for _, memory, at in copies:
            for i in range(form.count):
                rmw(s, "global", at + np.uint64(i * form.width), form.type, op,
                    (_item(values, i, form.count)[pos],), memory=memory, threads=threads)


def _bulk(s: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A bulk copy's operands: the multimem destinations, the size of each
    thread's copy, and the bytes read from shared memory with the position
    of the thread each byte belongs to."""
    _, dst = s.address(0)
    _, src = s.address(1)
    size = s.src(2, TYPES["u32"]).astype(np.int64)
    bad = (size % 16 != 0) | ((dst & np.uint64(15)) != 0) | ((src & np.uint64(15)) != 0)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise SimFault(f"{s.ins.name}: the size ({int(size[k])}) must be a multiple of 16 and both addresses "
                       f"({int(dst[k]):#x}, {int(src[k]):#x}) 16-byte aligned ({first_thread(s.m, s.threads[k:k + 1])})")
    rep, data = read_bulk_source(s, src, size)
    return dst, size, rep, data


def _bulk_copies(s: Step, dst: np.ndarray, size: np.ndarray) -> Iterator[tuple[np.ndarray, int, list[Any]]]:
    """Per group of threads with one size: ``(positions, size, copies)`` as
    :func:`_copies` resolves them (each thread's range checked whole)."""
    resolve = s.m.memory.multicast
    if resolve is None:
        raise SimFault(f"{s.ins.name}: address {int(dst[0]):#x} is not a multicast address: multimem "
                       f"instructions run on the devices of a jaxptx.sim.System, on the address of one of its "
                       f"multicast objects (mc.address) ({first_thread(s.m, s.threads)})")
    for nbytes in np.unique(size).tolist():
        group = np.flatnonzero(size == nbytes)
        for pos, copies in resolve(dst[group], s.threads[group], int(nbytes), s.ins.name):
            yield group[pos], int(nbytes), copies


@semantics("multimem_cp_async_bulk")
def multimem_cp_async_bulk(s: Step) -> None:
    """``multimem.cp.async.bulk.global.shared::cta.bulk_group{.cp_mask} [a], [src], size{, mask}``:
    ``size`` bytes of shared memory stored to every copy of the multimem range at ``a``."""
    dst, size, _, data = _bulk(s)
    starts = np.cumsum(size) - size
    k = present(s, "byte_mask")
    mask = None if k is None else s.src(k, TYPES["u16"]).astype(np.int64)
    for pos, nbytes, copies in _bulk_copies(s, dst, size):
        offsets = np.tile(np.arange(nbytes, dtype=np.uint64), len(pos))
        who = np.repeat(pos, nbytes)
        values = data[np.repeat(starts[pos], nbytes) + offsets.astype(np.int64)]
        keep = slice(None)
        if mask is not None:
            keep = ((mask[who] >> (offsets % np.uint64(16)).astype(np.int64)) & 1) == 1
        for _, memory, at in copies:
            memory.store("global", (np.repeat(at, nbytes) + offsets)[keep], s.threads[who][keep], values[keep], 1,
                         s.ins.name)


@semantics("multimem_cp_reduce_async_bulk")
def multimem_cp_reduce_async_bulk(s: Step) -> None:
    """``multimem.cp.reduce.async.bulk.global.shared::cta.bulk_group.op{.noftz}.type [a], [src], size``:
    each element of ``size`` bytes of shared memory reduced (as ``red.op``) into every copy, in device order."""
    t = TYPES[s.mod("type")]
    op = s.mod("op")
    dst, size, _, data = _bulk(s)
    if (size % t.nbytes).any():
        raise SimFault(f"{s.ins.name}: the size is not a multiple of the {t.name} element")
    starts = np.cumsum(size) - size
    for pos, nbytes, copies in _bulk_copies(s, dst, size):
        count = nbytes // t.nbytes
        offsets = np.tile(np.arange(count, dtype=np.uint64) * np.uint64(t.nbytes), len(pos))
        who = np.repeat(pos, count)
        first = (np.repeat(starts[pos], count) + offsets.astype(np.int64))[:, None] + np.arange(t.nbytes)
        raw = np.ascontiguousarray(data[first]).view(_UINT[t.nbytes]).reshape(-1)
        values = from_bits(t, raw)
        for _, memory, at in copies:
            rmw(s, "global", np.repeat(at, count) + offsets, t, op, (values,), memory=memory,
                threads=s.threads[who])

"""``pyptx.ptx``: pyptx's instruction namespace, emitted through jaxptx's table.

* ``ptx.inst.<opcode>.<mods>(...)`` is jaxptx's generic chain (one call, one
  instruction, validated against the table at the call).
* pyptx's keyword wrappers (``ptx.mbarrier.init(bar[0], 1)``,
  ``ptx.wgmma.mma_async(shape=..., ...)``, ``ptx.cp.async_.bulk.tensor_2d(
  dst=..., src=..., coord=..., mbar=...)``, ``ptx.tcgen05.*``...) each emit
  the instruction(s) pyptx documents, through the same table.
* Any other chain (``ptx.bar.sync(0)``, ``ptx.ret()``) is jaxptx's.
* Control flow: ``if_``/``else_`` (runtime branches), ``loop(label,
  pred=p)`` (pyptx's do-while: body, then ``@p bra label``), ``range_``,
  ``scope`` (a ``{ }`` block), ``kloop``; ``label``/``bra`` take names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..dsl import ptx as _ptx
from ..dsl import Label, emit_instruction, is_tracing, new_reg
from ..dsl import Reg as _CoreReg
from ..types import PtxType, b64, from_dtype, s32
from . import _ampere, _hopper, _pipeline, _tcgen05  # noqa: F401  (register their wrappers)
from ._emit import Chain, emit, lookup, register
from ._escape import expr, pipe, raw
from ._pipeline import PipelineState, pipeline
from ._regs import Reg, adopt
from .smem import CarvedName

__all__ = ["inst", "special", "sreg", "addr", "global_ptrs", "if_", "else_", "loop", "scope", "label",
           "bra", "ret", "range_", "kloop", "warp", "param", "intrinsic", "setmaxnreg", "named_barrier",
           "selp", "comment", "mbarrier", "wgmma", "fence", "cp", "bar", "mma", "tcgen05", "cluster",
           "tma", "ldmatrix", "stmatrix", "stmatrix_x4_trans_f32_bf16", "pipe", "expr", "raw", "pipeline",
           "PipelineState"]

SINK = _ptx.SINK   # the `_` destination operand
inst = Chain(("inst",)[1:], plain=True)
comment = _ptx.comment


def addr(base: Any, offset: Any = None, *, coords: tuple[Any, ...] = ()) -> Any:
    """A memory operand ``[base]`` / ``[base+offset]`` (base: register, symbol
    name, tensor, shared array, slice or mbarrier)."""
    if isinstance(base, CarvedName):        # a carved array's name: its own start
        base, offset = str.__str__(base), base.offset + (offset or 0)
    return _ptx.addr(base, offset, coords=coords)


class _SpecialReg:
    """One special register (``ptx.special.tid``): call it, or a component."""

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        self._native = native

    def __call__(self) -> Reg:
        return adopt(self._native())

    def __getattr__(self, component: str) -> Callable[[], Reg]:
        read = getattr(self._native, component)
        return lambda: adopt(read())


class _Special:
    """``ptx.special.tid.x()`` ...: ``mov`` of a special register into a new
    register (pyptx hands back ``%tid.x`` itself; the value is the same)."""

    def __getattr__(self, name: str) -> _SpecialReg:
        return _SpecialReg(getattr(_ptx.special, name))


special = _Special()


def sreg(name: str) -> Reg:
    """The special register ``name`` (``"%laneid"``, ``"%clock64"``) in a new register."""
    base = name.lstrip("%")
    head, _, comp = base.partition(".")
    node = getattr(_ptx.special, head)
    return adopt(getattr(node, comp)() if comp else node())


def ctaid_x() -> Reg:
    """``%ctaid.x`` in a new register."""
    return special.ctaid.x()


def ctaid_y() -> Reg:
    """``%ctaid.y`` in a new register."""
    return special.ctaid.y()


def global_ptrs(*tensors: Any) -> tuple[Reg, ...]:
    """Each tensor's global address in a fresh ``b64`` register (a copy of
    ``tensor.ptr``, so ``px += off`` never changes another use of it)."""
    out = []
    for t in tensors:
        r = new_reg(b64)
        emit_instruction("mov", ("b64",), (r, t.ptr))
        out.append(adopt(r))
    return tuple(out)


def param(dtype: PtxType, name: str, dst: Any = None) -> Reg:
    """``ld.param.<dtype>`` of the entry parameter ``name`` (a raw param)."""
    t = from_dtype(dtype)
    if dst is None:
        return adopt(_ptx.param(name))
    emit_instruction("ld", ("param", t.name), (dst, name))
    return dst


# control flow ----------------------------------------------------------------
if_ = _ptx.if_
else_ = _ptx.else_
scope = _ptx.block


@contextmanager
def loop(label_name: str, *, pred: Any = None) -> Iterator[None]:
    """pyptx's loop: ``label:`` body, then ``@pred bra label`` (``bra.uni``
    without ``pred``): a do-while, the body runs at least once."""
    top = _ptx.label(label_name)
    yield
    if pred is None:
        emit_instruction("bra", ("uni",), (top,))
    else:
        emit_instruction("bra", (), (top,), pred=pred)


def label(name: str) -> Label:
    """Place the label ``name`` here."""
    return _ptx.label(name)


def bra(target: Any, *, pred: Any = None) -> None:
    """``bra target`` (a label name or label), guarded by ``pred``."""
    emit_instruction("bra", (), (target if isinstance(target, Label) else Label(str(target)),), pred=pred)


def ret(*, pred: Any = None) -> None:
    """``ret``."""
    emit_instruction("ret", (), (), pred=pred)


def range_(start: Any, stop: Any, step: int = 1) -> Iterator[Reg]:
    """A runtime counted loop (jaxptx's ``range_``); the counter has the type
    of ``start`` or ``stop`` when one is a register, else ``s32``."""
    dtype = next((v.type for v in (start, stop) if isinstance(v, _CoreReg)), s32)
    for i in _ptx.range_(start, stop, step, dtype=dtype):
        yield adopt(i)


def kloop(total: Any, *, unroll: int, body: Callable[[], None], loop_label: str = "kloop") -> None:
    """``body()`` ``total`` times: unrolled by ``unroll`` in a runtime loop,
    then the remainder (``total % unroll`` bodies) as a ladder of branches.
    An int ``total`` unrolls completely at trace time.

    Raises:
        ValueError: ``unroll`` is not a positive power of two.
        TypeError: ``total`` is neither an int nor a register.
    """
    if unroll <= 0 or unroll & (unroll - 1):
        raise ValueError(f"ptx.kloop: unroll must be a positive power of two, got {unroll}")
    if isinstance(total, int):
        for _ in range(total):
            body()
        return
    if not isinstance(total, _CoreReg):
        raise TypeError(f"ptx.kloop: total must be an int or a register, got {total!r}")
    total = adopt(total)
    rem = total & (unroll - 1)
    with if_(total >= unroll):
        left = adopt(new_reg(total.type))
        emit_instruction("sub", (total.type.name,) if total.type.kind != "b" else (f"u{total.type.bits}",),
                         (left, total, rem))
        more = left != 0
        with loop(loop_label, pred=more):
            for _ in range(unroll):
                body()
            left -= unroll
            emit_instruction("setp", ("ne", f"u{total.type.bits}"), (more, left, 0))

    def tail(k: int) -> None:      # remainder r runs body r times
        if k >= unroll:
            return
        with if_(rem > k):
            body()
            tail(k + 1)
    tail(0)


class _Warp:
    """``ptx.warp.reduce_sum(v)`` / ``reduce_max`` / ``reduce_min``: in-place
    butterfly reduction over ``width`` lanes (``shfl.sync.bfly.b32`` per step)."""

    def _reduce(self, val: Any, op: str, width: int) -> None:
        if width not in (2, 4, 8, 16, 32):
            raise ValueError(f"warp reduce width must be 2, 4, 8, 16 or 32, got {width}")
        if not isinstance(val, _CoreReg) or val.type.bits != 32 or val.type.kind == "pred":
            raise TypeError(f"warp reduce: expected a 32-bit register, got {val!r}")
        ty = val.type.name if val.type.kind in "fs" else "u32"
        mask = width >> 1
        while mask:
            other = emit("shfl.sync.bfly.b32", val, mask, 31, 0xFFFFFFFF)
            emit_instruction(op, (ty,), (val, val, other))
            mask >>= 1

    def reduce_sum(self, val: Any, *, width: int = 32) -> None:
        """In place: every lane of the group gets the sum."""
        self._reduce(val, "add", width)

    def reduce_max(self, val: Any, *, width: int = 32) -> None:
        """In place: every lane of the group gets the maximum."""
        self._reduce(val, "max", width)

    def reduce_min(self, val: Any, *, width: int = 32) -> None:
        """In place: every lane of the group gets the minimum."""
        self._reduce(val, "min", width)


warp = _Warp()


def setmaxnreg(count: int, *, inc: bool = True, pred: Any = None) -> None:
    """``setmaxnreg.{inc|dec}.sync.aligned.u32 count``."""
    emit(f"setmaxnreg.{'inc' if inc else 'dec'}.sync.aligned.u32", count, pred=pred)


def selp(dtype: PtxType, dst: Any, true_val: Any, false_val: Any, p: Any) -> Any:
    """``selp.<dtype> dst, true_val, false_val, p``."""
    return emit(f"selp.{from_dtype(dtype).name}", dst, true_val, false_val, p)


class NamedBarrier:
    """``bar.sync id[, count]`` with a fixed id and count."""

    def __init__(self, barrier_id: Any, count: Any = None) -> None:
        self.barrier_id = barrier_id
        self.count = count

    def sync(self, *, pred: Any = None) -> None:
        """Emit the ``bar.sync``."""
        args = (self.barrier_id,) if self.count is None else (self.barrier_id, self.count)
        emit("bar.sync", *args, pred=pred)


def named_barrier(barrier_id: Any, *, count: Any = None) -> NamedBarrier:
    """A named CTA barrier (``.sync()`` emits ``bar.sync id, count``)."""
    return NamedBarrier(barrier_id, count)


@register("bar", "sync")
def _bar_sync(n: Any = 0, count: Any = None, *, pred: Any = None) -> None:
    """``bar.sync n[, count]``."""
    emit("bar.sync", *((n,) if count is None else (n, count)), pred=pred)


def intrinsic(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as a named group of instructions: inside a trace its
    instructions are bracketed by ``// BEGIN name`` / ``// END name``
    comments; outside a trace it is a plain call."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not is_tracing():
            return fn(*args, **kwargs)
        _ptx.comment(f"BEGIN {fn.__name__}")
        result = fn(*args, **kwargs)
        _ptx.comment(f"END {fn.__name__}")
        return result
    wrapper.__is_ptx_intrinsic__ = True  # type: ignore[attr-defined]
    return wrapper


mbarrier = lookup(("mbarrier",))
wgmma = lookup(("wgmma",))
fence = lookup(("fence",))
cp = lookup(("cp",))
bar = lookup(("bar",))
mma = lookup(("mma",))
tcgen05 = lookup(("tcgen05",))
cluster = lookup(("cluster",))
tma = lookup(("tma",))
ldmatrix = lookup(("ldmatrix",))
stmatrix = lookup(("stmatrix",))
stmatrix_x4_trans_f32_bf16 = _ampere.stmatrix_x4_trans_f32_bf16


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return lookup((name,))

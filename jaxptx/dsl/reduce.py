"""Reductions across a warp and across a CTA, written as plain PTX.

Both helpers emit ordinary instructions into the kernel being traced (the
``.ptx()`` text shows every ``shfl.sync``, ``st.shared`` and ``bar.sync``);
they add no runtime library. Every thread of the warp (``warp_reduce``) or
of the CTA (``cta_reduce``) must call them in converged control flow, as
``shfl.sync`` with a full mask and ``bar.sync`` require.

Example:
    >>> from jaxptx import kernel, ptx, Tile
    >>> from jaxptx.types import f32
    >>> from jaxptx.dsl.reduce import cta_reduce, warp_reduce
    >>> @kernel(in_specs=(Tile(128, f32),), out_specs=(Tile(128, f32),),
    ...         grid=(1, 1, 1), block=(128, 1, 1), arch="sm_80")
    ... def total(x, y):
    ...     off = ptx.mul.wide.u32(ptx.special.tid.x(), 4)
    ...     v = ptx.ld.global_.f32(x.ptr + off)
    ...     ptx.st.global_.f32(y.ptr + off, cta_reduce(v, "add", warps=4))
    >>> "shfl.sync.bfly.b32" in total.ptx() and "bar.sync 0;" in total.ptx()
    True
"""

from __future__ import annotations

from typing import Any

from ..errors import TraceError
from ..types import PtxType
from . import smem as _smem
from ._core import Reg, emit_instruction, new_reg
from ._trace import current, user_location, with_location

__all__ = ["warp_reduce", "cta_reduce", "identity", "combine"]

OPS = ("add", "max", "min")
_TYPES = ("f32", "u32", "s32")
FULL_MASK = 0xFFFFFFFF


def identity(op: str, dtype: PtxType) -> float | int:
    """The neutral element of ``op`` over ``dtype`` (``-inf`` for an f32 max).

    Raises:
        TraceError: ``op`` or ``dtype`` is not one the reductions support.
    """
    _check(op, dtype, "identity")
    if op == "add":
        return 0.0 if dtype.name == "f32" else 0
    if dtype.name == "f32":
        return float("-inf") if op == "max" else float("inf")
    if dtype.name == "u32":
        return 0 if op == "max" else 0xFFFFFFFF
    return -(2**31) if op == "max" else 2**31 - 1


def combine(a: Reg, b: Reg | float | int, op: str) -> Reg:
    """``op`` of two values of ``a``'s type, one instruction (``add``/``max``/``min``)."""
    return emit_instruction(op, (a.type.name,), (a, b))


def warp_reduce(value: Reg, op: str = "add", *, width: int = 32) -> Reg:
    """Reduce ``value`` across each group of ``width`` lanes with butterfly shuffles.

    Emits ``log2(width)`` pairs of ``shfl.sync.bfly.b32`` and ``add``/``max``/
    ``min``: after them every lane holds the reduction over its aligned group
    of ``width`` lanes (the whole warp for ``width=32``). All 32 lanes of the
    warp must execute it (the mask is full).

    Args:
        value: an ``f32``, ``u32`` or ``s32`` register.
        op: ``"add"``, ``"max"`` or ``"min"``.
        width: a power of two from 1 to 32.

    Returns:
        A new register of ``value``'s type with the result.

    Raises:
        TraceError: an unsupported op, type or width, at the caller's line.

    Example::

        lane_sum = warp_reduce(partial, "add")            # every lane gets the sum
        row_max = warp_reduce(v, "max", width=8)          # per group of 8 lanes
    """
    _check(op, value, "warp_reduce")
    if not isinstance(width, int) or isinstance(width, bool) or width < 1 or width > 32 \
            or width & (width - 1):
        raise _error(f"warp_reduce width: expected a power of two from 1 to 32, got {width!r}")
    offset = width // 2
    while offset:
        other = new_reg(value.type)
        # PTX ISA, shfl.sync: c = 0x1F (clamp), no segment mask; bfly stays in the group.
        emit_instruction("shfl.sync", ("bfly", "b32"), (other, value, offset, 0x1F, FULL_MASK))
        value = combine(value, other, op)
        offset //= 2
    return value


def cta_reduce(value: Reg, op: str = "add", *, warps: int, scratch: Any = None) -> Reg:
    """Reduce ``value`` over every thread of a 1-D CTA of ``warps`` warps.

    Each warp reduces with :func:`warp_reduce`, lane 0 stores its warp's
    result to a shared array of ``warps`` elements, ``bar.sync 0`` waits for
    all of them, then every warp loads the partials (lane ``l`` loads
    partial ``l mod w``, ``w`` the next power of two ≥ ``warps``) and reduces
    them with ``log2(w)`` more shuffles, so every thread gets the result
    without a second barrier.

    The scratch array (32 elements) is allocated once per kernel and value
    type, and reused. A call that
    reuses it (a second call in the kernel, or any call inside a runtime
    ``ptx.range_``/``ptx.while_`` loop) starts with ``bar.sync 0`` so no
    thread overwrites partials another is still reading. A loop made with
    ``ptx.loop()`` is not seen: call it there with a fresh ``scratch``, or
    put a ``bar.sync`` in the loop.

    Args:
        value: an ``f32``, ``u32`` or ``s32`` register.
        op: ``"add"``, ``"max"`` or ``"min"``.
        warps: warps in the CTA (1 to 32): the block is ``32 * warps`` threads
            along x.
        scratch: a shared array of at least ``warps`` elements of
            ``value``'s type to use instead of the kernel's own.

    Returns:
        A new register with the reduction, the same in every thread.

    Raises:
        TraceError: an unsupported op or type, ``warps`` out of range, a
            scratch array too small, at the caller's line.

    Example::

        total = cta_reduce(acc, "add", warps=4)     # block=(128, 1, 1)
        peak = cta_reduce(v, "max", warps=4)        # safe: syncs before reusing scratch
    """
    _check(op, value, "cta_reduce")
    if not isinstance(warps, int) or isinstance(warps, bool) or not 1 <= warps <= 32:
        raise _error(f"cta_reduce warps: expected an int from 1 to 32, got {warps!r}")
    value = warp_reduce(value, op)
    if warps == 1:
        return value
    trace = current()
    if scratch is None:
        key = ("cta_reduce_scratch", value.type.name)
        if key not in trace.cache:
            trace.cache[key] = _smem.alloc(value.type, 32)
        scratch = trace.cache[key]
    elif getattr(scratch, "dtype", None) is None or scratch.dtype.bits != 32 \
            or scratch.shape[0] < warps:
        raise _error(f"cta_reduce scratch: expected a shared array of at least {warps} "
                     f"32-bit elements, got {scratch!r}")
    used = trace.cache.setdefault("cta_reduce_used", set())
    where = (scratch.symbol, scratch.offset)
    if where in used or trace.loops:
        emit_instruction("bar", ("sync",), (0,))
    used.add(where)
    lane, warp, is_lane0 = trace.materialise(("cta_reduce_lane",), _lane_and_warp)
    emit_instruction("st", ("shared", value.type.name), (scratch[warp], value), pred=is_lane0)
    emit_instruction("bar", ("sync",), (0,))
    width = 1 << (warps - 1).bit_length()
    slot = emit_instruction("and", ("b32",), (new_reg(lane.type), lane, width - 1))
    part = new_reg(value.type)
    emit_instruction("mov", (value.type.name,), (part, identity(op, value.type)))
    # Slots past ``warps`` keep the identity (no guard when warps fills the width).
    has = emit_instruction("setp", ("lt", "u32"), (slot, warps)) if warps < width else None
    emit_instruction("ld", ("shared", value.type.name), (part, scratch[slot]), pred=has)
    return warp_reduce(part, op, width=width)


def _lane_and_warp() -> tuple[Reg, Reg, Reg]:
    """``%tid.x & 31``, ``%tid.x >> 5`` and ``lane == 0``, emitted once per kernel."""
    tid = emit_instruction("mov", ("u32",), ("%tid.x",))
    lane = emit_instruction("and", ("b32",), (new_reg(tid.type), tid, 31))
    warp = emit_instruction("shr", ("u32",), (new_reg(tid.type), tid, 5))
    return lane, warp, emit_instruction("setp", ("eq", "u32"), (lane, 0))


def _check(op: str, value: Any, what: str) -> None:
    dtype = value.type if isinstance(value, Reg) else value
    if op not in OPS:
        raise _error(f"{what} op: expected one of {', '.join(map(repr, OPS))}, got {op!r}")
    if getattr(dtype, "name", None) not in _TYPES:
        got = f"{value.name} (.{dtype.name})" if isinstance(value, Reg) else repr(value)
        raise _error(f"{what} value: expected an f32, u32 or s32 register, got {got}")


def _error(message: str) -> TraceError:
    return with_location(TraceError(message), user_location())

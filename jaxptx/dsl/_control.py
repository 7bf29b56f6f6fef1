"""Structured control flow emitted as PTX branches and labels.

Plain Python ``for``/``if`` run at trace time (they unroll or select code);
these emit runtime control flow on register values::

    with ptx.if_(tid < 32):          # @!p bra $L_else; ... $L_else:
        ...
    with ptx.else_():                # optional, right after the if_
        ...
    for i in ptx.range_(0, n, 1):    # a runtime loop over register i
        ...
    for _ in ptx.while_(lambda: x < limit):
        ...

Each construct must be used as shown and finished: one made and never put
in a ``with``/``for``, a ``with`` entered and never left, or a Python loop
over ``range_``/``while_`` left early (``break``/``return``; use
``ptx.break_()``) is an error at the end of the trace, at the user's line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .. import ir
from ..errors import TraceError
from ..types import PtxType, s32
from ._constructs import tracked_context, tracked_loop
from ._core import Reg, emit_instruction, new_reg
from ._trace import current, user_location, with_location
from ._values import Label, NegPred

__all__ = ["if_", "else_", "range_", "while_", "break_", "continue_", "label", "new_label", "loop"]


def _condition(cond: Any, what: str) -> Reg | NegPred:
    if isinstance(cond, NegPred) or (isinstance(cond, Reg) and cond.type.kind == "pred"):
        return cond
    raise TraceError(f"{what}: expected a predicate register (e.g. `a < b`) or its "
                     f"negation, got {cond!r}")


def _negate(p: Reg | NegPred) -> Reg | NegPred:
    return p.reg if isinstance(p, NegPred) else NegPred(p)


def label(name: str | None = None) -> Label:
    """Place a label here and return it (``ptx.label("done")``, then
    ``ptx.bra("done")`` or ``ptx.bra(lbl)``). Unnamed labels are numbered per
    trace. For a forward branch, make one first with :func:`new_label`.

    Raises:
        TraceError: the name is not a PTX identifier or is already used.
    """
    return new_label(name).place()


def new_label(name: str | None = None) -> Label:
    """A label to branch to now and ``.place()`` later."""
    trace = current()
    if name is None:
        return Label(trace.new_label("user"))
    if not (name.replace("$", "_").isidentifier()):
        raise TraceError(f"ptx.label: expected a PTX identifier such as 'loop' or '$done', got {name!r}")
    return Label(trace.new_symbol(name))


@tracked_context("ptx.if_(...)")
def if_(cond: Reg | NegPred, *, label: str | None = None) -> Iterator[None]:
    """Run the body when ``cond`` holds (a runtime branch around it).

    ``label`` names the label after the body (numbered per trace if omitted).
    """
    p = _condition(cond, "ptx.if_")
    trace = current()
    skip = new_label(label).name if label is not None else trace.new_label("endif")
    emit_instruction("bra", (), (Label(skip),), pred=_negate(p))
    yield
    trace.append(ir.Label(skip))
    trace.last_if = (len(trace.body) - 1, skip)


@tracked_context("ptx.else_()")
def else_() -> Iterator[None]:
    """The else branch of the ``ptx.if_`` block just closed.

    Raises:
        TraceError: not directly after a ``with ptx.if_(...)`` block.
    """
    trace = current()
    if trace.last_if is None:
        raise with_location(TraceError("ptx.else_() must directly follow a `with ptx.if_(...)` block"),
                            user_location())
    index, skip = trace.last_if
    end = trace.new_label("endelse")
    # The then body must jump over the else body: put that branch just
    # before the label the if's condition jumps to.
    jump: list[ir.Statement] = []
    with trace.block(jump):
        emit_instruction("bra", ("uni",), (Label(end),))
    trace.body[index:index] = jump
    yield
    trace.append(ir.Label(end))


class _Loop:
    """The handle of a ``ptx.loop()`` body: ``again(p)`` branches back to the top."""

    __slots__ = ("label",)

    def __init__(self, label: Label) -> None:
        self.label = label

    def again(self, pred: Reg | NegPred | None = None) -> None:
        """Emit ``@pred bra top`` (or an unconditional branch)."""
        emit_instruction("bra", (), (self.label,), pred=pred)


@tracked_context("ptx.loop()")
def loop(*, label: str | None = None) -> Iterator[_Loop]:
    """A loop whose body ends with ``loop.again(pred)`` (a do-while).

    ``label`` names the label at the top (numbered per trace if omitted).
    """
    yield _Loop(new_label(label).place())


@tracked_loop("ptx.range_(...)")
def range_(start: Any, stop: Any, step: int = 1, *, dtype: PtxType = s32) -> Iterator[Reg]:
    """A runtime loop ``for (i = start; i < stop; i += step)``; yields ``i``.

    ``step`` is a positive Python int (the loop counts up). The body is
    traced once.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise TraceError(f"ptx.range_ step: expected a positive int, got {step!r}")
    trace = current()
    i = new_reg(dtype)
    i.set(start)
    head, latch, done = (trace.new_label(h) for h in ("loop", "latch", "endloop"))
    trace.append(ir.Label(head))
    finished = emit_instruction("setp", ("ge", dtype.name), (i, stop))
    emit_instruction("bra", (), (Label(done),), pred=finished)
    trace.loops.append((latch, done))
    try:
        yield i
    finally:
        trace.loops.remove((latch, done))
    trace.append(ir.Label(latch))
    emit_instruction("add", (dtype.name,), (i, i, step))
    emit_instruction("bra", ("uni",), (Label(head),))
    trace.append(ir.Label(done))


@tracked_loop("ptx.while_(...)")
def while_(cond: Callable[[], Reg | NegPred]) -> Iterator[None]:
    """A runtime loop: ``cond()`` is traced at the loop head each iteration."""
    trace = current()
    head, done = trace.new_label("while"), trace.new_label("endwhile")
    trace.append(ir.Label(head))
    p = _condition(cond(), "ptx.while_ condition")
    emit_instruction("bra", (), (Label(done),), pred=_negate(p))
    trace.loops.append((head, done))
    try:
        yield
    finally:
        trace.loops.remove((head, done))
    emit_instruction("bra", ("uni",), (Label(head),))
    trace.append(ir.Label(done))


def _loop_target(which: int, what: str) -> str:
    trace = current()
    if not trace.loops:
        raise with_location(TraceError(f"{what} outside a ptx.range_/ptx.while_ loop"), user_location())
    return trace.loops[-1][which]


def break_(pred: Reg | NegPred | None = None) -> None:
    """Leave the innermost runtime loop (when ``pred`` holds, if given)."""
    emit_instruction("bra", (), (Label(_loop_target(1, "ptx.break_")),), pred=pred)


def continue_(pred: Reg | NegPred | None = None) -> None:
    """Go to the next iteration of the innermost runtime loop."""
    emit_instruction("bra", (), (Label(_loop_target(0, "ptx.continue_")),), pred=pred)

"""Running a kernel body, and the end of a trace: the traced module is
checked as a whole.

Each instruction was validated when it was emitted; what only the whole
function shows (a branch to a label never placed, a register used by a
function it does not belong to...) is found here by :func:`jaxptx.check`.
Anything it reports is an error, raised at the user's line of the
instruction concerned: either the kernel is wrong, or the DSL wrote
something it should not have, and neither may pass silently.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import ir
from ..check import Diagnostic, check
from ..errors import PtxError, TraceError
from ._trace import PACKAGE_DIR, PASSED_THROUGH, Trace, with_location

__all__ = ["check_module", "at_user_line", "run_body", "no_gc"]

_LOCATED = re.compile(r", at [^,]+:\d+$")


def at_user_line(err: PtxError) -> PtxError:
    """``err`` with ``, at file:line`` of the innermost user frame of its
    traceback appended (unchanged if it already names one, or if no frame
    outside jaxptx raised it); keeps the traceback."""
    if _LOCATED.search(str(err)):
        return err
    loc = None
    tb = err.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(path).startswith(PACKAGE_DIR) and path not in PASSED_THROUGH:
            loc = (path, tb.tb_lineno)
        tb = tb.tb_next
    if loc is None:
        return err
    try:
        located = with_location(err, loc)
    except TypeError:   # an error class whose constructor takes more than a message
        return err
    return located.with_traceback(err.__traceback__)


def run_body(fn: Callable[..., Any], args: Sequence[Any], template: tuple) -> None:
    """Run the kernel body; a jaxptx error raised in it names the user's line."""
    try:
        fn(*args, **dict(template))
    except PtxError as e:
        raise at_user_line(e) from e.__cause__


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off inside the ``with``.

    A trace allocates objects that all survive it: the collector's passes
    over them cost ~10% of a large trace and free nothing.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def check_module(module: ir.Module, trace: Trace) -> None:
    """Run ``jaxptx.check`` on the traced ``module``.

    Kernels traced with ``validate=False`` (transpiled PTX that ptxas itself
    may refuse) are not checked.

    Raises:
        TraceError: the first finding, at the user's line that emitted the
            instruction (or naming the kernel, for a module-level finding).
    """
    # Every instruction was validated against the table when it was emitted;
    # this pass adds what needs the whole module (names, labels, scopes).
    if not trace.validate or not _errors(check(module, trace.target.name, instructions=False)):
        return
    found, locations = _located_findings(module, trace.target.name)
    first = next((d for d in found if d.line), found[0])
    loc = locations[first.line - 1] if first.line else None
    raise with_location(TraceError(f"kernel {trace.name}: {first.message} (found by jaxptx.check "
                                   "at the end of the trace)"), loc)


def _errors(found: list[Diagnostic]) -> list[Diagnostic]:
    """The errors among check's findings (warnings do not stop a trace)."""
    return [d for d in found if d.severity == "error"]


def _located_findings(module: ir.Module, arch: str) -> tuple[list[Diagnostic], list[tuple | None]]:
    """check's findings, each instruction's line being its index + 1 in
    ``locations`` (the user's Python lines); the module is left as it was."""
    instructions = [s for item in module.items if isinstance(item, ir.Function)
                    for s in ir.walk(item.body or []) if isinstance(s, ir.Instruction)]
    locations = [ins.loc for ins in instructions]
    try:
        for i, ins in enumerate(instructions):
            ins.loc = ir.PtxLocation("<trace>", i + 1, 0)
        return _errors(check(module, arch, instructions=False)), locations
    finally:
        for ins, loc in zip(instructions, locations):
            ins.loc = loc

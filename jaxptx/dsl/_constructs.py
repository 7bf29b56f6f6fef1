"""Control-flow constructs that must be finished before a trace ends.

``ptx.if_``, ``ptx.range_``, ``ptx.function``... emit code when their block
opens and when it closes. A construct made but never put in a ``with`` /
``for`` statement, entered and never closed, or whose Python ``for`` loop was
left early (``break``/``return``), would leave half a branch or loop in the
PTX. Each construct records itself in the trace when it is made and is
struck off when it finishes; the trace's end refuses the rest, naming the
user's line (see ``Trace.check_closed``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from ..errors import TraceError
from ._trace import OpenConstruct, Trace, current, user_location, with_location

__all__ = ["tracked_context", "tracked_loop"]

T = TypeVar("T")


class _TrackedContext(AbstractContextManager):
    """A context manager recorded in the trace from the moment it is made."""

    __slots__ = ("_trace", "_record", "_inner")

    def __init__(self, trace: Trace, record: OpenConstruct, inner: AbstractContextManager) -> None:
        self._trace, self._record, self._inner = trace, record, inner

    def __enter__(self) -> Any:
        self._record.state = "open"
        return self._inner.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        handled = self._inner.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self._trace.end(self._record)
        return handled

    def __iter__(self) -> Iterator[Any]:
        """Refuse ``for ... in`` over a block construct, saying how to use it."""
        what = self._record.what
        raise with_location(TraceError(
            f"{what} is a block, not a loop: write `with {what}:`, not `for ... in {what}:`; "
            "a runtime loop is `for i in ptx.range_(...)` or `for _ in ptx.while_(...)`"),
            user_location())


class _TrackedLoop(Iterator[T]):
    """An iterator recorded in the trace until it is exhausted."""

    __slots__ = ("_trace", "_record", "_inner")

    def __init__(self, trace: Trace, record: OpenConstruct, inner: Iterator[T]) -> None:
        self._trace, self._record, self._inner = trace, record, inner

    def __next__(self) -> T:
        self._record.state = "open"
        try:
            return next(self._inner)
        except StopIteration:
            self._trace.end(self._record)
            raise

    def __enter__(self) -> Any:
        """Refuse ``with`` on a loop construct, saying how to use it."""
        what = self._record.what
        usage = "for _ in" if what.startswith("ptx.while_") else "for i in"
        raise with_location(TraceError(
            f"{what} is a runtime loop, not a block: write `{usage} {what}:`, not "
            f"`with {what}:`"), user_location())

    def __exit__(self, *exc: Any) -> None:   # `with` looks both up before entering
        return None



def tracked_context(what: str) -> Callable[[Callable[..., Iterator[T]]], Callable[..., AbstractContextManager[T]]]:
    """Decorate a generator function as a ``with`` construct (like
    ``contextlib.contextmanager``) that the trace records until it closes."""
    def decorate(gen: Callable[..., Iterator[T]]) -> Callable[..., AbstractContextManager[T]]:
        cm = contextmanager(gen)

        @functools.wraps(gen)
        def make(*args: Any, **kwargs: Any) -> AbstractContextManager[T]:
            trace = current()
            record = trace.begin(what, user_location())
            return _TrackedContext(trace, record, cm(*args, **kwargs))
        return make
    return decorate


def tracked_loop(what: str) -> Callable[[Callable[..., Iterator[T]]], Callable[..., Iterator[T]]]:
    """Decorate a generator function as a ``for`` construct that the trace
    records until the Python loop over it runs to its end."""
    def decorate(gen: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
        @functools.wraps(gen)
        def make(*args: Any, **kwargs: Any) -> Iterator[T]:
            trace = current()
            record = trace.begin(what, user_location())
            return _TrackedLoop(trace, record, gen(*args, **kwargs))
        return make
    return decorate

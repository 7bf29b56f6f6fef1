"""The registry of semantics functions, by the names the ISA table's ``sim``
fields use.

A semantics module registers each function on its definition::

    @semantics("add")
    def add(s: Step) -> None: ...

and a function built from a shared one (a ``functools.partial``) with
:func:`register`. Every ``sim`` name of the table is accounted for here:
registered, run by the machine itself (``MACHINE``: branches, calls,
barriers), without effect on the emulator (``NO_OPS``), or refused with a
reason (:data:`UNSUPPORTED`); ``tests/sim/test_registry.py`` checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..core.scheduled import MACHINE, NO_OPS

__all__ = ["SEMANTICS", "MACHINE", "NO_OPS", "UNSUPPORTED", "semantics", "register"]

SEMANTICS: dict[str, Callable] = {}
"""``sim`` name → the function that runs that instruction for a :class:`~..core.step.Step`."""


UNSUPPORTED: dict[str, str] = {}
"""Names the emulator refuses, each with the reason given to the user."""

F = TypeVar("F", bound=Callable)


def register(name: str, fn: Callable) -> Callable:
    """Register ``fn`` as the semantics of ``sim`` name ``name``.

    Raises:
        ValueError: ``name`` is registered already (two modules claim it).
    """
    if name in SEMANTICS or name in MACHINE or name in NO_OPS:
        raise ValueError(f"emulator semantics {name!r} registered twice")
    SEMANTICS[name] = fn
    return fn


def semantics(*names: str) -> Callable[[F], F]:
    """Decorator: register the function under each of ``names``."""
    def wrap(fn: F) -> F:
        for name in names:
            register(name, fn)
        return fn
    return wrap

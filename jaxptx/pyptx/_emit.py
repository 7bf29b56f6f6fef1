"""The one emission path of the pyptx surface: a dotted PTX name through
jaxptx's instruction table (:class:`jaxptx.dsl.ptx.Instr`, which ends in
:func:`jaxptx.dsl.emit_instruction`), results given pyptx's
register semantics; and the dotted chain objects of ``ptx.*``."""

from __future__ import annotations

from typing import Any, Callable

from ..dsl import ptx as _ptx
from ..errors import TraceError
from ._regs import adopt
from .smem import operand

__all__ = ["emit", "Chain", "SPECIAL"]


def emit(dotted: str, *args: Any, pred: Any = None) -> Any:
    """Emit the instruction spelled ``dotted`` in PTX (``"wgmma.fence.sync.aligned"``)
    with ``args``; returns its (allocated) destination, if any."""
    return adopt(_ptx.Instr(tuple(dotted.split(".")))(*map(operand, args), pred=pred))


#: pyptx's hand-written wrappers, by the Python spelling of their chain
#: (``("mbarrier", "init")``); filled by the modules that define them.
SPECIAL: dict[tuple[str, ...], Any] = {}


class Chain:
    """``ptx.<name>.<name>...``: a pyptx wrapper where one is registered for
    the chain so far (see :data:`SPECIAL`), else jaxptx's generic
    instruction chain (every table form, by jaxptx's naming rule)."""

    __slots__ = ("_parts", "_plain")

    def __init__(self, parts: tuple[str, ...], plain: bool = False) -> None:
        self._parts = parts
        self._plain = plain      # ptx.inst...: never a pyptx wrapper

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._plain:
            return Chain(self._parts + (name,), True)
        return lookup(self._parts + (name,))

    def __call__(self, *args: Any, pred: Any = None, **kwargs: Any) -> Any:
        if kwargs:
            raise TraceError(f"ptx.{'.'.join(self._parts)}: jaxptx.pyptx has no wrapper of that name "
                             f"taking {sorted(kwargs)}; table instructions take positional operands "
                             "and pred= (see docs/coming_from_pyptx.md, 'Not yet')")
        native = _ptx.inst
        for p in self._parts:
            native = getattr(native, p)
        return adopt(native(*map(operand, args), pred=pred))

    def __repr__(self) -> str:
        return f"ptx.{'.'.join(self._parts)}"


def lookup(parts: tuple[str, ...]) -> Any:
    """The wrapper registered for ``parts``, else a :class:`Chain`."""
    special = SPECIAL.get(parts)
    return special if special is not None else Chain(parts)


class Wrapper:
    """A pyptx wrapper at ``ptx.<path>``: calling it runs the wrapper; a
    further attribute continues the chain (``ptx.wgmma.fence()`` is the
    wrapper, ``ptx.wgmma.fence.sync.aligned()`` the table form)."""

    __slots__ = ("_fn", "_path", "__dict__")

    def __init__(self, fn: Callable[..., Any], path: tuple[str, ...]) -> None:
        self._fn = fn
        self._path = path
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        own = getattr(self._fn, name, None)      # a method of the wrapper object
        return own if own is not None and not name.startswith("_") else lookup(self._path + (name,))

    def __repr__(self) -> str:
        return f"<pyptx wrapper ptx.{'.'.join(self._path)}>"


def register(*path: str) -> Callable[[Any], Any]:
    """Decorator: register ``fn`` as the wrapper at ``ptx.<path>``."""
    def deco(fn: Callable[..., Any]) -> Wrapper:
        w = Wrapper(fn, path)
        SPECIAL[path] = w
        return w
    return deco

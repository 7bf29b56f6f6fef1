"""Checks of ``@kernel`` options, run at decoration time so a bad option
fails where the kernel is defined, naming the option. The launch options
(grid, block, cluster, smem) are checked as one :class:`jaxptx.launch.Launch`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import SpecError, TraceError
from ..types import TYPES, PtxType
from ._specs import Tile

__all__ = ["check_specs", "check_raw_params", "check_raw_directives"]


def check_specs(specs: Any, what: str) -> tuple[Tile, ...]:
    """``None`` or a sequence of :class:`Tile`."""
    if specs is None:
        return ()
    if isinstance(specs, Tile):
        specs = (specs,)
    if not isinstance(specs, Sequence) or not all(isinstance(t, Tile) for t in specs):
        raise SpecError(f"{what}: expected a tuple of Tile, got {specs!r}")
    return tuple(specs)


def check_raw_params(raw: Any, where: str) -> tuple[tuple[PtxType, str], ...]:
    """``(type, name)`` pairs (either order) of extra scalar entry params."""
    out = []
    for item in raw or ():
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TraceError(f"{where} raw_params: expected (type, name) pairs, got {item!r}")
        a, b = item
        ta, tb = _as_type(a), _as_type(b)
        if ta is not None and isinstance(b, str) and b.isidentifier():
            out.append((ta, b))
        elif tb is not None and isinstance(a, str) and a.isidentifier():
            out.append((tb, a))
        else:
            raise TraceError(f"{where} raw_params: expected (type, name) like ('u32', 'n'), got {item!r}")
    return tuple(out)


def _as_type(x: Any) -> PtxType | None:
    if isinstance(x, PtxType):
        return x
    if isinstance(x, str):
        return TYPES.get(x.lstrip("."))
    return None


def check_raw_directives(raw: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(name, args)`` pairs for extra performance-tuning directives."""
    out = []
    for item in raw or ():
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise TraceError(f"{where} raw_directives: expected (name, args) like ('maxnreg', (128,)), got {item!r}")
        name, args = item
        args = args if isinstance(args, (tuple, list)) else (args,)
        out.append((name.lstrip("."), tuple(str(a) for a in args)))
    return tuple(out)

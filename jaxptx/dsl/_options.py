"""Checks of ``@kernel`` options, run at decoration time so a bad option
fails where the kernel is defined, naming the option."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import SpecError, TraceError
from ..types import TYPES, PtxType
from ._specs import Tile

__all__ = ["check_dim3", "check_specs", "check_raw_params", "check_raw_directives"]


def check_dim3(value: Any, what: str, *, limit: int) -> tuple[int, int, int]:
    """A 1–3 element tuple of positive ints (an int alone is allowed), padded with 1s.

    Kept only for ``jaxptx.sim.device`` until it takes its launch from
    :func:`jaxptx.launch.validate_launch`; kernels use :class:`jaxptx.launch.Launch`.
    """
    dims = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    ok = (isinstance(dims, (tuple, list)) and 1 <= len(dims) <= 3
          and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims))
    if not ok:
        raise TraceError(f"{what}: expected 1 to 3 positive ints like (128, 1, 1), got {value!r}")
    out = tuple(dims) + (1,) * (3 - len(dims))
    total = out[0] * out[1] * out[2]
    if total > limit:
        raise TraceError(f"{what}: {out} has {total} elements, more than the limit {limit}")
    return out  # type: ignore[return-value]


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

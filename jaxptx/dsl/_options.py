"""Checks of ``@kernel`` options, run at decoration time so a bad option
fails where the kernel is defined, naming the option. The launch options
(grid, block, cluster, smem) are checked as one :class:`jaxptx.launch.Launch`."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SpecError, TraceError
from ..types import TYPES, PtxType
from ._specs import Tile

__all__ = ["check_specs", "check_raw_params", "check_raw_directives", "check_entry_name",
           "check_extern_smem", "check_address_size", "check_batch", "check_shardable",
           "signature"]

# PTX ISA "Identifiers": [a-zA-Z][a-zA-Z0-9_$]* or [_$%][a-zA-Z0-9_$]+ (ASCII;
# ptxas: "Unexpected non-ASCII character"); an entry's name is written without %.
_PTX_IDENTIFIER = re.compile(r"^(?:[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+)$")
# PTX ISA "Predefined Identifiers" that are not % special registers.
_PREDEFINED = frozenset(["WARP_SZ"])


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


def check_entry_name(name: Any, given: bool, where: str) -> None:
    """The kernel's ``.entry`` name must be a PTX identifier.

    Args:
        name: the name (``name=``, else the function's ``__name__``).
        given: it came from ``name=`` (the message says which).
        where: what the message names first (``@kernel k``, ``kernel k``).

    Raises:
        TraceError: ``name`` is not a str, not a PTX identifier, or a
            predefined one.
    """
    if isinstance(name, str) and _PTX_IDENTIFIER.match(name) and name not in _PREDEFINED:
        return
    source = f"name={name!r}" if given else f"the function's name {name!r}"
    why = (f"{name} is a predefined PTX identifier" if name in _PREDEFINED else
           "a PTX name is ASCII letters, digits, _ and $, and starts with a letter, or with _ or $ "
           "and one more character")
    suggestion = re.sub(r"[^A-Za-z0-9_$]", "_", str(name)).strip("_") or "kernel"
    if not suggestion[0].isalpha():
        suggestion = "k_" + suggestion
    raise TraceError(f"{where}: {source} is not a valid .entry name ({why}); pass a PTX "
                     f"identifier such as name={suggestion + ('_' if name in _PREDEFINED else '')!r}")


def check_extern_smem(extern_smem: Any, where: str) -> str | None:
    """The name of the dynamic shared array (``True``: ``dyn_smem``), or None."""
    if extern_smem not in (True, False) and not (isinstance(extern_smem, str) and extern_smem.isidentifier()):
        raise TraceError(f"{where} extern_smem: expected a bool or a symbol name, got {extern_smem!r}")
    return "dyn_smem" if extern_smem is True else (extern_smem or None)


def check_address_size(address_size: Any, where: str) -> int | None:
    """``.address_size`` 64, 32, or None (no directive)."""
    if address_size not in (32, 64, None):
        raise TraceError(f"{where} address_size: expected 64, 32 or None, got {address_size!r}")
    return address_size


def check_batch(batch: Any, where: str) -> str | None:
    """``batch``: None, or ``"z"`` (a vmapped call runs the batch as grid z)."""
    if batch not in (None, "z"):
        raise TraceError(f"{where} batch: expected None or 'z' (a vmapped call runs the "
                         f"batch as grid z), got {batch!r}")
    return batch


def check_shardable(shardable: Any, in_specs: Sequence[Tile], where: str) -> tuple[str, ...]:
    """``shardable``: symbolic dims of ``in_specs``."""
    in_dims = {d for t in in_specs for d in t.symbolic_dims}
    if isinstance(shardable, str) or any(d not in in_dims for d in shardable):
        raise SpecError(f"{where} shardable: expected a tuple of symbolic dims of in_specs "
                        f"({sorted(in_dims) or 'none'}), got {shardable!r}")
    return tuple(shardable)


def signature(fn: Callable[..., Any], where: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The kernel function's tensor parameters (positional) and template
    parameters (keyword-only) with their defaults.

    Raises:
        TraceError: the function takes ``*args`` or ``**kwargs``.
    """
    tensors, template = [], {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            tensors.append(p.name)
        elif p.kind is p.KEYWORD_ONLY:
            template[p.name] = p.default
        else:
            raise TraceError(f"{where}: *args/**kwargs are not allowed; tensors are positional "
                             f"parameters and template parameters keyword-only")
    return tuple(tensors), template

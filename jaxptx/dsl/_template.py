"""Template parameters: the keyword-only parameters of a ``@kernel`` function.

A kernel's call and ``.ptx(**kw)`` take three kinds of keywords in one
namespace: template values, symbolic dims of the specs, and the values of
``raw_params``. :func:`check_keywords` refuses, at decoration, a name that is
two of them (one would silently shadow the other). A template value is
checked at the call against what the function declares for it
(:func:`template_types`, :func:`check_template_value`): its annotation
(``n: int = 4``), else the type of its default (``eps=1e-6`` takes real
numbers), so a wrong value fails naming the keyword rather than deep in the
body.
"""

from __future__ import annotations

import inspect
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import SpecError
from ._specs import Tile

__all__ = ["check_keywords", "template_types", "check_template_value", "bind_keywords", "Declared"]

# What a template value must be: a predicate and how to say it, and where
# the rule comes from ("declared `n: int`", "its default is 4").
Declared = tuple[Callable[[Any], bool], str, str]


def check_keywords(template: Mapping[str, Any], in_specs: Sequence[Tile], out_specs: Sequence[Tile],
                   raw_names: Sequence[str], where: str) -> None:
    """Refuse a template param sharing a name with a symbolic dim or a raw
    param. A raw param may be named like a dim (pyptx's convention): it
    then takes the dim's size, and a call giving it another value is an
    error (``jaxptx.jax``'s call checks it).

    Raises:
        SpecError: naming the name and both of its meanings.
    """
    meanings: dict[str, str] = {}
    for group, specs in (("in_specs", in_specs), ("out_specs", out_specs)):
        for i, spec in enumerate(specs):
            for d in spec.symbolic_dims:
                meanings.setdefault(d, f"the symbolic dim {d!r} of {group}[{i}] {spec!r}")
    dims = set(meanings)
    for kind, names in (("raw param", raw_names), ("template param", template)):
        for name in names:
            if kind == "raw param" and name in dims:
                meanings[name] = f"the raw param {name!r}"
                continue
            if name in meanings:
                raise SpecError(f"{where}: the {kind} {name!r} has the name of {meanings[name]}; "
                                f"a keyword {name}=... would set only one of them. Rename the {kind}")
            meanings[name] = f"the {kind} {name!r}"


def template_types(fn: Callable[..., Any], template: Mapping[str, Any]) -> dict[str, Declared]:
    """What each template param of ``fn`` declares it takes, for those that
    declare something checkable: an annotation that is a class, a union of
    them or a ``Literal``; else a default that is a bool, int, float or str."""
    written = getattr(fn, "__annotations__", {})
    try:
        hints = typing.get_type_hints(fn)
    except Exception:       # an annotation that does not resolve: check the ones that do
        hints = {k: v for k, v in written.items() if not isinstance(v, str)}
    out: dict[str, Declared] = {}
    for name, default in template.items():
        if name in written:     # annotated: its annotation decides (unchecked if unresolved)
            rule = _annotation_rule(hints[name]) if name in hints else None
            if rule is not None:
                out[name] = (rule[0], rule[1], f"declared `{name}: {_shown(hints[name])}`")
        elif type(default) in _BY_DEFAULT:
            accepts, what = _BY_DEFAULT[type(default)]
            out[name] = (accepts, what, f"its default is {default!r}; annotate it "
                                        f"(`{name}: <type> = {default!r}`) to take other values")
    return out


def check_template_value(declared: Mapping[str, Declared], name: str, value: Any, where: str) -> None:
    """Check one template value against :func:`template_types`.

    Raises:
        SpecError: naming the keyword, what it takes and what came.
    """
    rule = declared.get(name)
    if rule is not None and not rule[0](value):
        raise SpecError(f"{where}: template param {name!r}: expected {rule[1]}, got {value!r} "
                        f"({type(value).__name__}); {rule[2]}")


def bind_keywords(name: str, template: Mapping[str, Any], declared: Mapping[str, Declared],
                  dims: Sequence[str], kwargs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Split a trace's keywords into template values (defaults filled in,
    each checked against what the function declares) and symbolic dims.

    Args:
        name: the kernel's name, for messages.
        template: its template parameters and their defaults.
        declared: what each template value must be (:func:`template_types`).
        dims: its symbolic dims.
        kwargs: the keywords given.

    Returns:
        ``(template, dims)``, each sorted ``(name, value)`` pairs.

    Raises:
        SpecError: an unknown keyword, a dim that is not a positive int, a
            template value missing, of the wrong type or unhashable.
    """
    values: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for k, v in kwargs.items():
        if k in template:
            values[k] = v
        elif k in dims:
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SpecError(f"kernel {name}: dim {k} must be a positive int, got {v!r}")
            sizes[k] = v
        else:
            raise SpecError(
                f"kernel {name}: unknown keyword {k!r}; template params: "
                f"{list(template) or 'none'}, dims: {list(dims) or 'none'}")
    for k, default in template.items():
        if k not in values:
            if default is inspect.Parameter.empty:
                raise SpecError(f"kernel {name}: template param {k!r} has no default; pass {k}=...")
            values[k] = default
        else:
            check_template_value(declared, k, values[k], f"kernel {name}")
    items = tuple(sorted(values.items()))
    try:
        hash(items)
    except TypeError:
        raise SpecError(f"kernel {name}: template values must be hashable, got {values}") from None
    return items, tuple(sorted(sizes.items()))


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not _is_bool(v)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


# The checks numbers get: an int where a float is declared is fine (Python's
# numeric tower), a bool is never a number here.
_BY_DEFAULT: dict[type, tuple[Callable[[Any], bool], str]] = {
    bool: (_is_bool, "a bool"),
    int: (_is_int, "an int"),
    float: (_is_real, "a real number (int or float)"),
    str: (lambda v: isinstance(v, str), "a str"),
}


def _annotation_rule(ann: Any) -> tuple[Callable[[Any], bool], str] | None:
    """``(accepts, description)`` for an annotation, or None when it says
    nothing checkable (``Any``, a generic protocol, a type variable)."""
    if ann in _BY_DEFAULT:
        return _BY_DEFAULT[ann]
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        values = typing.get_args(ann)
        return (lambda v: any(v == x and type(v) is type(x) for x in values),
                "one of " + ", ".join(map(repr, values)))
    if origin is typing.Union or isinstance(ann, types.UnionType):
        rules = [_annotation_rule(a) for a in typing.get_args(ann)]
        if any(r is None for r in rules):
            return None
        return (lambda v: any(r[0](v) for r in rules), " or ".join(r[1] for r in rules))
    if ann is type(None):
        return (lambda v: v is None, "None")
    cls = origin if isinstance(origin, type) else ann
    if isinstance(cls, type) and cls is not object and not getattr(cls, "_is_protocol", False):
        return (lambda v: isinstance(v, cls), f"a {cls.__name__}")
    return None


def _shown(ann: Any) -> str:
    return ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")

"""The PTX text of a :func:`jaxptx.jax.ptx_call`: parsed and checked once
(:func:`parsed`), its entry found (:func:`entry_function`), and the text the
call carries (:func:`carried_ptx`): the entry's parameters in the shim's
launch order (buffer pointers, scalars, tensor maps), with the header's line
breaks and comments kept so line numbers stay the user's (see
:mod:`._ptx_source`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from .. import ir
from ..emit import emit, function_header_tokens
from ..errors import SpecError
from ..parse import parse
from ..sim.precheck import PrecheckError, module_problems

__all__ = ["carried_ptx", "entry_function", "parsed"]


@functools.lru_cache(maxsize=64)
def parsed(text: str) -> ir.Module:
    """The module of ``text``, parsed and checked once per text.

    Raises:
        ParseError: the text does not parse (with its line and column).
        PrecheckError: ``jaxptx.check`` finds what ptxas would reject,
            each finding with its PTX line and text.
    """
    module = parse(text, "<ptx_call>")
    problems = module_problems(module)
    if problems:
        raise PrecheckError("ptx_call", problems)
    return module


def entry_function(module: ir.Module, kernel: str | None) -> ir.Function:
    """The ``.entry`` named ``kernel``, or the module's only one.

    Raises:
        SpecError: no such entry, or several and no ``kernel`` to choose.
    """
    entries = [f for f in module.functions if f.kind == "entry" and f.body is not None]
    names = ", ".join(f.name for f in entries) or "none"
    if kernel is None:
        if len(entries) != 1:
            raise SpecError(f"ptx_call: the PTX defines {len(entries)} .entry functions "
                            f"({names}); pick one with kernel='name'")
        return entries[0]
    for f in entries:
        if f.name == kernel:
            return f
    raise SpecError(f"ptx_call: kernel={kernel!r}, but the PTX defines no such .entry "
                    f"(it defines {names})")


@functools.lru_cache(maxsize=256)
def carried_ptx(text: str, entry: str, order: tuple[int | None, ...]) -> str:
    """``text`` with ``entry``'s parameters in ``order`` (indices into its
    declared list; None adds an unused ``.u64`` parameter)."""
    module = parsed(text)
    f = module.function(entry)
    if order == tuple(range(len(f.params))):
        return text
    taken = {p.name for p in f.params}
    unused = (f"jaxptx_unused_{k}" for k in range(len(order) + len(taken)))
    names = iter([n for n in unused if n not in taken])
    params = [f.params[i] if i is not None else ir.VarDecl("param", "u64", next(names))
              for i in order]
    new = dataclasses.replace(f, params=params, params_parens=True,
                              trivia=_header_trivia(f, order, params))
    items = [new if item is f else item for item in module.items]
    return emit(ir.Module(items, module.trailing))


def _header_trivia(f: ir.Function, order: Sequence[int | None],
                   params: list[ir.VarDecl]) -> ir.Trivia:
    """The reordered header's whitespace and comments: the gaps around each
    parameter slot stay where they were, the gaps inside a parameter move
    with it, and an added parameter sits on its slot's line. So the header
    spans the same lines. None (a canonical header) when the header had none."""
    if f.trivia is None or not f.params_parens:
        return None
    head = len(function_header_tokens(dataclasses.replace(f, params=[]))) - 1   # through "("
    sizes = [_tokens(f, p) for p in f.params]
    gaps = list(f.trivia)
    slots, inner, start = [], [], head
    for n in sizes:
        slots.append((gaps[start], gaps[start + n]))
        inner.append(gaps[start + 1:start + n])
        start += n + 1
    # Added slots go before the last one, which keeps the gap before ")".
    added = len(params) - len(slots)
    if slots:
        slots = slots[:-1] + [(" ", "")] * added + slots[-1:]
    else:
        slots = [(" ", "")] * added
    out = gaps[:head]
    for (lead, after), i, p in zip(slots, order, params):
        out += [lead, *(inner[i] if i is not None else [" "] * (_tokens(f, p) - 1)), after]
    out.append(gaps[-1])
    new = dataclasses.replace(f, params=params)
    return tuple(out) if len(out) == len(function_header_tokens(new)) + 1 else None


def _tokens(f: ir.Function, p: ir.VarDecl) -> int:
    """How many header tokens parameter ``p`` spells."""
    return (len(function_header_tokens(dataclasses.replace(f, params=[p])))
            - len(function_header_tokens(dataclasses.replace(f, params=[]))))

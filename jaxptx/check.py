"""``jaxptx.check``: diagnostics for PTX text or a module, from the ISA table.

Reports unknown instructions, modifiers or types a target lacks, operand
kind and type mismatches against the registers' declared types, undeclared
registers, names (labels, variables, functions) that are never defined,
entry parameters past the ``.param`` space a kernel may have, initialisers
ptxas refuses (``generic(x)`` of anything but an earlier ``.global`` or
``.const`` variable, texture/sampler/surface fields elsewhere or unknown to
the type), and statements outside PTX's grammar. Findings in parsed text
carry the line and column of the statement concerned.

Example:
    >>> from jaxptx import check
    >>> text = '''.version 8.5
    ... .target sm_80
    ... .address_size 64
    ... .visible .entry k()
    ... {
    ...     .reg .f32 %f<3>;
    ...     add.f33 %f1, %f2, %f2;
    ...     bra DONE;
    ... }'''
    >>> for d in check(text): print(d)
    7:5: error: add.f33: unknown modifier .f33 (did you mean .f32?); add takes ...
    8:5: error: bra: undefined name DONE
"""

from __future__ import annotations

import re

from . import ir, isa
from ._check_body import check_function
from ._check_rules import KNOWN_DIRECTIVES as KNOWN_DIRECTIVES
from ._check_rules import LARGE_PARAM_PTX as LARGE_PARAM_PTX
from ._check_rules import LARGE_PARAM_SPACE as LARGE_PARAM_SPACE
from ._check_rules import OPAQUE_FIELDS as OPAQUE_FIELDS
from ._check_rules import SMALL_PARAM_SPACE as SMALL_PARAM_SPACE
from ._check_rules import SYSTEM_CALLS as SYSTEM_CALLS
from ._check_rules import Diagnostic as Diagnostic
from ._check_rules import at, module_rules, unknown_directives
from .parse import parse

__all__ = ["Diagnostic", "check"]

_SM = re.compile(r"^sm_\d+[af]?$")


def _target(module: ir.Module, arch: str | None) -> isa.Target | None:
    if arch is not None:
        return isa.parse_target(arch)
    for t in module.target:
        if _SM.match(t):
            return isa.parse_target(t)
    return None


def check(source: str | ir.Module, arch: str | None = None, *,
          instructions: bool = True) -> list[Diagnostic]:
    """Check PTX against the ISA table.

    Args:
        source: PTX text or a parsed/traced module.
        arch: target to check for; defaults to the module's ``.target``.
        instructions: check each instruction against the table (modifiers,
            target, operand kinds and types). A tracer that validated every
            instruction as it emitted it passes False and keeps the rest:
            module rules, directives, undefined names and labels, scoping,
            duplicates, constants past 64 bits.

    Returns:
        Diagnostics in source order (empty when nothing is wrong).

    Raises:
        ParseError: ``source`` is text that does not parse.
        TypeError: ``source`` is neither text nor a module.
    """
    if isinstance(source, str):
        module = parse(source)
    elif isinstance(source, ir.Module):
        module = source
    else:
        raise TypeError(f"jaxptx.check: expected PTX text (str) or a jaxptx.ir.Module (from "
                        f"jaxptx.parse or Kernel.module()), got {source!r:.60} ({type(source).__name__})")
    out: list[Diagnostic] = []
    target = _target(module, arch)
    version = module.version or isa.NEWEST_PTX
    if target is None:
        out.append(Diagnostic(0, 0, "no .target sm_XX in the module and no arch given"))
        target = isa.parse_target("sm_90a")
    out.extend(module_rules(module, target, version))
    out.extend(unknown_directives(module))
    globals_ = {i.name for i in module.items if isinstance(i, (ir.VarDecl, ir.Function))}
    for item in module.items:
        if isinstance(item, ir.Unknown):
            out.append(Diagnostic(*at(item), f"not a PTX statement: {' '.join(item.tokens)[:60]}"))
        elif isinstance(item, ir.Function) and item.body is not None:
            out.extend(check_function(item, globals_, target, version, instructions))
    return sorted(out, key=lambda d: (d.line, d.column))

"""The IR module a finished trace becomes: the ``.version``/``.target``
header, the declarations the body asked for, the shared memory and the
``.entry`` with its launch directives; and the static shared memory a
module declares (what CUDA's launch limits count)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import ir, isa
from ..types import TYPES
from ._trace import Trace

__all__ = ["entry_module", "launch_directives", "ends_in_exit", "static_shared_bytes"]


def launch_directives(reqntid: tuple[int, int, int] | None, block: tuple[int, int, int],
                      cluster: tuple[int, int, int],
                      raw: Sequence[tuple[str, tuple[str, ...]]]) -> list[ir.Directive]:
    """The entry's performance directives: ``.reqntid`` (else ``.maxntid``
    for a block of more than one thread), ``.reqnctapercluster`` for a
    cluster, then the ``raw_directives`` as given."""
    directives = []
    if reqntid is not None:
        directives.append(ir.Directive.listing("reqntid", *reqntid))
    elif block != (1, 1, 1):
        directives.append(ir.Directive.listing("maxntid", *block))
    if cluster != (1, 1, 1):
        directives.append(ir.Directive.listing("reqnctapercluster", *cluster))
    directives.extend(ir.Directive.listing(n, *a) for n, a in raw)
    return directives


def entry_module(name: str, trace: Trace, target: isa.Target, version: tuple[int, int],
                 directives: list[ir.Directive], target_options: Sequence[str],
                 address_size: int | None) -> ir.Module:
    """The module of an ordinary (one ``.entry``) kernel's finished trace."""
    shared = list(trace.shared)
    if trace.extern_smem is not None:
        shared.insert(0, ir.VarDecl("shared", "b8", trace.extern_smem, linkage=("extern",),
                                    align=1024, dims=(-1,)))
    func = ir.Function("entry", name, trace.params, linkage=("visible",), directives=directives,
                       body=[*trace.register_decls(), *trace.entry, *trace.body])
    header = [ir.Directive("version", (f"{version[0]}.{version[1]}",)),
              ir.Directive.listing("target", target.name, *target_options)]
    if address_size is not None:
        header.append(ir.Directive("address_size", (str(address_size),)))
    return ir.Module([*header, *trace.declarations, *shared, func])


def ends_in_exit(body: list[ir.Statement]) -> bool:
    """Whether the body's last instruction is an unguarded ``ret`` or ``exit``."""
    last = next((s for s in reversed(body) if not isinstance(s, ir.Comment)), None)
    return isinstance(last, ir.Instruction) and last.opcode in ("ret", "exit") and last.guard is None


def static_shared_bytes(module: ir.Module) -> int:
    """Bytes of the module's statically sized ``.shared`` variables (module
    scope and function bodies), each at its alignment; an ``.extern`` array
    is dynamic shared memory.

    Args:
        module: a traced or parsed module.

    Returns:
        The bytes CUDA counts against the static shared memory limit.
    """
    items = [*module.items, *(s for f in module.functions for s in ir.walk(f.body or []))]
    total = 0
    for item in items:
        if not (isinstance(item, ir.VarDecl) and item.space == "shared") or "extern" in item.linkage:
            continue
        element = TYPES[item.type].bits // 8 * (item.vector or 1)
        count = 1
        for d in item.dims:
            count *= max(d, 0)
        align = max(item.align or 1, element)
        total = -(-total // align) * align + element * count
    return total

"""The findings of :func:`jaxptx.check` (:class:`Diagnostic`), and the rules
about a module as a whole and each function's declarations: the
``.version`` a target needs, 64-bit addressing, unresolved externs, unknown
directives, unsized arrays, initialisers ptxas refuses, and the ``.param``
space an entry may take. Rules about function bodies are in
``_check_body``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from . import ir, isa
from .types import TYPES

__all__ = ["Diagnostic", "at", "operand_names", "SYSTEM_CALLS", "KNOWN_DIRECTIVES",
           "SMALL_PARAM_SPACE", "LARGE_PARAM_SPACE", "LARGE_PARAM_PTX", "OPAQUE_FIELDS",
           "module_rules", "unknown_directives"]

# Functions the CUDA toolchain provides to every program (PTX ISA, "System Calls").
SYSTEM_CALLS = frozenset(["vprintf", "__assertfail", "malloc", "free"])
# PTX ISA "PTX Directives" (9.0), without the state spaces and types the
# parser reads as declarations.
KNOWN_DIRECTIVES = frozenset([
    "address_size", "version", "target", "file", "loc", "section", "pragma", "branchtargets",
    "calltargets", "callprototype", "maxnreg", "maxntid", "reqntid", "minnctapersm", "maxnctapersm",
    "noreturn", "explicitcluster", "reqnctapercluster", "maxclusterrank", "blocksareclusters",
    "alias", "abi_preserve", "abi_preserve_control", "extern", "visible", "weak", "common",
])
# Kernel parameter space (ptxas 13, measured: "Entry function 'k' uses too
# much parameter space (0x7ffd bytes, 0x7ffc max)"; 0x1100 before PTX 8.1).
SMALL_PARAM_SPACE = 4352
LARGE_PARAM_SPACE = 32764
LARGE_PARAM_PTX = (8, 1)
# The fields an initialiser of each opaque type may name (PTX ISA "Texture
# Sampler and Surface Types"; ptxas 13 refuses others: "Unrecognized field
# name 'x' in opaque struct initializer").
OPAQUE_FIELDS = {
    "texref": frozenset(["width", "height", "depth", "channel_data_type", "channel_order",
                         "normalized_coords", "filter_mode", "addr_mode_0", "addr_mode_1", "addr_mode_2"]),
    "samplerref": frozenset(["force_unnormalized_coords", "filter_mode", "addr_mode_0", "addr_mode_1",
                             "addr_mode_2"]),
    "surfref": frozenset(["width", "height", "depth", "channel_data_type", "channel_order"]),
}
# What generic(x) may initialise, and where x may live (ptxas 13: "Initial
# value type mismatch"; "Variable used as initial value not in .global or
# .const state space").
_GENERIC_TYPES = frozenset(["u32", "u64"])
_GENERIC_SPACES = frozenset(["global", "const"])


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One finding: 1-based ``line``/``column`` (0 when unknown), ``message``."""

    line: int
    column: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.severity}: {self.message}"


def at(node: object) -> tuple[int, int]:
    """``(line, column)`` where a parsed node starts; ``(0, 0)`` for a node
    built in Python (a traced module's declarations and labels)."""
    loc = getattr(node, "loc", None)
    return (loc[1], loc[2]) if loc is not None and len(loc) == 3 else (0, 0)


def operand_names(op: ir.Operand) -> Iterator[ir.Register | ir.Symbol]:
    """The registers and names (labels, variables, functions) in an operand."""
    return (x for x in ir.leaves(op) if isinstance(x, (ir.Register, ir.Symbol)))


def module_rules(module: ir.Module, target: isa.Target, version: tuple[int, int]) -> Iterator[Diagnostic]:
    """Rules about the module as a whole rather than one instruction."""
    for item in module.items:
        if isinstance(item, ir.Directive) and item.name == "address_size" and item.values != ("64",):
            yield Diagnostic(*at(item), f".address_size {' '.join(item.values)}: only 64-bit "
                                         "addressing is supported by CUDA 13 (ptxas)")
    if module.version is not None and module.version < target.min_ptx:
        v = module.version
        need = target.min_ptx
        where = next((at(i) for i in module.items if isinstance(i, ir.Directive) and i.name == "version"),
                  (0, 0))
        yield Diagnostic(*where, f".version {v[0]}.{v[1]} does not know .target {target.name}; "
                              f"it needs {need[0]}.{need[1]} or newer")
    defined = {i.name for i in module.items if isinstance(i, ir.Function) and i.body is not None}
    extern = {i.name: i for i in module.items
              if isinstance(i, ir.Function) and i.body is None and "extern" in i.linkage}
    called = {x.name for f in module.items if isinstance(f, ir.Function)
              for s in ir.walk(f.body or []) if isinstance(s, ir.Instruction) and s.opcode == "call"
              for op in s.operands for x in operand_names(op) if isinstance(x, ir.Symbol)}
    for name in sorted((extern.keys() & called) - defined - SYSTEM_CALLS):
        yield Diagnostic(*at(extern[name]), f"unresolved extern function {name} (ptxas compiles "
                                             "whole programs unless given -c)")
    for item in module.items:
        if isinstance(item, ir.VarDecl) and -1 in item.dims and "extern" not in item.linkage:
            yield Diagnostic(*at(item), f"{item.name}: an unsized array [] must be .extern")
        if isinstance(item, ir.Function):
            yield from _function_rules(item, target, version)
    yield from _initialisers(module)


def unknown_directives(module: ir.Module) -> Iterator[Diagnostic]:
    """Directives PTX does not define (ptxas: a syntax error)."""
    found: list[ir.Directive] = [i for i in module.items if isinstance(i, ir.Directive)]
    for f in module.functions:
        found.extend(f.directives)
        found.extend(s for s in ir.walk(f.body or []) if isinstance(s, ir.Directive))
    for d in found:
        if d.name not in KNOWN_DIRECTIVES:
            yield Diagnostic(*at(d), f"unknown directive .{d.name} (not a PTX directive)")


def _initialisers(module: ir.Module) -> Iterator[Diagnostic]:
    """Initialisers ptxas refuses: ``generic(x)`` of anything but an earlier
    ``.global``/``.const`` variable or into anything but ``.u32``/``.u64``;
    ``name = value`` fields outside a ``.texref``/``.samplerref``/``.surfref``,
    other items in one, or a field its type lacks."""
    spaces: dict[str, str] = {}        # the variables declared so far → their space
    for item in module.items:
        if isinstance(item, ir.VarDecl):
            yield from _initialiser(item, spaces)
            spaces[item.name] = item.space
        elif isinstance(item, ir.Function):
            local = dict(spaces)
            for s in ir.walk(item.body or []):
                if isinstance(s, ir.VarDecl):
                    yield from _initialiser(s, local)
                    local[s.name] = s.space


def _initialiser(d: ir.VarDecl, spaces: dict[str, str]) -> Iterator[Diagnostic]:
    fields = OPAQUE_FIELDS.get(d.type)
    for x in _init_items(d.init or ()):
        text = "".join(x.tokens())
        if isinstance(x, ir.Generic) and spaces.get(x.name) not in _GENERIC_SPACES:
            where = "not declared before it" if x.name not in spaces else f"a .{spaces[x.name]} variable"
            yield Diagnostic(*at(d), f"{d.name}: initialiser {text}: generic() takes a .global or .const "
                                      f"variable declared before it; {x.name} is {where}")
        elif isinstance(x, ir.Generic) and d.type not in _GENERIC_TYPES:
            yield Diagnostic(*at(d), f"{d.name}: initialiser {text}: generic() initialises a .u32 or "
                                      f".u64 variable, not .{d.type}")
        elif isinstance(x, ir.Field) and fields is None:
            yield Diagnostic(*at(d), f"{d.name}: initialiser {text}: fields initialise a .texref, "
                                      f".samplerref or .surfref variable, not .{d.type}")
        elif isinstance(x, ir.Field) and x.name not in fields:
            yield Diagnostic(*at(d), f"{d.name}: .{d.type} has no field {x.name}; it has "
                                      f"{', '.join(sorted(fields))}")
        elif fields is not None and not isinstance(x, ir.Field):
            yield Diagnostic(*at(d), f"{d.name}: a .{d.type} initialiser names its fields "
                                      f"({{field = value, ...}}), got {text}")


def _init_items(items: tuple[ir.Operand, ...]) -> Iterator[ir.Operand]:
    """An initialiser's items, nested ``{...}`` flattened."""
    for x in items:
        if isinstance(x, ir.Vector):
            yield from _init_items(x.items)
        else:
            yield x


def _function_rules(f: ir.Function, target: isa.Target, version: tuple[int, int]) -> Iterator[Diagnostic]:
    """Rules about one function's declarations: its parameters, directives
    and unsized arrays."""
    for p in f.params:
        if f.kind == "entry" and -1 in p.dims:
            yield Diagnostic(*at(p), f"{f.name}: entry parameter {p.name} cannot be an unsized array")
        if p.vector is not None and p.space == "param":
            yield Diagnostic(*at(p), f"{f.name}: parameter {p.name} cannot be a vector (.v{p.vector})")
    if f.kind == "entry":
        yield from _param_space(f, target, version)
    for s in ir.walk(f.body or []):
        if isinstance(s, ir.VarDecl) and -1 in s.dims and "extern" not in s.linkage:
            yield Diagnostic(*at(s), f"{s.name}: an unsized array [] must be .extern")
    for d in f.directives:
        if d.name == "noreturn" and f.kind == "entry":
            yield Diagnostic(*at(d), f"{f.name}: .noreturn applies to .func, not .entry")


def _param_space_limit(target: isa.Target, version: tuple[int, int]) -> int:
    """The most bytes of ``.param`` space an ``.entry`` may declare: 32764
    from PTX ISA 8.1 (CUDA 12.1) on sm_70 and newer, else 4352 (ptxas 13:
    "uses too much parameter space (..., 0x7ffc max)", and for .version 8.0
    "0x1100 max" with "Kernel parameter size larger than 4352 bytes
    requires PTX ISA .version 8.1")."""
    return LARGE_PARAM_SPACE if version >= LARGE_PARAM_PTX and target.sm >= 70 else SMALL_PARAM_SPACE


def _param_space(f: ir.Function, target: isa.Target, version: tuple[int, int]) -> Iterator[Diagnostic]:
    """An entry whose parameters, each at its alignment, take more than
    :func:`_param_space_limit` bytes; reported at the first parameter that
    does not fit."""
    limit = _param_space_limit(target, version)
    end = 0
    for p in f.params:
        t = TYPES.get(p.type)
        if p.space != "param" or t is None or -1 in p.dims:
            continue
        element = max(t.bits // 8, 1) * (p.vector or 1)
        count = 1
        for d in p.dims:
            count *= d
        align = max(p.align or 1, element)
        end = -(-end // align) * align + element * count
        if end > limit:
            more = "" if limit == LARGE_PARAM_SPACE else \
                f"; .version {LARGE_PARAM_PTX[0]}.{LARGE_PARAM_PTX[1]} or newer allows {LARGE_PARAM_SPACE} bytes"
            yield Diagnostic(*at(p), f"{f.name}: entry parameters take {end} bytes up to {p.name}, "
                                      f"over the {limit} bytes of .param space a kernel may have{more}; "
                                      "pass large data through a global-memory pointer")
            return

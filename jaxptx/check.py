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

import dataclasses
import re
from collections.abc import Iterator

from . import ir, isa
from .errors import PtxError
from .parse import parse
from .types import TYPES, PtxType
from .validate import PREDEFINED, check_instruction, normalize

__all__ = ["Diagnostic", "check"]

_SM = re.compile(r"^sm_\d+[af]?$")
# Names every PTX module may use (PTX ISA, "Predefined Identifiers").
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
_NARROW_ADDRESS_SPACES = frozenset(["shared", "shared::cta", "shared::cluster", "local", "const", "param"])
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



def _operand_names(op: ir.Operand) -> Iterator[ir.Register | ir.Symbol]:
    return (x for x in ir.leaves(op) if isinstance(x, (ir.Register, ir.Symbol)))


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
    out.extend(_module_rules(module, target, version))
    out.extend(_unknown_directives(module))
    globals_ = {i.name for i in module.items if isinstance(i, (ir.VarDecl, ir.Function))}
    for item in module.items:
        if isinstance(item, ir.Unknown):
            out.append(Diagnostic(*_at(item), f"not a PTX statement: {' '.join(item.tokens)[:60]}"))
        elif isinstance(item, ir.Function) and item.body is not None:
            out.extend(_check_function(item, globals_, target, version, instructions))
    return sorted(out, key=lambda d: (d.line, d.column))


def _unknown_directives(module: ir.Module) -> Iterator[Diagnostic]:
    """Directives PTX does not define (ptxas: a syntax error)."""
    found: list[ir.Directive] = [i for i in module.items if isinstance(i, ir.Directive)]
    for f in module.functions:
        found.extend(f.directives)
        found.extend(s for s in ir.walk(f.body or []) if isinstance(s, ir.Directive))
    for d in found:
        if d.name not in KNOWN_DIRECTIVES:
            yield Diagnostic(*_at(d), f"unknown directive .{d.name} (not a PTX directive)")


def _at(node: object) -> tuple[int, int]:
    """``(line, column)`` where a parsed node starts; ``(0, 0)`` for a node
    built in Python (a traced module's declarations and labels)."""
    loc = getattr(node, "loc", None)
    return (loc[1], loc[2]) if loc is not None and len(loc) == 3 else (0, 0)


def _module_rules(module: ir.Module, target: isa.Target, version: tuple[int, int]) -> Iterator[Diagnostic]:
    """Rules about the module as a whole rather than one instruction."""
    for item in module.items:
        if isinstance(item, ir.Directive) and item.name == "address_size" and item.values != ("64",):
            yield Diagnostic(*_at(item), f".address_size {' '.join(item.values)}: only 64-bit "
                                         "addressing is supported by CUDA 13 (ptxas)")
    if module.version is not None and module.version < target.min_ptx:
        v = module.version
        need = target.min_ptx
        at = next((_at(i) for i in module.items if isinstance(i, ir.Directive) and i.name == "version"),
                  (0, 0))
        yield Diagnostic(*at, f".version {v[0]}.{v[1]} does not know .target {target.name}; "
                              f"it needs {need[0]}.{need[1]} or newer")
    defined = {i.name for i in module.items if isinstance(i, ir.Function) and i.body is not None}
    extern = {i.name: i for i in module.items
              if isinstance(i, ir.Function) and i.body is None and "extern" in i.linkage}
    called = {x.name for f in module.items if isinstance(f, ir.Function)
              for s in ir.walk(f.body or []) if isinstance(s, ir.Instruction) and s.opcode == "call"
              for op in s.operands for x in _operand_names(op) if isinstance(x, ir.Symbol)}
    for name in sorted((extern.keys() & called) - defined - SYSTEM_CALLS):
        yield Diagnostic(*_at(extern[name]), f"unresolved extern function {name} (ptxas compiles "
                                             "whole programs unless given -c)")
    for item in module.items:
        if isinstance(item, ir.VarDecl) and -1 in item.dims and "extern" not in item.linkage:
            yield Diagnostic(*_at(item), f"{item.name}: an unsized array [] must be .extern")
        if isinstance(item, ir.Function):
            yield from _function_rules(item, target, version)
    yield from _initialisers(module)


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
            yield Diagnostic(*_at(d), f"{d.name}: initialiser {text}: generic() takes a .global or .const "
                                      f"variable declared before it; {x.name} is {where}")
        elif isinstance(x, ir.Generic) and d.type not in _GENERIC_TYPES:
            yield Diagnostic(*_at(d), f"{d.name}: initialiser {text}: generic() initialises a .u32 or "
                                      f".u64 variable, not .{d.type}")
        elif isinstance(x, ir.Field) and fields is None:
            yield Diagnostic(*_at(d), f"{d.name}: initialiser {text}: fields initialise a .texref, "
                                      f".samplerref or .surfref variable, not .{d.type}")
        elif isinstance(x, ir.Field) and x.name not in fields:
            yield Diagnostic(*_at(d), f"{d.name}: .{d.type} has no field {x.name}; it has "
                                      f"{', '.join(sorted(fields))}")
        elif fields is not None and not isinstance(x, ir.Field):
            yield Diagnostic(*_at(d), f"{d.name}: a .{d.type} initialiser names its fields "
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
            yield Diagnostic(*_at(p), f"{f.name}: entry parameter {p.name} cannot be an unsized array")
        if p.vector is not None and p.space == "param":
            yield Diagnostic(*_at(p), f"{f.name}: parameter {p.name} cannot be a vector (.v{p.vector})")
    if f.kind == "entry":
        yield from _param_space(f, target, version)
    for s in ir.walk(f.body or []):
        if isinstance(s, ir.VarDecl) and -1 in s.dims and "extern" not in s.linkage:
            yield Diagnostic(*_at(s), f"{s.name}: an unsized array [] must be .extern")
    for d in f.directives:
        if d.name == "noreturn" and f.kind == "entry":
            yield Diagnostic(*_at(d), f"{f.name}: .noreturn applies to .func, not .entry")


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
            yield Diagnostic(*_at(p), f"{f.name}: entry parameters take {end} bytes up to {p.name}, "
                                      f"over the {limit} bytes of .param space a kernel may have{more}; "
                                      "pass large data through a global-memory pointer")
            return


def _check_function(f: ir.Function, globals_: set[str], target: isa.Target,
                    version: tuple[int, int], validate: bool = True) -> list[Diagnostic]:
    regs: ir.Registers[PtxType | None] = ir.Registers()
    vectors: ir.Registers[int] = ir.Registers()
    names = set(globals_) | set(PREDEFINED)
    for p in [*f.params, *(f.returns or [])]:
        if p.space == "reg":
            regs[p.name] = TYPES.get(p.type)
            if p.vector:
                vectors[p.name] = p.vector
        names.add(p.name)
    instructions = []
    out: list[Diagnostic] = []
    for s, labels in _scoped(f.body or [], frozenset(), out):
        if isinstance(s, ir.RegDecl):
            t = TYPES.get(s.type)
            for n in s.names:
                regs.declare(n.name, t, n.count)
                if s.vector:
                    vectors.declare(n.name, s.vector, n.count)
        elif isinstance(s, ir.VarDecl):
            names.add(s.name)
        elif isinstance(s, ir.Instruction):
            instructions.append((s, labels))

    def type_of(name: str) -> PtxType | None:
        t = regs.get(name) or regs.get(name.rsplit(".", 1)[0])
        if t is not None:
            return t
        special = isa.SPECIAL_REGS.get(name[1:].split(".")[0]) if name.startswith("%") else None
        return TYPES[special.type] if special is not None else None

    for ins, labels in instructions:
        line, col = (ins.loc[1], ins.loc[2]) if ins.loc and len(ins.loc) == 3 else (0, 0)
        written = ins
        if validate:
            ins = normalize(ins, regs, vectors)
        problems = _undefined(ins, regs, names, labels)
        if not problems and validate:
            try:
                r = check_instruction(ins, target=target, version=version, type_of=type_of)
                problems.extend(_narrow_addresses(ins, r, type_of))
                problems.extend(_bare_vectors(written, r, vectors))
                out.extend(Diagnostic(line, col, p, "warning") for p in _truncated_literals(ins, r))
            except PtxError as e:
                problems.append(str(e))
        out.extend(Diagnostic(line, col, p) for p in problems)
        out.extend(Diagnostic(line, col, p) for p in _wide_literals(ins))
    return out


def _immediates(ins: ir.Instruction) -> Iterator[tuple[int, ir.Immediate]]:
    for k, op in enumerate(ins.operands):
        items = op.items if isinstance(op, ir.Vector) else (op,)
        for x in items:
            if isinstance(x, ir.Immediate) and isinstance(x.value, int):
                yield k, x


def _wide_literals(ins: ir.Instruction) -> list[str]:
    """Integer constants of 2**64 or more in magnitude, anywhere in an operand
    (ptxas: "Constant overflow"; the emulator would truncate them)."""
    return [f"{ins.name}: the integer constant {v} does not fit in 64 bits (ptxas: Constant overflow)"
            for v in _integers(ins.operands) if abs(v) >= 1 << 64]


def _integers(operands: tuple) -> Iterator[int]:
    for op in operands:
        for x in ir.leaves(op):
            if isinstance(x, ir.Immediate):
                x = x.value
            if isinstance(x, int) and not isinstance(x, bool):
                yield x


def _truncated_literals(ins: ir.Instruction, r: isa.Resolved) -> list[str]:
    """Integer literals wider than their operand's type: ptxas accepts them
    and keeps the low bits, which is rarely what was meant (a warning)."""
    out = []
    for k, x in _immediates(ins):
        want = r.types[k] if k < len(r.types) else None
        if want is None or want.kind not in ("u", "s", "b") or want.bits >= 64 or want.lanes > 1 \
                or abs(x.value) >= 1 << 64:        # past 64 bits: an error instead
            continue
        lo = -(1 << (want.bits - 1))            # any two's complement or unsigned spelling
        if not lo <= x.value < (1 << want.bits):
            out.append(f"{ins.name} operand {r.operands[k].name}: literal {x.spelling()} does not fit "
                       f".{want.name}; ptxas keeps its low {want.bits} bits")
    return out


def _scoped(body: list[ir.Statement], outer: frozenset[str],
            out: list[Diagnostic]) -> Iterator[tuple[ir.Statement, frozenset[str]]]:
    """Each statement with the labels it can branch to: a label belongs to the
    ``{ }`` block that declares it and the blocks inside it (PTX ISA "Scope";
    ptxas: "Unknown symbol" for a label of a sibling block). A label or
    register declared twice in one block is a duplicate."""
    here = [s.name for s in body if isinstance(s, ir.Label)]
    first: dict[tuple[str, str], ir.Statement] = {}
    for s in body:
        named = [("label", s.name)] if isinstance(s, ir.Label) else \
            [("register", n.name) for n in s.names] if isinstance(s, ir.RegDecl) else []
        for kind, name in named:
            before = first.get((kind, name))
            if before is None:
                first[kind, name] = s
            else:
                line = _at(before)[0]
                out.append(Diagnostic(*_at(s), f"duplicate definition of {kind} {name} in one block"
                                      + (f" (first defined on line {line})" if line else "")))
    visible = outer | frozenset(here)
    for s in body:
        if isinstance(s, ir.Block):
            yield from _scoped(s.body, visible, out)
        else:
            yield s, visible


def _bare_vectors(ins: ir.Instruction, r: isa.Resolved, vectors: ir.Registers[int]) -> list[str]:
    """A lone register where the form takes only a vector (``ldmatrix .x1``'s
    ``{%r1}``, an f64 ``mma`` fragment): ptxas wants the braces ("Vector of
    size 1 is expected") though the table reads both alike."""
    return [f"{ins.name} operand {o.name}: write a vector, {{{x.name}}} (ptxas refuses a bare register)"
            for o, x in zip(r.operands, ins.operands)
            if o.kinds == ("vec",) and type(x) is ir.Register and x.name not in vectors]


def _narrow_addresses(ins: ir.Instruction, r: isa.Resolved, type_of) -> list[str]:
    """A 32-bit register as a generic or global address is 32-bit addressing,
    which CUDA 13 no longer compiles (shared, local, const, param and
    tensor-memory addresses may be 32-bit)."""
    if _NARROW_ADDRESS_SPACES.intersection(ins.modifiers) or ins.opcode.startswith("tcgen05.mma"):
        return []           # tcgen05.mma's [a-tmem] shares an operand with the 64-bit a-desc
    problems = []
    for o, want, x in zip(r.operands, r.types, ins.operands):
        if isinstance(x, ir.Address) and isinstance(x.base, ir.Register):
            got = type_of(x.base.name)
            if got is not None and got.bits == 32 and not (want is not None and want.bits == 32):
                problems.append(f"{ins.name} operand {o.name}: {x.base.name} is a 32-bit register; "
                                "a generic or global address needs a 64-bit one")
    return problems


def _undefined(ins: ir.Instruction, regs: ir.Registers, names: set[str], labels: frozenset[str]) -> list[str]:
    problems = []
    operands = list(ins.operands)
    if ins.guard is not None:
        operands.append(ins.guard.register)
    for op in operands:
        for x in _operand_names(op):
            if isinstance(x, ir.Register):
                base = x.name[1:].split(".")[0]
                declared = x.name in regs or x.name.rsplit(".", 1)[0] in regs
                if not declared and base not in isa.SPECIAL_REGS and not base.startswith("envreg"):
                    problems.append(f"{ins.name}: undeclared register {x.name}")
            elif x.name not in names and x.name not in labels and x.name not in regs:
                problems.append(f"{ins.name}: undefined name {x.name}")
    return problems

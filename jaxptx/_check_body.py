"""Rules of :func:`jaxptx.check` about a function's body, instruction by instruction: undeclared
registers and undefined names (labels scoped to their ``{ }`` block),
duplicates, the table's checks of each instruction, 32-bit generic
addresses, bare registers where ptxas wants a vector, and integer literals
too wide for their operand or for 64 bits."""

from __future__ import annotations

from collections.abc import Iterator

from . import ir, isa
from ._check_rules import Diagnostic, at, operand_names
from .errors import PtxError
from .types import TYPES, PtxType
from .validate import PREDEFINED, check_instruction, normalize

__all__ = ["check_function"]

_NARROW_ADDRESS_SPACES = frozenset(["shared", "shared::cta", "shared::cluster", "local", "const", "param"])


def check_function(f: ir.Function, globals_: set[str], target: isa.Target,
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
    for run, labels in _scoped(f.body or [], frozenset(), out):
        for s in run:
            if type(s) is ir.Instruction:       # the common case first
                instructions.append((s, labels))
            elif isinstance(s, ir.RegDecl):
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

    known: set[str] = set()
    for ins, labels in instructions:
        if not validate and _declared_registers_only(ins, regs, known):
            continue        # nothing to find: no names, no literals
        written = ins
        if validate:
            ins = normalize(ins, regs, vectors)
        problems = _undefined(ins, regs, names, labels)
        warnings: list[str] = []
        if not problems and validate:
            try:
                r = check_instruction(ins, target=target, version=version, type_of=type_of)
                problems.extend(_narrow_addresses(ins, r, type_of))
                problems.extend(_bare_vectors(written, r, vectors))
                warnings = _truncated_literals(ins, r)
            except PtxError as e:
                problems.append(str(e))
        problems.extend(_wide_literals(ins))
        if problems or warnings:
            line, col = (ins.loc[1], ins.loc[2]) if ins.loc and len(ins.loc) == 3 else (0, 0)
            out.extend(Diagnostic(line, col, p, "warning") for p in warnings)
            out.extend(Diagnostic(line, col, p) for p in problems)
    return out


def _declared_registers_only(ins: ir.Instruction, regs: ir.Registers, known: set[str]) -> bool:
    """Whether every operand of ``ins``, and its guard, is a plain register
    that is declared (``known``: names found declared before, added to)."""
    for op in ins.operands:
        if type(op) is not ir.Register:
            return False
        name = op.name
        if name not in known:
            if name not in regs:
                return False
            known.add(name)
    guard = ins.guard
    if guard is not None:
        if type(guard.register) is not ir.Register:
            return False
        name = guard.register.name
        if name not in known:
            if name not in regs:
                return False
            known.add(name)
    return True


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
        if type(op) is ir.Register:
            continue
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
            out: list[Diagnostic]) -> Iterator[tuple[list[ir.Statement], frozenset[str]]]:
    """Runs of consecutive statements, in order, nested blocks flattened,
    each with the labels its statements can branch to: a label belongs to the
    ``{ }`` block that declares it and the blocks inside it (PTX ISA "Scope";
    ptxas: "Unknown symbol" for a label of a sibling block). A label or
    register declared twice in one block is a duplicate."""
    here: list[str] = []
    first: dict[tuple[str, str], ir.Statement] = {}
    for s in body:
        if type(s) is ir.Instruction:       # the common case: neither a label nor registers
            continue
        if isinstance(s, ir.Label):
            here.append(s.name)
            named = [("label", s.name)]
        elif isinstance(s, ir.RegDecl):
            named = [("register", n.name) for n in s.names]
        else:
            continue
        for kind, name in named:
            before = first.get((kind, name))
            if before is None:
                first[kind, name] = s
            else:
                line = at(before)[0]
                out.append(Diagnostic(*at(s), f"duplicate definition of {kind} {name} in one block"
                                      + (f" (first defined on line {line})" if line else "")))
    visible = outer | frozenset(here)
    if not any(issubclass(t, ir.Block) for t in set(map(type, body))):
        yield body, visible                 # no nested block: the whole body is one run
        return
    run: list[ir.Statement] = []
    for s in body:
        if isinstance(s, ir.Block):
            if run:
                yield run, visible
                run = []
            yield from _scoped(s.body, visible, out)
        else:
            run.append(s)
    if run:
        yield run, visible


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
    operands = ins.operands if ins.guard is None else (*ins.operands, ins.guard.register)
    for op in operands:
        if type(op) is ir.Register and op.name in regs:     # the common case, without the walk
            continue
        for x in operand_names(op):
            if isinstance(x, ir.Register):
                base = x.name[1:].split(".")[0]
                declared = x.name in regs or x.name.rsplit(".", 1)[0] in regs
                if not declared and base not in isa.SPECIAL_REGS and not base.startswith("envreg"):
                    problems.append(f"{ins.name}: undeclared register {x.name}")
            elif x.name not in names and x.name not in labels and x.name not in regs:
                problems.append(f"{ins.name}: undefined name {x.name}")
    return problems

"""Preparing a kernel: from a parsed or traced module to a :class:`.program.Program`.

Nested ``{ }`` blocks are flattened. Their names keep PTX's scoping (PTX
ISA "Scope"): a register, variable or label declared inside a block is a
new name until the block ends (renamed ``name@k``), so a nested block may
reuse a name its enclosing or sibling blocks declare, and a branch goes to
the label of the innermost enclosing block that declares it. Variables are
laid out per state space in declaration order; ``.func`` bodies follow the
entry's code, their names prefixed ``func::``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from ... import ir, isa
from ...errors import PtxError
from ...types import TYPES, PtxType
from ...validate import normalize, operand_kind
from ..errors import SimError
from ..memory.spaces import CONST_WINDOW
from .program import OPAQUE_TYPES, AddressOf, Callee, Program, Variable

__all__ = ["prepare"]


class _Scope:
    """Register names of one ``{ }`` block: a register re-declared inside a
    block is a new register (renamed ``name@depth.k``) until the block ends."""

    def __init__(self, outer: "_Scope | None", tag: str, prefix: str = "") -> None:
        self.outer = outer
        self.tag = tag
        self.prefix = outer.prefix if outer is not None else prefix
        self.names: dict[str, str] = {}

    def declare(self, name: str, taken: dict) -> str:
        unique = self.prefix + name
        if self.outer is not None and (unique in taken or f"{unique}.x" in taken):
            unique = f"{unique}@{self.tag}"
        self.names[name] = unique
        return unique

    def lookup(self, name: str) -> str:
        scope = self
        base, dot, comp = name.partition(".")   # `%r2.b3`: a selector on %r2
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            if dot and base in scope.names:
                return f"{scope.names[base]}.{comp}"
            scope = scope.outer
        return name

    def rename(self, ins: ir.Instruction) -> ir.Instruction:
        if self.outer is None and not self.names:
            return ins
        ops = tuple(_rename(op, self) for op in ins.operands)
        guard = ins.guard
        if guard is not None:
            guard = ir.Guard(ir.Register(self.lookup(guard.register.name)), guard.negated)
        return ir.Instruction(ins.opcode, ins.modifiers, ops, guard, loc=ins.loc)


def _rename(op: ir.Operand, scope: _Scope) -> ir.Operand:
    if isinstance(op, ir.Register):
        return ir.Register(scope.lookup(op.name))
    if isinstance(op, ir.Symbol):
        return ir.Symbol(scope.lookup(op.name), op.offset, op.minus)
    if isinstance(op, ir.Address):
        base = op.base if op.base is None else _rename(op.base, scope)
        return ir.Address(base, op.offset, None if op.extra is None else _rename(op.extra, scope), op.minus)
    if isinstance(op, (ir.Vector, ir.Parens)):
        return type(op)(tuple(_rename(x, scope) for x in op.items))
    if isinstance(op, ir.Pair):
        return ir.Pair(_rename(op.first, scope), _rename(op.second, scope))
    if isinstance(op, ir.Negated):
        return ir.Negated(_rename(op.operand, scope))
    return op


def _scoped(body: list[ir.Statement], scope: _Scope,
            counter: list[int] | None = None) -> Iterator[tuple[ir.Statement, _Scope]]:
    """Each statement of ``body`` (nested blocks flattened) with its scope.
    A block's labels are declared on entry, so that a branch before the
    label (a forward branch) finds it."""
    counter = counter if counter is not None else [0]
    for s in body:
        if isinstance(s, ir.Label):
            scope.names[s.name] = scope.prefix + s.name if scope.outer is None else \
                f"{scope.prefix}{s.name}@{scope.tag}"
    for s in body:
        if isinstance(s, ir.Block):
            counter[0] += 1
            yield from _scoped(s.body, _Scope(scope, str(counter[0])), counter)
        else:
            yield s, scope


def _used_registers(body: list[ir.Statement]) -> dict[str, list[int]]:
    """The numbered register names the instructions of ``body`` use, as
    prefix → indices (``%r12`` → ``"%r": [12]``)."""
    names: set[str] = set()
    for s in ir.walk(body):
        if isinstance(s, ir.Instruction):
            names.update(x.name.partition(".")[0] for op in s.operands for x in ir.leaves(op)
                         if isinstance(x, ir.Register))
            if s.guard is not None:
                names.add(s.guard.register.name.partition(".")[0])
    used: dict[str, list[int]] = {}
    for name in sorted(names):
        stem = name.rstrip("0123456789")
        digits = name[len(stem):]
        if digits and (digits == "0" or not digits.startswith("0")):
            used.setdefault(stem, []).append(int(digits))
    return used


def _size(d: ir.VarDecl) -> int:
    t = TYPES.get(d.type)
    if t is None:
        why = " (it has no texture, sampler or surface units)" if d.type in OPAQUE_TYPES else ""
        raise SimError(f"{d.name}: variables of type .{d.type} are not supported by the emulator{why}")
    n = math.prod(x for x in d.dims if x > 0) if d.dims else 1
    return t.nbytes * (d.vector or 1) * n


class _Layout:
    def __init__(self) -> None:
        self.size = 0

    def place(self, d: ir.VarDecl) -> int:
        t = TYPES.get(d.type)
        align = d.align or (t.nbytes * (d.vector or 1) if t else 1)
        self.size = -(-self.size // align) * align
        offset = self.size
        self.size += _size(d) if -1 not in d.dims else 0
        return offset


def _init_values(d: ir.VarDecl, variables: dict[str, Variable]) -> tuple:
    """The items of ``d``'s initialiser, flattened: numbers, the names of
    variables (their address, filled in at launch) and :class:`AddressOf`.
    ``variables``: those declared before ``d`` (PTX names only earlier ones)."""
    if d.init is None:
        return ()
    out: list = []

    def flat(ops):
        for op in ops:
            if isinstance(op, ir.Vector):
                flat(op.items)
            elif isinstance(op, ir.Immediate):
                out.append(op.value)
            elif isinstance(op, ir.Symbol) and op.offset is None:
                out.append(op.name)
            elif isinstance(op, (ir.Symbol, ir.Generic)):
                out.append(_address_item(d, op, variables))
            else:
                raise SimError(f"{d.name}: initialiser {''.join(op.tokens())} is not supported by the emulator")
    flat(d.init)
    return tuple(out)


def _address_item(d: ir.VarDecl, op: "ir.Symbol | ir.Generic", variables: dict[str, Variable]):
    """``name+offset`` or ``generic(name)[+offset]`` as an initialiser item:
    a number where the prepared layout fixes it (a ``.const`` variable's
    offset, or its generic address in the const window), else the global's
    name or :class:`AddressOf`."""
    offset = op.offset if op.offset is not None else 0
    offset = offset.value if isinstance(offset, ir.Immediate) else offset
    offset = -offset if isinstance(op, ir.Symbol) and op.minus else offset
    v = variables.get(op.name)
    if v is not None and v.space == "const":
        return v.offset + offset + (CONST_WINDOW if isinstance(op, ir.Generic) else 0)
    if v is not None and v.space == "global":
        return op.name if offset == 0 else AddressOf(op.name, offset)
    raise SimError(f"{d.name}: initialiser {''.join(op.tokens())} names {op.name!r}, which is not a "
                   ".global or .const variable declared before it")


def prepare(module: ir.Module, kernel: str | None, target: isa.Target | None) -> Program:
    """Prepare entry ``kernel`` (the only entry when ``None``) of ``module``.

    Raises:
        SimError: no such entry, or a construct the emulator does not run.
    """
    func = _entry(module, kernel)
    if target is None:
        sm = next((t for t in module.target if t.startswith("sm_")), "sm_90a")
        target = isa.parse_target(sm if sm[-1].isalnum() else "sm_90a")
    b = _Builder()
    for item in module.items:
        if isinstance(item, ir.VarDecl):
            b.declare(item)
    params = []
    for p in func.params:
        b.declare(p)
        params.append(b.variables[p.name])
    b.lay_out(func, "")
    functions: dict[str, Callee] = {}
    for f in module.functions:
        if f.kind == "func" and f.body is not None:
            start = len(b.code)
            b.lay_out(f, f"{f.name}::")
            functions[f.name] = Callee(f.name, start,
                                       tuple(f"{f.name}::{p.name}" for p in f.params),
                                       tuple(f"{f.name}::{p.name}" for p in f.returns or []))
    resolved = [_resolve(ins, b.registers) for ins in b.code]
    reqntid = next((tuple(int(x) for x in d.values) for d in func.directives if d.name == "reqntid"), None)
    # Each thread's local window starts at thread * local_size: a multiple
    # of 16 keeps every thread's `.local .align 8` data (and .b128) aligned
    # (68 bytes put thread 1's depot at byte 68, and its 8-byte stores
    # landed 4 bytes early, over its neighbours).
    local_size = -(-b.layouts["local"].size // 16) * 16
    return Program(func.name, b.code, resolved, b.labels, b.registers, params, b.variables,
                   b.layouts["shared"].size, local_size, b.layouts["const"].size,
                   b.layouts["param"].size, b.extern_shared, reqntid, b.global_vars, functions,
                   b.function_of, b.thread_params, b.branch_tables(), target, b.opaque)


def _entry(module: ir.Module, kernel: str | None) -> ir.Function:
    """The entry to prepare."""
    entries = [f for f in module.functions if f.kind == "entry" and f.body is not None]
    if kernel is None:
        if len(entries) != 1:
            names = ", ".join(f.name for f in entries) or "none"
            raise SimError(f"the module has {len(entries)} kernels ({names}); pass kernel=<name>")
        return entries[0]
    matches = [f for f in entries if f.name == kernel]
    if not matches:
        names = ", ".join(f.name for f in entries) or "none"
        raise SimError(f"no kernel {kernel!r} in the module; kernels: {names}")
    return matches[0]


class _Builder:
    """What :func:`prepare` accumulates: variables laid out by space, the
    registers, the flat code with its labels, and branch tables."""

    def __init__(self) -> None:
        self.layouts = {s: _Layout() for s in ("shared", "local", "const", "param", "global")}
        self.variables: dict[str, Variable] = {}
        self.extern_shared: str | None = None
        self.global_vars: list[Variable] = []
        self.opaque: dict[str, str] = {}
        self.registers: dict[str, PtxType] = {}
        self.vectors: dict[str, int] = {}
        self.code: list[ir.Instruction] = []
        self.labels: dict[str, int] = {}
        self.function_of: list[str] = []
        self.thread_params: set[str] = set()
        self.tables: dict[str, tuple[str, ...]] = {}     # .branchtargets, by scoped label name

    def declare(self, d: ir.VarDecl) -> None:
        """Lay out a module-level (or block-level) variable or an entry param."""
        space = "shared" if d.space.startswith("shared") else d.space
        if space not in self.layouts:
            return
        if d.type in OPAQUE_TYPES and d.space == "global":
            self.opaque[d.name] = d.type     # refused where an instruction names it (precheck)
            return
        if space == "shared" and "extern" in d.linkage:
            self.extern_shared = d.name
            self.variables[d.name] = Variable(d.name, space, -1, 0, d.type)
            return
        v = Variable(d.name, space, self.layouts[space].place(d), _size(d), d.type, _init_values(d, self.variables))
        self.variables[d.name] = v
        if space == "global":
            self.global_vars.append(v)

    def thread_param(self, d: ir.VarDecl, name: str) -> None:
        """A ``.param`` inside a function (call arguments, a ``.func``'s own
        params): per-thread storage, kept in the local space."""
        self.variables[name] = Variable(name, "local", self.layouts["local"].place(d), _size(d), d.type)
        self.thread_params.add(name)

    def register(self, name: str, t: PtxType, vector: int | None) -> None:
        """A register (or a vector register, one per component)."""
        if vector:
            self.vectors[name] = vector
            for c in "xyzw"[:vector]:
                self.registers[f"{name}.{c}"] = t
        else:
            self.registers[name] = t

    def lay_out(self, f: ir.Function, prefix: str) -> None:
        """Append function ``f``'s code (its names prefixed ``prefix``)."""
        root = _Scope(None, "0", prefix)
        if prefix:
            for p in [*f.params, *(f.returns or [])]:
                if p.space == "reg":
                    self.register(root.declare(p.name, self.registers), TYPES[p.type], p.vector)
                else:
                    self.thread_param(p, root.declare(p.name, self.variables))
        used = _used_registers(f.body or [])
        last_label = None       # the label just before this statement, if any
        for s, scope in _scoped(f.body or [], root):
            label_before, last_label = last_label, None
            if isinstance(s, ir.RegDecl):
                self._registers(s, scope, used)
            elif isinstance(s, ir.VarDecl):
                if s.space == "param":
                    self.thread_param(s, scope.declare(s.name, self.variables))
                elif prefix or scope.outer is not None:
                    self.declare(dataclasses.replace(s, name=scope.declare(s.name, self.variables)))
                else:
                    self.declare(s)
            elif isinstance(s, ir.Label):
                self.labels[scope.lookup(s.name)] = len(self.code)
                last_label = scope.lookup(s.name)
            elif isinstance(s, ir.Directive) and s.name == "branchtargets":
                if label_before is None:
                    raise SimError(".branchtargets must follow the label that names it")
                self.tables[label_before] = tuple(scope.lookup(a) for a in s.args if a != ",")
            elif isinstance(s, ir.Instruction):
                self.code.append(normalize(scope.rename(s), self.registers, self.vectors, keep_offsets=True))
                self.function_of.append(f.name if prefix else "")

    def _registers(self, s: ir.RegDecl, scope: _Scope, used: dict[str, list[int]]) -> None:
        """A ``.reg`` declaration: storage for the names the code uses."""
        t = TYPES.get(s.type)
        if t is None:
            raise SimError(f"registers of type .{s.type} are not supported by the emulator")
        for n in s.names:
            # A range %r<N> declares N names; only those the code uses
            # need storage, so a huge N costs nothing.
            names = [n.name] if n.count is None else [f"{n.name}{i}" for i in used.get(n.name, ()) if i < n.count]
            for name in names:
                self.register(scope.declare(name, self.registers), t, s.vector)

    def branch_tables(self) -> dict[str, tuple[int, ...]]:
        """Each ``.branchtargets`` list as code indices."""
        out = {}
        for name, targets in self.tables.items():
            missing = [t for t in targets if t not in self.labels]
            if missing:
                raise SimError(f".branchtargets {name}: unknown label {missing[0]}")
            out[name] = tuple(self.labels[t] for t in targets)
        return out


def _resolve(ins: ir.Instruction, registers: dict[str, PtxType]) -> isa.Resolved | None:
    kinds = tuple(operand_kind(o, registers.get) for o in ins.operands)
    try:
        return isa.resolve(ins.opcode, ins.modifiers, len(ins.operands), kinds)
    except PtxError:
        return None

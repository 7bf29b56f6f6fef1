"""What each instruction does with taint: its fidelity class (from the ISA
table) and the roles of the registers it names (read, written, maybe written,
inside an address, deciding a branch or barrier), computed once a launch for
every PC (:func:`plan_roles`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ... import ir, isa
from ...isa import EXACT, UNITS
from ..core.scheduled import MACHINE

__all__ = ["CARRY", "Roles", "plan_roles"]

CARRY = "CC.CF"
"""The carry flag's name among the tracked registers (no PTX register has it)."""


@dataclasses.dataclass
class Roles:
    """One PC's classification and register roles (computed once a launch)."""

    cls: str
    clauses: tuple = ()
    guard: str | None = None
    negated: bool = False
    srcs: tuple[str, ...] = ()           # registers whose taint flows to the results
    dests: tuple[str, ...] = ()          # registers written (their taint replaced)
    weak: tuple[str, ...] = ()           # registers maybe written (their taint only grows)
    addresses: tuple[str, ...] = ()      # registers inside [...] operands
    decides: tuple[str, ...] = ()        # registers a branch or barrier depends on
    use: str | None = None               # "branch" or "barrier" for decides and the guard
    collective: bool = False             # results combine the lanes of a warp, warpgroup or CTA
    cta_wide: bool = False               # dests written when a barrier completes, for the CTA
    tmem: bool = False                   # reads and writes tensor memory


def _registers(op: Any, regs: Any, out: list[str]) -> list[str]:
    """The register names ``op`` mentions (vector registers by component)."""
    if type(op) is ir.Register or isinstance(op, ir.Symbol):
        if op.name in regs:
            out.append(op.name)
        elif type(op) is ir.Register:
            out.extend(n for n in (f"{op.name}.{c}" for c in "xyzw") if n in regs)
    elif isinstance(op, (ir.Vector, ir.Parens)):
        for item in op.items:
            _registers(item, regs, out)
    elif isinstance(op, ir.Pair):
        _registers(op.first, regs, out)
        _registers(op.second, regs, out)
    elif isinstance(op, ir.Negated):
        _registers(op.operand, regs, out)
    elif isinstance(op, ir.Address):
        if op.base is not None:
            _registers(op.base, regs, out)
        if op.extra is not None:
            _registers(op.extra, regs, out)
    return out


def plan_roles(program: Any, regs: Any) -> list[Roles]:
    """Per PC, its :class:`Roles`."""
    sites: dict[str, list[str]] = {}            # function -> return registers of every call of it
    for ins, r in zip(program.code, program.resolved):
        if r is not None and r.inst.sim == "call" and isinstance(ins.operands[0], ir.Parens):
            callee = next((o for o in ins.operands if not isinstance(o, ir.Parens)), None)
            if isinstance(callee, ir.Symbol):
                sites.setdefault(callee.name, []).extend(_registers(ins.operands[0], regs, []))
    return [_info(program, pc, ins, r, regs, sites) for pc, (ins, r) in enumerate(zip(program.code,
                                                                                      program.resolved))]


def _info(program: Any, pc: int, ins: ir.Instruction, r: isa.Resolved | None, regs: Any,
          sites: dict[str, list[str]]) -> Roles:
    """What the instruction at ``pc`` does with taint: its class (from the
    table), which registers it reads, writes, addresses with or decides a
    branch or barrier by, and whether it mixes lanes or uses tensor memory."""
    cls, clauses = isa.fidelity_of(r.inst, r.values) if r is not None else (EXACT, ())
    info = Roles(cls, clauses)
    if ins.guard is not None:
        info.guard, info.negated = ins.guard.register.name, ins.guard.negated
    sim = r.inst.sim if r is not None else None
    unit = UNITS.get(sim) if sim is not None else None
    kind = unit.cls if unit is not None else None
    if kind == "control":
        info.use = "branch"
    elif kind == "sync" and unit.wait != "fence":
        info.use = "barrier"
    if sim == "call" or (sim == "ret" and program.function_of[pc]):
        srcs, dests, weak = _call_roles(program, pc, ins, sim, regs, sites)
        addresses: list[str] = []
        decides: list[str] = []
    else:
        srcs, dests, weak, addresses, decides = _operand_roles(ins, r, regs, info.use is not None)
    if info.use == "barrier":
        addresses = []                            # an mbarrier's address reaches a barrier
    # Lanes that exchange values: warp collectives, matrix fragments (ldmatrix,
    # stmatrix, MMAs) and bar.red, whose result is written when the barrier completes.
    info.cta_wide = kind == "sync" and sim in MACHINE and bool(dests)
    info.collective = kind in ("warp", "tensor", "memory.shared") or info.cta_wide
    if r is not None and r.inst.carry:            # the hidden carry flag, as a register
        srcs.append(CARRY)
        weak.append(CARRY)
    info.tmem = kind == "tensor_memory" or (unit is not None and unit.async_reads == "tcgen05")
    if kind == "tensor":
        srcs.extend(dests)                        # accumulators: D is read as well as written
    info.srcs, info.dests, info.weak = _unique(srcs), _unique(dests), _unique(weak)
    info.addresses, info.decides = _unique(addresses), _unique(decides)
    return info


def _operand_roles(ins: ir.Instruction, r: isa.Resolved | None, regs: Any, decides_use: bool) -> tuple:
    """``(sources, destinations, maybe written, in addresses, deciding a
    branch or barrier)`` registers of an instruction, by its table form's
    operands (``out``: destination; a ``pred`` operand of a barrier is data,
    as ``bar.red``'s)."""
    srcs: list[str] = []
    dests: list[str] = []
    weak: list[str] = []
    addresses: list[str] = []
    decides: list[str] = []
    forms = r.operands if r is not None else ()
    for k, op in enumerate(ins.operands):
        form = forms[k] if k < len(forms) else None
        names = _registers(op, regs, [])
        if form is not None and form.out:
            dests.extend(names)
            continue
        if r is None and k == 0:
            weak.extend(names)                    # no table form: maybe written
        srcs.extend(names)
        if isinstance(op, ir.Address):
            addresses.extend(names)
        if decides_use and not isinstance(op, ir.Parens) and not (form is not None and form.kinds == ("pred",)):
            decides.extend(names)
    return srcs, dests, weak, addresses, decides


def _call_roles(program: Any, pc: int, ins: ir.Instruction, sim: str, regs: Any,
                sites: dict[str, list[str]]) -> tuple[list[str], list[str], list[str]]:
    """``(sources, destinations, maybe written)`` of ``call`` (arguments into
    the callee's register parameters) and of a function's ``ret`` (its
    results into the registers of whichever call site each thread came
    from: every site's, never cleared)."""
    srcs: list[str] = []
    dests: list[str] = []
    if sim == "ret":
        f = program.functions[program.function_of[pc]]
        for name in f.returns:
            _registers(ir.Register(name), regs, srcs)
        return srcs, [], list(sites.get(f.name, ()))
    callee = next((o for o in ins.operands if not isinstance(o, ir.Parens)), None)
    lists = [o for o in ins.operands if isinstance(o, ir.Parens)]
    for o in lists[1:] if isinstance(ins.operands[0], ir.Parens) else lists:
        _registers(o, regs, srcs)
    f = program.functions.get(callee.name) if isinstance(callee, ir.Symbol) else None
    for name in f.params if f is not None else ():
        _registers(ir.Register(name), regs, dests)
    return srcs, dests, []


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


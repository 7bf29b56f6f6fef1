"""Loops that cannot reach their exit: a condition that is constant for its type.

``setp.ge.u32 p, r, 0`` is true for every ``r`` (an unsigned value is
always >= 0), and ptxas accepts it. A loop ``L: ...; setp.ge.u32 p, r, 0;
@p bra L;`` can therefore never end, though its state keeps changing (the
hang rule of :mod:`.hangs` finds only loops that change nothing). The
machine asks :func:`endless_loop` about each backward branch the first
time it runs, and stops the launch as soon as a thread takes one that
cannot be left, naming the loop, the constant comparison and why.

The proof, for the loop from the branch's target ``T`` to the backward
branch ``B`` (a contiguous range of the flattened code):

* ``B`` is always taken: its guard is a predicate whose value at ``B`` is
  constant (below);
* no instruction in ``[T, B)`` can leave the range: a ``bra`` whose target
  is outside it, ``brx.idx``, ``call`` (its callee might ``exit``),
  ``ret``, ``exit``, ``trap``, or an instruction the table could not
  resolve, each counts as a way out unless its guard is constant and
  never lets it run;
* at least one guard above is constant: a loop with no condition at all
  (``L: ...; bra.uni L;``) is left to the hang rule and the bounds.

A predicate's value at an instruction ``X`` is constant when an unguarded
integer ``setp`` without a boolean operation (``.and/.or/.xor``) at
``S`` in the loop writes it (or its complement, the second destination of
``p|q``) from a comparison with the smallest or largest value of its type
(unsigned ``>= 0`` and ``< 0``, ``<= max`` and ``> max``; signed ``>= min``
...), no instruction between ``S`` and ``X`` names the predicate or is a
``call``, and no label lies in ``(S, X]`` (so ``X`` is reached only by
running ``S`` and what follows it in order). Every step of the proof is
exact, so a kernel that can finish is never stopped: a thread that takes
such a branch can never exit, and a launch with such a thread never ends
on a GPU either (this ignores ``trap`` elsewhere, which ends it with an
error anyway). Loops that are never entered are never reported.
"""

from __future__ import annotations

import dataclasses

from ... import ir, isa
from .naming import where
from .program import Program
from .progress import instruction_text

__all__ = ["endless_loop"]

_LEAVES = frozenset(["brx_idx", "call", "ret", "exit", "trap"])
_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
_ALWAYS = {"ge": (False, True), "hs": (False, True), "lt": (False, False), "lo": (False, False),
           "le": (True, True), "ls": (True, True), "gt": (True, False), "hi": (True, False)}
"""Comparison → (whether it is constant against the type's largest value rather
than its smallest, and that constant): ``r >= min`` is always true..."""
_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "lo": "hi", "ls": "hs", "hi": "lo", "hs": "ls",
         "eq": "eq", "ne": "ne"}


@dataclasses.dataclass(frozen=True)
class _Constant:
    """A guard constant at some instruction: whether it lets the
    instruction run, and why, in words naming the ``setp``."""

    value: bool
    why: str


def endless_loop(program: Program, branch: int, target: int) -> str | None:
    """Why the loop from ``target`` to the backward ``bra`` at ``branch``
    can never be left, in words naming its instructions and lines; ``None``
    when it may be (or when proving otherwise is beyond this rule).

    Args:
        program: the prepared kernel.
        branch: the PC of a ``bra`` whose target is at or before it.
        target: the PC the branch goes to.
    """
    code, resolved = program.code, program.resolved
    labels = frozenset(program.labels.values())
    reasons = []
    back = code[branch]
    if back.guard is not None:
        c = _guard_constant(program, labels, branch, target)
        if c is None or not c.value:
            return None
        reasons.append(f"{c.why}, so the branch is always taken")
    for pc in range(target, branch):
        if not _may_leave(program, code[pc], resolved[pc], target, branch):
            continue
        c = _guard_constant(program, labels, pc, target) if code[pc].guard is not None else None
        if c is None or c.value:
            return None
        never = "is never taken" if resolved[pc] is not None and resolved[pc].inst.sim == "bra" else "never runs"
        reasons.append(f"{c.why}, so `{instruction_text(code[pc])}`{where(code[pc])} {never}")
    if not reasons:
        return None
    return "; ".join(reasons) + "; nothing else in the loop branches out of it, calls, returns or exits"


def _may_leave(program: Program, ins: ir.Instruction, r: isa.Resolved | None, first: int, last: int) -> bool:
    """Whether ``ins`` (in the loop ``[first, last]``) may take a thread out of it."""
    sim = r.inst.sim if r is not None else None
    if sim is None or sim in _LEAVES:
        return True
    if sim == "bra":
        op = ins.operands[0] if ins.operands else None
        to = program.labels.get(op.name) if isinstance(op, ir.Symbol) else None
        return to is None or not first <= to <= last
    return False


def _registers(op: object) -> set[str]:
    """Every register name an operand mentions."""
    if isinstance(op, ir.Register):
        return {op.name}
    if isinstance(op, ir.Pair):
        return _registers(op.first) | _registers(op.second)
    if isinstance(op, (ir.Vector, ir.Parens)):
        return set().union(*(_registers(x) for x in op.items))
    if isinstance(op, ir.Negated):
        return _registers(op.operand)
    if isinstance(op, ir.Address):
        return _registers(op.base) | _registers(op.extra)
    return set()


def _guard_constant(program: Program, labels: frozenset[int], at: int, first: int) -> _Constant | None:
    """Whether the guard of the instruction at ``at`` is constant there (the
    instruction runs for every thread, or for none), looking back no
    further than ``first``; ``None`` when that cannot be shown."""
    guard = program.code[at].guard
    if guard is None:
        return None
    name = guard.register.name
    for s in range(at - 1, first - 1, -1):
        if s + 1 in labels:
            return None             # a branch may land after s: the predicate may come from elsewhere
        ins = program.code[s]
        mentions = set().union(*(_registers(op) for op in ins.operands)) if ins.operands else set()
        r = program.resolved[s]
        if r is not None and r.inst.sim == "call":
            return None
        if name not in mentions:
            continue
        c = _setp_constant(ins, r, name)
        if c is None:
            return None
        value, why = c
        taken = value != guard.negated
        sets = f"always sets {name} to" if len(_registers(ins.operands[0])) > 1 else "is always"
        return _Constant(taken, f"`{instruction_text(ins)}`{where(ins)} {sets} {'true' if value else 'false'} "
                                f"({why})")
    return None


def _setp_constant(ins: ir.Instruction, r: isa.Resolved | None, name: str) -> tuple[bool, str] | None:
    """``(value, why)`` when ``ins`` is an unguarded integer ``setp`` whose
    result for predicate ``name`` is the same for every value of its
    register operand; else ``None``."""
    if r is None or r.inst.sim != "setp" or ins.guard is not None or r.values.get("boolop"):
        return None
    kind = r.values.get("type", "")
    cmp = r.values.get("cmp", "")
    if kind[:1] not in ("u", "s") or not kind[1:].isdigit() or cmp not in _SYMBOL or len(ins.operands) < 3:
        return None
    dest, a, b = ins.operands[:3]
    first = dest.first if isinstance(dest, ir.Pair) else dest
    if isinstance(first, ir.Register) and first.name == name:
        complement = False
    elif isinstance(dest, ir.Pair) and isinstance(dest.second, ir.Register) and dest.second.name == name:
        complement = True           # PTX ISA, setp: q = !p when there is no boolean operation
    else:
        return None
    if isinstance(a, ir.Register) and isinstance(b, ir.Immediate):
        reg, imm, op = a, b, cmp
    elif isinstance(b, ir.Register) and isinstance(a, ir.Immediate):
        reg, imm, op = b, a, _SWAP[cmp]     # k op r is r op' k
    else:
        return None
    if op not in _ALWAYS:
        return None
    if not isinstance(imm.value, int) or isinstance(imm.value, bool) or imm.expr is not None:
        return None
    bits = int(kind[1:])
    if not -(1 << (bits - 1)) <= imm.value < (1 << bits):
        return None                 # a literal wider than the type: leave its reading to the emulator
    unsigned = kind[0] == "u" or cmp in ("lo", "ls", "hi", "hs")
    low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    k = imm.value % (1 << bits)
    if not unsigned and k > high:
        k -= 1 << bits
    at_high, value = _ALWAYS[op]
    if k != (high if at_high else low):
        return None
    kind_words = f"{'unsigned' if unsigned else 'signed'} {bits}-bit"
    why = (f"every {kind_words} value of {reg.name} is {_SYMBOL[op]} {k}" if value else
           f"no {kind_words} value of {reg.name} is {_SYMBOL[op]} {k}")
    return (value != complement), why

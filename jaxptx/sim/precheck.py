"""Never silently wrong: what a module must pass before the emulator runs it.

Two checks, each done once per module (or per prepared kernel) and cached:

* :func:`module_problems` — the module against its target, as
  :func:`jaxptx.check` checks it (PTX that ptxas would reject: an ``add.f32``
  on ``.b64`` registers, a modifier the target lacks, an undefined label,
  an integer constant past 64 bits).
* :func:`program_problems` — every instruction of a prepared kernel (its
  entry and the functions it can call) that the emulator cannot run: one
  that matches no form of the instruction table, or whose table ``sim``
  name is refused (:data:`jaxptx.sim.semantics.UNSUPPORTED`) or unknown;
  one that names a ``.texref``/``.samplerref``/``.surfref``; a call of a
  function the module declares without a body other than the builtins
  the emulator runs (:data:`~.core.calls.BUILTINS`), or through a
  register; and initialisers the launch cannot fill in yet.

A :class:`PrecheckError` lists every finding with its PTX line, the line's
text and, for a traced kernel, the user's Python line. A traced module has
no PTX line numbers of its own; they are those of ``emit(module)`` (the text
``Kernel.ptx()`` shows).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator

from .. import ir
from ..check import check
from ..emit import source_map
from ..parse import parse
from .core.calls import BUILTINS
from .core.scheduled import MACHINE, NO_OPS
from .core.program import Program
from .errors import SimError
from .semantics import SEMANTICS, UNSUPPORTED

__all__ = ["Problem", "PrecheckError", "module_problems", "program_problems", "refuse"]

_CACHE_SIZE = 32


@dataclasses.dataclass(frozen=True)
class Problem:
    """One reason a kernel is refused.

    Attributes:
        line: 1-based PTX line (0 for a rule about the whole module).
        message: what is wrong, naming the instruction and operand.
        text: the PTX line itself ("" when ``line`` is 0).
        python: the user's ``(file, line)`` for a traced kernel, else None.
        emulator: True when the PTX is valid but the emulator cannot run it;
            False when ptxas would reject it.
    """

    line: int
    message: str
    text: str = ""
    python: tuple[str, int] | None = None
    emulator: bool = False

    def __str__(self) -> str:
        where = f"PTX line {self.line}" if self.line else "module"
        if self.python is not None:
            where += f" ({os.path.basename(self.python[0])}:{self.python[1]})"
        out = f"{where}: {self.message}"
        return out + (f"\n      {self.text.strip()}" if self.text.strip() else "")


class PrecheckError(SimError):
    """A kernel refused before it runs: PTX that ptxas would reject, or
    instructions the emulator cannot run. ``problems`` lists each."""

    def __init__(self, kernel: str, problems: list[Problem]) -> None:
        invalid = sum(not p.emulator for p in problems)
        parts = []
        if invalid:
            parts.append(f"{invalid} that ptxas would reject")
        if len(problems) - invalid:
            parts.append(f"{len(problems) - invalid} that the emulator cannot run")
        head = f"{kernel}: refused before running: {' and '.join(parts)}"
        super().__init__(head + "".join(f"\n  {p}" for p in problems))
        self.problems = problems


class _Source:
    """PTX line numbers and text of a module's instructions, with the
    user's Python lines for a traced module.

    ``lines[i]`` / ``python[i]`` belong to the i-th instruction of
    ``instructions(module)`` order."""

    def __init__(self, module: ir.Module) -> None:
        own = list(_instructions(module.functions))
        mapped = source_map(module)
        self.lines = [mapped.ptx(i).line for i in own]
        self.python: list[ir.PythonLocation | None] = [ir.python_location(i.loc) for i in own]
        # jaxptx.check reads PTX lines from its instructions' locations: a
        # traced module is checked as the text it emits.
        parsed = all(ir.ptx_line(i.loc) is not None for i in own)
        self.parsed = module if parsed else parse(mapped.text)
        self._python_by_line = {line: py for line, py in zip(self.lines, self.python) if py is not None}
        self._mapped = mapped

    def text(self, line: int) -> str:
        """The PTX text of ``line`` (1-based; "" when unknown)."""
        return self._mapped.line_text(line)

    def problem(self, line: int, message: str, emulator: bool, python: tuple[str, int] | None = None) -> Problem:
        """A :class:`Problem` at ``line`` with its text and Python line."""
        return Problem(line, message, self.text(line), python or self._python_by_line.get(line), emulator)


def _instructions(functions: list[ir.Function]) -> Iterator[ir.Instruction]:
    for f in functions:
        for s in ir.walk(f.body or []):
            if isinstance(s, ir.Instruction):
                yield s


_SOURCES: "collections.OrderedDict[int, tuple[ir.Module, _Source]]" = collections.OrderedDict()
_MODULES: "collections.OrderedDict[tuple[int, str | None], tuple[ir.Module, list[Problem]]]" = \
    collections.OrderedDict()
_PROGRAMS: "collections.OrderedDict[int, tuple[Program, list[Problem]]]" = collections.OrderedDict()


def _cached(cache: collections.OrderedDict, key, keep, compute):
    """``compute()`` once per key; the entry holds ``keep`` so that the
    object whose ``id`` is in the key stays alive (ids are not reused)."""
    hit = cache.get(key)
    if hit is not None and hit[0] is keep:
        cache.move_to_end(key)
        return hit[1]
    value = compute()
    cache[key] = (keep, value)
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


def _source(module: ir.Module) -> _Source:
    return _cached(_SOURCES, id(module), module, lambda: _Source(module))


def module_problems(module: ir.Module, arch: str | None = None) -> list[Problem]:
    """Why ptxas would reject ``module`` for ``arch`` (default: its
    ``.target``), as :func:`jaxptx.check` finds it. Cached per module
    object and arch."""
    def compute() -> list[Problem]:
        source = _source(module)
        found = [source.problem(d.line, d.message, False)
                 for d in check(source.parsed, arch) if d.severity == "error"]
        return sorted(found, key=lambda p: p.line)
    return _cached(_MODULES, (id(module), arch), module, compute)


def program_problems(module: ir.Module, program: Program) -> list[Problem]:
    """The instructions of ``program`` (prepared from ``module``) that the
    emulator cannot run, in the entry and every function it may call, and
    the variables whose initialisers it cannot fill in. Cached per program
    object."""
    def compute() -> list[Problem]:
        source = _source(module)
        lines = _program_lines(module, program, source)
        reachable = _reachable(program)
        found: list[Problem] = []
        for k, (ins, r) in enumerate(zip(program.code, program.resolved)):
            if program.function_of[k] not in reachable:
                continue
            why = _opaque_use(ins, program) or _not_runnable(ins, r) or _not_callable(ins, program)
            if why is not None:
                line, python = lines[k]
                found.append(source.problem(line, why, True, python))
        return found
    return _cached(_PROGRAMS, id(program), program, compute)


def _opaque_use(ins: ir.Instruction, program: Program) -> str | None:
    """An instruction naming a texture, sampler or surface variable (``tex``,
    ``tld4``, ``suld``, ``sust``...): the emulator lays none out."""
    for op in ins.operands:
        for x in ir.leaves(op):
            if isinstance(x, ir.Symbol) and x.name in program.opaque:
                return (f"{ins.name}: uses .{program.opaque[x.name]} {x.name}; the emulator has no "
                        "texture, sampler or surface units")
    return None


def _not_callable(ins: ir.Instruction, program: Program) -> str | None:
    """A ``call`` the emulator would refuse when it runs: of a function the
    module declares without a body (``__assertfail``, ``malloc``, ``free``,
    any ``.extern .func``) other than a builtin, or through a register."""
    if ins.opcode != "call":
        return None
    callee = next((op for op in ins.operands if not isinstance(op, ir.Parens)), None)
    if isinstance(callee, ir.Symbol) and (callee.name in program.functions or callee.name in BUILTINS):
        return None
    runs = (f"the emulator runs direct calls of functions defined in the module and the builtins "
            f"{', '.join(sorted(BUILTINS))}")
    if isinstance(callee, ir.Symbol):
        return f"{ins.name}: calls {callee.name}, which the module declares without a body; {runs}"
    what = "nothing" if callee is None else " ".join(callee.tokens())
    return f"{ins.name}: calls through {what}; {runs}"


def _not_runnable(ins: ir.Instruction, r) -> str | None:
    if r is None:
        return f"{ins.name}: no form of the instruction table matches it, so the emulator cannot run it"
    sim = r.inst.sim
    if sim in UNSUPPORTED:
        return f"{ins.name}: {UNSUPPORTED[sim]}"
    if sim is None or not (sim in SEMANTICS or sim in MACHINE or sim in NO_OPS):
        return f"{ins.name}: the emulator has no semantics for it (table name {sim!r})"
    return None


def _program_lines(module: ir.Module, program: Program,
                   source: _Source) -> list[tuple[int, tuple[str, int] | None]]:
    """``(PTX line, Python line)`` of each instruction of ``program.code``:
    the entry's instructions, then each ``.func`` in module order (the
    order :func:`~.core.prepare.prepare` lays them out)."""
    index = {}
    k = 0
    for f in module.functions:
        if f.body is not None:
            index[f.name] = k
        k += sum(1 for s in ir.walk(f.body or []) if isinstance(s, ir.Instruction))
    order = [program.name] + [f.name for f in module.functions if f.kind == "func" and f.body is not None]
    out = []
    for name in order:
        f = next(f for f in module.functions if f.name == name and (f.body is not None))
        start = index[name]
        count = sum(1 for s in ir.walk(f.body or []) if isinstance(s, ir.Instruction))
        out.extend(zip(source.lines[start:start + count], source.python[start:start + count]))
    if len(out) != len(program.code):
        return [(i.loc[1] if i.loc and len(i.loc) == 3 else 0, None) for i in program.code]
    return out


def _reachable(program: Program) -> set[str]:
    """Function names (``""`` for the entry) the entry may run: direct
    callees, transitively; every function when a call is indirect."""
    seen = {""}
    todo = [""]
    while todo:
        current = todo.pop()
        for ins, owner in zip(program.code, program.function_of):
            if owner != current or ins.opcode != "call":
                continue
            if any(isinstance(op, ir.Register) for op in ins.operands):
                return {""} | set(program.functions)        # an indirect call: any function
            targets = [op for op in ins.operands if isinstance(op, ir.Symbol) and op.name in program.functions]
            for t in targets:
                if t.name not in seen:
                    seen.add(t.name)
                    todo.append(t.name)
    return seen


def refuse(module: ir.Module, program: Program, arch: str | None = None) -> None:
    """Raise :class:`PrecheckError` listing every problem of ``module``
    (for ``arch``) and of its prepared kernel ``program``; cached, so a
    kernel launched again costs two dictionary look-ups.

    Raises:
        PrecheckError: at least one problem.
    """
    problems = module_problems(module, arch) + program_problems(module, program)
    if problems:
        raise PrecheckError(program.name, problems)

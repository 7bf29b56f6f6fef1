"""One report for every fault, wherever a kernel runs.

``sim.launch``, ``sim.Device.launch``, ``jax.jit``'s CPU path and
``jaxptx.profile`` all raise a fault (:class:`~.errors.SimFault`) with one
message::

    kernel off_by_one: ld.global.f32: global access of 4 bytes at offset 0x100
    of parameter 'x' is out of bounds (its buffer has 256 bytes; CTA 2, thread 0)
    [PTX line 25: ld.global.f32 %f1, [%rd7];], at example.py:9 in the kernel

The access, the buffer (the pointer parameter or global variable it belongs
to) and the CTA and thread come from the memory (:mod:`.memory.spaces`);
this module adds the kernel, the PTX line with its text and the Python line.
A module parsed from PTX text knows its PTX lines; a traced module knows its
Python lines, and its PTX lines are those of its text (``emit``, which is
what ``kernel.ptx()`` shows). Both are found by the instruction's position
in its function, which the emulator keeps (:class:`~.core.program.Program`
lays each function's instructions out in order).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from .. import ir
from ..emit import source_map
from .core.program import Program
from .errors import SimFault

__all__ = ["Fault", "located", "python_line"]

# What an error raised inside a step may end with already: `` [PTX line N]``
# (parsed PTX) or `` [file:line]`` (a traced kernel); the fault says both.
_SUFFIX = re.compile(r" \[(?:PTX line \d+|[^\[\]]+:\d+)\]$")


@dataclasses.dataclass(frozen=True)
class Fault:
    """What went wrong and where.

    Attributes:
        kernel: the kernel's name.
        what: the instruction's failure, naming the access, the buffer and
            the CTA and thread.
        ptx_line: the 1-based line of the instruction in the kernel's PTX
            text (None when it cannot be found).
        ptx_text: that line's text.
        python: ``(file, line)`` of the kernel's Python line that emitted
            the instruction, for a traced kernel.
    """

    kernel: str
    what: str
    ptx_line: int | None = None
    ptx_text: str = ""
    python: tuple[str, int] | None = None

    def __str__(self) -> str:
        text = f"kernel {self.kernel}: {self.what}"
        if self.ptx_line is not None:
            text += f" [PTX line {self.ptx_line}: {self.ptx_text}]"
        if self.python is not None:
            text += f", at {self.python[0]}:{self.python[1]} in the kernel"
        return text


def located(e: SimFault, module: ir.Module | None, program: Program, pc: int | None) -> SimFault:
    """The fault ``e``, raised while instruction ``pc`` of ``program`` (from
    ``module``) ran, as a :class:`SimFault` whose message and ``fault`` name
    the kernel, the PTX line and the Python line."""
    what = _SUFFIX.sub("", str(e))
    what = what.removeprefix(f"{program.name}: ")        # trap names the kernel itself
    ptx_line, ptx_text, python = None, "", None
    if module is not None and pc is not None and 0 <= pc < len(program.code):
        ptx_line, ptx_text, python = _lines(module, program, pc)
    fault = Fault(program.name, what, ptx_line, ptx_text, python)
    return SimFault(str(fault), fault)


def _lines(module: ir.Module, program: Program, pc: int) -> tuple[int | None, str, tuple[str, int] | None]:
    """``(PTX line, its text, Python line)`` of instruction ``pc``."""
    callee = program.function_of[pc] if pc < len(program.function_of) else ""
    name = callee or program.name
    index = pc - (program.functions[callee].start if callee else 0)
    found = _instructions(module, name)
    if not 0 <= index < len(found):
        return None, "", None
    mapped = source_map(module)
    ins = found[index]
    line = mapped.ptx(ins).line
    return line, mapped.line_text(line).strip(), ir.python_location(ins.loc)


def _instructions(module: ir.Module, name: str) -> list[ir.Instruction]:
    """The instructions of function ``name`` in order (nested blocks flattened)."""
    for f in module.functions:
        if f.name == name and f.body is not None:
            return [s for s in ir.walk(f.body) if isinstance(s, ir.Instruction)]
    return []


def python_line(traced: ir.Module, ptx_line: int, short: bool = False) -> tuple[str, int] | None:
    """The Python ``(file, line)`` of the traced instruction at ``ptx_line``
    of the text ``emit(traced)`` writes, or None.

    Args:
        traced: the module as the DSL traced it (each instruction's ``loc``
            is its Python line).
        ptx_line: a line of its text.
        short: give the file's name only, not its path.
    """
    where = source_map(traced).python(ptx_line)
    if where is None:
        return None
    return (Path(where.file).name if short else where.file, where.line)

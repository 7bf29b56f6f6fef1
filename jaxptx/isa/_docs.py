"""Per-instruction documentation generated from the table."""

from __future__ import annotations

from ._names import to_python
from ._table import BY_OPCODE

__all__ = ["describe"]

_ISA_URL = "https://docs.nvidia.com/cuda/parallel-thread-execution/"


def describe(opcode: str) -> str:
    """Every form of ``opcode``: PTX syntax, operands, minimum target, the DSL
    spelling and the ISA section.

    Raises:
        KeyError: no such opcode in the table.
    """
    forms = BY_OPCODE.get(opcode)
    if forms is None:
        raise KeyError(f"no instruction {opcode!r} in the table")
    dsl = "ptx." + ".".join(to_python(p) for p in opcode.split("."))
    lines = [f"{opcode} — {forms[0].summary or forms[0].section}", f"  DSL: {dsl}.<modifiers>(operands)", ""]
    for inst in forms:
        req = inst.requires
        target = req.describe() if (req.only or req.sm) else "any target"
        lines.append(f"  {inst.form}")
        if inst.summary:
            lines.append(f"      {inst.summary}")
        lines.append(f"      needs {target}, PTX ISA {req.ptx[0]}.{req.ptx[1]}+"
                     + (f"; {inst.section}" if inst.section else ""))
        for f in inst.fidelity:           # where the emulator is not bit-exact
            kind = "approximate" if f.kind == "approx" else "reading"
            when = "".join(f" (.{'/.'.join(values)})" for _, values in f.when)
            said = "; ".join(str(b) for b in f.bounds) or f.note
            lines.append(f"      emulator: {kind}{when}: {said}")
    lines.append(f"\n  PTX ISA: {_ISA_URL}")
    return "\n".join(lines)

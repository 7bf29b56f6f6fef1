"""Helpers shared by the per-family table tests."""

from __future__ import annotations

from jaxptx import isa


def resolve_name(name: str, n_operands: int | None = None) -> isa.Resolved:
    """Resolve a dotted instruction name as the DSL does (longest opcode)."""
    split = isa.split_name(tuple(name.split(".")))
    assert split is not None, name
    return isa.resolve(*split, n_operands)


def operands(r: isa.Resolved) -> dict[str, isa.Operand]:
    """The present operands by name."""
    return {o.name: o for o in isa.active_operands(r)}


def operand_type(r: isa.Resolved, name: str) -> str | None:
    """The expected type name of operand ``name``."""
    t = isa.expected_type(operands(r)[name], r.values)
    return t.name if t else None


def operand_count(r: isa.Resolved, name: str) -> int | None:
    """The vector length of operand ``name``."""
    return isa.vector_count(operands(r)[name], r.values)


def operand_types(r: isa.Resolved) -> list[str | None]:
    """The expected type name of each present operand, in order."""
    return [t.name if t is not None else None for t in r.types]


def check_target(r: isa.Resolved, arch: str, version: tuple[int, int]) -> None:
    """What the validator does with a resolved form's target requirements."""
    r.check_target(r.inst.opcode, isa.parse_target(arch), version)

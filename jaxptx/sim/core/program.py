"""A kernel prepared for execution: its instructions in one flat list with
label targets resolved, its registers, and the layout of its shared, local,
const, global and param variables (:mod:`.prepare` builds it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ... import ir, isa
from ...check import OPAQUE_FIELDS
from ...types import PtxType

__all__ = ["AddressOf", "Callee", "OPAQUE_TYPES", "Program", "Variable"]

# Handles to the texture, sampler and surface units (PTX ISA "Texture
# Sampler and Surface Types"): no bytes the emulator could lay out.
OPAQUE_TYPES = frozenset(OPAQUE_FIELDS)


@dataclasses.dataclass(frozen=True)
class Variable:
    """A state-space variable: its space, byte offset in that space and size."""

    name: str
    space: str
    offset: int
    size: int
    type: str
    init: tuple = ()


@dataclasses.dataclass(frozen=True)
class AddressOf:
    """An initialiser item only a launch can fill in: the address of
    ``.global`` variable ``name`` plus ``offset`` bytes (``g+4``,
    ``generic(g)+4``; a global's address is its generic address)."""

    name: str
    offset: int


@dataclasses.dataclass
class Program:
    """Everything the machine needs to run one entry function.

    Attributes:
        name: the entry's name.
        code: the instructions in execution order.
        resolved: the table form of each instruction (``None`` for the few
            the machine handles itself without the table).
        labels: label name → index in ``code``.
        registers: register name → declared type (vector registers expand to
            ``name.x`` ... components).
        params: the entry's ``.param`` variables in order, laid out in the
            param space.
        variables: every named variable by name (shared, local, const,
            global, param).
        shared_size, local_size, const_size, param_size: bytes of each space.
        extern_shared: name of the ``.extern .shared`` array, if any (it
            starts after the static shared variables).
        reqntid: the ``.reqntid`` directive's dims, if any.
        branch_tables: ``label: .branchtargets L0, L1, ...`` lists (for
            ``brx.idx``) by their scoped label name, as code indices.
        target: the target the program was prepared for (launch limits
            are checked against it).
        opaque: the module's ``.texref``/``.samplerref``/``.surfref``
            variables, name → type: not laid out (the emulator has no
            texture, sampler or surface units); the precheck refuses an
            instruction that names one.
        derived: what launches derive from the program alone (the
            register file's dtypes, the scheduler's per-PC table, checked
            launch shapes), kept here so that the next launch of the same
            prepared program finds them (:meth:`derive`). A prepared program
            is never changed, so nothing in it goes stale.
    """

    name: str
    code: list[ir.Instruction]
    resolved: list[isa.Resolved | None]
    labels: dict[str, int]
    registers: dict[str, PtxType]
    params: list[Variable]
    variables: dict[str, Variable]
    shared_size: int
    local_size: int
    const_size: int
    param_size: int
    extern_shared: str | None
    reqntid: tuple[int, ...] | None
    global_vars: list[Variable]
    functions: dict[str, "Callee"] = dataclasses.field(default_factory=dict)
    function_of: list[str] = dataclasses.field(default_factory=list)
    thread_params: set[str] = dataclasses.field(default_factory=set)
    branch_tables: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    target: isa.Target | None = None
    opaque: dict[str, str] = dataclasses.field(default_factory=dict)
    derived: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def derive(self, key: Any, make: Callable[[], Any]) -> Any:
        """The value cached under ``key`` in :attr:`derived`, made by
        ``make()`` on first use. ``key`` must name everything besides the
        program that the value depends on."""
        try:
            return self.derived[key]
        except KeyError:
            value = self.derived[key] = make()
            return value


@dataclasses.dataclass(frozen=True)
class Callee:
    """A ``.func`` laid into the code: its first instruction and the names of
    its parameters and return values (registers or per-thread variables)."""

    name: str
    start: int
    params: tuple[str, ...]
    returns: tuple[str, ...]

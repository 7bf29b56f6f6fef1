"""The ``ptx`` namespace: one call, one PTX instruction.

Every instruction of the ISA table is reachable as a dotted chain, spelled
by the naming rule of :mod:`jaxptx.isa._names`::

    ptx.add.f32(d, a, b)                      # add.f32 d, a, b;
    x = ptx.add.f32(a, b)                     # destination allocated, returned
    ptx.ld.global_.v4.f32((x0, x1, x2, x3), ptr)
    ptx.cp.async_.bulk.tensor._2d.shared__cluster.global_.tile \\
        .mbarrier__complete_tx__bytes(dst, ptx.addr(tmap, coords=(x, y)), bar)
    ptx.bra(label, pred=~done)                # @!p bra label;
    ptx.inst.mov.u32(d, a)                    # the same chain under ``inst``

A PtxType as the first argument is taken as the type modifier
(``ptx.add(f32, d, a, b)``). Every call takes ``pred=`` for a guard.
Beyond instructions: ``special`` registers, structured control flow
(``if_``, ``else_``, ``range_``, ``while_``, ``break_``, ``continue_``),
``label``/``new_label``, ``addr``, ``comment``, ``param``, ``global_ptrs``,
``batch_ptrs``, ``printf`` (device printf, as nvcc writes it), and for a
kernel with ``peers``, ``rank`` and ``world_size`` (its device's index on
the call's mesh axis, and the axis size).
"""

from __future__ import annotations

from typing import Any

from .. import isa
from ..errors import PtxModifierError, TraceError
from ._control import break_, continue_, else_, if_, label, loop, new_label, range_, while_
from ._core import Reg, emit_instruction
from ._trace import current, user_location, with_location
from ._special import special
from ._module import (args, block, decl, declare, directive, function, imm, negate, pair, section,
                      sym, unparsed)
from ._params import batch_ptrs, comment, global_ptrs, param
from ._peers import rank, world_size
from ._printf import printf
from ._values import SINK, Addr, NegPred
from .smem import SmemArray

__all__ = ["inst", "special", "if_", "else_", "range_", "while_", "break_", "continue_",
           "label", "new_label", "addr", "comment", "param", "global_ptrs", "batch_ptrs", "printf",
           "rank", "world_size",
           "SINK", "Instr",
           "function", "section", "block", "decl", "declare", "directive", "unparsed",
           "imm", "sym", "args", "pair", "negate", "loop"]

_FIRST_PARTS = frozenset(op.split(".")[0] for op in isa.BY_OPCODE)


class Instr:
    """A dotted instruction name being spelled; calling it emits the instruction.

    The longest prefix that is a table opcode is the opcode; the rest are
    modifiers. Errors (unknown opcode or modifier) are raised at the call,
    pointing at the user's line.
    """

    # Each child spelled is kept in the instance dict, where the next
    # `ptx.add.f32` finds it without calling __getattr__ (which Python calls
    # only after a failed lookup, at the cost of an AttributeError).
    __slots__ = ("_parts", "_split", "__dict__")

    def __init__(self, parts: tuple[str, ...]) -> None:
        self._parts = parts
        self._split: tuple[str, tuple[str, ...]] | None = None    # the table's split, once found

    def __getattr__(self, name: str) -> "Instr":
        if name.startswith("__"):
            raise AttributeError(name)
        child = self.__dict__[name] = Instr(self._parts + (isa.to_ptx(name),))
        return child

    def __call__(self, *args: Any, pred: Reg | NegPred | None = None) -> Any:
        split = self._split
        if split is None:
            split = isa.split_name(self._parts)
            if split is not None:
                self._split = split
            elif not current().validate:    # an instruction the table lacks, unchecked
                split = (self._parts[0], self._parts[1:])
            else:
                err = PtxModifierError(f"{'.'.join(self._parts)}: no instruction of that name")
                raise with_location(err, user_location())
        return emit_instruction(split[0], split[1], args, pred)

    def __repr__(self) -> str:
        return f"ptx.{'.'.join(self._parts)}"

    @property
    def doc(self) -> str:
        """Documentation of the instruction, generated from the table."""
        split = isa.split_name(self._parts)
        if split is None:
            return f"no instruction named {'.'.join(self._parts)}"
        return isa.describe(split[0])

    @property
    def forms(self) -> list[str]:
        """The table forms this name can reach (for help and error messages)."""
        split = isa.split_name(self._parts)
        if split is None:
            return []
        return [i.form for i in isa.BY_OPCODE[split[0]]]


class _Inst:
    """``ptx.inst.<opcode>.<modifier>...`` — the generic spelling."""

    def __getattr__(self, name: str) -> Instr:
        # Kept in the instance dict: later lookups do not come here.
        if name.startswith("__"):
            raise AttributeError(name)
        root = self.__dict__[name] = Instr((isa.to_ptx(name),))
        return root


inst = _Inst()


def addr(base: Any, offset: Any = None, *, coords: tuple[Any, ...] = (), minus: bool = False) -> Addr:
    """A memory operand ``[base+offset]`` (or ``[base, {coords}]`` for TMA).

    ``base`` is a register, a symbol name, a shared-memory array or a tensor
    argument; ``offset`` is a byte offset (``0`` is written, ``None`` is not;
    ``ptx.imm("0x10")`` keeps a spelling); ``minus`` writes ``[base-offset]``.

    Raises:
        TraceError: a constant offset outside a shared-memory array ``base``.
    """
    if minus:
        return Addr(base, offset, coords, minus=True)
    if isinstance(base, SmemArray) and isinstance(offset, int) and not 0 <= offset < base.nbytes:
        raise with_location(TraceError(f"ptx.addr: offset {offset} is outside shared array {base.symbol} "
                                       f"({base.nbytes} bytes)"), user_location())
    symbol = getattr(base, "__ptx_symbol__", None)
    if symbol is not None:
        base = symbol()
        if isinstance(base, Addr):
            total = (base.offset or 0) + (offset or 0)
            return Addr(base.base, total if (base.offset is not None or offset is not None) else None, coords)
    return Addr(base, offset, coords)


def __getattr__(name: str) -> Instr:
    part = isa.to_ptx(name)
    if part in _FIRST_PARTS:
        return getattr(inst, name)
    raise AttributeError(f"module 'jaxptx.ptx' has no attribute {name!r} (and no "
                         f"instruction starts with {part!r})")

"""What an instruction's semantics function sees: :class:`Step`.

A semantics function (``def add(s: Step) -> None``) runs one instruction for
all the threads executing it at once. It reads operands as numpy arrays of
the instruction's types (``s.src(1)``), computes, and writes the results
(``s.dst(0, value)``); memory goes through ``s.load``/``s.store``. It never
touches the machine's registers or memory layout directly.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ir, isa
from ...types import TYPES, PtxType
from ..memory.spaces import CONST_WINDOW, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW
from ..errors import SimError
from ..numerics.values import bits_dtype, constant, from_bits, to_bits, value_dtype

if TYPE_CHECKING:
    from ..core.view import MachineView

__all__ = ["Step", "Plan", "SPACES", "plans"]

# State-space modifiers of memory instructions → the memory module's spaces.
SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared",
          "shared::cluster": "shared", "local": "local", "param": "param", "const": "const"}
_B32 = TYPES["b32"]
_WINDOWS = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "const": CONST_WINDOW, "param": PARAM_WINDOW}


class Step:
    """One instruction executing on the threads ``threads``.

    Attributes:
        ins: the instruction; ``r`` its resolved table form (``values``: the
            chosen modifier per slot).
        threads: global indices of the executing threads; ``n`` how many.
        m: the machine (for the few semantics that need more, like warps).
    """

    __slots__ = ("m", "ins", "r", "threads", "n", "values", "types", "plan")

    def __init__(self, m: "MachineView", ins: ir.Instruction, r: isa.Resolved | None, threads: np.ndarray,
                 plan: "Plan | None" = None) -> None:
        self.m = m
        self.ins = ins
        self.r = r
        self.threads = threads
        self.n = len(threads)
        self.plan = plan
        if plan is not None:
            self.values = plan.values
            self.types = plan.types
        else:
            self.values = r.values if r is not None else {}
            self.types = r.types if r is not None else ()

    # types ---------------------------------------------------------------------
    def type(self, k: int) -> PtxType:
        """The type operand ``k`` has for this instruction (``b32`` if the table
        gives none)."""
        types = self.types
        t = types[k] if k < len(types) else None
        return t if t is not None else _B32

    def mod(self, slot: str, default: str | None = None) -> str | None:
        """The modifier chosen for ``slot``, or ``default``."""
        return self.values.get(slot, default)

    def space(self) -> str:
        """The state space named by the modifiers (``generic`` when none)."""
        for m in self.ins.modifiers:
            if m in SPACES:
                return SPACES[m]
        return "generic"

    # operands -------------------------------------------------------------------
    def src(self, k: int, t: PtxType | None = None) -> np.ndarray:
        """Operand ``k`` as values of ``t`` (default: its type in the form)."""
        plan = self.plan
        if plan is not None and (t is None or t is plan.types[k]):
            how = plan.reads[k]
            if how is not None:
                if type(how) is tuple:          # a register whose bits are a view of the type
                    m = self.m
                    if m.on_register_read is None and self.n == m.nthreads:     # unwatched, every thread
                        reg = m.regs.arrays.get(how[0])
                        if reg is not None:
                            return reg.view(how[1])
                else:                           # an immediate: its read-only broadcast by thread count
                    hit = how.get(self.n)
                    if hit is None:
                        hit = how[self.n] = self.value(self.ins.operands[k], plan.types[k])
                    return hit
            return self.value(self.ins.operands[k], plan.types[k])
        return self.value(self.ins.operands[k], t or self.type(k))

    def value(self, op: ir.Operand, t: PtxType) -> np.ndarray:
        """Any operand as values of ``t`` for the executing threads."""
        if type(op) is ir.Register:
            m = self.m
            reg = m.regs.arrays.get(op.name)
            if reg is not None and m.on_register_read is None and self.n == m.nthreads:    # the usual read
                return from_bits(t, reg)
            return from_bits(t, m.read_register(op.name, self.threads))
        if isinstance(op, ir.Immediate):
            if t.lanes == 1:
                # One value for every thread: a read-only broadcast, which
                # costs numpy no memory traffic.
                key = (op, t.name, self.n)
                hit = _BROADCASTS.get(key)
                if hit is None:
                    if len(_BROADCASTS) >= 4096:
                        _BROADCASTS.clear()
                    hit = _BROADCASTS[key] = np.broadcast_to(_immediate(op, t, 1), (self.n,))
                return hit
            return _immediate(op, t, self.n)
        if isinstance(op, ir.Negated):
            return ~self.value(op.operand, TYPES["pred"])
        if isinstance(op, ir.Vector):
            return np.stack([self.value(x, t) for x in op.items], axis=-1)
        if isinstance(op, ir.Symbol):
            if op.name in self.m.regs:   # `reg+4`: a register plus an offset
                off = op.offset if isinstance(op.offset, int) else int(op.offset.value)
                value = from_bits(t, self.m.read_register(op.name, self.threads))
                return value + value.dtype.type(-off if op.minus else off)
            at = self.symbol_address(op)
            bits = self.rank_bits(op.name)
            if bits is not None:        # a shared variable in a CTA of a cluster
                return from_bits(t, bits + np.uint64(at & 0xFFFF_FFFF_FFFF_FFFF))
            return constant(t, at, self.n)
        if isinstance(op, ir.Pair):
            return self.value(op.first, t)
        raise SimError(f"{self.ins.name}: cannot read operand {op!r}")

    def immediate(self, k: int, t: PtxType | None = None) -> Any:
        """Operand ``k`` as one numpy value of ``t`` if it is an immediate, else ``None``."""
        op = self.ins.operands[k] if k < len(self.ins.operands) else None
        if not isinstance(op, ir.Immediate):
            return None
        return _immediate(op, t or self.type(k), 1)[0]

    def pred(self, k: int) -> np.ndarray:
        """Operand ``k`` as a predicate (``!p`` negated, immediates allowed)."""
        return self.value(self.ins.operands[k], TYPES["pred"]).astype(bool)

    def dst(self, k: int, value: Any, t: PtxType | None = None) -> None:
        """Write ``value`` (values of ``t``) to destination operand ``k``."""
        plan = self.plan
        if plan is not None and (t is None or t is plan.types[k]):
            how = plan.writes[k]
            # The usual write: values of the register's own width and dtype,
            # one per thread of a launch with every thread here and nobody
            # listening; their bits are a view (to_bits), the register takes them.
            if how is not None and type(value) is np.ndarray and value.dtype == how[1] \
                    and value.shape == (self.n,) and value.flags.c_contiguous:
                m = self.m
                if m.on_register_write is None and self.n == m.nthreads:
                    m.regs.replace(how[0], value.view(how[2]))
                    return
            self.write(self.ins.operands[k], value, plan.types[k])
            return
        self.write(self.ins.operands[k], value, t or self.type(k))

    def write(self, op: ir.Operand, value: Any, t: PtxType) -> None:
        """Write values of ``t`` to a register, vector, pair (first) or sink."""
        if type(op) is ir.Register:
            m = self.m
            width = m.register_width(op.name)
            if not (type(value) is np.ndarray and value.shape == (self.n,)):
                value = np.broadcast_to(np.asarray(value), (self.n,) + ((t.lanes,) if t.lanes > 1 and
                                                                        np.ndim(value) == 2 else ()))
            if m.on_register_write is None and self.n == m.nthreads:        # the usual write
                m.regs.replace(op.name, to_bits(t, value, width))
            else:
                m.write_register(op.name, self.threads, to_bits(t, value, width))
            return
        if isinstance(op, ir.Sink):
            return
        if isinstance(op, ir.Vector):
            value = np.asarray(value)
            for i, item in enumerate(op.items):
                self.write(item, value[..., i], t)
            return
        if isinstance(op, ir.Pair):
            self.write(op.first, value, t)
            return
        raise SimError(f"{self.ins.name}: cannot write to operand {op!r}")

    def dst_pred_of_pair(self, k: int, value: np.ndarray) -> None:
        """Write the predicate half of a ``d|p`` destination, if present."""
        op = self.ins.operands[k]
        if isinstance(op, ir.Pair):
            self.write(op.second, value, TYPES["pred"])

    # addresses and memory ----------------------------------------------------------
    def symbol_address(self, sym: ir.Symbol) -> int:
        """The address of a named variable in its own state space (a global
        variable's global address), plus the symbol's offset."""
        v = self.m.program.variables.get(sym.name)
        if v is None:
            if sym.name in self.m.program.labels:
                return self.m.program.labels[sym.name]
            raise SimError(f"{self.ins.name}: unknown name {sym.name}")
        base = self.m.variable_address(v)
        off = sym.offset if isinstance(sym.offset, int) else (sym.offset.value if sym.offset else 0)
        return base + (-off if sym.minus else off)

    def address(self, k: int) -> tuple[str, np.ndarray]:
        """``(space, addresses)`` of memory operand ``k``: the instruction's
        space, with a variable's address taken in that space."""
        space, base, off = self.address_parts(k)
        if off:
            # uint64 arithmetic wraps, so adding the two's complement subtracts.
            return space, base + np.uint64(off & 0xFFFF_FFFF_FFFF_FFFF)
        return space, base

    def address_parts(self, k: int) -> tuple[str, np.ndarray, int]:
        """``(space, base, offset)`` of memory operand ``k``: its addresses
        are ``base + offset`` (uint64, wrapping; :meth:`address` adds
        them). A register base is the register itself, read-only, so that
        the memory can fold the offset into its own index arithmetic
        (:meth:`..memory.spaces.Memory.gather`) instead of a fresh array of
        addresses; a variable's base already holds the offset (0)."""
        op = self.ins.operands[k]
        if not isinstance(op, ir.Address):
            op = ir.Address(op) if isinstance(op, (ir.Register, ir.Symbol)) else op
        if not isinstance(op, ir.Address):
            raise SimError(f"{self.ins.name}: operand {k} is not an address")
        space = self.space()
        if isinstance(op.base, ir.Symbol) and op.base.name in self.m.program.thread_params:
            space = "local"       # a function's .param variables live per thread
        off = 0
        if op.offset is not None:
            val = op.offset if isinstance(op.offset, int) else int(op.offset.value)
            off = -val if op.minus else val
        if isinstance(op.base, ir.Register):
            base = self.m.read_register(op.base.name, self.threads).astype(np.uint64, copy=False)
            if base.flags.writeable:        # the register itself: hand out a read-only view
                base = base.view()
                base.flags.writeable = False
            return space, base, off
        at = self.variable_in(op.base.name, space) if isinstance(op.base, ir.Symbol) else 0
        bits = self.rank_bits(op.base.name) if isinstance(op.base, ir.Symbol) else None
        if bits is not None:            # a shared variable in a CTA of a cluster
            return space, bits + np.uint64((at + off) & 0xFFFF_FFFF_FFFF_FFFF), 0
        # One address for every thread: a read-only broadcast, kept for the
        # next step or launch that names it.
        key = ("address", (at + off) & 0xFFFF_FFFF_FFFF_FFFF, self.n)
        hit = _BROADCASTS.get(key)
        if hit is None:
            if len(_BROADCASTS) >= 4096:
                _BROADCASTS.clear()
            hit = _BROADCASTS[key] = np.broadcast_to(np.uint64(key[1]), (self.n,))
        return space, hit, 0

    def rank_bits(self, name: str) -> np.ndarray | None:
        """What the address of variable ``name`` adds for each executing
        thread: a shared variable's address in a CTA of a cluster carries the
        CTA's cluster rank from bit 24 up, as its shared::cluster address
        does (PTX ISA, "Shared State Space": the shared::cta window lies in
        the shared::cluster window; :mod:`jaxptx.sim.memory.spaces`).
        ``None`` for other variables and outside clusters."""
        memory = self.m.memory
        if memory.cta_ranks is None:
            return None
        v = self.m.program.variables.get(name)
        return memory.rank_bits(self.threads) if v is not None and v.space == "shared" else None

    def variable_in(self, name: str, space: str) -> int:
        """A variable's address as seen from ``space`` (generic: its window)."""
        v = self.m.program.variables.get(name)
        if v is None:
            raise SimError(f"{self.ins.name}: unknown name {name}")
        addr = self.m.variable_address(v)
        if space == "generic" and v.space in _WINDOWS:
            return _WINDOWS[v.space] + addr
        return addr

    def load(self, space: str, addr: np.ndarray, t: PtxType) -> np.ndarray:
        """Values of ``t`` at ``addr`` in ``space``."""
        width = max(1, t.bits // 8)
        bits = self.m.memory.load(space, addr, self.threads, width, self.ins.name)
        return from_bits(t, bits)

    def store(self, space: str, addr: np.ndarray, values: np.ndarray, t: PtxType) -> None:
        """Store values of ``t`` at ``addr`` in ``space``."""
        width = max(1, t.bits // 8)
        self.m.memory.store(space, addr, self.threads, to_bits(t, values, width * 8), width, self.ins.name)

    # thread geometry ------------------------------------------------------------------
    @property
    def lanes(self) -> np.ndarray:
        """Lane index (0..31) of each executing thread."""
        return (self.threads % self.m.ntid) % 32

    @property
    def warps(self) -> np.ndarray:
        """Global warp index of each executing thread."""
        return (self.threads // self.m.ntid) * self.m.warps_per_cta + (self.threads % self.m.ntid) // 32


class Plan:
    """What a :class:`Step` of one instruction of a program can know before
    it runs, worked out once per program (:func:`plans`): the slot values,
    each operand's type, and how its usual read and write go.

    Attributes:
        values: the chosen modifier per slot (``Resolved.values``).
        types: each operand's type, ``b32`` where the table gives none (as
            :meth:`Step.type` reads it).
        reads: per operand: ``(register, dtype)`` when reading it as its
            type is a view of the register's bits as ``dtype``; a dict
            (thread count → read-only broadcast) for a one-lane immediate;
            else ``None`` (:meth:`Step.value` reads it).
        writes: per operand: ``(register, value dtype, bits dtype)`` when
            values of its type and the register's width are written as a
            view of their bits; else ``None`` (:meth:`Step.write` writes it).
    """

    __slots__ = ("values", "types", "reads", "writes")

    def __init__(self, ins: ir.Instruction, r: isa.Resolved | None, registers: Mapping[str, PtxType]) -> None:
        self.values = r.values if r is not None else {}
        given = r.types if r is not None else ()
        n = max(len(ins.operands), len(given))
        self.types = tuple(t if t is not None else _B32 for t in given) + (_B32,) * (n - len(given))
        self.reads = tuple(_read_plan(op, t, registers) for op, t in zip(ins.operands, self.types))
        self.writes = tuple(_write_plan(op, t, registers) for op, t in zip(ins.operands, self.types))


def _register_plan(op: ir.Operand, t: PtxType, registers: Mapping[str, PtxType]) -> tuple | None:
    """``(name, value dtype, storage dtype)`` of a declared register read or
    written as a one-lane type of its storage width (a view either way),
    else ``None``."""
    if type(op) is not ir.Register:
        return None
    declared = registers.get(op.name)
    if declared is None or t.lanes != 1 or t.kind == "pred":
        return None
    storage = bits_dtype(declared)
    if storage.kind != "u" or storage.itemsize * 8 != t.bits:
        return None
    return op.name, value_dtype(t), storage


def _read_plan(op: ir.Operand, t: PtxType, registers: Mapping[str, PtxType]) -> tuple | dict | None:
    plan = _register_plan(op, t, registers)
    if plan is not None:
        return plan[:2]                         # from_bits's usual read: a view
    if isinstance(op, ir.Immediate) and t.lanes == 1:
        return {}
    return None


def _write_plan(op: ir.Operand, t: PtxType, registers: Mapping[str, PtxType]) -> tuple | None:
    return _register_plan(op, t, registers)     # to_bits's usual write: a view


def plans(program: Any) -> list[Plan]:
    """The :class:`Plan` of every instruction of a prepared program, kept on
    the program (:meth:`~.program.Program.derive`)."""
    return program.derive("step plans", lambda: [Plan(ins, r, program.registers)
                                                 for ins, r in zip(program.code, program.resolved)])


# (immediate, type name, thread count) or ("address", address, thread count) -> its
# read-only broadcast
_BROADCASTS: dict[tuple, np.ndarray] = {}


def _immediate(op: ir.Immediate, t: PtxType, n: int) -> np.ndarray:
    """An immediate as ``n`` values of ``t``."""
    if op.form in ("f32", "f64") and t.kind != "f":
        # 0f3F800000 where bits are expected: the literal's bit pattern.
        fmt = ("<f", "<I") if op.form == "f32" else ("<d", "<Q")
        return constant(t, struct.unpack(fmt[1], struct.pack(fmt[0], op.value))[0], n)
    return constant(t, op.value, n)

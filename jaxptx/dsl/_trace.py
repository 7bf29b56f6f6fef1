"""Per-trace state: statements, registers, labels, shared memory, params.

All naming comes from the :class:`Trace` of the kernel being traced, so two
traces of one kernel give the same text. The active trace lives in a
``ContextVar`` for the duration of one ``Kernel`` trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import ir, isa
from ..errors import PtxError, TraceError
from ..types import TYPES, PtxType
from ..validate import check_instruction, normalize
from ._tma import TmaDescriptor

__all__ = ["Trace", "OpenConstruct", "current", "is_tracing", "active", "user_location",
           "with_location", "REGISTER_FORMS_MAX"]

_ACTIVE: contextvars.ContextVar["Trace | None"] = contextvars.ContextVar("jaxptx_trace", default=None)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Declared register class of each logical type: (prefix, declared type).
_REG_CLASS = {
    "pred": ("%p", "pred"), "f32": ("%f", "f32"), "f64": ("%fd", "f64"),
    16: ("%rs", "b16"), 32: ("%r", "b32"), 64: ("%rd", "b64"), 128: ("%rq", "b128"),
}
_CLASS_ORDER = ("%p", "%rs", "%r", "%rd", "%rq", "%f", "%fd")


# contextlib runs the generators of `with ptx.if_(...)` constructs: its
# frames stand between ours and the user's `with` line.
PASSED_THROUGH = (contextlib.__file__,)


def user_location() -> ir.PythonLocation | None:
    """The innermost stack frame outside the jaxptx package and contextlib
    (file, line)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        user = _USER_FILE.get(path)
        if user is None:
            user = _USER_FILE[path] = not path.startswith(PACKAGE_DIR) and path not in PASSED_THROUGH
        if user:
            line = frame.f_lineno
            loc = _LOCATIONS.get((path, line))
            if loc is None:
                loc = ir.PythonLocation(path, line)
                if len(_LOCATIONS) < _LOCATIONS_MAX:
                    _LOCATIONS[path, line] = loc
            return loc
        frame = frame.f_back
    return None


# user_location runs once per instruction: whether each source file is the
# user's, and each (file, line) location (immutable, so shared by every
# instruction traced from that line), are kept.
_USER_FILE: dict[str, bool] = {}
_LOCATIONS: dict[tuple[str, int], ir.PythonLocation] = {}
_LOCATIONS_MAX = 1 << 16


def with_location(err: PtxError, loc: tuple[str, int] | None) -> PtxError:
    """The same error class with ``, at file:line`` appended."""
    if loc is None:
        return err
    return type(err)(f"{err}, at {os.path.basename(loc[0])}:{loc[1]}")


def current() -> "Trace":
    """The active trace.

    Raises:
        TraceError: called outside a ``@kernel`` body.
    """
    t = _ACTIVE.get()
    if t is None:
        raise TraceError("no kernel is being traced: ptx/reg/smem calls only work "
                         "inside a @kernel function while .ptx()/.module() traces it")
    return t


def is_tracing() -> bool:
    """Whether a kernel is being traced (so :func:`current` has a trace)."""
    return _ACTIVE.get() is not None


@contextmanager
def active(trace: "Trace") -> Iterator["Trace"]:
    """Make ``trace`` the active trace inside the ``with`` block."""
    token = _ACTIVE.set(trace)
    try:
        yield trace
    finally:
        _ACTIVE.reset(token)


class Trace:
    """The state of one kernel trace.

    Attributes:
        name: kernel name.
        target: compile target.
        version: PTX version.
        body: the statement list being appended to (nested blocks swap it).
        params: entry parameters in order.
        shared: module-level shared-memory declarations.
        declarations: other module-level items the body asked for (the
            ``vprintf`` prototype and format strings of ``ptx.printf``),
            emitted before the shared memory and the entry.
        extern_smem: name of the dynamic shared-memory symbol, or ``None``.
        smem_offset: bytes of dynamic shared memory carved so far.
        tma: the TMA descriptors the body asked for, in parameter order.
        verdicts: the table's verdicts on instructions of plain registers,
            by signature, shared by every trace for this target and version
            (``None`` when not validating).
        register_forms: the same for the DSL's all-register calls (see
            :mod:`jaxptx.dsl._core`).
        operands: register name → its :class:`jaxptx.ir.Register`, made on
            first use (operands are immutable: every instruction of the trace
            shares one per register).
    """

    def __init__(self, name: str, target: isa.Target, version: tuple[int, int],
                 extern_smem: str | None = None, validate: bool = True,
                 module_mode: bool = False) -> None:
        self.name = name
        self.target = target
        self.version = version
        self.validate = validate
        self.items: list[ir.Item] = []
        self.function: ir.Function | None = None
        self.module_mode = module_mode
        # Outside a function of a module kernel, statements are module items.
        self.body: list[ir.Statement] = self.items if module_mode else []
        self.params: list[ir.VarDecl] = []
        self.tma: list[TmaDescriptor] = []
        self.shared: list[ir.VarDecl] = []
        self.declarations: list[ir.Item] = []
        self.extern_smem = extern_smem
        self.smem_offset = 0
        self.reg_types: dict[str, PtxType] = {}
        self.vectors: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._named: list[ir.RegDecl] = []
        self._symbols: set[str] = set()
        self._labels = 0
        self.cache: dict[Any, Any] = {}
        self.last_if: tuple[int, str] | None = None
        self.loops: list[tuple[str, str]] = []
        # Values built on first use (a tensor's address, a raw param...) go
        # to `entry`, emitted at the top of the function body: the one place
        # that dominates every use, whatever control flow the first use is in.
        self.entry: list[ir.Statement] = []
        self.lazy: dict[Any, Any] = {}
        # What owns the registers allocated now: the trace, or in a module
        # kernel the function being built (registers are per function).
        self.scope: Any = self
        self.open: list[OpenConstruct] = []
        # What this target and PTX version learnt in earlier traces (see
        # _VALIDATED, _REGISTER_FORMS); None when instructions are not validated.
        self.verdicts = _known(_VALIDATED, target, version) if validate else None
        self.register_forms = _known(_REGISTER_FORMS, target, version) if validate else None
        self.operands: dict[str, ir.Register] = {}

    # lazily materialised values ----------------------------------------------
    def materialise(self, key: Any, build: Callable[[], Any]) -> Any:
        """The value cached under ``key``; on first use, ``build()`` emits it
        at the start of the function body (so it dominates every use).

        ``build`` runs with the entry block as the current block and may
        materialise other values (they come first).
        """
        value = self.lazy.get(key)
        if value is None:
            self.require_function()
            saved, saved_if = self.body, self.last_if
            self.body = self.entry
            try:
                value = build()
            finally:
                self.body, self.last_if = saved, saved_if
            self.lazy[key] = value
        return value

    # control-flow constructs -----------------------------------------------------
    def begin(self, what: str, loc: tuple[str, int] | None) -> "OpenConstruct":
        """Record a construct (``ptx.if_``, ``ptx.range_``...) made at ``loc``
        that must be finished before the trace ends."""
        c = OpenConstruct(what, loc)
        self.open.append(c)
        return c

    def end(self, construct: "OpenConstruct") -> None:
        """The construct finished normally."""
        if construct in self.open:
            self.open.remove(construct)

    def check_closed(self) -> None:
        """Raise for the first construct begun and never finished.

        Raises:
            TraceError: naming the construct and the user's line that made it.
        """
        if self.open:
            c = self.open[0]
            raise with_location(TraceError(f"kernel {self.name}: {c.problem()}"), c.loc)

    # registers -----------------------------------------------------------
    def new_register(self, ptype: PtxType, name: str | None = None, count: int | None = None) -> list[str]:
        """Allocate one register (or ``count`` of a named array); returns names."""
        prefix, declared = _register_class(ptype)
        if name is None:
            if prefix in self._symbols:
                raise TraceError(f"registers {prefix}<N> were declared with reg.declare in kernel "
                                 f"{self.name}; give new .{ptype.name} registers a name=")
            n = count or 1
            first = self._counters.get(prefix, 0) + 1
            self._counters[prefix] = first + n - 1
            names = [f"{prefix}{i}" for i in range(first, first + n)]
        else:
            base = "%" + name
            self._claim(base, name)
            self._named.append(ir.RegDecl(declared, (ir.RegName(base, count),)))
            names = [base] if count is None else [f"{base}{i}" for i in range(count)]
        for reg_name in names:
            self.reg_types[reg_name] = ptype
        return names

    def _claim(self, symbol: str, shown: str) -> None:
        if not shown.replace("$", "_").isidentifier():
            raise TraceError(f"register name {shown!r}: expected an identifier")
        if symbol in self._symbols or symbol.rstrip("0123456789") in _CLASS_ORDER:
            raise TraceError(f"register name {shown!r} is already used in kernel {self.name}")
        self._symbols.add(symbol)

    def type_of(self, reg_name: str) -> PtxType | None:
        """Logical type of a register (or special register) by name."""
        t = self.reg_types.get(reg_name) or self.reg_types.get(reg_name.rsplit(".", 1)[0])
        if t is not None:
            return t
        if reg_name.startswith("%"):
            base = reg_name[1:].split(".")[0]
            special = isa.SPECIAL_REGS.get(base)
            if special is not None:
                return TYPES[special.type]
        return None

    def register_decls(self) -> list[ir.RegDecl]:
        """``.reg`` lines for every register allocated, in a fixed order."""
        out = []
        for prefix in _CLASS_ORDER:
            n = self._counters.get(prefix)
            if n:
                declared = next(d for p, d in _REG_CLASS.values() if p == prefix)
                out.append(ir.RegDecl(declared, (ir.RegName(prefix, n + 1),)))
        return out + self._named

    # labels and symbols --------------------------------------------------
    def new_label(self, hint: str = "L") -> str:
        """A fresh label name, numbered per trace (``$L_if_3``)."""
        self._labels += 1
        return f"$L_{hint}_{self._labels}"

    def new_symbol(self, name: str) -> str:
        """Claim a module-level symbol name (shared array, param)."""
        if name in self._symbols:
            raise TraceError(f"name {name!r} is already used in kernel {self.name}")
        self._symbols.add(name)
        return name

    def fresh_symbol(self, hint: str) -> str:
        """A new symbol name derived from ``hint`` (``smem_0``, ``smem_1``...)."""
        i = 0
        while f"{hint}_{i}" in self._symbols:
            i += 1
        return self.new_symbol(f"{hint}_{i}")

    # statements ----------------------------------------------------------
    def declare_in_module(self, item: ir.Item) -> None:
        """Add a module-level item: in a ``module=True`` kernel before the
        function being built, else to :attr:`declarations`."""
        if self.module_mode:
            at = next((k for k, x in enumerate(self.items) if x is self.function), len(self.items))
            self.items.insert(at, item)
        else:
            self.declarations.append(item)

    def append(self, stmt: ir.Statement) -> None:
        """Append a statement to the current block."""
        self.body.append(stmt)
        self.last_if = None

    def reset_registers(self) -> None:
        """Forget the registers of the function just finished (module mode)."""
        self.reg_types.clear()
        self.vectors.clear()
        self._counters.clear()
        self._named.clear()
        self._symbols = {s for s in self._symbols if not s.startswith("%")}

    def declare_registers(self, decl: ir.RegDecl, logical: PtxType) -> list[str]:
        """Append a ``.reg`` line as written and record its registers' type."""
        names = []
        for n in decl.names:
            # PTX lets a nested block declare a name again, so no duplicate check.
            self._symbols.add(n.name)
            names.extend([n.name] if n.count is None else [f"{n.name}{i}" for i in range(n.count)])
        for name in names:
            self.reg_types[name] = logical
            if decl.vector:
                self.vectors[name] = decl.vector
        self.append(decl)
        return names

    def require_function(self) -> None:
        """Raise unless instructions can go here (inside a function)."""
        if self.module_mode and self.function is None:
            raise TraceError("instructions go inside `with ptx.function(...)` in a "
                             "@kernel(module=True) body")

    def emit(self, ins: ir.Instruction) -> isa.Resolved:
        """Validate ``ins`` against the table and append it.

        Raises:
            PtxError: the validation error, with the user's line appended.
        """
        self.require_function()
        verdicts = self.verdicts if self.verdicts is not None else {}
        key = self._signature(ins)
        r = verdicts.get(key) if key is not None else None
        if r is None:
            try:
                checked = normalize(ins, self.reg_types, self.vectors)
                r = check_instruction(checked, target=self.target, version=self.version, type_of=self.type_of)
            except PtxError as e:
                raise with_location(e, ins.loc) from None
            if key is not None and len(verdicts) < _VALIDATED_MAX:
                verdicts[key] = r
        self.append(ins)
        return r

    def _signature(self, ins: ir.Instruction) -> tuple | None:
        """What :func:`check_instruction`'s verdict on ``ins`` depends on
        besides the target and version, when every operand is a plain
        register of this trace: the opcode, modifiers, guard and each
        register's type (register names and vector registers are left to
        the full check: None)."""
        key = [ins.opcode, ins.modifiers, ins.guard is not None]
        reg_types, vectors = self.reg_types, self.vectors
        for op in ins.operands:
            if type(op) is not ir.Register:
                return None
            t = reg_types.get(op.name)
            if t is None or op.name in vectors:
                return None
            key.append(t.name)
        return tuple(key)

    @contextmanager
    def block(self, body: list[ir.Statement]) -> Iterator[None]:
        """Append to ``body`` instead of the current block inside the ``with``."""
        saved, self.body = self.body, body
        try:
            yield
        finally:
            self.body = saved


# Verdicts of check_instruction by target and PTX version, then by signature
# (Trace._signature): the same opcode, modifiers, guard and register types on
# the same target pass or fail alike, so each signature is checked in full
# once per process.
_VALIDATED: dict[tuple[isa.Target, tuple[int, int]], dict[tuple, isa.Resolved]] = {}
_VALIDATED_MAX = 1 << 16

# The DSL's calls whose arguments are all registers (jaxptx.dsl._core), by
# target and PTX version, then by (opcode, modifiers, unguarded, *register
# types): resolved, converted to plain registers and validated in full once,
# they resolve, convert and validate alike ever after, so later calls go
# straight to the trace. Value: whether the first operand is the destination
# the call returns.
_REGISTER_FORMS: dict[tuple[isa.Target, tuple[int, int]], dict[tuple, bool]] = {}
REGISTER_FORMS_MAX = 1 << 16


def _known(cache: dict[tuple[isa.Target, tuple[int, int]], dict], target: isa.Target,
           version: tuple[int, int]) -> dict:
    """``cache``'s dict for ``target`` and ``version`` (made empty if new)."""
    known = cache.get((target, version))
    if known is None:
        known = cache[target, version] = {}
    return known


class OpenConstruct:
    """A control-flow construct begun and not yet finished.

    Attributes:
        what: how the user wrote it (``"ptx.if_(...)"``).
        loc: the user's line that made it.
        state: ``"made"`` (never entered or iterated), ``"open"`` (entered).
    """

    __slots__ = ("what", "loc", "state", "loop")

    def __init__(self, what: str, loc: tuple[str, int] | None) -> None:
        self.what = what
        self.loc = loc
        self.state = "made"
        self.loop = what.startswith(("ptx.range_", "ptx.while_"))

    def problem(self) -> str:
        """What went wrong, and the fix."""
        if self.state == "made":
            how = "`for ... in`" if self.loop else "`with`"
            return f"{self.what} was never used: write it in a {how} statement"
        if self.loop:
            return (f"the Python loop over {self.what} ended early (a `break`, `return` or "
                    "exception inside it), leaving the runtime loop unfinished; use "
                    "ptx.break_() to leave a runtime loop")
        return f"{self.what} was entered but its block never closed"


def _register_class(ptype: PtxType) -> tuple[str, str]:
    if ptype.kind == "pred":
        return _REG_CLASS["pred"]
    if ptype.name in ("f32", "f64"):
        return _REG_CLASS[ptype.name]
    bits = max(ptype.bits, 16)
    if bits not in _REG_CLASS:
        raise TraceError(f"no register class for .{ptype.name} ({ptype.bits} bits)")
    return _REG_CLASS[bits]

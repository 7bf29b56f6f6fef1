"""Modules on :class:`jaxptx.sim.Device`: loading and checking PTX
(``cuModuleLoadData``), a module's global variables (``cuModuleGetGlobal``)
and a kernel's parameters (``cuFuncGetParamInfo``).

:class:`DeviceModules` is the second layer of ``Device``, on
:class:`~.device_memory.DeviceMemory` (a module's global variables are
allocations of their own). Parsing and checks happen once per module: PTX
text is cached by its text, a prepared kernel by its module's identity
(``_CACHE_SIZE`` of each).
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np

from .. import ir, isa
from ..parse import parse
from ..types import TYPES
from .core.prepare import prepare
from .core.program import AddressOf, Program, Variable
from .device_memory import DeviceMemory
from .errors import SimError
from .memory.spaces import GLOBAL_SHIFT
from .numerics.values import to_bits
from .precheck import PrecheckError, module_problems, program_problems

__all__ = ["DeviceModules", "ParamInfo", "initial_bytes"]

_CACHE_SIZE = 32


class ParamInfo(NamedTuple):
    """One ``.param`` of a kernel: its name, PTX type, byte offset in the
    parameter space and size in bytes (what ``launch`` wants for it)."""

    name: str
    type: str
    offset: int
    size: int


class DeviceModules(DeviceMemory):
    """Device memory plus the modules loaded on it: each module's checked,
    prepared kernels and the addresses of its global variables.

    Args:
        arch: the target every module is checked and run for; ``None``:
            each module's own ``.target``.
    """

    def __init__(self, arch: str | None) -> None:
        super().__init__()
        self.arch = arch
        self._modules: dict[int, tuple[ir.Module, dict[str, int]]] = {}

    def load(self, source: str | ir.Module) -> ir.Module:
        """Parse PTX text (once per text) and check it against the target
        (once per module), as ``cuModuleLoadData`` does.

        Returns:
            The module (pass it, or the same text, to :meth:`launch`).

        Raises:
            ParseError: text that does not parse.
            PrecheckError: PTX that ptxas would reject, each problem with
                its line.
        """
        module = _module(source)
        problems = module_problems(module, self.arch)
        if problems:
            raise PrecheckError(_module_name(module), problems)
        return module

    def _entry(self, source: str | ir.Module, kernel: str | None) -> tuple[ir.Module, Program, dict[str, int]]:
        """The checked module, its prepared kernel and the addresses of the
        global variables it uses (allocated on this device on first use)."""
        self._check_open("launch")
        module = _module(source)
        problems = module_problems(module, self.arch)
        try:
            program = _prepared(module, kernel, self.arch)
        except SimError:
            if problems:
                raise PrecheckError(_module_name(module, kernel), problems) from None
            raise
        problems = problems + program_problems(module, program)
        if problems:
            raise PrecheckError(program.name, problems)
        return module, program, self._globals(module, program)

    def _globals(self, module: ir.Module, program: Program) -> dict[str, int]:
        held = self._modules.get(id(module))
        if held is None or held[0] is not module:
            held = self._modules[id(module)] = (module, {})
        bases = held[1]
        new = [v for v in program.global_vars if v.name not in bases]
        for v in new:
            bases[v.name] = self._allocate(max(v.size, 1), "module")
        for v in new:
            if v.init:
                data = initial_bytes(program, bases, v)
                self._buffers[(bases[v.name] >> GLOBAL_SHIFT) - self._first_slot][:len(data)] = data
        return {v.name: bases[v.name] for v in program.global_vars}

    def global_address(self, source: str | ir.Module, name: str, kernel: str | None = None) -> int:
        """The device address of global variable ``name`` of a module
        (``cuModuleGetGlobal``); the module's globals are allocated (and
        initialised) on first use, and keep their values across launches.

        Raises:
            SimError: no ``.global`` variable ``name`` in the kernel's module.
        """
        _, program, bases = self._entry(source, kernel)
        if name not in bases:
            names = ", ".join(sorted(bases)) or "none"
            raise SimError(f"global_address: {program.name}'s module has no .global variable {name!r} "
                           f"(it has: {names})")
        return bases[name]

    def param_info(self, source: str | ir.Module, kernel: str | None = None) -> list[ParamInfo]:
        """The parameters of ``kernel`` (the only entry when None), in
        order: what :meth:`launch` expects for each (``cuFuncGetParamInfo``)."""
        _, program, _ = self._entry(source, kernel)
        return [ParamInfo(p.name, p.type, p.offset, p.size) for p in program.params]


def initial_bytes(program: Program, bases: dict[str, int], v: Variable) -> np.ndarray:
    """The bytes of ``v``'s initialiser (at most ``v.size``); a variable
    name in it stands for that variable's address (``bases`` for globals).

    Raises:
        SimError: the initialiser names no variable of the module.
    """
    values = [_address(program, bases, x) for x in v.init]
    t = TYPES[v.type]
    bits = to_bits(t, np.asarray(values), max(8, t.bits))
    return np.ascontiguousarray(bits).view(np.uint8)[:v.size]


def _address(program: Program, bases: dict[str, int], name: Any) -> Any:
    """An initialiser item: a number, the address a variable name stands
    for, or a ``.global``'s address plus an offset (:class:`AddressOf`)."""
    if isinstance(name, AddressOf):
        return _address(program, bases, name.name) + name.offset
    if not isinstance(name, str):
        return name
    v = program.variables.get(name)
    if v is None:
        raise SimError(f"initialiser names {name!r}, which is not a variable of the module")
    return bases[name] if v.space == "global" else v.offset


def _module_name(module: ir.Module, kernel: str | None = None) -> str:
    entries = [f.name for f in module.functions if f.kind == "entry" and f.body is not None]
    return kernel or (entries[0] if len(entries) == 1 else "module")


_TEXTS: "collections.OrderedDict[str, ir.Module]" = collections.OrderedDict()
_PREPARED: "collections.OrderedDict[tuple[int, str | None, str | None], tuple[ir.Module, Program]]" = \
    collections.OrderedDict()


def _module(source: Any) -> ir.Module:
    """A module from PTX text (parsed once per text) or a module."""
    if isinstance(source, ir.Module):
        return source
    if not isinstance(source, str):
        raise SimError(f"expected PTX text or a jaxptx.ir.Module, got {type(source).__name__} "
                       "(for a traced kernel pass kernel.module(...))")
    module = _TEXTS.get(source)
    if module is None:
        module = _TEXTS[source] = parse(source)
        if len(_TEXTS) > _CACHE_SIZE:
            _TEXTS.popitem(last=False)
    else:
        _TEXTS.move_to_end(source)
    return module


def _prepared(module: ir.Module, kernel: str | None, arch: str | None) -> Program:
    # Preparing a kernel (flattening, resolving every instruction) costs more
    # than a short run; a kernel launched again reuses it. Keyed by the
    # module's identity, which the entry keeps alive; a few dozen at most.
    key = (id(module), kernel, arch)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is module:
        _PREPARED.move_to_end(key)
        return hit[1]
    program = prepare(module, kernel, isa.parse_target(arch) if arch else None)
    _PREPARED[key] = (module, program)
    if len(_PREPARED) > _CACHE_SIZE:
        _PREPARED.popitem(last=False)
    return program

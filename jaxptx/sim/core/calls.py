"""Direct calls of ``.func`` functions: binding arguments on ``call`` and
results on ``ret``.

Each function is laid into the program's code (``Program.functions``); a
thread's frame is the PC of the ``call`` it came from (``Machine.frames``,
-1 outside). Parameters are registers (``.reg`` parameters) or per-thread
``.param`` variables in local memory, copied value by value (PTX ISA,
"Function declarations and definitions").

A call of a function the module only declares (``.extern .func``, no body)
runs one of the CUDA builtins in :data:`BUILTINS` (``vprintf``:
:mod:`.printf`; ``__assertfail``: a failed device ``assert`` stops the
kernel with its message) and is refused otherwise.
"""

from __future__ import annotations

import numpy as np

from ... import ir
from ...types import TYPES
from ..errors import SimError, SimFault
from .naming import first_thread, where
from .printf import _strings, vprintf
from .step import Step
from ..numerics.values import from_bits

__all__ = ["BUILTINS", "call", "return_"]

_WIDTHS = (1, 2, 4, 8, 16)          # bytes one memory access moves (16: a .b128 record)


def call(s: Step, pc: int) -> int:
    """Bind arguments, remember where to return, and give the callee's start."""
    m = s.m
    rets, callee, args = [], None, []
    for op in s.ins.operands:
        if isinstance(op, ir.Parens):
            (args if callee is not None else rets).append(op)
        elif callee is None:
            callee = op
    if isinstance(callee, ir.Symbol) and callee.name not in m.program.functions \
            and callee.name in BUILTINS:
        BUILTINS[callee.name](s, rets[0].items if rets else (), args[0].items if args else ())
        return pc + 1
    if not isinstance(callee, ir.Symbol) or callee.name not in m.program.functions:
        what = callee.name if isinstance(callee, ir.Symbol) else " ".join(callee.tokens())
        raise SimError(f"{m.program.name}: call of {what}: the emulator runs direct calls of functions "
                       f"defined in the module and the builtins {', '.join(sorted(BUILTINS))}{where(s.ins)}")
    f = m.program.functions[callee.name]
    frames = m.frames.setdefault(f.name, np.full(m.nthreads, -1, dtype=np.int64))
    if (frames[s.threads] >= 0).any():
        raise SimError(f"{m.program.name}: recursive call of {f.name} (not supported)")
    frames[s.threads] = pc
    values = args[0].items if args else ()
    for name, value in zip(f.params, values):
        _copy_in(s, name, value)
    return f.start


def _vprintf(s: Step, rets: tuple[ir.Operand, ...], args: tuple[ir.Operand, ...]) -> None:
    """``vprintf(format, buffer)``: both generic addresses; the result
    (``.b32``) is the number of arguments parsed."""
    if len(args) != 2 or len(rets) > 1:
        raise SimError(f"{s.m.program.name}: vprintf takes (format, buffer) and returns one value, "
                       f"got {len(args)} arguments and {len(rets)} results{where(s.ins)}")
    result = vprintf(s, _read_bits(s, args[0], 8), _read_bits(s, args[1], 8)).view(np.uint32)
    for target in rets:
        if isinstance(target, ir.Register):
            s.m.write_register(target.name, s.threads, result.astype(s.m.regs[target.name].dtype))
        else:
            _write_bits(s, target.name, "var", result, _bytes_of(s, target.name)[1])


def _assertfail(s: Step, rets: tuple[ir.Operand, ...], args: tuple[ir.Operand, ...]) -> None:
    """``__assertfail(message, file, line, function, charSize)``, what a failed
    device ``assert`` (CUDA's, Triton's ``tl.device_assert``) calls: the
    kernel stops with the assertion's text, as a GPU's launch fails after
    printing it."""
    if len(args) != 5:
        raise SimError(f"{s.m.program.name}: __assertfail takes (message, file, line, function, charSize), "
                       f"got {len(args)} arguments{where(s.ins)}")
    thread = s.threads[:1]
    text = [_strings(s.m, _read_bits(s, args[k], 8)[:1].astype(np.uint64), thread)[0].decode(errors="replace")
            for k in (0, 1, 3)]
    line = int(_read_bits(s, args[2], 4)[0])
    raise SimFault(f"{s.m.program.name}: device assertion failed: {text[1]}:{line}: {text[2]}: Assertion "
                   f"`{text[0]}` failed, {first_thread(s.m, s.threads)}{where(s.ins)}")


BUILTINS = {"vprintf": _vprintf, "__assertfail": _assertfail}
"""CUDA device-runtime functions a module may declare ``.extern`` and call:
name → ``fn(step, results, arguments)``."""


def return_(s: Step, function: str) -> None:
    """Copy ``function``'s results to each calling site and set the
    returning threads' PCs after their ``call``."""
    m = s.m
    frames = m.frames[function]
    f = m.program.functions[function]
    sites = frames[s.threads]
    for site in np.unique(sites):
        threads = s.threads[sites == site]
        site_ins = m.program.code[int(site)]
        rets = next((op.items for op in site_ins.operands if isinstance(op, ir.Parens)), ()) \
            if isinstance(site_ins.operands[0], ir.Parens) else ()
        sub = Step(m, site_ins, None, threads)
        for name, target in zip(f.returns, rets):
            _copy_out(sub, name, target)
        m.pc[threads] = int(site) + 1
    frames[s.threads] = -1


def _bytes_of(s: Step, name: str) -> tuple[str, int]:
    v = s.m.program.variables.get(name)
    if v is not None:
        return "var", v.size
    return "reg", s.m.register_width(name) // 8


def _components(s: Step, name: str) -> list[str]:
    return [f"{name}.{c}" for c in "xyzw" if f"{name}.{c}" in s.m.regs]


def _copy_in(s: Step, callee_name: str, arg: ir.Operand) -> None:
    parts = _components(s, callee_name)
    if parts:       # a vector register parameter: element by element
        items = arg.items if isinstance(arg, ir.Vector) else [ir.Register(f"{arg.name}.{c}") for c in "xyzw"]
        for part, item in zip(parts, items):
            _copy_in(s, part, item)
        return
    kind, size = _bytes_of(s, callee_name)
    bits = _read_bits(s, arg, size)
    _write_bits(s, callee_name, kind, bits, size)


def _copy_out(s: Step, callee_name: str, target: ir.Operand) -> None:
    parts = _components(s, callee_name)
    if parts:
        items = target.items if isinstance(target, ir.Vector) else [ir.Register(f"{target.name}.{c}") for c in "xyzw"]
        for part, item in zip(parts, items):
            _copy_out(s, part, item)
        return
    kind, size = _bytes_of(s, callee_name)
    bits = _read_bits(s, ir.Register(callee_name) if kind == "reg" else ir.Symbol(callee_name), size)
    if isinstance(target, ir.Register):
        s.m.write_register(target.name, s.threads, bits.astype(s.m.regs[target.name].dtype))
    else:
        _write_bits(s, target.name, "var", bits, size)


def _read_bits(s: Step, op: ir.Operand, size: int) -> np.ndarray:
    """A parameter's value: ``size`` bytes of a per-thread variable (an
    ``(n, size)`` byte array unless ``size`` is one access width), a
    register's bits, or an immediate."""
    m = s.m
    if isinstance(op, ir.Symbol) and op.name in m.program.variables:
        at = np.full(s.n, m.program.variables[op.name].offset, dtype=np.uint64)
        if size in _WIDTHS:
            return m.memory.load("local", at, s.threads, size, "call")
        return np.stack([m.memory.load("local", at + np.uint64(i), s.threads, 1, "call")
                         for i in range(size)], axis=-1)
    if isinstance(op, ir.Register):
        return m.read_register(op.name, s.threads)
    return s.value(op, TYPES[f"b{size * 8}"])


def _write_bits(s: Step, name: str, kind: str, bits: np.ndarray, size: int) -> None:
    m = s.m
    if kind == "reg":
        m.write_register(name, s.threads, bits.astype(m.regs[name].dtype))
        return
    at = np.full(s.n, m.program.variables[name].offset, dtype=np.uint64)
    if bits.ndim == 2:          # the bytes of a variable that is no access width (an array)
        for i in range(min(size, bits.shape[1])):
            m.memory.store("local", at + np.uint64(i), s.threads, bits[:, i], 1, "call")
        return
    # A register or immediate into a variable: its bits as the variable's
    # width (truncated or zero-extended, as from_bits reads them).
    width = size if size in _WIDTHS else min(size, 8)
    m.memory.store("local", at, s.threads, from_bits(TYPES[f"b{width * 8}"], bits), width, "call")

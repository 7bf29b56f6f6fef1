"""``jaxptx.sim.launch``: run a kernel on the CPU.

numpy arrays passed for pointer parameters are copied into global buffers,
the kernel runs, and the buffers are copied back into the same arrays (so
they are read and written in place). numpy or Python scalars fill scalar
parameters.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from .. import ir
from ..dsl import Kernel
from ..dsl._options import check_dim3
from ..dsl._specs import bind_specs
from ..errors import TraceError
from ..parse import parse
from ..types import TYPES
from .core.host import tune_allocator
from .core.machine import Machine
from .semantics import SEMANTICS
from .memory.spaces import Memory
from .core.program import Program, Variable, prepare
from .errors import SimError
from .memory.tensormap import SIZE as TENSOR_MAP_SIZE
from .memory.tensormap import ArgTensorMap
from .numerics.values import to_bits

__all__ = ["launch"]

_POINTER_TYPES = ("u64", "s64", "b64")


def launch(source: str | ir.Module | Kernel, *args: Any, kernel: str | None = None,
           grid: Any = None, block: Any = None, cluster: Any = (1, 1, 1), smem: int = 0,
           check: bool = False, **template: Any) -> None:
    """Run one kernel on the CPU emulator.

    Args:
        source: PTX text, a parsed module, or a jaxptx ``Kernel`` (then
            ``grid``/``block``/``smem`` default to its specialisation, and
            keyword arguments are its template values).
        *args: one per ``.param``: numpy arrays for pointers (read and
            written in place), numbers for scalars, an :class:`ArgTensorMap`
            (or 128 bytes from ``tensor_map``) for a tensor-map parameter.
        kernel: which ``.entry`` to run when the module has several.
        grid, block, cluster: launch shape (1 to 3 ints each).
        smem: bytes of dynamic shared memory.
        check: run the sanitizer (uninitialised register and shared-memory
            reads, shared-memory races between barriers); its first finding
            raises ``SanitizerError``.

    Raises:
        SimError: a bad launch (wrong argument count or types, block not
            matching ``.reqntid``) before anything runs; a fault while running.
    """
    if isinstance(source, Kernel):
        source, grid, block, smem = _from_kernel(source, args, grid, block, smem, template)
    elif template:
        raise SimError(f"launch: unexpected keyword arguments {sorted(template)}")
    module = parse(source) if isinstance(source, str) else source
    program = _prepared(module, kernel)
    try:
        grid = check_dim3(grid or (1, 1, 1), "launch grid", limit=2**31 - 1)
        block = check_dim3(block or (1, 1, 1), "launch block", limit=1024)
        cluster = check_dim3(cluster, "launch cluster", limit=16)
    except TraceError as e:
        raise SimError(str(e)) from None
    if program.reqntid is not None and tuple(program.reqntid) + (1,) * (3 - len(program.reqntid)) != block:
        raise SimError(f"launch block {block} does not match {program.name}'s .reqntid {program.reqntid}")
    if not isinstance(smem, int) or smem < 0:
        raise SimError(f"launch smem: expected a byte count >= 0, got {smem!r}")
    nctas = grid[0] * grid[1] * grid[2]
    ntid = block[0] * block[1] * block[2]
    shared = -(-program.shared_size // 16) * 16 + smem
    memory = Memory(nctas, ntid, shared, program.local_size, program.param_size, program.const_size)
    bases = _globals(program, memory)
    outputs = _params(program, memory, args)
    tune_allocator()
    machine = Machine(program, grid, block, memory, SEMANTICS, cluster=cluster, dynamic_smem=smem,
                      global_bases=bases, check=check)
    try:
        machine.run()
    finally:
        machine.close()
    for array, index in outputs:
        array.reshape(-1).view(np.uint8)[:] = memory.globals[index][:array.nbytes]


_PREPARED: "collections.OrderedDict[tuple[int, str | None], tuple[ir.Module, Program]]" = \
    collections.OrderedDict()


def _prepared(module: ir.Module, kernel: str | None) -> Program:
    # Preparing a kernel (flattening, resolving every instruction) costs more
    # than a short run; a kernel launched again reuses it. Keyed by the
    # module's identity, which the entry keeps alive; a few dozen at most.
    key = (id(module), kernel)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is module:
        _PREPARED.move_to_end(key)
        return hit[1]
    program = prepare(module, kernel, None)
    _PREPARED[key] = (module, program)
    if len(_PREPARED) > 32:
        _PREPARED.popitem(last=False)
    return program


def _from_kernel(k: Kernel, args: tuple, grid: Any, block: Any, smem: int, template: dict):
    specs = k.in_specs + k.out_specs
    env = {}
    if specs:
        arrays = [(np.shape(a), np.asarray(a).dtype) for a in args[:len(specs)]]
        env = bind_specs(specs, arrays, list(k._tensors))
    spec = k.specialize(**{**env, **template})
    return spec.module, grid or spec.grid, block or spec.block, smem or spec.smem


def _globals(program: Program, memory: Memory) -> dict[str, int]:
    bases = {v.name: memory.add_global(max(v.size, 1)) for v in program.global_vars}

    def address(name: str) -> int:
        v = program.variables.get(name)
        if v is None:
            raise SimError(f"initialiser names {name!r}, which is not a variable of the module")
        return bases[name] if v.space == "global" else v.offset

    for k, v in enumerate(program.global_vars):
        if v.init:
            data = _initial_bytes(v.type, [address(x) if isinstance(x, str) else x for x in v.init], v.size)
            memory.globals[k][:len(data)] = data
    for v in program.variables.values():
        if v.space == "const" and v.init:
            data = _initial_bytes(v.type, [address(x) if isinstance(x, str) else x for x in v.init], v.size)
            memory.const[v.offset:v.offset + len(data)] = data
    return bases


def _initial_bytes(type_name: str, values: list, size: int) -> np.ndarray:
    t = TYPES[type_name]
    bits = to_bits(t, np.asarray(values), max(8, t.bits))
    return np.ascontiguousarray(bits).view(np.uint8)[:size]


def _params(program: Program, memory: Memory, args: tuple) -> list[tuple[np.ndarray, int]]:
    params = program.params
    if len(args) != len(params):
        names = ", ".join(f".{p.type} {p.name}" for p in params) or "none"
        raise SimError(f"{program.name} takes {len(params)} parameters ({names}), got {len(args)} arguments")
    outputs = []
    placed: dict[int, int] = {}  # argument index -> its global buffer's address
    maps: list[tuple[Variable, ArgTensorMap]] = []
    for i, (p, a) in enumerate(zip(params, args)):
        t = TYPES[p.type]
        if isinstance(a, ArgTensorMap):
            if p.size != TENSOR_MAP_SIZE:
                raise SimError(f"{program.name} parameter {p.name} (.{p.type}, {p.size} bytes): a "
                               f"tensor map needs a {TENSOR_MAP_SIZE}-byte parameter")
            maps.append((p, a))
            continue
        if isinstance(a, np.ndarray):
            if p.type not in _POINTER_TYPES and p.size != a.nbytes:
                raise SimError(f"{program.name} parameter {p.name} (.{p.type}): expected a pointer-sized "
                               f"parameter for an array argument, got a {a.dtype} array")
            if p.type in _POINTER_TYPES:
                if not (a.flags.c_contiguous and a.flags.writeable):
                    raise SimError(f"{program.name} parameter {p.name}: the array must be C-contiguous "
                                   "and writeable (it is written in place)")
                base = memory.add_global(a.nbytes)
                memory.globals[-1][:a.nbytes] = a.reshape(-1).view(np.uint8)
                outputs.append((a, len(memory.globals) - 1))
                placed[i] = base
                value = np.array([base], dtype=np.uint64)
            else:
                memory.param[p.offset:p.offset + a.nbytes] = a.reshape(-1).view(np.uint8)
                continue
        elif isinstance(a, (int, float, np.integer, np.floating, bool, np.bool_)):
            value = np.array([a]).astype(np.float64 if t.kind == "f" else np.int64)
            if t.kind == "u" or t.kind == "b":
                value = value.astype(np.uint64)
        else:
            raise SimError(f"{program.name} parameter {p.name} (.{p.type}): expected a numpy array or a "
                           f"number, got {type(a).__name__}")
        width = max(8, t.bits)
        bits = to_bits(t, value.astype(np.dtype(t.np_name) if t.np_name else value.dtype), width)
        memory.param[p.offset:p.offset + width // 8] = bits.view(np.uint8)
    for p, m in maps:
        if m.arg not in placed:
            raise SimError(f"{program.name} parameter {p.name}: its tensor map describes argument "
                           f"{m.arg}, which is not an array passed for a pointer parameter")
        memory.param[p.offset:p.offset + TENSOR_MAP_SIZE] = np.frombuffer(m.encode(placed[m.arg]), np.uint8)
    return outputs

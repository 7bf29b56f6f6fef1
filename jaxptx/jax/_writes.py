"""Which inputs a kernel may store into: the ``may_write_inputs`` attribute.

XLA hands the CUDA handler its input buffers themselves; a kernel that
stores through an input's pointer would change a JAX array in place. The
handler gives such inputs a private copy (unless an in-place output names
them), and this module decides which inputs need one, by a conservative
data-flow pass over the kernel's PTX (flow-insensitive, to a fixed point):

* a register's *origins* are the pointer parameters its value may be derived
  from: ``ld.param`` of a parameter, a parameter's name as an operand, and
  any arithmetic or move of registers with origins;
* an instruction that writes memory (``st``, ``red``, ``atom``, a bulk copy
  or tensor copy to global memory, ``stmatrix``, ``wmma.store``,
  ``multimem.st``/``red``, ``tensormap.replace``...) writes the origins of
  its address; a TMA descriptor parameter stands for the tensor it
  describes;
* a pointer that escapes (stored to memory as a value, passed to a
  ``call``) may be written anywhere later: every input is then marked.

A value loaded from memory has no origin: it can only be an input's address
if that address escaped, which marks every input already.
"""

from __future__ import annotations

import functools

from .. import ir
from . import _registry

__all__ = ["may_write_inputs", "written_inputs", "MASK_BITS"]

MASK_BITS = 63

# Instructions whose address operand (by position) they write.
_WRITES = {"st": 0, "st.async": 0, "st.bulk": 0, "stmatrix": 0, "red": 0, "red.async": 0,
           "atom": 1, "cp.reduce.async.bulk": 0, "cp.reduce.async.bulk.tensor": 0,
           "tensormap.replace": 0, "multimem.st": 0, "multimem.red": 0}
# Copies that write their first operand when its state space (the first
# space modifier) is global.
_COPIES = ("cp.async.bulk", "cp.async.bulk.tensor")
_LOADS = ("ld", "ldu", "atom", "multimem.ld_reduce")


@functools.lru_cache(maxsize=1024)
def may_write_inputs(entry: _registry.Entry) -> int:
    """Bit i set: the kernel of ``entry`` may store into input i."""
    n_in = len(entry.inputs)
    tensors = _param_tensors(entry)
    written = written_inputs(entry.spec.module, entry.entry, tensors)
    if written is None:
        written = set(range(n_in))
    # An int64 attribute holds bits 0..62; the handler copies every input
    # past them.
    return sum(1 << i for i in written if i < min(n_in, MASK_BITS))


def _param_tensors(entry: _registry.Entry) -> dict[str, int]:
    """Entry parameter name -> the tensor (buffer index) it points to or describes."""
    function = next(f for f in entry.spec.module.functions if f.name == entry.entry)
    buffers = len(entry.inputs) + len(entry.outputs)
    out = {p.name: i for i, p in enumerate(function.params[:buffers])}
    out.update({d.param: d.tensor for d in entry.spec.tma})
    return out


def written_inputs(module: ir.Module, entry: str, tensors: dict[str, int]) -> set[int] | None:
    """The tensors (indices of ``tensors``' values) the entry may store into,
    or None when a pointer escapes (any tensor may be written)."""
    code = [s for f in module.functions for s in ir.walk(f.body or [])
            if isinstance(s, ir.Instruction)]
    origins: dict[str, frozenset[int]] = {}
    changed = True
    while changed:
        changed = False
        for ins in code:
            dest, sources = _flow(ins, origins, tensors)
            for name in dest:
                merged = origins.get(name, frozenset()) | sources
                if merged != origins.get(name, frozenset()):
                    origins[name] = merged
                    changed = True
    written: set[int] = set()
    for ins in code:
        target = _write_target(ins)
        if ins.opcode == "call" and any(_origins(op, origins, tensors) for op in ins.operands):
            return None
        if target is None:
            continue
        written |= _origins(ins.operands[target], origins, tensors)
        values = [op for k, op in enumerate(ins.operands) if k != target and not
                  (ins.opcode in _LOADS and k == 0)]
        if any(_origins(op, origins, tensors) for op in values):
            return None  # an address stored as data: it may be written anywhere
    return written


def _write_target(ins: ir.Instruction) -> int | None:
    """The operand position an instruction writes memory through, or None."""
    if ins.opcode in _COPIES:
        spaces = [m for m in ins.modifiers if m.startswith(("global", "shared"))]
        return 0 if spaces and spaces[0] == "global" else None
    if ins.opcode == "wmma" and ins.modifiers[:1] == ("store",):
        return 0
    position = _WRITES.get(ins.opcode)
    return position if position is not None and len(ins.operands) > position else None


def _flow(ins: ir.Instruction, origins: dict[str, frozenset[int]],
          tensors: dict[str, int]) -> tuple[list[str], frozenset[int]]:
    """The registers an instruction defines and the origins they receive."""
    if not ins.operands or _write_target(ins) == 0 or ins.opcode in ("call", "bra", "brx.idx"):
        return [], frozenset()
    dest = _registers(ins.operands[0])
    sources: set[int] = set()
    is_load = ins.opcode in _LOADS or ins.opcode.startswith("ld")
    for op in ins.operands[1:]:
        if isinstance(op, ir.Address):
            if is_load and "param" in ins.modifiers and isinstance(op.base, ir.Symbol):
                sources |= _origins(op.base, origins, tensors)
            elif not is_load:
                sources |= _origins(op, origins, tensors)
        else:
            sources |= _origins(op, origins, tensors)
    return dest, frozenset(sources)


def _registers(op: object) -> list[str]:
    if isinstance(op, ir.Register):
        return [op.name]
    if isinstance(op, (ir.Vector, ir.Parens)):
        return [n for item in op.items for n in _registers(item)]
    if isinstance(op, ir.Pair):
        return _registers(op.first) + _registers(op.second)
    return []


def _origins(op: object, origins: dict[str, frozenset[int]], tensors: dict[str, int]) -> set[int]:
    """The tensors an operand's value may point into."""
    if isinstance(op, ir.Register):
        return set(origins.get(op.name, ()))
    if isinstance(op, ir.Symbol):
        return {tensors[op.name]} if op.name in tensors else set()
    if isinstance(op, ir.Address):
        out = _origins(op.base, origins, tensors) if op.base is not None else set()
        return out | (_origins(op.extra, origins, tensors) if op.extra is not None else set())
    if isinstance(op, (ir.Vector, ir.Parens)):
        return set().union(*(_origins(i, origins, tensors) for i in op.items))
    if isinstance(op, ir.Pair):
        return _origins(op.first, origins, tensors) | _origins(op.second, origins, tensors)
    if isinstance(op, ir.Negated):
        return _origins(op.operand, origins, tensors)
    return set()

"""``ptx_call``: any PTX entry as a JAX primitive (``ptx_call_p``).

One primitive serves every call. Its parameters: ``call`` (a
:class:`PtxCall`: the PTX the custom call carries, its entry, the buffers'
types, the scalar values, the tensor maps, the aliases), ``launch`` (the
:class:`~jaxptx.launch.Launch`) and ``batch`` (0, or the size of a vmap
folded into grid z). Its lowerings are our kernels' custom calls
(``_lowering``): ``jaxptx_launch_v2`` on CUDA (the cubin compiled through
the on-disk cache where the GPUs are in this process), ``jaxptx_cpu_v2``
on the CPU (the emulator), with the same attributes and a kernel id bound
to the content (``_registry``). Outputs that start as zeros (zeroed outputs
and Scratch buffers) get an input of zeros aliased to them in the lowering,
so both platforms zero them the same way and no rule above sees them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.extend as jex
import numpy as np
from jax.interpreters import ad, batching, mlir, xla

from .. import isa
from ..dsl import Specialization
from ..errors import SpecError
from ..launch import Launch
from . import _lowering, _registry, _tma, _writes
from ._primitive import (GRID_Z_LIMIT, _shaped_array, fold_into_grid_z, map_over_batch, unfold_outputs,
                         varying_axes)
from ._ptx_args import TensorMap
from ._ptx_source import Binding, bind, buffer_type, parsed

__all__ = ["ptx_call", "ptx_call_p", "PtxCall"]

BufferType = tuple[tuple[int, ...], np.dtype]


@dataclasses.dataclass(frozen=True)
class PtxCall:
    """What a ``ptx_call_p`` binding launches (hashable, a primitive parameter).

    Attributes:
        binding: how the arguments fill the entry's parameters (the PTX the
            call carries, scalars, tensor maps, zeros, aliases).
        inputs: ``(shape, dtype)`` of each array operand (one launch's).
        outputs: ``(shape, dtype)`` of each output: ``out_shape``'s leaves,
            then the Scratch buffers (one launch's).
        vmap_grid_z: a vmap folds into grid z (see :func:`ptx_call`).
    """

    binding: Binding
    inputs: tuple[BufferType, ...]
    outputs: tuple[BufferType, ...]
    vmap_grid_z: bool

    def __repr__(self) -> str:   # jaxprs print parameters; the PTX would drown them
        return f"<ptx {self.binding.entry}>"

    @property
    def name(self) -> str:
        """The entry's name (what the registry and the CPU handler's messages name)."""
        return self.binding.entry

    @property
    def tensors(self) -> tuple[str, ...]:
        # Read by _cpu for the name of an output in its messages, as for a kernel.
        return self.binding.names


def ptx_call(ptx: str, *args: Any, kernel: str | None = None, out_shape: Any,
             grid: Any, block: Any, cluster: Any = (1, 1, 1), smem: int = 0,
             input_output_aliases: Mapping[int, int] | None = None,
             zeroed_outputs: Sequence[int] = (), vmap_grid_z: bool = False) -> Any:
    """See :func:`jaxptx.jax.ptx_call`."""
    if not isinstance(ptx, str):
        raise SpecError(f"ptx_call: expected the PTX text (a str) first, got {type(ptx).__name__}")
    leaves, tree = jax.tree.flatten(out_shape)
    if not leaves:
        raise SpecError("ptx_call: out_shape has no outputs; give a jax.ShapeDtypeStruct "
                        "(or a pytree of them) per output")
    outs = []
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise SpecError(f"ptx_call: out_shape: expected jax.ShapeDtypeStruct leaves, got "
                            f"{type(leaf).__name__} {leaf!r:.60}")
        outs.append(buffer_type(leaf))
    binding = bind(ptx, kernel, args, outs, input_output_aliases, tuple(zeroed_outputs))
    where = f"ptx_call {binding.entry}"
    launch = Launch(grid, block, cluster, smem, where=where).check_target(
        binding.target, binding.static_smem)
    if vmap_grid_z and launch.grid[2] != 1:
        raise SpecError(f"{where}: vmap_grid_z=True folds a vmap into grid z, but grid is "
                        f"{launch.grid}; launch with grid z = 1")
    operands = [_operand(args[k]) for k in binding.operands]
    scratch = tuple(((n,), np.dtype(np.uint8)) for n in binding.scratch)
    call = PtxCall(binding, tuple(buffer_type(x) for x in operands), (*outs, *scratch),
                   bool(vmap_grid_z))
    results = ptx_call_p.bind(*operands, call=call, launch=launch, batch=0)
    return jax.tree.unflatten(tree, results[:len(outs)])


def _operand(a: Any) -> Any:
    return a.tensor if isinstance(a, TensorMap) else a


def ptx_call_abstract_eval(*avals: Any, call: PtxCall, launch: Launch,
                           batch: int) -> list[jax.core.ShapedArray]:
    """The outputs' avals (with a leading ``batch`` dim when folded); the
    inputs must be the types the call was bound with."""
    lead = (batch,) if batch else ()
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in avals]
    want = [(lead + shape, dtype) for shape, dtype in call.inputs]
    if got != want:
        raise SpecError(f"ptx_call {call.name}: bound with inputs {want}, got {got}")
    vma = frozenset().union(*map(varying_axes, avals))
    return [_shaped_array(lead + shape, dtype, vma) for shape, dtype in call.outputs]


def _entry(call: PtxCall, ctx: Any, launch: Launch, zero_avals: Sequence[Any]) -> _registry.Entry:
    """Register the launch under its content's id."""
    b = call.binding
    module = parsed(b.ptx)
    spec = Specialization(module, b.ptx, isa.parse_target(b.target),
                          module.version or isa.NEWEST_PTX, launch, (), (), b.tma)
    inputs = [_registry.buffer_type(a) for a in (*ctx.avals_in, *zero_avals)]
    outputs = [_registry.buffer_type(a) for a in ctx.avals_out]
    return _registry.add(_registry.Entry(0, call, spec, b.entry, launch, tuple(inputs),
                                         tuple(outputs)))


def _attributes(entry: _registry.Entry, call: PtxCall) -> dict[str, Any]:
    """The custom call's attributes, as ``_lowering`` gives our kernels'."""
    tma = _tma.records(entry.spec.tma, call.name, entry.inputs + entry.outputs)
    return dict(kernel_id=np.int64(entry.kernel_id), ptx=entry.spec.ptx, entry=entry.entry,
                launch=_lowering.launch_attribute(entry.launch),
                scalars=np.array(call.binding.scalars, np.uint64).view(np.int64), tma=tma,
                may_write_inputs=np.int64(_writes.may_write_inputs(entry)),
                allow_unwritten=np.int64(0))


def _lower(target: str, ctx: Any, *args: Any, call: PtxCall, launch: Launch, batch: int) -> Any:
    """The custom call, with zeros for the outputs that start as zeros."""
    zero_avals = [ctx.avals_out[j] for j in call.binding.zeros]
    entry = _entry(call, ctx, launch, zero_avals)
    if target == _lowering.CUDA_TARGET:
        _lowering._register_cubin(call, ctx, entry)
    zeros = [mlir.ir_constant(np.broadcast_to(np.zeros((), a.dtype), a.shape)) for a in zero_avals]
    aliases = {**dict(call.binding.aliases),
               **{len(args) + k: j for k, j in enumerate(call.binding.zeros)}}
    lowering = jax.ffi.ffi_lowering(target, operand_output_aliases=aliases or None)
    ctx = ctx.replace(avals_in=[*ctx.avals_in, *zero_avals])
    return lowering(ctx, *args, *zeros, **_attributes(entry, call))


def ptx_call_lowering_cpu(ctx: Any, *args: Any, **params: Any) -> Any:
    """The emulator's custom call (``jaxptx_cpu_v2``)."""
    return _lower(_lowering.CPU_TARGET, ctx, *args, **params)


def ptx_call_lowering_cuda(ctx: Any, *args: Any, **params: Any) -> Any:
    """The GPU launch's custom call (``jaxptx_launch_v2``)."""
    return _lower(_lowering.CUDA_TARGET, ctx, *args, **params)


def ptx_call_batch(args: Sequence[Any], axes: Sequence[Any], *, call: PtxCall, launch: Launch,
                   batch: int) -> tuple[list[Any], list[int]]:
    """vmap: one launch with the batch as grid z for ``vmap_grid_z=True``
    (:func:`_fold`), unless the call has tensor maps (a map describes one
    tensor) or the batch passes grid z's limit; else a loop of launches."""
    size = next(a.shape[ax] for a, ax in zip(args, axes) if ax is not None)
    if call.vmap_grid_z and not call.binding.tma and (batch or 1) * size <= GRID_Z_LIMIT:
        return _fold(args, axes, size, call=call, launch=launch, batch=batch)
    return map_over_batch(ptx_call_p, args, axes, call=call, launch=launch, batch=batch)


def _fold(args: Sequence[Any], axes: Sequence[Any], size: int, *, call: PtxCall,
          launch: Launch, batch: int) -> tuple[list[Any], list[int]]:
    """One launch over grid z = the batch (:func:`._primitive.fold_into_grid_z`):
    every operand gets the batch as its leading dim (an unbatched one is
    broadcast), as do the outputs; the kernel offsets each pointer by
    ``%ctaid.z`` times one element's bytes."""
    new, _, folded = fold_into_grid_z(args, axes, size, launch, batch)
    outs = ptx_call_p.bind(*new, call=call, launch=folded, batch=folded.grid[2])
    return unfold_outputs(outs, size, batch)


def ptx_call_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, call: PtxCall,
                 **params: Any) -> Any:
    """Differentiation: refused with the fix (PTX has no derivative JAX can take)."""
    raise SpecError(f"ptx_call {call.name} has no derivative: jax.grad, jax.vjp and jax.jvp "
                    f"cannot differentiate PTX; wrap the function that calls it as "
                    f"jaxptx.custom_vjp(forward, backward) with a backward (another ptx_call, "
                    f"say), or pass its inputs through jax.lax.stop_gradient")


ptx_call_p = jex.core.Primitive("ptx_call")
ptx_call_p.multiple_results = True
ptx_call_p.def_impl(functools.partial(xla.apply_primitive, ptx_call_p))
ptx_call_p.def_abstract_eval(ptx_call_abstract_eval)
batching.primitive_batchers[ptx_call_p] = ptx_call_batch
ad.primitive_jvps[ptx_call_p] = ptx_call_jvp
mlir.register_lowering(ptx_call_p, ptx_call_lowering_cpu, platform="cpu")
mlir.register_lowering(ptx_call_p, ptx_call_lowering_cuda, platform="cuda")

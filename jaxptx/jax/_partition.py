"""Sharding under plain ``jax.jit``: a ``shardable`` kernel runs per shard.

A kernel declares the symbolic dims along which its work is independent
(``@kernel(shardable=("B",))``: rows of a norm, problems of a grouped GEMM).
When a call is lowered for more than one device, the launch is wrapped in a
``custom_partitioning`` whose Shardy rule names one factor per dim: the
shardable ones (and a vmapped batch) may stay sharded, every other factor
must be replicated. XLA's partitioner then asks for the per-shard function,
which binds the kernel again on the local shapes: dims, grid and batch come
from the shard, so each device launches over its own slice and nothing is
gathered. Under ``shard_map`` (every axis manual) and on one device the
launch lowers as it is.

The wrapping happens at lowering, after ``vmap`` and ``grad`` have done
their work on the kernel's own primitive (``custom_partitioning`` has no
batching rule of its own).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from .._jax_private import sharding_impls  # the axis contexts have no public API
from ..dsl import Kernel, bind_specs

__all__ = ["needs_partitioning", "partitioned"]

# The factor of a vmapped batch (the leading dim of batched tensors).
BATCH_FACTOR = "zb"


def needs_partitioning(kernel: Kernel, ctx: Any) -> bool:
    """Whether this lowering of ``kernel`` goes through ``custom_partitioning``:
    the kernel is shardable and the module spans devices in auto (not
    manual) mode."""
    if not kernel.shardable:
        return False
    context = ctx.module_context.axis_context
    if isinstance(context, sharding_impls.ShardingContext):
        return context.num_devices > 1
    if isinstance(context, sharding_impls.SPMDAxisContext):
        return set(context.manual_axes) != set(context.mesh.axis_names)
    return False


def factors(kernel: Kernel, batch: int, shared: tuple) -> tuple[list[list[str]], list[str]]:
    """One factor name per dim of each tensor (inputs then outputs), and the
    factors the kernel lets stay sharded."""
    names = {d: f"d{i}" for i, d in enumerate(kernel.dims)}
    constants = (f"c{i}" for i in itertools.count())
    per_tensor = []
    specs = kernel.in_specs + kernel.out_specs
    for i, spec in enumerate(specs):
        dims = [names[d] if isinstance(d, str) else next(constants) for d in spec.shape]
        if batch and not (i < len(kernel.in_specs) and i in shared):
            dims.insert(0, BATCH_FACTOR)
        per_tensor.append(dims)
    free = [names[d] for d in kernel.shardable] + ([BATCH_FACTOR] if batch else [])
    return per_tensor, free


def partitioned(prim: Any, kernel: Kernel, params: dict[str, Any]) -> Any:
    """A ``custom_partitioning`` function that launches ``prim`` with
    ``params`` over the whole arrays, and per shard once partitioned."""
    per_tensor, free = factors(kernel, params["batch"], params["shared"])
    n_in = len(kernel.in_specs)
    everything = dict.fromkeys(f for dims in per_tensor for f in dims)
    rule = (", ".join(" ".join(d) or "()" for d in per_tensor[:n_in]) + " -> "
            + ", ".join(" ".join(d) or "()" for d in per_tensor[n_in:]))

    @custom_partitioning
    def launch(*xs: Any) -> tuple:
        return tuple(prim.bind(*xs, **params))

    def shardings(mesh: Any, arg_shapes: Sequence[Any]) -> tuple[list, list]:
        axes = _factor_axes(per_tensor[:n_in], free, arg_shapes)
        spec = [NamedSharding(mesh, PartitionSpec(*(axes.get(f) for f in dims)))
                for dims in per_tensor]
        return spec[:n_in], spec[n_in:]

    def infer(mesh: Any, arg_shapes: Sequence[Any], result_shape: Any) -> tuple:
        return tuple(shardings(mesh, arg_shapes)[1])

    def partition(mesh: Any, arg_shapes: Sequence[Any], result_shape: Any) -> tuple:
        args, results = shardings(mesh, arg_shapes)
        return mesh, functools.partial(_local_launch, prim, kernel, params), tuple(results), tuple(args)

    launch.def_partition(partition, infer_sharding_from_operands=infer, sharding_rule=rule,
                         need_replication_factors=tuple(f for f in everything if f not in free))
    return launch


def _factor_axes(per_input: list[list[str]], free: list[str],
                 arg_shapes: Sequence[Any]) -> dict[str, Any]:
    """The mesh axes of each shardable factor: as the first input sharded
    along it has them (every other input follows)."""
    axes: dict[str, Any] = {}
    for dims, shape in zip(per_input, arg_shapes):
        spec = getattr(shape.sharding, "spec", None) or ()
        for f, entry in zip(dims, tuple(spec) + (None,) * (len(dims) - len(spec))):
            if f in free and entry is not None and f not in axes:
                axes[f] = entry
    return axes


def _local_launch(prim: Any, kernel: Kernel, params: dict[str, Any], *xs: jax.Array) -> tuple:
    """The launch over one shard: dims, grid and batch from local shapes."""
    batch, shared = params["batch"], params["shared"]
    local_batch = 0
    shapes = []
    for i, x in enumerate(xs):
        shape = tuple(x.shape)
        if batch and i not in shared:
            local_batch, shape = shape[0], shape[1:]
        shapes.append((shape, x.dtype))
    env = bind_specs(kernel.in_specs, shapes, kernel.tensors[:len(kernel.in_specs)])
    template = params["template"]
    sizes = tuple(sorted({**dict(params["sizes"]), **env}.items()))
    launch = kernel.specialize(**dict(template), **dict(sizes)).launch
    if batch:
        launch = launch.with_grid_z(local_batch)
    return tuple(prim.bind(*xs, template=template, sizes=sizes, launch=launch, batch=local_batch,
                           shared=shared, scalars=params["scalars"],
                           **{k: v for k, v in params.items() if k == "axis"}))

"""One JAX primitive per kernel: binding, abstract evaluation, batching.

The primitive of a kernel is created on its first call and kept on the
kernel. Its parameters: ``template`` and ``sizes`` (sorted ``(name, value)``
pairs: the template values and every symbolic dim), ``launch`` (the
:class:`~jaxptx.launch.Launch` of their specialisation: grid, block, cluster,
dynamic shared memory, validated for the target), ``batch`` (0, or the size
of a batch folded into grid z),
``shared`` (indices of the inputs a batched launch shares) and ``scalars``
(the values of the kernel's raw scalar params, in their order) and
``axis`` (``(axis name, axis size)``, for a kernel with peers only: its
call binds its rank on that axis as one more operand). Lowerings
live in ``_lowering``; the rules here are shared by all kernels and take the
kernel as their first argument.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
from .._jax_private import core as jcore  # varying manual axes have no public API yet
from .._jax_private import dispatch as jdispatch
from jax.interpreters import ad, batching, xla

from ..dsl import Kernel, Tile, bind_specs
from ..errors import SpecError
from ..launch import MAX_GRID, Launch
from . import _lowering

__all__ = ["call", "primitive"]


def primitive(kernel: Kernel) -> jex.core.Primitive:
    """The kernel's primitive, created and registered on first use."""
    made = kernel.extensions.get("jax.primitive")
    if made is None:
        made = kernel.extensions["jax.primitive"] = _make_primitive(kernel)
    return made


def call(kernel: Kernel, args: tuple, kwargs: dict) -> Any:
    """``kernel(*args, **kwargs)``: check, bind the primitive, unpack."""
    axis, kwargs = _peer_axis(kernel, kwargs)
    kwargs = _raw_params_from_dims(kernel, args, kwargs)
    scalars, kwargs = _scalar_arguments(kernel, kwargs)
    template, dims = _bind_arguments(kernel, args, kwargs)
    world = {"world_size": axis[1]} if axis else {}
    launch = kernel.specialize(**dict(template), **dict(dims), **world).launch
    rank = (_rank_operand(axis),) if axis else ()
    peers = {"axis": axis} if axis else {}      # other kernels' jaxprs show no axis
    outs = primitive(kernel).bind(*args, *rank, template=template, sizes=dims, launch=launch,
                                  batch=0, shared=(), scalars=scalars, **peers)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _rank_operand(axis: tuple) -> Any:
    """The u32 the handler reads: this device's rank on the axis, plus the
    axis size times its group (its linear index over the mesh's other axes
    of more than one device, ``axis[2]``), so that only the devices of one
    group meet."""
    code = jax.lax.axis_index(axis[0]).astype(jnp.uint32)
    stride = axis[1]
    for other, n in (axis[2] if len(axis) > 2 else ()):
        code = code + jax.lax.axis_index(other).astype(jnp.uint32) * jnp.uint32(stride)
        stride *= n
    return code


def _peer_axis(kernel: Kernel, kwargs: dict) -> tuple[tuple, dict]:
    """``(axis name, axis size)`` of a call of a kernel with peers (its
    ``axis_name=`` keyword, an axis of the enclosing ``jax.shard_map``), with
    a third item ``((other axis, size), ...)`` when the mesh has other axes of
    more than one device; ``()`` for any other kernel; and the other keywords.

    The call binds one more operand than the kernel has inputs: its rank on
    the axis (``lax.axis_index``, a u32 scalar), which the handler passes as
    the hidden ``jaxptx_rank`` parameter."""
    where = f"kernel {kernel.name}"
    rest = dict(kwargs)
    name = rest.pop("axis_name", None)
    if not kernel.peers:
        if name is not None:
            raise SpecError(f"{where}: axis_name={name!r} is for kernels with peers; this one "
                            f"declares none (@kernel(..., peers=('x',)))")
        return (), kwargs
    if not isinstance(name, str):
        raise SpecError(f"{where} has peers {kernel.peers}: call it inside jax.shard_map with "
                        f"the mesh axis its devices share, as {kernel.name}(..., axis_name='d'); "
                        f"got axis_name={name!r}")
    try:
        size = jax.lax.axis_size(name)
    except NameError:
        raise SpecError(f"{where}: axis_name={name!r} is not a mesh axis here (called outside "
                        f"jax.shard_map, or inside one whose mesh has no axis {name!r}); a "
                        f"kernel with peers runs inside jax.shard_map over a mesh with that "
                        f"axis") from None
    mesh = jax.sharding.get_abstract_mesh()
    others = tuple((a, int(n)) for a, n in zip(getattr(mesh, "axis_names", ()), getattr(mesh, "axis_sizes", ()))
                   if a != name and int(n) > 1)
    if others:
        # The devices along the axis form one group per position on the other
        # axes; each group meets on its own (the rank operand carries the group).
        return (name, int(size), others), rest
    return (name, int(size)), rest


def _raw_params_from_dims(kernel: Kernel, args: tuple, kwargs: dict) -> dict:
    """The keywords with each raw param named like a symbolic dim set to the
    size the inputs give that dim (pyptx's convention); a value given for
    it must be that size."""
    named = [name for _, name in kernel.raw_params if name in kernel.dims]
    if not named:
        return kwargs
    raw = {name for _, name in kernel.raw_params}
    _, dims = _bind_arguments(kernel, args, {k: v for k, v in kwargs.items() if k not in raw})
    bound, out = dict(dims), dict(kwargs)
    for name in named:
        if name in out and out[name] != bound[name]:
            raise SpecError(f"kernel {kernel.name}: raw param {name} is named like the dim {name}, "
                            f"which the inputs bind to {bound[name]}; got {name}={out[name]!r} "
                            f"(leave it out: it takes the dim's size)")
        out[name] = bound[name]
    return out


def _scalar_arguments(kernel: Kernel, kwargs: dict) -> tuple[tuple, dict]:
    """Split the values of the raw scalar params (``raw_params``) off the
    keywords: static numbers passed to the launch, not specialising the PTX."""
    where = f"kernel {kernel.name}"
    values, rest = [], dict(kwargs)
    for ptype, name in kernel.raw_params:
        if name not in rest:
            raise SpecError(f"{where}: raw param {name} (.{ptype.name}) has no value; pass {name}=...")
        value = rest.pop(name)
        if isinstance(value, jax.core.Tracer):
            raise SpecError(f"{where}: raw param {name} is traced; raw params are static numbers "
                            f"(jax.jit(..., static_argnames=({name!r},)))")
        values.append(scalar_value(ptype, value, f"{where}: raw param {name}"))
    return tuple(values), rest


def scalar_value(ptype: Any, value: Any, where: str) -> int | float:
    """``value`` as a number of PTX type ``ptype`` (an int that fits an
    integer type, a real number for a float type).

    Raises:
        SpecError: a value of the wrong kind, or out of range.
    """
    if ptype.kind == "f":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise SpecError(f"{where} (.{ptype.name}): expected a real number, got {value!r}")
        return float(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise SpecError(f"{where} (.{ptype.name}): expected an int, got {value!r}")
    bits = ptype.bits
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if ptype.kind == "s" else (0, (1 << bits) - 1)
    if ptype.kind == "b":
        low = -(1 << (bits - 1))
    if not low <= int(value) <= high:
        raise SpecError(f"{where} (.{ptype.name}): {value} is outside {low}..{high}")
    return int(value)


def _bind_arguments(kernel: Kernel, args: tuple, kwargs: dict) -> tuple[tuple, tuple]:
    """Check the inputs against ``in_specs`` and split the keywords into
    template values and dims; every symbolic dim must end up bound."""
    where = f"kernel {kernel.name}"
    if kernel.is_module:
        raise SpecError(f"{where}: a module=True kernel builds a whole PTX module and cannot be "
                        "called on arrays; call a @kernel with in_specs and out_specs")
    if not kernel.out_specs:
        raise SpecError(f"{where}: {_missing_specs(kernel)}")
    names = kernel.tensors[:len(kernel.in_specs)]
    if len(args) != len(names):
        raise SpecError(f"{where}: expected {len(names)} input(s) "
                        f"({', '.join(map(repr, names))}), got {len(args)}")
    types = [_shape_dtype(a, n, where) for a, n in zip(args, names)]
    try:
        env = bind_specs(kernel.in_specs, types, names)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None
    for k, v in kwargs.items():
        if isinstance(v, jax.core.Tracer):
            raise SpecError(f"{where}: template value {k} is traced; template values are static: "
                            f"mark it static (jax.jit(..., static_argnames=({k!r},))) "
                            "or bind it with functools.partial")
        if k in env and v != env[k]:
            raise SpecError(f"{where}: dim {k}={v!r} given as a keyword, but the inputs "
                            f"bind {k}={env[k]}")
    template, dims = kernel.bind_keywords({**kwargs, **env})
    missing = [d for d in kernel.dims if d not in dict(dims)]
    if missing:
        raise SpecError(f"{where}: no input binds dim(s) {missing}; pass "
                        f"{', '.join(m + '=...' for m in missing)}")
    return template, dims


def _missing_specs(kernel: Kernel) -> str:
    """What a kernel without ``out_specs`` lacks to be called, and the fix."""
    example = "@kernel(in_specs=(Tile('N', f32),), out_specs=(Tile('N', f32),), ...)"
    if kernel.in_specs:
        inputs = ", ".join(kernel.tensors[:len(kernel.in_specs)])
        return (f"calling it on arrays needs out_specs, a Tile (shape and dtype) for each output; "
                f"it declares in_specs for its inputs ({inputs}) and no output: add a positional "
                f"parameter per output after the inputs and declare it, as in {example}")
    if kernel.tensors:
        return (f"calling it on arrays needs in_specs and out_specs, a Tile (shape and dtype) for "
                f"each tensor parameter ({', '.join(kernel.tensors)}), inputs then outputs; "
                f"declare them, as in {example}")
    return (f"calling it on arrays needs in_specs and out_specs, and it has no tensor parameters: "
            f"give it a positional parameter per input and output and a Tile for each, as in "
            f"{example}")


def _shape_dtype(a: Any, name: str, where: str) -> tuple[tuple[int, ...], Any]:
    dtype = getattr(a, "dtype", None)
    if dtype is None:
        raise SpecError(f"{where}: argument {name!r}: expected an array, got {type(a).__name__}")
    return tuple(np.shape(a)), dtype


def _out_dtype(kernel: Kernel, spec: Tile) -> np.dtype:
    t = spec.dtype
    if t.lanes != 1 or t.np_name is None or t.bits < 8:
        raise SpecError(f"kernel {kernel.name}: out_specs dtype {t.name} has no JAX array "
                        "type; use a scalar type of 8 bits or more (f16 with twice the "
                        "elements rather than f16x2)")
    return jnp.dtype(t.np_name)


def kernel_abstract_eval(kernel: Kernel, *avals: Any, template: tuple, sizes: tuple,
                         launch: Launch, batch: int, shared: tuple, scalars: tuple,
                         axis: tuple = ()) -> list[jax.core.ShapedArray]:
    """Output avals from ``out_specs`` (with a leading ``batch`` dim when
    batched); re-checks the inputs against the dims. A call of a kernel
    with peers (``axis``) has its rank as a last operand."""
    names = kernel.tensors[:len(kernel.in_specs)]
    vma = frozenset().union(*map(varying_axes, avals))
    if axis:
        avals = avals[:-1]
    shapes = [a.shape for a in avals]
    if batch:
        for i, (name, shape) in enumerate(zip(names, shapes)):
            if i in shared:
                continue
            if not shape or shape[0] != batch:
                raise SpecError(f"kernel {kernel.name}: batched input {name!r} has shape "
                                f"{shape}; expected a leading batch dim of {batch}")
            shapes[i] = shape[1:]
    try:
        env = bind_specs(kernel.in_specs, [(s, a.dtype) for s, a in zip(shapes, avals)], names)
    except SpecError as e:
        raise SpecError(f"kernel {kernel.name}: {e}") from None
    bound = dict(sizes)
    for k, v in env.items():
        if bound.get(k) != v:
            raise SpecError(f"kernel {kernel.name}: dim {k}: the primitive was bound with "
                            f"{bound.get(k)}, the inputs give {v}")
    lead = (batch,) if batch else ()
    return [_shaped_array(lead + spec.resolve_shape(bound), _out_dtype(kernel, spec), vma)
            for spec in kernel.out_specs]


def varying_axes(aval: Any) -> frozenset:
    """The manual mesh axes (inside ``shard_map``) that ``aval`` varies over."""
    mat = getattr(aval, "mat", None)  # jax 0.10: ManualAxisType; earlier: .vma
    return mat.varying if mat is not None else getattr(aval, "vma", frozenset())


def _shaped_array(shape: tuple, dtype: Any, vma: frozenset) -> jax.core.ShapedArray:
    # Outputs vary over every manual axis an input varies over: inside
    # shard_map each shard's launch reads its own shard (the rule
    # jax.ffi.ffi_call leaves to its caller's result types).
    if not vma:
        return jax.core.ShapedArray(shape, dtype)
    sharding = jcore.get_cur_mesh_sharding()
    if hasattr(jcore, "ManualAxisType"):
        return jax.core.ShapedArray(shape, dtype, sharding=sharding,
                                    manual_axis_type=jcore.ManualAxisType(varying=vma))
    return jax.core.ShapedArray(shape, dtype, sharding=sharding, vma=vma)


# The largest batch folded into grid z: CUDA's limit on gridDim.z.
GRID_Z_LIMIT = MAX_GRID[2]


def kernel_batch(kernel: Kernel, args: Sequence[Any], axes: Sequence[Any], **params: Any):
    """vmap. A ``batch="z"`` kernel becomes one launch with the batch as
    grid z (:func:`fold_batch`); any other kernel, a batch past grid z's
    limit, or a kernel with a TMA descriptor of a batched tensor (one
    descriptor describes one tensor), a sequential loop over it
    (``lax.map``), one launch per element. Unbatched inputs are shared by
    all; a kernel with peers always loops (each element a collective launch)."""
    if kernel.batch == "z" and not params.get("axis"):
        size = next(a.shape[ax] for a, ax in zip(args, axes) if ax is not None)
        if (params["batch"] or 1) * size <= GRID_Z_LIMIT and not _tma_of_batched(kernel, axes, **params):
            return fold_batch(kernel, args, axes, size, **params)
    return loop_batch(kernel, args, axes, **params)


def _tma_of_batched(kernel: Kernel, axes: Sequence[Any], *, template: tuple, sizes: tuple,
                    launch: Launch, batch: int, shared: tuple, scalars: tuple,
                    axis: tuple = ()) -> bool:
    """Whether the kernel asks for a TMA descriptor of a tensor that the
    folded launch would batch (any output, or an input batched now or before)."""
    spec = kernel.specialize(**dict(template), **dict(sizes))
    batched = {i for i, ax in enumerate(axes) if ax is not None or (batch and i not in shared)}
    return any(d.tensor >= len(axes) or d.tensor in batched for d in spec.tma)


def fold_batch(kernel: Kernel, args: Sequence[Any], axes: Sequence[Any], size: int, *,
               template: tuple, sizes: tuple, launch: Launch, batch: int, shared: tuple,
               scalars: tuple, axis: tuple = ()):
    """One launch for the whole batch: grid z runs over it (:func:`fold_into_grid_z`;
    inputs the kernel shares across the batch stay shared)."""
    if launch.grid[2] != 1 and not batch:
        raise SpecError(f"kernel {kernel.name}: batch='z' folds a vmap into grid z, but its "
                        f"grid is {launch.grid}; a batch='z' kernel launches with grid z = 1")
    new_args, new_shared, folded = fold_into_grid_z(args, axes, size, launch, batch, shared)
    outs = primitive(kernel).bind(*new_args, template=template, sizes=sizes,
                                  launch=folded, batch=folded.grid[2],
                                  shared=new_shared, scalars=scalars)
    return unfold_outputs(outs, size, batch)


def fold_into_grid_z(args: Sequence[Any], axes: Sequence[Any], size: int, launch: Launch, batch: int,
                     shared: tuple | None = None) -> tuple[list[Any], tuple, Launch]:
    """The operands and launch of one launch over grid z for a vmap of
    ``size`` (the one rule, for kernels and :func:`jaxptx.jax.ptx_call`).

    Each batched operand gets the batch as its leading dim; grid z becomes
    the batch. A vmap of an already folded call (``batch`` > 0) multiplies
    the two: element ``(i, j)`` is ``i * batch + j``.

    Args:
        args, axes: the vmapped operands and their batch axes (None: unbatched).
        size: the new batch's size.
        launch: the call's launch; batch: its folded batch so far (0: none).
        shared: indices of operands the kernel shares across the batch
            (its body does not offset them by ``%ctaid.z``); an unbatched
            operand stays shared, one batched at one level only is broadcast
            over the other. ``None``: the kernel offsets every operand, so an
            unbatched one is broadcast.

    Returns:
        ``(operands, indices shared after folding, the folded launch)``.
    """
    new_args, new_shared = [], []
    for i, (x, ax) in enumerate(zip(args, axes)):
        inner = bool(batch) and (shared is None or i not in shared)   # batched by the call batched again
        if ax is None and not inner and shared is not None:
            new_shared.append(i)
            new_args.append(x)
            continue
        x = jnp.moveaxis(x, ax, 0) if ax is not None else jnp.broadcast_to(x, (size, *x.shape))
        if batch:
            if not inner:  # shared inside, batched outside: broadcast over the inner batch
                x = jnp.broadcast_to(x[:, None], (size, batch, *x.shape[1:]))
            x = x.reshape((size * batch, *x.shape[2:]))
        new_args.append(x)
    return new_args, tuple(new_shared), launch.with_grid_z(size * (batch or 1))


def unfold_outputs(outs: Sequence[Any], size: int, batch: int) -> tuple[list[Any], list[int]]:
    """The outputs of a folded launch as vmap returns them (batch axis 0)."""
    outs = list(outs)
    if batch:
        outs = [o.reshape((size, batch, *o.shape[1:])) for o in outs]
    return outs, [0] * len(outs)


def loop_batch(kernel: Kernel, args: Sequence[Any], axes: Sequence[Any], **params: Any):
    """vmap as a sequential loop over the batch (``lax.map``), one launch per
    element; right for any kernel."""
    return map_over_batch(primitive(kernel), args, axes, **params)


def map_over_batch(prim: jex.core.Primitive, args: Sequence[Any], axes: Sequence[Any],
                   **params: Any) -> tuple[list[Any], list[int]]:
    """Bind ``prim`` once per element of the batch (``lax.map``): the
    batched arguments sliced, the unbatched ones (axis None) shared."""
    batched = [i for i, ax in enumerate(axes) if ax is not None]
    xs = tuple(jnp.moveaxis(args[i], axes[i], 0) for i in batched)

    def one(slices: tuple) -> list:
        full = list(args)
        for i, x in zip(batched, slices):
            full[i] = x
        return prim.bind(*full, **params)

    outs = jax.lax.map(one, xs)
    return list(outs), [0] * len(outs)


def kernel_jvp(kernel: Kernel, primals: Sequence[Any], tangents: Sequence[Any], **params: Any):
    """Differentiation of a bare kernel: refused with the fix (PTX has no
    derivative JAX can take)."""
    raise SpecError(f"kernel {kernel.name} has no derivative: jax.grad, jax.vjp and jax.jvp "
                    f"cannot differentiate PTX; pair it with its backward kernel or function "
                    f"as jaxptx.custom_vjp({kernel.name}, backward) and differentiate that, or "
                    f"pass its inputs through jax.lax.stop_gradient where no gradient should flow")


def _make_primitive(kernel: Kernel) -> jex.core.Primitive:
    prim = jex.core.Primitive(kernel.name)
    prim.multiple_results = True
    prim.def_impl(functools.partial(xla.apply_primitive, prim))
    prim.def_abstract_eval(functools.partial(kernel_abstract_eval, kernel))
    batching.primitive_batchers[prim] = functools.partial(kernel_batch, kernel)
    ad.primitive_jvps[prim] = functools.partial(kernel_jvp, kernel)
    if kernel.shardable:
        # It may lower to a custom_partitioning, which needs the concrete
        # devices at lowering time (no public API says so yet).
        jdispatch.prim_requires_devices_during_lowering.add(prim)
    _lowering.register(prim, kernel)
    return prim

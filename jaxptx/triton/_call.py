"""``triton_call``: a Triton kernel as a JAX primitive, compiled ahead of time, run by ``ptx_call``.

The steps, each its own function: unwrap an autotuner or heuristics
(:func:`_unwrap`), check the other arguments (``_arguments``), bind the
arguments to the kernel's parameters (:func:`_bind`), choose the config
(:func:`_config`), specialise and compile (``_specialize``, ``_compile``),
fill the PTX entry's parameters (:func:`_ptx_args`) and launch it with
:func:`jaxptx.jax.ptx_call`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import SpecError
from ..jax import Output, Scratch, ptx_call
from . import _arguments as arguments
from ._compile import Compiled, check_capability, compile_kernel, default_capability
from ._descriptor import TensorDescriptor, descriptor_type, expand
from ._specialize import pointer_type, specialize

import triton  # the optional dependency: jaxptx[triton]

__all__ = ["triton_call"]

# The unsigned (and untyped) PTX integer parameter types, by width.
_UNSIGNED_BITS = {"u8": 8, "u16": 16, "u32": 32, "u64": 64, "b8": 8, "b16": 16, "b32": 32,
                  "b64": 64}


@dataclasses.dataclass
class _Bound:
    """The arguments bound to the kernel's parameters.

    Attributes:
        operands: per non-constexpr parameter given, its value, in the
            kernel's order (the indices ``input_output_aliases`` counts).
        fill: per non-constexpr parameter, its value or ``Output(j)``.
        metaparams: constexpr values and other keywords (what a callable
            grid or zeroed_outputs receives).
    """

    operands: list[tuple[str, Any]]
    fill: dict[str, Any]
    metaparams: dict[str, Any]


def triton_call(*args: Any, kernel: Any, out_type: Any = None, grid: Any, name: str = "",
                num_warps: int | None = None, num_stages: int | None = None,
                num_ctas: int | None = None, compute_capability: int | None = None,
                backend_options: Mapping[str, Any] | None = None,
                input_output_aliases: Mapping[int, int] | None = None,
                zeroed_outputs: Sequence[int] | Callable[[dict], Sequence[int]] = (),
                debug: bool = False, serialized_metadata: bytes = b"",
                cost_estimate: Mapping[str, int] | None = None, has_side_effect: bool = False,
                out_shape: Any = None, **kwargs: Any) -> Any:
    """Call a Triton kernel on JAX arrays: jax-triton's ``triton_call``, on the CPU too.

    The kernel is compiled ahead of time by the installed Triton, with no GPU
    needed, for ``compute_capability`` (by default ``$JAXPTX_ARCH``, else GPU
    0's, else sm_90a), and the PTX is called with
    :func:`jaxptx.jax.ptx_call`: one JAX primitive that lowers to jaxptx's
    typed-FFI custom call, a launch on CUDA and the emulator on the CPU. So
    unlike jax-triton, it also runs under ``jax.vmap`` (a loop of launches),
    ``jax.shard_map`` (a launch per shard), on the CPU, and, paired with a
    backward in :func:`jaxptx.custom_vjp`, under ``jax.grad``.

    The arguments fill the kernel's parameters as in jax-triton 0.4:
    positional ``args`` then keywords that name a parameter; the arrays are
    pointers (assumed 16-byte aligned), numbers are static scalars that
    Triton specialises (an int equal to 1 is compiled in, multiples of 16
    carry a divisibility hint); each non-constexpr parameter left without
    an argument receives the pointer of the next output (in ``out_type``'s
    leaf order) that is not aliased. Other keywords are meta-parameters:
    the ``tl.constexpr`` values (with the kernel's defaults), passed to a
    callable ``grid`` or ``zeroed_outputs``. A :class:`TensorDescriptor`
    fills a ``tensordesc`` parameter (a TMA map on sm_90 and later).

    Args:
        *args: the kernel's leading arguments: arrays, numbers, ``None``,
            TensorDescriptors.
        kernel: a ``@triton.jit`` function, or one under ``@triton.heuristics``
            or ``@triton.autotune`` (the first config that agrees with the
            meta-parameters given is compiled: nothing times them here).
        out_type: a ``jax.ShapeDtypeStruct`` (anything with ``.shape`` and
            ``.dtype``) or a pytree of them; the result has its structure.
        grid: the programs to launch: an int, 1 to 3 ints, or a function of
            the meta-parameters dict returning either.
        name: accepted for jax-triton's API (the custom call has its own).
        num_warps: warps per program (default 4); the launch's block is
            ``num_warps * 32`` threads.
        num_stages: software pipelining stages (default 3).
        num_ctas: programs per cluster (default 1; more needs sm_90).
        compute_capability: the target as an int (80, 90, 100).
        backend_options: more of Triton's compile options
            (``{"maxnreg": 128}``); an option also given as an argument is
            an error. ``ptx_version`` defaults to Triton's, at most 9.0.
        input_output_aliases: ``{operand index: output index}``: the output
            is that input's buffer, updated in place (no parameter of its
            own). Operands count the non-constexpr arguments given, in the
            kernel's parameter order.
        zeroed_outputs: output indices that start as zeros (atomics
            accumulate into them), or a function of the meta-parameters
            returning them; an aliased output zeroed starts as zeros too.
        debug: Triton's ``debug`` option: ``tl.device_assert`` checks run,
            and a failed one stops the kernel with its message, file and
            line (on the emulator, a ``SimFault`` naming the thread).
        serialized_metadata, cost_estimate, has_side_effect: accepted for
            jax-triton's API and ignored.
        out_shape: jax-triton's older name of ``out_type``.
        **kwargs: parameters by name, and meta-parameters (above).

    Returns:
        The outputs, in ``out_type``'s structure.

    Raises:
        SpecError: arguments that do not fit the kernel (a constexpr
            without a value, too few or too many outputs, a bad grid,
            aliases, zeroed outputs, options or capability), naming the
            argument, what was expected and what came.
        triton.compiler.errors.CompilationError: the kernel does not compile.

    Example:
        >>> import jax, jax.numpy as jnp, triton, triton.language as tl
        >>> @triton.jit
        ... def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        ...     i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ...     m = i < n
        ...     s = tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m)
        ...     tl.store(out_ptr + i, s, mask=m)
        >>> x = jnp.arange(8, dtype=jnp.float32)
        >>> jax.jit(lambda x: triton_call(x, x, n=x.size, kernel=add, out_type=x, grid=1,
        ...                               BLOCK=8, num_warps=1))(x)
        Array([ 0.,  2.,  4.,  6.,  8., 10., 12., 14.], dtype=float32)
    """
    del name, serialized_metadata, cost_estimate, has_side_effect   # XLA-side annotations only
    fn, autotuner, heuristics = _unwrap(kernel)
    where = f"triton_call {fn.__name__}"
    options = arguments.backend_options(where, backend_options, num_warps=num_warps,
                                        num_stages=num_stages, num_ctas=num_ctas, debug=debug)
    outs, tree = arguments.outputs(where, out_type, out_shape)
    aliases = arguments.aliases(where, input_output_aliases, len(outs))
    fresh = [j for j in range(len(outs)) if j not in aliases.values()]
    bound = _bind(where, fn, args, kwargs, fresh)
    _check_aliased(where, bound, aliases, outs)
    meta, options = _config(where, fn, autotuner, heuristics, bound, options)
    capability = check_capability(compute_capability if compute_capability is not None
                                  else default_capability(), where)
    if options["num_ctas"] > 1 and capability < 90:
        raise SpecError(f"{where}: num_ctas={options['num_ctas']} launches clusters, which need "
                        f"sm_90 or later; compute_capability is {capability}")
    spec = specialize(fn.params, {**bound.fill, **meta}, _kinds(where, bound.fill, outs), where)
    compiled = compile_kernel(fn, spec, options, capability)
    zeroed = arguments.zeroed(where, zeroed_outputs, meta, len(outs))
    gx, gy, gz = arguments.grid(where, grid, meta)
    ptx_args, positions = _ptx_args(where, fn, spec, compiled, bound, outs, aliases, zeroed,
                                     gx * gy * gz)
    results = ptx_call(compiled.ptx, *ptx_args, kernel=compiled.entry, out_shape=list(outs),
                       grid=(gx * compiled.num_ctas, gy, gz), block=compiled.num_warps * 32,
                       cluster=(compiled.num_ctas, 1, 1), smem=compiled.shared,
                       input_output_aliases={positions[i]: j for i, j in aliases.items()},
                       zeroed_outputs=tuple(j for j in zeroed if j not in aliases.values()))
    return jax.tree.unflatten(tree, results)


def _unwrap(kernel: Any) -> tuple[Any, Any, Any]:
    """The ``@triton.jit`` function under an ``@triton.autotune`` / ``@triton.heuristics``."""
    autotuner = heuristics = None
    if isinstance(kernel, triton.runtime.Autotuner):
        autotuner, kernel = kernel, kernel.fn
    if isinstance(kernel, triton.runtime.Heuristics):
        heuristics, kernel = kernel, kernel.fn
    if not isinstance(kernel, triton.runtime.JITFunction):
        raise SpecError(f"triton_call: kernel: expected a @triton.jit function (or one under "
                        f"@triton.autotune / @triton.heuristics), got {type(kernel).__name__}")
    return kernel, autotuner, heuristics


def _bind(where: str, fn: Any, args: tuple, kwargs: dict, fresh: Sequence[int]) -> _Bound:
    """Bind the arguments: keywords that name a parameter fill it, the rest are
    metaparams; constexprs take their defaults; each non-constexpr parameter
    left empty receives the next output that is not aliased."""
    names = [p.name for p in fn.params]
    constexpr = {p.name for p in fn.params if p.is_constexpr}
    meta = {p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}
    given = {k: v for k, v in kwargs.items() if k in names}
    meta.update({k: v for k, v in kwargs.items() if k not in names})
    try:
        bound = fn.signature.bind_partial(*args, **given).arguments
    except TypeError as e:
        raise SpecError(f"{where}: the arguments do not fit the kernel's parameters "
                        f"({', '.join(names)}): {e}") from None
    operands = []
    for k, v in bound.items():
        if k in constexpr:
            meta[k] = v
        else:
            operands.append((k, v))
    empty = [p.name for p in fn.params if not p.is_constexpr and p.name not in bound]
    if len(empty) != len(fresh):
        raise SpecError(f"{where}: out_type has {len(fresh)} output(s) that are not aliased to an "
                        f"input, but {len(empty)} kernel parameter(s) have no argument "
                        f"({', '.join(empty) or 'none'}); each such output fills the next "
                        f"parameter left empty")
    fill = dict(operands)
    fill.update({k: Output(j) for k, j in zip(empty, fresh)})
    return _Bound(operands, fill, meta)


def _config(where: str, fn: Any, autotuner: Any, heuristics: Any, bound: _Bound,
            options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metaparams and options of the one config compiled: an autotuner's
    configs are pruned to those that agree with the metaparams given, and the
    first kept is used (there is no GPU to time them on); heuristics fill in
    their values."""
    meta = dict(bound.metaparams)
    if autotuner is not None:
        configs = [c for c in autotuner.configs
                   if all(c.kwargs.get(k, v) == v for k, v in meta.items())]
        if not configs:
            raise SpecError(f"{where}: none of the autotuner's {len(autotuner.configs)} configs "
                            f"agrees with the meta-parameters given {meta}")
        if len(configs) > 1:
            warnings.warn(f"{where}: {len(configs)} autotuner configs fit; jaxptx.triton cannot "
                          f"time them and uses the first ({configs[0]}); pass its meta-parameters "
                          f"to choose another", stacklevel=3)
        c = configs[0]
        if getattr(c, "pre_hook", None) is not None:
            raise SpecError(f"{where}: the autotuner config {c} has a pre_hook, which runs on "
                            f"torch tensors before a launch; jaxptx.triton cannot run it")
        meta.update(c.kwargs)
        options = {**options, "num_warps": c.num_warps, "num_stages": c.num_stages,
                   "num_ctas": c.num_ctas}
    if heuristics is not None:
        named = {**{k: v for k, v in bound.fill.items() if not isinstance(v, Output)}, **meta}
        for k, rule in heuristics.values.items():
            meta[k] = rule({**named, **meta})
    missing = [p.name for p in fn.params if p.is_constexpr and p.name not in meta]
    if missing:
        raise SpecError(f"{where}: constexpr parameter(s) {', '.join(missing)} have no value; "
                        f"pass {', '.join(m + '=...' for m in missing)} to triton_call")
    return meta, options


def _kinds(where: str, fill: Mapping[str, Any], outs: Sequence[Any]) -> dict[str, str]:
    """Triton's type of each buffer and descriptor parameter."""
    kinds = {}
    for name, v in fill.items():
        what = f"{where}: param {name}"
        if isinstance(v, Output):
            kinds[name] = pointer_type(outs[v.index].dtype, what)
        elif isinstance(v, TensorDescriptor):
            kinds[name] = descriptor_type(v, what)
        elif hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, np.generic):
            kinds[name] = pointer_type(v.dtype, what)
        elif isinstance(v, (tuple, list)):
            raise SpecError(f"{what}: a {type(v).__name__} argument (Triton's tuple parameters) "
                            f"is not supported by jaxptx.triton; pass each element as its own "
                            f"parameter")
    return kinds


def _ptx_args(where: str, fn: Any, spec: Any, compiled: Compiled, bound: _Bound,
              outs: Sequence[Any], aliases: Mapping[int, int], zeroed: Sequence[int],
              programs: int) -> tuple[list[Any], dict[int, int]]:
    """What fills each of the PTX entry's parameters, and per operand index
    the position of its argument (for ``input_output_aliases``)."""
    constexpr = {k for k, t in spec.signature if t == "constexpr"}
    operand_index = {k: i for i, (k, _) in enumerate(bound.operands)}
    args, positions = [], {}
    metas = iter(compiled.tensordesc_meta)
    for p in fn.params:
        if p.is_constexpr or p.name in constexpr:
            continue
        v = bound.fill[p.name]
        k = operand_index.get(p.name)
        if k in aliases and k is not None and aliases[k] in zeroed:
            v = jnp.zeros(outs[aliases[k]].shape, outs[aliases[k]].dtype)
        if isinstance(v, TensorDescriptor):
            meta = next(metas, None) if compiled.tensordesc_meta else None
            args.extend(expand(v, meta, f"{where}: param {p.name}"))
            continue
        if k is not None:
            positions[k] = len(args)
        args.append(v)
    for nbytes, _ in (compiled.global_scratch, compiled.profile_scratch):
        args.append(Scratch(nbytes * programs * compiled.num_ctas) if nbytes else np.uint64(0))
    if len(args) != len(compiled.params):
        raise SpecError(f"{where}: the compiled entry {compiled.entry} has "
                        f"{len(compiled.params)} parameters, jaxptx.triton filled {len(args)}; "
                        f"this Triton ({triton.__version__}) passes arguments in a way "
                        f"jaxptx.triton does not know")
    return [_fit(a, t) for a, t in zip(args, compiled.params)], positions


def _check_aliased(where: str, bound: _Bound, aliases: Mapping[int, int],
                   outs: Sequence[Any]) -> None:
    """Each aliased operand exists and is an array of its output's shape and dtype."""
    for i, j in aliases.items():
        if not 0 <= i < len(bound.operands):
            raise SpecError(f"{where}: input_output_aliases {dict(aliases)!r}: operand {i}, but "
                            f"the call has {len(bound.operands)} operand(s) (non-constexpr "
                            f"arguments, in the kernel's parameter order)")
        name, v = bound.operands[i]
        if (not (hasattr(v, "shape") and hasattr(v, "dtype")) or isinstance(v, np.generic)
                or isinstance(v, TensorDescriptor)):
            raise SpecError(f"{where}: input_output_aliases: param {name} is aliased to an "
                            f"output, so expected an array, got {v!r:.60}")
        out = outs[j]
        if tuple(v.shape) != tuple(out.shape) or np.dtype(v.dtype) != np.dtype(out.dtype):
            raise SpecError(f"{where}: input_output_aliases: param {name} is {np.dtype(v.dtype)}"
                            f"{list(v.shape)} but its output is {np.dtype(out.dtype)}"
                            f"{list(out.shape)}; an aliased output has its input's shape and "
                            f"dtype")

def _fit(value: Any, ptx_type: str) -> Any:
    """A number as the PTX parameter holds it: an integer in two's complement
    for Triton's unsigned ``.u32``/``.u64`` params (``ptx_call`` range-checks
    them as unsigned), a 64-bit one as a numpy integer, a bool as 0 or 1."""
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    bits = _UNSIGNED_BITS.get(ptx_type)
    if bits and isinstance(value, (int, np.integer)):
        v = int(value) & ((1 << bits) - 1)
        return np.uint64(v) if bits == 64 else v
    return value

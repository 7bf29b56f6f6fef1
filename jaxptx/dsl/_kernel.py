"""``@kernel`` and :class:`Kernel`: options, specialisation, tracing.

A kernel's positional parameters are its tensors (inputs, then outputs, as
``in_specs``/``out_specs`` list them); its keyword-only parameters are
template parameters, fixed per trace. ``.ptx(**kw)`` specialises on template
values and symbolic dims, traces once per specialisation, and caches.

The options are checked at decoration (``_options``); a trace runs the body
(``_finish``) and assembles the module (``_assemble``) into a
:class:`~jaxptx.dsl.Specialization`. Layers above the DSL build on
:class:`Kernel`'s public extension points: ``set_call_hook`` (the JAX
integration), :meth:`Kernel.trace_specialization` and
:meth:`Kernel.launch_for` (``jaxptx.pyptx``'s rules), and
:attr:`Kernel.extensions`.

Longer than our few-hundred-line habit, on purpose: this is the one class a
user holds, and its documented properties, inspection methods and
extension points are read together; the steps a trace runs live in the
modules named above.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from .. import ir, isa
from ..emit import emit
from ..errors import PtxVersionError, SpecError, TraceError
from ..launch import Launch, dim3
from ..runtime import Resources, compile_cubin, detect_arch, resources, sass
from ..types import PtxType
from ._assemble import ends_in_exit, entry_module, launch_directives, static_shared_bytes
from ._core import emit_instruction
from ._finish import check_module, no_gc, run_body
from ._launch import decoration_launch, specialization_launch
from ._options import (check_address_size, check_batch, check_entry_name, check_extern_smem,
                       check_raw_directives, check_raw_params, check_shardable, check_specs,
                       signature)
from ._params import tensor_args
from ._peers import Peers, check_peers, declare_hidden
from ._specialization import Specialization
from ._specs import Tile
from ._template import bind_keywords, check_keywords, template_types
from ._trace import Trace, active

__all__ = ["Kernel", "kernel", "AUTO_FALLBACK_ARCH", "set_call_hook"]

# What ``arch="auto"`` means where no GPU is visible and JAXPTX_ARCH is unset.
AUTO_FALLBACK_ARCH = "sm_90a"

# ``Kernel.__call__`` goes through the JAX layer, which sits above this one:
# jaxptx.jax registers itself here when imported (the DSL never imports jax).
_CALL_HOOK: Callable[[Kernel, tuple, dict], Any] | None = None

# jax/_ptx_source.py reads this name until it imports jaxptx.dsl.static_shared_bytes.


def set_call_hook(hook: Callable[[Kernel, tuple, dict], Any] | None) -> None:
    """Set what ``Kernel.__call__(*args, **kwargs)`` runs, as
    ``hook(kernel, args, kwargs)``; jaxptx.jax installs its primitive binding.

    Args:
        hook: the function, or None to make calls on arrays an error.
    """
    global _CALL_HOOK
    _CALL_HOOK = hook


class Kernel:
    """A PTX kernel traced from a Python function (see :func:`kernel`).

    Attributes:
        fn: the Python function.
        name: the ``.entry`` name.
        extensions: values the layers above the DSL keep per kernel
            (``jaxptx.jax`` keeps the kernel's primitive here); the DSL
            never reads it.
    """

    def __init__(self, fn: Callable[..., Any], *, arch: str = "sm_90a",
                 version: tuple[int, int] | str | None = None,
                 in_specs: Sequence[Tile] | None = None, out_specs: Sequence[Tile] | None = None,
                 grid: Any = None, block: Any = None, cluster: Any = (1, 1, 1), smem: int = 0,
                 raw_params: Sequence[tuple[str, str]] | None = None, extern_smem: bool | str = False,
                 reqntid: Any = None, raw_directives: Sequence[tuple[str, tuple]] | None = None,
                 name: str | None = None, module: bool = False, validate: bool = True,
                 target_options: Sequence[str] = (), address_size: int | None = 64,
                 batch: str | None = None, shardable: Sequence[str] = (),
                 peers: Sequence[str] = ()) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        where = f"@kernel {self.name}"
        self._arch = arch if arch == "auto" else isa.parse_target(arch).name
        self._version = isa.parse_version(version)
        self._in_specs = check_specs(in_specs, f"{where} in_specs")
        self._out_specs = check_specs(out_specs, f"{where} out_specs")
        self._reqntid = None if reqntid is None else dim3(reqntid, "reqntid", where)
        self._grid = grid if grid is None or callable(grid) else dim3(grid, "grid", where)
        self._launch = decoration_launch(where, self._arch, self._grid, block, cluster, smem,
                                         self._reqntid)
        self._raw_params = check_raw_params(raw_params, where)
        self._raw_directives = check_raw_directives(raw_directives, where)
        self._extern = check_extern_smem(extern_smem, where)
        self._tensors, self._template = signature(fn, where)
        if module and self._tensors:
            raise TraceError(f"{where}: a module=True kernel builds its functions with "
                             f"ptx.function(...); it takes no tensor parameters {list(self._tensors)}")
        self._address_size = check_address_size(address_size, where)
        self._batch = check_batch(batch, where)
        self._module = module
        self._validate = validate
        self._target_options = tuple(target_options)
        specs = self._in_specs + self._out_specs
        if specs and len(specs) != len(self._tensors):
            raise SpecError(
                f"{where}: {len(self._tensors)} positional (tensor) parameters "
                f"{list(self._tensors)} but {len(self._in_specs)} in_specs + "
                f"{len(self._out_specs)} out_specs")
        self._dims = tuple(dict.fromkeys(d for t in specs for d in t.symbolic_dims))
        check_keywords(self._template, self._in_specs, self._out_specs,
                       [n for _, n in self._raw_params], where)
        self._template_types = template_types(fn, self._template)
        self._shardable = check_shardable(shardable, self._in_specs, where)
        self._peers = check_peers(peers, self._tensors, list(self._template), where)
        if name is not None and not module:   # a module=True kernel names its functions itself
            check_entry_name(name, True, where)
        self._cache: dict[tuple, Specialization] = {}
        self.extensions: dict[str, Any] = {}

    # documented properties ------------------------------------------------
    @property
    def in_specs(self) -> tuple[Tile, ...]:
        """Input tensor specs declared on the kernel."""
        return self._in_specs

    @property
    def out_specs(self) -> tuple[Tile, ...]:
        """Output tensor specs declared on the kernel."""
        return self._out_specs

    @property
    def grid(self) -> Any:
        """Configured grid tuple or grid resolver callable."""
        return self._grid

    @property
    def block(self) -> tuple[int, int, int]:
        """Static CUDA block dimensions for the kernel (``reqntid`` when
        only that is given)."""
        return self._launch.block

    @property
    def cluster(self) -> tuple[int, int, int]:
        """CTA cluster dimensions used at launch time."""
        return self._launch.cluster

    @property
    def smem(self) -> int:
        """Requested dynamic shared memory in bytes (a trace launches with
        at least what ``extern_smem`` carving uses)."""
        return self._launch.smem

    @property
    def batch(self) -> str | None:
        """How ``jax.vmap`` maps a batch onto a launch: ``"z"`` (one launch,
        the batch as grid z; the body indexes with ``x.batch_ptr``) or None
        (a loop, one launch per element)."""
        return self._batch

    @property
    def shardable(self) -> tuple[str, ...]:
        """Symbolic dims along which the kernel's work is independent: under
        ``jax.jit`` on inputs sharded along them, each device launches over
        its own shard (the grid follows the local dims)."""
        return self._shardable

    @property
    def peers(self) -> tuple[str, ...]:
        """Tensors every device of the call's mesh axis may read and write
        (``x.peer_ptr(r)``, ``x.multimem_ptr``): such a kernel is called
        inside ``jax.shard_map`` as ``k(x, axis_name="d")``, and traced per
        axis size (``.ptx(world_size=8)``)."""
        return self._peers

    @property
    def arch(self) -> str:
        """Target architecture as given (``"sm_90a"`` or ``"auto"``)."""
        return self._arch

    @property
    def template_params(self) -> dict[str, Any]:
        """Template (keyword-only) parameters and their defaults
        (``inspect.Parameter.empty`` where required)."""
        return dict(self._template)

    @property
    def dims(self) -> tuple[str, ...]:
        """Symbolic dims of the specs, in order of first appearance."""
        return self._dims

    @property
    def tensors(self) -> tuple[str, ...]:
        """Names of the tensor (positional) parameters: the inputs, then the
        outputs, as ``in_specs`` and ``out_specs`` list them."""
        return self._tensors

    @property
    def raw_params(self) -> tuple[tuple[PtxType, str], ...]:
        """The raw scalar ``.param`` entries, ``(type, name)``, in order
        (after the tensors' pointers)."""
        return self._raw_params

    @property
    def extern_smem(self) -> str | None:
        """Name of the extern (dynamic) shared array that ``smem`` buffers
        are carved from, or None."""
        return self._extern

    @property
    def validate(self) -> bool:
        """Whether each instruction is checked against the table (and the
        module by ``jaxptx.check``) when traced."""
        return self._validate

    @property
    def is_module(self) -> bool:
        """Whether the body builds a whole module (``module=True``) rather
        than one ``.entry``; such a kernel cannot be called on arrays."""
        return self._module

    # specialisation --------------------------------------------------------
    def resolve_arch(self) -> isa.Target:
        """The target of the next trace: ``arch``, or for ``"auto"`` the GPU's,
        ``JAXPTX_ARCH``, or ``AUTO_FALLBACK_ARCH`` when neither exists."""
        if self._arch != "auto":
            return isa.parse_target(self._arch)
        return isa.parse_target(detect_arch() or AUTO_FALLBACK_ARCH)

    def specialize(self, **kwargs: Any) -> Specialization:
        """Trace (or fetch from cache) the specialisation for ``kwargs``.

        Raises:
            SpecError: unknown keyword, bad dim value, missing template value,
                or one of another type than the function declares for it (its
                annotation, else its default's type: see ``_template``).
            TraceError: the body left control flow unfinished, or
                ``jaxptx.check`` found a problem in the traced module (both at
                the user's line).
            LaunchError: the launch (a grid function's grid, the module's
                shared memory) is outside CUDA's limits for the target.
        """
        return self.specialize_for(self.resolve_arch(), **kwargs)

    def specialize_for(self, target: isa.Target | str, *, shared: Sequence[str] = (),
                       **kwargs: Any) -> Specialization:
        """:meth:`specialize` for an explicit target (``arch`` is not consulted).

        Args:
            target: the target to trace for (``"sm_90a"`` or a Target).
            shared: names of inputs a batched launch shares across its batch
                (their ``batch_stride`` is 0; see ``batch="z"``).
        """
        target = isa.parse_target(target) if isinstance(target, str) else target
        world = self._world_size(kwargs)
        template, dims = self.bind_keywords(kwargs)
        unknown = [n for n in shared if n not in self._tensors[:len(self._in_specs)]]
        if unknown:
            raise SpecError(f"kernel {self.name}: shared names {unknown} are not inputs")
        key = (target, template, dims, tuple(sorted(shared)), world)
        spec = self._cache.get(key)
        if spec is None:
            args = (target, template, dims, frozenset(shared))
            spec = self._cache[key] = (self.trace_specialization(*args, world=world) if world
                                       else self.trace_specialization(*args))
        return spec

    def _world_size(self, kwargs: dict[str, Any]) -> int | None:
        """Pop ``world_size`` (the mesh axis size) off the keywords of a
        kernel with peers, which needs it to trace."""
        if not self._peers:
            return None
        world = kwargs.pop("world_size", None)
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise SpecError(f"kernel {self.name} has peers {self._peers}: it is traced per mesh "
                            f"axis size; pass world_size=<int >= 1> (a call inside jax.shard_map "
                            f"passes the axis's), got {world!r}")
        return world

    def ptx(self, **kwargs: Any) -> str:
        """Trace and return the PTX text (the inspection API).

        Example:
            >>> from jaxptx import kernel, ptx
            >>> @kernel(arch="sm_80")
            ... def noop():
            ...     ptx.ret()
            >>> print(noop.ptx().splitlines()[0])
            .version 8.5
        """
        return self.specialize(**kwargs).ptx

    def module(self, **kwargs: Any) -> ir.Module:
        """Trace and return the IR module (shared with the cache: do not mutate)."""
        return self.specialize(**kwargs).module

    def cubin(self, **kwargs: Any) -> bytes:
        """Compile the PTX to a cubin (nvJitLink, or ptxas) for its target."""
        s = self.specialize(**kwargs)
        return compile_cubin(s.ptx, s.target.name)

    def sass(self, **kwargs: Any) -> str:
        """The SASS ptxas produced for this kernel (via nvdisasm)."""
        return sass(self.cubin(**kwargs))

    def resources(self, **kwargs: Any) -> Resources:
        """Registers, shared memory, spills as ``ptxas -v`` reports them."""
        s = self.specialize(**kwargs)
        return resources(s.ptx, s.target.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the kernel on arrays: binds its JAX primitive (see :mod:`jaxptx.jax`).

        Positional arguments are the inputs (one per ``in_specs`` entry);
        keywords are template values, dims that no input binds, and the
        values of the ``raw_params`` (static numbers passed to the launch;
        they do not specialise the PTX). Returns
        the output array, or a tuple when there are several outputs. Works
        eagerly and under ``jax.jit``, ``vmap`` and ``shard_map``.

        Raises:
            SpecError: an input's shape or dtype does not match its spec.
            TraceError: the JAX integration is not loaded.
        """
        if _CALL_HOOK is None:
            raise TraceError(f"kernel {self.name}: calling a kernel on arrays needs the JAX "
                             "integration; import jaxptx.jax (importing jaxptx does)")
        return _CALL_HOOK(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<jaxptx.Kernel {self.name} arch={self._arch}>"

    # extension points ---------------------------------------------------------
    def bind_keywords(self, kwargs: dict[str, Any]) -> tuple[tuple, tuple]:
        """Split keywords into template values (defaults filled in, types
        checked) and symbolic dims, as ``.ptx(**kwargs)`` does.

        Returns:
            ``(template, dims)``: sorted ``(name, value)`` pairs.

        Raises:
            SpecError: an unknown keyword, a bad dim, a missing or wrongly
                typed template value.
        """
        return bind_keywords(self.name, self._template, self._template_types, self._dims, kwargs)

    def trace_specialization(self, target: isa.Target, template: tuple, dims: tuple,
                             shared: frozenset[str] = frozenset(), *,
                             world: int | None = None) -> Specialization:
        """Trace one specialisation, bypassing the cache (:meth:`specialize_for`
        caches what this returns). A subclass may override it, e.g. to trace
        again with other options (``jaxptx.pyptx`` moves static shared
        buffers past 48 KB to dynamic shared memory this way).

        Args:
            target: the target.
            template, dims: sorted ``(name, value)`` pairs (:meth:`bind_keywords`).
            shared: inputs a batched launch shares across its batch.
            world: the mesh axis size, for a kernel with ``peers`` (passed
                only then).

        Raises:
            PtxVersionError: the PTX version is older than the target needs.
            TraceError, LaunchError: as :meth:`specialize`.
        """
        version = self._version or isa.default_version(target)
        if version < target.min_ptx and self._validate:
            raise PtxVersionError(f"kernel {self.name}: {target.name} needs PTX ISA "
                                  f"{target.min_ptx[0]}.{target.min_ptx[1]}, got version={version}")
        trace = Trace(self.name, target, version, self._extern, self._validate, self._module)
        env = {**dict(dims), **dict(template)}
        if self._module:
            module = self._trace_module(trace, template)
            check_module(module, trace)
            launch = self.launch_for(target, self._launch.smem, module, env)
            return Specialization(module, emit(module), target, version, launch, dims, template)
        if self._peers:
            trace.cache["peers"] = Peers(self._peers, world or 1)
        module = self._trace_entry(trace, template, dict(dims), shared)
        check_module(module, trace)
        launch = self.launch_for(target, max(self._launch.smem, trace.smem_offset), module, env)
        multimem = tuple(n for n in self._peers if n in trace.cache["peers"].multimem) if self._peers else ()
        return Specialization(module, emit(module), target, version, launch, dims, template,
                              tuple(trace.tma), multimem)

    def launch_for(self, target: isa.Target, smem: int, module: ir.Module,
                   env: dict[str, Any]) -> Launch:
        """The specialisation's launch: the grid for ``env`` (dims and
        template values), validated for ``target`` with the module's static
        shared memory. A subclass may override it to look at the traced
        ``module`` first.

        Args:
            target: the target traced for.
            smem: dynamic shared memory bytes (at least what the trace carved).
            module: the traced module.
            env: the bound dims and template values.

        Raises:
            SpecError: a grid function needs a value ``env`` lacks.
            LaunchError: the launch is outside CUDA's limits for ``target``.
        """
        return specialization_launch(self.name, self._grid, self._launch, target, smem, module, env,
                                     self._validate)

    def with_extern_smem(self, name: str) -> Kernel:
        """A copy of this kernel whose ``smem`` buffers are carved from the
        extern (dynamic) shared array ``name``, with a cache of its own.

        Raises:
            TraceError: ``name`` is not an identifier.
        """
        dup = copy.copy(self)
        dup._extern = check_extern_smem(name, f"@kernel {self.name}")
        dup._cache = {}
        dup.extensions = {}
        return dup

    # tracing steps -------------------------------------------------------------
    def _trace_module(self, trace: Trace, template: tuple) -> ir.Module:
        """Run a ``module=True`` body: it builds the module's items itself."""
        with active(trace), no_gc():
            run_body(self.fn, (), template)
            trace.check_closed()
        return ir.Module(trace.items)

    def _trace_entry(self, trace: Trace, template: tuple, dims: dict[str, int],
                     shared: frozenset[str]) -> ir.Module:
        """Run an ordinary body as the ``.entry``: tensor and raw params
        first, a final ``ret`` unless the body ends in one."""
        # The function's own name is checked here, when it becomes the .entry
        # (a lambda may carry options to a test that never traces it).
        check_entry_name(self.name, False, f"kernel {self.name}")
        args = tensor_args(trace, self.name, self._tensors, self._in_specs + self._out_specs,
                           dims, shared)
        for ptype, pname in self._raw_params:
            trace.params.append(ir.VarDecl("param", ptype.name, trace.new_symbol(pname)))
        trace.cache["raw_params"] = {n: t for t, n in self._raw_params}
        with active(trace), no_gc():
            run_body(self.fn, args, template)
            trace.check_closed()
            if not ends_in_exit(trace.body):
                emit_instruction("ret", (), ())
        if self._peers:
            declare_hidden(trace)
        directives = launch_directives(self._reqntid, self.block, self.cluster, self._raw_directives)
        return entry_module(self.name, trace, trace.target, trace.version, directives,
                            self._target_options, self._address_size)


def kernel(fn: Callable[..., Any] | None = None, **options: Any) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
    """Decorator that makes a Python function a PTX kernel.

    Usable bare (``@kernel``) or with options (``@kernel(arch="sm_100a")``).
    Options: ``arch`` (``"sm_XX[a]"`` or ``"auto"``, resolved at trace time),
    ``version``, ``in_specs``, ``out_specs``, ``grid`` (tuple or callable of
    dims; default: one cluster), ``block`` (default: ``reqntid``, else one
    thread), ``cluster``, ``smem``, ``raw_params``,
    ``extern_smem``, ``reqntid``, ``raw_directives``, ``name``,
    ``target_options`` (``("debug",)``), ``address_size`` (64, 32 or None),
    ``batch`` (``"z"``: a ``jax.vmap`` of the kernel is one launch with the
    batch as grid z, the body indexing with ``x.batch_ptr``; default None, a
    loop of launches), ``shardable`` (symbolic dims of ``in_specs`` whose
    slices are independent: sharded inputs run per shard under ``jax.jit``),
    ``peers`` (tensors every device of a mesh axis may read and write: the
    kernel is called inside ``jax.shard_map`` as ``k(x, axis_name="d")``,
    its body reaching device ``r``'s copy through ``x.peer_ptr(r)``, with
    ``ptx.rank()`` and ``ptx.world_size()``; see :mod:`jaxptx.dsl._peers`),
    ``validate`` (check each instruction against the table; default True) and
    ``module`` (the body builds a whole module with ``ptx.function`` ...).

    The kernel's name (``name``, else the function's) is its ``.entry`` name
    and must be a PTX identifier (``name`` is checked at decoration, the
    function's name at trace); template (keyword-only) parameters must not
    share a name with a symbolic dim or a raw param (checked at decoration).

    grid, block, cluster and smem form one :class:`jaxptx.launch.Launch`,
    checked against CUDA's limits for the target: at decoration for the
    values given there (the target's limits when ``arch`` is not
    ``"auto"``), at trace for a grid function's grid and the module's static
    shared memory; a bad launch raises ``LaunchError``.

    Example:
        >>> from jaxptx import kernel, reg, ptx
        >>> from jaxptx.types import u32
        >>> @kernel(arch="sm_90a")
        ... def tiny():
        ...     tid = reg.from_(ptx.special.tid.x(), u32)
        ...     x = tid + 1
        ...     ptx.inst.mov.u32(tid, x)
        ...     ptx.ret()
        >>> "add.u32 %r3, %r2, 1;" in tiny.ptx()
        True
    """
    if fn is not None:
        return Kernel(fn, **options)
    return lambda f: Kernel(f, **options)


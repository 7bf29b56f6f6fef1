"""``@kernel`` and :class:`Kernel`: options, specialisation, tracing.

A kernel's positional parameters are its tensors (inputs, then outputs, as
``in_specs``/``out_specs`` list them); its keyword-only parameters are
template parameters, fixed per trace. ``.ptx(**kw)`` specialises on template
values and symbolic dims, traces once per specialisation, and caches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import ir, isa
from ..emit import emit
from ..errors import LaunchError, PtxError, PtxVersionError, SpecError, TraceError
from ..launch import Launch, dim3, validate_launch
from ..runtime import Resources, compile_cubin, detect_arch, resources, sass
from ..types import TYPES
from ._options import check_entry_name, check_raw_directives, check_raw_params, check_specs
from ._core import emit_instruction
from ._finish import at_user_line, check_module
from ._params import TensorArg, UnboundDim
from ._specs import Tile
from ._template import check_keywords, check_template_value, template_types
from ._tma import TmaDescriptor
from ._trace import Trace, active

__all__ = ["Kernel", "kernel", "Specialization", "AUTO_FALLBACK_ARCH"]

# What ``arch="auto"`` means where no GPU is visible and JAXPTX_ARCH is unset.
AUTO_FALLBACK_ARCH = "sm_90a"

# ``Kernel.__call__`` goes through the JAX layer, which sits above this one:
# jaxptx.jax registers itself here when imported (the DSL never imports jax).
_CALL_HOOK: Callable[[Kernel, tuple, dict], Any] | None = None


def set_call_hook(hook: Callable[[Kernel, tuple, dict], Any] | None) -> None:
    """Set what ``Kernel.__call__(*args, **kwargs)`` runs, as
    ``hook(kernel, args, kwargs)``; jaxptx.jax installs its primitive binding."""
    global _CALL_HOOK
    _CALL_HOOK = hook


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One traced specialisation of a kernel.

    Attributes:
        module: the IR module; ``ptx`` its text.
        target, version: what it was traced for.
        launch: grid (resolved from the dims), block, cluster and dynamic
            shared memory, validated for ``target`` with the module's static
            shared memory (``grid``, ``block``, ``cluster`` and ``smem``
            read it).
        dims: the bound symbolic dims; template: the template values.
        tma: the TMA descriptors the runtime passes after the other
            parameters, in their order (see ``TensorArg.tma_desc``).
    """

    module: ir.Module
    ptx: str
    target: isa.Target
    version: tuple[int, int]
    launch: Launch
    dims: tuple[tuple[str, int], ...]
    template: tuple[tuple[str, Any], ...]
    tma: tuple[TmaDescriptor, ...] = ()

    @property
    def grid(self) -> tuple[int, int, int]:
        """Blocks per grid (``launch.grid``)."""
        return self.launch.grid

    @property
    def block(self) -> tuple[int, int, int]:
        """Threads per block (``launch.block``)."""
        return self.launch.block

    @property
    def cluster(self) -> tuple[int, int, int]:
        """Blocks per cluster (``launch.cluster``)."""
        return self.launch.cluster

    @property
    def smem(self) -> int:
        """Dynamic shared memory bytes to launch with (``launch.smem``)."""
        return self.launch.smem


class Kernel:
    """A PTX kernel traced from a Python function (see :func:`kernel`)."""

    def __init__(self, fn: Callable[..., Any], *, arch: str = "sm_90a",
                 version: tuple[int, int] | str | None = None,
                 in_specs: Sequence[Tile] | None = None, out_specs: Sequence[Tile] | None = None,
                 grid: Any = None, block: Any = None, cluster: Any = (1, 1, 1), smem: int = 0,
                 raw_params: Sequence[tuple[str, str]] | None = None, extern_smem: bool | str = False,
                 reqntid: Any = None, raw_directives: Sequence[tuple[str, tuple]] | None = None,
                 name: str | None = None, module: bool = False, validate: bool = True,
                 target_options: Sequence[str] = (), address_size: int | None = 64,
                 batch: str | None = None, shardable: Sequence[str] = ()) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        where = f"@kernel {self.name}"
        self._arch = arch if arch == "auto" else isa.parse_target(arch).name
        self._version = isa.parse_version(version)
        self._in_specs = check_specs(in_specs, f"{where} in_specs")
        self._out_specs = check_specs(out_specs, f"{where} out_specs")
        self._reqntid = None if reqntid is None else dim3(reqntid, "reqntid", where)
        self._grid = grid if grid is None or callable(grid) else dim3(grid, "grid", where)
        self._launch = _decoration_launch(where, self._arch, self._grid, block, cluster, smem,
                                          self._reqntid)
        self._raw_params = check_raw_params(raw_params, where)
        self._raw_directives = check_raw_directives(raw_directives, where)
        if extern_smem not in (True, False) and not (isinstance(extern_smem, str) and extern_smem.isidentifier()):
            raise TraceError(f"{where} extern_smem: expected a bool or a symbol name, got {extern_smem!r}")
        self._extern = "dyn_smem" if extern_smem is True else (extern_smem or None)
        self._tensors, self._template = _signature(fn, where)
        if module and self._tensors:
            raise TraceError(f"{where}: a module=True kernel builds its functions with "
                             f"ptx.function(...); it takes no tensor parameters {list(self._tensors)}")
        if address_size not in (32, 64, None):
            raise TraceError(f"{where} address_size: expected 64, 32 or None, got {address_size!r}")
        if batch not in (None, "z"):
            raise TraceError(f"{where} batch: expected None or 'z' (a vmapped call runs the "
                             f"batch as grid z), got {batch!r}")
        self._batch = batch
        self._module = module
        self._validate = validate
        self._target_options = tuple(target_options)
        self._address_size = address_size
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
        in_dims = {d for t in self._in_specs for d in t.symbolic_dims}
        if isinstance(shardable, str) or any(d not in in_dims for d in shardable):
            raise SpecError(f"{where} shardable: expected a tuple of symbolic dims of in_specs "
                            f"({sorted(in_dims) or 'none'}), got {shardable!r}")
        self._shardable = tuple(shardable)
        if name is not None and not module:   # a module=True kernel names its functions itself
            check_entry_name(name, True, where)
        self._cache: dict[tuple, Specialization] = {}
        self._jax_primitive: Any = None  # created by jaxptx.jax on the first call

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
        template, dims = self._bind(kwargs)
        unknown = [n for n in shared if n not in self._tensors[:len(self._in_specs)]]
        if unknown:
            raise SpecError(f"kernel {self.name}: shared names {unknown} are not inputs")
        key = (target, template, dims, tuple(sorted(shared)))
        spec = self._cache.get(key)
        if spec is None:
            spec = self._cache[key] = self._trace(target, template, dims, frozenset(shared))
        return spec

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

    # internals -----------------------------------------------------------------
    def _bind(self, kwargs: dict[str, Any]) -> tuple[tuple, tuple]:
        template: dict[str, Any] = {}
        dims: dict[str, int] = {}
        for k, v in kwargs.items():
            if k in self._template:
                template[k] = v
            elif k in self._dims:
                if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    raise SpecError(f"kernel {self.name}: dim {k} must be a positive int, got {v!r}")
                dims[k] = v
            else:
                raise SpecError(
                    f"kernel {self.name}: unknown keyword {k!r}; template params: "
                    f"{list(self._template) or 'none'}, dims: {list(self._dims) or 'none'}")
        for k, default in self._template.items():
            if k not in template:
                if default is inspect.Parameter.empty:
                    raise SpecError(f"kernel {self.name}: template param {k!r} has no default; pass {k}=...")
                template[k] = default
            else:
                check_template_value(self._template_types, k, template[k], f"kernel {self.name}")
        items = tuple(sorted(template.items()))
        try:
            hash(items)
        except TypeError:
            raise SpecError(f"kernel {self.name}: template values must be hashable, got {template}") from None
        return items, tuple(sorted(dims.items()))

    def _trace(self, target: isa.Target, template: tuple, dims: tuple,
               shared: frozenset[str] = frozenset()) -> Specialization:
        version = self._version or isa.default_version(target)
        if version < target.min_ptx and self._validate:
            raise PtxVersionError(f"kernel {self.name}: {target.name} needs PTX ISA "
                                  f"{target.min_ptx[0]}.{target.min_ptx[1]}, got version={version}")
        env = dict(dims)
        trace = Trace(self.name, target, version, self._extern, self._validate, self._module)
        if self._module:
            with active(trace), _no_gc():
                _run_body(self.fn, (), template)
                trace.check_closed()
            module = ir.Module(trace.items)
            check_module(module, trace)
            launch = self._launch_for(target, self._launch.smem, module, {**env, **dict(template)})
            return Specialization(module, emit(module), target, version, launch, dims, template)
        # The function's own name is checked here, when it becomes the .entry
        # (a lambda may carry options to a test that never traces it).
        check_entry_name(self.name, False, f"kernel {self.name}")
        args = []
        specs = self._in_specs + self._out_specs
        for i, pname in enumerate(self._tensors):
            trace.params.append(ir.VarDecl("param", "u64", trace.new_symbol(pname)))
            spec = specs[i] if specs else None
            shape = () if spec is None else tuple(
                d if isinstance(d, int) else env.get(d, UnboundDim(d, self.name)) for d in spec.shape)
            args.append(TensorArg(pname, spec, shape, spec.dtype if spec else None, pname in shared, i))
        for ptype, pname in self._raw_params:
            trace.params.append(ir.VarDecl("param", ptype.name, trace.new_symbol(pname)))
        trace.cache["raw_params"] = {n: t for t, n in self._raw_params}
        with active(trace), _no_gc():
            _run_body(self.fn, args, template)
            trace.check_closed()
            if not _ends_in_exit(trace.body):
                emit_instruction("ret", (), ())
        smem = max(self._launch.smem, trace.smem_offset)
        module = _build_module(self, trace, target, version)
        check_module(module, trace)
        launch = self._launch_for(target, smem, module, {**env, **dict(template)})
        return Specialization(module, emit(module), target, version, launch, dims, template,
                              tuple(trace.tma))

    def _launch_for(self, target: isa.Target, smem: int, module: ir.Module,
                    env: dict[str, Any]) -> Launch:
        """The specialisation's launch: the grid for ``env`` (dims and
        template values), validated for ``target`` with the module's static
        shared memory."""
        grid, where = self._resolve_grid(env), self._grid_where(env)
        # validate=False reproduces a module as written (the transpiler's
        # round trip of PTX ptxas may reject): its declarations go unchecked.
        static = _static_shared_bytes(module) if self._validate else 0
        return validate_launch(grid, self._launch.block, self._launch.cluster, smem, static, target,
                               where=where)

    def _resolve_grid(self, env: dict[str, Any]) -> tuple[int, int, int]:
        if self._grid is None:  # one cluster (one block without a cluster)
            return self._launch.cluster
        if not callable(self._grid):
            return self._grid
        params = inspect.signature(self._grid).parameters
        missing = [p for p in params if p not in env]
        if missing:
            raise SpecError(f"kernel {self.name}: grid needs {missing}; pass "
                            f"{', '.join(m + '=...' for m in missing)} to .ptx()")
        return dim3(self._grid(**{p: env[p] for p in params}), "grid", self._grid_where(env))

    def _grid_where(self, env: dict[str, Any]) -> str:
        """What launch errors name: ``kernel k``, and for a grid function
        the values it was given (``kernel k (grid for N=4096)``)."""
        if not callable(self._grid):
            return f"kernel {self.name}"
        given = [f"{p}={env[p]!r}" for p in inspect.signature(self._grid).parameters if p in env]
        return f"kernel {self.name} (grid for {', '.join(given)})"


def _run_body(fn: Callable[..., Any], args: Sequence[Any], template: tuple) -> None:
    """Run the kernel body; a jaxptx error raised in it names the user's line."""
    try:
        fn(*args, **dict(template))
    except PtxError as e:
        raise at_user_line(e) from e.__cause__


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    # A trace allocates objects that all survive it: the cyclic collector's
    # passes over them cost ~10% of a large trace and free nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _ends_in_exit(body: list[ir.Statement]) -> bool:
    last = next((s for s in reversed(body) if not isinstance(s, ir.Comment)), None)
    return isinstance(last, ir.Instruction) and last.opcode in ("ret", "exit") and last.guard is None


def _signature(fn: Callable[..., Any], where: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    tensors, template = [], {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            tensors.append(p.name)
        elif p.kind is p.KEYWORD_ONLY:
            template[p.name] = p.default
        else:
            raise TraceError(f"{where}: *args/**kwargs are not allowed; tensors are positional "
                             f"parameters and template parameters keyword-only")
    return tuple(tensors), template


def _build_module(k: Kernel, trace: Trace, target: isa.Target, version: tuple[int, int]) -> ir.Module:
    directives = []
    if k._reqntid is not None:
        directives.append(_dim_directive("reqntid", k._reqntid))
    elif k.block != (1, 1, 1):
        directives.append(_dim_directive("maxntid", k.block))
    if k.cluster != (1, 1, 1):
        directives.append(_dim_directive("reqnctapercluster", k.cluster))
    directives.extend(ir.Directive.listing(n, *a) for n, a in k._raw_directives)
    shared = list(trace.shared)
    if trace.extern_smem is not None:
        shared.insert(0, ir.VarDecl("shared", "b8", trace.extern_smem, linkage=("extern",),
                                    align=1024, dims=(-1,)))
    func = ir.Function("entry", k.name, trace.params, linkage=("visible",), directives=directives,
                       body=[*trace.register_decls(), *trace.entry, *trace.body])
    header = [ir.Directive("version", (f"{version[0]}.{version[1]}",)),
              ir.Directive.listing("target", target.name, *k._target_options)]
    if k._address_size is not None:
        header.append(ir.Directive("address_size", (str(k._address_size),)))
    return ir.Module([*header, *trace.declarations, *shared, func])


def _dim_directive(name: str, dims: tuple[int, int, int]) -> ir.Directive:
    return ir.Directive.listing(name, *dims)


def _decoration_launch(where: str, arch: str, grid: Any, block: Any, cluster: Any, smem: Any,
                       reqntid: tuple[int, int, int] | None) -> Launch:
    """The launch as far as decoration knows it, checked now so a bad option
    fails where the kernel is defined. A grid function's grid is known only
    at trace; until then the smallest grid the cluster allows stands in, and
    it is the grid of a kernel given none. ``block`` defaults to ``reqntid``,
    and must equal it when both are given."""
    cluster = dim3(cluster, "cluster", where)
    block = dim3((reqntid or (1, 1, 1)) if block is None else block, "block", where)
    launch = Launch(cluster if grid is None or callable(grid) else grid, block, cluster, smem,
                    where=where)
    if reqntid is not None and block != reqntid:
        raise LaunchError(f"{where}: block = {block} differs from reqntid = {reqntid}; a launch "
                          "with another block than .reqntid fails (give one of them)")
    if arch != "auto":
        launch.check_target(arch)
    return launch


def _static_shared_bytes(module: ir.Module) -> int:
    """Bytes of the module's statically sized ``.shared`` variables (module
    scope and function bodies), each at its alignment; an ``.extern`` array
    is dynamic shared memory."""
    items = [*module.items, *(s for f in module.functions for s in ir.walk(f.body or []))]
    total = 0
    for item in items:
        if not (isinstance(item, ir.VarDecl) and item.space == "shared") or "extern" in item.linkage:
            continue
        element = TYPES[item.type].bits // 8 * (item.vector or 1)
        count = 1
        for d in item.dims:
            count *= max(d, 0)
        align = max(item.align or 1, element)
        total = -(-total // align) * align + element * count
    return total


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


"""``pyptx.kernel``: the ``@kernel`` decorator, making a jaxptx :class:`~jaxptx.Kernel`.

A ``jaxptx.pyptx`` kernel *is* a jaxptx kernel: ``.ptx()``, ``.module()``,
``.resources()``, ``.sass()``, a JAX primitive when called on arrays
(``jax.jit``, ``vmap``, ``shard_map``), the CPU emulator without a GPU.
The options are pyptx's; what differs:

* ``arch="auto"`` is resolved when the kernel is traced (the GPU present,
  else ``JAXPTX_ARCH``, else ``sm_90a``), not at decoration.
* ``extern_smem=True`` names the dynamic shared array ``global_smem`` (as
  pyptx). Without ``extern_smem``, as pyptx: ``smem`` above 48 KB carves
  every ``smem.alloc``/``smem.mbarrier`` from an extern array ``dyn_smem``
  (``.extern .shared .align 1024 .b8 dyn_smem[]``); so does a kernel whose
  static buffers come to more than 48 KB (CUDA's static limit), found by a
  first trace and traced again, the launch asking for the carved size as
  dynamic shared memory.
* A raw scalar param named like a symbolic dim of the specs (``("u32",
  "K")`` with ``Tile("M", "K", ...)``) takes that dim's size when the call
  does not pass it, as pyptx does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import ir, isa
from ..dsl import Kernel, Specialization, TensorArg, static_shared_bytes
from ..launch import Launch

__all__ = ["Kernel", "PyptxKernel", "TensorSpec", "kernel"]

#: The tensor parameter a kernel body receives (``A.tma_desc()``, ``A.ptr``...).
TensorSpec = TensorArg

_STATIC_SMEM_LIMIT = 48 * 1024


class _StaticSmemTooLarge(Exception):
    """A first trace's static shared buffers pass 48 KB: trace again with
    every buffer carved from ``dyn_smem`` (pyptx's rule)."""


class PyptxKernel(Kernel):
    """A jaxptx :class:`~jaxptx.Kernel` with pyptx's rules: a call fills raw
    params named after a symbolic dim from the arguments' shapes, and
    static shared buffers past 48 KB move to dynamic shared memory."""

    def trace_specialization(self, target: isa.Target, template: tuple, dims: tuple,
                             shared: frozenset[str] = frozenset()) -> Specialization:
        """:meth:`jaxptx.Kernel.trace_specialization`, traced again carving
        every buffer from ``dyn_smem`` when the static ones pass 48 KB."""
        try:
            return super().trace_specialization(target, template, dims, shared)
        except _StaticSmemTooLarge:
            pass
        # The same kernel, carving from `dyn_smem` for this trace only (a
        # smaller specialisation keeps its static buffers).
        dynamic = self.with_extern_smem("dyn_smem")
        return Kernel.trace_specialization(dynamic, target, template, dims, shared)

    def launch_for(self, target: isa.Target, smem: int, module: ir.Module, env: dict[str, Any]) -> Launch:
        """:meth:`jaxptx.Kernel.launch_for`, first refusing static shared
        buffers past CUDA's 48 KB static limit (the trace is redone)."""
        if self.extern_smem is None and self.validate and static_shared_bytes(module) > _STATIC_SMEM_LIMIT:
            raise _StaticSmemTooLarge()
        return super().launch_for(target, smem, module, env)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`jaxptx.Kernel.__call__`, a raw param named like a symbolic
        dim taking that dim's size from the arguments (pyptx's rule)."""
        names = {name for _, name in self.raw_params} - set(kwargs)
        specs = list(self.in_specs or ()) + list(self.out_specs or ())
        for spec, arg in zip(specs, args):
            shape = getattr(arg, "shape", None)
            if spec is None or shape is None or len(shape) != len(spec.shape):
                continue
            for dim, size in zip(spec.shape, shape):
                if isinstance(dim, str) and dim in names:
                    kwargs[dim] = int(size)
                    names.discard(dim)
        return super().__call__(*args, **kwargs)


def kernel(fn: Callable[..., Any] | None = None, *, arch: str = "sm_90a",
           version: tuple[int, int] | None = None, in_specs: Sequence[Any] | None = None,
           out_specs: Sequence[Any] | None = None, grid: Any = None, block: Any = None,
           cluster: Any = (1, 1, 1), smem: int = 0, raw_params: Sequence[tuple[str, str]] | None = None,
           extern_smem: bool | str = False, reqntid: Any = None,
           raw_directives: Sequence[tuple[str, tuple]] | None = None,
           **jaxptx_options: Any) -> Any:
    """pyptx's ``@kernel`` (bare or with options); returns a jaxptx ``Kernel``.

    Positional parameters of the function are its tensors (inputs then
    outputs), keyword-only ones template values. ``block`` defaults to
    ``reqntid``, else one thread (pyptx: one thread). Extra keywords are
    passed to jaxptx's :func:`jaxptx.kernel` (``batch=``, ``shardable=``...).
    """
    if extern_smem is True:
        extern_smem = "global_smem"
    elif not extern_smem and smem > _STATIC_SMEM_LIMIT:
        extern_smem = "dyn_smem"

    def build(f: Callable[..., Any]) -> Kernel:
        return PyptxKernel(f, arch=arch, version=version, in_specs=in_specs, out_specs=out_specs, grid=grid,
                      block=block, cluster=cluster, smem=smem, raw_params=raw_params,
                      extern_smem=extern_smem, reqntid=reqntid, raw_directives=raw_directives,
                      **jaxptx_options)

    return build(fn) if fn is not None else build

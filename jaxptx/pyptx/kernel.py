"""``pyptx.kernel``: the ``@kernel`` decorator, making a jaxptx :class:`~jaxptx.Kernel`.

A ``jaxptx.pyptx`` kernel *is* a jaxptx kernel: ``.ptx()``, ``.module()``,
``.resources()``, ``.sass()``, a JAX primitive when called on arrays
(``jax.jit``, ``vmap``, ``shard_map``), the CPU emulator without a GPU.
The options are pyptx's; what differs:

* ``arch="auto"`` is resolved when the kernel is traced (the GPU present,
  else ``JAXPTX_ARCH``, else ``sm_90a``), not at decoration.
* ``extern_smem=True`` names the dynamic shared array ``global_smem`` (as
  pyptx); ``smem`` above 48 KB without ``extern_smem`` carves every
  ``smem.alloc`` from an extern array ``dyn_smem`` (pyptx decides this
  after a first trace; we decide it from ``smem``).
* A raw scalar param named like a symbolic dim of the specs (``("u32",
  "K")`` with ``Tile("M", "K", ...)``) takes that dim's size when the call
  does not pass it, as pyptx does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..dsl._kernel import Kernel
from ..dsl._params import TensorArg

__all__ = ["Kernel", "PyptxKernel", "TensorSpec", "kernel"]

#: The tensor parameter a kernel body receives (``A.tma_desc()``, ``A.ptr``...).
TensorSpec = TensorArg

_STATIC_SMEM_LIMIT = 48 * 1024


class PyptxKernel(Kernel):
    """A jaxptx :class:`~jaxptx.Kernel` whose call fills raw params named
    after a symbolic dim from the arguments' shapes (pyptx's rule)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        names = {name for _, name in self._raw_params} - set(kwargs)
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

"""jaxptx kernels on PyTorch tensors (``pip install jaxptx[torch]``).

:func:`op` turns a kernel into a ``torch.library.custom_op``
(``torch.ops.jaxptx.<name>``) with a fake implementation, so it runs in
eager mode and inside ``torch.compile`` graphs (``fullgraph=True``, dynamic
shapes specialise per shape, as the kernel's PTX does):

* **CPU tensors** run on the emulator (``jaxptx.sim``), through JAX on the CPU;
* **CUDA tensors** launch on the GPU through the shim's CUDA handler, the
  one XLA calls (``jaxptx_launch_v2``), on torch's current stream, with the
  tensors' own memory; scratch memory comes from torch's allocator.

:func:`op` also takes a *function of JAX arrays* that calls kernels, which
is what the library's ops are (``jaxptx.torch.op(jaxptx.kernels.rms_norm)``):
a library op picks its kernel by shape and reshapes around the launch, so
there is no one kernel to hand over. The function runs as JAX runs it:
under ``jax.jit`` on the CPU for CPU tensors (the emulator for its
launches), and on JAX's CUDA backend for CUDA tensors (``jax[cuda13]``
needed; the tensors cross through DLPack, with a stream synchronisation
before and after). Its outputs' shapes come from ``jax.eval_shape``; it
returns an array or a tuple of arrays.

Outputs are new tensors (an ``in_place`` output is a new tensor holding the
updated input; the input itself is not changed). Shapes and dtypes are
checked against the kernel's ``in_specs`` with jaxptx's messages
(:class:`jaxptx.errors.SpecError`), on the tensors' own dtypes: a float64
or int64 tensor is refused where the kernel takes ``.f32`` or ``.s32``,
never narrowed on the way (a function op refuses the dtypes JAX would
narrow and leaves the rest to the function's own checks). Keyword arguments
(template values, raw scalar params, a function's keywords) are static, as
under ``jax.jit``. The operator has no autograd formula: use it where no
gradient flows through it.

``import jaxptx`` never imports torch; this module imports it on first use.

Example::

    import torch, jaxptx.torch
    from my_kernels import scale            # a jaxptx @kernel
    scale_op = jaxptx.torch.op(scale)
    y = scale_op(torch.ones(4, 128), factor=2.0)            # emulator
    f = torch.compile(lambda x: scale_op(x, factor=2.0) + 1, fullgraph=True)
    rms_norm = jaxptx.torch.op(jaxptx.kernels.rms_norm)     # a library op
    y = rms_norm(torch.randn(4, 128), torch.ones(128), eps=1e-5)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dsl import Kernel

__all__ = ["op", "call", "is_torch_call", "available"]

_OPS: dict[int, Any] = {}


def available() -> bool:
    """Whether torch imports."""
    try:
        import torch  # noqa: F401  (torch: optional, heavy)
    except ImportError:
        return False
    return True


def _import_torch() -> None:
    try:
        import torch  # noqa: F401  (torch: optional, heavy)
    except ImportError as e:
        raise ImportError("jaxptx.torch needs PyTorch: pip install 'jaxptx[torch]' "
                          "(a CPU build runs kernels on the emulator)") from e


def op(kernel: Kernel | Callable[..., Any], *, name: str | None = None) -> Any:
    """The custom operator of ``kernel``: ``op(*tensors, **keywords)``
    returns one tensor per ``out_specs`` entry (a tensor when there is one).

    Args:
        kernel: a jaxptx kernel with ``in_specs`` and ``out_specs``, or a
            function of JAX arrays that calls kernels, such as
            :func:`jaxptx.kernels.rms_norm` (module docstring), returning an
            array or a tuple of arrays.
        name: the operator's name in ``torch.ops.jaxptx`` (default: the
            kernel's or function's; a suffix keeps names unique).

    Returns:
        A :class:`jaxptx.torch._op.TorchOp`; its ``custom_op`` is the
        ``torch.library`` operator.

    Raises:
        ImportError: torch is not installed.
        SpecError: the kernel cannot be called on tensors (no ``out_specs``),
            or ``kernel`` is neither a kernel nor callable.

    Example::

        rms_norm = jaxptx.torch.op(jaxptx.kernels.rms_norm)
        y = rms_norm(x, w, eps=1e-6)          # x (..., N), w (N,) CPU or CUDA tensors
    """
    _import_torch()
    from ._op import TorchOp  # loads the FFI extension and the CUDA launch path (~0.3 s)

    if name is None and id(kernel) in _OPS and _OPS[id(kernel)].kernel is kernel:
        return _OPS[id(kernel)]
    made = TorchOp(kernel, name)
    if name is None:
        _OPS[id(kernel)] = made
    return made


def call(kernel: Kernel | Callable[..., Any], *tensors: Any, **kwargs: Any) -> Any:
    """``kernel(*tensors, **kwargs)`` on torch tensors, through :func:`op`
    (``kernel`` a kernel or a function of arrays calling kernels)."""
    return op(kernel)(*tensors, **kwargs)


def is_torch_call(args: tuple) -> bool:
    """Whether any of ``args`` is a torch tensor (checked without importing torch)."""
    return any(type(a).__module__.startswith("torch") and hasattr(a, "data_ptr") for a in args)

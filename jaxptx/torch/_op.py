"""A kernel as a ``torch.library.custom_op``: eager CPU and CUDA, and fake.

Each :class:`TorchOp` defines one operator ``jaxptx::<name>`` with the schema
``(Tensor[] inputs, str params) -> Tensor[]``: ``params`` carries the
kernel's keyword values (template values, raw scalar params) as a Python
literal, so the operator stays one node in a ``torch.compile`` graph
whatever they are. Shapes and dtypes of the outputs come from the kernel's
specs, through ``jax.eval_shape`` (the fake implementation), so they agree
with what a launch returns.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from typing import Any

import numpy as np

from .. import isa
from ..dsl import Kernel
from ..errors import SpecError
from . import _convert, _cuda

__all__ = ["TorchOp", "encode_params", "decode_params"]

_SCHEMA = "(Tensor[] inputs, str params) -> Tensor[]"
_NAMES: dict[str, int] = {}
_LOCK = threading.Lock()
# Keyword values that are not Python literals, by their repr (``@N`` keys).
_OPAQUE: dict[str, tuple[str, dict]] = {}


def encode_params(kwargs: dict[str, Any]) -> str:
    """The ``params`` string of a call's keywords: their sorted items as a
    Python literal, or ``@N``, a key to values kept in this process, when
    they are not literals (numpy scalars, dtypes)."""
    items = tuple(sorted(kwargs.items()))
    text = repr(items)
    try:
        if ast.literal_eval(text) == items:
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    with _LOCK:
        for key, (seen, _) in _OPAQUE.items():
            if seen == text:
                return key
        key = f"@{len(_OPAQUE)}"
        _OPAQUE[key] = (text, dict(kwargs))
    return key


def decode_params(params: str) -> dict[str, Any]:
    """The keywords of a ``params`` string (see :func:`encode_params`)."""
    if params.startswith("@"):
        if params not in _OPAQUE:
            raise SpecError(f"jaxptx.torch: params {params!r} were made by another process; "
                            "pass the kernel's keywords as Python literals")
        return dict(_OPAQUE[params][1])
    return dict(ast.literal_eval(params))


def _unique_name(kernel: Kernel, name: str | None) -> str:
    base = re.sub(r"\W", "_", name or kernel.name)
    with _LOCK:
        n = _NAMES.get(base, 0)
        _NAMES[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def _runs_on(target: Any, device: Any) -> bool:
    """Whether PTX for ``target`` runs on a device of target ``device``: an
    ``a`` target on that very device, an ``f`` target on its family, a plain
    one on it and every later device."""
    if target.suffix == "a":
        return target.sm == device.sm
    if target.suffix == "f":
        return target.sm // 10 == device.sm // 10 and target.sm <= device.sm
    return target.sm <= device.sm


def _types(tensors: list[Any]) -> tuple:
    return tuple((tuple(int(s) for s in t.shape), str(t.dtype)) for t in tensors)


class TorchOp:
    """A jaxptx kernel callable on torch tensors, as the custom operator
    :attr:`qualname` (see :func:`jaxptx.torch.op`).

    Attributes:
        kernel: the kernel.
        qualname: the operator's name, ``"jaxptx::<name>"``.
        custom_op: the ``torch.library`` operator (``torch.ops.jaxptx.<name>``).
    """

    def __init__(self, kernel: Kernel, name: str | None = None) -> None:
        import torch

        if not isinstance(kernel, Kernel):
            raise TypeError(f"jaxptx.torch.op: expected a jaxptx kernel, got {type(kernel).__name__}")
        if not kernel.out_specs:
            raise SpecError(f"jaxptx.torch.op: kernel {kernel.name} has no out_specs; a kernel "
                            "called on tensors needs in_specs and out_specs")
        self.kernel = kernel
        self.qualname = f"jaxptx::{_unique_name(kernel, name)}"
        # torch.compile calls it while tracing and records the result as a
        # constant (a pure function of static keywords).
        self._encode = torch.compiler.assume_constant_result(encode_params)
        self._jitted: dict[str, Any] = {}
        self._calls: dict[tuple, Any] = {}
        self.custom_op = torch.library.custom_op(self.qualname, self._run, mutates_args=(),
                                                 schema=_SCHEMA)
        self.custom_op.register_fake(self._fake)

    def __repr__(self) -> str:
        return f"<jaxptx.torch op {self.qualname} of {self.kernel!r}>"

    def __call__(self, *tensors: Any, **kwargs: Any) -> Any:
        """Run the kernel on ``tensors`` (one per ``in_specs`` entry, all on
        one device) with keyword values ``kwargs``; one tensor per
        ``out_specs`` entry (a tensor when there is one)."""
        outs = self.custom_op(list(tensors), self._encode(kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    # checks --------------------------------------------------------------------
    def _check(self, tensors: list[Any]) -> Any:
        """The one device of ``tensors``; SpecError for anything else."""
        where = f"kernel {self.kernel.name}"
        if not tensors:
            raise SpecError(f"{where}: jaxptx.torch needs at least one input tensor")
        devices = {str(t.device) for t in tensors}
        if len(devices) > 1:
            raise SpecError(f"{where}: the inputs are on different devices: {sorted(devices)}")
        for i, t in enumerate(tensors):
            try:
                _convert.numpy_dtype(t.dtype)
            except TypeError as e:
                raise SpecError(f"{where}: input {i}: {e}") from None
        return tensors[0].device

    # shapes (the fake implementation) ------------------------------------------
    def out_types(self, tensors: list[Any], params: str) -> list[tuple[tuple[int, ...], np.dtype]]:
        """``(shape, dtype)`` of each output for inputs like ``tensors``.

        Raises:
            SpecError: the inputs do not fit the kernel's ``in_specs``.
        """
        import jax

        self._check(tensors)
        key = ("types", params, _types(tensors))
        if key not in self._calls:
            structs = [jax.ShapeDtypeStruct(shape, _convert.numpy_dtype(t.dtype))
                       for (shape, _), t in zip(_types(tensors), tensors)]
            outs = jax.eval_shape(functools.partial(self.kernel, **decode_params(params)), *structs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            self._calls[key] = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
        return self._calls[key]

    def _fake(self, tensors: list[Any], params: str) -> list[Any]:
        return [tensors[0].new_empty(shape, dtype=_convert.torch_dtype(dtype))
                for shape, dtype in self.out_types(tensors, params)]

    # eager ---------------------------------------------------------------------
    def _run(self, tensors: list[Any], params: str) -> list[Any]:
        device = self._check(tensors)
        if device.type == "cpu":
            return self._run_cpu(tensors, params)
        if device.type == "cuda":
            return self._run_cuda(tensors, params, device)
        raise SpecError(f"kernel {self.kernel.name}: tensors on {device} are not supported "
                        "(CPU tensors run on the emulator, CUDA tensors on the GPU)")

    def _run_cpu(self, tensors: list[Any], params: str) -> list[Any]:
        import jax

        self.out_types(tensors, params)  # the spec checks, with jaxptx's messages
        if params not in self._jitted:
            self._jitted[params] = jax.jit(functools.partial(self.kernel, **decode_params(params)))
        cpu = jax.devices("cpu")[0]
        outs = self._jitted[params](*[jax.device_put(_convert.to_numpy(t), cpu) for t in tensors])
        outs = outs if isinstance(outs, tuple) else (outs,)
        return [_convert.from_numpy(np.asarray(o)) for o in outs]

    def cuda_call(self, tensors: list[Any], params: str) -> Any:
        """The kernel's CUDA custom call for inputs like ``tensors``
        (:class:`jaxptx.runtime.standin.CudaCall`), lowered once per shape."""
        import jax

        from ..runtime.standin import cuda_calls

        self.out_types(tensors, params)
        key = ("cuda", params, _types(tensors))
        if key not in self._calls:
            structs = [jax.ShapeDtypeStruct(shape, _convert.numpy_dtype(t.dtype))
                       for (shape, _), t in zip(_types(tensors), tensors)]
            fn = jax.jit(functools.partial(self.kernel, **decode_params(params)))
            calls = cuda_calls(fn.trace(*structs).lower(lowering_platforms=("cuda",)))
            if len(calls) != 1:
                raise SpecError(f"kernel {self.kernel.name}: expected one launch, the lowering "
                                f"has {len(calls)}")
            self._calls[key] = calls[0]
        return self._calls[key]

    def _run_cuda(self, tensors: list[Any], params: str, device: Any) -> list[Any]:
        import torch

        from ..runtime import arch_from_capability

        call = self.cuda_call(tensors, params)
        arch = arch_from_capability(*torch.cuda.get_device_capability(device))
        found = re.search(rb"^\s*\.target\s+(sm_\w+)", call["ptx"], re.MULTILINE)
        target = isa.parse_target(found.group(1).decode() if found else arch)
        if not _runs_on(target, isa.parse_target(arch)):
            hint = (f"set JAXPTX_ARCH={arch} or give the kernel an explicit arch"
                    if self.kernel.arch == "auto" else f"give the kernel arch='{arch}'")
            raise SpecError(f"kernel {self.kernel.name}: its PTX targets {target.name}, which "
                            f"the tensors' device {device} ({arch}) cannot run; {hint}")
        _cuda.register_image(call, arch)  # a cubin for the device itself, or PTX
        inputs = [t.contiguous() for t in tensors]
        outs = [torch.empty(shape, dtype=_convert.torch_dtype(dtype), device=device)
                for shape, dtype in call.outputs]
        in_ptrs = [t.data_ptr() for t in inputs]
        for j, i in call.aliases:  # an in-place output starts as a copy of its input
            outs[j] = inputs[i].clone()
            in_ptrs[i] = outs[j].data_ptr()
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device).cuda_stream
            _cuda.launch(call, in_ptrs, [o.data_ptr() for o in outs], stream,
                         _cuda.TorchScratch(device))
        return outs

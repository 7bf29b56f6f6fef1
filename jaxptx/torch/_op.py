"""A kernel, or a function of arrays calling kernels, as a
``torch.library.custom_op``: eager CPU and CUDA, and fake.

Each :class:`TorchOp` defines one operator ``jaxptx::<name>`` with the schema
``(Tensor[] inputs, str params) -> Tensor[]``: ``params`` carries the
kernel's keyword values (template values, raw scalar params) as a Python
literal, so the operator stays one node in a ``torch.compile`` graph
whatever they are. Shapes and dtypes of the outputs come from the kernel's
specs, through ``jax.eval_shape`` (the fake implementation), so they agree
with what a launch returns.

Inputs are checked before JAX sees them, since JAX (``jax_enable_x64`` off)
would quietly narrow float64 and int64 to 32 bits: a kernel op checks each
tensor's own dtype against ``in_specs``; a function op refuses a dtype JAX
would narrow.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import threading
from typing import Any

import numpy as np

from .. import isa
from ..dsl import Kernel, bind_specs
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


def _unique_name(name: str) -> str:
    base = re.sub(r"\W", "_", name)
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


def _input_names(target: Any) -> tuple[str, ...]:
    """The names of ``target``'s tensor inputs, for messages: a kernel's
    tensor parameters (as :mod:`jaxptx.jax` names them), a function's
    positional parameters (none when it takes ``*args``)."""
    if isinstance(target, Kernel):
        return tuple(target.tensors[:len(target.in_specs)])
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


class TorchOp:
    """A jaxptx kernel, or a function of JAX arrays that calls kernels (such
    as :func:`jaxptx.kernels.rms_norm`), callable on torch tensors as the
    custom operator :attr:`qualname` (see :func:`jaxptx.torch.op`).

    Attributes:
        kernel: the kernel, or the function.
        qualname: the operator's name, ``"jaxptx::<name>"``.
        custom_op: the ``torch.library`` operator (``torch.ops.jaxptx.<name>``).
    """

    def __init__(self, kernel: Any, name: str | None = None) -> None:
        import torch

        if isinstance(kernel, Kernel):
            if not kernel.out_specs:
                raise SpecError(f"jaxptx.torch.op: kernel {kernel.name} has no out_specs; a kernel "
                                "called on tensors needs in_specs and out_specs")
            own_name, self.where = kernel.name, f"kernel {kernel.name}"
        elif callable(kernel):
            own_name = getattr(kernel, "__name__", type(kernel).__name__)
            self.where = f"function {own_name}"
        else:
            raise SpecError(f"jaxptx.torch.op: expected a jaxptx kernel or a function of arrays "
                            f"calling kernels, got {type(kernel).__name__}")
        self.kernel = kernel
        self._names = _input_names(kernel)
        self.qualname = f"jaxptx::{_unique_name(name or own_name)}"
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
        """Run the kernel (or function) on ``tensors`` (one per input, all on
        one device) with keyword values ``kwargs``; one tensor per output (a
        tensor when there is one)."""
        outs = self.custom_op(list(tensors), self._encode(kwargs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    # checks --------------------------------------------------------------------
    def _check(self, tensors: list[Any]) -> Any:
        """The one device of ``tensors``; SpecError for anything else, and
        for a dtype the kernel's ``in_specs`` (or, for a function, JAX) would
        not take as it is."""
        where = self.where
        if not tensors:
            raise SpecError(f"{where}: jaxptx.torch needs at least one input tensor")
        devices = {str(t.device) for t in tensors}
        if len(devices) > 1:
            raise SpecError(f"{where}: the inputs are on different devices: {sorted(devices)}")
        dtypes = []
        for i, t in enumerate(tensors):
            try:
                dtypes.append(_convert.numpy_dtype(t.dtype))
            except SpecError as e:
                raise SpecError(f"{where}: input {i}: {e}") from None
        if isinstance(self.kernel, Kernel):
            self._check_specs(tensors, dtypes)
        else:
            self._check_widths(dtypes)
        return tensors[0].device

    def _check_specs(self, tensors: list[Any], dtypes: list[np.dtype]) -> None:
        """The tensors' own shapes and dtypes against ``in_specs`` (a count
        that differs is left to the kernel call's message)."""
        if len(tensors) != len(self.kernel.in_specs):
            return
        try:
            bind_specs(self.kernel.in_specs,
                       [(shape, d) for (shape, _), d in zip(_types(tensors), dtypes)], self._names)
        except SpecError as e:
            raise SpecError(f"{self.where}: {e}") from None

    def _check_widths(self, dtypes: list[np.dtype]) -> None:
        """No dtype JAX would narrow (float64, int64 and uint64 while
        ``jax_enable_x64`` is off) reaches a function."""
        import jax

        for i, dtype in enumerate(dtypes):
            kept = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
            if kept != dtype:
                arg = f"argument {self._names[i]!r}" if i < len(self._names) else f"input {i}"
                raise SpecError(f"{self.where}: {arg}: expected a dtype JAX keeps, got {dtype} "
                                f"(JAX would narrow it to {kept}: jax_enable_x64 is off); "
                                f"convert the tensor first")

    # shapes (the fake implementation) ------------------------------------------
    def out_types(self, tensors: list[Any], params: str) -> list[tuple[tuple[int, ...], np.dtype]]:
        """``(shape, dtype)`` of each output for inputs like ``tensors``.

        Raises:
            SpecError: the inputs do not fit the kernel's ``in_specs`` (or
                the function refuses them), or a function returns something
                other than an array or a tuple of arrays.
        """
        import jax

        self._check(tensors)
        key = ("types", params, _types(tensors))
        if key not in self._calls:
            structs = [jax.ShapeDtypeStruct(shape, _convert.numpy_dtype(t.dtype))
                       for (shape, _), t in zip(_types(tensors), tensors)]
            outs = self._outputs(jax.eval_shape(self._bound(params), *structs))
            self._calls[key] = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
        return self._calls[key]

    def _bound(self, params: str) -> Any:
        """The kernel or function with the call's keywords bound."""
        return functools.partial(self.kernel, **decode_params(params))

    def _outputs(self, outs: Any) -> tuple:
        """A call's results as a tuple of arrays."""
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        if not all(hasattr(o, "shape") and hasattr(o, "dtype") for o in outs):
            raise SpecError(f"{self.where}: expected an array or a tuple of arrays as the result, "
                            f"got {outs!r}")
        return outs

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
        raise SpecError(f"{self.where}: tensors on {device} are not supported "
                        "(CPU tensors run on the emulator, CUDA tensors on the GPU)")

    def _run_cpu(self, tensors: list[Any], params: str) -> list[Any]:
        import jax

        self.out_types(tensors, params)  # the spec checks, with jaxptx's messages
        cpu = jax.devices("cpu")[0]
        outs = self._jit(params)(*[jax.device_put(_convert.to_numpy(t), cpu) for t in tensors])
        return [_convert.from_numpy(np.asarray(o)) for o in self._outputs(outs)]

    def _jit(self, params: str) -> Any:
        """The bound kernel or function under ``jax.jit``, made once per ``params``."""
        import jax

        if params not in self._jitted:
            self._jitted[params] = jax.jit(self._bound(params))
        return self._jitted[params]

    def cuda_call(self, tensors: list[Any], params: str) -> Any:
        """The kernel's CUDA custom call for inputs like ``tensors``
        (:class:`jaxptx.runtime.CudaCall`), lowered once per shape.

        Raises:
            SpecError: a function op (it runs through JAX, not one call).
        """
        import jax

        from ..runtime import cuda_calls

        if not isinstance(self.kernel, Kernel):
            raise SpecError(f"{self.where}: a function op runs through JAX, not as one CUDA call")
        self.out_types(tensors, params)
        key = ("cuda", params, _types(tensors))
        if key not in self._calls:
            structs = [jax.ShapeDtypeStruct(shape, _convert.numpy_dtype(t.dtype))
                       for (shape, _), t in zip(_types(tensors), tensors)]
            calls = cuda_calls(jax.jit(self._bound(params)).trace(*structs).lower(
                lowering_platforms=("cuda",)))
            if len(calls) != 1:
                raise SpecError(f"kernel {self.kernel.name}: expected one launch, the lowering "
                                f"has {len(calls)}")
            self._calls[key] = calls[0]
        return self._calls[key]

    def _run_cuda(self, tensors: list[Any], params: str, device: Any) -> list[Any]:
        import torch

        from ..runtime import arch_from_capability

        if not isinstance(self.kernel, Kernel):
            return self._run_jax_cuda(tensors, params, device)
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

    def _run_jax_cuda(self, tensors: list[Any], params: str, device: Any) -> list[Any]:
        """A function op on CUDA tensors: JAX runs it on its CUDA backend, the
        tensors crossing through DLPack without a copy. torch's stream is
        synchronised before and JAX's results awaited after (one host sync a
        call: simple, and no stream can read unfinished data)."""
        import jax
        import torch

        try:
            jax.devices("cuda")
        except RuntimeError:
            raise SpecError(f"{self.where}: a function op runs CUDA tensors on JAX's CUDA backend, "
                            "which this jax lacks (pip install 'jax[cuda13]'); or make the op "
                            "of the kernel itself") from None
        self.out_types(tensors, params)
        torch.cuda.current_stream(device).synchronize()
        inputs = [t.contiguous() for t in tensors]
        outs = self._outputs(self._jit(params)(*[jax.dlpack.from_dlpack(t) for t in inputs]))
        jax.block_until_ready(outs)
        results = [torch.from_dlpack(o) for o in outs]
        # A custom op's outputs must not alias its inputs (JAX forwards an
        # input it returns unchanged).
        taken = {t.data_ptr() for t in inputs}
        return [r.clone() if r.data_ptr() in taken else r for r in results]
